"""Gathers and scatters through an index tile as NKI's per-partition indirect DMA.

`emb[ids[tb], td]` (Helion's embedding) is one `nisa.dma_copy` whose HBM side is
`emb.ap(pattern=[[stride, n], [1, n_td]], offset=..., vector_offset=idx, indirect_dim=axis)`:
partition p of the tile moves the elements of row `idx[p]` (docs/nki.md "Indirect DMA", with the
SDK and nki-library sources; the interpreter's model: interp/indirect.py). So the gather's dim
lies on partitions (layout.py puts it there) and the index is an SBUF column `(n, 1)` of int32
(an index tile of another integer dtype is copied to int32 first; a row-vector index is
transposed, exact below 2**24). Only the in-range lanes of the index's block move: the pattern's
first count, the destination rows and the index column are all `0:n_t`. The other subscript
entries are the pattern's other pairs (tiles, `:`, static slices) or part of `offset` (ints,
blocks of 1, device scalars).

A rank-N index (Helion's jagged `x_flat[starts[:, None] + tk.index[None, :]]`) has an index per
element: its last two dims are the block's (partitions, free), and each column of the block is
one indirect DMA of an element per partition (`vector_offset=idx[:, j:j + 1]`, a Python loop
over the columns, unrolled at trace time).

An index outside `[0, size)` in an in-range lane (the user's bug, docs/ir.md; for a rank-N index
also a masked lane past a row's end) is skipped with `oob_mode=nisa.oob_mode.skip`: a gather
reads 0 there (the tile is memset to 0 first), a scatter writes nothing, like the shifted blocks
of shifted.py. Atomics through a 1-D index tile are a read-modify-write per lane
(atomic_scatter.py); blocks whose layout does not put the index's dims on (partitions, free) are
a ConfigError.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import Dim, Index, Op, TensorParam, TileVar, Value

from .shifted import shift_of
from .targets import PMAX

Writer = Any  # writer.Writer (which imports layout.py, which imports this module)


@dataclass(frozen=True)
class Gather:
    """One gather entry on `axis` of a load or store, indexed by the value `index`: 1-D (a row
    per partition) or rank-N (an element per lane: one indirect DMA per column of the block)."""

    axis: int
    index: Value
    pos: int  # the index's first dim's position in the indexed block's shape

    @property
    def per_lane(self) -> bool:
        return self.index.rank > 1

    @property
    def part_axis(self) -> int:
        """The block axis that goes on partitions: the index's only dim, or its second to last."""
        return self.pos + max(self.index.rank - 2, 0)

    @property
    def part_dim(self) -> Dim:
        return self.index.shape[max(self.index.rank - 2, 0)]


def gather_of(op: Op, atomic: bool = False) -> Gather | None:
    """The gather of a load or non-atomic store with one index tile (not a shifted block); with
    `atomic`, also of an atomic (atomic_scatter.py)."""
    if op.kind not in ("load", "store") or (op.attrs.get("atomic") and not atomic) \
            or shift_of(op) is not None:
        return None
    index: tuple[Index, ...] = op.attrs["index"]
    gathers = [a for a, ix in enumerate(index) if ix.kind == "gather"]
    if len(gathers) != 1:
        return None
    axis = gathers[0]
    v = index[axis].scalar
    assert v is not None
    pos = sum(1 for ix in index[:axis] if ix.kind not in ("int", "dyn"))
    return Gather(axis, v, pos)


def strides(p: TensorParam) -> list[int]:
    """Row-major element strides of an HBM tensor argument."""
    return [math.prod(p.shape[k + 1:]) for k in range(len(p.shape))]


def _count(w: Writer, d: object) -> str:
    return w.count(d) if isinstance(d, TileVar) else str(d)


def _scaled(e: str, s: int) -> str:
    return e if s == 1 else f"({e}) * {s}"


