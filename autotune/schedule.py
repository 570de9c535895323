"""A schedule-based TPU time estimate: the compiler's own VLIW bundle schedule (issue 17, item 2).

For a Pallas kernel, config and TPU target, `bundle_profile` compiles the kernel with libtpu's
compile-only target in a fresh subprocess with `--xla_jf_dump_to=<tmp dir>` in LIBTPU_INIT_ARGS
(the flag is read only when libtpu initialises), finds the kernel body's
`<fingerprint>-_lambda_.1-NN-final_bundles.txt`, and parses it (docs/schedule_evaluator.md):

- one line per VLIW bundle: `<addr> <marker>: <'>' x loop depth> { op ;; op ... }`, markers
  LB (loop body start), PF (predicated-region fallthrough: the target of a forward branch), ...
- a loop is the run of bundles from an `LB` bundle at depth d while the depth stays >= d; its
  trip count is the immediate of its `scmp.ge.s32 %s, N /* loop exit test */` (counter from 0).
  The outermost loop is the Pallas grid pipeline: it runs grid steps + 2 iterations (the
  prologue / epilogue stages of the software pipeline), an inner `lax.fori_loop` its own trips.
- forward `sbr.rel (%p) target = $regionN` branches skip the bundles up to region N's start:
  the `pl.when` bodies (init / finalize of a reduction), the DMA issue blocks, and one region
  that guards the whole compute on the pipeline's prologue / epilogue iterations.

`schedule_estimate` turns that into seconds: per grid step, the steady-state bundles (the grid
loop body with inner loops times their trips, less the `pl.when` regions, which run once per
sweep of the innermost `arbitrary` grid axis and are added at that rate) over the clock; then
`max(compute, DMA)` per step with the DMA bytes, bandwidth and fill / drain of the analytical
model (autotune/cost_model.py), plus the bundles outside the grid loop. Modelled seconds, never a
measurement. Cost per candidate: one libtpu compile in a fresh process (~5-10 s, mostly process
start and libtpu load; see docs/schedule_evaluator.md).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kernel_dsl.config import Config
from kernel_dsl.ir import KernelIR

from . import cost_model

# TensorCore clocks (Hz): Google publishes none. For v4 / v5e / v5p each is DERIVED as peak bf16
# FLOP/s per TensorCore / (MXUs per TensorCore x 128 x 128 MACs x 2), from the public peaks
# (cloud.google.com/tpu/docs: v4 275, v5e 197, v5p 459 TFLOP/s per chip; v4 and v5p have two
# TensorCores) and MXU counts (the v5e and v5p docs: four MXUs per TensorCore; the compiler's
# dumps name mxu0..mxu3 on v4, v5e and v5p). Cross-check from the dumps themselves: a 512^3 bf16
# matmul step schedules 2,149 / 2,006 / 2,045 steady bundles on v4 / v5e / v5p against 2,048 MXU
# cycles at these clocks (docs/schedule_evaluator.md). v4's 1.05 GHz also matches the TPU v4
# paper's 1050 MHz (recalled, not re-checked here).
# v6e / TPU7x: NOT KNOWN. The same derivation gives 3.5 GHz for v6e (docs: two 256x256 MXUs per
# TensorCore, 918 TFLOP/s), but its 512^3 step schedules only 803 bundles, which at 3.5 GHz is
# 1.27x the published peak: a bundle there is not one MXU pass of a 256-wide row, so the clock
# cannot be derived this way. The dumps bound it from above (bundles x peak / FLOPs): v6e
# <= 2.75 GHz, TPU7x <= 2.48 GHz. Without a clock those targets fall back to the analytical model.
CLOCK_HZ: dict[str, float] = {
    "tpu-v4": 275e12 / 2 / (4 * 128 * 128 * 2),  # 1.049 GHz (derived)
    "tpu-v5e": 197e12 / 1 / (4 * 128 * 128 * 2),  # 1.503 GHz (derived)
    "tpu-v5p": 459e12 / 2 / (4 * 128 * 128 * 2),  # 1.751 GHz (derived)
}
KERNEL_NAME = "_lambda_"  # kernel_dsl's Pallas kernels compile as jit(<lambda>): `_lambda_.1`
COMPILE_TIMEOUT_S = 300.0

_BUNDLE = re.compile(r"^\s*(0x[0-9a-f]+|\d+)\s+([A-Z]{2})?\s*:\s*(>*)\s*\{")
_EXIT = re.compile(r"scmp\.ge\.s32\.totalorder %s\w+, (\d+) /\* loop exit test \*/")
_BRANCH = re.compile(r"sbr\.rel \((!?)%p\w+\) target = \$region(\d+)")
_REGION_START = re.compile(r"(?:Start|Start/End empty) region (\d+)\b")


class ScheduleDumpError(RuntimeError):
    """The compiler's dump is missing or not in the form this parser reads."""


