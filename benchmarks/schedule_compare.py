"""The schedule-based evaluator (autotune/schedule.py) against published real-TPU times, side by
side with the analytical model (autotune/cost_model.py).

    python benchmarks/schedule_compare.py [--json benchmarks/results/schedule_compare.json]

Points: (1) the JAX Pallas TPU matmul guide's v5e block-size tables (benchmarks/tpu_published.json,
tables `jax_pallas_matmul_guide_v5e_*` with published block sizes), mapped to kernels and
configs exactly as benchmarks/published_compare.py maps them (kernel_dsl matmul, loop_mode=grid,
block_sizes=[bm, bn, bk]; transpose_rhs / fused_relu records use the plain matmul, as there).
Both models add the fitted wall-clock dispatch (WALLCLOCK_DISPATCH_S) the guide's timeit
includes. (2) with --flash N (default 6), N non-causal Tokamax flash-attention points on v5p
(kernel_dsl attention, block_sizes=[block_q, block_kv]). One libtpu compile per distinct
(shape, config), each in a fresh process. Modelled
seconds, never measured here.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import published_compare as pc  # noqa: E402
from _results import save  # noqa: E402

from kernel_dsl.autotune import schedule  # noqa: E402

TABLE_PREFIX = "jax_pallas_matmul_guide_v5e"
# a few Tokamax flash-attention points on v5p (non-causal, no residuals: what kernel_dsl's
# attention computes with nothing skipped). v6e has no known clock (autotune/schedule.py CLOCK_HZ)
FLASH_TABLE = "tokamax_autotune_cache_v5p_pallas_mosaic_tpu_flash_attention"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "tpu_published.json"))
    ap.add_argument("--json", default=os.path.join(HERE, "results", "schedule_compare.json"))
    ap.add_argument("--flash", type=int, default=6, help="Tokamax v5p flash points (0: none)")
    ns = ap.parse_args()
    t0 = time.monotonic()
    prepared = pc.prepare(ns.data)
    items = [it for it in prepared
             if it["rec"]["table"].startswith(TABLE_PREFIX) and it["how"] == "published"]
    flash = [it for it in prepared if it["rec"]["table"] == FLASH_TABLE and it["how"] ==
             "published" and not it["rec"]["shape"]["causal"]
             and not it["rec"]["shape"].get("return_residuals")]
    items += flash[::max(1, len(flash) // ns.flash)][:ns.flash] if ns.flash else []
    profiles: dict[str, dict[str, Any]] = {}
    rows = []
    for it in items:
        rec, target, cfg = it["rec"], it["target"], it["cfgs"][0]
        key = json.dumps([rec["shape"], cfg.to_json(), target])
        if key not in profiles:
            try:
                profiles[key] = schedule.bundle_profile(it["ir"], (), cfg, target)
            except schedule.ScheduleDumpError as e:
                profiles[key] = {"error": str(e)}
        prof = profiles[key]
        _, est, ana_s = pc.model_time(it)
        extra = ana_s - est.seconds  # dispatch, as published_compare adds it
        row: dict[str, Any] = {
            "id": rec["id"], "table": rec["table"], "config": cfg.block_sizes,
            "shape": rec["shape"], "work": est.flops, "measured_s": it["measured_s"],
            "analytical_s": ana_s,
            "analytical_ratio": ana_s / it["measured_s"], "dispatch_s": extra}
        if "error" in prof:
            row.update(schedule_s=None, schedule_ratio=None, schedule_overhead_ratio=None,
                       error=prof["error"])
        else:
            se = schedule.schedule_estimate(it["ir"], cfg, target, prof,
                                            live_fraction=pc._live(rec, cfg))
            row.update(schedule_s=se["seconds"] + extra,
                       schedule_ratio=(se["seconds"] + extra) / it["measured_s"],
                       schedule_overhead_s=se["seconds_with_overhead"] + extra,
                       schedule_overhead_ratio=(se["seconds_with_overhead"] + extra)
                       / it["measured_s"],
                       schedule_bound=se["bound"], compute_step_s=se["compute_step_s"],
                       dma_step_s=se["dma_step_s"], total_bundles=prof["total_bundles"],
                       step_bundles=prof["step_bundles"],
                       step_bundles_all_regions=prof["step_bundles_all_regions"],
                       grid_steps=prof["grid_steps"], grid_loop_trips=prof["grid_loop_trips"],
                       compile_s=prof["compile_s"], profile_wall_s=prof["wall_s"])
        rows.append(row)

    def summary(key: str, table: str = TABLE_PREFIX) -> dict[str, Any]:
        rs = [r for r in rows if r.get(key) is not None and r["table"].startswith(table)]
        if not rs:
            return {"n": 0}
        big = [r for r in rs if r["measured_s"] >= pc.LARGE_S]
        rate = [r["work"] for r in rs]
        return {"n": len(rs), "median_ratio": statistics.median(r[key] for r in rs),
                "min_ratio": min(r[key] for r in rs), "max_ratio": max(r[key] for r in rs),
                "within_10pct": sum(abs(r[key] - 1) <= 0.1 for r in rs),
                "n_large": len(big), "within_10pct_large": sum(abs(r[key] - 1) <= 0.1 for r in big),
                "spearman_time": pc.spearman([r[key] * r["measured_s"] for r in rs],
                                             [r["measured_s"] for r in rs]),
                "spearman_rate": pc.spearman([w / (r[key] * r["measured_s"]) for w, r in
                                              zip(rate, rs)],
                                             [w / r["measured_s"] for w, r in zip(rate, rs)])}

    walls = [p["wall_s"] for p in profiles.values() if "wall_s" in p]
    res = {"command": "python benchmarks/schedule_compare.py", "ratio": "modelled / measured",
           "clock_hz": schedule.CLOCK_HZ, "distinct_compiles": len(profiles),
           "per_candidate_wall_s": {"median": statistics.median(walls) if walls else None,
                                    "max": max(walls) if walls else None},
           "summary": {"schedule": summary("schedule_ratio"),
                       "schedule_plus_overhead": summary("schedule_overhead_ratio"),
                       "analytical": summary("analytical_ratio")},
           "summary_flash_v5p": {"schedule": summary("schedule_ratio", FLASH_TABLE),
                                 "schedule_plus_overhead": summary("schedule_overhead_ratio",
                                                                    FLASH_TABLE),
                                 "analytical": summary("analytical_ratio", FLASH_TABLE)},
           "rows": rows}
    print(f"{'id':<62} {'blocks':<14} {'meas us':>8} {'anal us':>8} {'a/m':>5} "
          f"{'sched us':>8} {'s/m':>5} {'s+i/m':>5} {'bundles/step':>12} bound")
    for r in rows:
        s = "-" if r["schedule_s"] is None else f"{r['schedule_s'] * 1e6:8.1f}"
        sr = "-" if r["schedule_ratio"] is None else f"{r['schedule_ratio']:5.2f}"
        print(f"{r['id'][:62]:<62} {','.join(map(str, r['config'])):<14} "
              f"{r['measured_s'] * 1e6:8.1f} {r['analytical_s'] * 1e6:8.1f} "
              f"{r['analytical_ratio']:5.2f} {s:>8} {sr:>5} {_r(r['schedule_overhead_ratio']):>5} "
              f"{r.get('step_bundles', 0):12.0f} "
              f"{r.get('schedule_bound', r.get('error', '')[:40])}")
    for name in ("summary", "summary_flash_v5p"):
        for k, v in res[name].items():
            print(f"{name} {k}: {v}")
    print(f"per candidate: {res['per_candidate_wall_s']}; {len(profiles)} compiles")
    save(ns.json, res, t0)


if __name__ == "__main__":
    main()
