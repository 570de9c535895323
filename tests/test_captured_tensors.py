"""Tensors captured by a callable argument (Helion's examples/matmul.py epilogues, e.g.
`matmul(x, y, lambda acc, tile: acc + bias[tile[1]])`): lifted to hidden kernel inputs, read
afresh at every call, and keyed by shape and dtype, so a lambda made anew per call with the same
code reuses the build (kernel_dsl/arguments.py `captured_tensors`, `_callable_key`)."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ArgumentError

BACKENDS = ("pallas", "triton", "nki")
GLOBAL_SHIFT = torch.randn(7)


@kd.kernel
def matmul(
    x: torch.Tensor,
    y: torch.Tensor,
    epilogue: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor] = lambda acc, tile: acc,
):
    """Helion's examples/matmul.py, renamed."""
    m, k = x.size()
    k2, n = y.size()
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in kd.tile([m, n]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in kd.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


def linear(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return matmul(x, y, lambda acc, tile: acc + bias[tile[1]])  # a new lambda at every call


def addmm(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, alpha: float = 1.0,
          beta: float = 1.0) -> torch.Tensor:
    full = torch.broadcast_to(bias, [mat1.shape[0], mat2.shape[1]])  # stride 0: made contiguous
    return matmul(mat1, mat2, lambda acc, tile: alpha * acc + beta * full[tile[0], tile[1]])


@pytest.mark.parametrize("mkn", [(9, 12, 7), (1, 1, 1), (13, 5, 130)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_captured_bias_is_a_hidden_input(backend: str, mkn: tuple[int, int, int]) -> None:
    m, k, n = mkn
    x, y, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    with kd.backend(backend):
        out = linear(x, y, bias)
        relu = matmul(x, y, lambda acc, tile: torch.relu(acc + bias[tile[1]]))
    torch.testing.assert_close(out, x @ y + bias, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(relu, torch.relu(x @ y + bias), rtol=1e-4, atol=1e-4)


def test_a_new_lambda_per_call_reuses_the_build_and_reads_its_own_tensor() -> None:
    x, y = torch.randn(6, 8), torch.randn(8, 7)
    linear(x, y, torch.randn(7))
    traces, compiles = matmul.stats["traces"], matmul.stats["compiles"]
    for _ in range(3):
        bias = torch.randn(7)  # new data, same shape and dtype: the same build
        torch.testing.assert_close(linear(x, y, bias), x @ y + bias, rtol=1e-5, atol=1e-5)
    assert (matmul.stats["traces"], matmul.stats["compiles"]) == (traces, compiles)
    bias16 = torch.randn(7, dtype=torch.bfloat16)  # another dtype: another trace
    torch.testing.assert_close(linear(x, y, bias16), x @ y + bias16.float(), rtol=1e-2, atol=1e-2)
    assert matmul.stats["traces"] == traces + 1


def test_closure_constants_and_broadcast_views() -> None:
    bias, a, b = torch.randn(1), torch.randn(5, 9), torch.randn(9, 4)
    torch.testing.assert_close(addmm(bias, a, b), torch.addmm(bias, a, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(addmm(bias, a, b, 0.5, 2.0),  # new constants: traced for them
                               torch.addmm(bias, a, b, alpha=0.5, beta=2.0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(addmm(bias, a.T.contiguous().T, b),  # a non-contiguous argument
                               torch.addmm(bias, a, b), rtol=1e-5, atol=1e-5)


def _shift_by_global(acc: torch.Tensor, tile: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return acc - GLOBAL_SHIFT[tile[1]]


def test_a_global_tensor_the_function_names_is_captured_too() -> None:
    x, y = torch.randn(3, 4), torch.randn(4, 7)
    torch.testing.assert_close(matmul(x, y, _shift_by_global), x @ y - GLOBAL_SHIFT,
                               rtol=1e-5, atol=1e-5)


def test_a_captured_tensor_that_needs_a_gradient_is_refused() -> None:
    x, y, bias = torch.randn(3, 4), torch.randn(4, 7), torch.randn(7, requires_grad=True)
    with pytest.raises(ArgumentError, match="tensor `bias` captured by `epilogue` requires grad") as e:
        linear(x, y, bias)
    assert "tensor argument" in e.value.hint
    with torch.no_grad():  # no gradient wanted: fine
        torch.testing.assert_close(linear(x, y, bias), x @ y + bias, rtol=1e-5, atol=1e-5)


def test_a_captured_tensor_of_an_unsupported_dtype_is_named() -> None:
    x, y, bias = torch.randn(3, 4), torch.randn(4, 7), torch.randn(7, dtype=torch.float64)
    with pytest.raises(kd.errors.DTypeError, match="tensor `bias` captured by `epilogue`"):
        linear(x, y, bias)
