"""torch functions called on tile values during tracing: each maps to a device_ops builder."""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import device_composites as dc
from . import device_math as dm
from . import device_positional as dp
from .device_dot import dot
from .device_ops import (
    SUPPORTED_HINT,
    TileValue,
    _as_tile,
    add,
    binary,
    broadcast,
    clamp,
    expand_dims,
    full,
    mean,
    permute,
    reduce,
    transpose,
    unary,
    where,
)
from .errors import KernelSyntaxError, UnsupportedOpError
from .tracing import user_loc


def _dim_kw(fn: Callable[..., TileValue]) -> Callable[..., TileValue]:
    def h(x: Any, dim: Any = None, keepdim: bool = False, **kw: Any) -> TileValue:
        return fn(x, kw.get("axis", dim), keepdim)
    return h


def _like(value: float) -> Callable[..., TileValue]:
    def h(x: Any, *, dtype: Any = None, **_: Any) -> TileValue:
        t = _as_tile(x)
        return full(t.v.shape, value, dtype or t.dtype)
    return h


def _unary(kind: str) -> Callable[..., TileValue]:
    return lambda x: unary(kind, x)


def _not_inplace(fn: Callable[[Any], TileValue]) -> Callable[..., TileValue]:
    """F.relu / F.silu take `inplace=`: a tile value is never updated in place."""
    def h(x: Any, inplace: bool = False) -> TileValue:
        if inplace:
            raise UnsupportedOpError("`inplace=True` in device code", user_loc(),
                                     "tile values are not updated in place: assign the result "
                                     "(`y = F.silu(x)`)")
        return fn(x)
    return h


def _binary(kind: str) -> Callable[..., TileValue]:
    return lambda a, b: binary(kind, a, b)


