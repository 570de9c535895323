"""`kdsl` (also `python -m kernel_dsl`): show a kernel's IR and generated source, check it with
the real TPU compiler, fuzz it against a PyTorch reference, run the demo."""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Any

import torch

from . import dtypes
from .config import Config
from .errors import KernelError
from .ir_printer import print_ir
from .kernel_object import Kernel

_DTYPES = {name: t for t, name in dtypes.TORCH_TO_IR.items()}


def load_kernel(spec: str) -> Kernel:
    """`package.module:name` or `path/to/file.py:name`."""
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"kdsl: expected MODULE:KERNEL, got {spec!r}")
    if mod_name.endswith(".py"):
        spec_ = importlib.util.spec_from_file_location("kdsl_user_module", mod_name)
        if spec_ is None or spec_.loader is None:
            raise SystemExit(f"kdsl: cannot load {mod_name}")
        module = importlib.util.module_from_spec(spec_)
        sys.modules["kdsl_user_module"] = module
        spec_.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    k = getattr(module, attr, None)
    if not isinstance(k, Kernel):
        raise SystemExit(f"kdsl: {spec} is not a @kd.tpu_kernel function")
    return k


def parse_shapes(kernel: Kernel, shapes: list[str], scalars: list[str]) -> tuple[Any, ...]:
    """`128x64:bf16` per tensor parameter in order; `name=value` for scalar parameters."""
    given = dict(s.split("=", 1) for s in scalars)
    it = iter(shapes)
    args: list[Any] = []
    for p, kind in zip(kernel.params, kernel.kinds):
        if kind == "Tensor":
            try:
                text = next(it)
            except StopIteration:
                raise SystemExit(f"kdsl: no --shapes entry for tensor `{p.name}`") from None
            dims, _, dt = text.partition(":")
            if (dt or "f32") not in _DTYPES:
                raise SystemExit(f"kdsl: unknown dtype {dt!r}; use one of {', '.join(_DTYPES)}")
            args.append(torch.empty([int(d) for d in dims.split("x")], dtype=_DTYPES[dt or "f32"],
                                    device="meta"))
        elif p.name in given:
            args.append({"int": int, "float": float, "bool": lambda v: v.lower() in ("1", "true")}
                        [kind](given[p.name]))
        elif p.default is not p.empty:
            args.append(p.default)
        else:
            raise SystemExit(f"kdsl: give scalar `{p.name}` with --arg {p.name}=VALUE")
    return tuple(args)


