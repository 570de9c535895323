"""Inclusive scans along a tile dim: `kd.associative_scan`, `kd.cumsum`, `kd.cumprod` (Helion's
`hl.*`) and torch's `cumsum`/`cumprod` (functions and tile methods). Importing this module
registers them.

Every scan is one IR op `scan` whose combine is one of SCAN_OPS (docs/ir.md). A user's combine
function is traced once, at trace time, on two probe scalars: it must come out as one of those
ops of its two arguments (`a + b`, `torch.maximum(a, b)`, `a * b`, `a | b`, ...). The scan runs in
f32 (floats) or i32 (integers and bool) and is cast back once, so 16-bit floats round once per
element (torch's opmath) and narrow integers wrap as they would step by step (modular
arithmetic; max/min/and/or/xor never leave the range).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import dtypes
from .device_ops import (
    METHODS,
    TileValue,
    _as_tile,
    _axis,
    _emit,
    _identity,
    _ir_dtype,
    cast_v,
    pad_fill,
)
from .errors import KernelSyntaxError, UnsupportedOpError
from .ir import SCAN_OPS, Region
from .torch_functions import HANDLERS
from .tracing import current, user_loc

_HINT = ("a combine function must be one elementwise op of its two arguments: `a + b`, `a * b`, "
         "`torch.maximum(a, b)`, `torch.minimum(a, b)`, `a & b`, `a | b` or `a ^ b`")
# the pad value of lanes past a ragged block's end, per combine op (reverse scans read them)
_REDUCE_NAME = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


def _identity_of(op: str, dtype: str) -> float:
    if op in _REDUCE_NAME:
        return _identity(_REDUCE_NAME[op], dtype)
    return -1.0 if op == "and" else 0.0


def scan(op: str, x: Any, dim: Any, reverse: bool = False, out_dtype: str | None = None) -> TileValue:
    """Inclusive `op`-scan of `x` along `dim`; the result has `out_dtype` (default: x's)."""
    t = _as_tile(x)
    if dim is None or isinstance(dim, (tuple, list)) or isinstance(dim, bool):
        raise KernelSyntaxError("a scan needs one int `dim`", user_loc(),
                                "write e.g. `torch.cumsum(x, dim=-1)`")
    axis = _axis(t, dim)
    src = t.v.dtype
    out_dtype = out_dtype or src
    work = "f32" if dtypes.is_float(out_dtype) else "i32"
    if op in ("and", "or", "xor") and work != "i32":
        raise UnsupportedOpError(f"a `{op}` scan of a float tile", user_loc(),
                                 "bit ops take integer or bool tiles (as in torch)")
    w = cast_v(cast_v(t, out_dtype), work)  # torch casts the input to `dtype` first
    if reverse:  # a reverse scan flows backward: lanes past a ragged end must be the identity
        w = pad_fill(w, axis, _identity_of(op, work))
    out = _emit("scan", [w.v], {"op": op, "axis": axis, "reverse": bool(reverse)}, w.v.shape, work)
    return cast_v(out, out_dtype)


def _combine_op(combine_fn: Callable[..., Any], dtype: str) -> str:
    """The SCAN_OPS op that `combine_fn(a, b)` computes, traced on two probe scalars."""
    tr = current()
    if tr is None or tr.region is None:
        raise KernelSyntaxError("`kd.associative_scan` is device code", user_loc(),
                                "call it on tiles inside a `kd.tile` loop")
    outer = tr.region
    scratch = Region(parent=outer)
    a = tr.new_value((), dtype, None, scratch)
    b = tr.new_value((), dtype, None, scratch)
    tr.region = scratch
    try:
        r = combine_fn(TileValue(a), TileValue(b))
    finally:
        tr.region = outer
    if isinstance(r, (tuple, list)) and len(r) == 1:
        r = r[0]
    op = r.v.op if isinstance(r, TileValue) else None
    if (op is None or op.kind not in SCAN_OPS or len(op.operands) != 2
            or {id(v) for v in op.operands} != {id(a), id(b)}):
        name = getattr(combine_fn, "__name__", "combine_fn")
        raise UnsupportedOpError(f"combine function `{name}` of `kd.associative_scan` is not one "
                                 "of the scans device code supports", user_loc(), _HINT)
    return op.kind


def associative_scan(combine_fn: Callable[..., Any], values: Any, dim: int,
                     reverse: bool = False) -> Any:
    """Helion's `hl.associative_scan`: the inclusive scan of `values` (a tile, or a tuple of
    one tile) along `dim` with `combine_fn`, right to left when `reverse`. The result has the
    input's shape and dtype."""
    single = not isinstance(values, (tuple, list))
    vals = [values] if single else list(values)
    if len(vals) != 1:
        raise UnsupportedOpError(f"`kd.associative_scan` of a tuple of {len(vals)} tiles",
                                 user_loc(), "scan one tile at a time; multi-value combines "
                                 "(Helion's tuple form) are not supported in device code")
    t = _as_tile(vals[0])
    work = "f32" if dtypes.is_float(t.v.dtype) else "i32"
    out = scan(_combine_op(combine_fn, work), t, dim, reverse)
    return out if single else (out,)


def cumsum(x: Any, dim: int, reverse: bool = False) -> TileValue:
    """Helion's `hl.cumsum`: the input's dtype (a bool tile counts in int32)."""
    t = _as_tile(x)
    return scan("add", t, dim, reverse, "i32" if t.v.dtype == "bool" else None)


def cumprod(x: Any, dim: int, reverse: bool = False) -> TileValue:
    """Helion's `hl.cumprod`: the input's dtype (a bool tile counts in int32)."""
    t = _as_tile(x)
    return scan("mul", t, dim, reverse, "i32" if t.v.dtype == "bool" else None)


def _torch_scan(op: str) -> Callable[..., TileValue]:
    """torch.cumsum / cumprod: integers and bool give int64, which device code holds as int32
    (docs/ir.md); `dtype=` casts the input first."""
    def h(x: Any, dim: Any = None, *, dtype: Any = None, **kw: Any) -> TileValue:
        t = _as_tile(x)
        dim = kw.pop("axis", dim)
        if kw:
            raise KernelSyntaxError(f"unexpected arguments {sorted(kw)}", user_loc())
        if dtype is not None:
            out = _ir_dtype(dtype)
        else:
            out = t.v.dtype if dtypes.is_float(t.v.dtype) else "i32"
        return scan(op, t, dim, False, out)
    return h


METHODS.update({"cumsum": _torch_scan("add"), "cumprod": _torch_scan("mul")})
HANDLERS[torch.cumsum] = _torch_scan("add")
HANDLERS[torch.cumprod] = _torch_scan("mul")
