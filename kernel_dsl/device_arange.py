"""`kd.arange` and `torch.arange` in device code (Helion's `hl.arange`): a 1-D int32 tile of
consecutive positions, from the IR's `arange` (a static length) or a tile's own lane positions.

- `kd.arange(n)`, `kd.arange(begin, end, step)`: ints known while tracing; the length is
  `ceil((end - begin) / step)`, a full dim of that size.
- `kd.arange(tile.block_size)` (Helion's `tile.begin + hl.arange(tile.block_size)`): the tile's
  lanes' positions 0 .. block size - 1, shaped by the tile, so it broadcasts against the tile's
  values. `tile.begin + kd.arange(tile.block_size)` is `tile.index`.
- a begin or end that is a device value (`torch.arange(t.begin, t.end)`) has a length known only
  where the kernel runs: refused, with `t.index` as the hint.
`dtype=` casts the result (torch's default, int64, is int32 here: kernel_dsl/wide_ints.py).
"""
from __future__ import annotations

from typing import Any

import torch

from .device_ops import TileValue, _emit, _ir_dtype, binary, cast_v
from .errors import KernelSyntaxError
from .torch_functions import HANDLERS
from .tracing import user_loc


def _tile_of_block_size(x: Any) -> Any:
    """The TileVar whose `block_size` `x` is, or None."""
    op = x.v.op if isinstance(x, TileValue) else None
    return op.attrs["tile"] if op is not None and op.kind == "tile_size" else None


def arange(begin_or_end: Any, end: Any = None, step: Any = 1, *, dtype: Any = None,
           **_: Any) -> TileValue:
    """A 1-D int32 tile (or `dtype`) of positions; see the module docstring."""
    tile = _tile_of_block_size(begin_or_end) if end is None else None
    if tile is not None:
        out = binary("sub", _emit("iota", [], {"tile": tile}, (tile,), "i32"),
                     _emit("tile_begin", [], {"tile": tile}, (), "i32"))
    else:
        begin, end = (0, begin_or_end) if end is None else (begin_or_end, end)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (begin, end, step)):
            raise KernelSyntaxError(
                "`arange` in device code needs int bounds known while tracing (or a tile's "
                "`block_size`)", user_loc(),
                "for a tile's global positions use `t.index` (`t.begin + kd.arange(t.block_size)`)"
                "; for a full dim, `kd.arange(n)` with n an int from the shapes")
        if step == 0:
            raise KernelSyntaxError("`arange` step must be nonzero", user_loc(), "use step=1")
        n = max(0, -((begin - end) // step))
        if n == 0:
            raise KernelSyntaxError(f"`arange({begin}, {end}, {step})` is empty", user_loc(),
                                    "device values need at least one element")
        out = _emit("arange", [], {"size": n}, (n,), "i32")
        if step != 1:
            out = binary("mul", out, step)
        if begin:
            out = binary("add", out, begin)
    return out if dtype is None else cast_v(out, _ir_dtype(dtype))


HANDLERS[torch.arange] = arange  # with a tile value among its arguments
