"""Plain eager CPU calls of library ops skip the dispatcher, and so do eager calls that need
gradients (the op's own autograd around its body); anything else that needs the op's
registrations (autocast, vmap, subclasses, torch.compile) still goes through it."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import kernels as lib

mm = importlib.import_module("kernel_dsl.kernels.matmul")


@pytest.fixture
def body_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = mm._fwd_op.body

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(mm._fwd_op, "body", counted)  # only the fast path reads `.body`
    return calls


def test_a_plain_call_runs_a_launch_prepared_once_per_signature(
        body_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the dispatcher nor the op's body: the body's decisions are taken once per
    signature (shapes, dtypes, flags, backend, interpret mode, bucket policy)."""
    prepared: list[tuple[int, ...]] = []
    real = mm._prepare_launch

    def counted(x, *rest):  # type: ignore[no-untyped-def]
        prepared.append(tuple(x.shape))
        return real(x, *rest)

    monkeypatch.setattr(mm, "_prepare_launch", counted)
    monkeypatch.setattr(mm, "_launches", {})
    monkeypatch.setattr(mm, "_checked", {})
    x, w, b = torch.randn(16, 32), torch.randn(32, 8), torch.randn(8)
    for _ in range(2):
        torch.testing.assert_close(lib.matmul(x, w), x @ w, atol=1e-4, rtol=1e-4)
    with torch.no_grad():  # requires_grad does not matter where no graph is recorded
        lib.matmul(x.clone().requires_grad_(), w)
    assert prepared == [(16, 32)] and body_calls == []
    x3 = torch.randn(2, 7, 32)  # a new signature: batch dims folded, 14 rows padded and cut
    torch.testing.assert_close(lib.matmul(x3, w.T.contiguous().T, bias=b, activation="silu"),
                               torch.nn.functional.silu(x3 @ w + b), atol=1e-4, rtol=1e-4)
    with kd.shape_buckets([64]):  # another bucket policy: prepared again
        torch.testing.assert_close(lib.matmul(x, w), x @ w, atol=1e-4, rtol=1e-4)
    with kd.interpret_mode("faithful"):
        torch.testing.assert_close(lib.matmul(x, w), x @ w, atol=1e-4, rtol=1e-4)
    assert prepared == [(16, 32), (2, 7, 32), (16, 32), (16, 32)] and body_calls == []
    torch.testing.assert_close(lib.matmul(x, w[None]), x @ w[None], atol=1e-4, rtol=1e-4)
    assert body_calls == [1]  # batched weights take the op's body
    torch.testing.assert_close(mm._fwd_op(x, w, None, "none", None), x @ w, atol=1e-4, rtol=1e-4)
    assert len(prepared) == 4  # the op's body takes the launch prepared for the call


def test_an_eager_call_with_gradients_runs_the_ops_autograd_around_the_body(
        body_calls: list[int]) -> None:
    x, w, b = (torch.randn(*s, requires_grad=True) for s in ((16, 32), (32, 8), (8,)))
    out = lib.matmul(x, w, bias=b, activation="gelu")
    assert body_calls == [1] and type(out.grad_fn).__name__ == "_fwd_op_eagerBackward"
    g = torch.randn(out.shape)
    mine = torch.autograd.grad(out, (x, w, b), g)
    ref = mm._fwd_op(x, w, b, "gelu", None)  # the op itself: the dispatcher's autograd
    assert type(ref.grad_fn).__name__ != "_fwd_op_eagerBackward"
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    for a, r in zip(mine, torch.autograd.grad(ref, (x, w, b), g)):
        torch.testing.assert_close(a, r, rtol=0, atol=0)


def test_a_training_step_does_not_need_the_dispatcher() -> None:
    """The dispatcher's first custom-op call imports torch._dynamo (about 1 s), unless
    something imported it before (TorchTPU does, when torch autoloads it)."""
    code = ("import sys, torch\n"
            "before = 'torch._dynamo' in sys.modules\n"
            "from kernel_dsl.kernels.base import LibraryOp\n"
            "calls = []\n"
            "real = LibraryOp.__call__\n"
            "LibraryOp.__call__ = lambda self, *a: calls.append(1) or real(self, *a)\n"
            "from kernel_dsl import kernels as lib\n"
            "x = torch.randn(20, 16, requires_grad=True)\n"
            "w = torch.randn(16, 8, requires_grad=True)\n"
            "q = torch.randn(1, 2, 10, 8, requires_grad=True)\n"
            "y = lib.matmul(lib.rms_norm(x, None), w, activation='silu')\n"
            "(y.sum() + lib.softmax(lib.layer_norm(y), 0).square().sum()\n"
            " + lib.flash_attention(q, q, q, causal=True).sum()).backward()\n"
            "assert x.grad is not None and w.grad is not None and q.grad is not None\n"
            "print(len(calls), before, 'torch._dynamo' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=300)
    assert res.returncode == 0, res.stderr
    calls, before, after = res.stdout.split()[-3:]
    assert calls == "0"  # no library op went through the dispatcher
    assert before == "True" or after == "False"


@pytest.mark.parametrize("case", ["autocast", "vmap", "compile"])
def test_calls_that_need_the_op_take_it(case: str, body_calls: list[int]) -> None:
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    if case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert lib.matmul(x, w).dtype == torch.bfloat16
    elif case == "vmap":
        assert torch.vmap(lambda t: lib.matmul(t, w))(x.reshape(2, 8, 32)).shape == (2, 8, 8)
    else:
        torch.compile(lambda a, b: lib.matmul(a, b), backend="aot_eager", fullgraph=True)(x, w)
    assert body_calls == []


def test_the_eager_autograd_sees_the_ops_own_inputs() -> None:
    """`ctx.needs_input_grad` lines up with the op's inputs, and a backward may return one
    tensor for a one-input op, as with torch.library."""
    from kernel_dsl.kernels.base import call, library_op, register_autograd

    @library_op("kernel_dsl_test::scaled")
    def scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    def setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):  # type: ignore[no-untyped-def]
        x, w = ctx.saved_tensors
        seen.append(ctx.needs_input_grad)
        return (g * w if ctx.needs_input_grad[0] else None,
                g * x if ctx.needs_input_grad[1] else None)

    seen: list[tuple[bool, ...]] = []
    register_autograd(scaled, backward, setup)
    x, w = torch.randn(4, requires_grad=True), torch.randn(4)
    call(scaled, x, w).sum().backward()
    assert seen == [(True, False)]
    torch.testing.assert_close(x.grad, w)

    @library_op("kernel_dsl_test::doubled")
    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    register_autograd(doubled, lambda ctx, g: g * 2, lambda ctx, inputs, output: None)
    y = torch.randn(3, requires_grad=True)
    call(doubled, y).sum().backward()
    torch.testing.assert_close(y.grad, torch.full((3,), 2.0))
