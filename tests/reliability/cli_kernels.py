"""Kernels and objects the CLI tests load by `path.py:NAME`, as a user's file would hold them."""
from __future__ import annotations

import torch

import kernel_dsl as kd


@kd.tpu_kernel
def scale(x: torch.Tensor, times: int = 2) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] * times
    return out


@kd.tpu_kernel
def bad_rank(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape  # a 1-d argument fails here, on the user's line
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        out[tm, :] = x[tm, :]
    return out


def ref_scale(x: torch.Tensor, times: int = 2) -> torch.Tensor:
    return x * times


not_a_kernel = 42