class CompileFailed(ScheduleDumpError):
    """The compile itself failed: the config does not build for the target (no dump at all)."""


@dataclass
class Loop:
    start: int  # index of its first bundle
    end: int  # index of its last bundle (inclusive)
    depth: int
    trips: int | None  # from its loop exit test; None if not found
    bundles: int = 0  # static bundles in its body (inner loops counted once)


@dataclass
class Branch:
    at: int  # bundle index of the branch
    target: int  # bundle index where the skipped region ends (its target region starts)
    bundles: int  # static bundles skipped when taken


@dataclass
class Schedule:
    total: int  # "total scheduled bundles" (the analysis file), static
    bundles: list[int]  # per bundle: loop depth
    loops: list[Loop] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)


def parse_final_bundles(text: str, total: int | None = None) -> Schedule:
    """The bundle / loop / forward-branch structure of a `final_bundles.txt` dump."""
    depths: list[int] = []
    lines: list[str] = []
    markers: list[str | None] = []
    for line in text.splitlines():
        m = _BUNDLE.match(line)
        if m:
            depths.append(len(m.group(3)))
            markers.append(m.group(2))
            lines.append(line)
        elif lines:
            lines[-1] += "\n" + line  # a bundle's comment runs over several lines
    if not depths:
        raise ScheduleDumpError("no bundle lines (`<addr> : { ... }`) in the final_bundles dump")
    # empty bundles (`{}`: nops, branch delay slots) carry no depth marks: they take the smaller
    # depth of their non-empty neighbours
    empty = [re.search(r"\{\s*\}", ln.split("\n")[0]) is not None for ln in lines]
    prev, nxt = [0] * len(depths), [0] * len(depths)
    last = 0
    for i in range(len(depths)):
        prev[i] = last
        if not empty[i]:
            last = depths[i]
    last = 0
    for i in reversed(range(len(depths))):
        nxt[i] = last
        if not empty[i]:
            last = depths[i]
    depths = [min(prev[i], nxt[i]) if empty[i] else d for i, d in enumerate(depths)]
    sched = Schedule(total if total is not None else len(depths), depths)
    for i, (d, mk) in enumerate(zip(depths, markers)):
        if mk != "LB":
            continue
        j = i
        while j + 1 < len(depths) and depths[j + 1] >= d:
            j += 1
        trips = None
        for k in range(i, j + 1):
            if depths[k] != d:
                continue
            em = _EXIT.search(lines[k])
            if em:
                trips = int(em.group(1))
                break
        sched.loops.append(Loop(i, j, d, trips, j - i + 1))
    region_at: dict[int, int] = {}
    for i, line in enumerate(lines):
        for rm in _REGION_START.finditer(line):
            region_at.setdefault(int(rm.group(1)), i)
    for i, line in enumerate(lines):
        for bm in _BRANCH.finditer(line):
            tgt = region_at.get(int(bm.group(2)))
            if tgt is not None and tgt > i + 1:  # forward: a skipped region (back-edges: loops)
                sched.branches.append(Branch(i, tgt, tgt - i - 1))
    return sched


def _dynamic(sched: Schedule, lo: int, hi: int, skip: list[Branch]) -> float:
    """Bundles executed in [lo, hi] with inner loops times their trips, skipping `skip`."""
    weight = [1.0] * len(sched.bundles)
    for lp in sched.loops:
        if lp.trips:
            for k in range(lp.start, lp.end + 1):
                weight[k] *= lp.trips
    dropped = set()
    for b in skip:
        dropped.update(range(b.at + 1, b.target))
    return sum(weight[k] for k in range(lo, hi + 1) if k not in dropped)


