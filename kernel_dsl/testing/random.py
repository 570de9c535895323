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


# the constants of kernel_dsl/device_randn.py, restated (f32-rounded where used)
_LOG_Q = (1.0, -0.49999988079071045, 0.33333325386047363, -0.25001585483551025, 0.2000207155942917,
          -0.16609126329421997, 0.14180079102516174, -0.13240842521190643, 0.129141703248024,
          -0.07638592272996902)
_COS_C = (1.0, -1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800)
_SIN_C = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)


def _horner(x: torch.Tensor, coeffs: Sequence[float]) -> torch.Tensor:
    c = [torch.tensor(v, dtype=torch.float32) for v in coeffs]
    acc = c[-1]
    for v in c[-2::-1]:
        acc = x * acc + v  # torch rounds the mul and the add separately (no fma on CPU)
    return acc


def reference_randn(shape: Sequence[int], seed: int, offset: Any = 0) -> torch.Tensor:
    """Exactly the f32 values `kd.randn(shape, seed, offset)` gives: Box-Muller on the two
    Threefry words of each counter, `sqrt(-2 ln u1) * cos(2 pi u2)` with u1 = ((x0 >>> 8) + 1)
    * 2**-24 and the angle x1 / 2**32 turns, ln and cos as f32 polynomials (docs/ir.md)."""
    seed = int(seed)
    n = 1
    for s in shape:
        n *= int(s)
    ctr = torch.arange(n, dtype=torch.int64).reshape(tuple(shape))
    ctr = ctr + (offset.to(torch.int64) if isinstance(offset, torch.Tensor) else int(offset))
    x0, x1 = threefry2x32((seed & _M, (seed >> 32) & _M), ctr & _M, (ctr >> 32) & _M)
    f32 = torch.float32
    # ln u1: v = (x0 >> 8) + 1 = m * 2**e, m in [sqrt(1/2), sqrt(2))
    v = ((x0 >> 8) + 1).to(f32)
    e = torch.floor(torch.log2(v.double())).to(torch.int64)  # exact: v is an integer <= 2**24
    m = (v.double() / 2.0 ** e).to(f32)  # in [1, 2): exact
    big = m >= torch.tensor(1.4142135381698608, dtype=f32)
    m = torch.where(big, m * 0.5, m)
    nn = (e - 24 + big.long()).to(f32)
    r = m - 1.0
    lnm = r * _horner(r, _LOG_Q)
    ln_u1 = nn * 0.693145751953125 + (nn * torch.tensor(1.428606765330187e-06, dtype=f32) + lnm)
    # f64 then f32 is correctly rounded (CPU torch.sqrt in f32 is sometimes 1 ulp off)
    radius = torch.sqrt((ln_u1 * -2.0).double()).to(f32)
    # cos(2 pi x1 / 2**32) from the quadrant x1 >> 30 and the offset from its centre
    q = x1 >> 30
    g = ((x1 >> 6) & ((1 << 24) - 1)) - (1 << 23)
    step = torch.tensor(torch.pi, dtype=f32).double() * 2.0 ** -25
    h = g.to(f32) * torch.tensor(float(step), dtype=f32)
    h2 = h * h
    cos_h, sin_h = _horner(h2, _COS_C), h * _horner(h2, _SIN_C)
    sa = torch.where((q == 0) | (q == 3), 1.0, -1.0).to(f32)
    sb = torch.where(q >= 2, 1.0, -1.0).to(f32)
    w = (cos_h * sa + sin_h * sb) * torch.tensor(0.7071067811865476, dtype=f32)
    return radius * w
