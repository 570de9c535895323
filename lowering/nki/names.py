"""How the generated NKI spells things: dtypes, literals, and the Python names of a tile loop's
block index, first element and in-range count."""
from __future__ import annotations

import math
from typing import Any

from kernel_dsl.ir import TileVar

NL_DTYPE = {"f32": "nl.float32", "bf16": "nl.bfloat16", "f16": "nl.float16", "i32": "nl.int32",
            "i16": "nl.int16", "i8": "nl.int8", "u8": "nl.uint8",
            "bool": "nl.uint8"}  # on-chip booleans are uint8 0/1: what predicates take
HBM_DTYPE = {**NL_DTYPE, "bool": "nl.bool_"}
BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1}
SHORT = {"f32": "f32", "bf16": "bf16", "f16": "f16", "i32": "i32", "i16": "i16", "i8": "i8",
         "u8": "u8", "bool": "u8"}


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
