"""Autocast: the library ops follow torch's policy for their torch counterparts (dtypes and
values under `torch.autocast("cpu", dtype=torch.bfloat16)`, eagerly and compiled, forward and
backward), user kernels opt in with `@kd.tpu_kernel(autocast=...)`, and mixed dtypes outside
autocast are refused naming the argument, as torch refuses them.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import kernel_dsl as kd
from kernel_dsl.amp import MixedDTypeError
from kernel_dsl.kernels import flash_attention, layer_norm, matmul, rms_norm, softmax
from kernel_dsl.kernels import scaled_dot_product_attention as kd_sdpa

BF16 = torch.bfloat16
TOL = {"atol": 2e-2, "rtol": 2e-2}  # bf16 outputs: one rounding (8 bits of mantissa) and sums


def autocast() -> Any:
    return torch.autocast("cpu", dtype=BF16)


def leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*s, requires_grad=True) for s in shapes]


def same_as_torch(ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor],
                  inputs: list[torch.Tensor]) -> None:
    """Forward dtype and values, and gradients (dtype and values), both under autocast."""
    with autocast():
        got, want = ours(*inputs), theirs(*inputs)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL)
    g = torch.randn(got.shape)
    got_grads = torch.autograd.grad(got, inputs, g.to(got.dtype))
    want_grads = torch.autograd.grad(want, inputs, g.to(want.dtype))
    for a, e in zip(got_grads, want_grads):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, **TOL)


# -- the library ops, eagerly -------------------------------------------------------------------
def test_matmul_runs_in_the_autocast_dtype() -> None:
    same_as_torch(lambda x, w, b: matmul(x, w, bias=b), lambda x, w, b: F.linear(x, w.T, b),
                  leaves((16, 32), (32, 24), (24,)))


def test_matmul_mixed_dtypes_under_autocast() -> None:
    x, w = torch.randn(16, 32).to(BF16), torch.randn(32, 24)
    with autocast():
        got, want = matmul(x, w), torch.mm(x, w)
    assert got.dtype == want.dtype == BF16
    torch.testing.assert_close(got, want, **TOL)


def test_attention_runs_in_the_autocast_dtype() -> None:
    def theirs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    same_as_torch(lambda q, k, v: flash_attention(q, k, v, causal=True), theirs,
                  leaves((1, 2, 16, 32), (1, 2, 16, 32), (1, 2, 16, 32)))


def test_sdpa_drop_in_takes_mixed_dtypes_under_autocast() -> None:
    q, k, v = torch.randn(1, 2, 8, 16).to(BF16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    with autocast(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no FallbackWarning: our kernel ran
        got = kd_sdpa(q, k, v)
        want = F.scaled_dot_product_attention(q, k, v)
    assert got.dtype == want.dtype == BF16
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_norms_and_softmax_keep_torch_dtypes_on_cpu(dtype: torch.dtype) -> None:
    """CPU autocast has no rule for softmax, layer_norm or rms_norm: they run in the input's
    dtype (statistics in f32 inside the kernels), as torch's do."""
    x, w, b = leaves((8, 32), (32,), (32,))
    x = x.detach().to(dtype).requires_grad_()
    same_as_torch(lambda x, w: softmax(x, -1) * w, lambda x, w: torch.softmax(x, -1) * w, [x, w])
    same_as_torch(lambda x, w, b: layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (32,), w, b),
                  [x, w, b])
    same_as_torch(lambda x, w: rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (32,), w, 1e-6),
                  [x, w])


@pytest.mark.parametrize("ours, theirs", [
    ("matmul", "aten::mm"), ("flash_attention", "aten::scaled_dot_product_attention"),
    ("softmax", "aten::softmax.int"), ("layer_norm", "aten::layer_norm"),
    ("rms_norm", "aten::rms_norm")])
@pytest.mark.parametrize("key", ["AutocastCPU", "AutocastCUDA"])
def test_autocast_rules_where_torch_has_them(ours: str, theirs: str, key: str) -> None:
    """Each op has an autocast rule on exactly the devices where its torch counterpart has one
    (CUDA cannot run here; its rule is the same code as CPU's)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has(f"kernel_dsl::{ours}", key) == has(theirs, key)


# -- compiled -----------------------------------------------------------------------------------
def test_compiled_matmul_softmax_under_autocast() -> None:
    def block(ops: Any) -> Callable[..., torch.Tensor]:
        mm, sm = ops

        def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            with autocast():
                return sm(mm(x, w), -1)
        return f

    torch._dynamo.reset()
    ours = torch.compile(block((matmul, softmax)), fullgraph=True, backend="aot_eager")
    same_as_torch(ours, block((torch.mm, torch.softmax)), leaves((16, 32), (32, 24)))
    torch._dynamo.reset()


# -- mixed dtypes outside autocast ---------------------------------------------------------------
def test_mixed_dtypes_outside_autocast_name_the_argument() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    with pytest.raises(MixedDTypeError, match=r"matmul: argument `y` is torch.bfloat16 but `x` is "
                                              r"torch.float32") as e:
        matmul(x, w.to(BF16))
    assert isinstance(e.value, TypeError) and isinstance(e.value, kd.DTypeError)
    assert e.value.loc is not None and e.value.loc.file == __file__  # the caller's line
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(MixedDTypeError, match="flash_attention: argument `v` is torch.bfloat16"):
        flash_attention(q, q, q.to(BF16))


# -- user kernels --------------------------------------------------------------------------------
def _mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    out = torch.empty([m, y.shape[1]], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, y.shape[1]]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


def _scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in kd.tile(list(x.shape)):
        out[tm, tn] = x[tm, tn] * 2.0
    return out


mm_lower = kd.tpu_kernel(autocast="lower_precision_fp")(_mm)
mm_plain = kd.tpu_kernel(_mm)
scale_fp32 = kd.tpu_kernel(autocast="fp32")(_scale)


def test_user_kernel_opts_in() -> None:
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    with autocast():
        low = mm_lower(x, w)  # no tensor needs grad: the fast path must not skip the cast
        plain = mm_plain(x, w)
        up = scale_fp32(x.to(BF16))
        want = torch.mm(x, w)
    assert (low.dtype, plain.dtype, up.dtype) == (BF16, torch.float32, torch.float32)
    torch.testing.assert_close(low, want, **TOL)
    assert mm_lower(x, w).dtype == torch.float32  # outside autocast: as given


def test_user_kernel_autocast_compiled_with_autograd() -> None:
    def setup(ctx: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)  # already cast: the autocast rule runs above autograd

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return mm_lower(g, w.T), mm_lower(x.T, g)

    mm_lower.register_autograd(backward, setup_context=setup)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with autocast():
            return mm_lower(x, w)

    torch._dynamo.reset()
    same_as_torch(torch.compile(f, fullgraph=True, backend="aot_eager"),
                  lambda x, w: torch.mm(x, w), leaves((16, 32), (32, 8)))
    torch._dynamo.reset()


def test_unknown_policy() -> None:
    with pytest.raises(kd.ConfigError, match="lower_precision_fp"):
        kd.tpu_kernel(autocast="bf16")(_scale)
