"""REPORT.md §8: the TPU cost model against published real-TPU measurements, from
benchmarks/results/published_compare.json (benchmarks/published_compare.py) and, for its last
paragraph, benchmarks/results/offline_tpu.json; the diagonal-block study from
benchmarks/results/tokamax_schedule.json (benchmarks/tokamax_schedule.py, needs tokamax).
benchmarks/report.py calls `section_published`."""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Any

_SCHEDULE_STUDY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                               "tokamax_schedule.json")

# §8's per-target provenance of the calibration constants (how each row was obtained: analysis,
# stated in autotune/cost_model.py's CALIBRATION comment); the figures come from the saved JSON
_CAL_PROVENANCE = {
    "tpu-v4": "v5p's (no published point)",
    "tpu-v5e": "fitted; eup_s = v5p's x 229.5/197 (per-core peak ratio; matmul points cannot see "
               "it)",
    "tpu-v5p": "fitted",
    "tpu-v6e": "fitted",
    "tpu-v7x": "held out, not fitted: v6e's, eup_s included (same vector rate per TensorCore; "
               "chosen after seeing TPU7x residuals, see below)",
}
_CAL_FROM = {"tpu-v4": "tpu-v5p", "tpu-v7x": "tpu-v6e"}  # targets whose constants are another's


def _range(xs: list[float], spec: str = ".2f") -> str:
    lo, hi = format(min(xs), spec), format(max(xs), spec)
    return lo if lo == hi else f"{lo}-{hi}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _rho(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _shape_of(rid: str) -> str:
    """'32x512x32x64' of 'tokamax/v7x/pallas_mosaic_tpu_flash_attention/32x512x32x64-kv32-res'."""
    return rid.rsplit("/", 1)[-1].split("-")[0]


def _spearman_ranges(tables: dict[str, Any], key: str) -> tuple[str, str]:
    """(range over the tables other than XLA normalization, the normalization table's value)."""
    other = [t[key] for n, t in tables.items() if "normalization" not in n and t[key] is not None]
    norm = [t[key] for n, t in tables.items() if "normalization" in n and t[key] is not None]
    return (_range(other) if other else "-"), (_range(norm) if norm else "-")


