"""`torch.vmap` over a kernel's op: run the kernel once per batch element and stack the outputs.

A kernel's host code names the rank of each argument (`m, n = x.shape`) and its tiles index
every dim, so a vmapped dim cannot be folded into the grid without knowing what the kernel
means by it; looping is always correct. One warning per kernel says what it costs. (The library
ops, whose leading dims are batch by definition, fold instead: kernels/batching.py.)
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

_warned: set[str] = set()


def per_element(name: str, op: Callable[..., list[torch.Tensor]]) -> Callable[..., Any]:
    """A `register_vmap` rule for `op` (which returns `Tensor[]`)."""

    def rule(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[list[torch.Tensor], list[int]]:
        if name not in _warned:
            _warned.add(name)
            warnings.warn(f"kernel_dsl: torch.vmap over kernel `{name}` runs it once per batch "
                          f"element ({info.batch_size} calls here): its host code fixes each "
                          "argument's rank, so the batch dim cannot join the grid. For speed, "
                          "give the kernel the batch dim itself.", stacklevel=2)
        runs = [op(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)))
                for i in range(info.batch_size)]
        outs = [torch.stack([r[j] for r in runs]) for j in range(len(runs[0]))]
        return outs, [0] * len(outs)

    return rule
