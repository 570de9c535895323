"""Every library kernel's shipped TPU config, per target: modelled time, % of peak, compiler VMEM.

    python benchmarks/shipped_configs.py [--json benchmarks/results/shipped_configs.json]
    python benchmarks/shipped_configs.py --drift   # + how far each is from the model's best now

Reads `kernels/configs/<target>.json` (written by `python -m kernel_dsl.kernels.tune`: the
offline autotuner's winners) and re-scores each winner with the current cost model: modelled
time, % of peak MXU FLOP/s and % of HBM bandwidth (per kernel, i.e. one TensorCore of TPU7x).
Modelled, not measured; seconds. The VMEM column is the figure stored with each winner: what
libtpu's compile-only target needs (the smallest vmem_limit_bytes it accepts), measured by the
tuner and re-measured without re-tuning by `python -m kernel_dsl.kernels.tune --refresh-vmem`,
which also fails if a shipped config no longer compiles.

`--drift` (minutes: every config of the project's space priced) also finds, per entry, the
config the current model ranks first among those the autotuner would try (lowering/pallas/
space.py, VMEM-pruned as it prunes), without compiling it: after a cost-model change, the
entries whose winner moved are the ones to re-tune (`python -m kernel_dsl.kernels.tune`).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from kernel_dsl.autotune import cost_model
from kernel_dsl.config import Config
from kernel_dsl.kernels import KERNELS
from kernel_dsl.kernels.tune import SHIPPED_TARGETS
from kernel_dsl.kernels.tuned import CONFIG_DIR, entry_args
from kernel_dsl.lowering.pallas.targets import tpu_target


def per_core(target: str) -> int:
    return 2 if target == "tpu-v7x" else 1  # a kernel runs on one of TPU7x's two TensorCores


def rows() -> list[dict[str, Any]]:
    out = []
    for target in SHIPPED_TARGETS:
        tgt = tpu_target(target)
        assert tgt is not None
        with open(os.path.join(CONFIG_DIR, f"{target}.json")) as f:
            entries = json.load(f)["entries"]
        for e in entries:
            kernel = KERNELS[e["kernel"]]
            config = Config.from_json(json.dumps(e["config"]))
            est = cost_model.estimate(kernel.ir(*entry_args(kernel, e)), config, tgt)
            bw = tgt.hbm_bytes_per_s / per_core(target)
            out.append({"kernel": e["kernel"], "shapes": e["shapes"], "dtypes": e["dtypes"],
                        "causal": bool(e.get("dynamic_loops", False)),
                        "scalars": e["scalars"], "target": target, "config": e["config"],
                        "model_us": round(est.seconds * 1e6, 1),
                        "pct_peak": round(100 * est.utilization(tgt), 1),
                        "pct_hbm": round(100 * est.hbm_bytes / est.seconds / bw, 1),
                        "vmem_mib": None if e["vmem_used"] is None  # None: any limit compiles
                        else round(e["vmem_used"] / 2**20, 2)})
    return out


def model_best(name: str, entry: dict[str, Any], target: str) -> tuple[float, Any]:
    """(modelled seconds, config) of the current model's first pick for an entry's problem in
    the autotuner's space, priced and VMEM-pruned as its model search does (no compile)."""
    from kernel_dsl.autotune.tuner import model_price
    from kernel_dsl.lowering.pallas import BACKEND

    kernel = KERNELS[name]
    ir = kernel.ir(*entry_args(kernel, entry))
    priced = [(c.seconds, cfg) for cfg in BACKEND.config_space(ir, target)
              for c in [model_price(BACKEND, ir, cfg, target)] if c.status == "unverified"]
    return min(priced, key=lambda p: p[0])


def drift(rs: list[dict[str, Any]]) -> None:
    """Adds `model_best` (config, us) and `vs_best` (shipped / best modelled time) per row."""
    for r in rs:
        entry = {"kernel": r["kernel"], "shapes": r["shapes"], "dtypes": r["dtypes"],
                 "scalars": r["scalars"]}
        t, cfg = model_best(r["kernel"], entry, r["target"])
        r["model_best"] = {"config": json.loads(cfg.to_json()), "model_us": round(t * 1e6, 1)}
        r["vs_best"] = round(r["model_us"] / (t * 1e6), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "shipped_configs.json"))
    ap.add_argument("--drift", action="store_true",
                    help="also the current model's best config per entry (minutes)")
    ns = ap.parse_args()
    rs = rows()
    if ns.drift:
        drift(rs)
        moved = sorted((r for r in rs if r["vs_best"] > 1.02), key=lambda r: -r["vs_best"])
        for r in moved:
            print(f"{r['vs_best']:.3f} {r['target']} {r['kernel']} {r['shapes'][0]} "
                  f"{r['config']} -> {r['model_best']['config']}")
        print(f"{len(rs) - len(moved)} of {len(rs)} entries within 2% of the model's best")
        with open(os.path.join(os.path.dirname(ns.json), "shipped_drift.json"), "w") as f:
            json.dump({"command": "python benchmarks/shipped_configs.py --drift",
                       "entries": len(rs), "within_2pct": len(rs) - len(moved),
                       "worst": max((r["vs_best"] for r in rs), default=1.0),
                       "moved": [{k: r[k] for k in ("target", "kernel", "shapes", "config",
                                                    "model_best", "vs_best")} for r in moved]},
                      f, indent=1)
    data = {"command": "python benchmarks/shipped_configs.py" + (" --drift" if ns.drift else ""),
            "rows": rs}
    with open(ns.json, "w") as f:
        json.dump(data, f, indent=1)
    print(f"{len(data['rows'])} rows -> {ns.json}")


if __name__ == "__main__":
    main()
