"""Bit views, `tile.view(dtype)` (issue 14 item 2): the IR's `bitcast`, on every backend.

The same bits read as a dtype of the same width, as torch's Tensor.view(dtype): checked bit for
bit against torch (NaN and inf patterns included) at ragged and size-1 shapes. Width-changing
views are a DTypeError at the user's line; float16 views are a BackendError for TPU targets,
whose compiler rejects them.
"""
from __future__ import annotations

import os

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import BackendError, DTypeError, IRVerificationError, ShapeError
from kernel_dsl.ir_verify import verify

BACKENDS = ("pallas", "triton", "nki")
SHAPES = [(37, 130), (1, 1)]
BASENAME = os.path.basename(__file__)


def view_kernel(dst: torch.dtype):  # noqa: ANN201
    @kd.kernel
    def view(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty([m, n], dtype=dst, device=x.device)
        for tm, tn in kd.tile([m, n]):
            out[tm, tn] = x[tm, tn].view(dst)
        return out
    return view


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def special_f32(m: int, n: int) -> torch.Tensor:
    x = torch.randn(m, n) * 1e3
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -0.0, -float("inf")])[: m * n]
    return x


def ints(dtype: torch.dtype, m: int, n: int) -> torch.Tensor:
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, (m, n), dtype=torch.int64).to(dtype)


def no_nan(x: torch.Tensor, as_float: torch.dtype) -> torch.Tensor:
    """`x` with the bit patterns that are NaNs of `as_float` zeroed: Pallas' CPU interpreter
    canonicalizes 16- and 8-bit float NaN payloads in multi-block kernels (plain copies too;
    docs/ir.md, `bitcast`). test_nan_payloads_are_kept checks them where they are exact."""
    f = x.view(as_float)
    return torch.where(torch.isnan(f.float()), torch.zeros_like(x), x)


def e5m2_patterns(m: int, n: int) -> torch.Tensor:
    return no_nan(ints(torch.uint8, m, n), torch.float8_e5m2)


