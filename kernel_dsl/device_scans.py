"""Inclusive scans along a tile dim: `kd.associative_scan`, `kd.cumsum`, `kd.cumprod` (Helion's
`hl.*`) and torch's `cumsum`/`cumprod` (functions and tile methods). Importing this module
registers them.

Every scan is one IR op `scan` (docs/ir.md). A user's combine function is traced once, on `[]`
probe values, into a region: one SCAN_OPS op of its two arguments (`a + b`, `torch.maximum(a,
b)`, ...) becomes that op (each backend has a fast form); anything else (several values, a
`where`, ...) stays a region the backend inlines (op="combine"). The scan runs in
f32 (floats) or i32 (integers and bool) and is cast back once, so 16-bit floats round once per
element (torch's opmath) and narrow integers wrap as they would step by step (modular
arithmetic; max/min/and/or/xor never leave the range).
"""
from __future__ import annotations

import inspect
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
    binary,
    cast_v,
    full,
    pad_fill,
    where,
)
from .errors import KernelSyntaxError, ShapeError, UnsupportedOpError
from .ir import SCAN_OPS, Op, Region
from .torch_functions import HANDLERS
from .tracing import current, user_loc

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


def _trace_combine(combine_fn: Callable[..., Any], dts: list[str], tuple_form: bool
                   ) -> tuple[Region, list[Any]]:
    """`combine_fn` traced into a fresh region on `[]` probe values: (region, its results)."""
    tr = current()
    if tr is None or tr.region is None:
        raise KernelSyntaxError("`kd.associative_scan` is device code", user_loc(),
                                "call it on tiles inside a `kd.tile` loop")
    outer = tr.region
    scratch = Region(parent=outer)
    scratch.args = [tr.new_value((), dt, None, scratch) for dt in dts + dts]
    a = [TileValue(v) for v in scratch.args[:len(dts)]]
    b = [TileValue(v) for v in scratch.args[len(dts):]]
    tr.region = scratch
    try:
        r = combine_fn(tuple(a), tuple(b)) if tuple_form else combine_fn(*a, *b)
    finally:
        tr.region = outer
    rs = list(r) if isinstance(r, (tuple, list)) else [r]
    return scratch, rs


def _single_op(region: Region, rs: list[Any]) -> str | None:
    """The SCAN_OPS op a one-value combine computes, if it is one op of its two arguments."""
    if len(rs) != 1 or not isinstance(rs[0], TileValue):
        return None
    op = rs[0].v.op
    if op is None or op.kind not in SCAN_OPS or len(op.operands) != 2 \
            or {id(v) for v in op.operands} != {id(v) for v in region.args}:
        return None
    return op.kind


def _takes_tuples(fn: Callable[..., Any], n: int) -> bool:
    """Helion's two forms for n > 1 values: fn((a0, a1), (b0, b1)) or fn(a0, a1, b0, b1)."""
    if n == 1:
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 2


def _general(combine_fn: Callable[..., Any], ts: list[TileValue], axis: int, reverse: bool,
             region: Region, rs: list[Any], tuple_form: bool) -> list[TileValue]:
    """A scan whose combine is the traced region itself (IR `scan` with op="combine")."""
    tr = current()
    assert tr is not None
    n = len(ts)
    works = [v.dtype for v in region.args[:n]]
    if len(rs) != n or not all(isinstance(r, TileValue) for r in rs):
        raise KernelSyntaxError(f"the combine function returns {len(rs)} values for {n} scanned "
                                "tiles", user_loc(), "return one value per scanned tile")
    # a reverse scan reads lanes past the end first: a validity flag keeps them out (the
    # tracer's pad_fill for a ragged tile, the backend's own mask for lanes it pads)
    flag = bool(reverse)
    outer = tr.region
    tr.region = region
    try:
        ys = [cast_v(r, w) for r, w in zip(rs, works)]
        if flag:  # lanes past a ragged end (a prefix of the reversed order) drop out
            fa, fb = (tr.new_value((), "i32", None, region) for _ in range(2))
            region.args[n:n] = [fa]
            region.args.append(fb)
            has = binary("ne", TileValue(fa), 0)
            ys = [where(has, y, TileValue(b)) for y, b in zip(ys, region.args[n + 1:2 * n + 1])]
            ys.append(binary("or", TileValue(fa), TileValue(fb)))
    finally:
        tr.region = outer
    inside = {id(v) for v in region.args} | {id(r) for o in region.walk() for r in o.results}
    for o in region.ops:
        if any(id(v) not in inside for v in o.operands):
            raise KernelSyntaxError("the combine function uses a tile from outside its "
                                    "arguments", user_loc(), "pass such values as scanned "
                                    "tiles, or compute with them after the scan")
    region.yields = [y.v for y in ys]
    ws = [cast_v(t, w) for t, w in zip(ts, works)]
    if flag:
        ones = full(ts[0].v.shape, 1, torch.int32)
        ws.append(pad_fill(ones, axis, 0))
    op = Op("scan", [w.v for w in ws], {"op": "combine", "axis": axis, "reverse": bool(reverse),
                                       "combine": region, "flag": flag}, [], user_loc())
    body = tr.require_region("scan", op.loc)
    op.results = [tr.new_value(w.v.shape, w.v.dtype, op, body) for w in ws]
    body.ops.append(op)
    return [cast_v(TileValue(r), t.v.dtype) for r, t in zip(op.results[:n], ts)]


def associative_scan(combine_fn: Callable[..., Any], values: Any, dim: int,
                     reverse: bool = False) -> Any:
    """Helion's `hl.associative_scan`: the inclusive scan of `values` (a tile, or a tuple of
    tiles of one shape) along `dim` with `combine_fn`, applied as `combine(earlier, later)`
    (reverse: `combine(later, earlier)`, the scan of the reversed sequence, as Helion's). The
    result has the input's shapes and dtypes."""
    single = not isinstance(values, (tuple, list))
    ts = [_as_tile(v) for v in ([values] if single else values)]
    if not ts or any(t.v.shape != ts[0].v.shape for t in ts):
        raise ShapeError("`kd.associative_scan` scans tiles of one shape", user_loc(),
                         "broadcast them first: `b.expand_as(a)`")
    if dim is None or isinstance(dim, (tuple, list, bool)):
        raise KernelSyntaxError("a scan needs one int `dim`", user_loc(),
                                "write e.g. `kd.associative_scan(fn, x, dim=-1)`")
    axis = _axis(ts[0], dim)
    works = ["f32" if dtypes.is_float(t.v.dtype) else "i32" for t in ts]
    tuple_form = _takes_tuples(combine_fn, len(ts))
    region, rs = _trace_combine(combine_fn, works, tuple_form)
    kind = _single_op(region, rs) if len(ts) == 1 else None
    if kind is not None:
        out = [scan(kind, ts[0], axis, reverse)]
    else:
        out = _general(combine_fn, ts, axis, reverse, region, rs, tuple_form)
    return out[0] if single else tuple(out)


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
