"""How a kernel maps onto a Pallas grid: grid axes, BlockSpecs and the phases of the loop axis.

Sequential `kd.tile` loops at the top of the grid body are rendered one of two ways (the
`loop_mode` knob):
- "grid": they become one trailing "arbitrary" grid axis. Loop j owns steps
  [offset_j, offset_j + n_j); carried values live in VMEM scratch; code between loops runs on
  the last step of the loop before it. Inputs indexed by a loop's tile are streamed block by
  block through their BlockSpec.
- "inner": each loop is a `lax.fori_loop` inside the kernel over a resident block.
Nested loops are always "inner".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernel_dsl.config import block_values, effective_block, num_blocks
from kernel_dsl.ir import Index, KernelIR, Op, TensorParam, TileVar


@dataclass
class AxisPlan:
    kind: str  # "grid" (a grid tile's block), "loop" (streamed over the loop axis), "resident"
    block: int  # block extent along this axis
    tile: TileVar | None = None  # for "grid"
    loops: list[TileVar] = field(default_factory=list)  # for "loop"


@dataclass
class LoopPhase:
    op: Op
    tile: TileVar
    offset: int
    steps: int


@dataclass
class Plan:
    blocks: dict[int, int]  # BlockSym.index -> block size
    grid_tiles: list[TileVar]
    phases: list[LoopPhase]  # empty unless loop_mode == "grid" and loops exist
    axes: dict[str, list[AxisPlan]]  # param name -> per-axis plan
    grid: tuple[int, ...]

    @property
    def loop_axis(self) -> bool:
        return bool(self.phases)

    @property
    def loop_steps(self) -> int:
        return sum(p.steps for p in self.phases)

    def eb(self, t: TileVar) -> int:
        return effective_block(t, self.blocks)

    def nb(self, t: TileVar) -> int:
        return num_blocks(t, self.blocks)

    def phase_of(self, t: TileVar) -> LoopPhase | None:
        return next((p for p in self.phases if p.tile is t), None)


def grid_mode_possible(ir: KernelIR) -> bool:
    return any(op.kind == "loop" for op in ir.body.ops)


def _accesses(ir: KernelIR) -> dict[str, list[tuple[Index, ...]]]:
    acc: dict[str, list[tuple[Index, ...]]] = {p.name: [] for p in ir.params}
    for op in ir.body.walk():
        if op.kind in ("load", "store"):
            acc[op.attrs["tensor"].name].append(op.attrs["index"])
    return acc


def _axis_plan(p: TensorParam, axis: int, uses: list[Index], plan_blocks: dict[int, int],
               phase_tiles: set[int]) -> AxisPlan:
    n = p.shape[axis]
    tiles = [ix.tile for ix in uses if ix.kind == "tile"]
    if uses and len(tiles) == len(uses):
        first = tiles[0]
        if first.kind == "grid" and all(t is first for t in tiles):
            return AxisPlan("grid", effective_block(first, plan_blocks), tile=first)
        uniq = list({t.id: t for t in tiles}.values())
        blocks = {effective_block(t, plan_blocks) for t in uniq}
        # an output that starts filled (torch.zeros) keeps one block across the loop axis
        if all(t.id in phase_tiles for t in uniq) and len(blocks) == 1 and p.init is None:
            return AxisPlan("loop", blocks.pop(), loops=uniq)
    padded = n
    for t in tiles:  # a resident axis is padded so the last ragged block's slice stays in bounds
        padded = max(padded, num_blocks(t, plan_blocks) * effective_block(t, plan_blocks))
    return AxisPlan("resident", padded)


def make_plan(ir: KernelIR, config_blocks: dict[int, int], loop_mode: str) -> Plan:
    phases: list[LoopPhase] = []
    if loop_mode == "grid":
        off = 0
        for op in ir.body.ops:
            if op.kind == "loop":
                t = op.attrs["tile"]
                n = num_blocks(t, config_blocks)
                phases.append(LoopPhase(op, t, off, n))
                off += n
    phase_tiles = {ph.tile.id for ph in phases}
    acc = _accesses(ir)
    axes: dict[str, list[AxisPlan]] = {}
    for p in ir.params:
        axes[p.name] = [
            _axis_plan(p, a, [ix[a] for ix in acc[p.name]], config_blocks, phase_tiles)
            for a in range(len(p.shape))
        ]
    grid = tuple(num_blocks(t, config_blocks) for t in ir.grid)
    if phases:
        grid += (sum(ph.steps for ph in phases),)
    return Plan(config_blocks, list(ir.grid), phases, axes, grid)


def plan_for(ir: KernelIR, config: object) -> Plan:
    from kernel_dsl.config import Config

    assert isinstance(config, Config)
    mode = config.knobs.get("loop_mode", "grid")
    if mode == "grid" and not grid_mode_possible(ir):
        mode = "inner"
    return make_plan(ir, block_values(ir, config), mode)
