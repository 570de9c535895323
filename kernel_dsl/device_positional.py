"""torch ops on tiles that need each lane's position along a dim: argmax/argmin, `max`/`min`
over a dim with indices. Built from IR ops (no new op each); importing this module
registers the methods.

Positions are the tile's own (0 .. its size along the dim), as torch gives them for the tile as
a tensor: a dim that spans the tensor gives tensor positions. Indices are int32 (torch's are
int64, which kernels do not take): store them into an int32 tensor.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

from . import device_math as dm
from . import dtypes
from .device_ops import (
    METHODS,
    TileValue,
    _as_tile,
    _axis,
    _emit,
    binary,
    cast_v,
    expand_dims,
    reduce,
    where,
)
from .errors import KernelSyntaxError
from .ir import TileVar
from .tracing import user_loc

PAST_END = 2**30  # past every position; exact in f32
MaxMin = namedtuple("MaxMin", ["values", "indices"])  # as torch.return_types.max / min


def positions(shape: tuple[Any, ...], axis: int) -> TileValue:
    """int32 lane positions along `axis`, shaped to broadcast against `shape` (unit dims
    elsewhere)."""
    d = shape[axis]
    if isinstance(d, TileVar):  # the block's global indices, less its start
        idx = binary("sub", _emit("iota", [], {"tile": d}, (d,), "i32"),
                     _emit("tile_begin", [], {"tile": d}, (), "i32"))
    else:
        idx = _emit("arange", [], {"size": d}, (d,), "i32")
    for _ in range(axis):
        idx = expand_dims(idx, 0)
    for _ in range(axis + 1, len(shape)):
        idx = expand_dims(idx, -1)
    return idx


def _need_dim(what: str, dim: Any) -> None:
    if dim is None:
        raise KernelSyntaxError(f"`{what}` over a whole tile is not supported", user_loc(),
                                f"give the dim: `{what}(x, dim=-1)`")


def arg_reduce(op: str, x: Any, dim: Any = None, keepdim: bool = False) -> TileValue:
    """The position of the first max (`op="max"`) or min along `dim`; NaN counts as both, as
    in torch (the first NaN wins)."""
    _need_dim(f"arg{op}", dim)
    t = _as_tile(x)
    if t.v.dtype == "bool":
        t = cast_v(t, "i32")
    axis = _axis(t, dim)
    best = reduce(op, t, axis, True)  # NaN anywhere makes it NaN (every backend keeps that)
    hit = binary("eq", t, best)
    if dtypes.is_float(t.v.dtype):
        hit = binary("or", hit, dm.isnan(t))
    # the first hit: a min over positions, in f32 (exact below 2**24), whose pad identity (inf)
    # every backend holds; pad lanes also lie past every real lane
    cand = where(hit, cast_v(positions(t.v.shape, axis), "f32"), float(PAST_END))
    return cast_v(reduce("min", cand, axis, keepdim), "i32")


def max_min(op: str, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    """`x.max()`, `x.max(other)` (elementwise) or `x.max(dim)` -> (values, indices)."""
    if dim is None:
        return reduce(op, x, None)
    if isinstance(dim, TileValue):
        return binary(op, x, dim)
    return MaxMin(reduce(op, x, dim, keepdim), arg_reduce(op, x, dim, keepdim))


METHODS.update({
    "argmax": lambda x, dim=None, keepdim=False: arg_reduce("max", x, dim, keepdim),
    "argmin": lambda x, dim=None, keepdim=False: arg_reduce("min", x, dim, keepdim),
    "max": lambda x, dim=None, keepdim=False: max_min("max", x, dim, keepdim),
    "min": lambda x, dim=None, keepdim=False: max_min("min", x, dim, keepdim),
})
