"""Library matmul: 2-D and batched, bias and activation epilogues, dtypes, gradients, the torch
op machinery and the JAX entry.

Gradients are compared with PyTorch's float64 autograd (the DSL has no float64, so gradcheck
cannot run the kernels): float32 within 1e-5 relative to the largest reference value (+1e-5);
bfloat16/float16 within 2x PyTorch's own error in that dtype (+1e-2 relative).
"""
from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from library_tolerance import assert_close_to_exact

import kernel_dsl as kd
from kernel_dsl.kernels import matmul

ACT = {None: lambda z: z, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def reference(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, act: str | None,
              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    z = torch.matmul(x, y)
    if bias is not None:
        z = z + bias
    z = ACT[act](z)
    return z.to(out_dtype) if out_dtype is not None else z


close = functools.partial(assert_close_to_exact, f32_rel=1e-5, lowp_rel=1e-2)


def check(xs: tuple[int, ...], ys: tuple[int, ...], act: str | None, bias: bool,
          dtype: torch.dtype = torch.float32, out_dtype: torch.dtype | None = None) -> None:
    x = torch.randn(xs).to(dtype).requires_grad_()
    y = (torch.randn(ys) / ys[-2] ** 0.5).to(dtype).requires_grad_()
    b = torch.randn(ys[-1]).to(dtype).requires_grad_() if bias else None
    ins = [x, y] + ([b] if bias else [])
    out = matmul(x, y, bias=b, activation=act, out_dtype=out_dtype)
    assert out.dtype == (out_dtype or dtype)
    e = [t.detach().double().requires_grad_() for t in ins]
    exact = reference(e[0], e[1], e[2] if bias else None, act)
    lowp = None
    if dtype != torch.float32:
        lp = [t.detach().clone().requires_grad_() for t in ins]
        lowp = reference(lp[0], lp[1], lp[2] if bias else None, act)
    close(out, exact, None if lowp is None else lowp.detach())
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, ins, g)
    want = torch.autograd.grad(exact, e, g.double())
    lows = torch.autograd.grad(lowp, lp, g.to(dtype)) if lowp is not None else [None] * len(ins)
    for a, w, lo in zip(got, want, lows):
        assert a.dtype == dtype
        close(a, w, lo)


CASES = {
    "2d_plain": ((37, 50), (50, 29), None, False),
    "2d_ones": ((1, 1), (1, 1), "relu", True),
    "folded_batch_gelu_bias": ((2, 3, 37, 50), (50, 29), "gelu", True),
    "batched_silu_bias": ((3, 17, 20), (3, 20, 9), "silu", True),
    "broadcast_batch_relu": ((2, 1, 17, 20), (3, 20, 9), "relu", False),
    "x_2d_y_batched": ((17, 20), (3, 20, 9), None, True),
    "ragged_k": ((9, 130), (130, 140), "gelu", False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["nki", "triton"])
def test_matches_pytorch_fast_interpreters(case: str, backend: str) -> None:
    with kd.backend(backend):
        check(*CASES[case])


def test_matches_pytorch_pallas() -> None:
    check(*CASES["folded_batch_gelu_bias"])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_matches_pytorch_pallas_all_cases(case: str) -> None:
    check(*CASES[case])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_accumulates_in_f32(dtype: torch.dtype) -> None:
    with kd.backend("nki"):
        check((33, 300), (300, 70), "silu", True, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_low_precision_other_backends(dtype: torch.dtype, backend: str) -> None:
    with kd.backend(backend):
        check((2, 65, 300), (300, 140), "gelu", True, dtype)


def test_out_dtype() -> None:
    with kd.backend("nki"):
        check((16, 40), (40, 24), "relu", True, torch.bfloat16, out_dtype=torch.float32)


def test_validation_errors() -> None:
    x, y = torch.randn(4, 5), torch.randn(5, 6)
    with pytest.raises(ValueError, match="inner dims"):
        matmul(x, y.T)
    with pytest.raises(TypeError, match="bfloat16"):
        matmul(x, y.bfloat16())
    with pytest.raises(ValueError, match="activation"):
        matmul(x, y, activation="tanh")
    with pytest.raises(ValueError, match="bias"):
        matmul(x, y, bias=torch.randn(5))
    with pytest.raises(TypeError, match="float64"):
        matmul(x.double(), y.double())


# -- torch op machinery ----------------------------------------------------------------------------
def test_opcheck() -> None:
    x, y, b = torch.randn(2, 7, 9), torch.randn(9, 5), torch.randn(5)
    with kd.backend("nki"):
        for args in [(x, y, b, "gelu", None), (x.requires_grad_(), y, None, "none", torch.float32)]:
            res = torch.library.opcheck(torch.ops.kernel_dsl.matmul, args)
            assert all(r == "SUCCESS" for r in res.values()), res
        res = torch.library.opcheck(torch.ops.kernel_dsl.matmul_backward,
                                    (torch.randn(2, 7, 5), x.detach(), y, b, "silu"))
        assert all(r == "SUCCESS" for r in res.values()), res


def test_torch_compile_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul(x, w, bias=b, activation="gelu").sum()

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    with kd.backend("nki"):
        for m in (7, 12):
            x, w, b = (torch.randn(m, 9, requires_grad=True), torch.randn(9, 5, requires_grad=True),
                       torch.randn(5, requires_grad=True))
            got = torch.autograd.grad(compiled(x, w, b), (x, w, b))
            want = torch.autograd.grad(f(x, w, b), (x, w, b))
            for a, c in zip(got, want):
                torch.testing.assert_close(a, c)
    torch._dynamo.reset()


# -- JAX -------------------------------------------------------------------------------------------
def test_jax_entry_forward_and_grad() -> None:
    import jax
    import numpy as np

    x, w, b = torch.randn(3, 7, 20), torch.randn(20, 9), torch.randn(9)
    jx, jw, jb = (jax.numpy.asarray(t.numpy()) for t in (x, w, b))
    np.testing.assert_allclose(np.asarray(matmul.jax(jx, jw, bias=jb, activation="silu")),
                               reference(x, w, b, "silu").numpy(), atol=1e-5, rtol=1e-5)

    def loss(x: Any, w: Any, b: Any) -> Any:
        return (matmul.jax(x, w, bias=b, activation="relu") ** 2).sum()

    grads = jax.grad(loss, argnums=(0, 1, 2))(jx, jw, jb)
    tx, tw, tb = (t.double().requires_grad_() for t in (x, w, b))
    want = torch.autograd.grad((reference(tx, tw, tb, "relu") ** 2).sum(), (tx, tw, tb))
    for g, e in zip(grads, want):
        np.testing.assert_allclose(np.asarray(g), e.numpy(), atol=1e-4 * (1 + float(e.abs().max())),
                                   rtol=1e-4)