def cmd_show(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    config = Config.from_json(ns.config) if ns.config else None
    if ns.what in ("ir", "all"):
        print(print_ir(k.ir(*args)))
    if ns.what in ("source", "all"):
        print(k.source(*args, backend=ns.backend, config=config, target=ns.target))
    if ns.what == "configs":
        print(k.configs(*args, backend=ns.backend))
    return 0


def cmd_check(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    config = Config.from_json(ns.config) if ns.config else None
    targets = ns.targets.split(",") if ns.targets else None
    report = k.check(*args, targets=targets, config=config, timeout=ns.timeout,
                     measure_vmem=not ns.no_vmem)
    print(report.to_json() if ns.json else report.table())
    return 0 if report.ok else 1


def cmd_autotune(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    budget = float(ns.budget.rstrip("s"))
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        if not ns.json:
            print(f"[{time.monotonic() - t0:6.1f}s / {budget:.0f}s] {msg}", file=sys.stderr,
                  flush=True)

    res = k.autotune(*args, target=ns.target, budget=budget, strategy=ns.strategy,
                     backend=ns.backend, use_cache=not ns.no_cache, progress=progress)
    print(res.to_json() if ns.json else res.table(top=ns.top))
    if ns.plot:
        from .plot import plot_search

        plot_search(res, ns.plot)
        print(f"wrote {ns.plot}", file=sys.stderr)
    return 0 if res.best is not None else 1


def _fuzz_dims(items: list[str]) -> dict[str, Any]:
    """`m=1:512` (a range), `d=8,16,64` (these sizes) or `b=2` (one size), per --dim."""
    dims: dict[str, Any] = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            if ":" in text:
                lo, hi = text.split(":")
                dims[name] = (int(lo), int(hi))
            elif "," in text:
                dims[name] = [int(v) for v in text.split(",")]
            else:
                dims[name] = int(text)
        except ValueError:
            raise SystemExit(f"kdsl: --dim {item!r}: use NAME=LO:HI, NAME=A,B,C or NAME=SIZE") from None
    return dims


def cmd_fuzz(ns: argparse.Namespace) -> int:
    """Fuzzes a kernel against a PyTorch reference: progress bar on stderr, summary table (or
    the failing case with its reproduction snippet) on stdout; exit status 1 on a failure."""
    try:
        from . import testing  # hypothesis (the `test` extra): imported only for this command
    except ImportError as e:
        raise SystemExit(f"kdsl fuzz needs hypothesis ({e}): pip install 'kernel-dsl[test]'") from None

    try:
        k = testing.load_object(ns.kernel)
        reference = testing.load_object(ns.reference)
    except (ValueError, ImportError) as e:
        raise SystemExit(f"kdsl: {e}") from None
    if not isinstance(k, Kernel):
        raise SystemExit(f"kdsl: {ns.kernel} is not a @kd.tpu_kernel function")
    try:
        if ns.replay:
            result = testing.replay(k, reference, ns.signature, testing.Case.from_json(ns.replay))
        else:
            configs: Any = int(ns.configs) if ns.configs.isdigit() else ns.configs
            profile = testing.active(ns.profile)
            total = ns.max_examples or profile.max_examples
            bar = None if ns.quiet else testing.ProgressBar(total)
            try:
                result = testing.fuzz(
                    k, reference, ns.signature, dtypes=tuple(ns.dtypes.split(",")),
                    dims=_fuzz_dims(ns.dim), configs=configs,
                    backends=tuple(ns.backends.split(",")) if ns.backends else None,
                    values=tuple(ns.values.split(",")), max_examples=ns.max_examples,
                    seed=ns.seed, profile=profile, time_budget=ns.time_budget, progress=bar)
            finally:
                if bar is not None:
                    bar.close()
    except AssertionError as e:
        print(e)
        return 1
    except ValueError as e:
        raise SystemExit(f"kdsl: {e}") from None
    print(result.table())
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from .examples.demo import main as demo_main

    return demo_main()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kdsl", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print a kernel's tile IR and generated source")
    show.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    show.add_argument("--shapes", nargs="+", default=[], help="per tensor argument: 128x64[:bf16]")
    show.add_argument("--arg", action="append", default=[], help="scalar argument: name=value")
    show.add_argument("--backend", default=None, help="pallas (default), nki or triton")
    show.add_argument("--target", default=None)
    show.add_argument("--config", default=None, help='JSON, e.g. \'{"block_sizes": [128, 128, 128]}\'')
    show.add_argument("--what", choices=("all", "ir", "source", "configs"), default="all")
    show.set_defaults(fn=cmd_show)
    check = sub.add_parser("check", help="compile for real TPU targets (no TPU needed)")
    check.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    check.add_argument("--shapes", nargs="+", default=[], help="per tensor argument: 128x64[:bf16]")
    check.add_argument("--arg", action="append", default=[], help="scalar argument: name=value")
    check.add_argument("--targets", default=None,
                       help="comma-separated, default all: tpu-v4,tpu-v5e,tpu-v5p,tpu-v6e,tpu-v7x")
    check.add_argument("--config", default=None, help="JSON; default: each target's default")
    check.add_argument("--timeout", type=float, default=300.0, help="seconds per compile")
    check.add_argument("--no-vmem", action="store_true", help="skip measuring VMEM (faster)")
    check.add_argument("--json", action="store_true")
    check.set_defaults(fn=cmd_check)
    tune = sub.add_parser("autotune", help="search block sizes (offline for TPU targets)")
    tune.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    tune.add_argument("--shapes", nargs="+", default=[], help="per tensor argument: 128x64[:bf16]")
    tune.add_argument("--arg", action="append", default=[], help="scalar argument: name=value")
    tune.add_argument("--target", default="cpu", help="tpu-v4 ... tpu-v7x (model) or cpu (interpret)")
    tune.add_argument("--budget", default="60s", help="wall-clock budget, e.g. 120s")
    tune.add_argument("--strategy", default="auto", help="auto, exhaustive, pattern or random")
    tune.add_argument("--backend", default=None)
    tune.add_argument("--top", type=int, default=10, help="rows of the table")
    tune.add_argument("--no-cache", action="store_true", help="evaluate even if cached")
    tune.add_argument("--plot", default=None, help="write a picture of the search (PNG)")
    tune.add_argument("--json", action="store_true")
    tune.set_defaults(fn=cmd_autotune)
    fz = sub.add_parser("fuzz", help="fuzz a kernel against a PyTorch reference (kernel_dsl.testing)")
    fz.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    fz.add_argument("--reference", required=True, help="MODULE:FN or path/to/file.py:FN (same arguments)")
    fz.add_argument("--signature", required=True,
                    help='each argument\'s dims, shared names equal: "x[m,k], y[k,n], causal=False|True"')
    fz.add_argument("--dtypes", default="f32,bf16,f16", help="comma-separated (default f32,bf16,f16)")
    fz.add_argument("--backends", default=None, help="comma-separated (default: every registered one)")
    fz.add_argument("--dim", action="append", default=[],
                    help="sizes of a dim: NAME=LO:HI, NAME=A,B,C or NAME=SIZE (default 1:512)")
    fz.add_argument("--values", default="normal,large", help="of normal,large,special")
    fz.add_argument("--configs", default="all", help="all, default or N (the default and N-1 others)")
    fz.add_argument("--max-examples", type=int, default=None, help="default: the profile's")
    fz.add_argument("--seed", type=int, default=None, help="default: the profile's")
    fz.add_argument("--profile", choices=("ci", "long"), default=None,
                    help="default: $KD_FUZZ_PROFILE, else ci")
    fz.add_argument("--time-budget", type=float, default=None, help="seconds (default: the profile's)")
    fz.add_argument("--replay", default=None, help="run only this case (JSON from a failure message)")
    fz.add_argument("--quiet", action="store_true", help="no progress bar")
    fz.set_defaults(fn=cmd_fuzz)
    demo = sub.add_parser("demo", help="run a DSL matmul on CPU, check it, show its IR and source")
    demo.set_defaults(fn=cmd_demo)
    ns = ap.parse_args(argv)
    try:
        return int(ns.fn(ns))
    except KernelError as e:
        print(f"kdsl: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