def _published_constants(data: dict[str, Any]) -> list[str]:
    mc, fixed = data["model_constants"], data.get("fit_fixed", {})
    cal = mc["calibration"]
    out = ["| target | step_s | dma_issue_s | mxu_efficiency | hbm_efficiency | eup_s (ps/element) "
           "| provenance |", "|---|---|---|---|---|---|---|"]
    for t, c in cal.items():
        held = f"{_CAL_FROM.get(t, t)}.hbm_efficiency" in fixed
        out.append(f"| {t} | {c['step_s'] * 1e6:.3f} us | {c['dma_issue_s'] * 1e6:.3f} us | "
                   f"{c['mxu_efficiency']:g} | {c['hbm_efficiency']:g}{' (held)' if held else ''} "
                   f"| {c['eup_s'] * 1e12:.3f} | {_CAL_PROVENANCE.get(t, '')} |")
    lat = sorted({c["dma_latency_s"] for c in cal.values()})
    hbm = sorted({c["hbm_efficiency"] for c in cal.values()})
    held_hbm = (f"hbm_efficiency is held at {hbm[0]:g} on every generation" if len(hbm) == 1 else
                "hbm_efficiency is held at " + " / ".join(f"{x:g}" for x in hbm))
    n_large = data["summary"]["all"]["within_10pct_large"]
    return out + ["", f"Global: EUP_OVER_VPU {mc['EUP_OVER_VPU']:g}, MXU_VECTOR_SERIAL "
                  f"{mc['MXU_VECTOR_SERIAL']:g}, STRAIGHT_LINE_STEP "
                  f"{mc.get('STRAIGHT_LINE_STEP', 1.0):g}; dma_latency_s "
                  f"{' / '.join(f'{x * 1e6:g}' for x in lat)} us (not identifiable). `python "
                  "benchmarks/published_compare.py --fit` fits them by least squares on "
                  "log(modelled / measured) over the fit set (points of at least 1 ms weighted 1, "
                  "smaller ones 0.3; weak log-priors keep constants the data cannot see physical) "
                  "and prints them; they are pasted, rounded, into cost_model.py. "
                  f"{held_hbm}: no published kernel point is HBM-bound at large size (Tokamax's "
                  "layout transposes are, and are priced at it); the issue's \"achievable HBM "
                  "bandwidth per generation\" is therefore not determined by this data. Tried and "
                  "dropped in "
                  "the calibration study: a fraction of DMA time exposed on compute-bound steps "
                  "(fits the attention caches a little better, puts the v5e 8192^3 matmul 30% "
                  "over); a cost per dot operand element read from VMEM (120 of 165 within 10%, "
                  "but it made every v6e / TPU7x matmul operand-bound at ~35% of peak, which "
                  "nothing published supports). Second study (issue 17 follow-up; each variant "
                  "refitted on the fit set only, then judged on the held-out set; the ideas came "
                  "from the residuals of all points, held-out TPU7x ones included, so the "
                  "held-out figures are not blind for this study): a dot streamed in whichever "
                  "orientation pads less, so the 64-wide PV dot is unpadded (large points within "
                  "10% fit / held out 77 / 39, worst "
                  "34%, against 81 / 38, 33%); a DMA latency added to every step's DMA (fitted "
                  "0.29 us: 77 / 38, 37%); a serial cost per output block written back (0.19 "
                  "us per output DMA: 79 / 43, 45%; once per output-block change: 83 / 41, 46%, "
                  "held-out RMS log error 0.105 against 0.098); Tokamax's `block_kv_compute` "
                  "sub-blocks as extra rescale work (81 / 39, 33%, RMS unchanged: at the fitted "
                  "EUP_OVER_VPU the rescale is a few % of a step's vector time). None lowered the "
                  "held-out error without raising its worst point; all were dropped. The one "
                  "variant that fitted well, a serial cost per output element (12 ps fitted: fit "
                  "101 of 111, but the v5e 8192^3 guide matmul 12% over), pointed at a cost of the "
                  "whole b*s*h*d tensors rather than of the kernel: Tokamax's op "
                  "(tokamax/_src/ops/attention/pallas_mosaic_tpu.py) swaps seq and heads of q, k, "
                  "v and the output in XLA around its kernel, and its caches time the whole op. "
                  "Counting those four transposes (read + write at the achievable HBM bandwidth, "
                  "benchmarks/published_compare.py; no new constant) and refitting gives the "
                  "constants above. With the earlier TPU7x rule (v6e's eup_s scaled by the "
                  "per-core MXU peak ratio 918/1153.5) the held-out TPU7x flash table then falls "
                  "to a median of 0.85 (12 of 54 held-out large points within 10%): the missing "
                  "transposes had been hiding that rule's optimism. TPU7x now takes v6e's vector "
                  f"rate per TensorCore unchanged, which gives the held-out figures below ({n_large} "
                  "of 165 large points within 10% in all). That rule was chosen after seeing the "
                  "TPU7x residuals, so the held-out TPU7x figures are not blind for it (one "
                  "binary choice, no fitted value); everything else about TPU7x is. Third study "
                  "(stop 30): pricing Tokamax's causal mask on the diagonal blocks only (above; "
                  "before, on every visited block) with the constants unchanged gives fit / held "
                  "out 104 / 49 large points within 10% (was 104 / 48) and a held-out worst of "
                  "14% (was 17%). Refitting under it gives EUP_OVER_VPU 9.8 (from 20.3) and 104 "
                  "/ 48, worst held out 13%; a weight on compare element-ops on top (a 2-D "
                  "compare materializes its broadcast operands; fitted 1.8) 103 / 48. Neither "
                  "raised the count, so the constants stay as fitted before. Fourth and fifth "
                  "studies (stops 31-32): Tokamax's own kernel compiled for the compile-only "
                  "targets (benchmarks/tokamax_schedule.py, below) shows its non-causal grid step "
                  "with one kv block compiling as one straight-line region, 14-19% fewer bundles "
                  "than the same work split into `pl.when` regions. The model now lets such a "
                  "step overlap its bookkeeping with its compute, max(step_s, compute + "
                  "STRAIGHT_LINE_STEP x step_s), for any kernel whose loops all run once (kernel_dsl "
                  "renders those inline: no branch, no fori_loop, no scratch); Tokamax's causal "
                  "kernel keeps its mask branches. Refitted: fit / held out 105 / 50 large points "
                  "within 10% (was 104 / 49), fit worst 14% (was 18%), held-out TPU7x flash table "
                  "46 of 47 (was 44) but its worst 18% (was 14%): TPU7x's 512-wide one-block steps "
                  "now model 0.78-0.83 of measured, a per-step cost above v6e's, whose constants "
                  "TPU7x takes; fitting it would use held-out data. The shipped entries the rule "
                  "moved were re-tuned (section 3).", ""]


