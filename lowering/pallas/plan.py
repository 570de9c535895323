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
from kernel_dsl.ir import DTYPE_BITS, Index, KernelIR, Op, TensorParam, TileVar
from kernel_dsl.tile_bounds import end_max, multiple_of

from .bounds import can_phase
from .gather import packed_rows, scatter_rows, shared_outputs, smem_index_inputs, vector_read_inputs
from .onehot import WINDOW


@dataclass
class AxisPlan:
    kind: str  # "grid" (a grid tile's block), "loop" (streamed over the loop axis), "resident"
    block: int  # block extent along this axis
    tile: TileVar | None = None  # for "grid"
    loops: list[TileVar] = field(default_factory=list)  # for "loop"
    squeezed: bool = False  # a "grid" axis indexed by a kd.grid index: block None, no ref dim
    pick: int = 0  # a kd.grid index on the sublane dim: blocks of `pick` rows, row g % pick


@dataclass
class LoopPhase:
    op: Op
    tile: TileVar
    offset: int
    steps: int


SMEM_MAX_ELEMS = 16384  # a scalar-read input this small goes whole to SMEM (64 KiB of 32-bit)


@dataclass
class Plan:
    blocks: dict[int, int]  # BlockSym.index -> block size
    grid_tiles: list[TileVar]
    phases: list[LoopPhase]  # empty unless loop_mode == "grid" and loops exist
    axes: dict[str, list[AxisPlan]]  # param name -> per-axis plan
    grid: tuple[int, ...]
    smem: set[str] = field(default_factory=set)  # inputs read only as scalars: whole, in SMEM
    # inputs read as gather indices lane by lane and also as vectors: passed twice, blocked in
    # VMEM as usual and whole in SMEM (`{name}_sref`) for the lane loop
    twins: set[str] = field(default_factory=set)
    # outputs updated by atomics or scatters: whole blocks resident across the grid, every grid
    # axis "arbitrary" (gather.py)
    shared: set[str] = field(default_factory=set)

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


def grid_mode_possible(ir: KernelIR, blocks: dict[int, int] | None = None) -> bool:
    """Top-level loops become grid phases, each taking its most blocks of steps; a
    `kd.tile(begin, end)` loop only if bounds.py can skip its extra steps."""
    loops = [op for op in ir.body.ops if op.kind == "loop"]
    return bool(loops) and all(can_phase(op.attrs["tile"], ir.grid, blocks) for op in loops)


def _accesses(ir: KernelIR) -> dict[str, list[tuple[Index, ...]]]:
    acc: dict[str, list[tuple[Index, ...]]] = {p.name: [] for p in ir.params}
    for op in ir.body.walk():
        if op.kind in ("load", "store"):
            acc[op.attrs["tensor"].name].append(op.attrs["index"])
    return acc


def _grid_index(ix: Index) -> TileVar | None:
    """The grid tile whose index `ix` is (`kd.grid`: a block of one's begin), if it is one."""
    op = ix.scalar.op if ix.kind == "dyn" and ix.scalar is not None else None
    if op is None or op.kind != "tile_begin":
        return None
    t = op.attrs["tile"]
    return t if t.kind == "grid" and t.block.pinned == 1 else None


def covers(t: TileVar, n: int) -> bool:
    """The tile's lanes reach the end of an axis of `n`: a grid tile over a leading part of a
    longer axis (`offsets[tb]`, num_rows of num_rows + 1) leaves the rest unvisited."""
    return end_max(t) >= n


def partial_outputs(ir: KernelIR) -> set[str]:
    """Outputs stored through a grid tile (or `kd.grid` index) that does not reach the end of
    the axis: the grid never visits the blocks past it, so a BlockSpec would leave them
    unfilled (a torch.zeros output's rows past the end come back as garbage) and a ragged
    block would overwrite the rows just past the end. They are shared blocks instead: resident
    for the whole grid, filled once, each store masked to its tile's lanes."""
    out = set()
    for op in ir.body.walk():
        if op.kind != "store":
            continue
        p = op.attrs["tensor"]
        for ix, n in zip(op.attrs["index"], p.shape):
            t = ix.tile if ix.kind == "tile" else _grid_index(ix)
            if t is not None and t.kind == "grid" and not covers(t, n):
                out.add(p.name)
    return out


