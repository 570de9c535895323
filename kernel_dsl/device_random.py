"""`kd.rand(shape, seed, offset=0)`: counter-based random numbers that agree on every backend.

Threefry-2x32 with 20 rounds (JAX's generator; Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3") built from the IR's int32 add, xor, shifts and masks, so Pallas, Triton, NKI and the
torch reproduction (`kernel_dsl.testing.reference_rand`) give the same bits. int32 holds 32 raw
bits: adds wrap, a logical right shift is an arithmetic one masked, a rotation is two shifts.

- key: the seed as a signed 64-bit value, (low 32 bits, high 32 bits). An int32 device scalar
  (`seed_t[0]`) is sign-extended, so `seed=s` and a tensor holding `s` give one stream.
- counter: the element's row-major linear index over the full extents of `shape` (a tile dim
  counts the tensor's whole dim at its global index, `tile.index`), plus `offset`, as a 64-bit
  value (low word, high word). Block sizes never enter it: every config gives the same values.
- value: the first output word's top 24 bits times 2**-24, exact in f32: [0, 1), no rounding.

Not a new IR op: a composite, so backends need no change (docs/ir.md "Random numbers").
Importing this module registers `torch.rand_like` in device code: `kd.rand` seeded by a hidden
input that every call fills from torch's generator (`wrap`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import dtypes
from .device_ops import (
    Tile,
    TileValue,
    _as_tile,
    _emit,
    _ir_dtype,
    binary,
    broadcast,
    cast_v,
    const,
    expand_dims,
)
from .errors import DTypeError, KernelSyntaxError, ShapeError
from .ir import Dim, Index, KernelIR, TileVar
from .torch_functions import HANDLERS
from .tracing import current, user_loc

MASK32 = (1 << 32) - 1
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32's rotation constants, 4 per round group
PARITY = 0x1BD11BDA  # the key schedule's third word: k0 ^ k1 ^ PARITY
ROUND_GROUPS = 5  # 5 x 4 = 20 rounds
I32 = Any  # an int32 TileValue, or a Python int (folded at trace time) holding 32 raw bits


def _i32(n: int) -> int:
    """The 32 low bits of `n` as a signed int32 (the value an int32 lane holds)."""
    n &= MASK32
    return n - (1 << 32) if n >= 1 << 31 else n


def _add(a: I32, b: I32) -> I32:
    if isinstance(a, int) and isinstance(b, int):
        return _i32(a + b)
    return binary("add", a, _i32(b) if isinstance(b, int) else b) if isinstance(a, TileValue) \
        else binary("add", b, _i32(a))


def _xor(a: I32, b: I32) -> I32:
    if isinstance(a, int) and isinstance(b, int):
        return _i32(a ^ b)
    return binary("xor", a, _i32(b) if isinstance(b, int) else b) if isinstance(a, TileValue) \
        else binary("xor", b, _i32(a))


def _rotl(x: I32, r: int) -> I32:
    if isinstance(x, int):
        u = x & MASK32
        return _i32((u << r) | (u >> (32 - r)))
    # `>>` is arithmetic on int32: mask off the copies of the sign bit
    return binary("or", binary("shl", x, r), binary("and", binary("shr", x, 32 - r), (1 << r) - 1))


def threefry2x32(k0: I32, k1: I32, c0: I32, c1: I32) -> tuple[I32, I32]:
    """Threefry-2x32-20 of counter (c0, c1) under key (k0, k1): two words of 32 raw bits."""
    ks = (k0, k1, _xor(_xor(k0, k1), PARITY))
    x0, x1 = _add(c0, ks[0]), _add(c1, ks[1])
    for g in range(ROUND_GROUPS):
        for r in ROTATIONS[4 * (g % 2):4 * (g % 2) + 4]:
            x0 = _add(x0, x1)
            x1 = _xor(_rotl(x1, r), x0)
        x0 = _add(x0, ks[(g + 1) % 3])
        x1 = _add(_add(x1, ks[(g + 2) % 3]), g + 1)
    return x0, x1


def _shape(shape: Any, what: str) -> tuple[Dim, ...]:
    if isinstance(shape, (Tile, TileVar, int)) and not isinstance(shape, bool):
        shape = [shape]
    if not isinstance(shape, (list, tuple)):
        raise KernelSyntaxError(f"{what}: the shape is a list of tiles and ints, got "
                                f"{type(shape).__name__}", user_loc(), "write e.g. `kd.rand([tm, tn], seed)`")
    dims: list[Dim] = []
    for s in shape:
        if isinstance(s, Tile):
            s = s.var
        if isinstance(s, TileVar) or (isinstance(s, int) and not isinstance(s, bool) and s >= 1):
            dims.append(s)
        else:
            raise KernelSyntaxError(f"{what}: shape entries are tiles or positive ints, got {s!r}",
                                    user_loc(), "write e.g. `kd.rand([tm, 4], seed)`")
    for s in dims[1:]:
        if isinstance(s, TileVar) and s.bounded:
            # its extent only bounds the loop: no fixed stride to count the dims before it
            raise ShapeError(f"{what}: the tile `{s}` of `kd.tile(begin, end)` may only be the "
                             "first dim of the shape", user_loc(), "put it first, or draw a 1-D "
                             "stream per row with `offset=row * row_length`")
    return tuple(dims)


def _extent(d: Dim) -> int:
    return d.extent if isinstance(d, TileVar) else d


def linear_index(dims: tuple[Dim, ...]) -> TileValue:
    """Each element's row-major index over the full extents of `dims` (int32)."""
    if not dims:
        return const(0, "i32")
    lin: TileValue | None = None
    stride = 1
    for axis in range(len(dims) - 1, -1, -1):
        d = dims[axis]
        if isinstance(d, TileVar):  # global lane positions: the same whatever the block size
            idx = _emit("iota", [], {"tile": d}, (d,), "i32")
        else:
            idx = _emit("arange", [], {"size": d}, (d,), "i32")
        for _ in range(axis):
            idx = expand_dims(idx, 0)
        for _ in range(axis + 1, len(dims)):
            idx = expand_dims(idx, -1)
        term = idx if stride == 1 else binary("mul", idx, _i32(stride))
        lin = term if lin is None else binary("add", lin, term)
        stride *= _extent(d)
    assert lin is not None
    return broadcast(lin, dims)


