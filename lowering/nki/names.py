"""How the generated NKI spells things: dtypes, literals, and the Python names of a tile loop's
block index, first element and in-range count."""
from __future__ import annotations

import math
from typing import Any

from kernel_dsl.ir import TileVar

NL_DTYPE = {"f32": "nl.float32", "bf16": "nl.bfloat16", "f16": "nl.float16", "i32": "nl.int32",
            "i16": "nl.int16", "i8": "nl.int8", "u8": "nl.uint8",
            "bool": "nl.uint8",  # on-chip booleans are uint8 0/1: what predicates take
            "f8e4m3fn": "nl.float8_e4m3fn", "f8e5m2": "nl.float8_e5m2"}
HBM_DTYPE = {**NL_DTYPE, "bool": "nl.bool_"}
BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1,
         "f8e4m3fn": 1, "f8e5m2": 1}
SHORT = {"f32": "f32", "bf16": "bf16", "f16": "f16", "i32": "i32", "i16": "i16", "i8": "i8",
         "u8": "u8", "bool": "u8", "f8e4m3fn": "f8e4m3fn", "f8e5m2": "f8e5m2"}


# The finite stand-in for -inf/+inf in masks, pads and comparisons: AWS's kernels mask and start
# running maxima with float32's lowest, -3.4028235e38 (nki-library core/attention/attention_cte.py
# and attention_bwd.py, `_FLOAT32_MIN`), not with -inf. One value for every dtype, as there: in a
# bf16/f16 tile it rounds to -inf on storage, and comparisons clamp at it (lower_elementwise), which
# no finite bf16/f16 value reaches, so a mask is recognised after any cast.
FP32_MAX = "3.4028235e38"


def literal(expr: str) -> float | None:
    """The number a literal expression (as `lit` writes it) stands for; None for anything with
    names of the generated code (`tq0 + 3`)."""
    try:
        x = eval(expr, {"__builtins__": {}, "float": float, "int": int, "bool": bool})  # noqa: S307
    except Exception:
        return None
    return float(x) if isinstance(x, (int, float)) else None


def inf_sign(expr: str) -> int:
    """+1 / -1 if `expr` is the literal +inf / -inf, else 0."""
    x = literal(expr)
    return 0 if x is None or not math.isinf(x) else (1 if x > 0 else -1)


def finite(expr: str) -> str:
    """`expr` with +-inf replaced by float32's finite extreme, AWS's mask value."""
    sign = inf_sign(expr)
    return expr if not sign else (FP32_MAX if sign > 0 else f"-{FP32_MAX}")


def lit(x: Any) -> str:
    """A Python literal for a constant in generated code (floats keep their inf/nan)."""
    if isinstance(x, bool):
        return repr(x)
    if isinstance(x, float):
        if math.isnan(x):
            return 'float("nan")'
        if math.isinf(x):
            return 'float("-inf")' if x < 0 else 'float("inf")'
        return repr(x)
    return repr(x)


def index(t: TileVar) -> str:
    """The block index of tile `t` (the Python loop variable)."""
    return f"i_{t!r}"


def begin(t: TileVar) -> str:
    """The first global index of `t`'s current block."""
    return f"{t!r}0"


def count(t: TileVar) -> str:
    """The in-range lanes of `t`'s current block (only bound for ragged tiles)."""
    return f"n_{t!r}"


def shape(dims: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