def _res_cost(rows: dict[str, dict[str, Any]]) -> str:
    """How well the model prices returning residuals: each large `-res` point's time over its
    plain counterpart's, modelled against measured (the two may use different configs)."""
    xs = [(r["model_s"] / b["model_s"]) / (r["measured_s"] / b["measured_s"])
          for i, r in rows.items() if i.endswith("-res") and r["large"]
          for b in [rows.get(i[:-4])] if b is not None]
    if not xs:
        return ""
    xs.sort()
    return ("Returning residuals is priced about right: over the "
            f"{len(xs)} large `-res` points, (modelled -res / modelled plain) over (measured -res "
            f"/ measured plain) has median {xs[len(xs) // 2]:.2f} (range {xs[0]:.2f}-"
            f"{xs[-1]:.2f}), so a `-res` point inherits its plain shape's error.")


def _diagonal_cost(rows: dict[str, dict[str, Any]]) -> str:
    """What masking a diagonal block costs, measured against modelled: causal points whose every
    visited block is diagonal (one kv block per q block), over their non-causal counterpart."""
    meas, mod = [], []
    for i, r in rows.items():
        b = rows.get(i.replace("-causal", ""))
        if "-causal" in i and b is not None and r.get("live_fraction") == 1.0:
            meas.append(r["measured_s"] / b["measured_s"])
            mod.append(r["model_s"] / b["model_s"])
    if not meas:
        return ""
    return (f"Where every visited block is diagonal ({len(meas)} causal points), causal over "
            f"non-causal measures {_range(meas)} and models {_range(mod)}: the model's share "
            "is the mask's element-ops (compare and select at the VPU rate) and the causal "
            "kernel's branch regions (a non-causal step with one kv block is straight-line). "
            + _schedule_study())


