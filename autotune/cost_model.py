"""An analytical TPU time model for a Pallas kernel under a config: the offline evaluator.

    time = max(MXU time, HBM time) + grid steps x per-step overhead

- MXU time: the FLOPs of every dot, each dim padded up to the MXU tile (128 or 256), over the
  chip's bf16 peak (f32 operands at HIGHEST precision take ~6 bf16 passes; megacore chips reach
  their peak only when a parallel grid axis has at least two blocks; TPU7x's two TensorCores are
  separate devices, so one kernel gets half the chip). Masked-out work (e.g. the upper triangle
  of causal attention, which the kernel still computes) counts as FLOPs; vector and
  transcendental (exp) work is not modelled.
- HBM time: bytes actually moved. The TPU grid runs in lexicographic order and skips the DMA of
  a block whose index did not change since the previous step, so a BlockSpec whose index map
  depends on grid axes D is fetched prod(n_a for a up to the innermost axis of D) times.
- Per-step overhead: pipeline bookkeeping and DMA issue/wait, ~0.35 us per grid step.

Modelled seconds, never a measurement: reports label them as such.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernel_dsl.config import Config
from kernel_dsl.ir import DTYPE_BITS, KernelIR, Op, TileVar
from kernel_dsl.lowering.pallas.plan import Plan, plan_for
from kernel_dsl.lowering.pallas.targets import TpuTarget

STEP_OVERHEAD_S = 0.35e-6
F32_MXU_PASSES = 6  # f32 x f32 at HIGHEST precision: bf16 hi/lo products


@dataclass
class Estimate:
    seconds: float
    flops: float  # useful FLOPs (unpadded)
    mxu_seconds: float
    hbm_bytes: float
    hbm_seconds: float
    steps: int
    overhead_seconds: float
    peak_flops: float  # what one kernel can reach on this target (one TensorCore on TPU7x)

    def utilization(self, target: TpuTarget) -> float:
        """Useful FLOPs per second over the peak one kernel can reach on the target."""
        return self.flops / self.seconds / self.peak_flops if self.seconds else 0.0


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def _dot_cost(ir: KernelIR, plan: Plan, target: TpuTarget) -> tuple[float, float]:
    """(useful FLOPs, MXU-padded bf16-pass FLOPs) of one run of the kernel."""
    useful = padded = 0.0

    def walk(ops: list[Op], trips: int) -> None:
        nonlocal useful, padded
        for op in ops:
            if op.kind == "loop":
                t = op.attrs["tile"]
                walk(op.body.ops, trips * plan.nb(t))  # type: ignore[union-attr]
            elif op.kind == "dot":
                a, b = op.operands[0], op.operands[1]
                ad = [plan.eb(d) if isinstance(d, TileVar) else d for d in a.shape]
                bd = [plan.eb(d) if isinstance(d, TileVar) else d for d in b.shape]
                batch = 1
                for d in ad[:-2]:
                    batch *= d
                m, k, n = ad[-2], ad[-1], bd[-1]
                passes = F32_MXU_PASSES if a.dtype == "f32" else 1
                mx = target.mxu_size
                useful += trips * batch * 2.0 * m * k * n
                padded += trips * batch * 2.0 * _pad(m, 8) * _pad(k, mx) * _pad(n, mx) * passes

    walk(ir.body.ops, 1)
    grid_points = 1
    for t in ir.grid:
        grid_points *= plan.nb(t)
    return useful * grid_points, padded * grid_points


def _fetches(axes_used: set[int], grid: tuple[int, ...]) -> int:
    """DMAs of one BlockSpec over the whole grid (re-fetches of an unchanged block skipped)."""
    live = [a for a in axes_used if grid[a] > 1]
    if not live:
        return 1
    n = 1
    for a in range(max(live) + 1):
        n *= grid[a]
    return n


def _hbm_bytes(ir: KernelIR, plan: Plan) -> float:
    grid = plan.grid
    total = 0.0
    for p in ir.params:
        axes = plan.axes[p.name]
        used: set[int] = set()
        block_elems = 1
        for ax in axes:
            block_elems *= ax.block
            if ax.kind == "grid":
                used.add(plan.grid_tiles.index(ax.tile))  # type: ignore[arg-type]
            elif ax.kind == "loop":
                used.add(len(grid) - 1)
        # a block past the array's edge moves only the in-range part
        in_range = 1
        for ax, n in zip(axes, p.shape):
            in_range *= min(ax.block, n)
        total += _fetches(used, grid) * in_range * DTYPE_BITS[p.dtype] / 8
    return total


def estimate(ir: KernelIR, config: Config, target: TpuTarget) -> Estimate:
    plan = plan_for(ir, config)
    useful, padded = _dot_cost(ir, plan, target)
    parallel_blocks = max((plan.nb(t) for t in ir.grid), default=1)
    device_peak = target.peak_bf16_flops
    if target.name == "tpu-v7x":
        device_peak /= 2  # two TensorCores, two JAX devices: a kernel runs on one
    peak = device_peak / 2 if target.megacore and parallel_blocks < 2 else device_peak
    mxu_s = padded / peak  # megacore: nothing to split across the two TensorCores
    hbm = _hbm_bytes(ir, plan)
    hbm_bw = target.hbm_bytes_per_s / (2 if target.name == "tpu-v7x" else 1)
    hbm_s = hbm / hbm_bw
    steps = 1
    for g in plan.grid:
        steps *= g
    over = steps * STEP_OVERHEAD_S
    return Estimate(max(mxu_s, hbm_s) + over, useful, mxu_s, hbm, hbm_s, steps, over, device_peak)

