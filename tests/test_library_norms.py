"""Library softmax, RMS norm and layer norm: values and gradients against PyTorch, any rank and
dim, optional weight/bias, streamed long rows, op machinery and the JAX entries.

Gradients are compared with PyTorch's float64 autograd (the DSL has no float64, so gradcheck
cannot run the kernels): float32 within 1e-5 relative to the largest reference value (+1e-5);
bfloat16/float16 within 2x PyTorch's own error in that dtype (+5e-3 relative).
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from library_tolerance import assert_close_to_exact

import kernel_dsl as kd
from kernel_dsl.kernels import layer_norm, rms_norm, softmax

SoftmaxModule = importlib.import_module("kernel_dsl.kernels.softmax")  # `softmax` is the function


close = functools.partial(assert_close_to_exact, f32_rel=1e-5, lowp_rel=5e-3)


def check(ours: Callable[..., torch.Tensor], ref: Callable[..., torch.Tensor],
          tensors: list[torch.Tensor | None]) -> None:
    """Values and gradients of every tensor argument against float64 PyTorch (and, in low
    precision, against PyTorch's own error in that dtype)."""
    ins = [t.requires_grad_() if t is not None else None for t in tensors]
    live = [t for t in ins if t is not None]
    out = ours(*ins)
    assert out.dtype == live[0].dtype and out.shape == live[0].shape
    e = [t.detach().double().requires_grad_() if t is not None else None for t in ins]
    exact = ref(*e)
    lowp, lp = None, None
    if live[0].dtype != torch.float32:
        lp = [t.detach().clone().requires_grad_() if t is not None else None for t in ins]
        lowp = ref(*lp)
    close(out, exact, None if lowp is None else lowp.detach())
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, live, g)
    want = torch.autograd.grad(exact, [t for t in e if t is not None], g.double())
    lows = (torch.autograd.grad(lowp, [t for t in lp if t is not None], g) if lowp is not None
            else [None] * len(live))
    for a, w, lo, t in zip(got, want, lows, live):
        assert a.dtype == t.dtype
        close(a, w, lo)


def rand(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0, shift: float = 0.0
         ) -> torch.Tensor:
    return (torch.randn(shape) * scale + shift).to(dtype)


# -- softmax ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["nki", "triton"])
@pytest.mark.parametrize("shape,dim", [((1,), 0), ((7, 33), -1), ((3, 5, 17), 1), ((2, 3, 4), 0)])
def test_softmax(backend: str, shape: tuple[int, ...], dim: int) -> None:
    with kd.backend(backend):
        check(lambda x: softmax(x, dim), lambda x: torch.softmax(x, dim), [rand(*shape, scale=4)])


def test_softmax_pallas_and_large_logits() -> None:
    x = rand(9, 130, scale=1e4)  # exp() overflows without the max shift
    check(lambda x: softmax(x, -1), lambda x: torch.softmax(x, -1), [x])


