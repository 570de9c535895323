"""Writes benchmarks/REPORT.md (and its plots) from the benchmark scripts next to it.

    python benchmarks/report.py            # rerun the quick parts, reuse saved slow results
    python benchmarks/report.py --all      # also rerun the slow parts (offline TPU tuning,
                                           # VMEM estimate, strategies, library vs JAX)

Each section states the command behind its figures. Saved results live in benchmarks/results/
(JSON) and the markdown files the slow scripts write; the report says when a section is missing.
"""
from __future__ import annotations

import argparse
import datetime
import json
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
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# "))  # drop its title


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
    out += ["", "## 2. First-call latency (measured)", "",
            "Same command: trace, render, build and JIT + first run of a fresh kernel object "
            "(Pallas CPU path).", "", "| kernel | trace s | render s | build s | jit + run s | "
            "total s |", "|---|---|---|---|---|---|"]
    for name, r in data["first_call"].items():
        out.append(f"| {name} | {r['trace_s']} | {r['render_s']} | {r['build_s']} | "
                   f"{r['jit_and_first_run_s']} | {r['total_s']} |")
    return out + [""]


def section_offline(data: Any) -> list[str]:
    out = ["## 3. Offline TPU (modelled time; VMEM from the real compiler)", "",
           "Command: `python benchmarks/offline_tpu.py --budget 90` (then this report). Each "
           "kernel is autotuned per TPU generation with the analytical model "
           "(`autotune/cost_model.py`: MXU-padded FLOPs, HBM bytes of the grid's block "
           "sequence, per-step overhead, roofline); the winner is compiled by libtpu's "
           "compile-only target, which reports the VMEM it allocates. **Times and % of peak are "
           "modelled, not measured**: no TPU was used. % of peak is against what one kernel can "
           "reach (one TensorCore of TPU7x). Causal attention counts the masked triangle it "
           "still computes. After a cost-model change, `python benchmarks/offline_tpu.py "
           "--rescore` recomputes the modelled columns for the saved winners (tuning seconds and "
           "VMEM stay those of the tuning run).", ""]
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
    lib = _md("library_tpu.md")
    out += ["", "### Library kernels against JAX's own Pallas kernels", "",
            lib if lib else "(benchmarks/library_tpu.md not generated yet)"]
    return out + [""]


def section_autotune() -> list[str]:
    out = ["## 4. Autotuning", ""]
    for name, title in (("autotune_strategies.md", "Search strategy efficiency"),
                        ("vmem_estimate.md", "VMEM estimate vs the compiler")):
        text = _md(name)
        out += [f"### {title}", "", text if text else f"(benchmarks/{name} not generated yet)", ""]
    off = _load("offline_tpu.json")
    if off:
        out += ["Tuning wall time per kernel and target: the `tuning s` column of section 3 "
                "(model search + real compiles + a CPU check of the winner, on this 2-core "
                "machine).", ""]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--all", action="store_true", help="rerun the slow benchmarks too")
    ns = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    _run("overhead.py", "--json", os.path.join(RESULTS, "overhead.json"))
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
        *section_offline(_load("offline_tpu.json")),
        *section_autotune(),
        *section_gpu(),
    ])
    with open(os.path.join(HERE, "REPORT.md"), "w") as f:
        f.write(text)
    print("wrote benchmarks/REPORT.md", file=sys.stderr)


if __name__ == "__main__":
    main()
