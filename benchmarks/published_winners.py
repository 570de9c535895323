"""The offline autotuner's winners next to the configs published measurements found best.

    python benchmarks/published_winners.py [--json benchmarks/results/published_winners.json]

Issue 17 ("Show it"): for matmul and flash attention, per chip and shape,
- the config the analytical model (autotune/cost_model.py) ranks first inside the project's
  Pallas config space (lowering/pallas/space.py, VMEM-pruned with the autotuner's headroom:
  what the offline autotuner picks for the test kernel today) and inside the widened space
  (every block list doubled up to 4096, benchmarks/published_compare.py `_wide_space`), with
  their modelled times;
- the published best config with its published time and the model's time for it.

Published best: the JAX Pallas matmul guide (v5e) times two block choices per shape, the best
is the faster; Tokamax's autotuning caches (v5p, v6e, TPU7x flash attention) ship only the
winner of an exhaustive search per shape, with its time. Matmul on v6e and TPU7x has no
published Pallas measurement: those rows show the model's picks only.

Kernels and timing are those of benchmarks/published_compare.py: kernel_dsl's matmul and
attention (tests/dsl_kernels.py); causal attention skips the fully masked block pairs as
Tokamax does (`live_fraction`); `-res` shapes are not listed. Every modelled time, the
picks' too, is "as the publisher measured": the guide's wall-clock adds the fitted host
dispatch, Tokamax's op its XLA layout transposes (published_compare.py `_extra`). The model's
picks are modelled, never measured; runs in seconds on a CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import published_compare as pc  # noqa: E402
from _results import save  # noqa: E402

from kernel_dsl.lowering.pallas.vmem import fits_vmem  # noqa: E402

# Tokamax flash shapes shown per chip: long and short sequences, head_dim 64 / 128 / 256, causal
FLASH_SHAPES = ("1x16384x16x128-kv16", "2x8192x16x128-kv16-causal", "4x4096x32x64-kv32",
                "2x8192x8x256-kv8")
FLASH_CHIPS = ("v5p", "v6e", "v7x")
MM_SHAPES = (4096, 8192)  # square bf16 matmuls (the guide's large shapes)
MM_CHIPS = ("v5e", "v6e", "v7x")


def _cfg(cfg: Any) -> dict[str, Any]:
    return json.loads(cfg.to_json())


def _pick(rec: dict[str, Any], ir: Any, target: str, wide: bool, extra: float) -> dict[str, Any]:
    tgt = pc.TARGETS[target]  # pruned as the autotuner prunes: the estimate with its headroom
    cands = [c for c in pc._feasible(ir, target, wide)
             if fits_vmem(pc.estimate_vmem(pc.render(ir, c, target), tgt), tgt)]
    cfg, est = pc._model_best(rec, ir, target, cands, pc.unmasked_ir(rec))
    return {"config": _cfg(cfg), "model_s": est.seconds + extra, "candidates": len(cands)}


def _item(rec: dict[str, Any]) -> dict[str, Any]:
    ir, cfgs, how = pc._build(rec)
    return {"rec": rec, "ir": ir, "target": pc.CHIP_TARGET[rec["chip"]], "how": how,
            "cfgs": cfgs, "epilogue": None, "wallclock": "timeit" in rec.get("timing_method", "")}


def _row(kernel: str, chip: str, shape: str, rec: dict[str, Any],
         best: dict[str, Any] | None) -> dict[str, Any]:
    it = _item(rec)
    extra = pc._extra(it)
    row: dict[str, Any] = {"kernel": kernel, "chip": chip, "target": it["target"], "shape": shape,
                           "space_pick": _pick(rec, it["ir"], it["target"], False, extra),
                           "wide_pick": _pick(rec, it["ir"], it["target"], True, extra),
                           "wallclock": it["wallclock"]}
    if best is not None:
        bit = _item(best)
        cfg, _, t_model = pc.model_time(bit)
        row["published"] = {"id": best["id"], "config": {k: v for k, v in best["config"].items()
                                                         if k != "grid"},
                            "as_config": _cfg(cfg), "measured_s": best["measured"]["time_s"],
                            "model_s": t_model}
    return row


def run(data_path: str) -> dict[str, Any]:
    with open(data_path) as f:
        recs = [r for r in json.load(f)["records"] if r.get("compare")]
    rows: list[dict[str, Any]] = []
    guide = [r for r in recs if r["table"] == "jax_pallas_matmul_guide_v5e_plain"]
    for chip in MM_CHIPS:
        for n in MM_SHAPES:
            shape = f"{n}x{n}x{n}"
            pub = [r for r in guide if r["chip"] == chip and r["id"].endswith("/" + shape)]
            best = min(pub, key=lambda r: r["measured"]["time_s"]) if pub else None
            # a record to build the kernel from: the published one, else the guide's at v5e
            base = best or next(r for r in guide if r["id"].endswith("/" + shape))
            rec = dict(base, chip=chip, config=None, timing_method="device time")
            if best is not None:
                rec = dict(best, config=None)  # model-best: no config given
            rows.append(_row("matmul bf16", chip, shape, rec, best))
    for chip in FLASH_CHIPS:
        for s in FLASH_SHAPES:
            rid = f"tokamax/{chip}/pallas_mosaic_tpu_flash_attention/{s}"
            best = next((r for r in recs if r["id"] == rid), None)
            if best is None:
                continue
            rows.append(_row("flash attention fwd bf16", chip, s, dict(best, config=None), best))
    return {"command": "python benchmarks/published_winners.py",
            "model": "autotune/cost_model.py (calibrated, issue 17)", "rows": rows}


def show(res: dict[str, Any]) -> None:
    for r in res["rows"]:
        sp, wp, pub = r["space_pick"], r["wide_pick"], r.get("published")
        line = (f"{r['kernel'][:12]:<12} {r['chip']:<4} {r['shape']:<26} "
                f"space {sp['config']['block_sizes']!s:<18} {sp['model_s'] * 1e6:>9.1f}  "
                f"wide {wp['config']['block_sizes']!s:<18} {wp['model_s'] * 1e6:>9.1f}")
        if pub:
            line += (f"  published {pub['as_config']['block_sizes']!s:<18} meas "
                     f"{pub['measured_s'] * 1e6:>9.1f} model {pub['model_s'] * 1e6:>9.1f}")
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "tpu_published.json"))
    ap.add_argument("--json", default=os.path.join(HERE, "results", "published_winners.json"))
    ns = ap.parse_args()
    t0 = time.monotonic()
    res = run(ns.data)
    show(res)
    save(ns.json, res, t0)


if __name__ == "__main__":
    main()