def read_dump(dump_dir: str, kernel: str = KERNEL_NAME) -> tuple[Schedule, dict[str, str]]:
    """Parse the kernel body's final bundles from a libtpu dump directory."""
    ana = sorted(glob.glob(os.path.join(dump_dir, f"*-{kernel}.*-schedule-analysis_final_bundles.txt")))
    fin = sorted(f for f in glob.glob(os.path.join(dump_dir, f"*-{kernel}.*-final_bundles.txt"))
                 if "schedule-analysis" not in f)
    if not ana or not fin:
        raise ScheduleDumpError(
            f"no `*-{kernel}.*-schedule-analysis_final_bundles.txt` / `-final_bundles.txt` in "
            f"{dump_dir!r} ({len(os.listdir(dump_dir)) if os.path.isdir(dump_dir) else 0} files):"
            " was LIBTPU_INIT_ARGS=--xla_jf_dump_to set before libtpu loaded, and did the kernel"
            " compile?")
    if len(ana) > 1:
        raise ScheduleDumpError(f"{len(ana)} kernel programs named {kernel} in {dump_dir!r}: "
                                "one kernel per compile expected")
    with open(ana[0]) as f:
        m = re.search(r"total scheduled bundles:\s*(\d+)", f.read())
    if not m:
        raise ScheduleDumpError(f"{ana[0]}: no 'total scheduled bundles: N' line")
    with open(fin[0]) as f:
        sched = parse_final_bundles(f.read(), int(m.group(1)))
    return sched, {"analysis": os.path.basename(ana[0]), "bundles": os.path.basename(fin[0])}


def _compile_with_dump(gen: Any, specs: list[tuple[list[int], str]], topology: str,
                       dump_dir: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)  # a CPU-only parent must not keep libtpu from loading
    # --logtostderr: libtpu otherwise leaves log files in /tmp/tpu_logs per process (check.py)
    logs = "" if "TPU_LOG_DIR" in env else " --logtostderr"
    env.update(TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
               LIBTPU_INIT_ARGS=f"{env.get('LIBTPU_INIT_ARGS', '')}{logs} "
                                f"--xla_jf_dump_to={dump_dir}".strip())
    job = {"source": gen.source, "entry": gen.entry, "specs": specs, "topology": topology,
           "target": gen.target}
    try:
        r = subprocess.run([sys.executable, "-m", "kernel_dsl.autotune.schedule_worker"],
                           input=json.dumps(job), capture_output=True, text=True, env=env,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "message": f"compile did not finish within {timeout:.0f} s"}
    for line in reversed(r.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"status": "failed", "message": f"worker exited {r.returncode}: {r.stderr[-2000:]}"}


def _gen_and_specs(kernel: Any, args: tuple[Any, ...], config: Config, target: str
                   ) -> tuple[KernelIR, Any, list[tuple[list[int], str]]]:
    from kernel_dsl.lowering.pallas.render import render

    ir = kernel.ir(*args) if not isinstance(kernel, KernelIR) else kernel
    gen = render(ir, config, target)
    return ir, gen, [(list(p.shape), p.dtype) for p in ir.inputs]


def bundle_profile(kernel: Any, args: tuple[Any, ...], config: Config, target: str, *,
                   keep_dump: str | None = None, timeout: float = COMPILE_TIMEOUT_S
                   ) -> dict[str, Any]:
    """Compile `kernel(*args)` (or a KernelIR, with args ignored) under `config` for a TPU
    target and return the kernel body's schedule: total static bundles, loops (static bundles,
    trip counts), forward-branch regions, per-grid-step bundles, clock, compile seconds.
    Raises CompileFailed when the compile fails, ScheduleDumpError when the dump is unusable."""
    from kernel_dsl.lowering.pallas.targets import TARGETS

    tgt = TARGETS[target]
    ir, gen, specs = _gen_and_specs(kernel, args, config, target)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kd_sched_") as tmp:
        dump = keep_dump or tmp
        res = _compile_with_dump(gen, specs, tgt.topology, dump, timeout)
        wall = time.perf_counter() - t0
        if res.get("status") != "ok":
            raise CompileFailed(f"compile failed on {target}: {res.get('message', '')[:2000]}")
        sched, files = read_dump(dump)
    return _profile(sched, ir, config, target, tgt, files,
                    {"compile_s": res.get("compile_s"), "wall_s": round(wall, 2)})