def _schedule_study() -> str:
    """Fourth study: the compiler's own schedule of Tokamax's kernel on those points."""
    try:
        with open(_SCHEDULE_STUDY) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    rows, rho = data["rows"], data["spearman_by_chip"]
    ex = [100 * r["mask_region_excess"] for r in rows]

    def rhos(key: str) -> str:
        return ", ".join(f"{c} {_rho(v[key])}" for c, v in sorted(rho.items()))

    return (f"Fourth study (stop 31): is it the mask's arithmetic? `python "
            f"benchmarks/tokamax_schedule.py` (tokamax {data['tokamax']}, benchmark-only) "
            f"compiles Tokamax's own splash forward for libtpu's compile-only targets, causal and "
            f"not, each with its published config, on {len(rows)} of these pairs (MHA, one kv "
            "block per q block), and reads the VLIW schedule with autotune/schedule.py. In the "
            "causal kernel the masked branch region is between "
            f"{min(ex):+.0f}% and {max(ex):+.0f}% longer than its unmasked twin (median "
            f"{statistics.median(ex):+.0f}%): in the compiler's schedule the mask's element-ops "
            "cost a few percent of a block, about what the model charges. The whole diagonal "
            "step (masked region plus the init / finalize branches, which the non-causal "
            "one-kv-block kernel compiles without) is "
            f"{_range([r['schedule_ratio'] for r in rows])}x the non-causal step: it overshoots "
            f"every measured ratio ({_range([r['measured_ratio'] for r in rows])}) and ranks "
            f"them wrongly (Spearman by chip: {rhos('schedule_ratio')}); the analytical model "
            f"gives {_range([r['model_ratio'] for r in rows if r['model_ratio'] is not None])} "
            f"(Spearman {rhos('model_ratio')}): like the schedule, its straight-line rule charges "
            "the branches of 512-wide steps more than those of 1024-wide ones, where TPU7x and "
            "v6e measure the opposite. The static schedule cannot see stalls, and that part "
            "of the cost lies there: a profile on a TPU is what it takes.")


def _published_why(data: dict[str, Any], worst: list[dict[str, Any]]) -> str:
    """The analysis of the worst points; every figure in it from the saved results."""
    rows = {r["id"]: r for r in data["rows"]}
    tables = data["tables"]
    short = [r for r in worst if r["id"].startswith("tokamax/")]
    splash = [r for r in worst if r["id"].startswith("tokamax-splash")]
    norm = tables.get("tokamax_autotune_cache_v7x_normalization")
    norm_rows = [r for r in data["rows"] if r["table"] == "tokamax_autotune_cache_v7x_normalization"]
    parts = []
    if short:
        parts.append(
            "Why: (1) the Tokamax misses left are short sequences ("
            + ", ".join(dict.fromkeys(_shape_of(r["id"]) for r in short))
            + f", {_range([100 * abs(r['ratio'] - 1) for r in short], '.0f')}% off), whose grid "
            "steps each hold a whole (batch, head) pair, or half of one, with one or two kv "
            "blocks per q block: head_dim 64 non-causal on v6e over-predicted, causal with "
            "residuals under-predicted (returning residuals costs the causal kernel more than "
            "the non-causal one, where the model adds the same writes to both), TPU7x's "
            "512-wide steps under-predicted (above). " + _diagonal_cost(rows))
    parts.append(_res_cost(rows))
    if splash:
        parts.append(
            "(2) The splash microbenchmarks at S = "
            + ", ".join(dict.fromkeys(r["id"].split("/")[3][1:] for r in splash))
            + f" are {_range([r['ratio'] for r in splash])}: the publisher's config is not known, "
            "so the model's own best config over the widened space is compared (the least of "
            "hundreds of modelled times leans optimistic), against a kernel with GQA (K/V bytes "
            "over-counted, which leans the other way).")
    if norm and norm_rows:
        top_ms = math.ceil(max(r["measured_s"] for r in norm_rows) * 1e4) / 10
        parts.append(
            f"(3) The XLA normalization points (all under {top_ms:g} ms, so not \"large\") are "
            f"{norm['min_ratio']:.2f}-{norm['max_ratio']:.2f}: kernel_dsl's layer_norm is "
            "HBM-bound in the model, while XLA's measured rates for 128-wide rows are 0.65-0.7 "
            "TB/s (under a fifth of a TPU7x TensorCore's HBM bandwidth) and 64-wide rows are "
            "faster per element; the model orders them the wrong way on rate (Spearman "
            f"{_rho(norm['spearman_rate'])}). Nothing in the data says what bounds XLA's fusion "
            "there; no constant was bent to it.")
    return " ".join(p for p in parts if p)


