"""Offline TPU figures: each kernel autotuned per TPU generation with the analytical model, its
winner compiled by the real compiler (libtpu compile-only targets) for the VMEM it uses.

    python benchmarks/offline_tpu.py [--budget 90] [--targets tpu-v5e,...] [--json out.json]
                                     [--plots benchmarks/plots] [--only matmul ...]

`--only` re-tunes the problems whose name contains one of the given strings and merges their
rows into the saved results (the other rows stay those of their own run).

Modelled, not measured: time and % of peak come from autotune/cost_model.py (FLOPs with MXU
padding, HBM bytes of the grid's block sequence, per-step overhead, roofline). VMEM is the
compiler's own figure. Also writes one roofline plot per target (needs matplotlib).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _results import write_json  # noqa: E402
from dsl_kernels import attention, layer_norm, matmul, softmax_two_pass  # noqa: E402

from kernel_dsl.autotune import cost_model  # noqa: E402
from kernel_dsl.lowering.pallas.targets import TARGETS, tpu_target  # noqa: E402

E, BF = torch.empty, torch.bfloat16
PROBLEMS: list[tuple[str, Any, tuple[Any, ...]]] = [
    ("matmul bf16 4096^3", matmul, (E(4096, 4096, dtype=BF), E(4096, 4096, dtype=BF))),
    ("matmul bf16 8192^3", matmul, (E(8192, 8192, dtype=BF), E(8192, 8192, dtype=BF))),
    ("flash attention fwd bf16 B2 H16 S4096 D128 causal", attention,
     (E(2, 16, 4096, 128, dtype=BF),) * 3 + (True,)),
    ("softmax bf16 8192x8192 (online, 2 passes)", softmax_two_pass, (E(8192, 8192, dtype=BF),)),
    ("layer_norm bf16 8192x4096", layer_norm, (E(8192, 4096, dtype=BF), E(4096, dtype=BF),
                                                E(4096, dtype=BF), 1e-5)),
]


def _pct_peak(name: str, args: tuple[Any, ...], est: Any, tgt: Any) -> float:
    """% of peak from the useful FLOPs: for causal attention only the unmasked pairs,
    4*D*S(S+1)/2 per head, not the masked triangle the kernel still computes."""
    flops = est.flops
    if "causal" in name:
        b, h, s, d = args[0].shape
        flops = b * h * 4.0 * d * s * (s + 1) / 2
    return round(100 * flops / est.seconds / est.peak_flops, 1)


def run(budget: float, targets: list[str], only: list[str] | None = None, top_k: int = 4,
        timeout: float = 120.0) -> list[dict[str, Any]]:
    rows = []
    for name, kernel, args in PROBLEMS:
        if only and not any(o in name for o in only):
            continue
        ir = kernel.ir(*args)
        for target in targets:
            tgt = tpu_target(target)
            assert tgt is not None
            t0 = time.monotonic()
            res = kernel.autotune(*args, target=target, budget=budget, top_k=top_k, timeout=timeout)
            wall = time.monotonic() - t0
            row: dict[str, Any] = {"kernel": name, "target": target, "tune_s": round(wall, 1),
                                   "from_cache": res.from_cache, "evaluated": res.evaluations}
            if res.best is None:
                row["error"] = "no config compiled"
                rows.append(row)
                continue
            est = cost_model.estimate(ir, res.best, tgt)
            won = res.best_candidate
            if not res.from_cache and won is not None and won.status == "ok" and \
                    won.vmem_used is not None:
                # compiled for the target, VMEM measured within the budget, checked: not again
                vmem, compiles = won.vmem_used, True
            else:
                chk = kernel.check(*args, targets=[target], config=res.best).entries[0]
                vmem, compiles = chk.vmem_used, chk.ok
            bw = tgt.hbm_bytes_per_s / (2 if target == "tpu-v7x" else 1)
            row.update(config=json.loads(res.best.to_json()), model_us=round(est.seconds * 1e6, 1),
                       pct_peak=_pct_peak(name, args, est, tgt),
                       pct_hbm=round(100 * est.hbm_bytes / est.seconds / bw, 1), flops=est.flops,
                       hbm_bytes=est.hbm_bytes, vmem_mib=None if vmem is None else
                       round(vmem / 2**20, 2), compiles=compiles)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def rescore(path: str) -> list[dict[str, Any]]:
    """Recomputes the modelled figures of saved winners with the current cost model (no tuning,
    no compiling): for model changes. Tuning times and VMEM stay those of the saved run."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    kernels = {name: (kernel, args) for name, kernel, args in PROBLEMS}
    for r in rows:
        if "config" not in r or r["kernel"] not in kernels:
            continue
        kernel, args = kernels[r["kernel"]]
        tgt = tpu_target(r["target"])
        assert tgt is not None
        from kernel_dsl import Config

        est = cost_model.estimate(kernel.ir(*args), Config.from_json(json.dumps(r["config"])), tgt)
        bw = tgt.hbm_bytes_per_s / (2 if r["target"] == "tpu-v7x" else 1)
        r.update(model_us=round(est.seconds * 1e6, 1), pct_peak=_pct_peak(r["kernel"], args, est, tgt),
                 pct_hbm=round(100 * est.hbm_bytes / est.seconds / bw, 1), flops=est.flops,
                 hbm_bytes=est.hbm_bytes)
    return rows


