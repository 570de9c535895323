"""An analytical TPU time model for a Pallas kernel under a config: the offline evaluator.

The grid runs as a software pipeline: while step i computes, the DMA engines fetch step i+1's
input blocks and write step i-1's output blocks back. Per TensorCore, with the work spread
evenly over its steps,

    time = fill + steps x busy step + drain
    compute per step = max(MXU, vector) + MXU_VECTOR_SERIAL x min(MXU, vector)
    busy step = max(step overhead + compute, DMA)

- MXU: the FLOPs of every dot (K and N padded to 128, MXU_PAD; M to 8), over the bf16
  peak times the achievable MXU efficiency (f32 operands at HIGHEST precision take ~6 bf16
  passes). Megacore chips (v4, v5p) split the parallel grid axes over two TensorCores when one
  has at least two blocks; TPU7x's two TensorCores are separate devices, so one kernel gets half
  the chip (peak, vector units and HBM bandwidth).
- Vector: every elementwise, compare, select, cast and reduce op of the IR counts its result
  (reduce: its input) elements; transcendentals (exp, rsqrt, div, ...) run on the EUP at
  `eup_s` per element, the rest on the VPU at `eup_s / EUP_OVER_VPU`. Masked-out work counts
  where the kernel does it: a loop's ops count once per block it visits (its body runs per
  grid point, averaged over the grid; nested loops together, so an inner loop bounded by an
  outer loop's tile counts its triangle, not its static most), so causal attention's mask
  (compare and select) counts on the diagonal blocks only, where its second key loop runs,
  and not on the unmasked blocks below them. With the loops as grid phases (loop_mode
  "grid"), the code before the first loop is rendered outside every `pl.when` and runs at each
  step of the phase axis (lowering/pallas/grid_steps.py): it counts once per step. A
  ragged edge's mask (`pad_fill`, where the renderer emits one: the tile has a block with
  lanes past its end) is PAD_FILL_OPS VPU element-ops on the masked value.
- MXU and vector work overlap (VLIW slots), except a fraction MXU_VECTOR_SERIAL of the smaller
  of the two (the softmax of a block waits for its QK^T dot, the PV dot for the softmax).
- Step overhead: pipeline bookkeeping on the scalar core (semaphore waits, index maps, DMA
  issue), serial with the step's compute, plus `dma_issue_s` per block DMA the step starts.
  A straight-line step (no `pl.when` branch or loop region: every loop of one block, rendered
  inline; `_straight_line`) overlaps the bookkeeping with its compute, all but
  STRAIGHT_LINE_STEP of it, and takes at least `step_s`: max(step_s, compute + 0.26 step_s).
  Fitted on Tokamax's flash caches, whose one-kv-block non-causal kernels compile without a
  branch (benchmarks/tokamax_schedule.py): 2 more large points within 10% (155 of 165), the
  fit set's worst from 18% to 14% (REPORT.md §8).
- DMA: bytes actually moved, at the achievable (not nominal) HBM bandwidth. The TPU grid runs
  in lexicographic order and skips the DMA of a block whose index did not change since the
  previous step, so a BlockSpec whose index map depends on grid axes D is fetched
  prod(n_a for a up to the innermost axis of D) times.
- Fill / drain: the first step's input blocks arrive before anything computes, the last
  step's output blocks are written after; each also pays a DMA latency.
- `pipeline_time` is this formula on totals; `estimate` feeds it kernel_dsl's IR, and
  benchmarks/pallas_call_model.py feeds it captured `pallas_call`s (JAX's own kernels).
- Tried and dropped: a fraction of DMA time exposed on compute-bound steps (fitted the
  attention caches a little better, put the v5e 8192^3 matmul 30% over); a cost per dot
  operand element read from VMEM (fitted attention's head_dim trend, but made every v6e /
  TPU7x matmul operand-bound at ~35% of peak, which no measurement supports). Second study
  (each refitted on the fit set; large points within 10% fit / held out, worst large error,
  against 81 / 38, 33% with these formulas): a dot streamed in whichever orientation pads
  less (the 64-wide PV dot unpadded: 77 / 39, 34%); a DMA latency added to every step's DMA
  (fitted 0.29 us: 77 / 38, 37%); a serial cost per output block written back (0.19 us per
  output DMA: 79 / 43, 45%; once per output-block change: 83 / 41, 46%, held-out RMS log
  error 0.105 against 0.098); Tokamax's `block_kv_compute` sub-blocks as extra rescale work
  (1.8 VPU ops per accumulator element per extra sub-block: 81 / 39, 33%, RMS unchanged).
  None lowered the held-out error without raising its worst point, so none was kept. The
  per-output cost's fitted size (12 ps per element, as if every output element moved 16 bytes
  of HBM) led to a fact of the measurements rather than of the kernel: Tokamax's op transposes
  q, k, v and the output in XLA around its kernel and times the whole op; counting those
  transposes in benchmarks/published_compare.py (no new constant) and refitting gave the
  constants below (REPORT.md §8 has the before / after figures).

`live_fraction` < 1 models a kernel that skips that fraction's complement of its grid steps
(block-sparse / causal block skipping, e.g. Tokamax flash attention): a skipped step moves and
computes nothing but still pays the step overhead. kernel_dsl's own kernels skip with
`kd.tile(begin, end)` loops instead, which the trip counts above already count.

Calibration (issue 17): the per-generation constants in CALIBRATION were fitted by
`python benchmarks/published_compare.py --fit` (least squares on log(modelled / measured)) on
the published v5e (JAX Pallas matmul guide) and v5p / v6e (Tokamax autotuning caches) points of
benchmarks/tpu_published.json; TPU7x was held out entirely, its constants are v6e's (one
TensorCore per device, the same vector rate per core), not fitted. benchmarks/REPORT.md §8
gives the fit and held-out errors, and says which held-out points informed which choice.

Modelled seconds, never a measurement: reports label them as such.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernel_dsl import tile_bounds, tunables
from kernel_dsl.config import Config
from kernel_dsl.ir import BINARY_OPS, COMPARE_OPS, DTYPE_BITS, UNARY_OPS, KernelIR, Op, TileVar
from kernel_dsl.lowering import phases
from kernel_dsl.lowering.pallas import BACKEND as PALLAS
from kernel_dsl.lowering.pallas.gather import gather_entry, lane_form, packed_rows
from kernel_dsl.lowering.pallas.plan import Plan, plan_for, runs_once
from kernel_dsl.lowering.pallas.targets import TpuTarget
from kernel_dsl.tile_bounds import is_ragged

F32_MXU_PASSES = 6  # f32 x f32 at HIGHEST precision: bf16 hi/lo products


@dataclass(frozen=True)
class Calibration:
    """Achievable rates of one TPU generation (one TensorCore, except HBM: per device)."""
    step_s: float  # per grid step: pipeline bookkeeping on the scalar core
    dma_issue_s: float  # per block DMA started in a step (descriptor issue + semaphore wait)
    dma_latency_s: float  # fill and drain: a DMA's latency before its first byte lands
    mxu_efficiency: float  # achievable fraction of the bf16 peak on MXU-bound steps
    hbm_efficiency: float  # achievable fraction of the nominal HBM bandwidth
    eup_s: float  # seconds per transcendental element (exp, rsqrt, div, ...) per TensorCore


# Global shape of the vector / MXU interplay (fitted with the per-generation constants).
EUP_OVER_VPU = 13.3  # a VPU element-op is this many times cheaper than an EUP element
MXU_VECTOR_SERIAL = 0.177  # fraction of min(MXU, vector) a step cannot overlap
# fraction of step_s a straight-line grid step adds to its compute (no `pl.when` branch or loop
# region: the scheduler overlaps the pipeline's bookkeeping with the compute); _straight_line
STRAIGHT_LINE_STEP = 0.26
# Dot dims pad to this multiple on the MXU (default: targets.py mxu_size). v6e / TPU7x have
# 256-wide MXUs, but the published v6e flash-attention series at equal FLOPs (head_dim 64 / 128
# / 256: 1.47 / 1.55 / 1.75 ps per score element) rules out a full 256 pass for a 64- or
# 128-deep dot (that would make head_dim 64 4x and 128 2x the MXU time of 256): padding to 128
# fits, the rest is vector (exp) time.
MXU_PAD: dict[str, int] = {"tpu-v6e": 128, "tpu-v7x": 128}

# Fitted by `python benchmarks/published_compare.py --fit` (2026-12-04) on the fit set (v5e JAX
# matmul guide, v5p / v6e Tokamax flash attention: 165 points, Tokamax's XLA layout transposes
# accounted, see published_compare.py; STRAIGHT_LINE_STEP with them); rounded to 3 digits.
# dma_issue_s and the globals are shared by all generations. hbm_efficiency is held at 0.85,
# not fitted: no published kernel point is HBM-bound at large size (Tokamax's transposes are,
# and priced at it).
# dma_latency_s: not identifiable, 1 us. v5p's mxu_efficiency sits at its bound (1.0): its
# attention points are vector-bound and see the MXU only through MXU_VECTOR_SERIAL.
# Derived, not fitted: v5e's eup_s (its points are matmuls) is v5p's at v5e's per-core peak
# (x 229.5 / 197); TPU7x (held out entirely) takes v6e's constants unchanged, eup_s included:
# one TensorCore each, the same vector rate per core (the earlier rule, v6e's eup_s scaled by
# the per-core MXU peak ratio 918 / 1153.5, put the held-out TPU7x flash table at a median of
# 0.85 once the transposes were counted: a choice made after seeing TPU7x residuals, so TPU7x
# is not blind for this one rule, REPORT.md §8); v4 (no published point) is v5p's.
_V6E = Calibration(step_s=0.242e-6, dma_issue_s=0.0349e-6, dma_latency_s=1.0e-6,
                   mxu_efficiency=0.927, hbm_efficiency=0.85, eup_s=0.897e-12)
_V5P = Calibration(step_s=0.386e-6, dma_issue_s=0.0349e-6, dma_latency_s=1.0e-6,
                   mxu_efficiency=1.0, hbm_efficiency=0.85, eup_s=0.512e-12)
CALIBRATION: dict[str, Calibration] = {
    "tpu-v4": _V5P,
    "tpu-v5e": Calibration(step_s=0.265e-6, dma_issue_s=0.0349e-6, dma_latency_s=1.0e-6,
                           mxu_efficiency=0.966, hbm_efficiency=0.85,
                           eup_s=_V5P.eup_s * 229.5 / 197),
    "tpu-v5p": _V5P,
    "tpu-v6e": _V6E,
    "tpu-v7x": _V6E,
}
# per grid step with two block DMAs: what other tools quote as the step overhead
STEP_OVERHEAD_S = _V6E.step_s + 2 * _V6E.dma_issue_s

# VPU element-ops of a rendered ragged-edge mask (lowering/pallas/render.py `pad_fill`); a
# tile of whole blocks renders none (tile_bounds.is_ragged)
PAD_FILL_OPS = 3

# transcendental unary ops (EUP); every other unary, binary, compare, where, cast, reduce: VPU
EUP_OPS = frozenset({"exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin",
                     "cos", "log1p", "expm1", "pow", "div"})
VPU_OPS = frozenset(UNARY_OPS) | frozenset(BINARY_OPS) | frozenset(COMPARE_OPS) | {
    "where", "cast", "reduce", "transpose", "permute", "reshape", "concat", "slice"}


@dataclass
class Estimate:
    seconds: float
    flops: float  # useful FLOPs (unpadded)
    mxu_seconds: float  # MXU time of the whole kernel at the achievable MXU rate
    hbm_bytes: float
    hbm_seconds: float  # DMA time at the achievable HBM bandwidth
    steps: int
    overhead_seconds: float  # step overhead + DMA issue + fill/drain
    peak_flops: float  # what one kernel can reach on this target (one TensorCore on TPU7x)
    vector_seconds: float = 0.0  # VPU + EUP time of the whole kernel

    def utilization(self, target: TpuTarget) -> float:
        """Useful FLOPs per second over the peak one kernel can reach on the target."""
        return self.flops / self.seconds / self.peak_flops if self.seconds else 0.0


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def mxu_flops(m: int, k: int, n: int, target: TpuTarget, f32: bool = False) -> float:
    """bf16-pass FLOPs an (m, k) @ (k, n) dot costs on the MXU: M padded to 8 sublanes, K and
    N to MXU_PAD; f32 operands at HIGHEST precision take F32_MXU_PASSES passes."""
    mx = MXU_PAD.get(target.name, target.mxu_size)
    return 2.0 * _pad(m, 8) * _pad(k, mx) * _pad(n, mx) * (F32_MXU_PASSES if f32 else 1)


def _elems(shape: tuple[object, ...], plan: Plan) -> int:
    n = 1
    for d in shape:
        n *= plan.eb(d) if isinstance(d, TileVar) else int(d)  # type: ignore[call-overload]
    return n


def _gather_elems(op: Op, plan: Plan) -> float:
    """VPU elements of a gather/scatter (lowering/pallas/gather.py), an uncalibrated
    assumption: the lane loop moves one row per lane, each at least one vreg (1024 elements);
    a 1-D tensor's one-hot select compares every lane with the padded row."""
    v = op.results[0] if op.kind == "load" else op.operands[0]
    axis, ix = gather_entry(op)  # type: ignore[misc]
    d = ix.scalar.shape[0]  # type: ignore[union-attr]
    lanes = plan.eb(d) if isinstance(d, TileVar) else int(d)
    if lane_form(op):
        return float(lanes * plan.axes[op.attrs["tensor"].name][0].block)
    row = _elems(v.shape, plan) // max(lanes, 1)
    return float(lanes * max(row * packed_rows(op.attrs["tensor"], axis), 1024))