def _spread(x: I32, dims: tuple[Dim, ...]) -> I32:
    """`x` broadcast to `dims` in two 16-bit halves: NKI moves a broadcast through f32 (TensorE,
    per-partition operands), which holds 16 bits exactly but not 32."""
    if not isinstance(x, TileValue) or x.v.shape == dims:
        return x
    lo = broadcast(binary("and", x, 0xFFFF), dims)
    hi = broadcast(binary("and", binary("shr", x, 16), 0xFFFF), dims)
    return binary("or", binary("shl", hi, 16), lo)


def _ult(a: TileValue, b: I32) -> TileValue:
    """`a < b` as unsigned 32-bit values (int32 compare after flipping the sign bits). For the
    carry, `a = b + lin` mod 2**32: without a carry the two differ by `lin`, with one by
    `2**32 - lin`, so a compare that rounds both sides monotonically (NKI's f32 `tensor_scalar`
    against an immediate) still answers right for `lin < 2**31`."""
    return binary("lt", binary("xor", a, -(1 << 31)), _xor(b, -(1 << 31)))


def _scalar_int(x: Any, what: str, name: str) -> tuple[I32, I32]:
    """`x` (a Python int or an int device value) as a signed 64-bit value: (low, high) words."""
    if isinstance(x, bool) or not isinstance(x, (int, TileValue)):
        raise KernelSyntaxError(f"{what}: `{name}` must be an int or an int32 device value, got "
                                f"{type(x).__name__}", user_loc(),
                                f"pass an int argument, or load it from a 1-element int32 tensor: "
                                f"`{name}_t[0]`")
    if isinstance(x, int):
        if not -(1 << 63) <= x < 1 << 63:
            raise KernelSyntaxError(f"{what}: `{name}={x}` is outside the signed 64-bit range",
                                    user_loc(), "reduce it modulo 2**64 into [-2**63, 2**63)")
        return _i32(x), _i32(x >> 32)
    if dtypes.is_float(x.v.dtype) or x.v.dtype == "bool":
        raise DTypeError(f"{what}: `{name}` is a {x.v.dtype} value; it must be an integer",
                         user_loc(), "store it in an int32 tensor")
    x = cast_v(x, "i32")
    return x, binary("shr", x, 31)  # sign-extended to 64 bits


