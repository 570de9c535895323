"""Integer and bit ops on tiles (`& | ^ ~ << >> // %`, torch.bitwise_*, torch.div rounding modes,
torch.remainder/fmod) on every backend and integer dtype, bit-exact against torch: floor division
for negatives, wrap-around on overflow, torch's shifts by out-of-range amounts, promotion."""
from __future__ import annotations

import os

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.lowering import get

BACKENDS = ("pallas", "triton", "nki")
INTS = (torch.int32, torch.int16, torch.int8, torch.uint8)
SHAPES = [(37, 5), (1, 130)]  # ragged under every backend's blocks, and a size-1 dim
E = torch.empty
# the Triton interpreter's NumPy warns where torch wraps (MIN // -1)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def ints(shape: tuple[int, ...], dtype: torch.dtype, nonzero: bool = False) -> torch.Tensor:
    """Random values over the dtype's whole range (small ones often: they hit the edge cases),
    with the extremes written in."""
    info = torch.iinfo(dtype)
    wide = torch.randint(info.min, info.max + 1, shape, dtype=torch.int64)
    small = torch.randint(-9 if info.min < 0 else 0, 10, shape, dtype=torch.int64)
    x = torch.where(torch.rand(shape) < 0.5, wide, small)
    x.view(-1)[:2] = torch.tensor([info.min, info.max])[:x.numel()]
    if nonzero:
        x[x == 0] = 1
    return x.to(dtype)


@kd.kernel
def arith(x: torch.Tensor, y: torch.Tensor):
    """Every binary integer op of two tiles, one output each."""
    outs = [torch.empty_like(x) for _ in range(10)]
    for t in kd.tile(x.shape):
        a, b = x[t], y[t]
        outs[0][t] = a // b
        outs[1][t] = a % b
        outs[2][t] = torch.div(a, b, rounding_mode="trunc")
        outs[3][t] = torch.fmod(a, b)
        outs[4][t] = a & b
        outs[5][t] = a | b
        outs[6][t] = a ^ b
        outs[7][t] = ~a
        outs[8][t] = a * b + a  # wraps
        outs[9][t] = -a - b  # wraps
    return tuple(outs)


