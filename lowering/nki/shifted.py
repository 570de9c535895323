"""Gathers that are shifted blocks: `x[t.index + c]` (also `t.index - c`, `c + t.index`, through
integer casts), with `c` a static int of the IR.

Such an index is affine with unit stride in the tile's lanes: lane i of block b reads element
`begin_b + i + c` of the axis. That is the plain block of `t` shifted by `c`, an ordinary DMA of
elements `[begin_b + c, begin_b + c + count_b)` rather than a per-partition indirect DMA, which
kernel_dsl's NKI interpreter does not model (docs/nki.md). lower_memory.py renders it; every other
gather or scatter keeps render.py's ConfigError.

Lanes past the tile's ragged edge are never moved (as for any tile). Where the shifted range may
leave `[0, size)` (`c < 0`, or the tile's last element plus `c` past the end), the DMA is clipped
to the in-bounds part: a load never reads out of bounds and gets 0 in those lanes (docs/ir.md:
an in-range lane with an out-of-range index is the user's bug), a store writes nothing there.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernel_dsl.ir import INT_DTYPES, Index, Op, TensorParam, TileVar, Value

_RANGE = {"i32": (-2 ** 31, 2 ** 31 - 1), "i16": (-2 ** 15, 2 ** 15 - 1), "i8": (-128, 127),
          "u8": (0, 255)}


@dataclass(frozen=True)
class Shift:
    """A gather entry on `axis` whose lane i indexes `begin(tile) + i + by`."""

    axis: int
    tile: TileVar
    by: int
    in_bounds: bool  # statically: every in-range lane's index lies in [0, size)

    def expr(self, begin: str) -> str:
        """The first index of the shifted block, as Python source."""
        if self.by == 0:
            return begin
        return f"{begin} {'+' if self.by > 0 else '-'} {abs(self.by)}"

    def describe(self, p: TensorParam) -> str:
        by = "" if self.by == 0 else f" {'+' if self.by > 0 else '-'} {abs(self.by)}"
        return (f"`{p.name}` axis {self.axis} at `{self.tile!r}.index{by}`: the block of "
                f"{self.tile!r} shifted by {self.by:+d} (a unit-stride gather, a plain DMA)")


def _static_int(v: Value) -> int | None:
    """The value of an integer constant, through casts."""
    op = v.op
    while op is not None and op.kind == "cast" and v.dtype in INT_DTYPES:
        v = op.operands[0]
        op = v.op
    if op is not None and op.kind == "const":
        x = op.attrs["value"]
        if isinstance(x, int) and not isinstance(x, bool):
            return int(x)
    return None


def _index_range(t: TileVar) -> tuple[int, int] | None:
    """Static bounds (lo, hi inclusive) of `t.index` over in-range lanes, if known."""
    if not t.bounded:
        return 0, t.extent - 1
    if not isinstance(t.lo, int):
        return None
    if isinstance(t.hi, int):
        return t.lo, t.hi - 1
    return (t.lo, t.limit - 1) if t.limit is not None else None


def _affine(v: Value) -> tuple[TileVar, int, list[tuple[str, int]]] | None:
    """`v = t.index + c`: (t, c, [(dtype, c at that value)] along the chain), else None."""
    op = v.op
    if op is None or v.dtype not in INT_DTYPES or len(v.shape) != 1:
        return None
    if op.kind == "iota":
        t = op.attrs["tile"]
        return (t, 0, [(v.dtype, 0)]) if v.shape[0] is t else None
    if op.kind == "cast":
        got = _affine(op.operands[0])
        if got is None:
            return None
        t, c, chain = got
        return t, c, chain + [(v.dtype, c)]
    if op.kind in ("add", "sub"):
        a, b = op.operands
        kb = _static_int(b)
        if kb is not None:
            got, k = _affine(a), (kb if op.kind == "add" else -kb)
        elif op.kind == "add" and _static_int(a) is not None:
            got, k = _affine(b), _static_int(a)
        else:
            return None
        if got is None or k is None:
            return None
        t, c, chain = got
        return t, c + k, chain + [(v.dtype, c + k)]
    return None


def shift_of(op: Op) -> Shift | None:
    """The shifted block of a load or (non-atomic) store with one gather entry, else None."""
    if op.kind not in ("load", "store") or op.attrs.get("atomic"):
        return None
    index: tuple[Index, ...] = op.attrs["index"]
    gathers = [a for a, ix in enumerate(index) if ix.kind == "gather"]
    if len(gathers) != 1:
        return None
    axis = gathers[0]
    assert index[axis].scalar is not None
    if index[axis].scalar.rank != 1:  # an N-D index is no shifted block
        return None
    got = _affine(index[axis].scalar)
    if got is None:
        return None
    t, c, chain = got
    if any(ix.kind == "tile" and ix.tile is t for ix in index):
        return None  # `x[t.index + 1, t]`: the tile twice in one block
    rng = _index_range(t)
    for dtype, k in chain:  # no value of the chain may wrap in its integer type
        lo, hi = _RANGE[dtype]
        if rng is None:
            if dtype != "i32":
                return None
        elif not (lo <= rng[0] + k and rng[1] + k <= hi):
            return None
    p: TensorParam = op.attrs["tensor"]
    size = p.shape[axis]
    in_bounds = rng is not None and rng[0] + c >= 0 and rng[1] + c < size
    return Shift(axis, t, c, in_bounds)


__all__ = ["Shift", "shift_of"]
