"""When a call may skip the torch dispatcher and run an op's body directly.

On CPU, the dispatcher around a Python custom op costs more than a small kernel launch (a
library matmul at 64x96x80: ~290 us through the op, ~140 us for the kernel). Nothing in a plain
eager CPU call needs it; anything that does keeps the op: autograd, tensor subclasses (DTensor,
fake tensors), functorch transforms (vmap), autocast, torch.compile and Python dispatch modes.
"""
from __future__ import annotations

from typing import Any

import torch


def plain_cpu(args: tuple[Any, ...], autograd: bool = False) -> bool:
    """True when no registration of the op (autograd, fake, vmap, autocast, sharding) would act
    on a call with these arguments; with `autograd=True`, none but its autograd."""
    if (torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
            or torch.is_autocast_enabled("cpu") or torch._C._len_torch_dispatch_stack()):
        return False
    grad = torch.is_grad_enabled() and not autograd
    for a in args:
        if isinstance(a, torch.Tensor) and (type(a) is not torch.Tensor or a.device.type != "cpu"
                                            or (grad and a.requires_grad)):
            return False
    return True