def test_softmax_streamed_long_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows longer than RESIDENT_MAX take the two-pass streaming kernels."""
    monkeypatch.setattr(SoftmaxModule, "RESIDENT_MAX", 64)
    with kd.backend("nki"):
        check(lambda x: softmax(x, -1), lambda x: torch.softmax(x, -1), [rand(5, 300, scale=30)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_low_precision(dtype: torch.dtype) -> None:
    with kd.backend("nki"):
        check(lambda x: softmax(x, -1), lambda x: torch.softmax(x, -1), [rand(9, 200, dtype=dtype, scale=5)])


# -- RMS norm --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["nki", "triton"])
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm(backend: str, weight: bool) -> None:
    x, w = rand(3, 7, 33, scale=2), rand(33) if weight else None
    with kd.backend(backend):
        check(lambda x, w: rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (33,), w, 1e-6), [x, w])


def test_rms_norm_pallas_default_eps_and_2d_weight() -> None:
    x, w = rand(4, 5, 6, scale=3), rand(5, 6)
    check(lambda x, w: rms_norm(x, w), lambda x, w: F.rms_norm(
        x, (5, 6), w, torch.finfo(torch.float32).eps), [x, w])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_low_precision(dtype: torch.dtype) -> None:
    with kd.backend("nki"):
        check(lambda x, w: rms_norm(x, w, 1e-5), lambda x, w: F.rms_norm(x, (200,), w, 1e-5),
              [rand(17, 200, dtype=dtype), rand(200, dtype=dtype)])


# -- layer norm ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["nki", "triton"])
@pytest.mark.parametrize("params", ["wb", "w", "b", ""])
def test_layer_norm(backend: str, params: str) -> None:
    x = rand(3, 7, 33, scale=2, shift=3)
    w = rand(33) if "w" in params else None
    b = rand(33) if "b" in params else None
    with kd.backend(backend):
        check(lambda x, w, b: layer_norm(x, w, b, 1e-5),
              lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5), [x, w, b])


def test_layer_norm_pallas() -> None:
    check(lambda x, w, b: layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (130,), w, b),
          [rand(37, 130, scale=3, shift=-2), rand(130), rand(130)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_low_precision(dtype: torch.dtype) -> None:
    with kd.backend("nki"):
        check(lambda x, w, b: layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (200,), w, b),
              [rand(17, 200, dtype=dtype, shift=1), rand(200, dtype=dtype), rand(200, dtype=dtype)])


@pytest.mark.slow
@pytest.mark.parametrize("op", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pallas_bigger_rows(op: str, dtype: torch.dtype) -> None:
    x, w, b = rand(70, 1000, dtype=dtype, scale=3, shift=1), rand(1000, dtype=dtype), rand(1000, dtype=dtype)
    if op == "softmax":
        check(lambda x: softmax(x, -1), lambda x: torch.softmax(x, -1), [x])
    elif op == "rms_norm":
        check(lambda x, w: rms_norm(x, w, 1e-5), lambda x, w: F.rms_norm(x, (1000,), w, 1e-5), [x, w])
    else:
        check(lambda x, w, b: layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (1000,), w, b),
              [x, w, b])


def test_validation_errors() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="trailing"):
        rms_norm(x, torch.randn(7))
    with pytest.raises(ValueError, match="differ"):
        layer_norm(x, torch.randn(8), torch.randn(4, 8))
    with pytest.raises(IndexError):
        softmax(x, 2)
    with pytest.raises(TypeError, match="float64"):
        softmax(x.double())


# -- torch op machinery ----------------------------------------------------------------------------
@pytest.mark.parametrize("op,args", [
    ("softmax", lambda: (torch.randn(3, 5, 7, requires_grad=True), 1)),
    ("rms_norm", lambda: (torch.randn(4, 9, requires_grad=True), torch.randn(9), 1e-6)),
    ("layer_norm", lambda: (torch.randn(4, 9, requires_grad=True), torch.randn(9), None, 1e-5)),
])
def test_opcheck(op: str, args: Callable[[], tuple[Any, ...]]) -> None:
    with kd.backend("nki"):
        res = torch.library.opcheck(getattr(torch.ops.kernel_dsl, op), args())
        assert all(r == "SUCCESS" for r in res.values()), res


def test_opcheck_backward_ops() -> None:
    x, w, b, dy = torch.randn(4, 9), torch.randn(9), torch.randn(9), torch.randn(4, 9)
    with kd.backend("nki"):
        y, rstd = torch.ops.kernel_dsl.rms_norm(x, w, 1e-6)
        _, mean, rstd2 = torch.ops.kernel_dsl.layer_norm(x, w, b, 1e-5)
        for op, args in [(torch.ops.kernel_dsl.softmax_backward, (dy, torch.softmax(x, -1), 1)),
                         (torch.ops.kernel_dsl.rms_norm_backward, (dy, x, w, rstd)),
                         (torch.ops.kernel_dsl.layer_norm_backward, (dy, x, w, b, mean, rstd2))]:
            res = torch.library.opcheck(op, args)
            assert all(r == "SUCCESS" for r in res.values()), (op, res)


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = layer_norm(x, w, b)
        return softmax(rms_norm(h, w, 1e-6), -1).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    with kd.backend("nki"):
        x, w, b = (torch.randn(6, 16, requires_grad=True), torch.randn(16, requires_grad=True),
                   torch.randn(16, requires_grad=True))
        got = torch.autograd.grad(compiled(x, w, b) * 1.0, (x, w, b))
        want = torch.autograd.grad(f(x, w, b), (x, w, b))
        for a, c in zip(got, want):
            torch.testing.assert_close(a, c)
    torch._dynamo.reset()


# -- JAX -------------------------------------------------------------------------------------------
def test_jax_entries_forward_and_grad() -> None:
    import jax
    import numpy as np

    x, w, b = torch.randn(5, 33) * 2 + 1, torch.randn(33), torch.randn(33)
    jx, jw, jb = (jax.numpy.asarray(t.numpy()) for t in (x, w, b))
    cases = [
        (lambda x, w, b: layer_norm.jax(x, w, b), lambda x, w, b: F.layer_norm(x, (33,), w, b)),
        (lambda x, w, b: rms_norm.jax(x, w, 1e-6) + 0 * b,
         lambda x, w, b: F.rms_norm(x, (33,), w, 1e-6) + 0 * b),
        (lambda x, w, b: softmax.jax(x * w, 0) + b, lambda x, w, b: torch.softmax(x * w, 0) + b),
    ]
    for fj, ft in cases:
        np.testing.assert_allclose(np.asarray(fj(jx, jw, jb)), ft(x, w, b).numpy(), atol=1e-5, rtol=1e-5)
        grads = jax.grad(lambda *a: (fj(*a) ** 3).sum(), argnums=(0, 1, 2))(jx, jw, jb)
        t64 = [t.double().requires_grad_() for t in (x, w, b)]
        want = torch.autograd.grad((ft(*t64) ** 3).sum(), t64)
        for g, e in zip(grads, want):
            np.testing.assert_allclose(np.asarray(g), e.numpy(), atol=1e-4 * (1 + float(e.abs().max())),
                                       rtol=1e-4)
