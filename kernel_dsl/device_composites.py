"""torch's composite ops over a dim of a tile, built from the IR's reductions (no new IR op each):
softmax, log_softmax and logsumexp (accumulated in f32, as torch does for 16-bit floats, and
rounded once), squeeze of unit dims, and baddbmm/addmm with beta and alpha.

Lanes past the end of a ragged tile drop out of every sum and max: `reduce` fills them with the
reduction's identity first (device_ops.pad_fill). Importing this module registers the methods.
"""
from __future__ import annotations

from typing import Any

from . import dtypes
from .device_dot import dot
from .device_math import _float_in
from .device_ops import (
    METHODS,
    TileValue,
    _as_tile,
    _axis,
    add,
    binary,
    cast,
    cast_v,
    reduce,
    unary,
    where,
)
from .errors import DTypeError
from .ir import TileVar
from .tracing import user_loc

LN2 = 0.6931471805599453


def _f32_in(x: Any, dtype: Any, what: str) -> tuple[TileValue, str]:
    """`x` (cast to `dtype` first, if given) in f32, and the dtype of the result."""
    return _float_in(_as_tile(x) if dtype is None else cast(_as_tile(x), dtype), what)


def softmax(x: Any, dim: int, dtype: Any = None, **_: Any) -> TileValue:
    t, out_dt = _f32_in(x, dtype, "softmax")
    d = _axis(t, dim)
    e = unary("exp", binary("sub", t, reduce("max", t, d, True)))  # a row of -inf: NaN, as torch
    return cast_v(binary("div", e, reduce("sum", e, d, True)), out_dt)


def log_softmax(x: Any, dim: int, dtype: Any = None, **_: Any) -> TileValue:
    t, out_dt = _f32_in(x, dtype, "log_softmax")
    d = _axis(t, dim)
    z = binary("sub", t, reduce("max", t, d, True))
    return cast_v(binary("sub", z, unary("log", reduce("sum", unary("exp", z), d, True))), out_dt)


def logsumexp(x: Any, dim: Any, keepdim: bool = False) -> TileValue:
    t, out_dt = _f32_in(x, None, "logsumexp")
    dims = [dim] if isinstance(dim, int) else list(dim)
    axes = sorted({_axis(t, d) for d in dims}, reverse=True)
    m = t
    for a in axes:
        m = reduce("max", m, a, True)
    m = where(binary("lt", unary("abs", m), float("inf")), m, 0.0)  # +-inf rows stay +-inf
    s = unary("exp", binary("sub", t, m))
    for a in axes:
        s = reduce("sum", s, a, True)
    # a row of -inf sums to 0, any other row to >= 1: log never sees 0 (NKI's ScalarE returns
    # garbage for log(0)), and the empty row is -inf as in torch
    empty = binary("eq", s, 0.0)
    out = where(empty, float("-inf"), binary("add", unary("log", where(empty, 1.0, s)), m))
    if not keepdim:
        out = squeeze(out, axes)
    return cast_v(out, out_dt)


def logaddexp(a: Any, b: Any) -> TileValue:
    """`log(exp(a) + exp(b))` as `max + log1p(exp(-|a - b|))` in f32; equal arguments (two
    infinities of one sign included, where `a - b` is NaN) give `a + log(2)`, as torch."""
    ta, tb = _as_tile(a), _as_tile(b)
    dt = dtypes.promote(ta.v.dtype, tb.v.dtype)
    if not dtypes.is_float(dt):
        raise DTypeError(f"logaddexp of {dt} tiles is not supported (torch rejects it too)",
                         user_loc(), "cast to a float dtype first")
    fa, fb = cast_v(ta, "f32"), cast_v(tb, "f32")
    gap = unary("exp", unary("neg", unary("abs", binary("sub", fa, fb))))
    far = binary("add", binary("max", fa, fb), unary("log1p", gap))
    return cast_v(where(binary("eq", fa, fb), binary("add", fa, LN2), far), dt)


def squeeze(x: Any, dim: Any = None) -> TileValue:
    """Drops unit dims (all of them, or those of `dim`); torch leaves a dim of another size as it
    is. A tile dim always stays, for every config: Helion traces a block size as a size not known
    to be 1, so torch's squeeze keeps it (moe_matmul_ogs's `idx.squeeze(0)` of a [tile] index)."""
    t = _as_tile(x)
    shape = t.v.shape
    if dim is None:
        axes = [a for a, n in enumerate(shape) if n == 1]
    else:
        axes = [_axis(t, d) for d in ([dim] if isinstance(dim, int) else dim)]
    for a in sorted(set(axes), reverse=True):
        n = t.v.shape[a]
        if not isinstance(n, TileVar) and n == 1:  # a max over one lane is the lane
            t = reduce("max", t, a, False)
    return t


def mm(a: Any, b: Any, out_dtype: Any = None) -> TileValue:
    """torch.mm / torch.bmm, with torch's optional out_dtype (the product's dtype)."""
    return dot(a, b, out_dtype=out_dtype)


def addmm(acc: Any, a: Any, b: Any, out_dtype: Any = None, *, beta: Any = 1,
          alpha: Any = 1) -> TileValue:
    """`beta * acc + alpha * (a @ b)`: torch.addmm and torch.baddbmm (batched operands); the
    product in `out_dtype` where given."""
    prod = dot(a, b, out_dtype=out_dtype)
    if alpha != 1:
        prod = binary("mul", prod, alpha)
    if beta == 0:  # torch ignores acc then (NaN in it does not propagate)
        return prod
    return add(acc if beta == 1 else binary("mul", acc, beta), prod)


METHODS.update({
    "softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp, "squeeze": squeeze,
    "addmm": addmm, "baddbmm": addmm, "logaddexp": logaddexp,
})
