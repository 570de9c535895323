"""When a call may skip the torch dispatcher and run an op's body directly.

On CPU, the dispatcher around a Python op costs a good part of a small kernel launch (a
library matmul at 64x96x80: ~1.5x through its custom op, ~1.3x as a plain call, against the
kernel alone; benchmarks/overhead.py). Nothing in a plain
eager CPU call needs it; anything that does keeps the op: autograd, tensor subclasses (DTensor,
fake tensors), functorch transforms (vmap), autocast, torch.compile and Python dispatch modes.
"""
from __future__ import annotations

from typing import Any

import torch


def eager_route(args: tuple[Any, ...]) -> str | None:
    """How an eager call with these arguments may skip the dispatcher, in one pass: "body" when
    no registration of the op (autograd, fake, vmap, autocast, sharding) would act on it,
    "autograd" when none but its autograd would, None when it needs the op."""
    if (torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
            or torch.is_autocast_enabled("cpu") or torch._C._len_torch_dispatch_stack()):
        return None
    grad = False
    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or not a.is_cpu:  # is_cpu: 0.1 us, .device: 0.5
                return None
            grad = grad or a.requires_grad
    return "autograd" if grad and torch.is_grad_enabled() else "body"
