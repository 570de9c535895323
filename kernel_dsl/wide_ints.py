"""int64 tensors at the kernel boundary: narrowed to int32 on the way in, widened on the way out.

PyTorch's default integer dtype is int64 (`torch.randint`, `argmax`, `torch.long` labels and
token ids), but no backend computes in it: Mosaic has no 64-bit vector type, Trainium's engines
none either. So an int64 argument (or a host view of one) reaches the kernel as int32, an output
the host code allocates as int64 is an int32 buffer in the IR (`TensorParam.host_dtype == "i64"`)
widened after the kernel, and device code's `torch.int64` is int32 (docs/ir.md "Integer ops").
A value that int32 cannot hold raises rather than wrapping: narrowing is exact or refused.
CPU tensors only for now (torch_ops.route refuses int64 on the device routes).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .errors import DTypeError
from .ir import KernelIR
from .tracing import user_loc

I32_MIN, I32_MAX = -2**31, 2**31 - 1


def narrowed(t: torch.Tensor, name: str) -> torch.Tensor:
    """`t` as int32, exactly: a value outside int32 raises (an int64 index that big would be
    wrong silently after wrapping)."""
    lo, hi = torch.aminmax(t)
    if lo < I32_MIN or hi > I32_MAX:
        bad = int(hi) if hi > I32_MAX else int(lo)
        raise DTypeError(f"int64 argument `{name}` holds {bad}, outside int32", user_loc(),
                         "kernels compute in 32-bit integers and take int64 tensors whose "
                         "values fit int32 (indices, labels, offsets); split larger values on "
                         "host (e.g. into high and low int32 words)")
    return t.to(torch.int32)


def wrap(ir: KernelIR, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a backend's compiled kernel: the IR's inputs in, its returned outputs out) taking
    int64 inputs and giving int64 outputs where the host code made them int64."""
    wide_in = [i for i, p in enumerate(ir.inputs) if p.host_dtype == "i64"]
    wide_out = [i for i, p in enumerate(ir.returns) if p.host_dtype == "i64"]
    if not wide_in and not wide_out:
        return fn
    names = [p.name for p in ir.inputs]

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        ts = list(tensors)
        for i in wide_in:
            if ts[i].dtype == torch.int64:
                ts[i] = narrowed(ts[i], names[i])
        outs = fn(*ts)
        outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        for i in wide_out:
            outs[i] = outs[i].to(torch.int64)
        return outs

    run.inner = fn  # type: ignore[attr-defined]
    return run


def has_int64(args: tuple[Any, ...]) -> bool:
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.int64 for a in args)