def _op_cost(ir: KernelIR, plan: Plan, target: TpuTarget) -> tuple[float, float, float, float]:
    """(useful FLOPs, MXU-padded bf16-pass FLOPs, EUP elements, VPU elements) of one run."""
    useful = padded = eup = vpu = 0.0

    def walk(ops: list[Op], trips: float, chain: tuple[TileVar, ...] = ()) -> None:
        nonlocal useful, padded, eup, vpu
        for op in ops:
            if op.kind == "loop":
                t = op.attrs["tile"]
                # kd.tile(begin, end): the body runs it visits, averaged over the grid (nested
                # loops together: an inner loop's bounds may read an outer loop's index)
                inner = (*chain, t)
                runs = tile_bounds.mean_body_runs(list(inner), ir.grid, plan.blocks)
                walk(op.body.ops, runs, inner)  # type: ignore[union-attr]
            elif op.kind == "dot":
                a, b = op.operands[0], op.operands[1]
                ad = [plan.eb(d) if isinstance(d, TileVar) else d for d in a.shape]
                bd = [plan.eb(d) if isinstance(d, TileVar) else d for d in b.shape]
                batch = 1
                for d in ad[:-2]:
                    batch *= d
                m, k, n = ad[-2], ad[-1], bd[-1]
                useful += trips * batch * 2.0 * m * k * n
                padded += trips * batch * mxu_flops(m, k, n, target, a.dtype == "f32")
            elif op.kind in ("load", "store") and gather_entry(op) is not None:
                vpu += trips * _gather_elems(op, plan)
            elif op.kind == "scan":  # log-step: a roll, the combine and a select per step
                x = op.operands[0]
                n = _elems((x.shape[op.attrs["axis"]],), plan)
                steps = max(1, (n - 1).bit_length())
                vpu += trips * 3 * steps * len(op.operands) * _elems(x.shape, plan)
            elif op.kind == "pad_fill" and is_ragged(op.attrs["tile"], plan.blocks):
                # rendered as where(iota + begin < end, x, fill): an add, a compare, a select
                vpu += trips * PAD_FILL_OPS * _elems(op.results[0].shape, plan)
            elif op.kind in EUP_OPS:
                eup += trips * _elems(op.results[0].shape, plan)
            elif op.kind in VPU_OPS:
                src = op.operands[0] if op.kind == "reduce" else op.results[0]
                vpu += trips * _elems(src.shape, plan)

    top = ir.body.ops
    if plan.phases:  # grid phases: the code before the first loop runs at every step of `k`
        first = next(i for i, op in enumerate(top) if op.kind == "loop")
        walk([op for op in top[:first] if op.kind != "store"], plan.loop_steps)
        top = [op for op in top[:first] if op.kind == "store"] + top[first:]
    walk(top, 1)
    grid_points = 1
    for t in ir.grid:
        grid_points *= plan.nb(t)
    g = grid_points
    return useful * g, padded * g, eup * g, vpu * g


