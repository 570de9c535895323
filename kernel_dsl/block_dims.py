"""A block size as a tile dimension: `bs = kd.register_block_size(n)`, `kd.zeros([tm, bs])`,
then `for tn in kd.tile(n, block_size=bs): acc += x[tm, tn]` (Helion's long_sum and kl_div).

The dim is the TileVar of the loop that takes that block size, so `acc` and `x[tm, tn]` have
the same shape and no op is needed to line them up. Used before its loop, it is that loop's
TileVar made early ("pending"): the next `kd.tile(..., block_size=bs)` adopts it. Used where a
loop with that block size is running (the grid's, or an enclosing one's), it is that loop's.

A value carried through the loop whose shape holds the loop's own dim (the accumulator) keeps,
in each iteration, its previous value in the lanes past the tile's end: a ragged last block
must not overwrite the sums of the blocks before it. After the loop every lane of such a value
is meaningful (lanes that no block reached keep their initial value, the user's identity:
zeros for a sum), so reductions over it there need no masking.
"""
from __future__ import annotations

from typing import Any

from .device_ops import Tile, TileValue, binary, expand_dims, where
from .errors import KernelSyntaxError, ShapeError, SourceLoc
from .ir import BlockSym, Region, TileVar, Value


def dim_of(tr: Any, sym: BlockSym, extent: int | None, loc: SourceLoc | None) -> TileVar:
    """The dim a block size stands for in a tile shape (`kd.zeros([tm, bs])`)."""
    pending = tr.pending_dims.get(sym.index)
    if pending is not None:
        return pending
    running = [t for t in tr.tiles if t.block is sym and tr.tile_live(t)]
    if running:
        return running[-1]
    if tr.region is None:
        raise KernelSyntaxError("a block size is used as a tile dim in host code", loc,
                                "make tiles inside the `kd.tile` loops")
    t = tr.new_tile(extent or 0, sym, "loop", loc, "")
    tr.pending_dims[sym.index] = t
    return t


def adopt(tr: Any, sym: BlockSym, extent: int | None, loc: SourceLoc | None) -> TileVar | None:
    """The pending dim a loop entered now with block size `sym` becomes, if there is one."""
    t = tr.pending_dims.pop(sym.index, None)
    if t is None:
        return None
    if extent is not None and t.extent not in (0, extent):
        raise ShapeError(f"a block-size dim of {t.extent} elements (`kd.register_block_size"
                         f"({t.extent})`) is taken by a loop over {extent}", loc,
                         f"register the block size of the loop's own size: "
                         f"`kd.register_block_size({extent})`")
    t.loc = loc
    return t


def keep_past_end(var: TileVar, body: Region, old: Value, new: Any) -> Any:
    """`new` with the lanes past `var`'s end (in this block) taken from `old`, for each of
    `new`'s dims that is `var`: the block argument replaces `old` when the loop closes."""
    out = new
    for axis, d in enumerate(new.v.shape):
        if d is not var:
            continue
        end: Any = var.extent if var.hi is None else TileValue(var.hi) if isinstance(
            var.hi, Value) else var.hi
        lanes = binary("lt", Tile(var, body).index, end)
        for _ in range(axis):
            lanes = expand_dims(lanes, 0)
        for _ in range(new.v.rank - axis - 1):
            lanes = expand_dims(lanes, lanes.v.rank)
        out = where(lanes, out, TileValue(old))
    return out