def _published_consequence(data: dict[str, Any], win: Any) -> list[str]:
    """What the calibrated model means for the autotuner: its first-ranked bf16 8192^3 matmul
    in the project's space (published_winners.json), before and after the space was widened."""
    rows = {r["chip"]: r for r in (win or {}).get("rows", [])
            if r["kernel"] == "matmul bf16" and r["shape"] == "8192x8192x8192"}
    if not all(c in rows for c in ("v5e", "v6e", "v7x")):
        return []
    from kernel_dsl.lowering.pallas.targets import TARGETS

    disp = data["model_constants"]["WALLCLOCK_DISPATCH_S"]

    def pct(chip: str) -> str:  # % of what one kernel can reach (one TensorCore of TPU7x)
        r = rows[chip]
        t = r["space_pick"]["model_s"] - (disp if r["wallclock"] else 0.0)
        peak = TARGETS[r["target"]].peak_bf16_flops / (2 if chip == "v7x" else 1)
        return f"{100 * 2 * 8192 ** 3 / t / peak:.0f}%"

    c6 = rows["v6e"]["space_pick"]["config"]
    hbm = data["model_constants"]["calibration"]["tpu-v6e"]["hbm_efficiency"]
    return ["Consequence for the autotuner (issue 17 item 4): with blocks capped at 512 / 1024 "
            "(lowering/pallas/space.py until then) the model's best bf16 8192^3 matmul reached "
            f"95% of peak on v5e and 89% on TPU7x but 69% on v6e ([512, 256, 128], inner): at "
            f"{hbm:g} HBM efficiency 512-row tiles are bandwidth-bound on v6e. The space now "
            "goes to 4096 on the minor and second-minor axes (VMEM-pruned with headroom), as the "
            "published winners do, and the model's first pick in it (the table below, device "
            f"time) reaches {pct('v5e')} on v5e, {pct('v6e')} on v6e ({c6['block_sizes']}, "
            f"{c6.get('loop_mode', '')}) and {pct('v7x')} on TPU7x (modelled; the model's error "
            "per chip is in section 3's model column).", ""]


def _published_checked(data: dict[str, Any]) -> list[str]:
    """The test's thresholds (tests/test_cost_model_calibration.py), with today's counts if
    they moved."""
    stated = {"fit": (95, 101), "held_out": (46, 47)}  # the test's parametrization
    now = {}
    for split in stated:
        big = [r["ratio"] for r in data["rows"] if r["split"] == split and r["large"]
               and r["table"].startswith("tokamax_autotune_cache")
               and r["kernel"] == "flash_attention_fwd"]
        now[split] = (sum(abs(x - 1) <= 0.10 for x in big), len(big))
    moved = "" if now == stated else (
        f" (the saved results now: fit {now['fit'][0]} of {now['fit'][1]}, held out "
        f"{now['held_out'][0]} of {now['held_out'][1]})")
    return ["Checked by tests/test_cost_model_calibration.py (~5 s): the Tokamax flash caches' "
            "large points within 10% at least as often as stated here, fit "
            f"({stated['fit'][0]} of {stated['fit'][1]}) and held out ({stated['held_out'][0]} "
            f"of {stated['held_out'][1]}) apart{moved}, worst no larger; four large held-out "
            "TPU7x points and four fit points within 10%; Tokamax's transposes; the measured "
            "order of five v6e "
            "points; the causal live fraction. Nothing here ran on a TPU: the model is analytical "
            "and the measurements are the publishers'.", ""]


def model_error(data: Any, target: str, kind: str | None = None) -> str:
    """The calibrated model's measured error on `target`'s chip, from §8's comparison
    (published_compare.json): large (>= 1 ms) published Pallas points within 10%, median and
    worst absolute error; for kernel `kind` ("matmul", "attention") where that chip has such
    points. What a modelled "% of peak" on that chip should be read with."""
    if not data:
        return "calibrated analytical model (no comparison saved)"
    chip = target.replace("tpu-", "")
    big = [r for r in data["rows"] if r["chip"] == chip and r["large"]
           and r.get("implementation") == "pallas"]
    if not big:
        return f"calibrated; no published {chip} point (v5p's constants)"
    same = [r for r in big if kind and kind in r["kernel"]]
    note = "" if same or not kind else f"no {chip} {kind} point; "
    pts = same or big
    errs = sorted(abs(r["ratio"] - 1) * 100 for r in pts)
    kinds = sorted({r["kernel"].replace("_fwd", "").replace("_", " ") for r in pts})
    return (f"calibrated; {note}{chip} {' / '.join(kinds)}: {sum(e <= 10 for e in errs)} of "
            f"{len(pts)} within 10%, median {errs[len(errs) // 2]:.0f}%, worst {errs[-1]:.0f}%")


