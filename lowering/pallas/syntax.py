"""JAX spellings shared by the Pallas renderer and its pallas_call writer: IR dtypes as jnp
names, Python literals, tuple literals."""
from __future__ import annotations

import math
from typing import Any

JNP = {"f32": "jnp.float32", "bf16": "jnp.bfloat16", "f16": "jnp.float16", "i32": "jnp.int32",
       "i16": "jnp.int16", "i8": "jnp.int8", "u8": "jnp.uint8", "bool": "jnp.bool_",
       "f8e4m3fn": "jnp.float8_e4m3fn", "f8e5m2": "jnp.float8_e5m2"}


def lit(x: Any) -> str:
    if isinstance(x, float):
        if math.isinf(x):
            return "-jnp.inf" if x < 0 else "jnp.inf"
        if math.isnan(x):
            return "jnp.nan"
    return repr(x)


def tup(items: Any) -> str:
    """A Python tuple literal: (), (a,), (a, b)."""
    xs = [str(x) for x in items]
    return f"({xs[0]},)" if len(xs) == 1 else f"({', '.join(xs)})"
