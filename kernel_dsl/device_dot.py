"""Matrix products of tiles: `a @ b`, `torch.matmul` and `kd.dot(a, b, acc=, out_dtype=)` as
the IR's `dot` op (operand checks, ragged lanes of the contracted dim zeroed, the accumulator
and float8 / out_dtype result rules). Importing this module registers `TileValue.__matmul__`.
"""
from __future__ import annotations

from typing import Any

import torch

from . import dtypes
from .device_ops import TileValue, _as_tile, _emit, binary, pad_fill
from .errors import DTypeError, ShapeError
from .ir import TileVar, shape_str
from .tracing import current, user_loc


def _dot_out_dtype(out_dtype: Any) -> str | None:
    """Helion's `hl.dot(..., out_dtype=)`: the product's dtype before any accumulation."""
    if out_dtype is None:
        return None
    dt = dtypes.to_ir(out_dtype) if isinstance(out_dtype, torch.dtype) else None
    if dt not in ("f32", "bf16", "f16"):
        raise DTypeError(f"dot out_dtype={out_dtype!r}", user_loc(),
                         "pass torch.float32, torch.bfloat16 or torch.float16")
    return dt


def dot(a: Any, b: Any, acc: Any = None, out_dtype: Any = None) -> TileValue:
    out_dt = _dot_out_dtype(out_dtype)
    ta, tb = _as_tile(a), _as_tile(b)
    if ta.v.rank < 2 or ta.v.rank != tb.v.rank:
        raise ShapeError(f"matmul of {shape_str(ta.v.shape)} and {shape_str(tb.v.shape)}: both "
                         "operands need the same rank ≥ 2", user_loc(),
                         "index 2-D tiles, or add unit axes so the batch dims match")
    if ta.v.dtype != tb.v.dtype:
        raise DTypeError(f"matmul of {ta.v.dtype} and {tb.v.dtype} tiles", user_loc(),
                         "cast one side so both have the same dtype, e.g. `b.to(a.dtype)`")
    if not dtypes.is_float(ta.v.dtype):
        raise DTypeError(f"matmul of {ta.v.dtype} tiles is not supported", user_loc(),
                         "use float32, bfloat16 or float16 operands")
    ka, kb = ta.v.shape[-1], tb.v.shape[-2]
    if not (ka is kb or ka == kb) or ta.v.shape[:-2] != tb.v.shape[:-2]:
        raise ShapeError(f"matmul of {shape_str(ta.v.shape)} and {shape_str(tb.v.shape)}: inner "
                         "dims differ", user_loc(), "contract over the same tile on both sides")
    prefix = current().prefix_uses.get(ka.id) if isinstance(ka, TileVar) else None
    if prefix is not None:  # `x[tm, tk] @ w[tk, tn]` with w taller than x is wide: a shape bug
        name, axis, n = prefix
        raise ShapeError(f"matmul contracts tile `{ka!r}` over {ka.extent} elements, but it "
                         f"indexes axis {axis} of `{name}`, which has {n}: the inner dims differ",
                         user_loc(), "check the operands' shapes; to contract a leading part "
                         f"on purpose, loop over `kd.tile(0, {ka.extent})`")
    ta = pad_fill(ta, ta.v.rank - 1, 0.0)
    tb = pad_fill(tb, tb.v.rank - 2, 0.0)
    shape = ta.v.shape[:-1] + (tb.v.shape[-1],)
    if acc is None:  # float8 products come out in f32, their accumulation dtype (as Helion's)
        dt = out_dt or ("f32" if ta.v.dtype in dtypes.FP8 else ta.v.dtype)
        return _emit("dot", [ta.v, tb.v], {}, shape, dt)
    tacc = _as_tile(acc)
    if out_dt is not None and out_dt != tacc.v.dtype:  # the product in out_dtype, then added
        return binary("add", tacc, _emit("dot", [ta.v, tb.v], {}, shape, out_dt))
    if tacc.v.shape != shape:
        raise ShapeError(f"dot accumulator is {shape_str(tacc.v.shape)}, product is "
                         f"{shape_str(shape)}", user_loc(), "accumulate into a tile of the product's shape")
    if not dtypes.is_float(tacc.v.dtype):
        raise DTypeError("dot accumulator must be a float tile", user_loc(),
                         "use `kd.zeros([tm, tn], dtype=torch.float32)`")
    return _emit("dot", [ta.v, tb.v, tacc.v], {}, shape, tacc.v.dtype)


def _matmul(self: TileValue, o: Any) -> TileValue:
    return dot(self, o)


def _rmatmul(self: TileValue, o: Any) -> TileValue:
    return dot(o, self)


TileValue.__matmul__ = _matmul  # type: ignore[attr-defined]
TileValue.__rmatmul__ = _rmatmul  # type: ignore[attr-defined]