def _cfg(c: dict[str, Any]) -> str:
    mode = c.get("loop_mode")
    return f"{c['block_sizes']}" + (f" {mode}" if mode else "")


def _published_winners(win: Any) -> list[str]:
    """The offline winners next to the published best configs (published_winners.json)."""
    out = ["### The autotuner's offline winners against the published best configs", "",
           "Command: `python benchmarks/published_winners.py` (seconds). Per chip and shape, "
           "the config the calibrated model ranks first for kernel_dsl's kernel (tests/"
           "dsl_kernels.py matmul / attention, VMEM-pruned) inside the project's Pallas config "
           "space (lowering/pallas/space.py: what the offline autotuner picks; since issue 17 "
           "item 4 its blocks go to 4096, so it now equals the widened space of the next "
           "column, every block list doubled up to 4096), next to the config the "
           "published measurements found best (JAX matmul guide: the faster of its two block "
           "choices per shape; Tokamax caches: the shipped winner of its exhaustive search), "
           "with its published time and the model's time for it. Every modelled time, the picks' "
           "too, includes what the publisher's timing includes (the guide's wall-clock: the "
           "fitted host dispatch; Tokamax's op: its XLA layout transposes), so a row compares "
           "like with like; kernel_dsl's kernel on [batch, heads, seq, head_dim] inputs would "
           "not pay the transposes. Causal "
           "attention skips the masked block pairs as Tokamax does. Matmul on v6e / TPU7x has "
           "no published Pallas measurement (model picks only); flash attention has no v5e "
           "cache (Tokamax ships v5p).", ""]
    if not win:
        return out + ["(benchmarks/results/published_winners.json not generated yet)", ""]
    out += ["| kernel | chip | shape | model's pick, project space | modelled us | model's pick, "
            "widened space | modelled us | published best config | published us | modelled us "
            "| model / published |", "|---|---|---|---|---:|---|---:|---|---:|---:|---:|"]
    gaps = []
    for r in win["rows"]:
        sp, wp, pub = r["space_pick"], r["wide_pick"], r.get("published")
        cells = [r["kernel"], r["chip"], r["shape"], _cfg(sp["config"]),
                 f"{sp['model_s'] * 1e6:,.0f}", _cfg(wp["config"]), f"{wp['model_s'] * 1e6:,.0f}"]
        if pub:
            cells += [_cfg(pub["as_config"]), f"{pub['measured_s'] * 1e6:,.0f}",
                      f"{pub['model_s'] * 1e6:,.0f}", f"{pub['model_s'] / pub['measured_s']:.2f}"]
            gaps.append((sp["model_s"] / pub["model_s"], wp["model_s"] / pub["model_s"]))
        else:
            cells += ["-", "-", "-", "-"]
        out.append("| " + " | ".join(cells) + " |")
    if gaps:
        out += ["", f"Against the published best config, as modelled: the project-space pick is "
                f"{_range([g[0] for g in gaps])}x its modelled time, the widened-space pick "
                f"{_range([g[1] for g in gaps])}x (below 1: the model expects its own pick to "
                "beat the published winner, which only a TPU run can confirm). Where the model "
                "prefers smaller causal blocks than Tokamax it trades masked work against step "
                "overhead that a real TPU may price differently.", ""]
    return out


