"""`kdsl` (also `python -m kernel_dsl`): show a kernel's IR and generated source, check it with
the real TPU compiler, fuzz it against a PyTorch reference, run the demo."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

import torch

from . import dtypes
from .arg_check import did_you_mean
from .config import Config
from .errors import KernelError
from .ir_printer import print_ir
from .kernel_object import Kernel

_DTYPES = {name: t for t, name in dtypes.TORCH_TO_IR.items()}
_PARSE_SCALAR = {"int": int, "float": float}
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}

EXIT_USER = 2  # bad input (argparse's own usage errors exit 2 too)
EXIT_INTERNAL = 3  # a bug in kernel_dsl
REPORT = "report it with the command line and `kdsl --debug` output to the kernel_dsl maintainers"


class UsageError(Exception):
    """Bad command-line input: printed as `kdsl: error: <message> (<hint>)`, exit status 2."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


def load_kernel(spec: str) -> Kernel:
    """`package.module:name` or `path/to/file.py:name`."""
    k = _load(spec, _import_object)
    if not isinstance(k, Kernel):
        raise UsageError(f"{spec} is not a @kd.tpu_kernel function (got {type(k).__name__})",
                         "name a function decorated with @kd.tpu_kernel")
    return k


def _import_object(spec: str) -> Any:
    mod_name, _, attr = spec.partition(":")
    if mod_name.endswith(".py"):
        spec_ = importlib.util.spec_from_file_location("kdsl_user_module", mod_name)
        if spec_ is None or spec_.loader is None:
            raise UsageError(f"cannot load {mod_name}")
        module = importlib.util.module_from_spec(spec_)
        sys.modules["kdsl_user_module"] = module
        spec_.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    if not hasattr(module, attr):
        raise UsageError(f"{mod_name} has no `{attr}`", "check the name after the `:`")
    return getattr(module, attr)


def _load(spec: str, loader: Callable[[str], Any]) -> Any:
    """Runs `loader(spec)`; what goes wrong in the user's module is a user error."""
    mod_name, _, attr = spec.partition(":")
    if not attr or not mod_name:
        raise UsageError(f"expected MODULE:NAME or path/to/file.py:NAME, got {spec!r}")
    if mod_name.endswith(".py") and not os.path.isfile(mod_name):
        raise UsageError(f"no file {mod_name}", f"the path is relative to {os.getcwd()}")
    try:
        return loader(spec)
    except (UsageError, KernelError):
        raise
    except ModuleNotFoundError as e:
        if e.name and mod_name.startswith(e.name):
            raise UsageError(f"no module named {e.name!r}",
                             "check the name, or give path/to/file.py:NAME") from e
        raise UsageError(f"importing {mod_name} failed: {type(e).__name__}: {e}",
                         "fix the module; `kdsl --debug` shows the traceback") from e
    except ValueError as e:  # kernel_dsl.testing.load_object's own complaints
        raise UsageError(str(e)) from e
    except Exception as e:  # the user's module raised while being imported
        raise UsageError(f"importing {mod_name} failed: {type(e).__name__}: {e}",
                         "fix the module; `kdsl --debug` shows the traceback") from e


