"""`kd.atomic_add`, `kd.atomic_max`, `kd.atomic_min`: Helion's `hl.atomic_*(target, index,
value, sem="relaxed")`. In the IR each is a `store` with `attrs["atomic"]` ("add" | "max" |
"min"): `target[index] op= value` per element, duplicates (lanes of one call, blocks, grid
steps) all taking effect, in an unspecified order (docs/ir.md "Atomics")."""
from __future__ import annotations

from typing import Any

import torch

from .errors import DTypeError, KernelSyntaxError
from .tracing import current, user_loc

SEMS = ("relaxed", "acquire", "release", "acq_rel")
# 16-bit float adds: Triton's fp16/bf16 atomics (bf16 from sm_90), Helion's split-K into half outputs
DTYPES = {"add": ("f32", "i32", "f16", "bf16"), "max": ("f32", "i32"), "min": ("f32", "i32")}


def _atomic(op: str, target: Any, index: Any, value: Any, sem: str) -> None:
    from .trace_mode import TraceMode

    tr = current()
    loc = user_loc()
    name = f"kd.atomic_{op}"
    if tr is None or tr.region is None:
        raise KernelSyntaxError(f"`{name}` is device code", loc,
                                f"call `{name}(out, [t], value)` inside a `kd.tile` loop")
    if sem not in SEMS:
        raise KernelSyntaxError(f"`{name}(..., sem={sem!r})`: unknown memory order", loc,
                                f"use one of {', '.join(repr(x) for x in SEMS)}")
    mode = TraceMode(tr)
    p = mode._param(target, f"`{name}` into")
    if p.dtype not in DTYPES[op]:
        raise DTypeError(f"`{name}` into `{p.name}` of dtype {p.dtype}: atomics take "
                         f"{', '.join(DTYPES[op])} tensors", loc,
                         f"allocate `{p.name}` as torch.float32 (or torch.int32) and cast "
                         "after the kernel")
    idx = tuple(index) if isinstance(index, (list, tuple)) else (index,)
    mode._setitem(target, idx, value, atomic={"atomic": op, "sem": sem})


def atomic_add(target: torch.Tensor, index: Any, value: Any, sem: str = "relaxed") -> None:
    """`target[index] += value`, atomically per element: duplicate indices accumulate.
    `index` is a list with one entry per axis of `target`: tiles, ints, device scalars
    (`kd.grid` indices, loaded ints) or one 1-D index tile (`ids[tb]`). Unlike Helion's, it
    returns nothing (the previous values are not read back)."""
    _atomic("add", target, index, value, sem)


def atomic_max(target: torch.Tensor, index: Any, value: Any, sem: str = "relaxed") -> None:
    """`target[index] = max(target[index], value)`, atomically per element (NaN: docs/ir.md)."""
    _atomic("max", target, index, value, sem)


def atomic_min(target: torch.Tensor, index: Any, value: Any, sem: str = "relaxed") -> None:
    """`target[index] = min(target[index], value)`, atomically per element."""
    _atomic("min", target, index, value, sem)
