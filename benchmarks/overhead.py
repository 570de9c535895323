"""Eager-call overhead and first-call latency of DSL kernels on this machine's CPU path.

    python benchmarks/overhead.py [--repeats 5] [--calls 3000] [--json out.json]

Ratios (a library call over its kernel; a user kernel through torch.ops over its fast path) come
from paired runs: the two calls alternate, one timing each, so the VM's slow spells hit both
alike (`paired_ratio`); the median over repeats, with its [min - max].

Overhead, per backend's CPU path, (64, 128) f32: the median wall time of a cached `kernel(x, y)`
call minus that of the backend's compiled runner called directly on the same tensors; for Pallas
also minus the generated JAX function called on JAX arrays (waiting for the result). Each figure
is the median over `--calls` calls (fewer for the slow NKI/Triton interpreters); `--repeats`
such medians give the spread (min-max). Also timed: the same call through the torch custom op
(the route under torch.compile, and for autograd or tensor subclasses). First-call latency is
first_call.py's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import dsl_kernels  # noqa: E402

import kernel_dsl as kd  # noqa: E402


def median_us(f: Callable[[], Any], calls: int) -> float:
    for _ in range(min(500, calls)):
        f()
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def paired_ratio(fa: Callable[[], Any], fb: Callable[[], Any], calls: int, repeats: int) -> dict[str, float]:
    """Median time of `fa` over that of `fb`, the two called in turns (a, b, a, b, ...), so that
    a slow spell of this shared VM hits both alike; the median over repeats [min - max]."""
    ratios = []
    for _ in range(repeats):
        for _ in range(min(300, calls)):
            fa()
            fb()
        ta, tb = [], []
        for _ in range(calls):
            t0 = time.perf_counter()
            fa()
            t1 = time.perf_counter()
            fb()
            t2 = time.perf_counter()
            ta.append(t1 - t0)
            tb.append(t2 - t1)
        ratios.append(statistics.median(ta) / statistics.median(tb))
    return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
            "max": round(max(ratios), 3)}


def overhead(repeats: int, calls: int) -> dict[str, Any]:
    """Per backend: the cached kernel call vs its compiled runner called directly (same torch
    tensors); for Pallas also vs the generated JAX function on JAX arrays."""
    from kernel_dsl.lowering.pallas.runner import to_numpy

    k = dsl_kernels.add_where
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    out: dict[str, Any] = {"shape": [64, 128], "dtype": "float32", "kernel": "add_where",
                           "repeats": repeats, "calls_per_repeat": calls, "backends": {}}
    for backend in kd.lowering.names():
        n = calls if backend == "pallas" else max(50, calls // 20)  # interpreters are slow
        with kd.backend(backend):
            k(x, y)
            runner = k.compiled(backend, (x, y))
            rows: dict[str, list[float]] = {"runner": [], "kernel": [], "op": []}
            op = k._ops.op  # the portable op, running this backend
            for _ in range(repeats):
                rows["runner"].append(median_us(lambda: runner(x, y), n))
                rows["kernel"].append(median_us(lambda: k(x, y), n))
                rows["op"].append(median_us(lambda: op(x, y), n))
        res = {f"{name}_us": _stats(v) for name, v in rows.items()}
        res["overhead_vs_runner_us"] = _stats([a - b for a, b in zip(rows["kernel"], rows["runner"])])
        if backend == "pallas":
            import jax

            jitted = runner.jitted
            jx, jy = (jax.numpy.asarray(to_numpy(t)) for t in (x, y))
            direct = [median_us(lambda: jitted(jx, jy)[0].block_until_ready(), n)
                      for _ in range(repeats)]
            res["jax_direct_us"] = _stats(direct)
            res["overhead_vs_jax_us"] = _stats([a - b for a, b in zip(rows["kernel"], direct)])
            res["overhead_via_op_vs_jax_us"] = _stats([a - b for a, b in zip(rows["op"], direct)])
            res["op_over_fast_path"] = paired_ratio(lambda: op(x, y), lambda: k(x, y), n, repeats)
        out["backends"][backend] = res
    return out


def library(repeats: int, calls: int) -> dict[str, Any]:
    """The library matmul (64x96 @ 96x80 f32, Pallas CPU path) against the DSL kernel it
    launches, called directly with the same (3-D) views: plain eager calls skip the dispatcher
    (kernels/base.py `call`); the op itself is timed too (autograd, compile and vmap take it)."""
    import importlib

    mm = importlib.import_module("kernel_dsl.kernels.matmul")
    x, w = torch.randn(64, 96), torch.randn(96, 80)
    d = mm._dummy(x.device)
    x3, w3 = x.reshape(1, 64, 96), w.reshape(1, 96, 80)
    fns = {"library_call": lambda: kd.kernels.matmul(x, w),
           "library_op": lambda: torch.ops.kernel_dsl.matmul(x, w, None, "none", None),
           "raw_kernel": lambda: mm.matmul_kernel(x3, w3, d, d, 0, False, False, False, False, 0)}
    rows: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):  # interleaved, so that a slow spell of the machine hits every row
        for k, f in fns.items():
            rows[k].append(median_us(f, calls))
    out: dict[str, Any] = {k + "_us": _stats(v) for k, v in rows.items()}
    out["call_over_kernel"] = paired_ratio(fns["library_call"], fns["raw_kernel"], calls, repeats)
    out["op_over_kernel"] = paired_ratio(fns["library_op"], fns["raw_kernel"], calls, repeats)
    return out


def _stats(v: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(v), 2), "min": round(min(v), 2),
            "max": round(max(v), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--json", default=None)
    ns = ap.parse_args()
    torch.manual_seed(0)
    res: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
                   f"torch {torch.__version__}, jax {__import__('jax').__version__}",
        "overhead": overhead(ns.repeats, ns.calls),
        "library": library(ns.repeats, ns.calls),
    }
    pallas = res["overhead"]["backends"]["pallas"]
    res["op_over_fast_path"] = pallas.pop("op_over_fast_path")
    print(f"machine: {res['machine']}")
    print("eager call, (64,128) f32 add_where, median over calls [min-max over repeats] (us):")
    for backend, o in res["overhead"]["backends"].items():
        for key, st in o.items():
            print(f"  {backend:<7} {key:<26} {st['median']:10.1f}  [{st['min']:.1f} - {st['max']:.1f}]")
    for key, st in res["library"].items():
        if isinstance(st, dict):
            print(f"  library {key:<26} {st['median']:10.1f}  [{st['min']:.1f} - {st['max']:.1f}]")
    lib, op = res["library"]["call_over_kernel"], res["op_over_fast_path"]
    lop = res["library"]["op_over_kernel"]
    print(f"paired ratios, median [min - max] over repeats: library call / its kernel "
          f"{lib['median']}x [{lib['min']} - {lib['max']}]; library op through torch.ops / the "
          f"kernel {lop['median']}x [{lop['min']} - {lop['max']}]; user kernel through torch.ops "
          f"/ its fast path {op['median']}x [{op['min']} - {op['max']}]")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