def _profile(sched: Schedule, ir: KernelIR, config: Config, target: str, tgt: Any,
             files: dict[str, str], timing: dict[str, Any]) -> dict[str, Any]:
    from kernel_dsl.lowering.pallas.plan import plan_for

    plan = plan_for(ir, config)
    steps = 1
    for g in plan.grid:
        steps *= g
    outer = [lp for lp in sched.loops if lp.depth == min(x.depth for x in sched.loops)] \
        if sched.loops else []
    if not outer and steps == 1:  # a one-step grid may compile without a loop: all one step
        outer = [Loop(0, len(sched.bundles) - 1, 0, 1, len(sched.bundles))]
    if len(outer) != 1:
        raise ScheduleDumpError(f"expected one grid loop, found {len(outer)} outermost loops "
                                f"(grid of {steps} steps)")
    grid = outer[0]
    inside = [b for b in sched.branches if grid.start <= b.at <= grid.end]
    body = grid.end - grid.start + 1
    # the pipeline-stage guard skips (nearly) all of the body on the prologue / epilogue
    # iterations: it runs on every real step. The others (pl.when, DMA issue) are conditional.
    guard = [b for b in inside if b.bundles > body / 2]
    cond = [b for b in inside if b.bundles <= body / 2 and not any(
        g.at < b.at < g.target and b.target <= g.target and b is not g for g in inside
        if g.bundles <= body / 2 and g is not b)]  # outermost conditional regions only
    trips = grid.trips or 1
    full_step = _dynamic(sched, grid.start, grid.end, []) / trips
    steady = _dynamic(sched, grid.start, grid.end, cond) / trips
    cond_bundles = full_step - steady
    # pl.when regions run once per sweep of the innermost grid axis when it is a reduction
    sweep = plan.grid[-1] if len(plan.grid) and _has_reduction_axis(ir, plan) else 1
    per_step = steady + cond_bundles / sweep
    outside = sched.total - body if sched.total >= body else 0
    clock = CLOCK_HZ.get(target)  # None: not known for this generation (see CLOCK_HZ)
    return {
        "target": target, "config": json.loads(config.to_json()),
        "total_bundles": sched.total, "parsed_bundles": len(sched.bundles),
        "loops": [{"start": lp.start, "end": lp.end, "depth": lp.depth, "trips": lp.trips,
                   "static_bundles": lp.bundles} for lp in sched.loops],
        "grid_steps": steps, "grid_loop_trips": grid.trips,
        # the pipelined grid loop runs its core's steps + 2 (prologue / epilogue stages); on
        # megacore chips (v4, v5p) the program is one TensorCore's: half the steps
        "grid_loop_trips_is_core_steps_plus_2": grid.trips is not None and grid.depth > 0 and
        (grid.trips - 2) in (steps, steps // 2),
        "conditional_regions": [{"at": b.at, "bundles": b.bundles} for b in cond],
        "pipeline_guard_bundles": [b.bundles for b in guard],
        "step_bundles_all_regions": full_step, "step_bundles_steady": steady,
        "step_bundles": per_step, "sweep": sweep, "outside_loop_bundles": outside,
        "clock_hz": clock, "step_compute_s": per_step / clock if clock else None,
        "files": files, **timing,
    }


def _has_reduction_axis(ir: KernelIR, plan: Any) -> bool:
    """Whether the grid's innermost axis is a reduction (the loop_mode='grid' loop's axis)."""
    return len(plan.grid) > len(ir.grid)


def schedule_estimate(ir: KernelIR, config: Config, target: str, profile: dict[str, Any], *,
                      live_fraction: float = 1.0) -> dict[str, Any]:
    """Seconds from a bundle profile plus the analytical model's DMA terms:
    fill + core steps x max(step bundles / clock, DMA per step) + outside bundles / clock."""
    from kernel_dsl.lowering.pallas.plan import plan_for
    from kernel_dsl.lowering.pallas.targets import TARGETS

    if not profile.get("clock_hz"):
        raise ScheduleDumpError(f"no TensorCore clock known for {target} (autotune/schedule.py "
                                "CLOCK_HZ): bundles cannot become seconds")
    tgt = TARGETS[target]
    cal = cost_model.CALIBRATION[target]
    plan = plan_for(ir, config)
    hbm, dmas, first_in, last_out = cost_model._transfers(ir, plan)
    split = target == "tpu-v7x"
    hbm_bw = tgt.hbm_bytes_per_s / (2 if split else 1) * cal.hbm_efficiency
    parallel_blocks = max((plan.nb(t) for t in ir.grid), default=1)
    cores = 2 if tgt.megacore and not split and parallel_blocks >= 2 else 1
    steps = profile["grid_steps"]
    core_steps = steps / cores
    live = max(core_steps * live_fraction, 1.0)
    d_step = hbm * live_fraction / hbm_bw / live
    c_step = profile["step_compute_s"]
    fill = (first_in + last_out) / hbm_bw + 2 * cal.dma_latency_s
    outside = profile["outside_loop_bundles"] / profile["clock_hz"]
    body = live * max(c_step, d_step)
    seconds = fill + body + outside
    # variant: plus the analytical model's fitted serial cost of a grid step (step_s, and
    # dma_issue_s per block DMA), which a static schedule cannot see: a `dma.done.wait` is one
    # bundle but stalls for as long as the DMA takes. Skipped steps pay step_s alone, as there.
    over = cal.step_s + cal.dma_issue_s * dmas * live_fraction / cores / live
    with_over = (fill + live * max(c_step + over, d_step) + (core_steps - live) * cal.step_s
                 + outside)
    ana = cost_model.estimate(ir, config, tgt, live_fraction=live_fraction)
    # the MXU time of a step at 100% of peak: a schedule below it is not counting cycles
    mxu_floor = ana.mxu_seconds * cal.mxu_efficiency / live
    return {"seconds": seconds, "seconds_with_overhead": with_over, "mxu_floor_step_s": mxu_floor,
            "overhead_step_s": over, "compute_step_s": c_step, "dma_step_s": d_step,
            "fill_s": fill, "outside_s": outside, "core_steps": core_steps,
            "bound": "compute" if c_step >= d_step else "dma",
            "analytical_s": ana.seconds}


def schedule_objective(ir: KernelIR, target: str, *, fallback: bool = True,
                       with_overhead: bool = False, log: list[dict[str, Any]] | None = None
                       ) -> Callable[[Config], float]:
    """An opt-in autotune objective (autotune/search.py `Objective`: Config -> seconds, inf if
    invalid) from the compiler's schedule: one libtpu compile per call (~5-15 s). Configs the
    lowering rejects or that fail to compile are inf; with `fallback`, a config whose dump is
    unusable (ScheduleDumpError other than a failed compile) gets the analytical model's
    seconds, and `log` records which evaluator decided each config and whether the config
    compiled for the target (`compiled`: the same compile as lowering/pallas/check.py's first
    one, so the autotuner need not compile it again to verify it). `with_overhead` adds the
    analytical model's fitted serial cost per grid step (docs/schedule_evaluator.md: without it
    small blocks come out 3.5x too fast). Not the default path:
    `search.run(name, space, start, schedule_objective(ir, target), budget_s)`."""
    from kernel_dsl.lowering.pallas.targets import TARGETS

    tgt = TARGETS[target]

    def objective(cfg: Config) -> float:
        entry: dict[str, Any] = {"config": cfg.to_json(), "compiled": False}
        if target not in CLOCK_HZ and fallback:  # no clock: the compile could not be used
            entry.update(evaluator="analytical", reason=f"no clock known for {target}",
                         seconds=cost_model.estimate(ir, cfg, tgt).seconds)
            if log is not None:
                log.append(entry)
            return float(entry["seconds"])
        try:
            prof = bundle_profile(ir, (), cfg, target)
            entry["compiled"] = True
            est = schedule_estimate(ir, cfg, target, prof)
            if est["compute_step_s"] < 0.98 * est["mxu_floor_step_s"]:
                # e.g. v5e matmul steps with a 1024-wide output block: fewer bundles than MXU
                # passes, so a bundle is not a cycle there (docs/schedule_evaluator.md)
                raise ScheduleDumpError(
                    f"the schedule's {est['compute_step_s'] * 1e6:.3g} us per step is under the "
                    f"MXU's {est['mxu_floor_step_s'] * 1e6:.3g} us at peak: its bundles are not "
                    "cycles for this config")
            entry.update(evaluator="schedule", wall_s=prof["wall_s"],
                         seconds=est["seconds_with_overhead" if with_overhead else "seconds"])
        except ScheduleDumpError as e:
            entry["compiled"] = entry["compiled"] or not isinstance(e, CompileFailed)
            if isinstance(e, CompileFailed) or not fallback:
                entry.update(evaluator="schedule", seconds=math.inf, reason=str(e)[:300])
            else:
                entry.update(evaluator="analytical", reason=str(e)[:300],
                             seconds=cost_model.estimate(ir, cfg, tgt).seconds)
        except Exception as e:  # noqa: BLE001  (a config the lowering rejects)
            entry.update(evaluator="schedule", seconds=math.inf, reason=f"{type(e).__name__}: {e}")
        if log is not None:
            log.append(entry)
        return float(entry["seconds"])

    return objective
