"""torch.vmap over user kernels (the batch folds into a parallel grid dim: one launch; else one
launch per element, with one warning) and library ops (the vmapped dim folds into the ops'
batch dims: one launch), forward and backward."""
from __future__ import annotations

import warnings

import pytest
import torch
from dsl_kernels import add_where

import kernel_dsl as kd
from kernel_dsl import kernels as lib


def _ref_add_where(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a > b, a - b, 0.5 * b)


def test_vmap_over_a_user_kernel_loops_with_one_warning() -> None:
    x, y = torch.randn(8, 3, 128), torch.randn(8, 128)  # x batched on dim 1, y not batched
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = torch.vmap(add_where, in_dims=(1, None))(x, y)
        torch.vmap(add_where, in_dims=(1, None))(x, y)
    ours = [w for w in seen if "once per batch element" in str(w.message)]
    assert len(ours) == 1 and "add_where" in str(ours[0].message)
    torch.testing.assert_close(out, _ref_add_where(x.movedim(1, 0), y))


@kd.tpu_kernel
def scaled_rows(x: torch.Tensor, w: torch.Tensor):
    m, n = x.shape
    out = torch.empty_like(x)
    total = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        row = x[tm, :] * w[tm, :]
        out[tm, :] = row
        total[tm] = row.sum(-1)
    return out, total


@kd.tpu_kernel
def over_rows(x: torch.Tensor):
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = x[tm, :] / x.shape[0]  # reads the row count: stacking would change it
    return out


@pytest.mark.parametrize("in_dims", [(0, 0), (2, 1)])
def test_vmap_folds_the_batch_into_a_parallel_grid_dim(in_dims: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, 33, generator=g).movedim(0, in_dims[0])
    w = torch.randn(4, 7, 33, generator=g).movedim(0, in_dims[1])
    before = scaled_rows._ops.op
    calls: list[int] = []
    real_rule = scaled_rows.run_cpu

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_rule(*a, **k)

    scaled_rows.run_cpu = counted  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no per-element warning
            out, total = torch.vmap(scaled_rows, in_dims=in_dims)(x, w)
    finally:
        del scaled_rows.run_cpu
    assert calls == [1] and scaled_rows._ops.op is before  # one launch for the whole batch
    xb, wb = x.movedim(in_dims[0], 0), w.movedim(in_dims[1], 0)
    torch.testing.assert_close(out, xb * wb)
    torch.testing.assert_close(total, (xb * wb).sum(-1), atol=1e-5, rtol=1e-5)


def test_vmap_loops_when_the_host_code_reads_the_folded_size() -> None:
    x = torch.randn(3, 5, 16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = torch.vmap(over_rows)(x)
    assert any("once per batch element" in str(w.message) for w in seen)
    torch.testing.assert_close(out, x / 5)


@kd.tpu_kernel
def plus_position(x: torch.Tensor):
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm] = x[tm] + tm.index.to(torch.float32)  # stacked rows would move
    return out


@kd.tpu_kernel
def outer(x: torch.Tensor):
    n = x.shape[0]
    out = torch.zeros([n, n], dtype=torch.float32, device=x.device)
    for tm in kd.tile(n):
        v = x[tm]
        out[tm, tm] = v[:, None] * v[None, :]  # both axes walk the tile: batches would meet
    return out


@pytest.mark.parametrize("kernel", [plus_position, outer])
def test_vmap_loops_where_stacking_would_change_the_answer(kernel: kd.Kernel) -> None:
    x = torch.arange(1.0, 16.0).reshape(3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.vmap(kernel)(x)
    torch.testing.assert_close(out, torch.stack([kernel(x[i]) for i in range(3)]))


def test_every_library_op_has_its_own_batching_rule() -> None:
    # without one, vmap falls back to torch's slow per-element loop (with a C++ warning)
    for name in ("matmul", "matmul_backward", "flash_attention", "flash_attention_backward",
                 "softmax", "softmax_backward", "rms_norm", "rms_norm_backward", "layer_norm",
                 "layer_norm_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"kernel_dsl::{name}",
                                                              "FuncTorchBatched"), name


@pytest.mark.parametrize("in_dim", [0, 1])
def test_vmap_over_library_ops_matches_torch(in_dim: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 64, generator=g).movedim(0, in_dim)
    w = torch.randn(64, generator=g)
    torch.testing.assert_close(torch.vmap(lambda t: lib.softmax(t, -1), in_dims=in_dim)(x),
                               torch.softmax(x.movedim(in_dim, 0), -1))
    torch.testing.assert_close(torch.vmap(lambda t: lib.rms_norm(t, w), in_dims=in_dim)(x),
                               torch.nn.functional.rms_norm(x.movedim(in_dim, 0), (64,), w, 1e-6),
                               atol=1e-4, rtol=1e-4)
    y = torch.randn(64, 48, generator=g)
    torch.testing.assert_close(torch.vmap(lambda t: lib.matmul(t, y), in_dims=in_dim)(x),
                               x.movedim(in_dim, 0) @ y, atol=1e-4, rtol=1e-4)


def test_vmap_over_attention_and_its_grad() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, 2, 16, 32, generator=g, requires_grad=True) for _ in range(3))

    def f(q, k, v):  # type: ignore[no-untyped-def]
        return lib.flash_attention(q, k, v, causal=True)

    out = torch.vmap(f)(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    gq = torch.autograd.grad(out.sum(), q)[0]
    rq = torch.autograd.grad(ref.sum(), q)[0]
    torch.testing.assert_close(gq, rq, atol=1e-3, rtol=1e-3)


def test_vmap_with_a_batched_norm_weight_loops_and_stays_correct() -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 4, 32, generator=g), torch.randn(3, 32, generator=g)
    out = torch.vmap(lambda t, u: lib.rms_norm(t, u))(x, w)
    ref = torch.stack([torch.nn.functional.rms_norm(x[i], (32,), w[i], 1e-6) for i in range(3)])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_vmap_norm_grads_match_torch() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 32, generator=g, requires_grad=True)
    w = torch.randn(32, generator=g, requires_grad=True)
    b = torch.randn(32, generator=g, requires_grad=True)
    out = torch.vmap(lambda t: lib.layer_norm(t, w, b) + lib.rms_norm(t, w))(x)
    ref = (torch.nn.functional.layer_norm(x, (32,), w, b, 1e-5)
           + torch.nn.functional.rms_norm(x, (32,), w, 1e-6))
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    got = torch.autograd.grad(out.square().sum(), (x, w, b))
    want = torch.autograd.grad(ref.square().sum(), (x, w, b))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, atol=1e-3, rtol=1e-3)