def section_published(data: Any, off: Any, win: Any = None) -> list[str]:
    """§8's lines; `data`: published_compare.json, `off`: offline_tpu.json, `win`:
    published_winners.json (None if not saved)."""
    out = ["## 8. The TPU cost model against published real-TPU measurements", "",
           "Command: `python benchmarks/published_compare.py` (seconds; `--fit` refits the "
           "constants, ~1 min). Every published measurement we found "
           "(benchmarks/tpu_published.json: source, commit, quote, chip, shape, config per "
           "record) against the analytical model's time for the same kernel, shape and config. "
           "Ratio = modelled / measured (< 1: the model is too optimistic). Results: "
           "benchmarks/results/published_compare.json (per point: config, live fraction, MXU / "
           "vector / HBM / overhead split).", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    sm, tables = data["summary"], data["tables"]
    out += ["**The calibrated model** (issue 17; autotune/cost_model.py docstring). Per "
            "TensorCore, the grid as a software pipeline: `time = fill + steps x max(step "
            "overhead + compute, DMA per step) + drain`, `compute = max(MXU, vector) + "
            "MXU_VECTOR_SERIAL x min(MXU, vector)`. MXU: padded FLOPs over peak x achievable "
            "efficiency, dot K and N padded to 128 on every generation (MXU_PAD: the v6e series "
            "at equal FLOPs, head_dim 64 / 128 / 256 at 1.47 / 1.55 / 1.75 ps per score element, "
            "rules out a full 256-wide pass for 64- or 128-deep dots). Vector (new): EUP "
            "elements (exp, rsqrt, div, ...) at `eup_s`, VPU element-ops at `eup_s / "
            "EUP_OVER_VPU`. Step overhead (serial with compute): `step_s` plus `dma_issue_s` per "
            "block DMA. DMA at achievable (not nominal) HBM bandwidth; fill/drain = first input "
            "blocks + last output blocks + 2 DMA latencies. TPU7x: one TensorCore per device, so "
            "no megacore split of its grid (the old model halved its peak when no parallel grid "
            "axis had two blocks). Constants (`CALIBRATION` in cost_model.py):", ""]
    out += _published_constants(data)
    disp = data["model_constants"]["WALLCLOCK_DISPATCH_S"]
    fit, held, al = sm["fit"], sm["held_out"], sm["all"]
    out += ["Published-kernel facts the comparison applies (benchmarks/published_compare.py "
            "docstring; not model fudge): Tokamax's flash and splash kernels skip kv blocks the "
            "causal mask hides, so causal records pass `live_fraction` = visible block pairs / "
            "all for the published blocks; the `return_residuals` variants write the softmax max "
            "and sum broadcast over 128 lanes (the splash kernel's `(heads, seq, NUM_LANES)` "
            "outputs) and XLA then slices lane 0, modelled as a kernel_dsl attention with those "
            "outputs plus a small epilogue kernel; Tokamax's op swaps seq and heads of q, k, v "
            "and the output in XLA around its kernel and its caches time the whole op, so those "
            "records add the four transposes (read + write at the achievable HBM bandwidth); "
            "of the visited block pairs Tokamax's splash kernel masks only the diagonal ones "
            "(its `should_not_mask` path runs whole blocks unmasked), so a causal record is "
            "priced as the unmasked kernel plus that share of what masking every visited block "
            "adds; the JAX guide's `timeit` wall-clock adds a "
            f"host dispatch constant, WALLCLOCK_DISPATCH_S = {disp * 1e6:.0f} us (fitted with the "
            "fit set). GQA is still modelled as MHA (K/V bytes over-counted; no large point is "
            "HBM-bound). Where the publisher's config is unknown (XLA references, splash "
            "microbenchmarks, XLA norm) the model's own best config over a widened space (blocks "
            "up to 4096) is used.", "",
            "**Fit / held-out split.** Fit: the v5e JAX matmul guide tables (plain, "
            "transpose_rhs, fused_relu, XLA) and the Tokamax v5p and v6e flash-attention caches "
            f"({fit['n']} points). Held out, never fitted: every TPU7x table (Tokamax flash "
            "attention, XLA normalization, the splash microbenchmarks) and the v5e block-sparse "
            f"guide's dense reference ({held['n']} points). \"Large\" = measured time of at "
            f"least {data['large_threshold_s'] * 1e3:g} ms ({al['n_large']} of the {al['n']} "
            "points; the issue's 10% goal is judged there).", "",
            "| points | n | median ratio | median abs error | >= 1 ms within 10% | worst >= 1 ms |",
            "|---|---|---|---|---|---|"]

    def srow(label: str, s: dict[str, Any]) -> str:
        return (f"| {label} | {s['n']} | {s['median_ratio']:.2f} | "
                f"{_pct(s['median_abs_err_pct'])} | {s['within_10pct_large']} of {s['n_large']} "
                f"| {_pct(s['worst_abs_err_pct_large'])} |")

    base = data.get("baseline")
    if base:
        out += [srow(f"before (uncalibrated model) {k}", base["summary"][k])
                for k in ("fit", "held_out")]
    out += [srow(f"after {k}", sm[k]) for k in ("fit", "held_out")] + [srow("after, all", al)]
    out += ["", "| published table | split | chip | n | median ratio | min - max | n >= 1 ms | "
            "within 10% | worst >= 1 ms | Spearman (times) | Spearman (rates) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, t in tables.items():
        out.append(f"| {name} | {t['split']} | {t['chip']} | {t['n']} | {t['median_ratio']:.2f} | "
                   f"{t['min_ratio']:.2f} - {t['max_ratio']:.2f} | {t['n_large']} | "
                   f"{t['within_10pct_large']} | {_pct(t['worst_abs_err_pct_large'])} | "
                   f"{_rho(t['spearman'])} | {_rho(t['spearman_rate'])} |")
    out.append("")
    if base:
        bt, ba = base["tables"], base["summary"]["all"]
        b_rates, b_norm = _spearman_ranges(bt, "spearman_rate")
        out += [f"Before (the uncalibrated model, same data, same split): median ratio "
                f"{ba['median_ratio']:.2f} over all points, {ba['within_10pct_large']} of "
                f"{ba['n_large']} large points within 10%, per-table medians "
                f"{_range([t['median_ratio'] for t in bt.values()])}, Spearman (times) "
                f"{_range([t['spearman'] for t in bt.values() if t['spearman'] is not None])}, "
                f"(rates) {b_rates} and {b_norm} for the normalization table.", ""]
    large = sorted((r for r in data["rows"] if r["large"]), key=lambda r: -abs(r["ratio"] - 1))
    worst = large[:8]
    times, t_norm = _spearman_ranges(tables, "spearman")
    rates, r_norm = _spearman_ranges(tables, "spearman_rate")
    reached = al["within_10pct_large"] == al["n_large"]
    out += [f"**Goal {'reached' if reached else 'not fully reached'}.** "
            f"{al['within_10pct_large']} of the {al['n_large']} large points are within 10% (fit "
            f"{fit['within_10pct_large']} of {fit['n_large']}, held out "
            f"{held['within_10pct_large']} of {held['n_large']}); the worst large point is "
            f"{_pct(al['worst_abs_err_pct_large'])} off. Per-table Spearman on times is {times} "
            f"for every attention and matmul table, {t_norm} for the normalization table; on "
            f"rates {rates}, {r_norm} for normalization. The worst large points:", "",
            "| point | split | measured us | modelled us | ratio |", "|---|---|---|---|---|"]
    out += [f"| {r['id']} | {r['split']} | {r['measured_s'] * 1e6:.0f} | {r['model_s'] * 1e6:.0f} "
            f"| {r['ratio']:.2f} |" for r in worst]
    out += ["", _published_why(data, worst), ""]
    out += _published_consequence(data, win)
    out += _published_checked(data)
    out += _published_winners(win)
    return out