def _dot_cost(ir: KernelIR, plan: Plan, target: TpuTarget) -> tuple[float, float]:
    """(useful FLOPs, MXU-padded bf16-pass FLOPs) of one run of the kernel."""
    useful, padded = _op_cost(ir, plan, target)[:2]
    return useful, padded


def _fetches(axes_used: set[int], grid: tuple[int, ...]) -> int:
    """DMAs of one BlockSpec over the whole grid (re-fetches of an unchanged block skipped)."""
    live = [a for a in axes_used if grid[a] > 1]
    if not live:
        return 1
    n = 1
    for a in range(max(live) + 1):
        n *= grid[a]
    return n


def _visited_steps(ir: KernelIR, plan: Plan) -> float:
    """The fraction of the loop axis's steps that run a loop body: below 1 when a
    `kd.tile(0, end)` phase skips the steps past its trip count (lowering/pallas/bounds.py)."""
    if not plan.phases:
        return 1.0
    visited = sum(tile_bounds.mean_trips(ph.tile, ir.grid, plan.blocks) for ph in plan.phases)
    return visited / plan.loop_steps


def _transfers(ir: KernelIR, plan: Plan) -> tuple[float, int, float, float]:
    """(HBM bytes, block DMAs, bytes of one step's input blocks, bytes of one output step)."""
    grid = plan.grid
    visited = _visited_steps(ir, plan)  # a skipped step keeps its block: no DMA
    total = first_in = last_out = 0.0
    dmas = 0
    for p in ir.params:
        axes = plan.axes[p.name]
        used: set[int] = set()
        for ax in axes:
            if ax.kind == "grid":
                used.add(plan.grid_tiles.index(ax.tile))  # type: ignore[arg-type]
            elif ax.kind == "loop":
                used.add(len(grid) - 1)
        # a block past the array's edge moves only the in-range part
        in_range = 1
        for ax, n in zip(axes, p.shape):
            in_range *= min(ax.block, n)
        block_bytes = in_range * DTYPE_BITS[p.dtype] / 8
        n_fetch = _fetches(used, grid)
        if len(grid) - 1 in used and plan.loop_axis:
            n_fetch = max(1, round(n_fetch * visited))
        total += n_fetch * block_bytes
        dmas += n_fetch
        if p.is_output:
            last_out += block_bytes
        else:
            first_in += block_bytes
    return total, dmas, first_in, last_out


