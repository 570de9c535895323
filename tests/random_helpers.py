"""What tests/test_random.py (`kd.rand`) and tests/test_randn.py (`kd.randn`) share: the backends,
targets and seeds, the seeds torch's generator hands `torch.*_like` draws, and the small kernels
both files run, made for a given draw function (`kd.rand` or `kd.randn`)."""
from __future__ import annotations

from typing import Any, Callable

import torch

import kernel_dsl as kd

BACKENDS = ("pallas", "triton", "nki")
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]
SEEDS = [0, 123, -1, 2**31 - 1, -(2**31), 2**40 + 5]  # the high key word in use, and both signs


def like_seeds(n: int, state: int) -> list[int]:
    """The seeds a call's `torch.*_like` draws take after `torch.manual_seed(state)` (docs/ir.md)."""
    torch.manual_seed(state)
    return torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32).tolist()


def _named(fn: Callable[..., Any], name: str) -> Any:
    fn.__name__ = fn.__qualname__ = name  # the kernel's name in messages and generated code
    return kd.kernel(fn)


def draw_1d(draw: Callable[..., Any], name: str) -> Any:
    """A 1-D draw per tile, the seed an int."""
    def kernel(x: torch.Tensor, seed: int):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = draw([t], seed)
        return out
    return _named(kernel, name)


def draw_2d_seed_t(draw: Callable[..., Any], name: str) -> Any:
    """A 2-D draw over two tiles, the seed read from a tensor, offset 5."""
    def kernel(x: torch.Tensor, seed_t: torch.Tensor):
        out = torch.empty_like(x)
        for tm, tn in kd.tile(x.shape):
            out[tm, tn] = draw([tm, tn], seed_t[0], offset=5)
        return out
    return _named(kernel, name)


def draw_tile_and_int(draw: Callable[..., Any], name: str) -> Any:
    """A 2-D draw over a tile and a whole (int) dim, and a big offset whose low word carries."""
    def kernel(x: torch.Tensor, seed: int):
        out = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            out[tm, :] = draw([tm, x.shape[1]], seed, offset=2**32 - 3)
        return out
    return _named(kernel, name)


def like_1d(like: Callable[..., Any], name: str) -> Any:
    """`torch.rand_like` / `torch.randn_like` of a 1-D tile: a seed from torch's generator."""
    def kernel(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = like(x[t])
        return out
    return _named(kernel, name)


def three_like_calls(kernel: Any, x: torch.Tensor, state: int = 7) -> tuple[Any, Any, Any, int]:
    """`a`, `b` called in a row after `torch.manual_seed(state)`, `c` after seeding again (under the
    caller's backend), and the seed `a` drew."""
    torch.manual_seed(state)
    a = kernel(x)
    b = kernel(x)  # the generator moved on: another stream
    torch.manual_seed(state)
    c = kernel(x)
    (s,) = like_seeds(1, state)
    return a, b, c, s
