"""Offline autotuning of the library kernels for TPU targets: writes `configs/<target>.json`.

    python -m kernel_dsl.kernels.tune --target tpu-v6e [--budget 40] [--only flash_attention_fwd]
    python -m kernel_dsl.kernels.tune --refresh-vmem [--target tpu-v6e]   # VMEM figures only
    python -m kernel_dsl.kernels.tune --causal-only [--target tpu-v6e]    # causal attention only
    python -m kernel_dsl.kernels.tune --no-causal [--only matmul_kernel]   # all but causal attention
    python -m kernel_dsl.kernels.tune --reverify flash_attention_bwd_dq   # after a kernel edit
    python -m kernel_dsl.kernels.tune --causal-only --attention-shape 64,8192   # one shape

For each library kernel at the common shapes below, `kernel.autotune(..., target=...)` (the
"model" evaluator: the analytical cost model ranks the config space, the VMEM estimate prunes,
libtpu's compile-only target must accept the winner, whose output is then checked against a
reference config on CPU) picks a config; the winners go to the target's JSON file with their
modelled time and measured VMEM. `tuned.py` loads them at run time. Runs without a TPU.
Tuning state goes to a fresh cache directory, so the user's autotuning cache is not touched.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from typing import Any

import torch

from kernel_dsl.autotune.cache import TuningCache
from kernel_dsl.lowering.pallas.targets import TPU_TARGETS
from kernel_dsl.version import __version__

from . import KERNELS
from .tuned import CONFIG_DIR, dynamic_loops, entry_args

E, BF, I32 = torch.empty, torch.bfloat16, torch.int32
SHIPPED_TARGETS = ("tpu-v4", "tpu-v5e", "tpu-v6e", "tpu-v5p", "tpu-v7x")


def _attention(bh: int, s: int, d: int) -> list[tuple[str, tuple[Any, ...]]]:
    # qpos [1, 1], as `flash_attention` passes it without a mask: the shipped entry's shapes
    # are then the library call's own (with [S, 1] it ran a nearest-shape entry)
    q, st, qp = E(bh, s, d, dtype=BF), E(bh, s, 1), E(1, 1, dtype=I32)
    sc = (d ** -0.5, False, 0)
    return [("flash_attention_fwd", (q, q, q, qp, *sc)),
            ("flash_attention_bwd_dkv", (q, q, q, q, st, st, qp, *sc)),
            ("flash_attention_bwd_dq", (q, q, q, q, q, st, qp, *sc))]


def _causal_attention(bh: int, s: int, d: int) -> list[tuple[str, tuple[Any, ...]]]:
    """Top-left causal with block skipping (the bucketed and the training case): configs of
    their own, since a skipping kernel favours other blocks."""
    q, st, qp = E(bh, s, d, dtype=BF), E(bh, s, 1), E(s, 1, dtype=I32)
    sc = (d ** -0.5, True, 0, s, True)
    return [("flash_attention_fwd", (q, q, q, qp, *sc)),
            ("flash_attention_bwd_dkv", (q, q, q, q, st, st, qp, *sc)),
            ("flash_attention_bwd_dq", (q, q, q, q, q, st, qp, *sc))]


def _matmul(m: int, k: int, n: int) -> list[tuple[str, tuple[Any, ...]]]:
    d = E(1, 1)
    return [("matmul_kernel", (E(1, m, k, dtype=BF), E(1, k, n, dtype=BF), d, d, 0, False, False,
                               False, False, 0))]


def _rows(m: int, n: int) -> list[tuple[str, tuple[Any, ...]]]:
    x, w, st = E(m, n, dtype=BF), E(1, n, dtype=BF), E(m, 1)
    return [("softmax_fwd", (x,)), ("softmax_bwd", (x, x)),
            ("rms_norm_fwd", (x, w, 1e-6, True)), ("rms_norm_bwd_dx", (x, w, x, st, True)),
            ("rms_norm_bwd_dw", (x, x, st)),
            ("layer_norm_fwd", (x, w, w, 1e-5, True, True)),
            ("layer_norm_bwd_dx", (x, w, x, st, st, True)), ("layer_norm_bwd_dwb", (x, x, st, st)),
            ("column_sum", (x,))]


def problems() -> list[tuple[str, tuple[Any, ...]]]:
    """The common shapes (bf16): attention [B*Hkv, S, 128] for S = 512..8192 and B*Hkv = 8 and
    64 (the benchmark's shapes fold to 64), square and MLP-sized matmuls, rows of 4096 and 8192
    hidden units."""
    out: list[tuple[str, tuple[Any, ...]]] = []
    for bh, s in ((8, 512), (8, 2048), (8, 8192), (64, 512), (64, 2048), (64, 8192)):
        out += _attention(bh, s, 128)
    for bh, s in ((8, 2048), (8, 8192), (64, 2048), (64, 8192)):
        out += _causal_attention(bh, s, 128)
    for m, k, n in ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 4096, 14336)):
        out += _matmul(m, k, n)
    for m, n in ((8192, 4096), (4096, 8192)):
        out += _rows(m, n)
    return out


def tune_target(target: str, budget: float, only: set[str] | None, log: Any,
                causal_only: bool = False, no_causal: bool = False, top_k: int = 4,
                timeout: float = 120.0, found: Any = None,
                attention_shapes: set[tuple[int, int]] | None = None,
                first_shapes: set[tuple[int, ...]] | None = None) -> list[dict[str, Any]]:
    """The winners of `target`'s problems; `found(entry)` is called on each as it is found.
    `attention_shapes` / `first_shapes`: only the problems whose first input is of these
    [B*Hkv, S] (attention) / these whole shapes (any kernel)."""
    entries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = TuningCache(tmp, version=__version__)
        for name, args in problems():
            if only and name not in only:
                continue
            if attention_shapes is not None and (not name.startswith("flash_attention")
                                                 or tuple(args[0].shape[:2]) not in attention_shapes):
                continue
            if first_shapes is not None and tuple(args[0].shape) not in first_shapes:
                continue
            kernel = KERNELS[name]
            ir = kernel.ir(*args)
            if (causal_only and not dynamic_loops(ir)) or (no_causal and dynamic_loops(ir)):
                continue
            t0 = time.time()
            res = kernel.autotune(*args, target=target, budget=budget, cache=cache, use_cache=False,
                                  top_k=top_k, timeout=timeout)
            best = res.best_candidate
            shapes = [list(p.shape) for p in ir.inputs]
            log(f"{target} {name} {shapes}: {res.best!r} "
                f"({'-' if best is None else f'{best.seconds:.3g} s model'}, {time.time() - t0:.0f} s"
                f"{f', skipped {res.failures()}' if res.failures() else ''})")
            if res.best is None or best is None:
                continue
            vmem = best.vmem_used
            if vmem is None:  # the tuner measures its winner's VMEM only within the budget
                vmem = kernel.check(*args, targets=[target], config=res.best).entries[0].vmem_used
            entries.append({"kernel": name, "shapes": shapes, "dtypes": [p.dtype for p in ir.inputs],
                            "dynamic_loops": dynamic_loops(ir),
                            "scalars": [a for a in args if not isinstance(a, torch.Tensor)],
                            "config": json.loads(res.best.to_json()), "model_s": best.seconds,
                            "utilization": best.utilization, "vmem_used": vmem,
                            "verified": res.verified, "libtpu": libtpu_version()})
            if found is not None:
                found(entries[-1])
    return entries


def libtpu_version() -> str:
    """The libtpu whose compiler measured a config's VMEM (figures move between releases)."""
    return importlib.metadata.version("libtpu")


def refresh_vmem(target: str, log: Any) -> str:
    """Re-measures the VMEM of the shipped configs (after a change to how it is measured),
    without re-tuning: one batch of compiles; the configs themselves are untouched."""
    from kernel_dsl.config import Config
    from kernel_dsl.lowering.pallas.check import check

    path = os.path.join(CONFIG_DIR, f"{target}.json")
    with open(path) as f:
        data = json.load(f)
    jobs = []
    for e in data["entries"]:
        kernel = KERNELS[e["kernel"]]
        args = entry_args(kernel, e)
        ir = kernel.ir(*args)
        jobs.append(_job(kernel, args, ir, target, Config.from_json(json.dumps(e["config"]))))
    for e, r in zip(data["entries"], check(jobs, timeout=600.0, measure_vmem=True)):
        if not r.ok:
            raise RuntimeError(f"{target} {e['kernel']} {e['shapes']}: the shipped config no longer "
                               f"compiles: {r.message[:300]}")
        if r.vmem_used != e["vmem_used"]:
            log(f"{target} {e['kernel']} {e['shapes']}: VMEM {e['vmem_used']} -> {r.vmem_used}")
        e["vmem_used"] = r.vmem_used
        e["libtpu"] = libtpu_version()
    return _write_file(path, data)


def _job(kernel: Any, args: tuple[Any, ...], ir: Any, target: str, cfg: Any) -> Any:
    """The libtpu compile job of `kernel` at `args` (traced to `ir`) under `cfg`."""
    from kernel_dsl.lowering.pallas.check import Job

    gen = kernel.generated(*args, backend="pallas", target=target, config=cfg)
    return Job(gen, [(p.shape, p.dtype) for p in ir.inputs], ir.loc)


def reverify(target: str, name: str, log: Any, timeout: float = 600.0,
             shapes: set[tuple[int, ...]] | None = None) -> str:
    """Re-verifies the shipped configs of kernel `name` after an edit that keeps its block
    structure (an input or output added, a changed body), without re-tuning. For each of
    `problems()` of that kernel, the shipped entry of the same first input shape and
    `dynamic_loops` gives the config (whatever the entry's other shapes: the edit may have
    changed them); the config is compiled for the target (measuring VMEM), checked on CPU on a
    reduced problem against a reference config and priced by the cost model, as the tuner
    does, and its entry is replaced by one under the problem's key. A config that no longer
    compiles or disagrees raises: re-tune that shape (`--only`)."""
    from kernel_dsl.autotune.cost_model import estimate
    from kernel_dsl.autotune.isolated import CandidateRunner
    from kernel_dsl.autotune.tuner import verify_on_cpu
    from kernel_dsl.config import Config
    from kernel_dsl.lowering.pallas.check import check
    from kernel_dsl.lowering.pallas.targets import TARGETS

    path = os.path.join(CONFIG_DIR, f"{target}.json")
    with open(path) as f:
        data = json.load(f)
    kernel = KERNELS[name]
    old = {(json.dumps(e["shapes"][0]), bool(e.get("dynamic_loops", False))): e
           for e in data["entries"] if e["kernel"] == name}
    todo = []  # (problem args, its IR, the old entry, the config)
    for kname, args in problems():
        if kname != name:
            continue
        if shapes is not None and tuple(args[0].shape[:2]) not in shapes:
            continue  # --attention-shape: only these [B*Hkv, S]
        ir = kernel.ir(*args)
        e = old.get((json.dumps(list(ir.inputs[0].shape)), dynamic_loops(ir)))
        if e is not None:
            todo.append((args, ir, e, Config.from_json(json.dumps(e["config"]))))
    jobs = [_job(kernel, args, ir, target, cfg) for args, ir, _, cfg in todo]
    new = []
    with CandidateRunner() as runner:
        for (args, ir, e, cfg), r in zip(todo, check(jobs, timeout=timeout, measure_vmem=True)):
            where = f"{target} {name} {[list(p.shape) for p in ir.inputs]} {cfg!r}"
            if not r.ok:
                raise RuntimeError(f"{where}: no longer compiles: {r.message[:300]}")
            o = verify_on_cpu(runner, kernel, ir, args, "pallas", cfg, timeout, lambda: timeout)
            if o.status != "ok":
                raise RuntimeError(f"{where}: the CPU check says {o.status}: {o.message[:300]}")
            est = estimate(ir, cfg, TARGETS[target])
            log(f"{where}: model {e['model_s']:.3g} -> {est.seconds:.3g} s, "
                f"VMEM {e['vmem_used']} -> {r.vmem_used}")
            new.append({**e, "shapes": [list(p.shape) for p in ir.inputs],
                        "dtypes": [p.dtype for p in ir.inputs],
                        "scalars": [a for a in args if not isinstance(a, torch.Tensor)],
                        "model_s": est.seconds, "utilization": est.utilization(TARGETS[target]),
                        "vmem_used": r.vmem_used, "libtpu": libtpu_version(),
                        "verified": "compiled for the target; output checked on CPU, reduced problem"})
    replaced = {id(e) for _, _, e, _ in todo}
    data["entries"] = sorted([e for e in data["entries"] if id(e) not in replaced] + new, key=_order)
    return _write_file(path, data)


def write(target: str, entries: list[dict[str, Any]], budget: float, merge: bool) -> str:
    path = os.path.join(CONFIG_DIR, f"{target}.json")
    if merge and os.path.exists(path):
        with open(path) as f:
            old = json.load(f).get("entries", [])
        keys = {_key(e) for e in entries}
        entries = [e for e in old if _key(e) not in keys] + entries
    data = {"target": target, "version": __version__,
            "command": f"python -m kernel_dsl.kernels.tune --target {target} --budget {budget:g}",
            "evaluator": "model: analytical cost model + libtpu compile-only check + CPU output check",
            "entries": sorted(entries, key=_order)}
    os.makedirs(CONFIG_DIR, exist_ok=True)
    return _write_file(path, data)


def _order(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["kernel"], e["shapes"], bool(e.get("dynamic_loops", False)))


def _key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["kernel"], json.dumps(e["shapes"]), json.dumps(e["dtypes"]),
            bool(e.get("dynamic_loops", False)))


