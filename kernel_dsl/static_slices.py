"""`x[tm, a:b]`: a static slice of a tensor axis in a load or a store (Helion's concatenate).

Bounds are Python ints known while tracing (sizes from `.shape`, literals, their arithmetic),
so the slice is `Index("slice", value=a, stop=b)`: a resident part of the axis whose shape dim
is the int `b - a`, as `:` is the whole axis. As in torch, a negative bound counts from the end
and a stop past the end is clipped.
"""
from __future__ import annotations

from typing import Any

from .errors import KernelSyntaxError, ShapeError, SourceLoc, UnsupportedOpError
from .ir import Index


def _bound(b: Any, what: str, name: str, n: int, loc: SourceLoc | None) -> int | None:
    if b is None:
        return None
    if isinstance(b, bool) or not isinstance(b, int):
        raise UnsupportedOpError(
            f"`{name}[...]` slice {what} {b!r} is not a Python int", loc,
            "slice bounds must be known while tracing (ints, sizes from `.shape`); for a "
            "range that depends on data, loop with `kd.tile(begin, end)` and index with the tile")
    return max(n + int(b), 0) if b < 0 else int(b)  # torch: a negative bound counts from the end


def slice_index(name: str, axis: int, it: slice, n: int, loc: SourceLoc | None) -> Index:
    """The Index of `it` on an axis of `n` elements: "full" for the whole axis, else "slice"."""
    if it.step is not None and it.step != 1:
        raise UnsupportedOpError(
            f"`{name}[...]` slice with step {it.step!r} on axis {axis}", loc,
            "only contiguous slices `a:b` are supported; load the range and select in torch ops, "
            "or pass a strided host view (`x[:, ::2]` in host code) as an argument")
    start = _bound(it.start, "start", name, n, loc) or 0
    stop = _bound(it.stop, "stop", name, n, loc)
    stop = n if stop is None else min(stop, n)  # torch clips a stop past the end
    if start >= stop:
        raise ShapeError(f"`{name}[...]` slice {start}:{stop} of axis {axis} (size {n}) is empty",
                         loc, "empty tiles are not supported: drop the access or widen the slice")
    if (start, stop) == (0, n):
        return Index("full")
    return Index("slice", value=start, stop=stop)


def check_no_gather_mix(name: str, index: list[Index], loc: SourceLoc | None) -> None:
    if any(ix.kind == "slice" for ix in index) and any(ix.kind == "gather" for ix in index):
        raise KernelSyntaxError(
            f"`{name}[...]` mixes a gather index tile with a partial slice `a:b`", loc,
            "use `:` on the other axes of a gather, or load the slice and gather from it")
