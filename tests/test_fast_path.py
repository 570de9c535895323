"""Plain eager CPU calls of library ops skip the dispatcher; anything that needs the op's
registrations (autograd, autocast, vmap, subclasses, torch.compile) still goes through it."""
from __future__ import annotations

import importlib

import pytest
import torch

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


def test_a_plain_call_runs_the_body_directly(body_calls: list[int]) -> None:
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    torch.testing.assert_close(lib.matmul(x, w), x @ w, atol=1e-4, rtol=1e-4)
    assert body_calls == [1]
    with torch.no_grad():  # requires_grad does not matter where no graph is recorded
        lib.matmul(x.requires_grad_(), w)
    assert body_calls == [1, 1]


@pytest.mark.parametrize("case", ["grad", "autocast", "vmap", "compile"])
def test_calls_that_need_the_op_take_it(case: str, body_calls: list[int]) -> None:
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    if case == "grad":
        out = lib.matmul(x.requires_grad_(), w)
        assert out.grad_fn is not None
    elif case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert lib.matmul(x, w).dtype == torch.bfloat16
    elif case == "vmap":
        assert torch.vmap(lambda t: lib.matmul(t, w))(x.reshape(2, 8, 32)).shape == (2, 8, 8)
    else:
        torch.compile(lambda a, b: lib.matmul(a, b), backend="aot_eager", fullgraph=True)(x, w)
    assert body_calls == []
