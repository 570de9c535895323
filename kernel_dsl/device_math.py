"""torch's composite elementwise ops on tiles, built from the IR's ops (no new IR op each).

Each follows torch's definition in its own dtype rules: float math on 16-bit floats runs in f32
and rounds once at the end (torch's "opmath"), integer ops stay in their (promoted) dtype.
Importing this module registers the tile methods (`x.sign()`, `x.masked_fill(m, v)`, ...), and
the bit view `x.view(dtype)`, the one here that is its own IR op (`bitcast`).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from . import dtypes
from .device_dot import dot
from .device_ops import (
    INT_BINARY,
    METHODS,
    SYMBOL,
    TileValue,
    _as_tile,
    _bshape,
    _common,
    _emit,
    _ir_dtype,
    _sizes,
    binary,
    broadcast,
    cast,
    cast_v,
    const,
    full,
    mean,
    permute,
    reduce,
    transpose,
    unary,
    where,
)
from .errors import DTypeError, KernelSyntaxError, UnsupportedOpError
from .ir import DTYPE_BITS, Dim
from .tracing import user_loc


def _float_in(x: Any, what: str) -> tuple[TileValue, str]:
    """`x` in f32 for a float function, and the dtype to round the result to."""
    t = _as_tile(x)
    if not dtypes.is_float(t.v.dtype):
        raise DTypeError(f"{what} of a {t.v.dtype} tile is not supported (torch rejects it too)",
                         user_loc(), "cast to a float dtype first, e.g. `x.float()`")
    return cast_v(t, "f32"), t.v.dtype


def int_binary(kind: str, ta: TileValue, tb: TileValue, dt: str) -> TileValue:
    """Shifts, `//` and `%` of operands promoted to `dt`, with torch's semantics; the IR's ops
    take integers only (docs/ir.md)."""
    if dt == "bool" or (kind in ("shl", "shr") and dtypes.is_float(dt)):
        raise DTypeError(f"`{SYMBOL[kind]}` of {dt} tiles is not supported", user_loc(),
                         "cast to an integer dtype first, e.g. `x.to(torch.int32)`")
    shape = _bshape(kind, ta, tb)
    if kind in ("shl", "shr"):
        return _shift(kind, ta, tb, dt, shape)
    if dtypes.is_float(dt):  # floor(a / b), as torch.compile's Inductor computes it
        q = unary("floor", binary("div", ta, tb))
        return q if kind == "floordiv" else binary("sub", ta, binary("mul", q, tb))
    return _emit(kind, [ta.v, tb.v], {}, shape, dt)


def _shift(kind: str, a: TileValue, b: TileValue, dt: str, shape: tuple[Dim, ...]) -> TileValue:
    """torch's shifts: amounts outside [0, bits) give 0 (`<<`, and `>>` of unsigned) or the sign
    (`>>` of signed). The IR's shl/shr only see amounts in range."""
    bits, signed = dtypes.INT_BITS[dt], dt != "u8"
    op = b.v.op
    if op is not None and op.kind == "const":  # a Python int amount: decided now
        n = op.attrs["value"]
        if 0 <= n < bits:
            return _emit(kind, [a.v, b.v], {}, shape, dt)
        if kind == "shr" and signed:
            return _emit(kind, [a.v, const(bits - 1, dt).v], {}, shape, dt)
        return broadcast(full(a.v.shape, 0, dtypes.IR_TO_TORCH[dt]), shape)
    ok = binary("and", binary("ge", b, 0), binary("lt", b, bits))
    if kind == "shr" and signed:
        return _emit(kind, [a.v, where(ok, b, bits - 1).v], {}, shape, dt)
    out = _emit(kind, [a.v, where(ok, b, 0).v], {}, shape, dt)
    return where(ok, out, 0)


INT_BINARY.update({k: (lambda ta, tb, dt, k=k: int_binary(k, ta, tb, dt))
                   for k in ("shl", "shr", "floordiv", "mod")})


def round_(x: Any, decimals: int = 0) -> TileValue:
    """torch.round: half to even."""
    if decimals != 0:
        raise KernelSyntaxError("round(decimals=...) is not supported in device code", user_loc(),
                                "scale first: `(x * 100).round() / 100`")
    return unary("round", x)


def trunc(x: Any) -> TileValue:
    t = _as_tile(x)
    if not dtypes.is_float(t.v.dtype):
        return t
    return where(binary("lt", t, 0), unary("ceil", t), unary("floor", t))


def sign(x: Any) -> TileValue:
    """-1, 0 or 1 in x's dtype; torch.sign(nan) is 0."""
    t = _as_tile(x)
    if t.v.dtype == "bool":
        return t
    return binary("sub", cast_v(binary("gt", t, 0), t.v.dtype), cast_v(binary("lt", t, 0), t.v.dtype))


