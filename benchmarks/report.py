"""Writes benchmarks/REPORT.md (and its plots) from the benchmark scripts next to it.

    python benchmarks/report.py            # rerun the quick parts, reuse saved slow results
    python benchmarks/report.py --all      # also rerun the slow parts (offline TPU tuning,
                                           # VMEM estimate, strategies, library vs JAX)
    python benchmarks/report.py --skip overhead --skip first_call   # keep those saved timings

Each section states the command behind its figures. Saved results live in benchmarks/results/
(JSON) and the markdown files the slow scripts write; the report says when a section is missing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def _run(script: str, *args: str) -> None:
    print(f"running {script} {' '.join(args)}", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, script), *args], check=True)


def _load(name: str) -> Any:
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _md(name: str) -> str | None:
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    lines = [ln for ln in text.splitlines() if not ln.startswith("# ")]  # drop its title
    return "\n".join("##" + ln if ln.startswith("## ") else ln for ln in lines)  # nest its sections


def section_overhead(data: Any) -> list[str]:
    out = ["## 1. Eager call overhead (measured, this machine's CPU)", "",
           "Command: `python benchmarks/overhead.py --json benchmarks/results/overhead.json`. "
           "A cached `kernel(x, y)` call of `add_where` on (64, 128) f32 against the backend's "
           "compiled runner called directly with the same tensors, and for Pallas against the "
           "generated JAX function called on JAX arrays. Median over many calls; [min - max] "
           "over repeats is the noise.", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    out += [f"Machine: {data['machine']}.", "", "| backend | figure | median us | [min - max] |",
            "|---|---|---|---|"]
    for be, figs in data["overhead"]["backends"].items():
        for k, s in figs.items():
            out.append(f"| {be} | {k.removesuffix('_us')} | {s['median']:.1f} | "
                       f"[{s['min']:.1f} - {s['max']:.1f}] |")
    lib = data.get("library")
    if lib:
        for k, s in lib.items():
            if k.endswith("_us"):
                out.append(f"| library matmul 64x96x80 | {k.removesuffix('_us')} | "
                           f"{s['median']:.1f} | [{s['min']:.1f} - {s['max']:.1f}] |")
        r, o = lib["call_over_kernel"], data["op_over_fast_path"]
        lo = lib.get("op_over_kernel")
        via_op = ("" if lo is None else f"; the library op through `torch.ops` (the dispatcher "
                  f"and the op's autograd kernel) over the same kernel {lo['median']}x "
                  f"[{lo['min']} - {lo['max']}]")
        out += ["", "Ratios from paired runs (the two calls alternate, one timing each, so the "
                "VM's slow spells hit both alike), median [min - max] over repeats: a library "
                f"call over the DSL kernel it launches {r['median']}x [{r['min']} - {r['max']}] "
                f"(goal 1.2x){via_op}; a user kernel through `torch.ops` over its fast path "
                f"{o['median']}x [{o['min']} - {o['max']}] (goal 1.5x)."]
    return out + [""]


def section_first_call(data: Any) -> list[str]:
    out = ["## 2. First-call latency (measured, this machine's CPU; TPU compile by libtpu)", "",
           "Command: `python benchmarks/first_call.py --json benchmarks/results/first_call.json`. "
           "Every DSL kernel the library ops launch (forward and backward, small shapes), per "
           "backend's CPU path: a fresh kernel object traced, rendered, built and run once; the "
           "second run shows which part of the first run is the one-time JIT (Pallas: XLA "
           "compile of the interpreted kernel) and which is the interpreter itself (Triton, "
           "NKI). Medians of fresh objects, [min - max] of the total over them is the noise. "
           "`tpu compile s`: the real Mosaic + XLA:TPU compile of the same kernel and shape "
           "for a compile-only TPU target with the config that target's host would use, in the "
           "check worker (what a TPU host pays once).", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    tpu = f"{data['tpu_target']}_compile_s"
    rows = data["rows"]
    out += [f"Machine: {data['machine']}; {data['repeats']} fresh objects per row.", "",
            *_first_call_summary(rows, tpu, data["tpu_target"]),
            f"| op | kernel (tensor shapes) | backend | trace ms | render ms | build ms | "
            f"first run ms | second run ms | total ms [min - max] | {data['tpu_target']} "
            "compile s |", "|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in data["rows"]:
        ms = {k: f"{r[k] * 1e3:.1f}" for k in ("trace_s", "render_s", "build_s", "first_run_s",
                                                "second_run_s", "total_s", "total_min_s",
                                                "total_max_s")}
        tpu_s = r.get(tpu)
        out.append(f"| {r['op']} | {r['kernel']} ({r['args']}) | {r['backend']} | "
                   f"{ms['trace_s']} | {ms['render_s']} | {ms['build_s']} | {ms['first_run_s']} | "
                   f"{ms['second_run_s']} | {ms['total_s']} [{ms['total_min_s']} - "
                   f"{ms['total_max_s']}] | {'' if tpu_s is None else tpu_s} |")
    return out + [""]


def section_offline(data: Any) -> list[str]:
    out = ["## 3. Offline TPU (modelled time; VMEM from the real compiler)", "",
           "Three views, all offline: the tests' DSL kernels autotuned live (this table), every "
           "library kernel's shipped config, and the library against JAX's own Pallas kernels.",
           "",
           "Command: `python benchmarks/offline_tpu.py --budget 90` (then this report). Each "
           "DSL kernel of tests/dsl_kernels.py is autotuned per TPU generation with the "
           "analytical model "
           "(`autotune/cost_model.py`, calibrated against published TPU measurements in issue "
           "17, see §8: per grid step the larger of step overhead + compute (MXU-padded FLOPs "
           "at the fitted MXU efficiency, vector/EUP work, partly overlapped) and the step's "
           "DMA at achievable HBM bandwidth, plus pipeline fill and drain); the winner is "
           "compiled by libtpu's "
           "compile-only target, which gives the VMEM it needs (the smallest vmem_limit_bytes "
           "it accepts). **Times and % of peak are "
           "modelled, not measured**: no TPU was used. % of peak is against what one kernel can "
           "reach (one TensorCore of TPU7x). Causal attention counts the masked triangle it "
           "still computes. After a cost-model change, `python benchmarks/offline_tpu.py "
           "--rescore` recomputes the modelled columns for the saved winners (tuning seconds and "
           "VMEM stay those of the tuning run).", "",
           "Regenerated after the issue 17 calibration (`KD_CACHE_DIR=<empty dir> python "
           "benchmarks/offline_tpu.py --budget 90`: a fresh tuning cache, so every winner is the "
           "calibrated model's; ~25 min on this 2-core machine, shared: the tuning seconds below "
           "include that contention) and `python benchmarks/shipped_configs.py` (the shipped "
           "configs, which item 4 will retune, re-scored with the calibrated model). Against the "
           "uncalibrated model's run: modelled times are 4-145% higher (v6e / TPU7x flash "
           "attention and softmax most: exp work and step costs now count), and HBM-bound "
           "kernels (layer_norm, softmax on older chips) now pick small row blocks: with "
           "DMA-bound steps the step overhead hides under the DMA and small blocks shorten "
           "pipeline fill and drain; the model has no per-DMA size efficiency to stop that.", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    out += ["| kernel | target | tuned config | modelled us | % peak FLOP/s | % HBM BW | VMEM MiB | "
            "compiles | tuning s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        if "config" not in r:
            out.append(f"| {r['kernel']} | {r['target']} | {r.get('error')} | | | | | | |")
            continue
        cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        out.append(f"| {r['kernel']} | {r['target']} | {cfg} | {r['model_us']} | "
                   f"{r['pct_peak']} | {r.get('pct_hbm', '')} | {r['vmem_mib']} | {r['compiles']} | "
                   f"{r['tune_s']} |")
    plots = sorted(p for p in os.listdir(os.path.join(HERE, "plots")) if p.startswith("roofline"))\
        if os.path.isdir(os.path.join(HERE, "plots")) else []
    out += [""] + [f"![{p}](plots/{p})" for p in plots]
    out += ["", *section_shipped(_load("shipped_configs.json"))]
    lib = _md("library_tpu.md")
    out += ["### Library kernels against JAX's own Pallas kernels", "",
            "Not regenerated after the issue 17 calibration: this table's JAX side is modelled "
            "by benchmarks/pallas_call_model.py, which still uses the old formula (max(MXU, HBM) "
            "+ steps x 0.35 us), so rerunning it would compare two different models. Its figures "
            "below are from the uncalibrated model.", "",
            lib if lib else "(benchmarks/library_tpu.md not generated yet)"]
    return out + [""]


def _first_call_summary(rows: list[dict[str, Any]], tpu: str, target: str) -> list[str]:
    if not rows:
        return []
    ours = max(r["trace_s"] + r["render_s"] + r["build_s"] for r in rows)
    jit = [r["first_run_s"] - r["second_run_s"] for r in rows if r["backend"] == "pallas"]
    tpu_s = [r[tpu] for r in rows if r.get(tpu) is not None]
    parts = [f"kernel_dsl's own stages (trace + render + build) take at most {ours * 1e3:.1f} ms "
             "per kernel; the rest of a first call is the backend's"]
    if jit:
        parts.append(f"JAX's jit of the interpreted Pallas kernel ({min(jit) * 1e3:.0f}-"
                     f"{max(jit) * 1e3:.0f} ms, once)")
    parts.append("the interpreters' run time (every call)")
    if tpu_s:
        parts.append(f"on a TPU host the Mosaic compile ({min(tpu_s):.2f}-{max(tpu_s):.2f} s on "
                     f"{target}, once per shape and config)")
    return ["In short: " + ", ".join(parts) + ".", ""]


def _shape_label(r: dict[str, Any]) -> str:
    shapes = ["x".join(map(str, s)) for s in r["shapes"]]
    return " @ ".join(shapes[:2]) if r["kernel"] == "matmul_kernel" else shapes[0]


def section_shipped(data: Any) -> list[str]:
    out = ["### Every library kernel: its shipped autotuned config per target", "",
           "Command: `python benchmarks/shipped_configs.py` (seconds). The winners of "
           "`python -m kernel_dsl.kernels.tune` (the offline autotuner over the library's DSL "
           "kernels at its common bf16 shapes; `kernels/configs/<target>.json`) re-scored with "
           "the current cost model. Each cell: **modelled** time in us, then % of peak MXU "
           "FLOP/s (`mxu`) or, for kernels the model says are bandwidth-bound, % of HBM "
           "bandwidth (`hbm`), then the VMEM MiB the winner needs by libtpu's compile-only target "
           "(the smallest vmem_limit_bytes it accepts, to within 3% or 24 KiB; no run-to-run "
           "noise; stored with the config, re-measured by `python -m kernel_dsl.kernels.tune "
           "--refresh-vmem`, which fails if a config no longer compiles; `any`: the compiler "
           "accepts any limit for this kernel, seen for single-step grids on TPU7x). "
           "Modelled figures are deterministic. JAX ships no Pallas TPU "
           "softmax or norm kernels to compare these with; attention and matmul are compared "
           "with JAX's kernels in the next table.", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    targets = sorted({r["target"] for r in data["rows"]})
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in data["rows"]:
        bound = "mxu" if r["pct_peak"] >= r["pct_hbm"] else "hbm"
        pct = r["pct_peak"] if bound == "mxu" else r["pct_hbm"]
        vmem = "any" if r["vmem_mib"] is None else f"{r['vmem_mib']:.1f}"
        key = (r["kernel"], _shape_label(r))
        cells.setdefault(key, {})[r["target"]] = f"{r['model_us']:,.1f} · {pct:.0f}% {bound} · {vmem}"
    out += ["| kernel | shape | " + " | ".join(targets) + " |",
            "|---|---|" + "---|" * len(targets)]
    for (kernel, shape), by_target in sorted(cells.items()):
        out.append(f"| {kernel} | {shape} | " + " | ".join(by_target.get(t, "") for t in targets)
                   + " |")
    return out + [""]


def section_fresh_process() -> list[str]:
    data = _load("fresh_process.json")
    if data is None:
        return []
    out = ["### A second fresh process", "",
           "Command: `python benchmarks/fresh_process.py --json benchmarks/results/"
           "fresh_process.json`. New Python processes, each calling matmul, causal flash "
           "attention and RMS norm forward and backward once (Pallas CPU path); run 1 starts "
           "from an empty cache directory, later runs reuse what run 1 left there: the "
           "exported (lowered) kernels and JAX's persistent compilation cache. What a warm "
           "start still pays is importing JAX, kernel_dsl's tracing and rendering, and loading "
           "each kernel from the caches. "
           f"Machine: {data['machine']}.", "",
           "| run | cache | import s | first calls s |", "|---|---|---|---|"]
    out += [f"| {r['run']} | {r['cache']} | {r['import_s']} | {r['first_calls_s']} |"
            for r in data["runs"]]
    return out + ["", f"Warm first calls are {data['speedup']}x faster than cold ones.", ""]


def section_llama_block() -> list[str]:
    data = _load("llama_block.json")
    out = ["## 6. A Llama block's training step (measured, this machine's CPU)", "",
           "Command: `python benchmarks/llama_block.py --json benchmarks/results/llama_block.json`. "
           "One decoder block of library ops (RMS norm, q/k/v/o matmuls, RoPE in torch, causal "
           "grouped-query flash attention, a SiLU-gated MLP with the matmul's silu epilogue); "
           "one step is forward, loss, backward and an SGD update. Our kernels run on the "
           "Pallas CPU path (interpret mode), torch's on its own CPU kernels, so the step-time "
           "ratio is the cost of interpreting on CPU, not a TPU figure.", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    d, st = data["dims"], data["step"]
    out += [f"Machine: {data['machine']}. Block: hidden {d['hidden']}, {d['heads']} heads, "
            f"{d['kv_heads']} key/value heads of {d['head_dim']}, MLP {d['mlp']}, batch "
            f"{d['batch']}.", "", f"### Step time at sequence length {st['seq']}", "",
            "| mode | ours s | torch s | ours / torch |", "|---|---|---|---|"]
    for mode in ("eager", "compiled"):
        r = st[mode]
        out.append(f"| {mode} | {r['ours_s']:.4f} | {r['torch_s']:.4f} | {r['ratio']:.1f}x |")
    b = data["builds"]
    out += ["", "`compiled` is `torch.compile(dynamic=True)` with the aot_eager backend (Inductor "
            "would compile torch's side into C++ while ours stays interpreted).", "",
            "### Kernel builds per new sequence length", "",
            "Each row starts with no kernel built in the process; a step at each length in turn "
            "(the caches on disk are warm, so a build is quick; what counts is how many).", "",
            "| buckets | mode | " + " | ".join(str(n) for n in b["lengths"]) + " |",
            "|---|---|" + "---|" * len(b["lengths"])]
    for key, row in b.items():
        if key == "lengths":
            continue
        policy, mode = key.split("_")
        out.append(f"| {policy} | {mode} | " + " | ".join(str(n) for n in row["builds"]) + " |")
    fp = data["fresh_process"]
    cold = fp[0]["first_step_s"]
    warm = min(r["first_step_s"] for r in fp[1:])
    out += ["", "With buckets (`pow2`, the default) a new length inside a bucket builds nothing; "
            "without them every length builds every kernel of the step.", "",
            "### The first step of a fresh process", "",
            "New Python processes, each importing the block and running one training step; run "
            "1 with an empty cache directory, later runs with what run 1 left.", "",
            "| run | cache | import s | first step s | kernels built (warm: loaded from the caches) |",
            "|---|---|---|---|---|"]
    out += [f"| {r['run']} | {r['cache']} | {r['import_s']} | {r['first_step_s']} | "
            f"{r['kernel_builds']} |" for r in fp]
    out += ["", f"A warm first step is {cold / warm:.1f}x faster than a cold one (goal 5x). "
            "Imports are timed apart: torch, JAX and kernel_dsl take the same in both.", ""]
    return out


def section_autotune() -> list[str]:
    out = ["## 4. Autotuning", ""]
    for name, title in (("autotune_strategies.md", "Search strategy efficiency"),
                        ("vmem_estimate.md", "VMEM estimate vs the compiler")):
        text = _md(name)
        out += [f"### {title}", "", text if text else f"(benchmarks/{name} not generated yet)", ""]
    budget = _load("autotune_budget.json")
    if budget:
        out += ["### Budgets hold with a hanging candidate", "",
                "Command: `python benchmarks/autotune_budget.py --json "
                "benchmarks/results/autotune_budget.json`. `add_where`, a fresh cache per run, "
                "one planted candidate that never finishes: on the CPU evaluator its kernel "
                "sleeps inside the candidate worker; on the TPU-model evaluator every compile of "
                "the model's top-ranked configs hangs in the libtpu worker. The contract: wall "
                "time at most budget + one candidate timeout; a hung candidate never wins. "
                f"Machine: {budget['machine']}.", "",
                "| evaluator | target | budget s | timeout s | wall s | bound s | evaluated | "
                "skipped | best |", "|---|---|---|---|---|---|---|---|---|"]
        for r in budget["runs"]:
            skipped = ", ".join(f"{n} {k}" for k, n in sorted(r["failures"].items()))
            out.append(f"| {r['evaluator']} | {r['target']} | {r['budget_s']} | {r['timeout_s']} | "
                       f"{r['wall_s']} | {r['bound_s']} | {r['evaluated']} | {skipped} | "
                       f"{r['best']} |")
        out.append("")
    off = _load("offline_tpu.json")
    if off:
        out += ["Tuning wall time per kernel and target: the `tuning s` column of section 3 "
                "(model search + real compiles + a CPU check of the winner, on this 2-core "
                "machine; one run each, so wall time with whatever else the machine ran: expect "
                "tens of percent between runs).", ""]
    return out


def section_gpu() -> list[str]:
    data = _load("gpu.json")
    out = ["## 5. GPU (Triton backend)", ""]
    if data is None:
        return out + ["No GPU has been available to this project yet: `benchmarks/gpu.py` has "
                      "only run in its CPU dry mode (correctness through the Triton "
                      "interpreter, in CI). When a GPU is lent, `python benchmarks/gpu.py "
                      "--json benchmarks/results/gpu.json` fills this section.", ""]
    return out + ["```", json.dumps(data, indent=1)[:6000], "```", ""]


def section_helion() -> list[str]:
    data = _load("helion_side_by_side.json")
    out = ["## 7. Side by side with Helion (measured, this machine's CPU, Pallas interpret)", "",
           "Command: `pip install helion; python benchmarks/helion_side_by_side.py --json "
           "benchmarks/results/helion_side_by_side.json`. One kernel source per row, in Helion's "
           "style, run by both projects (`lang` bound to `helion.language` under "
           "`@helion.kernel`, or to `kernel_dsl` under `@kd.kernel`): the port is the rename. "
           "Fresh processes; every result checked against torch.", ""]
    if data is None:
        return out + ["(no results saved)", ""]
    v = data["versions"]
    out += [f"Machine: {data['machine']}; torch {v['torch']}, jax {v['jax']}, helion {v['helion']}.",
            "", "| kernel | lines (both) | first call s: kd / Helion | cached call ms: kd / Helion "
            "| import s: kd / Helion |", "|---|---|---|---|---|"]
    for name, row in data["kernels"].items():
        kd, hl = row["kernel_dsl"], row["helion"]
        if "error" in kd or "error" in hl:
            out.append(f"| {name} | {row['lines']} | {kd.get('error', '')} {hl.get('error', '')} | | |")
            continue
        out.append(f"| {name} | {row['lines']} | {kd['first_s']:.2f} / {hl['first_s']:.2f} "
                   f"({hl['first_s'] / kd['first_s']:.1f}x) | {kd['cached_ms']:.2f} / "
                   f"{hl['cached_ms']:.0f} | {kd['import_s']:.1f} / {hl['import_s']:.1f} |")
    if data.get("autotune"):
        out += ["", "Autotuning to a result on CPU, same budget for both:", "",
                "| kernel | kd s (configs) | Helion s |", "|---|---|---|"]
        for name, row in data["autotune"].items():
            kd, hl = row["kernel_dsl"], row["helion"]
            kd_s = kd.get("error") or f"{kd['seconds']:.1f} ({kd['configs_tried']})"
            hl_s = hl.get("error") or f"{hl['seconds']:.1f}"
            out.append(f"| {name} | {kd_s} | {hl_s} |")
    out += ["", "Read with care: Helion's CPU interpret launcher re-traces and re-lowers the JAX "
            "program on every call (cProfile of a cached call: pjit `cache_miss` -> "
            "`lower_sharding_computation` each time, inside `jax._src.pallas.mpmd`), so its cached "
            "call and its autotuner's timings measure that, not the kernel Helion generates. The "
            "cached-call column says nothing about TPU kernel quality; first-call time and lines "
            "are the fair comparisons here. Helion's autotuner (`autotune_effort='quick'`, "
            "`autotune_budget_seconds` as ours) logs that its budget is spent but keeps "
            "benchmarking at that ~1 s a call, so it had not returned when the script stopped "
            "waiting. Helion's autotune also needs `JAX_PLATFORMS=cpu` on a host with libtpu "
            "installed: its profiler otherwise loads libtpu's profiler plugin and segfaults.", ""]
    return out


# §8's per-target provenance of the calibration constants (how each row was obtained: analysis,
# stated in autotune/cost_model.py's CALIBRATION comment); the figures come from the saved JSON
_CAL_PROVENANCE = {
    "tpu-v4": "v5p's (no published point)",
    "tpu-v5e": "fitted; eup_s = v5p's x 229.5/197 (per-core peak ratio; matmul points cannot see "
               "it)",
    "tpu-v5p": "fitted",
    "tpu-v6e": "fitted",
    "tpu-v7x": "held out, not fitted: v6e's, eup_s x 918/1153.5 (per-core peak ratio)",
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
                  f"{mc['MXU_VECTOR_SERIAL']:g}; dma_latency_s "
                  f"{' / '.join(f'{x * 1e6:g}' for x in lat)} us (not identifiable). `python "
                  "benchmarks/published_compare.py --fit` fits them by least squares on "
                  "log(modelled / measured) over the fit set (points of at least 1 ms weighted 1, "
                  "smaller ones 0.3; weak log-priors keep constants the data cannot see physical) "
                  "and prints them; they are pasted, rounded, into cost_model.py. "
                  f"{held_hbm}: no published point is HBM-bound at large size, and fitting it "
                  "(calibration study: 0.68 on v6e, 0.76 on v5p) only absorbed small-shape effects "
                  "of Tokamax's kernel without improving the fit (118 large points within 10% "
                  f"fitted in that study, {n_large} held); the issue's \"achievable HBM bandwidth "
                  "per generation\" is therefore not determined by this data. Tried and dropped in "
                  "the calibration study: a fraction of DMA time exposed on compute-bound steps "
                  "(fits the attention caches a little better, puts the v5e 8192^3 matmul 30% "
                  "over); a cost per dot operand element read from VMEM (120 of 165 within 10%, "
                  "but it made every v6e / TPU7x matmul operand-bound at ~35% of peak, which "
                  "nothing published supports).", ""]


def _published_why(data: dict[str, Any], worst: list[dict[str, Any]]) -> str:
    """The analysis of the worst points; every figure in it from the saved results."""
    rows = {r["id"]: r for r in data["rows"]}
    tables, cal = data["tables"], data["model_constants"]["calibration"]
    over = [r for r in worst if r["ratio"] > 1 and _shape_of(r["id"]) in ("32x512x32x64",
                                                                         "16x1024x32x64")]
    under = [r for r in worst if r["ratio"] < 1 and r["id"].endswith("-res")]

    def shapes(rs: list[dict[str, Any]]) -> str:
        return ", ".join(dict.fromkeys(_shape_of(r["id"]) for r in rs))

    def err(rs: list[dict[str, Any]]) -> str:
        return _range([100 * abs(r["ratio"] - 1) for r in rs], ".0f") if rs else "-"

    blocks = [b for r in over for b in r["config"]["block_sizes"]]
    fa = "tokamax/v6e/pallas_mosaic_tpu_flash_attention/"
    hd = [rows.get(fa + s) for s in ("1x16384x32x64-kv32", "1x16384x16x128-kv16",
                                     "1x16384x8x256-kv8")]
    hd_s = " / ".join("-" if r is None else f"{r['ratio']:.2f}" for r in hd)
    c4 = rows.get(fa + "4x4096x32x64-kv32-causal")
    v7 = tables.get("tokamax_autotune_cache_v7x_pallas_mosaic_tpu_flash_attention")
    norm = tables.get("tokamax_autotune_cache_v7x_normalization")
    norm_rows = [r for r in data["rows"] if r["table"] == "tokamax_autotune_cache_v7x_normalization"]
    eup_ratio = cal["tpu-v6e"]["eup_s"] / cal["tpu-v7x"]["eup_s"]
    parts = [
        f"Why: (1) short sequences with many small steps ({shapes(over)}: "
        f"{_range([r['model_steps'] for r in over], 'd')} grid steps of "
        f"{_range(blocks, 'd')} blocks, {_range([r['measured_s'] * 1e3 for r in over], '.1f')} "
        f"ms) are over-predicted by {err(over)}%: one step-overhead constant per generation, "
        "fitted mostly on long sequences, is too high for them, while (2) the small `-res` points "
        f"({shapes(under)}) are under by {err(under)}%: returning residuals costs Tokamax "
        "+25-60% there, more than the lane-broadcast outputs and epilogue explain. (3) head_dim "
        f"is only roughly right (v6e 1x16384 at head_dim 64 / 128 / 256: {hd_s}; v6e "
        f"4x4096x32x64-causal {'-' if c4 is None else format(c4['ratio'], '.2f')}); Tokamax "
        "computes in `block_kv_compute` sub-blocks with their own softmax rescale, which "
        "kernel_dsl's one-level blocking does not represent."]
    if v7:
        v7_off = 100 * (v7["median_ratio"] - 1)
        parts.append(
            f"(4) TPU7x is {abs(v7_off):.0f}% {'under' if v7_off < 0 else 'over'} (held-out "
            f"median {v7['median_ratio']:.2f}): the transfer assumes v7x's vector units are "
            f"v6e's at the per-core peak ratio ({eup_ratio:.3f}x). Diagnostic from the "
            "calibration study only, not applied (it would fit the held-out set): with v7x's "
            "eup_s 5% higher the v7x flash table's median is 0.97 and 41 of its 47 large points "
            "fall within 10%.")
    if norm and norm_rows:
        top_ms = math.ceil(max(r["measured_s"] for r in norm_rows) * 1e4) / 10
        parts.append(
            f"(5) The XLA normalization points (all under {top_ms:g} ms, so not \"large\") are "
            f"{norm['min_ratio']:.2f}-{norm['max_ratio']:.2f}: kernel_dsl's layer_norm is "
            "HBM-bound in the model, while XLA's measured rates for 128-wide rows are 0.65-0.7 "
            "TB/s (under a fifth of a TPU7x TensorCore's HBM bandwidth) and 64-wide rows are "
            "faster per element; the model orders them the wrong way on rate (Spearman "
            f"{_rho(norm['spearman_rate'])}). Nothing in the data says what bounds XLA's fusion "
            "there; no constant was bent to it.")
    return " ".join(parts)


def _published_consequence(data: dict[str, Any]) -> list[str]:
    """What the calibrated model means for the autotuner: section 3's 8192^3 matmul winners."""
    off = _load("offline_tpu.json")
    mm = {r["target"]: r for r in (off or {}).get("rows", [])
          if r.get("kernel") == "matmul bf16 8192^3" and "config" in r}
    if not all(t in mm for t in ("tpu-v5e", "tpu-v6e", "tpu-v7x")):
        return []
    from kernel_dsl.lowering.pallas.targets import TARGETS

    def pct(t: str) -> str:  # % of what one kernel can reach (one TensorCore of TPU7x)
        peak = TARGETS[t].peak_bf16_flops / (2 if t == "tpu-v7x" else 1)
        return f"{100 * mm[t]['flops'] / (mm[t]['model_us'] * 1e-6) / peak:.0f}%"

    c6 = mm["tpu-v6e"]["config"]
    hbm = data["model_constants"]["calibration"]["tpu-v6e"]["hbm_efficiency"]
    return [f"Consequence for the autotuner: for a bf16 8192^3 matmul the model's best config "
            "inside the project's Pallas space (blocks capped at 512 / 1024, "
            f"lowering/pallas/space.py; section 3's winners) reaches {pct('tpu-v5e')} of peak on "
            f"v5e and {pct('tpu-v7x')} on TPU7x, but {pct('tpu-v6e')} on v6e "
            f"({c6['block_sizes']}, {c6.get('loop_mode', '')}), against 89% with 2048-4096 "
            "blocks ([2048, 2048, 4096], calibration study): at "
            f"{hbm:g} HBM efficiency 512-row tiles are bandwidth-bound on v6e. The published "
            "winners use 2048-4096 blocks too. Left for item 4 (shipped configs) and a space "
            "change; space.py was not changed.", ""]


