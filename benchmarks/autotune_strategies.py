"""How fast each search strategy finds a good config, on spaces small enough to search whole.

    python benchmarks/autotune_strategies.py [--seeds 10] [--out benchmarks/autotune_strategies.md]

Objective: the analytical TPU model (autotune/cost_model.py, VMEM-pruned) — cheap, so the true
best is known from exhaustive search. For each (kernel, target) problem and strategy, over
`--seeds` seeds (a seed changes the random order and the pattern search's restarts):
- evaluations to reach within 5% of the best;
- error at budget: after 10 / 25 evaluations, how much slower the best config found so far is
  than the true best (the top-1 pick; top-K picks are no better than top-1 under the model).
All figures are counts of model evaluations, not wall time: they transfer to expensive
evaluators (a real device) where each evaluation costs seconds.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from dsl_kernels import attention, matmul, softmax_two_pass  # noqa: E402

from kernel_dsl import lowering  # noqa: E402
from kernel_dsl.autotune import cost_model, search  # noqa: E402
from kernel_dsl.lowering.pallas.targets import tpu_target  # noqa: E402

E, BF = torch.empty, torch.bfloat16
PROBLEMS = [
    ("matmul bf16 4096^3", matmul, (E(4096, 4096, dtype=BF), E(4096, 4096, dtype=BF))),
    ("matmul bf16 1024x8192x512", matmul, (E(1024, 8192, dtype=BF), E(8192, 512, dtype=BF))),
    ("softmax_two_pass bf16 4096x16384", softmax_two_pass, (E(4096, 16384, dtype=BF),)),
    ("attention bf16 4x16x4096x128", attention, (E(4, 16, 4096, 128, dtype=BF),) * 3 + (True,)),
]
TARGETS = ["tpu-v5e", "tpu-v6e", "tpu-v7x"]


def objective_for(kernel, args, target):  # type: ignore[no-untyped-def]
    be = lowering.get("pallas")
    ir = kernel.ir(*args)
    tgt = tpu_target(target)

    def f(cfg):  # type: ignore[no-untyped-def]
        gen = be.render(ir, cfg, target)
        if be.estimate_vmem(gen) > tgt.vmem_bytes:
            return math.inf
        return cost_model.estimate(ir, cfg, tgt).seconds

    return ir, be.config_space(ir, target), be.default_config(ir, target), f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "autotune_strategies.md"))
    ns = ap.parse_args()
    rows = []
    for name, kernel, args in PROBLEMS:
        for target in TARGETS:
            _, space, default, f = objective_for(kernel, args, target)
            values = {c: f(c) for c in space}
            best = min(values.values())
            for strat in ("pattern", "random"):
                to5, err10, err25 = [], [], []
                for seed in range(ns.seeds):
                    seen: list[float] = []
                    for _, v in search.STRATEGIES[strat](space, default, lambda c: values[c], 1e9,
                                                         seed=seed):
                        seen.append(v)
                    run_best = [min(seen[:i + 1]) for i in range(len(seen))]
                    to5.append(next(i + 1 for i, v in enumerate(run_best) if v <= 1.05 * best))
                    for n, acc in ((10, err10), (25, err25)):
                        acc.append(run_best[min(n, len(run_best)) - 1] / best - 1)
                rows.append(f"| {name} | {target} | {len(space)} | {strat} | "
                            f"{statistics.median(to5):.0f} ({min(to5)}-{max(to5)}) | "
                            f"{statistics.median(err10):.1%} | {statistics.median(err25):.1%} |")
                print(rows[-1], flush=True)
    text = "\n".join([
        "# Autotuning: search strategy efficiency (analytical TPU model)",
        "",
        f"Command: `python benchmarks/autotune_strategies.py --seeds {ns.seeds}`. Counts are "
        "model evaluations (exhaustive search = the space size); median over seeds, "
        "(min-max). Error = slowdown of the best config found vs the true best.",
        "",
        "| problem | target | space | strategy | evals to within 5% | error @10 | error @25 |",
        "|---|---|---|---|---|---|---|",
        *rows, "",
    ])
    with open(ns.out, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
