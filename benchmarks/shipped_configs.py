"""Every library kernel's shipped TPU config, per target: modelled time, % of peak, compiler VMEM.

    python benchmarks/shipped_configs.py [--json benchmarks/results/shipped_configs.json]

Reads `kernels/configs/<target>.json` (written by `python -m kernel_dsl.kernels.tune`: the
offline autotuner's winners) and re-scores each winner with the current cost model: modelled
time, % of peak MXU FLOP/s and % of HBM bandwidth (per kernel, i.e. one TensorCore of TPU7x).
Modelled, not measured; seconds. The VMEM column is the figure stored with each winner: what
libtpu's compile-only target needs (the smallest vmem_limit_bytes it accepts), measured by the
tuner and re-measured without re-tuning by `python -m kernel_dsl.kernels.tune --refresh-vmem`,
which also fails if a shipped config no longer compiles.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "shipped_configs.json"))
    ns = ap.parse_args()
    data = {"command": "python benchmarks/shipped_configs.py", "rows": rows()}
    with open(ns.json, "w") as f:
        json.dump(data, f, indent=1)
    print(f"{len(data['rows'])} rows -> {ns.json}")


if __name__ == "__main__":
    main()
