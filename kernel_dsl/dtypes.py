"""Mapping between torch dtypes and the IR's dtype names, and torch's promotion rules."""
from __future__ import annotations

import torch

from .ir import FP8_DTYPES

TORCH_TO_IR: dict[torch.dtype, str] = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
    torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
    torch.float8_e4m3fn: "f8e4m3fn", torch.float8_e5m2: "f8e5m2",
}
# storage formats: loads, stores, casts and matmuls (f32 accumulation) only, as in torch, whose
# elementwise ops and type promotion reject them too
FP8 = FP8_DTYPES
IR_TO_TORCH = {v: k for k, v in TORCH_TO_IR.items()}

_WHY_NOT = {
    torch.float64: "TPUs and Trainium have no float64 units; use torch.float32",
    torch.complex64: "complex tensors are not supported; split real and imaginary parts",
}


def unsupported_reason(dtype: torch.dtype) -> str:
    return _WHY_NOT.get(dtype, "supported dtypes: " + ", ".join(str(d) for d in TORCH_TO_IR))


# int64 is narrowed at the kernel boundary and computed as int32 (kernel_dsl/wide_ints.py); not
# in TORCH_TO_IR, so IR_TO_TORCH["i32"] stays torch.int32
NARROWED: dict[torch.dtype, str] = {torch.int64: "i32"}


def to_ir(dtype: torch.dtype) -> str | None:
    return TORCH_TO_IR.get(dtype) or NARROWED.get(dtype)


INT_BITS = {"i32": 32, "i16": 16, "i8": 8, "u8": 8}


def is_float(name: str) -> bool:
    return name in ("f32", "bf16", "f16", "f8e4m3fn", "f8e5m2")


# torch's promotion between two tensors, computed once: the tracer runs under a torch-function
# mode, so no torch call may happen while device code is recorded. Mixed int widths that torch
# would widen to int64 stay 32-bit here.
_PROMOTE = {(a, b): TORCH_TO_IR.get(torch.promote_types(ta, tb), "i32")
            for ta, a in TORCH_TO_IR.items() for tb, b in TORCH_TO_IR.items()
            if a not in FP8 and b not in FP8}  # torch: "Promotion for Float8 Types is not supported"


def promote(a: str, b: str) -> str:
    """Callers reject fp8 operands first (device_ops `_emit`)."""
    if a in FP8 or b in FP8:
        return a if a in FP8 else b
    return _PROMOTE[(a, b)]


def promote_scalar(tensor: str, scalar: object) -> str:
    """torch's promotion of a tensor with a Python scalar (the scalar is 'weak')."""
    if isinstance(scalar, bool):
        return tensor
    if isinstance(scalar, float):
        return tensor if is_float(tensor) else "f32"
    return "i32" if tensor == "bool" else tensor


def scalar_dtype(scalar: object) -> str:
    if isinstance(scalar, bool):
        return "bool"
    return "f32" if isinstance(scalar, float) else "i32"
