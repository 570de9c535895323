"""Autograd for user kernels: `kernel.register_autograd(backward, setup_context=...)` with
torch.library's meaning, eagerly, on every CPU backend, under torch.compile and in opcheck.

The DSL has no float64 (kd.DTypeError), so gradcheck runs in float32: eps=1e-3 (a central
difference of products of O(1) values: truncation error ~eps^2, rounding ~1e-7/eps = 1e-4),
atol=rtol=1e-2.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import kernel_dsl as kd


@kd.tpu_kernel
def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in kd.tile(list(x.shape)):
        out[tm, tn] = x[tm, tn] * y[tm, tn]
    return out


@kd.tpu_kernel
def mul_grads(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
    """The backward of `mul`, itself a kernel with two outputs."""
    dx = torch.empty_like(x)
    dy = torch.empty_like(y)
    for tm, tn in kd.tile(list(x.shape)):
        gt = g[tm, tn]
        dx[tm, tn] = gt * y[tm, tn]
        dy[tm, tn] = gt * x[tm, tn]
    return dx, dy


def _mul_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    assert isinstance(output, torch.Tensor)  # one output: a tensor, not the op's list
    ctx.save_for_backward(*inputs)


@mul.register_autograd
def _unused(ctx: Any, g: Any) -> Any:  # replaced below: the decorator form only returns it
    raise AssertionError


def _mul_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ctx.saved_tensors
    return mul_grads(g, x, y)


mul.register_autograd(_mul_backward, setup_context=_mul_setup)


@kd.tpu_kernel
def scale_shift(x: torch.Tensor, s: float):
    """Two outputs and a scalar input: (x * s, x + s)."""
    a = torch.empty_like(x)
    b = torch.empty_like(x)
    for tm, tn in kd.tile(list(x.shape)):
        a[tm, tn] = x[tm, tn] * s
        b[tm, tn] = x[tm, tn] + s
    return a, b


def _ss_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    assert isinstance(output, tuple) and len(output) == 2
    ctx.s = inputs[1]


def _ss_backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> tuple[Any, None]:
    return ga * ctx.s + gb, None  # plain torch in a backward works too


scale_shift.register_autograd(_ss_backward, setup_context=_ss_setup)


@kd.tpu_kernel
def no_backward(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in kd.tile(list(x.shape)):
        out[tm, tn] = x[tm, tn] * 2.0
    return out


def _inputs(m: int = 8, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(m, n, requires_grad=True), torch.randn(m, n, requires_grad=True))


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_eager_backward_every_backend(backend: str) -> None:
    """The backward (another kernel) runs on the backend in force; grads equal torch's."""
    x, y = _inputs()
    with kd.backend(backend):
        out = mul(x, y)
        assert out.grad_fn is not None  # requires_grad inputs skip the plain-call fast path
        gx, gy = torch.autograd.grad((out * out).sum(), (x, y))
    ex, ey = torch.autograd.grad((x * y * x * y).sum(), (x, y))
    torch.testing.assert_close(gx, ex)
    torch.testing.assert_close(gy, ey)


def test_tuple_output_and_scalar_input() -> None:
    """A kernel with two outputs: setup_context sees a tuple, backward one grad per output."""
    x = torch.randn(8, 16, requires_grad=True)
    a, b = scale_shift(x, 3.0)
    (gx,) = torch.autograd.grad((a * 2 + b * b).sum(), (x,))
    torch.testing.assert_close(gx, 6.0 + 2 * (x.detach() + 3.0))


@pytest.mark.filterwarnings("ignore:Input #.* is not a double")  # f32 by necessity, see top
def test_gradcheck_f32() -> None:
    x, y = (t.detach().requires_grad_() for t in _inputs(4, 8))
    assert torch.autograd.gradcheck(mul, (x, y), eps=1e-3, atol=1e-2, rtol=1e-2)
    x1 = x.detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: scale_shift(t, 0.5), (x1,), eps=1e-3, atol=1e-2,
                                    rtol=1e-2)


def test_opcheck_with_requires_grad() -> None:
    """opcheck's four tests, test_aot_dispatch_dynamic included, with inputs that need grad."""
    for op, args in [(mul._ops.op, _inputs()),
                     (scale_shift._ops.op, (torch.randn(8, 16, requires_grad=True), 2.0))]:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), result


def test_compile_fullgraph_aot_eager() -> None:
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    fn = torch.compile(lambda x, y: mul(x, y) * y, fullgraph=True, backend=counter)
    x, y = _inputs()
    gx, gy = torch.autograd.grad(fn(x, y).sum(), (x, y))
    torch.testing.assert_close(gx, y.detach() ** 2)
    torch.testing.assert_close(gy, 2 * x.detach() * y.detach())
    assert counter.frame_count == 1
    torch._dynamo.reset()


@pytest.mark.slow  # a cold Inductor compile: ~25 s of C++ compiler on this class of machine
def test_compile_fullgraph_inductor() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda x: sum(scale_shift(x, 2.0)), fullgraph=True, backend="inductor")
    x = torch.randn(8, 16, requires_grad=True)
    (gx,) = torch.autograd.grad(fn(x).sum(), (x,))
    torch.testing.assert_close(gx, torch.full_like(x, 3.0))
    torch._dynamo.reset()


def test_missing_backward_names_the_kernel() -> None:
    out = no_backward(torch.randn(8, 16, requires_grad=True))
    with pytest.raises(kd.KernelError, match=r"(?s)kernel `no_backward` has no backward.*"
                                             r"no_backward\.register_autograd"):
        out.sum().backward()


def test_wrong_number_of_grads_names_the_kernel() -> None:
    @kd.tpu_kernel
    def twice(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm, tn in kd.tile(list(x.shape)):
            out[tm, tn] = x[tm, tn] + y[tm, tn]
        return out

    twice.register_autograd(lambda ctx, g: g)
    x, y = _inputs()
    with pytest.raises(kd.ArgumentError, match="`twice` returned 1 gradients for 2 inputs"):
        twice(x, y).sum().backward()