def indirect_view(w: Writer, op: Op, g: Gather, idx: str, rows: str | None = None) -> str:
    """`p.ap(pattern=..., offset=..., vector_offset=idx, indirect_dim=axis)` for the block (for
    a rank-N index: for one column of it, an element per partition; `rows` partitions instead
    of the index's count: one for an atomic's lane)."""
    p: TensorParam = op.attrs["tensor"]
    st = strides(p)
    pairs = [f"[{st[g.axis]}, {rows or _count(w, g.part_dim)}]"]
    offset: list[str] = []
    for k, ix in enumerate(op.attrs["index"]):
        if k == g.axis:
            continue
        if ix.kind == "int":
            offset += [str(ix.value * st[k])] if ix.value else []
        elif ix.kind == "dyn":
            offset.append(_scaled(w.bound(ix.scalar, None), st[k]))
        elif ix.kind == "full":
            pairs.append(f"[{st[k]}, {p.shape[k]}]")
        elif ix.kind == "slice":
            pairs.append(f"[{st[k]}, {ix.stop - ix.value}]")
            offset += [str(ix.value * st[k])] if ix.value else []
        else:
            t = ix.tile
            assert t is not None
            offset.append(_scaled(w.begin(t), st[k]))
            if w.eb(t) > 1:
                pairs.append(f"[{st[k]}, {w.count(t)}]")
    if g.per_lane and len(pairs) > 1:
        raise ConfigError(f"the NKI lowering cannot index `{p.name}` with a rank-{g.index.rank} "
                          "index tile and another tile of the block", op.loc,
                          "index the other axes with ints, or use the pallas or triton backend")
    if len(pairs) == 1:
        pairs.append("[1, 1]")  # a gather of single elements: one per partition
    off = " + ".join(offset) or "0"
    return (f"{w.pname(p)}.ap(pattern=[{', '.join(pairs)}], offset={off}, vector_offset={idx}, "
            f"indirect_dim={g.axis})")


def index_column(w: Writer, g: Gather) -> str:
    """The in-range part of the index as an int32 SBUF column `(n, 1)` (for a rank-N index:
    the `(n, F)` tile of the block's shape, its columns taken one by one)."""
    col = w.get(g.index, index_orient(w.core(g.index), g))
    if col.dtype != "i32":
        w.em.push(w.slots[g.index.id])  # once, next to the index's definition (writer.at)
        col = w.cast(col, "i32")
        w.em.pop()
    d = g.part_dim
    if isinstance(d, TileVar) and w.ragged(d) and not g.per_lane:
        return f"{col.name}[0:{w.count(d)}, :]"
    return col.name


def index_orient(core: Any, g: Gather) -> str:
    """The orientation that puts the index's partition dim on partitions."""
    pos = core.pos_of(max(g.index.rank - 2, 0))
    return "N" if pos == 0 else "T"


def column(w: Writer, g: Gather, tile: Any) -> str:
    """The subscript of one DMA's on-chip side and index: "" (the whole block) for a 1-D index;
    for a rank-N index one `(n, 1)` column, inside a Python loop over the free axis that this
    opens when the block has more than one column (the caller closes it)."""
    d = g.part_dim
    rows = f"0:{w.count(d)}" if isinstance(d, TileVar) and w.ragged(d) else ":"
    if not g.per_lane:
        return ""
    if tile.phys[1] == 1:
        return f"[{rows}, 0:1]"
    free = g.index.shape[-1]
    j = w.fresh("j")
    w.em.open(f"for {j} in range({_count(w, free)}):",
              comment="one indirect DMA per column: an index per element")
    return f"[{rows}, {j}:{j} + 1]"


def check_partitions(w: Writer, op: Op, g: Gather, tile: Any) -> None:
    """The tile holding the block has the index's dim on partitions, at most 128 of them."""
    d = g.part_dim
    n = w.eb(d) if isinstance(d, TileVar) else int(d)
    free = g.index.shape[-1]
    if g.per_lane and tile.phys[1] > 1 and tile.dims[1] is not free:
        raise ConfigError(f"the NKI lowering cannot {'gather' if op.kind == 'load' else 'scatter'} "
                          f"along `{op.attrs['tensor'].name}` axis {g.axis} here: the rank-"
                          f"{g.index.rank} index's last dim must be the block's free axis", op.loc,
                          "use the pallas or triton backend")
    if tile.phys[0] != n or (tile.dims[0] is not d and n > 1):
        raise ConfigError(f"the NKI lowering cannot {'gather' if op.kind == 'load' else 'scatter'} "
                          f"along `{op.attrs['tensor'].name}` axis {g.axis} here: its index's dim "
                          "must lie on partitions of the tile", op.loc,
                          "index one axis with the tile and keep the other dims of the block "
                          "to one more tile, or use the pallas or triton backend")
    if n > PMAX:
        w.too_big(d, n, "on partitions (one index per partition)", PMAX)


def block_axis(g: Gather, op: Op, v: Value) -> int:
    """The axis of `v` (the loaded block, or a stored value broadcast to it) with the gather dim."""
    block = op.result.rank if op.kind == "load" else v.rank
    if op.kind == "store":
        index = op.attrs["index"]
        block = sum(1 for ix in index if ix.kind not in ("int", "dyn")) + g.index.rank - 1
    return g.part_axis - (block - v.rank)


__all__ = ["Gather", "block_axis", "check_partitions", "column", "gather_of", "index_column",
           "index_orient", "indirect_view", "strides"]
