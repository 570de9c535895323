"""The analytical TPU cost model against published real-TPU measurements.

    python benchmarks/published_compare.py [--data benchmarks/tpu_published.json]
                                           [--json benchmarks/results/published_compare.json]

For every record of benchmarks/tpu_published.json marked `compare`, builds the matching
kernel_dsl kernel (tests/dsl_kernels.py: matmul, attention, layer_norm) at the published shape,
evaluates `autotune.cost_model.estimate` on the published chip, and prints measured time,
modelled time and their ratio (modelled / measured: < 1 means the model is too optimistic).

Config: the published block sizes where the record has them (JAX matmul guide: loop_mode=grid,
block_sizes=[bm, bn, bk]; Tokamax flash attention: loop_mode=grid, block_sizes=[block_q,
block_kv]). Where the publisher tuned but did not say how (XLA references, the splash PDF, the
XLA norm), the model's own best config over the project's Pallas config space
(lowering/pallas/space.py), pruned by the analytical VMEM estimate (lowering/pallas/vmem.py) to
the target's VMEM, with every block list extended by doubling up to 4096 so the model is not
judged through the project's block caps; the pick inside the project's own space (what the
offline autotuner would choose today) is saved next to it as `project_space_pick`.

Per published table: median and worst ratio, and the Spearman rank correlation of modelled
against measured times across the table's points (its configs and shapes), plus the same on
rates (work / time), which problem size does not dominate. Tables with fewer
than 3 compared points get no Spearman. Nothing here runs on a TPU: the model is analytical and
the measurements are the publishers'. Runs in well under a minute on a CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from dsl_kernels import attention, layer_norm, matmul  # noqa: E402

from kernel_dsl import Config  # noqa: E402
from kernel_dsl.autotune import cost_model  # noqa: E402
from kernel_dsl.config import ConfigSpace, positional_syms  # noqa: E402
from kernel_dsl.lowering.pallas.render import render  # noqa: E402
from kernel_dsl.lowering.pallas.space import config_space  # noqa: E402
from kernel_dsl.lowering.pallas.targets import TARGETS  # noqa: E402
from kernel_dsl.lowering.pallas.vmem import estimate_vmem  # noqa: E402

CHIP_TARGET = {"v4": "tpu-v4", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e", "v7x": "tpu-v7x"}
LARGE_S = 1e-3  # "large sizes" for the error summary: measured time of at least 1 ms


def _meta(shape: tuple[int, ...], dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")  # shapes only: nothing allocated


def _build(rec: dict[str, Any]) -> tuple[Any, list[Config], str]:
    """(IR, configs to evaluate, how the config was chosen) for a comparable record."""
    kern, shape, cfg = rec["kernel"], rec["shape"], rec.get("config")
    if kern == "matmul":
        m, k, n = shape["m"], shape["k"], shape["n"]
        ir = matmul.ir(_meta((m, k)), _meta((k, n)))
        if cfg and "bm" in cfg:
            return ir, [Config([cfg["bm"], cfg["bn"], cfg["bk"]], loop_mode="grid")], "published"
        return ir, [], "model-best"
    if kern == "flash_attention_fwd" or kern == "splash_attention_fwd":
        b, h, s, d = shape["batch"], shape["heads_q"], shape["seq_q"], shape["head_dim_qk"]
        q = _meta((b, h, s, d))
        ir = attention.ir(q, q, q, bool(shape["causal"]))
        if cfg and "block_q" in cfg:
            return ir, [Config([cfg["block_q"], cfg["block_kv"]], loop_mode="grid")], "published"
        return ir, [], "model-best"
    if kern == "layer_norm":
        x = shape["x"]
        rows = math.prod(x[:-1])
        w = _meta((x[-1],), torch.float32)
        ir = layer_norm.ir(_meta((rows, x[-1])), w, w, 1e-6)
        return ir, [], "model-best"
    raise ValueError(f"no kernel_dsl kernel for {kern!r}")


def _wide_space(ir: Any, target: str) -> ConfigSpace:
    """The project's Pallas config space with each block list extended by doubling up to 4096
    (bounded by the tile's extent): Tokamax's published winners use 2048-4096 blocks, beyond the
    project's caps (512 second-minor, 1024 minor), and the model should be judged on its own."""
    space = config_space(ir, target)
    lists = []
    for sym, cands in zip(positional_syms(ir), space.positional):
        extent = max((t.extent for t in ir.tiles if t.block is sym), default=1)
        out = list(cands)
        while out[-1] < min(extent, 4096):
            out.append(out[-1] * 2)
        lists.append(out)
    return ConfigSpace(lists, space.named, space.knobs)


def _model_best(ir: Any, target: str, wide: bool) -> tuple[Config, Any, int]:
    """The config the analytical model ranks first among those that fit VMEM (analytically)."""
    tgt = TARGETS[target]
    best = None
    tried = 0
    for cfg in (_wide_space(ir, target) if wide else config_space(ir, target)):
        try:
            gen = render(ir, cfg, target)
        except Exception:  # a config the lowering rejects is not a candidate
            continue
        if estimate_vmem(gen, tgt) > tgt.vmem_limit:
            continue
        tried += 1
        est = cost_model.estimate(ir, cfg, tgt)
        if best is None or est.seconds < best[1].seconds:
            best = (cfg, est)
    if best is None:
        raise RuntimeError("no config fits VMEM")
    return best[0], best[1], tried


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for t in range(i, j + 1):
            r[order[t]] = (i + j) / 2 + 1  # average rank for ties
        i = j + 1
    return r


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else None


def _diagnostics(rec: dict[str, Any], t: float) -> dict[str, Any]:
    """Measured rates that say which unit bounds the kernel (derived from the published time)."""
    s = rec["shape"]
    if rec["kernel"] in ("flash_attention_fwd", "splash_attention_fwd"):
        pairs = s["batch"] * s["heads_q"] * s["seq_q"] * s["seq_kv"]
        if s["causal"]:
            pairs /= 2
        flops = 2.0 * pairs * (s["head_dim_qk"] + s["head_dim_v"])
        return {"useful_tflops": round(flops / t / 1e12, 1),
                "score_elems_per_ns": round(pairs / t / 1e9, 1)}
    if rec["kernel"] == "matmul":
        return {"useful_tflops": round(2.0 * s["m"] * s["k"] * s["n"] / t / 1e12, 1)}
    if rec["kernel"] == "layer_norm":
        n = math.prod(s["x"])
        return {"gbps_x_in_out": round(2 * 2 * n / t / 1e9, 1)}
    return {}


def run(data_path: str) -> dict[str, Any]:
    with open(data_path) as f:
        data = json.load(f)
    rows: list[dict[str, Any]] = []
    cache: dict[tuple[str, str], tuple[Config, Any, int]] = {}
    for rec in data["records"]:
        if not rec.get("compare"):
            continue
        t_meas = rec["measured"].get("time_s")
        if not isinstance(t_meas, (int, float)):
            continue
        target = CHIP_TARGET[rec["chip"]]
        tgt = TARGETS[target]
        ir, cfgs, how = _build(rec)
        space_pick = None
        if how == "model-best":
            key = (json.dumps([rec["kernel"], rec["shape"]], sort_keys=True), target)
            if key not in cache:
                cache[key] = (_model_best(ir, target, wide=True), _model_best(ir, target, wide=False))
            (cfg, est, tried), (scfg, sest, _) = cache[key]
            space_pick = {"config": json.loads(scfg.to_json()), "model_s": sest.seconds,
                          "ratio": sest.seconds / t_meas}
        else:
            cfg, tried = cfgs[0], 1
            est = cost_model.estimate(ir, cfg, tgt)
        rows.append({
            "id": rec["id"], "table": rec["table"], "chip": rec["chip"], "target": target,
            "kernel": rec["kernel"], "implementation": rec["implementation"],
            "config": json.loads(cfg.to_json()), "config_from": how,
            "candidates_tried": tried if how == "model-best" else None,
            "project_space_pick": space_pick,
            "measured_s": t_meas, "model_s": est.seconds, "ratio": est.seconds / t_meas,
            "model_mxu_s": est.mxu_seconds, "model_hbm_s": est.hbm_seconds,
            "model_overhead_s": est.overhead_seconds, "model_steps": est.steps,
            "model_bound": "mxu" if est.mxu_seconds >= est.hbm_seconds else "hbm",
            "work": est.flops if est.flops else est.hbm_bytes,  # FLOPs, or HBM bytes for norms
            "large": t_meas >= LARGE_S, "note": rec.get("compare_note", ""),
            **_diagnostics(rec, t_meas),
        })
    tables: dict[str, dict[str, Any]] = {}
    for tname in sorted({r["table"] for r in rows}):
        rs = [r for r in rows if r["table"] == tname]
        ratios = [r["ratio"] for r in rs]
        tables[tname] = {
            "n": len(rs), "chip": rs[0]["chip"],
            "median_ratio": statistics.median(ratios),
            "min_ratio": min(ratios), "max_ratio": max(ratios),
            "worst_abs_err_pct": 100 * max(abs(x - 1) for x in ratios),
            "spearman": spearman([r["model_s"] for r in rs], [r["measured_s"] for r in rs]),
            # the same, on the rate (work / time): size no longer dominates the ranking
            "spearman_rate": spearman([r["work"] / r["model_s"] for r in rs],
                                      [r["work"] / r["measured_s"] for r in rs]),
        }
    groups: dict[str, dict[str, Any]] = {}
    for key in sorted({(r["chip"], r["kernel"], r["implementation"]) for r in rows}):
        rs = [r for r in rows if (r["chip"], r["kernel"], r["implementation"]) == key]
        big = [r["ratio"] for r in rs if r["large"]]
        groups["/".join(key)] = {
            "n": len(rs), "median_ratio": statistics.median(r["ratio"] for r in rs),
            "min_ratio": min(r["ratio"] for r in rs), "max_ratio": max(r["ratio"] for r in rs),
            "n_large": len(big), "median_ratio_large": statistics.median(big) if big else None,
            "within_10pct_large": sum(abs(x - 1) <= 0.10 for x in big),
        }
    all_r = [r["ratio"] for r in rows]
    big_r = [r["ratio"] for r in rows if r["large"]]
    summary = {
        "n": len(rows), "median_ratio": statistics.median(all_r),
        "worst_ratio_low": min(all_r), "worst_ratio_high": max(all_r),
        "n_large": len(big_r), "median_ratio_large": statistics.median(big_r) if big_r else None,
        "within_10pct_large": sum(abs(x - 1) <= 0.10 for x in big_r),
        "median_abs_log2_ratio": statistics.median(abs(math.log2(x)) for x in all_r),
    }
    return {"command": "python benchmarks/published_compare.py",
            "data": os.path.relpath(data_path, os.path.join(HERE, "..")),
            "ratio": "modelled / measured", "large_threshold_s": LARGE_S,
            "summary": summary, "by_chip_kernel": groups, "tables": tables, "rows": rows}


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
    print(f"{'table':<62} {'n':>4} {'median':>7} {'min':>6} {'max':>6} {'spearman':>8} {'sp.rate':>7}")
    for name, t in res["tables"].items():
        print(f"{name:<62} {t['n']:>4} {t['median_ratio']:>7.2f} {t['min_ratio']:>6.2f} "
              f"{t['max_ratio']:>6.2f} {_fmt(t['spearman']):>8} {_fmt(t['spearman_rate']):>7}")
    print("(spearman: model vs measured times; sp.rate: model vs measured work/time, "
          "which size does not dominate)")
    print(f"\n{'chip/kernel/impl':<40} {'n':>4} {'median':>7} {'min':>6} {'max':>6} {'n>=1ms':>6} "
          f"{'med>=1ms':>8} {'<=10%':>5}")
    for name, g in res["by_chip_kernel"].items():
        print(f"{name:<40} {g['n']:>4} {g['median_ratio']:>7.2f} {g['min_ratio']:>6.2f} "
              f"{g['max_ratio']:>6.2f} {g['n_large']:>6} {_fmt(g['median_ratio_large']):>8} "
              f"{g['within_10pct_large']:>5}")
    s = res["summary"]
    print(f"\nall {s['n']} points: median ratio {s['median_ratio']:.2f}, range [{s['worst_ratio_low']:.2f}, "
          f"{s['worst_ratio_high']:.2f}]; {s['within_10pct_large']} of {s['n_large']} points of >= 1 ms "
          "within 10%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "tpu_published.json"))
    ap.add_argument("--json", default=os.path.join(HERE, "results", "published_compare.json"))
    ns = ap.parse_args()
    t0 = time.monotonic()
    res = run(ns.data)
    res["wall_s"] = round(time.monotonic() - t0, 1)
    show(res)
    os.makedirs(os.path.dirname(ns.json), exist_ok=True)
    with open(ns.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {ns.json} ({res['wall_s']} s)")


if __name__ == "__main__":
    main()
