"""`kd.atomic_add/max/min(out, [ids[tb], td], v)` through a 1-D index tile on NKI.

NKI has no atomic scatter. Its read-modify-write DMA (`nisa.dma_compute` with `vector_offset`)
takes unique indices only ("unique_indices ... must be True", SDK `nki.isa.dma_compute`), only
`nl.add`, computes in float32 (int32 above 2**24 would round) and is a NeuronCore-v3+ form; the
duplicates within one tile are the point of an atomic (Helion's segment_reduction sends several
lanes to one segment). So each lane of the index tile is its own read-modify-write, in lane order,
with the two per-partition indirect DMAs every backend already uses (gather.py, interp/indirect.py):

    for lane in range(n):                     # Python loop: unrolled at trace time
        dma_copy(old, out.ap(..., vector_offset=idx[lane:lane + 1, :]), oob_mode=skip)  # row idx[lane]
        dma_copy(row, v[lane:lane + 1, ...])  # the lane's values to partition 0 (DMA starts anywhere)
        tensor_tensor(old, old, row, op)      # add / maximum / minimum, rounded to out's dtype
        dma_copy(out.ap(..., vector_offset=idx[lane:lane + 1, :]), old, oob_mode=skip)

A lane reads the row after the previous lane wrote it (the DMAs depend through `old` and `out`;
the NKI grid is loops of one kernel, run in order: docs/nki.md), so duplicates accumulate exactly
as a sequence of updates, for every dtype (int32 on GpSimd's exact integer ALU) and every value
(inf and NaN propagate per row; no `0 * inf` of a one-hot matmul). An index outside `[0, size)`
is skipped by both DMAs: that lane writes nothing (docs/ir.md). The cost is 3 DMAs and an op per
lane (a combine of duplicates inside the tile first, an equality matrix on TensorE, would need
one DMA pair per tile but is not exact for inf/NaN or int32 above 2**24).
"""
from __future__ import annotations

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import Op, TensorParam, TileVar

from . import gather as gt
from .layout import orient_with
from .writer import Tile, Writer

ALU = {"add": "nl.add", "max": "nl.maximum", "min": "nl.minimum"}


def _view(w: Writer, t: Tile, part: str) -> str:
    """`t[part, free]` with the free axis sliced to its in-range count when ragged."""
    d = t.dims[1]
    free = f"0:{w.count(d)}" if isinstance(d, TileVar) and w.ragged(d) else ":"
    return f"{t.name}[{part}, {free}]"


def check(op: Op, g: gt.Gather) -> None:
    """An atomic through a rank-N index (an element per lane) is not rendered."""
    if g.per_lane:
        p: TensorParam = op.attrs["tensor"]
        raise ConfigError(
            f"the NKI lowering cannot update `{p.name}` atomically through a rank-"
            f"{g.index.rank} index tile: its atomics through an index tile are a read-modify-"
            "write per lane of a 1-D index (a row per partition)", op.loc,
            "index with a 1-D index tile (flatten the index and the values), or use the pallas or "
            "triton backend")


def value_tile(w: Writer, op: Op, g: gt.Gather, doing: str) -> Tile:
    """The tile of a scatter's or atomic's value with the index's dim on partitions (a value
    broadcast along that dim is refused: `doing` says what the lowering cannot do with it)."""
    x = op.operands[0]
    pos = w.core(x).pos_of(gt.block_axis(g, op, x))
    if pos is None:
        raise ConfigError(f"the NKI lowering cannot {doing} a value that is broadcast along the "
                          "index's dim", op.loc,
                          "broadcast the value to the indexed block first, or use the pallas or "
                          "triton backend")
    tile = w.get(x, orient_with(pos, on_partitions=True))
    gt.check_partitions(w, op, g, tile)
    return tile


def render(w: Writer, op: Op, g: gt.Gather) -> None:
    """The per-lane read-modify-write loop (module docstring)."""
    check(op, g)
    p: TensorParam = op.attrs["tensor"]
    tile = value_tile(w, op, g, f"update `{p.name}` atomically with")
    idx = gt.index_column(w, g).split("[")[0]
    at = op.attrs["atomic"]
    d = g.part_dim
    n = w.count(d) if isinstance(d, TileVar) else str(d)
    old = Tile(w.fresh(f"{w.pname(p)}_old"), (1, tile.phys[1]), tile.dtype, (None, tile.dims[1]))
    row = Tile(w.fresh(f"{w.pname(p)}_row"), (1, tile.phys[1]), tile.dtype, (None, tile.dims[1]))
    w.alloc(old.name, old.phys, old.dtype, dims=old.dims)
    w.alloc(row.name, row.phys, row.dtype, dims=row.dims)
    lane = w.fresh("lane")
    w.em.open(f"for {lane} in range({n}):", comment=f"kd.atomic_{at} through an index tile: "
              "a read-modify-write per lane, in lane order (duplicates accumulate)")
    one = f"{lane}:{lane} + 1"
    view = gt.indirect_view(w, op, g, f"{idx}[{one}, :]", rows="1")
    w.line(f"nisa.dma_copy(dst={_view(w, old, '0:1')}, src={view}, oob_mode=nisa.oob_mode.skip)",
           comment=f"row idx[{lane}] of `{p.name}` (an index outside it: skipped)")
    w.line(f"nisa.dma_copy(dst={_view(w, row, '0:1')}, src={_view(w, tile, one)})",
           comment="the lane's values to partition 0")
    o, r = _view(w, old, "0:1"), _view(w, row, "0:1")
    w.line(f"nisa.tensor_tensor(dst={o}, data1={o}, data2={r}, op={ALU[at]})")
    w.line(f"nisa.dma_copy(dst={view}, src={_view(w, old, '0:1')}, oob_mode=nisa.oob_mode.skip)")
    w.em.close()


__all__ = ["check", "render", "value_tile"]
