"""`kd.randn(shape, seed, offset=0)` and `torch.randn_like(tile)`: standard normal f32 values from
the Threefry stream of `kd.rand` (kernel_dsl/device_random.py), by Box-Muller.

Both Threefry words of an element's counter feed one sample: `x0` gives the radius
`sqrt(-2 ln u1)` with `u1 = ((x0 >>> 8) + 1) * 2**-24` in (0, 1], `x1` the angle `2 pi x1 / 2**32`.
The log and the cosine are not the backends' (XLA, numpy and libm round them differently): they
are written out as f32 `mul`/`add` polynomials after exact integer range reduction (an exponent
read through a `bitcast`, the angle's quadrant from x1's top two bits), so every backend that
rounds each add and mul to f32 gives the same bits, as does `kernel_dsl.testing.reference_randn`.
`sqrt` is the IR's (correctly rounded on the CPU paths). Accuracy: within a few f32 ulps of the
exact transform of the two words (docs/ir.md "Random numbers").
"""
from __future__ import annotations

import math
import struct
from typing import Any

import torch

from .device_ops import TileValue, _emit, binary, cast_v, unary, where
from .device_random import call_site_seed, random_bits
from .torch_functions import HANDLERS

# ln(1 + r) / r on [sqrt(1/2) - 1, sqrt(2) - 1], a least-squares fit at Chebyshev nodes, rounded
# to f32 (max relative error of ln(1 + r) in f32 Horner: 1.2e-7)
LOG_Q = (1.0, -0.49999988079071045, 0.33333325386047363, -0.25001585483551025, 0.2000207155942917,
         -0.16609126329421997, 0.14180079102516174, -0.13240842521190643, 0.129141703248024,
         -0.07638592272996902)
LN2_HI = 0.693145751953125  # 0x3F317200: n * LN2_HI is exact for |n| <= 2**8
LN2_LO = 1.428606765330187e-06
# Taylor series of cos h and sin h / h in h**2 (|h| <= pi/4: truncation below 1e-9)
COS_C = (1.0, -1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800)
SIN_C = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)
SQRT_HALF = 0.7071067811865476
ANGLE_STEP = struct.unpack("f", struct.pack("f", math.pi))[0] * 2.0 ** -25  # f32(pi) / 2**25, exact
SQRT2 = 1.4142135381698608  # f32(sqrt 2), rounded up


def f32(c: float) -> float:
    """`c` rounded to f32 (the constant every backend and the reference use)."""
    return struct.unpack("f", struct.pack("f", c))[0]


def _horner(x: TileValue, coeffs: tuple[float, ...]) -> TileValue:
    """c0 + x * (c1 + x * (...)), one rounded mul and one rounded add per step."""
    acc: Any = f32(coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = binary("add", binary("mul", x, acc), f32(c))
    return acc


def _ushr(x: TileValue, s: int) -> TileValue:
    """Logical `x >>> s` of int32 raw bits."""
    return binary("and", binary("shr", x, s), (1 << (32 - s)) - 1)


def _log_u1(x0: TileValue) -> TileValue:
    """ln(u1) for u1 = ((x0 >>> 8) + 1) * 2**-24: v = u1 * 2**24 is an int in [1, 2**24], exact
    in f32; v = m * 2**e with m in [sqrt(1/2), sqrt(2)), and ln u1 = (e - 24) ln 2 + ln m."""
    v = cast_v(binary("add", _ushr(x0, 8), 1), "f32")
    bits = _emit("bitcast", [v.v], {"dtype": "i32"}, v.v.shape, "i32")
    e = binary("sub", binary("shr", bits, 23), 127 + 24)  # v > 0: the sign bit is clear
    m1 = binary("or", binary("and", bits, (1 << 23) - 1), 0x3F800000)
    m = _emit("bitcast", [m1.v], {"dtype": "f32"}, m1.v.shape, "f32")  # [1, 2)
    big = binary("ge", m, SQRT2)  # an f32 compare: exact on every backend
    m = where(big, binary("mul", m, 0.5), m)  # exact
    n = cast_v(binary("add", e, cast_v(big, "i32")), "f32")  # in [-24, 0]
    r = binary("sub", m, 1.0)  # exact (Sterbenz)
    lnm = binary("mul", r, _horner(r, LOG_Q))
    return binary("add", binary("mul", n, LN2_HI), binary("add", binary("mul", n, LN2_LO), lnm))


def _cos_turn(x1: TileValue) -> TileValue:
    """cos(2 pi x1 / 2**32) (x1 as unsigned): quadrant q = x1 >>> 30, h = the angle less the
    quadrant's centre (q + 1/2) pi/2, |h| <= pi/4, from the next 24 bits; then
    cos = sqrt(1/2) (a_q cos h + b_q sin h) with a = (1, -1, -1, 1), b = (-1, -1, 1, 1)."""
    b1 = _ushr(x1, 31)
    b0 = binary("and", binary("shr", x1, 30), 1)
    g = binary("sub", binary("and", binary("shr", x1, 6), (1 << 24) - 1), 1 << 23)
    h = binary("mul", cast_v(g, "f32"), ANGLE_STEP)  # exact int -> f32, one rounding
    h2 = binary("mul", h, h)
    cos_h = _horner(h2, COS_C)
    sin_h = binary("mul", h, _horner(h2, SIN_C))
    sa = cast_v(binary("sub", 1, binary("shl", binary("xor", b1, b0), 1)), "f32")
    sb = cast_v(binary("sub", binary("shl", b1, 1), 1), "f32")
    w = binary("add", binary("mul", cos_h, sa), binary("mul", sin_h, sb))  # sign flips: exact
    return binary("mul", w, SQRT_HALF)


def randn(shape: Any, seed: Any, offset: Any = 0) -> TileValue:
    """Standard normal f32 values, one per element of `shape` (tiles and ints), from the counters
    `kd.rand(shape, seed, offset)` uses (its seed and offset rules; both Threefry words of each
    counter): `sqrt(-2 ln u1) * cos(2 pi u2)`. Every config and backend gives the same bits,
    `kernel_dsl.testing.reference_randn(sizes, seed, offset)` at the tiles' positions."""
    x0, x1 = random_bits(shape, seed, offset, what="kd.randn")
    radius = unary("sqrt", binary("mul", _log_u1(x0), -2.0))
    return binary("mul", radius, _cos_turn(x1))


def _randn_like(x: Any, *, dtype: Any = None, **kwargs: Any) -> TileValue:
    """`torch.randn_like(tile)`: `kd.randn(x.shape, seed)` under the seeding rules of
    `torch.rand_like` (a hidden seed per call site, drawn from torch's generator every call)."""
    t, seed, out_dt = call_site_seed(x, dtype, kwargs, "randn_like")
    return cast_v(randn(list(t.v.shape), seed), out_dt)


HANDLERS[torch.randn_like] = _randn_like
