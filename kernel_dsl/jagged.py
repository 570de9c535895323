"""`kd.jagged_tile(parent)`: Helion's `hl.jagged_tile`, a loop over a jagged inner dimension.

`parent` is an integer tile whose every dim is an enclosing tile (`lengths = ends - starts`
with `starts = x_offsets[tile_b]`); `parent[lanes]` is where the child loop ends for those
parent lanes. No new IR op: the loop is `kd.tile(parent.amax())` (a data-dependent bound,
kernel_dsl/tile_bounds.py), and every load and store inside it whose block has the jagged
tile's dim is masked by `tile.index < parent` (broadcast over the block's dims):
- a load reads 0 in lanes past their row's end (`where(mask, load, 0)`), so a sum over the
  jagged dim sees zeros there (Helion's behaviour: its masked loads read `other=0`);
- a scatter writes nothing there (its index becomes -1, a lane outside the axis), so lanes past
  a row's end never touch the next row's elements; any other store is predicated as in a
  device `if` (device_if.py: the lanes keep what the tensor held).
As in Helion, a block that has the jagged dim must also have all of the parent's dims (Helion:
"a jagged child tile must be indexed together with its parent axes").
"""
from __future__ import annotations

import sys
from typing import Any

from .device_ops import Tile, TileValue, _emit, binary, cast_v, const, expand_dims, where
from .errors import KernelSyntaxError, ShapeError
from .ir import TileVar
from .tracing import Tracer, current, shape_only, user_loc

_INT = ("i32", "i16", "i8", "u8")


def _active(tr: Tracer) -> list[tuple[TileVar, TileValue]]:
    """(jagged tile, parent) of the jagged loops being traced, outermost first."""
    return tr.__dict__.setdefault("jagged", [])


class _JaggedLoop:
    """The `kd.tile(parent.amax())` loop, with its tile registered as jagged while it runs."""

    def __init__(self, loop: Any, parent: TileValue, tr: Tracer):
        self.loop, self.parent, self.tr = loop, parent, tr

    def __iter__(self) -> "_JaggedLoop":
        return self

    def __next__(self) -> Any:
        frame = sys._getframe(1)
        self.loop.step += 1
        if self.loop.step == 1:
            t: Tile = self.loop._enter(frame)
            _active(self.tr).append((t.var, self.parent))
            self.tr.jagged_fill = fill  # device_ops masks reductions through it
            return t
        if self.loop.step == 2:
            _active(self.tr).pop()
            self.loop._exit(frame)
        raise StopIteration


def jagged_tile(parent: Any) -> Any:
    """`for tk in kd.jagged_tile(lengths)`: tiles [0, max(lengths)) and masks each load and
    store inside by `tk.index < lengths` (see the module docstring)."""
    from .language import tile

    if shape_only():
        return iter(())
    tr = current()
    loc = user_loc()
    hint = ("pass per-lane ends read under the enclosing tiles, e.g. `lengths = "
            "x_offsets[tile_b.index + 1] - x_offsets[tile_b]`")
    if tr is None or tr.region is None:
        raise KernelSyntaxError("`kd.jagged_tile` is not the outermost loop of a kernel: it runs "
                                "inside a `kd.tile` loop", loc, hint)
    if not isinstance(parent, TileValue) or parent.v.rank < 1 or parent.v.dtype not in _INT:
        what = type(parent).__name__ if not isinstance(parent, TileValue) else \
            f"a rank-{parent.v.rank} {parent.v.dtype} value"
        raise KernelSyntaxError(f"`kd.jagged_tile` takes an integer tile of rank >= 1, got {what}",
                                loc, hint)
    tr.check_visible(parent.v, loc)
    enclosing = {v.id for v, _ in _active(tr)} | {t.id for t in tr.tiles}
    if not all(isinstance(d, TileVar) and d.id in enclosing for d in parent.v.shape):
        raise ShapeError("`kd.jagged_tile`: every dim of its parent must be an enclosing tile "
                         f"(got shape {parent.v.shape})", loc, hint)
    end = parent.amax() if parent.v.rank == 1 else parent.amax(dim=tuple(range(parent.v.rank)))
    return _JaggedLoop(tile(end), parent, tr)


