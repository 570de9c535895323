"""Library flash attention: forward and backward against PyTorch, GQA/MQA, causal alignments,
edge shapes, low precision, torch op machinery (opcheck, torch.compile), the SDPA drop-in and
the JAX entry.

Gradients: the DSL rejects float64 (TPUs have none), so `torch.autograd.gradcheck` cannot run
the kernels; gradients are compared with PyTorch's float64 autograd of the same math instead, at
the tolerances of `close` below (float32: 2e-5 relative to the largest reference value + 2e-5;
bfloat16/float16: at most 2x PyTorch's own error in that dtype + 2e-3).

Most cases run on the NKI and Triton CPU interpreters (fast); the Pallas interpreter (the
default backend) runs a few in the fast tier and all of them in the slow tier.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from library_tolerance import assert_close_to_exact

import kernel_dsl as kd
from kernel_dsl.kernels import FallbackWarning, flash_attention, scaled_dot_product_attention


# -- reference -------------------------------------------------------------------------------------
def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: Any = False,
              scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) by explicit softmax in q's dtype: GQA by repeating k/v heads, causal
    top-left (True) or bottom-right, rows without a visible key -> zeros (lse -inf)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        off = skv - sq if causal == "bottom_right" else 0
        mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=off)
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s.float() if s.dtype != torch.float64 else s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ v, lse


def inputs(b: int, h: int, hkv: int, sq: int, skv: int, d: int, dtype: torch.dtype = torch.float32,
           dv: int | None = None, scale: float = 1.0) -> list[torch.Tensor]:
    q = torch.randn(b, h, sq, d) * scale
    k = torch.randn(b, hkv, skv, d) * scale
    v = torch.randn(b, hkv, skv, dv or d)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


close = functools.partial(assert_close_to_exact, f32_rel=2e-5, lowp_rel=2e-3, finite=True)


def check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: Any = False,
          scale: float | None = None, grads: bool = True) -> None:
    out, lse = flash_attention(q, k, v, causal=causal, sm_scale=scale, return_lse=True)
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = reference(q64, k64, v64, causal, scale)
    lowp = None
    if q.dtype != torch.float32:
        ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
        lowp, _ = reference(ql, kl, vl, causal, scale)
    close(out, ref, None if lowp is None else lowp.detach())
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=2e-3 if lowp is not None
                               else 2e-5, rtol=1e-3 if lowp is not None else 2e-5)
    if not grads:
        return
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q64, k64, v64), g.double())
    lows = torch.autograd.grad(lowp, (ql, kl, vl), g) if lowp is not None else (None,) * 3
    for a, e, lp in zip(got, want, lows):
        close(a, e, lp)


# -- cases -----------------------------------------------------------------------------------------
# (b, h, hkv, sq, skv, d, causal): edge shapes, GQA/MQA, both causal alignments, head dims
CASES = {
    "one_by_one": (1, 1, 1, 1, 1, 64, True),
    "decode_mqa_bottom_right": (2, 4, 1, 1, 37, 64, "bottom_right"),
    "decode_top_left": (1, 2, 2, 1, 20, 64, True),
    "gqa_ragged_causal": (1, 4, 2, 19, 33, 80, True),
    "sq_gt_skv_bottom_right_no_key_rows": (1, 2, 1, 40, 13, 64, "bottom_right"),
    "sq_gt_skv_top_left": (1, 2, 2, 40, 13, 96, True),
    "non_causal_ragged": (2, 2, 2, 37, 50, 64, False),
    "head_dim_128": (1, 2, 2, 24, 30, 128, True),
    "head_dim_256": (1, 1, 1, 17, 20, 256, False),
    "head_dim_96_gqa": (1, 6, 2, 9, 16, 96, "bottom_right"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["nki", "triton"])
def test_matches_pytorch_fast_interpreters(case: str, backend: str) -> None:
    b, h, hkv, sq, skv, d, causal = CASES[case]
    with kd.backend(backend):
        check(*inputs(b, h, hkv, sq, skv, d), causal=causal)


def test_matches_pytorch_pallas() -> None:
    """The default backend: Pallas interpret mode (GQA, causal, ragged, non-power-of-two D)."""
    check(*inputs(1, 4, 2, 19, 33, 80), causal=True)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_matches_pytorch_pallas_all_cases(case: str) -> None:
    b, h, hkv, sq, skv, d, causal = CASES[case]
    check(*inputs(b, h, hkv, sq, skv, d), causal=causal)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision(dtype: torch.dtype) -> None:
    with kd.backend("nki"):
        check(*inputs(1, 4, 2, 30, 45, 64, dtype), causal=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_low_precision_other_backends(dtype: torch.dtype, backend: str) -> None:
    with kd.backend(backend):
        check(*inputs(2, 4, 2, 70, 130, 128, dtype), causal="bottom_right")


def test_value_head_dim_and_scale() -> None:
    with kd.backend("nki"):
        check(*inputs(1, 2, 1, 10, 12, 64, dv=32), causal=True, scale=0.3)


def test_rows_without_keys_are_zero_and_never_nan() -> None:
    """Bottom-right causal with Sq > Skv: the first Sq - Skv rows see no key."""
    q, k, v = inputs(1, 2, 2, 20, 5, 64)
    with kd.backend("nki"):
        out, lse = flash_attention(q, k, v, causal="bottom_right", return_lse=True)
        assert (out[:, :, :15] == 0).all() and torch.isfinite(out).all()
        assert (lse[:, :, :15] == float("-inf")).all() and torch.isfinite(lse[:, :, 15:]).all()
        dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert (dq[:, :, :15] == 0).all()


def test_large_logits_never_overflow() -> None:
    """Logits of order 1e4: exp() overflows without the max shift; the output stays exact and
    the gradients finite (they are ~0: the softmax is one-hot, so f32 cancellation in
    dP - delta leaves noise of ~1e-5 against values of ~40; checked at 1e-3)."""
    q, k, v = inputs(1, 2, 2, 16, 24, 64, scale=40.0)
    with kd.backend("nki"):
        check(q, k, v, causal=True, grads=False)
        got = torch.autograd.grad(flash_attention(q, k, v, causal=True).sum(), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(reference(q64, k64, v64, True)[0].sum(), (q64, k64, v64))
    for a, e in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.double(), e, atol=1e-3, rtol=1e-4)


def test_validation_errors() -> None:
    q, k, v = (t.detach() for t in inputs(1, 4, 2, 8, 8, 64))
    with pytest.raises(ValueError, match="multiple"):
        flash_attention(q, k[:, :1].expand(1, 3, 8, 64), v[:, :1].expand(1, 3, 8, 64))
    with pytest.raises(TypeError, match="float64"):
        flash_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="layout"):
        flash_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="causal"):
        flash_attention(q, k, v, causal="diagonal")


def test_non_contiguous_inputs() -> None:
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 12, 12, 64))
    qt = q.transpose(2, 3).contiguous().transpose(2, 3)  # same values, permuted strides
    with kd.backend("nki"):
        torch.testing.assert_close(flash_attention(qt, k, v), flash_attention(q, k, v))


# -- torch op machinery ----------------------------------------------------------------------------
def test_ops_are_registered() -> None:
    assert hasattr(torch.ops.kernel_dsl, "flash_attention")
    assert hasattr(torch.ops.kernel_dsl, "flash_attention_backward")
    assert hasattr(torch.ops.kernel_dsl, "flash_attention_fwd")  # the DSL kernel's own op


def test_opcheck_forward_and_backward() -> None:
    q, k, v = (t.detach() for t in inputs(1, 4, 2, 9, 11, 64))
    with kd.backend("nki"):
        for args in [(q, k, v, True, 0.125, 0), (q.requires_grad_(), k, v, False, 0.2, 0)]:
            res = torch.library.opcheck(torch.ops.kernel_dsl.flash_attention, args)
            assert all(r == "SUCCESS" for r in res.values()), res
        out, lse = torch.ops.kernel_dsl.flash_attention(q.detach(), k, v, True, 0.125, 0)
        res = torch.library.opcheck(torch.ops.kernel_dsl.flash_attention_backward,
                                    (torch.randn_like(out), q.detach(), k, v, out, lse, True, 0.125, 0))
        assert all(r == "SUCCESS" for r in res.values()), res


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (flash_attention(q, k, v, causal=True) * 2.0).sum()

    compiled = torch.compile(f, fullgraph=True, backend=counter)
    with kd.backend("nki"):
        for shape in [(1, 4, 2, 10, 14, 64), (2, 4, 2, 7, 9, 64)]:
            q, k, v = inputs(*shape)
            got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
            want = torch.autograd.grad(f(q, k, v), (q, k, v))
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b)
    assert counter.frame_count <= 2
    torch._dynamo.reset()


@pytest.mark.slow
def test_torch_compile_inductor() -> None:
    torch._dynamo.reset()
    q, k, v = inputs(1, 2, 1, 10, 12, 64)

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash_attention(q, k, v, causal=True).sum()

    got = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    want = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch._dynamo.reset()


# -- SDPA drop-in ----------------------------------------------------------------------------------
def test_sdpa_drop_in_matches_torch() -> None:
    q, k, v = inputs(2, 4, 2, 9, 13, 64)
    with kd.backend("nki"), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=0.2)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=0.2)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
        x = torch.randn(3, 5, 32)  # rank 3: [N, L, E]
        torch.testing.assert_close(scaled_dot_product_attention(x, x, x),
                                   F.scaled_dot_product_attention(x, x, x), atol=2e-5, rtol=2e-5)
        x5 = torch.randn(2, 3, 2, 6, 32)  # rank 5: leading dims fold into the batch
        torch.testing.assert_close(scaled_dot_product_attention(x5, x5, x5, is_causal=True),
                                   F.scaled_dot_product_attention(x5, x5, x5, is_causal=True),
                                   atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kwargs,reason", [
    ({"attn_mask": torch.ones(9, 9, dtype=torch.bool)}, "attn_mask"),
    ({"dropout_p": 0.1}, "dropout"),
])
def test_sdpa_falls_back_with_a_warning(kwargs: dict[str, Any], reason: str) -> None:
    q = torch.randn(1, 2, 9, 16)
    with pytest.warns(FallbackWarning, match=reason):
        out = scaled_dot_product_attention(q, q, q, **kwargs)
    assert out.shape == q.shape
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        with pytest.raises(FallbackWarning):
            scaled_dot_product_attention(q, q, q, **kwargs)


def test_sdpa_gqa_needs_enable_gqa_like_torch() -> None:
    q, k = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16)
    with pytest.warns(FallbackWarning, match="enable_gqa"), pytest.raises(RuntimeError):
        scaled_dot_product_attention(q, k, k)  # torch itself refuses it too


# -- JAX -------------------------------------------------------------------------------------------
def test_jax_entry_forward_and_grad() -> None:
    import jax
    import numpy as np

    q, k, v = (t.detach() for t in inputs(1, 4, 2, 11, 14, 64))
    jq, jk, jv = (jax.numpy.asarray(t.numpy()) for t in (q, k, v))
    out = flash_attention.jax(jq, jk, jv, causal=True)
    ref, _ = reference(q.double(), k.double(), v.double(), True)
    np.testing.assert_allclose(np.asarray(out), ref.numpy(), atol=2e-5, rtol=2e-5)

    def loss(q: Any, k: Any, v: Any) -> Any:
        return (flash_attention.jax(q, k, v, causal=True) ** 2).sum()

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(jq, jk, jv)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad((reference(q64, k64, v64, True)[0] ** 2).sum(), (q64, k64, v64))
    for g, w in zip(grads, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), atol=1e-4 * (1 + math.fabs(w.abs().max())),
                                   rtol=1e-4)