def random_bits(shape: Any, seed: Any, offset: Any = 0, offsets: Any = None,
                what: str = "kd.rand") -> tuple[TileValue, TileValue]:
    """The two Threefry words of every element of `shape` (int32 tiles of that shape), or of
    `offsets` (Helion's explicit counters: its shape, `shape` ignored)."""
    k0, k1 = _scalar_int(seed, what, "seed")
    if isinstance(seed, TileValue) and any(d != 1 for d in seed.v.shape):
        raise ShapeError(f"{what}: the seed is a tile of shape {seed.v.shape}; it must be one value",
                         user_loc(), "index one element: `seed_t[0]`")
    if offsets is not None:
        if not isinstance(offsets, TileValue) or not isinstance(offset, int) or offset != 0:
            raise KernelSyntaxError(f"{what}: `offsets=` takes an int32 tile of counters, alone",
                                    user_loc(), "write `kd.rand([], seed, offsets=base)` (fold "
                                    "any `offset` into `base`), or `offset=` for a shift")
        c0, c1 = _scalar_int(offsets, what, "offsets")  # sign-extended to 64 bits
        dims = offsets.v.shape
        k0, k1 = _spread(k0, dims), _spread(k1, dims)
        return threefry2x32(k0, k1, c0, _spread(c1, dims))  # type: ignore[return-value]
    dims = _shape(shape, what)
    lin = linear_index(dims)
    k0, k1 = _spread(k0, dims), _spread(k1, dims)
    off_lo, off_hi = (_spread(w, dims) for w in _scalar_int(offset, what, "offset"))
    # counter = lin + offset over 64 bits (lin >= 0): the low word wraps, the carry goes up
    c0 = _add(lin, off_lo)
    c1: I32 = off_hi
    if not (isinstance(off_lo, int) and off_lo == 0):
        c1 = _add(cast_v(_ult(c0, off_lo), "i32"), off_hi)
    return threefry2x32(k0, k1, c0, c1)  # type: ignore[return-value]


def rand(shape: Any, seed: Any, offset: Any = 0, *, offsets: Any = None) -> TileValue:
    """Uniform f32 values in [0, 1), one per element of `shape`, from Threefry-2x32-20.

    `shape` lists tiles and ints (Helion's `hl.rand([tile_m, tile_n], seed)`); `seed` is an int
    (a compile-time constant: each value builds its own kernel) or an int32 device value such
    as `seed_t[0]` (a runtime value: one build serves every seed); `offset` (an int or int32
    device value, a scalar or a tile that broadcasts against `shape`) shifts the counters, so
    that sibling streams do not overlap; `offsets` (Helion's) gives every element's counter
    outright, and the result has its shape. The values equal
    `kernel_dsl.testing.reference_rand(sizes, seed, offset, offsets=)` at the tiles' positions."""
    bits, _ = random_bits(shape, seed, offset, offsets)
    top24 = binary("and", binary("shr", bits, 8), (1 << 24) - 1)
    return binary("mul", cast_v(top24, "f32"), 2.0 ** -24)  # both exact: no backend may round


