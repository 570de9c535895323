"""`out[t] = v` casts v to out's dtype, as torch's setitem does, on every backend; and host code
may choose output dtypes with torch.promote_types / torch.result_type / torch.can_cast."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd

BACKENDS = ("pallas", "nki", "triton")
SHAPES = [(37, 1), (3, 130)]  # ragged under every backend's blocks
E = torch.empty


@kd.tpu_kernel
def store_as(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """x * 2 stored into an output of `like`'s dtype (kernels take no dtype arguments)."""
    out = torch.empty(x.shape, dtype=like.dtype, device=x.device)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = x[tm, tn] * 2  # no .to(): the store casts
    return out


@kd.tpu_kernel
def mul_promoted(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Computes in f32, stores in the dtype torch would give x * y."""
    assert torch.can_cast(x.dtype, torch.float32) and x.is_floating_point()
    assert not torch.is_complex(y) and torch.finfo(y.dtype).bits <= 32
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = x[tm, tn].float() * y[tm, tn].float()
    return out


@kd.tpu_kernel
def scale_by_half(x: torch.Tensor) -> torch.Tensor:
    """The dtype of x * 2.5 (f32 for an int x, x's own for a float x), from torch.result_type."""
    out = torch.empty(x.shape, dtype=torch.result_type(x, 2.5), device=x.device)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = x[tm, tn] * 2.5
    return out


def like(dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(1, dtype=dtype)


def non_integers(shape: tuple[int, int]) -> torch.Tensor:
    """f32 values whose doubles truncate and floor differently (negative non-integers), inside
    int32 range, plus exact zeros (for bool outputs)."""
    x = torch.randn(shape) * 1000
    special = torch.tensor([-1.25, -0.75, -0.25, 0.0, 0.25, 1.25, -1.0e9, 1.0e9, -0.0])
    x.view(-1)[:special.numel()] = special[:x.numel()]
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_f32_tile_stored_into_float_outputs(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(shape) * 100
    with kd.backend(backend):
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            got = store_as(x, like(dt))
            assert got.dtype == dt
            torch.testing.assert_close(got, (x * 2).to(dt), rtol=0, atol=0)  # round to nearest even


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_int_and_float_stores_convert_as_torch(backend: str, shape: tuple[int, int]) -> None:
    xi = torch.randint(-(1 << 22), 1 << 22, shape, dtype=torch.int32)  # doubles exact in f32
    xf = non_integers(shape)
    with kd.backend(backend):
        got_f = store_as(xi, like(torch.float32))
        got_i = store_as(xf, like(torch.int32))
        got_b = store_as(xf, like(torch.bool))
    torch.testing.assert_close(got_f, (xi * 2).float(), rtol=0, atol=0)
    ref_i = (xf * 2).to(torch.int32)  # toward zero: -2.5 -> -2, not floor's -3
    assert not torch.equal(ref_i, torch.floor(xf * 2).to(torch.int32))
    torch.testing.assert_close(got_i, ref_i, rtol=0, atol=0)
    assert torch.equal(got_b, (xf * 2).to(torch.bool))  # nonzero -> True


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_code_picks_the_output_dtype_with_promotion_helpers(backend: str) -> None:
    x = torch.randn(37, 1, dtype=torch.bfloat16)
    y = torch.randn(37, 1, dtype=torch.float16)
    xi = torch.randint(-100, 100, (37, 1), dtype=torch.int32)
    with kd.backend(backend):
        got = mul_promoted(x, y)
        half = scale_by_half(xi)
        half_bf = scale_by_half(x)
    ref = (x.float() * y.float()).to(torch.promote_types(x.dtype, y.dtype))
    assert got.dtype == torch.float32 and half.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    torch.testing.assert_close(half, xi * 2.5, rtol=0, atol=0)
    torch.testing.assert_close(half_bf, x * 2.5)
    assert half_bf.dtype == torch.bfloat16


def test_ir_casts_before_the_store() -> None:
    ops = store_as.ir(E(37, 1), like(torch.bfloat16)).body.ops
    assert [op.kind for op in ops[-2:]] == ["cast", "store"]
    assert ops[-2].attrs["dtype"] == "bf16" and ops[-1].operands == ops[-2].results
    # a store of the output's own dtype needs no cast
    assert "cast" not in [op.kind for op in store_as.ir(E(37, 1), like(torch.float32)).body.ops]


def test_store_of_wrong_shape_still_raises() -> None:
    @kd.tpu_kernel
    def bad(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
        for tm, tn in kd.tile(x.shape):
            out[tm, tn] = x[tm, :]  # a [tm, n] f32 tile into a [tm, tn] bf16 block
        return out

    with pytest.raises(kd.ShapeError, match="storing a"):
        bad.ir(torch.randn(16, 300))


def test_pallas_source_renders_the_cast() -> None:
    src = store_as.source(E(37, 1), like(torch.bfloat16), backend="pallas")
    assert ".astype(jnp.bfloat16)" in src
    src = store_as.source(E(37, 1), like(torch.int32), backend="pallas")
    assert ".astype(jnp.int32)" in src


def test_casting_store_compiles_for_a_real_tpu() -> None:
    r = store_as.check(E(256, 512), like(torch.bfloat16), targets=["tpu-v5e"], measure_vmem=False)
    assert r.ok, r.table()
    assert [e.target for e in r.entries] == ["tpu-v5e"]
    assert all(e.stage == "compile" for e in r.entries)
