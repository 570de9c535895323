"""Composite ops over a dim of a tile: softmax, log_softmax, logsumexp (f32 accumulation, special
values as torch gives them), logaddexp, squeeze, and addmm/baddbmm with beta and alpha, on every backend."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import kernel_dsl as kd
from kernel_dsl.errors import KernelError

BACKENDS = ("pallas", "triton", "nki")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf/NaN rows, on purpose


def _rows(fn: Callable[[Any], Any], cols: int | None = None) -> Any:
    """A kernel applying `fn` to whole rows; `cols`: the columns as a tile of that block size.
    Where the backend keeps the block wider than the row (Triton's power-of-two blocks; Pallas
    clamps it to the row), the pad lanes must drop out of every sum and max."""
    @kd.kernel
    def k(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm, tn in kd.tile(x.shape, block_size=[8, cols or x.shape[1]]):
            out[tm, tn] = fn(x[tm, tn])
        return out
    return k


ROW_OPS: dict[str, Callable[[Any], Any]] = {
    "softmax": lambda r: torch.softmax(r, dim=-1),
    "F.softmax": lambda r: F.softmax(r, dim=1),
    "log_softmax": lambda r: r.log_softmax(-1),
    "F.log_softmax_f32": lambda r: F.log_softmax(r, dim=-1, dtype=torch.float32).to(r.dtype),
    "logsumexp": lambda r: r - torch.logsumexp(r, dim=-1, keepdim=True),
    "logsumexp_squeezed": lambda r: r * 0 + r.logsumexp(1)[:, None],
    "logaddexp": lambda r: torch.logaddexp(r, r * 0.5 - 1.0) + r.logaddexp(r),
    # (NKI lays out 3-D values only with a unit leading dim)
    "squeeze": lambda r: torch.squeeze(r[None] * 2, 0) + r.sum(-1, keepdim=True).squeeze()[:, None],
}
KERNELS = {name: _rows(fn) for name, fn in ROW_OPS.items()}
RAGGED = {name: _rows(fn, cols=256) for name, fn in ROW_OPS.items()}


def _input(dtype: torch.dtype, n: int = 130) -> torch.Tensor:
    x = torch.randn(37, n) * 3
    x[3] = -float("inf")  # softmax: NaN (as torch); logsumexp: -inf
    x[5, :4] = float("inf")
    x[6, 1] = -float("inf")
    x[7, 2] = 80.0  # exp overflows f32 without the max subtracted
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ROW_OPS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_row_ops_match_torch(backend: str, name: str, dtype: torch.dtype) -> None:
    x = _input(dtype)
    with kd.backend(backend):
        got = KERNELS[name](x)
    ref = ROW_OPS[name](x)  # torch on the same dtype: its own f32 accumulation and roundings
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 4e-2, "rtol": 2e-2}
    torch.testing.assert_close(got, ref, equal_nan=True, **tol)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "squeeze"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_lanes_of_a_ragged_tile_drop_out(backend: str, name: str) -> None:
    x = _input(torch.float32)
    with kd.backend(backend):
        got = RAGGED[name](x)
    torch.testing.assert_close(got, ROW_OPS[name](x), equal_nan=True, atol=1e-5, rtol=1e-5)


@kd.kernel
def baddbmm_k(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(acc)
    for tb, tm, tn in kd.tile(acc.shape, block_size=[1, None, None]):
        out[tb, tm, tn] = torch.baddbmm(acc[tb, tm, tn], a[tb, tm, :], b[tb, :, tn],
                                        beta=0.5, alpha=2.0)
    return out


@kd.kernel
def addmm_k(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(acc)
    for tm, tn in kd.tile(acc.shape):
        out[tm, tn] = torch.addmm(acc[tm, tn], a[tm, :], b[:, tn], beta=0) + acc[tm, tn].addmm(
            a[tm, :], b[:, tn])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_baddbmm_and_addmm_with_beta_and_alpha(backend: str) -> None:
    acc, a, b = torch.randn(3, 19, 24), torch.randn(3, 19, 16), torch.randn(3, 16, 24)
    nan_acc = acc[0].clone()
    nan_acc[0, 0] = float("nan")  # beta=0 ignores acc, as torch does
    with kd.backend(backend):
        got3 = baddbmm_k(acc, a, b)
        got2 = addmm_k(nan_acc, a[0], b[0])
    torch.testing.assert_close(got3, torch.baddbmm(acc, a, b, beta=0.5, alpha=2.0),
                               atol=1e-4, rtol=1e-4)
    ref2 = torch.addmm(nan_acc, a[0], b[0], beta=0) + torch.addmm(nan_acc, a[0], b[0])
    torch.testing.assert_close(got2, ref2, equal_nan=True, atol=1e-4, rtol=1e-4)


def test_squeezing_a_tile_dim_keeps_it_and_softmax_of_integers_is_a_clear_error() -> None:
    @kd.kernel
    def sq(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm, tn in kd.tile(x.shape):
            out[tm, tn] = x[tm, tn].squeeze(0)  # as torch on a dim not known to be 1 (Helion)
        return out

    @kd.kernel
    def int_softmax(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        for tm in kd.tile(x.shape[0]):
            out[tm, :] = torch.softmax(x[tm, :], dim=-1)
        return out

    x = torch.randn(8, 8)
    torch.testing.assert_close(sq(x), x)
    with pytest.raises(KernelError, match="softmax of a i32 tile"):  # torch rejects it too
        int_softmax(torch.arange(12, dtype=torch.int32).reshape(3, 4))


@kd.kernel
def row_prod(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.shape[0], 1], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile(x.shape, block_size=[8, 256]):  # ragged past 45: pads hold 1
        out[tm, :] = torch.prod(x[tm, tn], dim=1, keepdim=True)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_prod_matches_torch(backend: str, dtype: torch.dtype) -> None:
    if dtype.is_floating_point:
        x = (1 + 0.05 * torch.randn(37, 45)).to(dtype)
        x[1, 3], x[2, 0], x[4, 7] = float("nan"), float("inf"), 0.0
        # in f32, rounded once (torch's bf16 CPU product rounds every step: ~4% off here)
        ref = torch.prod(x.float(), 1, keepdim=True).to(dtype)
    else:  # small factors: NKI's engines multiply int32 in f32, exact below 2**24
        x = torch.randint(-2, 3, (37, 45), dtype=dtype)
        x[x == 0] = 1
        x[:, 20:] = 1
        ref = torch.prod(x, 1, keepdim=True).to(dtype)
    with kd.backend(backend):
        got = row_prod(x)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=0, rtol=2e-2)
    torch.testing.assert_close(got, ref, equal_nan=True, **tol)


@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_int32_prod_wraps_as_int32_arithmetic(backend: str) -> None:
    x = torch.full((9, 45), 3, dtype=torch.int32)  # 3**45 wraps; torch's int64 result, cut
    with kd.backend(backend):
        got = row_prod(x)
    assert torch.equal(got, torch.prod(x.long(), 1, keepdim=True).to(torch.int32))


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_prod() -> None:
    """Pallas TPU has no reduce_prod: the generated halving tree must compile for real chips."""
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        report = row_prod.check(torch.ones(37, 45, dtype=dtype), targets=["tpu-v5e"],
                                measure_vmem=False)
        assert [e.status for e in report.entries] == ["ok"], report


@kd.kernel
def two_loop_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    bn = kd.register_block_size(n)  # Helion's name: one knob for both column loops
    for tm in kd.tile(m):
        total = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n, block_size=bn):
            total = total + x[tm, tn].sum(dim=1)
        for tn in kd.tile(n, block_size=bn):
            out[tm, tn] = x[tm, tn] / total[:, None]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_register_block_size_is_one_knob_shared_by_loops(backend: str) -> None:
    x = torch.rand(37, 300) + 0.5
    ir = two_loop_rows.ir(x)
    loops = [op for op in ir.body.walk() if op.kind == "loop"]
    assert len(loops) == 2 and loops[0].attrs["tile"].block is loops[1].attrs["tile"].block
    with kd.backend(backend):
        torch.testing.assert_close(two_loop_rows(x), x / x.sum(1, keepdim=True), atol=1e-5,
                                   rtol=1e-5)