def _axis_plan(p: TensorParam, axis: int, uses: list[Index], plan_blocks: dict[int, int],
               phase_tiles: set[int], resident: bool = False) -> AxisPlan:
    n = p.shape[axis]
    # a grid tile over a leading part of the axis: the axis stays resident (a BlockSpec block
    # shrunk to the tile's extent would break the block rule on TPU: neither aligned nor the
    # whole dim), and each step slices its block out of it
    if any(t is not None and not covers(t, n) for t in
           [ix.tile if ix.kind == "tile" else _grid_index(ix) for ix in uses]):
        resident = True
    grid_index = {_grid_index(ix) for ix in uses} if not resident else {None}
    from_end = len(p.shape) - 1 - axis
    if uses and len(grid_index) == 1 and None not in grid_index and from_end >= 1:
        g = grid_index.pop()  # x[g, ...] with g a kd.grid index: the BlockSpec walks g
        if from_end >= 2:  # a leading dim: squeezed away
            return AxisPlan("grid", 1, tile=g, squeezed=True)
        # the sublane dim: TPU blocks hold whole sublane tiles (8 rows of 32 bits), so fetch
        # the tile holding row g and index row g % rows in it
        rows = min(n, 8 * 32 // DTYPE_BITS[p.dtype])
        return AxisPlan("grid", rows, tile=g, pick=rows)
    tiles = [ix.tile for ix in uses if ix.kind == "tile"]
    if uses and len(tiles) == len(uses) and not resident:
        first = tiles[0]
        if first.kind == "grid" and all(t is first for t in tiles):
            return AxisPlan("grid", effective_block(first, plan_blocks), tile=first)
        uniq = list({t.id: t for t in tiles}.values())
        blocks = {effective_block(t, plan_blocks) for t in uniq}
        # an output that starts filled (torch.zeros) keeps one block across the loop axis
        if all(t.id in phase_tiles for t in uniq) and len(blocks) == 1 and p.init is None:
            return AxisPlan("loop", blocks.pop(), loops=uniq)
    padded = n
    if resident and p.is_output:  # atomics and scatters rewrite aligned row groups (gather.py)
        rows = scatter_rows(p, axis)
        padded = max(padded, -(-n // rows) * rows)
    for ix in uses:  # a gather loads whole groups of packed rows (gather.py)
        if ix.kind == "gather" and len(p.shape) == 1 and n > WINDOW:
            padded = max(padded, -(-n // WINDOW) * WINDOW)  # whole windows (onehot.py)
        if ix.kind == "gather":
            rows = scatter_rows(p, axis) if p.is_output else packed_rows(p, axis)
            padded = max(padded, -(-n // rows) * rows)
    for t in tiles:  # a resident axis is padded so the last ragged block's slice stays in bounds
        padded = max(padded, num_blocks(t, plan_blocks) * effective_block(t, plan_blocks))
        if t.bounded:  # kd.tile(begin, end): a block starts at lo + i * eb, below the end
            eb = effective_block(t, plan_blocks)
            last = end_max(t) - 1
            if isinstance(t.lo, int):
                last = t.lo + (last - t.lo) // eb * eb
            elif multiple_of(t.lo, eb, plan_blocks):  # split at `x // bk * bk`: whole blocks
                last = last // eb * eb
            padded = max(padded, -(-(last + eb) // eb) * eb)  # whole blocks: the block rule
    return AxisPlan("resident", _block_rule(p, axis, padded))


def _block_rule(p: TensorParam, axis: int, padded: int) -> int:
    """A resident block padded past its axis obeys the TPU block rule (notes/tpu.md 2): the
    minor dim a multiple of 128, the sublane dim of 8 rows of 32 bits (a (9, 34) block over
    (9, 17), `kd.tile(max_nnz, n)` in jagged_dense_add, is rejected on every target)."""
    n = p.shape[axis]
    from_end = len(p.shape) - 1 - axis
    if padded == n or from_end > 1:
        return padded
    if len(p.shape) == 1:  # a multiple of 1024, or a power of two of at least 128 32-bit words
        least = 128 * 32 // DTYPE_BITS[p.dtype]
        return -(-padded // 1024) * 1024 if padded > 1024 else max(least, 1 << (padded - 1).bit_length())
    unit = 128 if from_end == 0 else 8 * 32 // DTYPE_BITS[p.dtype]
    return -(-padded // unit) * unit


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
    shared = shared_outputs(ir) | partial_outputs(ir)
    axes: dict[str, list[AxisPlan]] = {}
    for p in ir.params:
        axes[p.name] = [
            _axis_plan(p, a, [ix[a] for ix in acc[p.name]], config_blocks, phase_tiles,
                       resident=p.name in shared)
            for a in range(len(p.shape))
        ]
    grid = tuple(num_blocks(t, config_blocks) for t in ir.grid)
    if phases:
        grid += (sum(ph.steps for ph in phases),)
    smem = {p.name for p in ir.inputs if _scalar_reads_only(p, acc[p.name])}
    inputs = {p.name for p in ir.inputs}
    lane = smem_index_inputs(ir) & inputs  # index tiles of gathers are read lane by lane
    twins = lane & vector_read_inputs(ir)
    smem |= lane - twins
    for name in smem:
        p = next(q for q in ir.params if q.name == name)
        axes[name] = [AxisPlan("resident", n) for n in p.shape]
    return Plan(config_blocks, list(ir.grid), phases, axes, grid, smem, shared=shared, twins=twins)


def _scalar_reads_only(p: TensorParam, uses: list[tuple[Index, ...]]) -> bool:
    """Every load of `p` is one element at device-scalar indices (`offsets[g]`, `ids[t]`): a
    vector register cannot become an index on TPU, an SMEM scalar can."""
    n = 1
    for d in p.shape:
        n *= d
    return (bool(uses) and n <= SMEM_MAX_ELEMS and DTYPE_BITS[p.dtype] == 32
            and all(ix.kind in ("int", "dyn") for index in uses for ix in index)
            and any(ix.kind == "dyn" for index in uses for ix in index))


def plan_for(ir: KernelIR, config: object) -> Plan:
    from kernel_dsl.config import Config

    assert isinstance(config, Config)
    mode = config.knobs.get("loop_mode", "grid")
    blocks = block_values(ir, config)
    if mode == "grid" and not grid_mode_possible(ir, blocks):
        mode = "inner"
    if mode == "grid" and all(runs_once(op.attrs["tile"], blocks)
                              for op in ir.body.ops if op.kind == "loop"):
        mode = "inner"  # one block per loop: the body runs inline, no grid phase or scratch
    return make_plan(ir, blocks, mode)


def runs_once(t: TileVar, blocks: dict[int, int]) -> bool:
    """A loop of one static block: rendered inline (render.py `inner_loop`), so a kernel whose
    loops all run once has a straight-line grid step, no `pl.when` or loop region."""
    return not t.dynamic and num_blocks(t, blocks) == 1
