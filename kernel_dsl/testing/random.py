"""The torch reproduction of `kd.rand`'s and `kd.randint`'s streams (kernel_dsl/device_random.py,
docs/ir.md "Random numbers"): Threefry-2x32-20 in int64 arithmetic masked to 32 bits, written
from the algorithm rather than from the device composite, so each checks the other."""
from __future__ import annotations

from typing import Any, Sequence

import torch

_M = (1 << 32) - 1
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def _u32(x: Any) -> Any:
    return x & _M


def threefry2x32(key: tuple[int, int], c0: torch.Tensor, c1: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Threefry-2x32 with 20 rounds on int64 tensors holding unsigned 32-bit words."""
    ks = (key[0] & _M, key[1] & _M, (key[0] ^ key[1] ^ 0x1BD11BDA) & _M)
    x0, x1 = _u32(c0 + ks[0]), _u32(c1 + ks[1])
    for g in range(5):
        for r in _ROT[4 * (g % 2):4 * (g % 2) + 4]:
            x0 = _u32(x0 + x1)
            x1 = _u32((x1 << r) | (x1 >> (32 - r))) ^ x0
        x0 = _u32(x0 + ks[(g + 1) % 3])
        x1 = _u32(x1 + ks[(g + 2) % 3] + g + 1)
    return x0, x1


def reference_random_bits(shape: Sequence[int], seed: int, offset: Any = 0,
                          offsets: torch.Tensor | None = None) -> torch.Tensor:
    """The first Threefry word of every element, as int64 in [0, 2**32): element i (row-major)
    has counter i + offset (64 bits), or `offsets[i]` where given; the key is the seed's two
    32-bit halves."""
    seed = int(seed)
    if offsets is not None:
        ctr = offsets.to(torch.int64)
        return threefry2x32((seed & _M, (seed >> 32) & _M), ctr & _M, (ctr >> 32) & _M)[0]
    n = 1
    for s in shape:
        n *= int(s)
    lin = torch.arange(n, dtype=torch.int64).reshape(tuple(shape))
    ctr = lin + (offset.to(torch.int64) if isinstance(offset, torch.Tensor) else int(offset))
    x0, _ = threefry2x32((seed & _M, (seed >> 32) & _M), ctr & _M, (ctr >> 32) & _M)
    return x0


def reference_rand(shape: Sequence[int], seed: int, offset: Any = 0,
                   offsets: torch.Tensor | None = None) -> torch.Tensor:
    """Exactly the f32 values `kd.rand` gives for a tensor of `shape` (a tile at [i:j] of that
    tensor gets `reference_rand(shape, seed)[i:j]`): the top 24 bits times 2**-24, in [0, 1).
    `offset` is an int or an int tensor that broadcasts against `shape`; `offsets`, where
    given, are the counters themselves (`shape` is then ignored), as in `kd.rand`."""
    return ((reference_random_bits(shape, seed, offset, offsets) >> 8).to(torch.float32) * 2.0 ** -24)


def reference_randint(shape: Sequence[int], low: int, high: int, seed: int, offset: Any = 0
                      ) -> torch.Tensor:
    """Exactly the int32 values `kd.randint(shape, low, high, seed, offset)` gives."""
    bits = reference_random_bits(shape, seed, offset)
    return (low + (bits >> 1) % (high - low)).to(torch.int32)
