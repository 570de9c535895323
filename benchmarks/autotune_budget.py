"""Autotune budget against wall time, with a planted hanging candidate, on both evaluators.

    python benchmarks/autotune_budget.py [--json benchmarks/results/autotune_budget.json]

CPU ("interpret") evaluator: `add_where` (64, 512) f32 on the Pallas CPU path, where the
candidate with blocks [8, 128] sleeps forever inside its worker process. TPU-model evaluator:
the same kernel (256, 512) for tpu-v6e, where the TPU compile of every config with first block
size 16 hangs (the model is rigged to rank those first), so the budget must cut through hung
compiles. The contract: wall time <= budget + one candidate timeout, the hanging candidate
never wins. A fresh cache per run (nothing answered from the cache).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import dsl_kernels  # noqa: E402

import kernel_dsl as kd  # noqa: E402
from kernel_dsl import lowering  # noqa: E402
from kernel_dsl.autotune import cost_model, tuner  # noqa: E402
from kernel_dsl.autotune.cache import TuningCache  # noqa: E402
from kernel_dsl.lowering.pallas import PallasBackend  # noqa: E402

_HANG = "import os, time\nif os.environ.get('{env}'):\n    time.sleep(3600)\n"


class HangOnCpu(PallasBackend):
    name = "bench_hang_cpu"

    def render(self, ir, config, target):  # type: ignore[no-untyped-def]
        gen = super().render(ir, config, target)
        if list(config.block_sizes) == [8, 128]:
            gen.source = _HANG.format(env="KD_CANDIDATE_WORKER") + gen.source
        return gen


class HangOnTpuCompile(PallasBackend):
    name = "bench_hang_compile"

    def render(self, ir, config, target):  # type: ignore[no-untyped-def]
        gen = super().render(ir, config, target)
        if target != "cpu" and config.block_sizes[0] == 16:
            gen.source = _HANG.format(env="KD_CHECK_WORKER") + gen.source
        return gen


def _rigged(real: Any) -> Any:
    def estimate(ir, cfg, tgt):  # type: ignore[no-untyped-def]
        est = real(ir, cfg, tgt)
        if cfg.block_sizes[0] == 16:
            est.seconds *= 1e-3  # ranked first: the compile phase meets the hang at once
        return est
    return estimate


def one(backend: Any, args: tuple[Any, ...], target: str, budget: float, timeout: float) -> dict[str, Any]:
    lowering.register(backend)
    try:
        k = kd.Kernel(dsl_kernels.add_where.fn, backend=backend.name)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            res = k.autotune(*args, target=target, budget=budget, timeout=timeout,
                             backend=backend.name, strategy="exhaustive",
                             cache=TuningCache(d, kd.__version__))
            wall = time.monotonic() - t0
    finally:
        lowering.unregister(backend.name)
    return {"evaluator": res.evaluator, "target": target, "budget_s": budget, "timeout_s": timeout,
            "wall_s": round(wall, 1), "bound_s": budget + timeout, "within": wall <= budget + timeout,
            "evaluated": res.evaluations, "failures": res.failures(),
            "best": None if res.best is None else list(res.best.block_sizes)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ns = ap.parse_args()
    rows = []
    cpu_args = (torch.randn(64, 512), torch.randn(64, 512))
    for budget, timeout in ((10, 5), (30, 10), (60, 10)):
        rows.append(one(HangOnCpu(), cpu_args, "cpu", budget, timeout))
        print(rows[-1], flush=True)
    tuner.estimate = _rigged(cost_model.estimate)
    tpu_args = (torch.empty(256, 512), torch.empty(256, 512))
    for budget, timeout in ((30, 10), (60, 20)):
        rows.append(one(HangOnTpuCompile(), tpu_args, "tpu-v6e", budget, timeout))
        print(rows[-1], flush=True)
    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "runs": rows}
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)
    print(f"{'evaluator':<10}{'budget':>8}{'timeout':>9}{'wall':>8}{'bound':>7}  best")
    for r in rows:
        print(f"{r['evaluator']:<10}{r['budget_s']:>7}s{r['timeout_s']:>8}s{r['wall_s']:>7}s"
              f"{r['bound_s']:>6}s  {r['best']}  {r['failures']}")


if __name__ == "__main__":
    main()
