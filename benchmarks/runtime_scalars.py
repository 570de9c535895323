"""A cached call with a new float argument against one with the value it had before.

    python benchmarks/runtime_scalars.py [--repeats 7] [--calls 2000] [--json out.json]

A float argument is a runtime scalar (kernel_dsl/runtime_scalars.py): its value rides into the
kernel as a hidden [1, 1] f32 input, so a new value reuses the build. The ratio comes from paired
runs on this machine's CPU path (Pallas interpret mode, (64, 128) f32, `x * s + 1 / s`): calls
with a value never passed before and calls with the old value alternate, one timing each, so the
VM's slow spells hit both alike; the ratio of the two medians per repeat, then the median over
repeats [min - max]. For contrast: the same kernel with `kd.specialize(s)` (the behaviour of
every float before), where each new value traces and compiles again.
"""
from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import statistics
import time
from typing import Any

import torch

import kernel_dsl as kd


@kd.kernel(static_shapes=True)
def axpb(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    inv = 1.0 / s
    for t in kd.tile(x.shape):
        out[t] = x[t] * s + inv
    return out


@kd.kernel(static_shapes=True)
def axpb_specialized(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    s = kd.specialize(s)
    inv = 1.0 / s
    for t in kd.tile(x.shape):
        out[t] = x[t] * s + inv
    return out


def paired(x: torch.Tensor, calls: int, repeats: int) -> dict[str, Any]:
    fresh = (0.5 + i * 1e-6 for i in itertools.count(1))  # every call a value not seen before
    old = 0.5
    axpb(x, old)  # built once
    ratios, new_us, old_us = [], [], []
    for _ in range(repeats):
        for _ in range(min(300, calls)):  # warm up both
            axpb(x, next(fresh))
            axpb(x, old)
        ta, tb = [], []
        for _ in range(calls):
            s = next(fresh)
            t0 = time.perf_counter()
            axpb(x, s)
            t1 = time.perf_counter()
            axpb(x, old)
            t2 = time.perf_counter()
            ta.append(t1 - t0)
            tb.append(t2 - t1)
        new_us.append(statistics.median(ta) * 1e6)
        old_us.append(statistics.median(tb) * 1e6)
        ratios.append(new_us[-1] / old_us[-1])
    return {"ratio_median": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
            "new_value_us": round(statistics.median(new_us), 1),
            "old_value_us": round(statistics.median(old_us), 1),
            "traces": axpb.stats["traces"], "compiles": axpb.stats["compiles"]}


def specialized(x: torch.Tensor, n: int) -> dict[str, Any]:
    axpb_specialized(x, 0.5)
    base = 1.0 + random.random()  # values no earlier run built (JAX's disk caches keep those)
    ts = []
    for i in range(n):
        t = time.perf_counter()
        axpb_specialized(x, base + i)
        ts.append(time.perf_counter() - t)
    return {"new_value_ms": round(statistics.median(ts) * 1e3, 1),
            "compiles": axpb_specialized.stats["compiles"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--specialized", type=int, default=5, help="new values for the contrast")
    ap.add_argument("--json", help="also write the figures here")
    ns = ap.parse_args()
    x = torch.randn(64, 128)
    res = {"machine": platform.machine(), "torch": torch.__version__, "shape": [64, 128],
           "backend": "pallas (interpret)", "calls_per_repeat": ns.calls, "repeats": ns.repeats,
           "runtime_scalar": paired(x, ns.calls, ns.repeats),
           "specialized": specialized(x, ns.specialized)}
    r, sp = res["runtime_scalar"], res["specialized"]
    print(f"new float vs old float, cached call: {r['ratio_median']}x "
          f"[{r['ratio_min']} - {r['ratio_max']}] ({r['new_value_us']} us vs {r['old_value_us']} us; "
          f"{r['traces']} trace, {r['compiles']} build for {ns.repeats * (ns.calls + 300) * 2 + 1} calls)")
    print(f"with kd.specialize: a new value costs {sp['new_value_ms']} ms (a trace and a build each)")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
