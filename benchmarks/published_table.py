"""The printed tables of benchmarks/published_compare.py: per point, per published table, per
chip / kernel / implementation, and the fit / held-out / all error summaries of a `run()` result."""
from __future__ import annotations

from typing import Any


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def show(res: dict[str, Any]) -> None:
    print(f"{'id':<70} {'cfg':<26} {'meas us':>10} {'model us':>10} {'ratio':>6} bound")
    for r in res["rows"]:
        cfg = ",".join(str(b) for b in r["config"]["block_sizes"])
        cfg += "" if r["config_from"] == "published" else "*"
        print(f"{r['id'][:70]:<70} {cfg:<26} {r['measured_s'] * 1e6:>10.1f} "
              f"{r['model_s'] * 1e6:>10.1f} {r['ratio']:>6.2f} {r['model_bound']}")
    print("\n(* = model-best config: the publisher's config is not known)\n")
    print(f"{'table':<62} {'split':<8} {'n':>4} {'median':>7} {'min':>6} {'max':>6} "
          f"{'>=1ms':>5} {'<=10%':>5} {'spearman':>8} {'sp.rate':>7}")
    for name, t in res["tables"].items():
        print(f"{name:<62} {t['split']:<8} {t['n']:>4} {t['median_ratio']:>7.2f} "
              f"{t['min_ratio']:>6.2f} {t['max_ratio']:>6.2f} {t['n_large']:>5} "
              f"{t['within_10pct_large']:>5} {_fmt(t['spearman']):>8} {_fmt(t['spearman_rate']):>7}")
    print("(spearman: model vs measured times; sp.rate: model vs measured work/time, "
          "which size does not dominate)")
    print(f"\n{'chip/kernel/impl':<40} {'n':>4} {'median':>7} {'min':>6} {'max':>6} {'n>=1ms':>6} "
          f"{'med>=1ms':>8} {'<=10%':>5}")
    for name, g in res["by_chip_kernel"].items():
        print(f"{name:<40} {g['n']:>4} {g['median_ratio']:>7.2f} {g['min_ratio']:>6.2f} "
              f"{g['max_ratio']:>6.2f} {g['n_large']:>6} {_fmt(g['median_ratio_large']):>8} "
              f"{g['within_10pct_large']:>5}")
    for split in ("fit", "held_out", "all"):
        s = res["summary"][split]
        print(f"{split}: {s['n']} points, median ratio {s['median_ratio']:.2f} "
              f"(median |err| {s['median_abs_err_pct']:.0f}%), range [{s['worst_ratio_low']:.2f}, "
              f"{s['worst_ratio_high']:.2f}]; >= 1 ms: {s['within_10pct_large']} of "
              f"{s['n_large']} within 10%, worst {_fmt(s['worst_abs_err_pct_large'], '.0f')}% "
              f"({s['worst_large_id']})")
