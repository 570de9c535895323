"""Every library kernel's shipped TPU config, per target: modelled time, % of peak, compiler VMEM.

    python benchmarks/shipped_configs.py [--json benchmarks/results/shipped_configs.json]
                                         [--no-vmem]

Reads `kernels/configs/<target>.json` (written by `python -m kernel_dsl.kernels.tune`: the
offline autotuner's winners) and re-scores each winner with the current cost model: modelled
time, % of peak MXU FLOP/s and % of HBM bandwidth (per kernel, i.e. one TensorCore of TPU7x).
Modelled, not measured. Then compiles each winner with libtpu's compile-only target for the
VMEM it needs (`kernel.check`'s compile stage: the smallest vmem_limit_bytes the compiler
accepts), all in one batch; that part takes several minutes on 2 cores, `--no-vmem` skips it.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from kernel_dsl.autotune import cost_model
from kernel_dsl.kernels import KERNELS
from kernel_dsl.kernels.tune import SHIPPED_TARGETS, entry_args
from kernel_dsl.kernels.tuned import CONFIG_DIR
from kernel_dsl.lowering.pallas.check import Job, check
from kernel_dsl.lowering.pallas.targets import tpu_target

from kernel_dsl.config import Config


def per_core(target: str) -> int:
    return 2 if target == "tpu-v7x" else 1  # a kernel runs on one of TPU7x's two TensorCores


def rows(measure_vmem: bool) -> list[dict[str, Any]]:
    out, jobs = [], []
    for target in SHIPPED_TARGETS:
        tgt = tpu_target(target)
        assert tgt is not None
        with open(os.path.join(CONFIG_DIR, f"{target}.json")) as f:
            entries = json.load(f)["entries"]
        for e in entries:
            kernel = KERNELS[e["kernel"]]
            config = Config.from_json(json.dumps(e["config"]))
            args = entry_args(kernel, e)
            ir = kernel.ir(*args)
            est = cost_model.estimate(ir, config, tgt)
            bw = tgt.hbm_bytes_per_s / per_core(target)
            out.append({"kernel": e["kernel"], "shapes": e["shapes"], "dtypes": e["dtypes"],
                        "scalars": e["scalars"], "target": target, "config": e["config"],
                        "model_us": round(est.seconds * 1e6, 1),
                        "pct_peak": round(100 * est.utilization(tgt), 1),
                        "pct_hbm": round(100 * est.hbm_bytes / est.seconds / bw, 1)})
            gen = kernel.generated(*args, backend="pallas", config=config, target=target)
            jobs.append(Job(gen, [(p.shape, p.dtype) for p in ir.inputs], ir.loc))
    if measure_vmem:  # one batch: one compile worker per core for all targets
        for row, e in zip(out, check(jobs, timeout=600.0, measure_vmem=True)):
            row["compiles"] = e.ok
            row["vmem_mib"] = None if e.vmem_used is None or not e.ok else round(e.vmem_used / 2**20, 2)
            print(row["kernel"], row["target"], e.status, row["vmem_mib"], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "shipped_configs.json"))
    ap.add_argument("--no-vmem", action="store_true", help="skip the compiles (no VMEM column)")
    ns = ap.parse_args()
    data = {"command": "python benchmarks/shipped_configs.py", "rows": rows(not ns.no_vmem)}
    with open(ns.json, "w") as f:
        json.dump(data, f, indent=1)
    print(f"{len(data['rows'])} rows -> {ns.json}")


if __name__ == "__main__":
    main()