CASES = {
    "f32->i32": (lambda m, n: special_f32(m, n), torch.int32),
    "i32->f32": (lambda m, n: ints(torch.int32, m, n), torch.float32),
    "bf16->i16": (lambda m, n: special_f32(m, n).nan_to_num(0.0, None, None).bfloat16(),
                  torch.int16),
    "i16->bf16": (lambda m, n: no_nan(ints(torch.int16, m, n), torch.bfloat16), torch.bfloat16),
    "f16->i16": (lambda m, n: torch.randn(m, n).half(), torch.int16),
    "i16->f16": (lambda m, n: no_nan(ints(torch.int16, m, n), torch.float16), torch.float16),
    "bf16->f16": (lambda m, n: torch.randn(m, n).bfloat16(), torch.float16),
    "i8->u8": (lambda m, n: ints(torch.int8, m, n), torch.uint8),
    "u8->i8": (lambda m, n: ints(torch.uint8, m, n), torch.int8),
    "f8e5m2->u8": (lambda m, n: e5m2_patterns(m, n).view(torch.float8_e5m2), torch.uint8),
    "u8->f8e5m2": (lambda m, n: e5m2_patterns(m, n), torch.float8_e5m2),
    "f8e4m3fn->i8": (lambda m, n: (torch.randn(m, n) * 50).to(torch.float8_e4m3fn), torch.int8),
}
KERNELS = {name: view_kernel(dst) for name, (_, dst) in CASES.items()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", list(CASES))
def test_bit_view_matches_torch(case: str, shape: tuple[int, int], backend: str) -> None:
    make, dst = CASES[case]
    x = make(*shape)
    if backend == "nki" and x.dtype == torch.float8_e4m3fn:  # trn2's float8_e4m3 is another format
        with pytest.raises(BackendError, match="no float8_e4m3fn"):
            with kd.backend(backend):
                KERNELS[case](x)
        return
    with kd.backend(backend):
        y = KERNELS[case](x)
    want = x.view(dst)
    assert y.dtype == want.dtype
    assert torch.equal(bits(y), bits(want))


@pytest.mark.parametrize("backend", ["triton", "nki"])
@pytest.mark.parametrize("src,dst", [(torch.int16, torch.bfloat16), (torch.int16, torch.float16),
                                     (torch.uint8, torch.float8_e5m2)])
def test_nan_payloads_are_kept(src: torch.dtype, dst: torch.dtype, backend: str) -> None:
    x = ints(src, 37, 130)
    nans = {torch.bfloat16: [-1, 0x7F81, 0x7FC0], torch.float16: [-1, 0x7C01, 0x7E00],
            torch.float8_e5m2: [0xFF, 0x7D, 0x7E]}[dst]  # quiet and signalling NaNs
    x.view(-1)[:3] = torch.tensor(nans).to(src)
    assert torch.isnan(x.view(dst)[0, :3].float()).all()
    there, back = view_kernel(dst), view_kernel(src)
    with kd.backend(backend):
        y = there(x)
        assert torch.equal(bits(y), bits(x.view(dst)))
        assert torch.equal(back(y), x)


@kd.kernel
def exponent(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.int32, device=x.device)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = ((x[tm, tn].view(torch.int32) >> 23) & 0xFF) - 127
    return out


@kd.kernel
def flip_sign(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = (x[tm, tn].view(torch.int32) ^ -2147483648).view(torch.float32)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_bit_tricks(backend: str) -> None:
    x = special_f32(37, 130)
    with kd.backend(backend):
        e, f = exponent(x), flip_sign(x)
    assert torch.equal(e, ((x.view(torch.int32) >> 23) & 0xFF) - 127)
    assert torch.equal(bits(f), bits(-x))  # -x flips the sign bit of every value, NaN too


# -- errors ---------------------------------------------------------------------------------------

@kd.kernel
def k_narrowing_view(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.int16, device=x.device)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, tn].view(torch.int16)  # line: narrowing
    return out


@kd.kernel
def k_shape_view(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, tn].view(-1)  # line: shape
    return out


@kd.kernel
def k_bool_view(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.uint8, device=x.device)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = (x[tm, tn] > 0).view(torch.uint8)  # line: bool
    return out


def _line(tag: str) -> str:
    with open(__file__) as f:
        n = next(i for i, text in enumerate(f, start=1) if text.rstrip().endswith(f"# line: {tag}"))
    return f"{BASENAME}:{n}"


@pytest.mark.parametrize("kernel,exc,tag,words", [
    (k_narrowing_view, DTypeError, "narrowing", ("element width", "32 -> 16 bits", "shifts")),
    (k_shape_view, ShapeError, "shape", ("reshape", "tile dims must stay")),
    (k_bool_view, DTypeError, "bool", ("bool", "x.to(torch.uint8)")),
])
def test_bad_views_are_clear_errors(kernel, exc, tag, words) -> None:  # noqa: ANN001
    with pytest.raises(exc) as info:
        kernel(torch.randn(5, 7))
    msg = str(info.value)
    assert type(info.value) is exc and _line(tag) in msg and "hint:" in msg, msg
    for w in words:
        assert w in msg, msg


def test_verifier_rejects_a_width_changing_bitcast() -> None:
    ir = exponent.ir(torch.randn(5, 7))
    op = next(op for op in ir.body.walk() if op.kind == "bitcast")
    verify(ir)
    op.result.dtype = "i16"
    with pytest.raises(IRVerificationError, match="element widths must match"):
        verify(ir)
    op.result.dtype = "i32"


def test_float16_views_are_a_tpu_target_error() -> None:
    x = torch.randn(16, 128).half()
    with pytest.raises(BackendError, match="tpu-v6e cannot view float16 bits") as info:
        KERNELS["f16->i16"].source(x, backend="pallas", target="tpu-v6e")
    assert "bfloat16" in str(info.value)


@kd.kernel
def tpu_views(x: torch.Tensor, b: torch.Tensor, i: torch.Tensor, f: torch.Tensor):  # noqa: ANN201
    m, n = x.shape
    o1 = torch.empty([m, n], dtype=torch.int32, device=x.device)
    o2 = torch.empty([m, n], dtype=torch.int16, device=x.device)
    o3 = torch.empty([m, n], dtype=torch.uint8, device=x.device)
    o4 = torch.empty([m, n], dtype=torch.uint8, device=x.device)
    for tm, tn in kd.tile([m, n]):
        o1[tm, tn] = (x[tm, tn].view(torch.int32) >> 23) & 0xFF
        o2[tm, tn] = b[tm, tn].view(torch.int16)
        o3[tm, tn] = i[tm, tn].view(torch.uint8)
        o4[tm, tn] = f[tm, tn].view(torch.uint8)
    return o1, o2, o3, o4


@pytest.mark.slow
def test_bit_views_compile_for_tpu() -> None:
    m, n = 37, 300
    args = (torch.randn(m, n), torch.randn(m, n).bfloat16(), torch.zeros(m, n, dtype=torch.int8),
            torch.zeros(m, n).to(torch.float8_e5m2))
    report = tpu_views.check(*args, targets=["tpu-v5e", "tpu-v6e"])
    assert [e.status for e in report.entries] == ["ok", "ok"], report


# -- int4 packing: Helion's examples/int4_gemm.py, adapted ----------------------------------------
# The literal port stops at `block_size_k_packed * 2` (block sizes as values, issue 13 item 5);
# it also slices A with a computed begin and unpacks with torch.stack + a tile reshape, which the
# language lacks. Here the caller passes A's even and odd columns, and the nibbles meet them in
# two dots: the same unpacking (`& 15`, sign fix, arithmetic `>> 4`) and the same f32 accumulator.

@kd.kernel
def int4_gemm(a_even: torch.Tensor, a_odd: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, _ = a_even.shape
    k2, n = b.shape
    c = torch.zeros(m, n, dtype=torch.bfloat16, device=a_even.device)
    for tile_m, tile_n in kd.tile([m, n]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in kd.tile(k2):
            b_tile = b[tile_k, tile_n]
            b_lo_raw = (b_tile & 15).to(torch.int32)
            b_lo = torch.where(b_lo_raw >= 8, b_lo_raw - 16, b_lo_raw)
            b_hi = (b_tile >> 4).to(torch.int32)
            acc = kd.dot(a_even[tile_m, tile_k], b_lo.to(a_even.dtype), acc=acc)
            acc = kd.dot(a_odd[tile_m, tile_k], b_hi.to(a_odd.dtype), acc=acc)
        c[tile_m, tile_n] = acc.to(torch.bfloat16)
    return c


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m,k,n", [(37, 64, 50), (1, 2, 1)])
def test_int4_gemm(backend: str, m: int, k: int, n: int) -> None:
    a = torch.randn(m, k).bfloat16()
    w = torch.randint(-8, 8, (k, n))
    pairs = w.reshape(k // 2, 2, n).permute(1, 0, 2)
    packed = ((pairs[0] & 0xF) | (pairs[1] << 4)).to(torch.int8)  # Helion's packing
    with kd.backend(backend):
        c = int4_gemm(a[:, 0::2].contiguous(), a[:, 1::2].contiguous(), packed)
    torch.testing.assert_close(c, (a.float() @ w.float()).bfloat16(), atol=0.05, rtol=0.02)
