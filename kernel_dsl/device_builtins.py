"""Python builtins on device values, as Helion gives them meaning inside a `kd.tile` loop.

Python itself asks `bool()` of a value for `min`, `max`, `and`, `or` and `not`, which a device
value cannot answer at trace time. The device-`if` rewrite (kernel_dsl/device_if.py) turns these
calls, inside `kd.tile`/`kd.grid` loops only, into calls of the helpers here:
- `min(a, b, ...)` / `max(...)` with a device scalar among the arguments is torch.minimum /
  torch.maximum of them (Helion's replacement of the builtins: ints and rank-0 values; a tile of
  rank >= 1 is refused, as Helion does, with a hint to write torch.minimum). Without a device
  value, or with `key=`/`default=` or one iterable argument, it is Python's own call.
- `a and b`, `a or b`, `not a` in the test of an `if` in device code: a device operand (a loaded
  scalar, a grid index expression, a comparison of a float argument) joins the condition as a
  rank-0 bool (`&`, `|`, `~`), which makes the `if` a device `if`; host operands keep Python's
  meaning and its short circuit (`x is not None and x[t] > 0` never evaluates the right side
  when `x` is None).
"""
from __future__ import annotations

import builtins
from typing import Any, Callable

from .device_ops import TileValue, binary
from .errors import UnsupportedOpError
from .ir import shape_str
from .tracing import user_loc


def device_cond(test: Any) -> Any:
    """The rank-0 bool device condition of `test`, or None for a host value."""
    if not isinstance(test, TileValue):
        return None
    if test.v.shape:
        test.__bool__()  # a vector condition: TileValue's "use torch.where" error
    return test if test.v.dtype == "bool" else test != 0


def minmax(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`min(...)`/`max(...)` in device code (`fn` is what the name `min`/`max` refers to there)."""
    kind = "min" if fn is builtins.min else "max" if fn is builtins.max else None
    if kind is None or kwargs or len(args) < 2 or not any(isinstance(a, TileValue) for a in args):
        return fn(*args, **kwargs)
    for a in args:
        if isinstance(a, TileValue) and a.v.shape:
            raise UnsupportedOpError(
                f"the builtin `{kind}` of a {shape_str(a.v.shape)} tile: in device code it takes "
                "ints and scalars (rank-0 values), as Helion's", user_loc(),
                f"use torch.{kind}imum(a, b) for elementwise {kind}, or "
                f"torch.a{kind}(x, dim) to reduce a tile")
    out = args[0]
    for a in args[1:]:
        out = binary(kind, out, a)
    return out


def bool_and(*operands: Callable[[], Any]) -> Any:
    """`a and b and ...` (each operand a thunk, evaluated in order, as Python does)."""
    dev, v = None, None
    for th in operands:
        v = th()
        c = device_cond(v)
        if c is None:
            if not v:  # a false host operand: the whole test is false
                return False if dev is not None else v
            continue
        dev = c if dev is None else dev & c
    return dev if dev is not None else v


def bool_or(*operands: Callable[[], Any]) -> Any:
    """`a or b or ...` (each operand a thunk)."""
    dev, v = None, None
    for th in operands:
        v = th()
        c = device_cond(v)
        if c is None:
            if v:  # a true host operand: the whole test is true
                return True if dev is not None else v
            continue
        dev = c if dev is None else dev | c
    return dev if dev is not None else v


def bool_not(v: Any) -> Any:
    c = device_cond(v)
    return not v if c is None else ~c