def _hbm_bytes(ir: KernelIR, plan: Plan) -> float:
    return _transfers(ir, plan)[0]


@dataclass(frozen=True)
class Device:
    """What one kernel can use of a target: TPU7x's two TensorCores are two JAX devices."""
    peak: float  # bf16 FLOP/s of the device the kernel runs on
    core_peak: float  # per TensorCore
    hbm_bw: float  # achievable HBM bytes/s of the device
    megacore: bool  # two TensorCores split the parallel grid axes (v4, v5p)


def device(target: TpuTarget) -> Device:
    cal = CALIBRATION[target.name]
    split = target.name == "tpu-v7x"  # two TensorCores, two JAX devices: a kernel runs on one
    peak = target.peak_bf16_flops / (2 if split else 1)
    megacore = target.megacore and not split  # a TPU7x device is one TensorCore
    return Device(peak, peak / (2 if megacore else 1),
                  target.hbm_bytes_per_s / (2 if split else 1) * cal.hbm_efficiency, megacore)


def pipeline_time(target: TpuTarget, *, padded: float, eup: float, vpu: float, hbm: float,
                  dmas: float, first_in: float, last_out: float, core_steps: float,
                  live_steps: float, cores: int,
                  straight_line: bool = False) -> tuple[float, float, float, float, float]:
    """The module docstring's formula: (seconds, MXU s, vector s, DMA s, overhead s) of a grid
    of `core_steps` per TensorCore, `live_steps` of which do the work (padded MXU FLOPs, EUP
    and VPU elements, HBM bytes and block DMAs: totals over the cores that run it); the other
    steps pay the step overhead only. Shared by `estimate` (kernel_dsl's IR) and
    benchmarks/pallas_call_model.py (any captured pallas_call, e.g. JAX's own kernels)."""
    cal = CALIBRATION[target.name]
    dev = device(target)
    live_steps = max(live_steps, 1.0)
    mxu = padded / cores / (dev.core_peak * cal.mxu_efficiency)
    vec = (eup + vpu / EUP_OVER_VPU) / cores * cal.eup_s
    dma = hbm / dev.hbm_bw  # the cores share the device's bandwidth
    m_step, v_step, d_step = mxu / live_steps, vec / live_steps, dma / live_steps
    compute = max(m_step, v_step) + MXU_VECTOR_SERIAL * min(m_step, v_step)
    # a straight-line step overlaps its bookkeeping with its compute, all but a share of it; a
    # step with little compute still takes the bookkeeping's own time
    work = (max(cal.step_s, compute + STRAIGHT_LINE_STEP * cal.step_s) if straight_line
            else cal.step_s + compute)
    busy = max(work + cal.dma_issue_s * dmas / cores / live_steps, d_step)
    body = live_steps * busy + (core_steps - live_steps) * cal.step_s
    fill = first_in / dev.hbm_bw + last_out / dev.hbm_bw + 2 * cal.dma_latency_s
    seconds = body + fill
    return seconds, mxu, vec, dma, seconds - live_steps * max(compute, d_step)