F = torch.nn.functional
HANDLERS: dict[Any, Callable[..., Any]] = {
    torch.add: lambda a, b, alpha=1: add(a, b if alpha == 1 else binary("mul", b, alpha)),
    torch.sub: lambda a, b, alpha=1: binary("sub", a, b if alpha == 1 else binary("mul", b, alpha)),
    torch.mul: _binary("mul"), torch.div: dm.div, torch.true_divide: _binary("div"),
    torch.pow: _binary("pow"), torch.maximum: _binary("max"), torch.minimum: _binary("min"),
    torch.lt: _binary("lt"), torch.le: _binary("le"), torch.gt: _binary("gt"),
    torch.ge: _binary("ge"), torch.eq: _binary("eq"), torch.ne: _binary("ne"),
    torch.logical_and: dm.logical("and"), torch.logical_or: dm.logical("or"),
    torch.logical_xor: dm.logical("xor"), torch.logical_not: dm.logical_not,
    # integers (docs/ir.md): bit ops, shifts, floor division and remainders
    torch.bitwise_and: _binary("and"), torch.bitwise_or: _binary("or"),
    torch.bitwise_xor: _binary("xor"), torch.bitwise_not: _unary("not"),
    torch.bitwise_left_shift: _binary("shl"), torch.bitwise_right_shift: _binary("shr"),
    torch.floor_divide: _binary("floordiv"), torch.remainder: _binary("mod"), torch.fmod: dm.fmod,
    # rounding and other elementwise functions
    torch.floor: _unary("floor"), torch.ceil: _unary("ceil"), torch.trunc: dm.trunc,
    torch.fix: dm.trunc, torch.round: dm.round_,
    torch.sign: dm.sign, torch.log1p: _unary("log1p"), torch.expm1: _unary("expm1"),
    torch.special.log1p: _unary("log1p"), torch.special.expm1: _unary("expm1"),
    torch.isnan: dm.isnan, torch.isinf: dm.isinf, torch.isfinite: dm.isfinite,
    torch.masked_fill: dm.masked_fill, torch.clamp_min: _binary("max"),
    torch.clamp_max: _binary("min"), F.softplus: dm.softplus, F.gelu: dm.gelu,
    torch.exp: _unary("exp"), torch.exp2: _unary("exp2"), torch.log: _unary("log"),
    torch.sqrt: _unary("sqrt"), torch.rsqrt: _unary("rsqrt"), torch.tanh: _unary("tanh"),
    torch.sigmoid: _unary("sigmoid"), torch.abs: _unary("abs"), torch.neg: _unary("neg"),
    torch.relu: _unary("relu"), torch.sin: _unary("sin"), torch.cos: _unary("cos"),
    torch.erf: _unary("erf"), F.relu: _not_inplace(_unary("relu")),
    F.silu: _not_inplace(lambda x: binary("mul", x, unary("sigmoid", x))),
    torch.where: where, torch.clamp: lambda x, min=None, max=None: clamp(x, min, max),
    # torch.mm/bmm/addmm/baddbmm take an out_dtype (3rd/4th positional, xsa's `torch.bmm(q, k,
    # torch.float32)`): the product's dtype, as `kd.dot(..., out_dtype=)`
    torch.matmul: dot, torch.mm: dc.mm, torch.bmm: dc.mm,
    torch.addmm: dc.addmm, torch.baddbmm: dc.addmm,
    torch.softmax: dc.softmax, torch.log_softmax: dc.log_softmax,
    F.softmax: lambda x, dim=None, _stacklevel=3, dtype=None: dc.softmax(x, dim, dtype),
    F.log_softmax: lambda x, dim=None, _stacklevel=3, dtype=None: dc.log_softmax(x, dim, dtype),
    torch.special.softmax: dc.softmax, torch.special.log_softmax: dc.log_softmax,
    torch.logsumexp: dc.logsumexp, torch.special.logsumexp: dc.logsumexp,
    torch.squeeze: dc.squeeze, torch.logaddexp: dc.logaddexp,
    torch.argmax: lambda x, dim=None, keepdim=False: dp.arg_reduce("max", x, dim, keepdim),
    torch.argmin: lambda x, dim=None, keepdim=False: dp.arg_reduce("min", x, dim, keepdim),
    torch.max: lambda x, dim=None, keepdim=False: dp.max_min("max", x, dim, keepdim),
    torch.min: lambda x, dim=None, keepdim=False: dp.max_min("min", x, dim, keepdim),
    torch.sum: _dim_kw(lambda x, d, k: reduce("sum", x, d, k)),
    torch.amax: _dim_kw(lambda x, d, k: reduce("max", x, d, k)),
    torch.prod: lambda x, dim=None, keepdim=False, *, dtype=None: _as_tile(x).prod(dim, keepdim,
                                                                                  dtype),
    torch.amin: _dim_kw(lambda x, d, k: reduce("min", x, d, k)),
    torch.mean: _dim_kw(mean),
    torch.transpose: transpose, torch.t: lambda x: transpose(x, 0, 1),
    torch.unsqueeze: expand_dims, torch.permute: lambda x, dims: permute(x, (dims,)),
    torch.zeros_like: _like(0.0), torch.ones_like: _like(1.0),
    torch.full_like: lambda x, v, *, dtype=None, **_: full(_as_tile(x).v.shape, v,
                                                            dtype or _as_tile(x).dtype),
    torch.broadcast_to: lambda x, shape: broadcast(x, tuple(shape)),
}


def dispatch(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """A torch function called with tile values: record it, or say what to write instead."""
    h = HANDLERS.get(func)
    if h is None:
        name = getattr(func, "__name__", str(func))
        raise UnsupportedOpError(f"`torch.{name}` is not supported in device code", user_loc(),
                                 SUPPORTED_HINT)
    kwargs = {k: v for k, v in kwargs.items() if k != "out" or v is None}
    if "out" in kwargs:
        raise KernelSyntaxError("`out=` is not supported in device code", user_loc(),
                                "assign the result: `y = torch.exp(x)`")
    return h(*args, **kwargs)
