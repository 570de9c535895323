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
        if self.storage is None:
            return 4  # packed x4 types: four elements in 32 bits
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
float8_e8m0fnu = DType("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, "float")  # MX scale exponents
# The x4-packed MX types (four fp8/fp4 values in 32 bits) feed only nisa.nc_matmul_mx and
# nisa.quantize_mx on NeuronCore-v4 (SDK nki.api.shared.rst, "Packed"). They exist as names, so
# kernels can compare and pass them, but any tensor of them is rejected as not modelled.
float8_e4m3fn_x4 = DType("float8_e4m3fn_x4", None, "packed")
float8_e5m2_x4 = DType("float8_e5m2_x4", None, "packed")
float4_e2m1fn_x4 = DType("float4_e2m1fn_x4", None, "packed")
PACKED = (float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4)

ALL = (float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2,
       int8, int16, int32, uint8, uint16, uint32, bool_, float8_e8m0fnu)
FP8 = (float8_e4m3, float8_e4m3fn, float8_e5m2)

# `nki.dtype` is this class: an annotation type (`dtype: nki.dtype = nl.bfloat16`) and, as AWS's
# tests use it (`import nki.dtype as nt; nt.float8_e4m3`), a namespace of the dtypes.
for _d in (*ALL, *PACKED):
    setattr(DType, _d.name, _d)

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

    Floats round to nearest even; booleans store 1 for any non-zero value. Float to integer
    truncates toward zero (NaN -> 0) and then wraps modulo 2**bits, as integer-to-integer
    narrowing does.

    Why wrap: the SDK documents that arithmetic ops compute in float32 and "cast to dst.dtype"
    (nki.api.shared.rst, "Supported Math Operators"; nisa.tensor_tensor docstring), but not what
    the cast does with a value outside the integer range. Two's-complement wrapping is what
    torch and NumPy integer arithmetic give (int8 100 + 100 == -56), so a kernel_dsl integer
    kernel keeps its torch meaning here; saturating would silently change it. Hardware may
    differ for out-of-range values: docs/nki.md lists this as an unknown. +-Inf saturates.
    """
    v = np.asarray(values)
    if dtype.kind == "packed":
        raise not_modelled(dtype)
    if dtype.kind == "float":
        out = v.astype(np.float32)
        if dtype is tfloat32:
            return _round_tf32(out)
        with np.errstate(over="ignore"):  # out of range rounds to Inf (NaN for e4m3fn), silently
            return out.astype(dtype.storage)
    if dtype.kind == "bool":
        return (v != 0).astype(np.uint8)
    info = np.iinfo(dtype.storage)
    if v.dtype.kind == "f":
        f = v.astype(np.float64)
        inf = np.isinf(f)
        ints = np.trunc(np.nan_to_num(f, nan=0.0, posinf=0.0, neginf=0.0))
        span = 2.0 ** (8 * np.dtype(dtype.storage).itemsize)
        wrapped = np.mod(ints - info.min, span) + info.min
        wrapped = np.where(inf, np.where(f > 0, info.max, info.min), wrapped)
        return wrapped.astype(np.int64).astype(dtype.storage)
    return v.astype(np.int64).astype(dtype.storage)


def not_modelled(dtype: DType) -> Exception:
    from .errors import NkiError

    return NkiError(f"nl.{dtype.name}", "x4-packed MX dtypes are not modelled by this "
                    "interpreter (they feed nisa.nc_matmul_mx / nisa.quantize_mx on "
                    "NeuronCore-v4)", "not modelled", "run MX kernels with AWS's nki.simulate")