def arith_ref(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    # torch's CPU kernel traps (SIGFPE) on int32 MIN / -1 with rounding_mode="trunc": int64, wrapped
    trunc = torch.div(a.long(), b.long(), rounding_mode="trunc").to(a.dtype)
    return [a // b, a % b, trunc, torch.fmod(a, b), a & b, a | b, a ^ b, ~a, a * b + a, -a - b]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_ops_match_torch_bit_for_bit(backend: str, dtype: torch.dtype,
                                             shape: tuple[int, int]) -> None:
    x, y = ints(shape, dtype), ints(shape, dtype, nonzero=True)
    x.view(-1)[2:4], y.view(-1)[2:4] = x.view(-1)[0], -1  # MIN // -1 wraps to MIN (torch too)
    with kd.backend(backend):
        got = arith(x, y)
    for i, (g, r) in enumerate(zip(got, arith_ref(x, y))):
        assert g.dtype == dtype
        assert torch.equal(g, r), f"output {i}: {g[g != r][:5]} != {r[g != r][:5]}"


def test_floor_division_rounds_toward_minus_infinity() -> None:
    """The cases where floor and truncation differ, on the backend whose native // truncates."""
    x = torch.tensor([[-7, 7, -7, 7, -1, 0]], dtype=torch.int32)
    y = torch.tensor([[2, -2, -2, 2, 3, -3]], dtype=torch.int32)
    with kd.backend("triton"):
        q, r, tq, tr = arith(x, y)[:4]
    assert q.tolist() == [[-4, -4, 3, 3, -1, 0]] and r.tolist() == [[1, -1, -1, 1, 2, 0]]
    assert tq.tolist() == [[-3, -3, 3, 3, 0, 0]] and tr.tolist() == [[-1, 1, -1, 1, -1, 0]]


@kd.kernel
def shifts(x: torch.Tensor, s: torch.Tensor):
    """Shifts by a tile of amounts and by Python ints (in range and out of it)."""
    outs = [torch.empty_like(x) for _ in range(6)]
    n = torch.iinfo(x.dtype).bits
    for t in kd.tile(x.shape):
        a = x[t]
        outs[0][t] = a << s[t]
        outs[1][t] = a >> s[t]
        outs[2][t] = torch.bitwise_left_shift(a, 3)
        outs[3][t] = torch.bitwise_right_shift(a, n - 1)
        outs[4][t] = a << n  # torch: 0
        outs[5][t] = a >> (n + 5)  # torch: the sign (signed), 0 (unsigned)
    return tuple(outs)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shifts_wrap_and_follow_torch_out_of_range(backend: str, dtype: torch.dtype) -> None:
    x = ints((37, 5), dtype)
    bits = torch.iinfo(dtype).bits
    lo = -3 if dtype != torch.uint8 else 0
    s = torch.randint(lo, bits + 4, (37, 5)).to(dtype)  # negative and >= bits amounts too
    with kd.backend(backend):
        got = shifts(x, s)
    ref = [x << s, x >> s, x << 3, x >> (bits - 1), x << bits, x >> (bits + 5)]
    for i, (g, r) in enumerate(zip(got, ref)):
        assert torch.equal(g, r), f"output {i}: {g[g != r][:5]} != {r[g != r][:5]}"


@kd.kernel
def promoted(x: torch.Tensor, y: torch.Tensor, m: torch.Tensor):
    """Mixed dtypes and Python scalars promote as in torch; bool ops stay bool."""
    o1 = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    o2 = torch.empty_like(o1)
    o3 = torch.empty_like(x)
    o4 = torch.empty_like(m)
    o5 = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for t in kd.tile(x.shape):
        a, b, c = x[t], y[t], m[t]
        o1[t] = (a & b) ^ (a | 3)
        o2[t] = torch.remainder(b, 7) - torch.floor_divide(a, -3)
        o3[t] = (100 // a.clamp_min(1)) + (5 % a.clamp_min(1)) + (1 << (a & 3))
        o4[t] = (c ^ (a > 0)) | ~c & torch.logical_xor(a, b)
        o5[t] = a // 2.5  # a float scalar promotes to f32: floor(a / 2.5)
    return o1, o2, o3, o4, o5


@pytest.mark.parametrize("backend", BACKENDS)
def test_promotion_scalars_and_bool(backend: str) -> None:
    x, y = ints((37, 3), torch.int8), ints((37, 3), torch.uint8)
    m = torch.rand(37, 3) > 0.5
    with kd.backend(backend):
        o1, o2, o3, o4, o5 = promoted(x, y, m)
    assert o1.dtype == torch.int16 and o4.dtype == torch.bool
    assert torch.equal(o1, (x & y) ^ (x | 3))
    assert torch.equal(o2, torch.remainder(y, 7) - torch.floor_divide(x, -3))
    xc = x.clamp_min(1)
    assert torch.equal(o3, (100 // xc) + (5 % xc) + (1 << (x & 3)))
    assert torch.equal(o4, (m ^ (x > 0)) | ~m & torch.logical_xor(x, y))
    torch.testing.assert_close(o5, x // 2.5, rtol=0, atol=0)


@kd.kernel
def unpack_int4(packed: torch.Tensor):
    """Two signed 4-bit values per int8 (Helion's int4_gemm): the low nibble sign-extended by
    shifting it to the top and back, the high one by an arithmetic shift."""
    lo, hi = torch.empty_like(packed), torch.empty_like(packed)
    for t in kd.tile(packed.shape):
        p = packed[t]
        lo[t] = (p << 4) >> 4
        hi[t] = p >> 4
    return lo, hi


@pytest.mark.parametrize("backend", BACKENDS)
def test_int4_unpacking(backend: str) -> None:
    lo_ref = torch.randint(-8, 8, (37, 130), dtype=torch.int8)
    hi_ref = torch.randint(-8, 8, (37, 130), dtype=torch.int8)
    packed = (hi_ref << 4) | (lo_ref & 0xF)
    with kd.backend(backend):
        lo, hi = unpack_int4(packed)
    assert torch.equal(lo, lo_ref) and torch.equal(hi, hi_ref)


@kd.kernel
def div_by_zero(x: torch.Tensor, y: torch.Tensor):
    q, r = torch.empty_like(x), torch.empty_like(x)
    for t in kd.tile(x.shape):
        q[t] = x[t] // y[t]
        r[t] = x[t] % y[t]
    return q, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_by_zero_is_defined_and_does_not_crash(backend: str) -> None:
    """torch raises ZeroDivisionError; kernels cannot, so every backend gives x // 0 == x and
    x % 0 == 0 (docs/ir.md)."""
    x = torch.tensor([[-5, 0, 100, 7]], dtype=torch.int32)
    with kd.backend(backend):
        q, r = div_by_zero(x, torch.zeros_like(x))
    assert torch.equal(q, x) and torch.equal(r, torch.zeros_like(x))


def test_float_operands_of_bit_ops_are_rejected() -> None:
    @kd.kernel
    def bad(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] & x[t]
        return out

    @kd.kernel
    def bad_shift(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] << 1
        return out

    with pytest.raises(kd.DTypeError, match="integer or bool"):
        bad.ir(E(8, 8))
    with pytest.raises(kd.DTypeError, match="<<"):
        bad_shift.ir(E(8, 8))
    @kd.kernel
    def bool_shift(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] << x[t]  # torch: "lshift_cpu" not implemented for 'Bool'
        return out

    with pytest.raises(kd.DTypeError, match="<<"):
        bool_shift.ir(E(8, 8, dtype=torch.bool))


def test_ir_has_integer_ops_and_shift_guards() -> None:
    ir = shifts.ir(E(37, 5, dtype=torch.int8), E(37, 5, dtype=torch.int8))
    kinds = [op.kind for op in ir.body.walk()]
    assert {"shl", "shr", "where"} <= set(kinds)
    assert " = shl " in kd.print_ir(ir)
    ir = arith.ir(E(8, 8, dtype=torch.int16), E(8, 8, dtype=torch.int16))
    assert {"floordiv", "mod", "and", "or", "xor", "not"} <= {op.kind for op in ir.body.walk()}


def test_pallas_source_widens_narrow_integers() -> None:
    """Mosaic has no 8-bit vector arithmetic: i8 ops run on int32 copies, cast back."""
    src = arith.source(E(16, 256, dtype=torch.int8), E(16, 256, dtype=torch.int8), backend="pallas")
    assert "jnp.floor_divide(" in src and ".astype(jnp.int32)" in src and ".astype(jnp.int8)" in src


@pytest.mark.parametrize("dtype", (torch.int32, torch.int8), ids=str)
def test_integer_kernel_compiles_for_a_real_tpu(dtype: torch.dtype) -> None:
    """int8 is the case Mosaic rejects unless the renderer widens it (test below: every target)."""
    r = arith.check(E(256, 512, dtype=dtype), E(256, 512, dtype=dtype), targets=["tpu-v5e"],
                    measure_vmem=False)
    assert r.ok, r.table()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_kernels_compile_for_every_tpu(dtype: torch.dtype) -> None:
    for k in (arith, shifts):
        r = k.check(E(256, 512, dtype=dtype), E(256, 512, dtype=dtype), measure_vmem=False)
        assert r.ok, r.table()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                    reason="TRITON_INTERPRET=1: no GPU compiler in this process")
@pytest.mark.parametrize("dtype", (torch.int32, torch.int8, torch.uint8), ids=str)
def test_integer_kernels_compile_for_a_real_gpu(dtype: torch.dtype) -> None:
    """Triton's GPU compiler (sm_90, compile-only) accepts the integer helpers and shifts."""
    args = (E(37, 300, dtype=dtype), E(37, 300, dtype=dtype))
    for k in (arith, shifts):
        report = get("triton").verify(k.generated(*args, backend="triton", target="cuda"))
        assert report["ok"], report["error"]


@kd.kernel
def ragged_int_min_max(x: torch.Tensor):
    lo = torch.empty([x.shape[0]], dtype=x.dtype, device=x.device)
    hi = torch.empty([x.shape[0]], dtype=x.dtype, device=x.device)
    for tm in kd.tile(x.shape[0], block_size=8):
        a = kd.full([tm], 2**31 - 1, dtype=torch.int32)
        b = kd.full([tm], -2**31, dtype=torch.int32)
        for tn in kd.tile(x.shape[1], block_size=128):
            a = torch.minimum(a, x[tm, tn].amin(1))
            b = torch.maximum(b, x[tm, tn].amax(1))
        lo[tm], hi[tm] = a, b
    return lo, hi


@pytest.mark.parametrize("backend", BACKENDS)
def test_int32_min_max_over_ragged_blocks(backend: str) -> None:
    """The pad lanes of the last, ragged block hold the reduction's identity, which must survive
    NKI's f32 engines (2**31 - 1 rounds to 2**31 there and wrapped to -2**31)."""
    x = torch.randint(-100, 100, (19, 300), dtype=torch.int32)
    with kd.backend(backend):
        lo, hi = ragged_int_min_max(x)
    assert torch.equal(lo, x.amin(1)) and torch.equal(hi, x.amax(1))


# -- broadcasts of int32 values above 2**24 (NKI broadcasts through float32 units) ------------
@kd.kernel
def xor_broadcasts(x: torch.Tensor, r: torch.Tensor, c: torch.Tensor, s: torch.Tensor):
    """A row across partitions, a column along the free axis and a loaded scalar to 2-D."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = ((x[tm, tn] ^ r[tn][None, :]) + c[tm][:, None]) ^ s[0]
    return out


@pytest.mark.parametrize("shape", [(37, 45), (1, 130), (129, 1)], ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_int32_broadcasts_keep_every_bit(backend: str, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(3)
    m, n = shape
    x, r, c, s = (torch.randint(-2**31, 2**31 - 1, sh, dtype=torch.int32, generator=g)
                  for sh in ((m, n), (n,), (m,), (1,)))
    want = ((x ^ r[None, :]) + c[:, None]) ^ s[0]
    with kd.backend(backend):
        assert torch.equal(xor_broadcasts(x, r, c, s), want)