def _straight_line(ir: KernelIR, plan: Plan) -> bool:
    """Whether a grid step runs as one straight-line region: every loop of one static block
    (rendered inline, plan.runs_once), no grid phase, no gather / scatter lane loop, no output
    filled under `pl.when`. Tokamax's splash kernel shows why it matters: its non-causal grid
    step with one kv block compiles with no branch, 14-19% fewer bundles than the same work
    split into `pl.when` regions (benchmarks/tokamax_schedule.py)."""
    if plan.phases or plan.shared:
        return False
    if any(a.pick for axes in plan.axes.values() for a in axes):
        return False
    for op in ir.body.walk():
        if op.kind == "loop" and not runs_once(op.attrs["tile"], plan.blocks):
            return False
        if op.kind in ("load", "store") and gather_entry(op) is not None:
            return False
    return True


def estimate(ir: KernelIR, config: Config, target: TpuTarget, *,
             live_fraction: float = 1.0, straight_line: bool | None = None) -> Estimate:
    """`straight_line`: whether the kernel's grid step has no branch or loop region (None: as
    kernel_dsl renders `ir`, `_straight_line`); a caller pricing another project's kernel
    passes what that kernel does."""
    ir = tunables.ir_for(ir, config)  # the trace for the config's kd.register_tunable values
    if ir.phases:  # kd.barrier(): one launch per phase, one after another (lowering/phases.py)
        parts = [estimate(ph, cfg, target, live_fraction=live_fraction,
                          straight_line=straight_line)
                 for ph, cfg in phases.split(PALLAS, ir, config, target.name)]
        return Estimate(sum(e.seconds for e in parts), sum(e.flops for e in parts),
                        sum(e.mxu_seconds for e in parts), sum(e.hbm_bytes for e in parts),
                        sum(e.hbm_seconds for e in parts), sum(e.steps for e in parts),
                        sum(e.overhead_seconds for e in parts), parts[0].peak_flops,
                        sum(e.vector_seconds for e in parts))
    plan = plan_for(ir, config)
    useful, padded, eup, vpu = _op_cost(ir, plan, target)
    parallel_blocks = max((plan.nb(t) for t in ir.grid), default=1)
    dev = device(target)
    # atomics and scatters make every grid axis "arbitrary": one core (lowering/pallas/gather.py)
    cores = 2 if dev.megacore and parallel_blocks >= 2 and not plan.shared else 1
    hbm, dmas, first_in, last_out = _transfers(ir, plan)
    steps = 1
    for g in plan.grid:
        steps *= g
    f = live_fraction
    # per TensorCore: its share of the steps; skipped steps only pay the step overhead
    core_steps = steps / cores
    live_steps = max(core_steps * f * _visited_steps(ir, plan), 1.0)
    seconds, mxu, vec, dma, over = pipeline_time(
        target, padded=padded * f, eup=eup * f, vpu=vpu * f, hbm=hbm * f, dmas=dmas * f,
        first_in=first_in, last_out=last_out, core_steps=core_steps, live_steps=live_steps,
        cores=cores,
        straight_line=_straight_line(ir, plan) if straight_line is None else straight_line)
    return Estimate(seconds, useful, mxu, hbm * f, dma, steps, over, dev.peak, vec)