def roofline(rows: list[dict[str, Any]], out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for target in sorted({r["target"] for r in rows}):
        tgt = TARGETS[target]
        peak = tgt.peak_bf16_flops / (2 if target == "tpu-v7x" else 1)
        bw = tgt.hbm_bytes_per_s / (2 if target == "tpu-v7x" else 1)
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        xs = [2 ** i for i in range(-2, 13)]
        ax.plot(xs, [min(peak, bw * x) / 1e12 for x in xs], color="k", lw=1, label="roofline")
        for r in rows:
            if r["target"] != target or "flops" not in r:
                continue
            ai = r["flops"] / r["hbm_bytes"]
            tflops = r["flops"] / (r["model_us"] * 1e-6) / 1e12
            ax.scatter([ai], [tflops], s=30)
            ax.annotate(r["kernel"].replace(" bf16", "")[:22], (ai, tflops),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("FLOPs per HBM byte (modelled)")
        ax.set_ylabel("TFLOP/s (modelled)")
        ax.set_title(f"{target}: autotuned kernels on the roofline (analytical model)", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"roofline_{target}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--budget", type=float, default=90.0)
    ap.add_argument("--targets", default="tpu-v4,tpu-v5e,tpu-v5p,tpu-v6e,tpu-v7x")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "offline_tpu.json"))
    ap.add_argument("--plots", default=os.path.join(os.path.dirname(__file__), "plots"))
    ap.add_argument("--rescore", action="store_true",
                    help="recompute modelled figures of the saved winners only")
    ap.add_argument("--only", action="append",
                    help="re-tune only problems whose name contains this (repeatable); merged in")
    ap.add_argument("--top-k", type=int, default=4, help="candidates compiled per batch")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate compile")
    ns = ap.parse_args()
    rows = rescore(ns.json) if ns.rescore else run(ns.budget, ns.targets.split(","), ns.only,
                                                   ns.top_k, ns.timeout)
    if ns.only and not ns.rescore:
        with open(ns.json) as f:
            old = json.load(f)["rows"]
        new = {(r["kernel"], r["target"]) for r in rows if "config" in r}
        rows = [r for r in rows if "config" in r]  # a failed re-tune keeps the saved row
        order = [name for name, _, _ in PROBLEMS]
        rows = sorted([r for r in old if (r["kernel"], r["target"]) not in new] + rows,
                      key=lambda r: (order.index(r["kernel"]) if r["kernel"] in order else 99,
                                     r["target"]))
    write_json(ns.json, {"command": "python benchmarks/offline_tpu.py", "rows": rows})
    for p in roofline(rows, ns.plots):
        print("wrote", p)


if __name__ == "__main__":
    main()