def isnan(x: Any) -> TileValue:
    t = _as_tile(x)
    return binary("ne", t, t)  # False for every integer


def isinf(x: Any) -> TileValue:
    t = _as_tile(x)
    if not dtypes.is_float(t.v.dtype):
        return binary("ne", t, t)
    return binary("eq", unary("abs", t), math.inf)


def isfinite(x: Any) -> TileValue:
    t = _as_tile(x)
    if not dtypes.is_float(t.v.dtype):
        return binary("eq", t, t)
    return binary("lt", unary("abs", t), math.inf)  # False for NaN and both infinities


def masked_fill(x: Any, mask: Any, value: Any) -> TileValue:
    """torch.masked_fill: `value` where `mask`, in x's dtype (the fill is cast, never promoted)."""
    t, m = _as_tile(x), _as_tile(mask)
    if m.v.dtype != "bool":
        raise DTypeError(f"masked_fill needs a bool mask, got {m.v.dtype}", user_loc(),
                         "compare to make a mask, e.g. `x.masked_fill(x < 0, 0.0)`")
    fill = cast_v(value, t.v.dtype) if isinstance(value, TileValue) else const(value, t.v.dtype)
    return where(m, fill, t)


def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> TileValue:
    """torch's softplus: x where x * beta > threshold, else log1p(exp(x * beta)) / beta."""
    t, dt = _float_in(x, "softplus")
    z = binary("mul", t, float(beta)) if beta != 1 else t
    soft = unary("log1p", unary("exp", z))
    if beta != 1:
        soft = binary("div", soft, float(beta))
    return cast_v(where(binary("gt", z, float(threshold)), t, soft), dt)


def gelu(x: Any, approximate: str = "none") -> TileValue:
    t, dt = _float_in(x, "gelu")
    if approximate == "none":  # x/2 (1 + erf(x / sqrt 2))
        inner = unary("erf", binary("mul", t, math.sqrt(0.5)))
    elif approximate == "tanh":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = binary("mul", binary("mul", t, t), t)
        inner = unary("tanh", binary("mul", binary("add", t, binary("mul", cube, 0.044715)),
                                     math.sqrt(2.0 / math.pi)))
    else:
        raise KernelSyntaxError(f"gelu(approximate={approximate!r})", user_loc(),
                                "approximate is 'none' or 'tanh'")
    return cast_v(binary("mul", binary("mul", t, 0.5), binary("add", inner, 1.0)), dt)


def div(a: Any, b: Any, rounding_mode: str | None = None) -> TileValue:
    """torch.div: true division, or rounded "trunc" (toward zero) / "floor"."""
    if rounding_mode is None:
        return binary("div", a, b)
    if rounding_mode == "floor":
        return binary("floordiv", a, b)
    if rounding_mode != "trunc":
        raise KernelSyntaxError(f"torch.div(rounding_mode={rounding_mode!r})", user_loc(),
                                "rounding_mode is None, 'trunc' or 'floor'")
    (ta, tb), dt = _common(a, b)
    if dtypes.is_float(dt):
        return cast_v(trunc(binary("div", cast_v(ta, "f32"), cast_v(tb, "f32"))), dt)
    # floor rounds one lower than trunc exactly where the division is inexact and negative
    inexact_neg = _inexact_negative(ta, tb)
    return binary("add", binary("floordiv", ta, tb), cast_v(inexact_neg, dt))


def _inexact_negative(a: TileValue, b: TileValue) -> TileValue:
    """a / b is not whole and negative (integers): a % b != 0 and the signs differ."""
    return binary("and", binary("ne", binary("mod", a, b), 0), binary("lt", binary("xor", a, b), 0))


def remainder(a: Any, b: Any) -> TileValue:
    return binary("mod", a, b)  # the sign of the divisor, as Python's %


def fmod(a: Any, b: Any) -> TileValue:
    """C's fmod: the remainder of the division rounded toward zero (the sign of the dividend)."""
    (ta, tb), dt = _common(a, b)
    if dtypes.is_float(dt):  # in f32, rounded once
        a32, b32 = cast_v(ta, "f32"), cast_v(tb, "f32")
        return cast_v(binary("sub", a32, binary("mul", trunc(binary("div", a32, b32)), b32)), dt)
    return binary("sub", binary("mod", ta, tb), where(_inexact_negative(ta, tb), tb, 0))


def bitwise_not(x: Any) -> TileValue:
    return unary("not", x)


def _truth(x: Any) -> TileValue:
    t = _as_tile(x)
    return t if t.v.dtype == "bool" else binary("ne", t, 0)


def logical(kind: str) -> Callable[..., TileValue]:
    """torch.logical_and/or/xor: on truth values (nonzero), never bitwise."""
    return lambda a, b: binary(kind, _truth(a), _truth(b))