def _published_checked(data: dict[str, Any]) -> list[str]:
    """The test's thresholds (tests/test_cost_model_calibration.py), with today's counts if
    they moved."""
    stated = {"fit": (71, 101), "held_out": (34, 47)}  # the test's parametrization
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
            "TPU7x points within 15%, four fit points within 10%; the measured order of five v6e "
            "points; the causal live fraction. Nothing here ran on a TPU: the model is analytical "
            "and the measurements are the publishers'.", ""]


def section_published() -> list[str]:
    data = _load("published_compare.json")
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
            "outputs plus a small epilogue kernel; the JAX guide's `timeit` wall-clock adds a "
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
    out += _published_consequence(data)
    out += _published_checked(data)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--all", action="store_true", help="rerun the slow benchmarks too")
    ap.add_argument("--skip", action="append", default=[], choices=["overhead", "first_call"],
                    help="reuse this quick part's saved results (wall-clock figures from a quiet "
                         "machine are worth more than fresh ones from a loaded one)")
    ns = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    for part in ("overhead", "first_call"):
        if part not in ns.skip:
            _run(f"{part}.py", "--json", os.path.join(RESULTS, f"{part}.json"))
    _run("shipped_configs.py")
    if ns.all:
        _run("offline_tpu.py", "--budget", "90")
        _run("vmem_estimate.py")
        _run("autotune_strategies.py")
        if os.path.exists(os.path.join(HERE, "library_tpu.py")):
            _run("library_tpu.py")
    text = "\n".join([
        "# kernel_dsl benchmarks",
        "",
        f"Generated by `python benchmarks/report.py` on {datetime.date.today()} "
        f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}). "
        "Measured figures are wall-clock on this CPU-only machine; TPU figures are modelled "
        "by the analytical cost model with VMEM from the real TPU compiler; each section says "
        "which.",
        "",
        *section_overhead(_load("overhead.json")),
        *section_first_call(_load("first_call.json")),
        *section_fresh_process(),
        *section_offline(_load("offline_tpu.json")),
        *section_autotune(),
        *section_gpu(),
        *section_llama_block(),
        *section_helion(),
        *section_published(),
    ])
    with open(os.path.join(HERE, "REPORT.md"), "w") as f:
        f.write(text)
    print("wrote benchmarks/REPORT.md", file=sys.stderr)


if __name__ == "__main__":
    main()