def _write_file(path: str, data: dict[str, Any]) -> str:
    tmp = path + ".tmp"
    head = json.dumps({k: v for k, v in data.items() if k != "entries"}, indent=1)[:-2]
    rows = ",\n  ".join(json.dumps(e, sort_keys=True) for e in data["entries"])
    with open(tmp, "w") as f:  # one entry per line: readable diffs when configs are re-tuned
        f.write(f'{head},\n "entries": [\n  {rows}\n ]\n}}\n')
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel_dsl.kernels.tune", description=__doc__)
    ap.add_argument("--target", action="append", choices=TPU_TARGETS,
                    help="TPU target (repeatable); default: every TPU target")
    ap.add_argument("--budget", type=float, default=40.0, help="seconds per kernel and shape")
    ap.add_argument("--only", action="append", help="tune only these kernels (repeatable)")
    ap.add_argument("--causal-only", action="store_true",
                    help="tune only the block-skipping causal attention problems (merged in)")
    ap.add_argument("--no-causal", action="store_true",
                    help="tune all but the block-skipping causal attention problems (merged in: "
                         "the causal entries stay as they are)")
    ap.add_argument("--top-k", type=int, default=4,
                    help="candidates compiled per batch (the winner's VMEM is then measured: "
                         "several compiles, within the budget)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per candidate compile, and per CPU check run")
    ap.add_argument("--refresh-vmem", action="store_true",
                    help="re-measure the shipped configs' VMEM only (no tuning)")
    ap.add_argument("--reverify", metavar="KERNEL",
                    help="re-verify KERNEL's shipped configs after an edit that keeps its blocks "
                         "(compile, CPU check, model; the entries take the new arguments' key)")
    ap.add_argument("--attention-shape", action="append", metavar="BH,S",
                    help="tune (or --reverify) only the attention problems of this [B*Hkv, S] "
                         "(repeatable)")
    ap.add_argument("--first-shape", action="append", metavar="D0,D1,...",
                    help="tune only the problems whose first input has this shape (repeatable; "
                         "e.g. 1,1024,1024 for matmul 1024^3)")
    a = ap.parse_args(argv)
    firsts = ({tuple(int(v) for v in x.split(",")) for x in a.first_shape}
              if a.first_shape else None)
    shapes = ({tuple(int(v) for v in x.split(",")) for x in a.attention_shape}
              if a.attention_shape else None)
    if a.reverify:
        for target in a.target or SHIPPED_TARGETS:
            print(reverify(target, a.reverify, lambda msg: print(msg, file=sys.stderr, flush=True),
                           shapes=shapes))
        return 0
    if a.refresh_vmem:
        for target in a.target or SHIPPED_TARGETS:
            print(refresh_vmem(target, lambda msg: print(msg, file=sys.stderr, flush=True)))
        return 0
    if a.causal_only and a.no_causal:
        ap.error("--causal-only and --no-causal exclude each other")
    only = set(a.only) if a.only else None
    known = {tuple(args[0].shape[:2]) for name, args in problems() if name.startswith("flash_attention")}
    if shapes is not None and not shapes <= known:
        ap.error(f"--attention-shape {sorted(shapes - known)}: no such attention problem "
                 f"(the tuned [B*Hkv, S] are {sorted(known)})")
    firsts_known = {tuple(args[0].shape) for _, args in problems()}
    if firsts is not None and not firsts <= firsts_known:
        ap.error(f"--first-shape {sorted(firsts - firsts_known)}: no problem's first input has it")
    merge = (only is not None or a.causal_only or a.no_causal or shapes is not None
             or firsts is not None)
    for target in a.target or SHIPPED_TARGETS:
        # merged runs write each winner as it is found: a run cut short (hours at 4096-blocks on
        # a small machine) keeps what it finished; a full run replaces the file at its end
        entries = tune_target(target, a.budget, only,
                              lambda msg: print(msg, file=sys.stderr, flush=True), a.causal_only,
                              a.no_causal, a.top_k, a.timeout,
                              (lambda e, t=target: write(t, [e], a.budget, True)) if merge else None,
                              shapes, firsts)
        print(write(target, entries, a.budget, merge=merge))
    return 0


if __name__ == "__main__":
    sys.exit(main())