def _shape(text: str, name: str) -> torch.Tensor:
    dims, _, dt = text.partition(":")
    dt = dt or "f32"
    if dt not in _DTYPES:
        raise UsageError(f"--shapes {text!r}: unknown dtype {dt!r}",
                         f"{did_you_mean(dt, list(_DTYPES))}dtypes: {', '.join(_DTYPES)}")
    try:
        sizes = [int(d) for d in dims.split("x")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise UsageError(f"--shapes {text!r} for `{name}`: sizes must be positive ints",
                         "give one entry per tensor argument, e.g. --shapes 128x64:bf16 64")
    return torch.empty(sizes, dtype=_DTYPES[dt], device="meta")


def _scalar(kind: str, name: str, text: str) -> Any:
    try:
        return _BOOLS[text.lower()] if kind == "bool" else _PARSE_SCALAR[kind](text)
    except (KeyError, ValueError):
        raise UsageError(f"--arg {name}={text!r}: `{name}` takes a {kind} value",
                         "bools are true/false/1/0" if kind == "bool" else None) from None


def parse_shapes(kernel: Kernel, shapes: list[str], scalars: list[str]) -> tuple[Any, ...]:
    """`128x64:bf16` per tensor parameter in order; `name=value` for scalar parameters."""
    tensors = [p.name for p, kind in zip(kernel.params, kernel.kinds) if kind == "Tensor"]
    others = [p.name for p, kind in zip(kernel.params, kernel.kinds) if kind != "Tensor"]
    if len(shapes) != len(tensors):
        raise UsageError(f"{len(shapes)} --shapes entries for {len(tensors)} tensor arguments "
                         f"({', '.join(tensors)})", "give one entry per tensor, e.g. 128x64:bf16")
    given: dict[str, str] = {}
    for item in scalars:
        name, eq, value = item.partition("=")
        if not eq or name not in others:
            raise UsageError(f"--arg {item!r}: {'no scalar argument named ' + repr(name) if eq else 'no ='}",
                             f"use NAME=VALUE for one of: {', '.join(others) or '(none)'}")
        given[name] = value
    it = iter(shapes)
    args: list[Any] = []
    for p, kind in zip(kernel.params, kernel.kinds):
        if kind == "Tensor":
            args.append(_shape(next(it), p.name))
        elif p.name in given:
            args.append(_scalar(kind, p.name, given[p.name]))
        elif p.default is not p.empty:
            args.append(p.default)
        else:
            raise UsageError(f"no value for scalar argument `{p.name}`", f"give --arg {p.name}=VALUE")
    return tuple(args)


def _config(text: str | None) -> Config | None:
    return Config.from_json(text) if text else None


def _seconds(text: str, flag: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        value = math.nan
    if not value > 0:  # NaN too
        raise UsageError(f"{flag} {text!r} is not a positive number of seconds", f"e.g. {flag} 120s")
    return value


def cmd_show(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    config = _config(ns.config)
    out = []  # all of it first: an error prints nothing but its line
    if ns.what in ("ir", "all"):
        out.append(print_ir(k.ir(*args)))
    if ns.what in ("source", "all"):
        out.append(k.source(*args, backend=ns.backend, config=config, target=ns.target))
    if ns.what == "configs":
        out.append(repr(k.configs(*args, backend=ns.backend, target=ns.target)))
    print("\n".join(out))
    return 0


def cmd_check(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    config = _config(ns.config)
    targets = ns.targets.split(",") if ns.targets is not None else None
    report = k.check(*args, targets=targets, config=config, timeout=ns.timeout,
                     measure_vmem=not ns.no_vmem)
    print(report.to_json() if ns.json else report.table())
    return 0 if report.ok else 1


def cmd_autotune(ns: argparse.Namespace) -> int:
    k = load_kernel(ns.kernel)
    args = parse_shapes(k, ns.shapes, ns.arg)
    budget = _seconds(ns.budget, "--budget")
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        if not ns.json:
            print(f"[{time.monotonic() - t0:6.1f}s / {budget:.0f}s] {msg}", file=sys.stderr,
                  flush=True)

    res = k.autotune(*args, target=ns.target, budget=budget, strategy=ns.strategy,
                     backend=ns.backend, use_cache=not ns.no_cache, progress=progress,
                     evaluator=ns.evaluator)
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
            raise UsageError(f"--dim {item!r}", "use NAME=LO:HI, NAME=A,B,C or NAME=SIZE") from None
    return dims


def cmd_fuzz(ns: argparse.Namespace) -> int:
    """Fuzzes a kernel against a PyTorch reference: progress bar on stderr, summary table (or
    the failing case with its reproduction snippet) on stdout; exit status 1 on a failure."""
    try:
        from . import testing  # hypothesis (the `test` extra): imported only for this command
    except ImportError as e:
        raise UsageError(f"kdsl fuzz needs hypothesis ({e})", "pip install 'kernel-dsl[test]'") from None

    k = _load(ns.kernel, testing.load_object)
    reference = _load(ns.reference, testing.load_object)
    if not isinstance(k, Kernel):
        raise UsageError(f"{ns.kernel} is not a @kd.tpu_kernel function (got {type(k).__name__})",
                         "name a function decorated with @kd.tpu_kernel")
    try:
        if ns.replay:
            try:
                case = testing.Case.from_json(ns.replay)
            except (ValueError, TypeError, KeyError) as e:
                raise UsageError(f"--replay {ns.replay!r} is not a case ({type(e).__name__}: {e})",
                                 "copy the JSON after `--replay` from a failure message") from e
            result = testing.replay(k, reference, ns.signature, case)
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
    except ValueError as e:  # kernel_dsl.testing's checks of the arguments
        raise UsageError(str(e)) from e
    print(result.table())
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from .examples.demo import main as demo_main

    return demo_main()


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 ok, 1 the check/tune/fuzz found a failure, 2 bad input (one
    `kdsl: error: ...` line; `--debug` adds the traceback), 3 a bug in kernel_dsl."""
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the Python traceback of an error")
    ap = argparse.ArgumentParser(prog="kdsl", description=__doc__, parents=[debug])
    sub = ap.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", parents=[debug], help="print a kernel's tile IR and generated source")
    show.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    show.add_argument("--shapes", nargs="+", default=[], help="per tensor argument: 128x64[:bf16]")
    show.add_argument("--arg", action="append", default=[], help="scalar argument: name=value")
    show.add_argument("--backend", default=None, help="pallas (default), nki or triton")
    show.add_argument("--target", default=None)
    show.add_argument("--config", default=None, help='JSON, e.g. \'{"block_sizes": [128, 128, 128]}\'')
    show.add_argument("--what", choices=("all", "ir", "source", "configs"), default="all")
    show.set_defaults(fn=cmd_show)
    check = sub.add_parser("check", parents=[debug], help="compile for real TPU targets (no TPU needed)")
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
    tune = sub.add_parser("autotune", parents=[debug], help="search block sizes (offline for TPU targets)")
    tune.add_argument("kernel", help="MODULE:KERNEL or path/to/file.py:KERNEL")
    tune.add_argument("--shapes", nargs="+", default=[], help="per tensor argument: 128x64[:bf16]")
    tune.add_argument("--arg", action="append", default=[], help="scalar argument: name=value")
    tune.add_argument("--target", default="cpu", help="tpu-v4 ... tpu-v7x (model) or cpu (interpret)")
    tune.add_argument("--budget", default="60s", help="wall-clock budget, e.g. 120s")
    tune.add_argument("--strategy", default="auto", help="auto, exhaustive, pattern or random")
    tune.add_argument("--backend", default=None)
    tune.add_argument("--evaluator", default=None, choices=["model", "schedule"],
                      help="TPU targets: the analytical model (default) or 'schedule', which "
                      "re-prices the best-modelled configs from the compiler's own VLIW schedule "
                      "(v4, v5e, v5p; one extra compile, ~5-20 s, per re-priced config)")
    tune.add_argument("--top", type=int, default=10, help="rows of the table")
    tune.add_argument("--no-cache", action="store_true", help="evaluate even if cached")
    tune.add_argument("--plot", default=None, help="write a picture of the search (PNG)")
    tune.add_argument("--json", action="store_true")
    tune.set_defaults(fn=cmd_autotune)
    fz = sub.add_parser("fuzz", parents=[debug],
                        help="fuzz a kernel against a PyTorch reference (kernel_dsl.testing)")
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
    demo = sub.add_parser("demo", parents=[debug],
                          help="run a DSL matmul on CPU, check it, show its IR and source")
    demo.set_defaults(fn=cmd_demo)
    ns = ap.parse_args(argv)
    callers = _caller_files()
    try:
        return int(ns.fn(ns))
    except (UsageError, KernelError) as e:
        if getattr(ns, "debug", False):
            traceback.print_exc()
        print(f"kdsl: error: {_one_line(e, callers)}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("kdsl: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (anything else is kernel_dsl's fault, not the user's)
        if getattr(ns, "debug", False):
            traceback.print_exc()
        print(f"kdsl: internal error: {type(e).__name__}: {e}\n"
              f"  this is a bug in kernel_dsl, not in your input; {REPORT}", file=sys.stderr)
        return EXIT_INTERNAL


def _caller_files() -> set[str]:
    """Files of the frames that called `main` (runpy, a console script, a test): a KernelError
    located there is about the command line, not about the user's kernel, so its place is
    left out."""
    out, frame = set(), sys._getframe(2)
    while frame is not None:
        out.add(frame.f_code.co_filename)
        frame = frame.f_back
    return out


def _one_line(e: Exception, callers: set[str]) -> str:
    """`file:line: message (hint)` on one line; the place only where it is the user's code."""
    if isinstance(e, KernelError):
        where = f"{e.loc}: " if e.loc is not None and e.loc.file not in callers else ""
        text, hint = f"{where}{type(e).__name__}: {e.message}", e.hint
    else:
        text, hint = str(e), getattr(e, "hint", None)
    text = " ".join(text.split())
    return f"{text} ({' '.join(hint.split())})" if hint else text


if __name__ == "__main__":
    sys.exit(main())