def logical_not(x: Any) -> TileValue:
    return unary("not", _truth(x))


def view(x: Any, *args: Any, **kwargs: Any) -> TileValue:
    """`tile.view(dtype)`, torch's bit view: the same bits read as a dtype of the same width
    (an IR `bitcast`). Views that change the width or the shape are not supported."""
    dtype = kwargs.get("dtype", args[0] if len(args) == 1 else None)
    if not isinstance(dtype, torch.dtype):
        raise UnsupportedOpError("`.view(shape)` of a tile (a reshape) is not supported", user_loc(),
                                 "`.view(dtype)` reads a tile's bits as another dtype; for shapes "
                                 "index the tensor as you need it or add unit axes with `[:, None]`")
    t, dt = _as_tile(x), _ir_dtype(dtype)
    src = t.v.dtype
    if dt == src:
        return t
    if "bool" in (src, dt):
        raise DTypeError(f"`.view({dtype})` of a {src} tile: bool has no bit view in kernels",
                         user_loc(), "convert instead: `x.to(torch.uint8)` or `x != 0`")
    if DTYPE_BITS[src] != DTYPE_BITS[dt]:
        raise DTypeError(
            f"`.view({dtype})` of a {src} tile changes the element width ({DTYPE_BITS[src]} -> "
            f"{DTYPE_BITS[dt]} bits), which would change the tile's shape", user_loc(),
            "bit views keep the width: float32 <-> int32, bfloat16/float16 <-> int16, int8 <-> "
            "uint8, float8 <-> int8/uint8; split or join narrower fields with shifts and masks, "
            "e.g. `(x >> 8) & 0xFF`")
    return _emit("bitcast", [t.v], {"dtype": dt}, t.v.shape, dt)


def _reduce_method(op: str) -> Callable[..., TileValue]:
    """`x.sum(dim, keepdim, dtype)` and friends, as torch's tensor methods take them."""
    def method(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None,
               **kw: Any) -> TileValue:
        return reduce(op, x if dtype is None else cast(x, dtype), kw.get("axis", dim), keepdim)
    return method


METHODS.update({k: (lambda k: lambda x: unary(k, x))(k) for k in (
    "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "relu", "sin", "cos", "erf",
    "neg")})
METHODS.update({k: (lambda d: lambda x: cast(x, d))(d) for k, d in (
    ("float", torch.float32), ("half", torch.float16), ("bfloat16", torch.bfloat16),
    ("int", torch.int32))})
METHODS.update({
    "type_as": lambda x, o: cast(x, o.dtype), "reciprocal": lambda x: binary("div", 1.0, x),
    "square": lambda x: binary("mul", x, x),
    "sum": _reduce_method("sum"), "prod": _reduce_method("prod"),
    "amax": _reduce_method("max"), "amin": _reduce_method("min"),
    "mean": lambda x, dim=None, keepdim=False, **kw: mean(x, kw.get("axis", dim), keepdim),
    "maximum": lambda x, o: binary("max", x, o), "minimum": lambda x, o: binary("min", x, o),
    "matmul": lambda x, o: dot(x, o), "t": lambda x: transpose(x, 0, 1),
    "transpose": transpose, "permute": lambda x, *dims: permute(x, dims),
    "expand": lambda x, *sizes: broadcast(x, _sizes(sizes)),
    "expand_as": lambda x, o: broadcast(x, o.shape),
    "broadcast_to": lambda x, shape: broadcast(x, _sizes((shape,))),
})
METHODS.update({
    "view": view,
    "floor": lambda x: unary("floor", x), "ceil": lambda x: unary("ceil", x),
    "round": round_, "trunc": trunc, "fix": trunc,
    "sign": sign, "log1p": lambda x: unary("log1p", x), "expm1": lambda x: unary("expm1", x),
    "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "masked_fill": masked_fill,
    "clamp_min": lambda x, v: binary("max", x, v), "clamp_max": lambda x, v: binary("min", x, v),
    "pow": lambda x, e: binary("pow", x, e), "div": div,
    "floor_divide": lambda a, b: binary("floordiv", a, b),
    "remainder": remainder, "fmod": fmod, "bitwise_not": bitwise_not,
    "bitwise_and": lambda a, b: binary("and", a, b), "bitwise_or": lambda a, b: binary("or", a, b),
    "bitwise_xor": lambda a, b: binary("xor", a, b),
    "bitwise_left_shift": lambda a, b: binary("shl", a, b),
    "bitwise_right_shift": lambda a, b: binary("shr", a, b),
    "logical_not": logical_not, "logical_and": logical("and"), "logical_or": logical("or"),
    "logical_xor": logical("xor"),
})