def randint(shape: Any, low: int, high: int, seed: Any, offset: Any = 0) -> TileValue:
    """int32 values in [low, high) (Helion's `hl.randint`): `low + (x0 >>> 1) % (high - low)`
    from the same stream as `kd.rand` (31 uniform bits, so the bias is below
    (high - low) / 2**31). `low`, `high` are ints with `high - low` in [1, 2**31)."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise KernelSyntaxError("kd.randint: `low` and `high` must be ints", user_loc(),
                                "write e.g. `kd.randint([t], 0, 10, seed)`")
    n = high - low
    if not (1 <= n < 1 << 31 and -(1 << 31) <= low and high <= 1 << 31):
        raise KernelSyntaxError(f"kd.randint: [{low}, {high}) is not a non-empty int32 range "
                                "narrower than 2**31", user_loc(),
                                "draw a narrower range, or combine two draws")
    bits, _ = random_bits(shape, seed, offset, what="kd.randint")
    r = binary("and", binary("shr", bits, 1), (1 << 31) - 1)
    r = binary("mod", r, n) if n & (n - 1) else binary("and", r, n - 1)  # a power of 2: a mask
    return r if low == 0 else binary("add", r, low)


def call_site_seed(x: Any, dtype: Any, kwargs: dict[str, Any], name: str) -> tuple[TileValue, TileValue, str]:
    """The tile `x` and the output dtype of `torch.<name>(x, dtype=)` in device code, after
    adding this call site's hidden seed input (`rng_seed_<i>`, int32[1]): its value, read as a
    device scalar."""
    t = _as_tile(x)
    kwargs.pop("memory_format", None)
    if kwargs.pop("device", None) is not None or kwargs.pop("layout", None) is not None or \
            kwargs.pop("requires_grad", False) or kwargs:
        raise KernelSyntaxError(f"`torch.{name}` in device code takes `dtype=` only", user_loc(),
                                f"write `torch.{name}(x)` or `torch.{name}(x, dtype=...)`")
    out_dt = _ir_dtype(dtype) if dtype is not None else t.v.dtype
    if not dtypes.is_float(out_dt):
        raise DTypeError(f"`torch.{name}` of a {out_dt} tile", user_loc(),
                         "torch draws floats only: pass `dtype=torch.float32`")
    tr = current()
    assert tr is not None
    n = sum(1 for p in tr.params if p.rng_seed)
    meta = torch.empty((1,), dtype=torch.int32, device="meta")
    param = tr.add_param(meta, f"rng_seed_{n}", "i32", False)
    param.rng_seed = True
    seed = TileValue(tr.emit("load", [], {"tensor": param, "index": (Index("int", value=0),)}, (),
                             "i32"))
    return t, seed, out_dt


def _rand_like(x: Any, *, dtype: Any = None, **kwargs: Any) -> TileValue:
    """`torch.rand_like(tile)`, as Helion gives it: a fresh stream at every call. Each call site
    reads its own hidden seed input (`rng_seed_<i>`, int32[1]), which every call of the kernel
    fills with `torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32)` from torch's default
    generator (so `torch.manual_seed` makes calls repeatable), and gives
    `kd.rand(x.shape, seed)`: `reference_rand(sizes, seed)` at the tile's positions."""
    t, seed, out_dt = call_site_seed(x, dtype, kwargs, "rand_like")
    return cast_v(rand(list(t.v.shape), seed), out_dt)


def fresh_seeds(ir: KernelIR) -> list[torch.Tensor]:
    """One int32[1] seed per `torch.rand_like` call site, from torch's default generator."""
    n = sum(1 for p in ir.inputs if p.rng_seed)
    if not n:
        return []
    seeds = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32)
    return [seeds[i:i + 1].clone() for i in range(n)]


def wrap(ir: KernelIR, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with the `torch.rand_like` seeds appended to its inputs, fresh at every call."""
    if not any(p.rng_seed for p in ir.inputs):
        return fn

    def run(*tensors: torch.Tensor) -> Any:
        return fn(*tensors, *fresh_seeds(ir))

    run.inner = fn  # type: ignore[attr-defined]
    return run


HANDLERS[torch.rand_like] = _rand_like
