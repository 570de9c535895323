"""NKI dtypes (`nl.float32`, `nl.bfloat16`, ...) and rounding to their storage formats.

Values are stored in their own format (ml_dtypes for bfloat16 and fp8), so every write rounds
exactly as the hardware's output cast does; engines compute in float32 (notes/nki.md §2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """One NKI dtype: its name (as in `nl.<name>`), storage dtype and class."""

    name: str
    storage: Any  # numpy dtype of the storage array
    kind: str  # "float" | "int" | "bool"

    @property
    def itemsize(self) -> int:
        return int(np.dtype(self.storage).itemsize)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def __repr__(self) -> str:
        return f"nl.{self.name}"


float32 = DType("float32", np.float32, "float")
tfloat32 = DType("tfloat32", np.float32, "float")  # stored in fp32, rounded to 10 mantissa bits
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "float")
float16 = DType("float16", np.float16, "float")
float8_e4m3 = DType("float8_e4m3", ml_dtypes.float8_e4m3, "float")
float8_e4m3fn = DType("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "float")
float8_e5m2 = DType("float8_e5m2", ml_dtypes.float8_e5m2, "float")
int8 = DType("int8", np.int8, "int")
int16 = DType("int16", np.int16, "int")
int32 = DType("int32", np.int32, "int")
uint8 = DType("uint8", np.uint8, "int")
uint16 = DType("uint16", np.uint16, "int")
uint32 = DType("uint32", np.uint32, "int")
bool_ = DType("bool_", np.uint8, "bool")  # NKI stores booleans as uint8

ALL = (float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2,
       int8, int16, int32, uint8, uint16, uint32, bool_)
FP8 = (float8_e4m3, float8_e4m3fn, float8_e5m2)

_FROM_NUMPY = {np.dtype(d.storage): d for d in reversed(ALL) if d not in (tfloat32, bool_)}
_FROM_NUMPY[np.dtype(np.bool_)] = bool_


def from_numpy(dt: Any) -> DType:
    """The NKI dtype of a NumPy array (kernel arguments)."""
    try:
        return _FROM_NUMPY[np.dtype(dt)]
    except KeyError:
        raise TypeError(f"NumPy dtype {np.dtype(dt)} has no NKI equivalent") from None


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to tfloat32's 10 mantissa bits (NaN/Inf kept)."""
    bits = x.astype(np.float32).view(np.uint32)
    finite = np.isfinite(x)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + lsb) & ~np.uint32(0x1FFF)).astype(np.uint32)
    return np.where(finite, rounded, bits).view(np.float32)


def to_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Converts engine results to `dtype`'s storage, rounding as the output cast does.

    Floats round to nearest even; float to int truncates toward zero and saturates (NaN -> 0);
    booleans store 1 for any non-zero value.
    """
    v = np.asarray(values)
    if dtype.kind == "float":
        out = v.astype(np.float32)
        if dtype is tfloat32:
            return _round_tf32(out)
        return out.astype(dtype.storage)
    if dtype.kind == "bool":
        return (v != 0).astype(np.uint8)
    info = np.iinfo(dtype.storage)
    if v.dtype.kind == "f":
        v = np.nan_to_num(np.trunc(v.astype(np.float64)), nan=0.0)
        return np.clip(v, info.min, info.max).astype(dtype.storage)
    return v.astype(dtype.storage)