def _mask(tr: Tracer, shape: tuple[Any, ...], what: str) -> TileValue | None:
    """The jagged mask of a block of `shape`, broadcastable to it; None if no jagged dim."""
    mask = None
    for var, parent in _active(tr):
        if not any(d is var for d in shape):
            continue
        pos = [next((i for i, d in enumerate(shape) if d is p), None) for p in parent.v.shape]
        k = next(i for i, d in enumerate(shape) if d is var)
        if any(p is None for p in pos) or pos != sorted(pos):  # type: ignore[type-var]
            raise ShapeError(
                f"{what} has the jagged tile `{var!r}` in its block but not its parent's dims "
                f"{parent.v.shape} (in that order)", user_loc(),
                "index the jagged tile together with its parent tiles, e.g. "
                "`x[tile_b, tile_k]` or `x_flat[starts[:, None] + tile_k.index[None, :]]`")
        par = parent
        for i in range(len(shape)):  # the parent's dims at their places in the block, 1 elsewhere
            if i not in pos:
                par = expand_dims(par, i)
        idx = _emit("iota", [], {"tile": var}, (var,), "i32")
        for i in range(len(shape)):
            if i != k:
                idx = expand_dims(idx, i)
        m = binary("lt", idx, par)
        mask = m if mask is None else mask & m
    return mask


def fill(x: TileValue, axis: int, value: float) -> TileValue:
    """`x` with `value` (the consumer's identity) in lanes past their row's end along a jagged
    `axis`, before a reduction, scan or contraction over it (Helion masks these by the jagged
    mask); unchanged when `x` lacks the parent's dims (nothing to compare against)."""
    tr = current()
    d = x.v.shape[axis]
    if tr is None or not any(v is d for v, _ in _active(tr)):
        return x
    parent = next(p for v, p in _active(tr) if v is d)
    if not all(any(e is p for e in x.v.shape) for p in parent.v.shape):
        return x
    m = _mask(tr, x.v.shape, "a reduction")
    return x if m is None else where(m, x, const(value, x.v.dtype))


def mask_load(tr: Tracer, v: TileValue, name: str) -> TileValue:
    """A load in a jagged loop: 0 in lanes past their row's end."""
    m = _mask(tr, v.v.shape, f"a load of `{name}`")
    if m is None:
        return v
    dt = v.v.dtype
    if dt in ("f8e4m3fn", "f8e5m2"):  # float8 has no `where`: select its bits (0x00 is +0.0)
        bits = where(m, _emit("bitcast", [v.v], {"dtype": "u8"}, v.v.shape, "u8"), const(0, "u8"))
        return _emit("bitcast", [bits.v], {"dtype": dt}, bits.v.shape, dt)
    return where(m, v, const(0, dt))


def jagged_dims(tr: Tracer, shape: tuple[Any, ...]) -> list[TileVar]:
    """The jagged tiles of the loops being traced that are dims of `shape`."""
    return [v for v, _ in _active(tr) if any(d is v for d in shape)]


def store_items(tr: Tracer, items: list[Any], shape: tuple[Any, ...],
                name: str) -> tuple[list[Any], TileValue | None]:
    """A store's subscript entries and predicate in a jagged loop. A scatter whose index tile
    has every jagged dim of the block (and their parents') gets index -1 in masked lanes:
    written nowhere, so lanes past a row's end leave the next row's elements alone. Any other
    store is predicated by the block's mask (a read-modify-write, as in a device `if`)."""
    jag = jagged_dims(tr, shape)
    if not jag:
        return items, None
    for i, it in enumerate(items):
        if isinstance(it, TileValue) and it.v.rank >= 1 and it.v.dtype in _INT \
                and all(any(d is v for d in it.v.shape) for v in jag):
            m = _mask(tr, it.v.shape, f"a store into `{name}`")
            assert m is not None
            idx = it if it.v.dtype == "i32" else cast_v(it, "i32")  # -1 must be a lane value
            items = list(items)
            items[i] = where(m, idx, const(-1, "i32"))
            return items, None
    return items, _mask(tr, shape, f"a store into `{name}`")
