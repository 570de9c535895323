"""Torch integration: the custom ops pass opcheck, compile without graph breaks, cache their
compiled kernels, accept non-contiguous inputs, and return fresh tensors (DESIGN.md §3).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch.nn.functional as F
from dsl_kernels import add_where, layer_norm, matmul, softmax_rows

SHAPES = [(13, 37, 5), (24, 40, 130)]  # (m, k, n): primes and non-multiples of every block


def ref_add_where(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(x > y, x - y, 0.5 * y)


def ref_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), eps).to(x.dtype)


def close(actual: torch.Tensor, expected: torch.Tensor, tol: float = 1e-4) -> None:
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol)


# -- (a) opcheck ------------------------------------------------------------------------------------

def _opcheck(kernel: Any, args: tuple[Any, ...]) -> None:
    op = kernel._ops.op  # the kernel's one portable op (its CPU implementation runs here)
    result = torch.library.opcheck(op, args)
    assert all(v == "SUCCESS" for v in result.values()), result


def test_opcheck_matmul() -> None:
    """opcheck (schema, autograd registration, fake tensor, aot dispatch) on matmul's op."""
    _opcheck(matmul, (torch.randn(13, 37), torch.randn(37, 5)))


def test_opcheck_add_where() -> None:
    """opcheck on add_where's op."""
    _opcheck(add_where, (torch.randn(13, 37), torch.randn(13, 37)))


def test_opcheck_layer_norm() -> None:
    """opcheck on layer_norm's op, whose schema has a float scalar (eps)."""
    _opcheck(layer_norm, (torch.randn(13, 37), torch.randn(37), torch.randn(37), 1e-5))


def test_opcheck_softmax_rows() -> None:
    """opcheck on softmax_rows's op."""
    _opcheck(softmax_rows, (torch.randn(13, 37),))


# -- (b) torch.compile ------------------------------------------------------------------------------

def _compile_over_shapes(fn: Callable[..., Any], reference: Callable[..., Any],
                         make_args: Callable[[int, int, int], tuple[torch.Tensor, ...]]) -> None:
    """fullgraph + dynamic compile of `fn`: equal to eager and reference, no recompile per shape."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=counter)
    frames = []
    for m, k, n in SHAPES:
        args = make_args(m, k, n)
        out = compiled(*args)
        eager = fn(*args)
        close(out, eager, 1e-5)
        close(out, reference(*args))
        frames.append(counter.frame_count)
    assert frames[0] >= 1
    assert frames[-1] == frames[0], f"recompiled for a new shape under dynamic=True: {frames}"
    explanation = torch._dynamo.explain(fn)(*make_args(*SHAPES[0]))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_compile_matmul_softmax(dynamo_reset: None) -> None:
    """softmax_rows(matmul(x, y)) compiled with aot_eager, dynamic=True, over two shapes."""
    _compile_over_shapes(
        lambda x, y: softmax_rows(matmul(x, y)),
        lambda x, y: torch.softmax(x @ y, dim=-1),
        lambda m, k, n: (torch.randn(m, k), torch.randn(k, n)))


def test_compile_kernel_with_torch_ops(dynamo_reset: None) -> None:
    """A kernel between ordinary torch ops in one compiled graph."""
    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = matmul(x * 2.0, y.t())
        return torch.relu(add_where(h, z)).sum(dim=0) + 1.0

    def ref(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.relu(ref_add_where((x * 2.0) @ y.t(), z)).sum(dim=0) + 1.0

    _compile_over_shapes(fn, ref, lambda m, k, n: (torch.randn(m, k), torch.randn(n, k),
                                                   torch.randn(m, n)))


def test_compile_layer_norm_defaults_and_kwargs(dynamo_reset: None) -> None:
    """layer_norm with its default eps and with keyword arguments inside a compiled graph."""
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, w, b) + layer_norm(x=x, w=w, b=b, eps=0.5)

    def ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ref_layer_norm(x, w, b) + ref_layer_norm(x, w, b, 0.5)

    _compile_over_shapes(fn, ref, lambda m, k, n: (torch.randn(m, n), torch.randn(n),
                                                   torch.randn(n)))


@pytest.mark.slow
def test_compile_inductor_add_where(dynamo_reset: None) -> None:
    """The default (Inductor) backend with fullgraph=True: the op is one node, results exact."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return add_where(x.exp(), y) * 3.0

    compiled = torch.compile(fn, fullgraph=True)
    for m, n in [(13, 37), (16, 130)]:
        x, y = torch.randn(m, n), torch.randn(m, n)
        close(compiled(x, y), ref_add_where(x.exp(), y) * 3.0)


# -- (c) the compiled-kernel cache ------------------------------------------------------------------

def test_repeat_call_does_no_work() -> None:
    """A repeat eager call with the same shapes/dtypes neither traces, renders nor compiles."""
    x, y = torch.randn(19, 23), torch.randn(23, 11)
    close(matmul(x, y), x @ y)
    before = dict(matmul.stats)
    for _ in range(3):
        x2, y2 = torch.randn(19, 23), torch.randn(23, 11)
        close(matmul(x2, y2), x2 @ y2)
    assert matmul.stats == before


def test_new_shape_traces_once_more() -> None:
    """A new shape traces (and compiles) exactly once; calling it again costs nothing more."""
    x, y = torch.randn(29, 31), torch.randn(31, 7)
    matmul(x, y)
    before = dict(matmul.stats)
    x2, y2 = torch.randn(30, 31), torch.randn(31, 7)
    close(matmul(x2, y2), x2 @ y2)
    assert matmul.stats["traces"] == before["traces"] + 1
    assert matmul.stats["compiles"] == before["compiles"] + 1
    after = dict(matmul.stats)
    matmul(x2, y2)
    matmul(x, y)
    assert matmul.stats == after


def test_new_dtype_traces_once_more() -> None:
    """A new dtype with the same shape is a new specialization: one more trace."""
    x, y = torch.randn(17, 9), torch.randn(17, 9)
    add_where(x, y)
    before = dict(add_where.stats)
    out = add_where(x.bfloat16(), y.bfloat16())
    assert out.dtype == torch.bfloat16
    assert add_where.stats["traces"] == before["traces"] + 1


# -- (d) non-contiguous inputs ----------------------------------------------------------------------

def test_transposed_inputs() -> None:
    """Transposed (column-major) inputs give the same result as contiguous ones."""
    x = torch.randn(37, 13).t()
    y = torch.randn(5, 37).t()
    assert not x.is_contiguous() and not y.is_contiguous()
    close(matmul(x, y), x @ y)
    a, b = torch.randn(37, 13).t(), torch.randn(37, 13).t()
    close(add_where(a, b), ref_add_where(a, b))


def test_strided_slices() -> None:
    """Inputs sliced with a step (non-compact strides) give correct results."""
    x = torch.randn(26, 74)[::2, ::2]
    y = torch.randn(13, 37)
    assert not x.is_contiguous()
    close(add_where(x, y), ref_add_where(x, y))
    close(softmax_rows(x), torch.softmax(x, dim=-1))
    w, b = torch.randn(74)[::2], torch.randn(111)[::3]
    close(layer_norm(x, w, b), ref_layer_norm(x, w, b))
    k = torch.randn(37, 15)[:, ::3]
    close(matmul(x, k), x @ k)


def test_inputs_not_modified() -> None:
    """The kernel never writes into its inputs (also non-contiguous ones)."""
    x = torch.randn(37, 13).t()
    y = torch.randn(13, 37)
    xc, yc = x.clone(), y.clone()
    add_where(x, y)
    assert torch.equal(x, xc) and torch.equal(y, yc)


# -- (e) outputs ------------------------------------------------------------------------------------

def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()


@pytest.mark.parametrize("name", ["add_where", "matmul", "softmax_rows", "layer_norm"])
def test_outputs_are_fresh_contiguous_tensors(name: str) -> None:
    """Outputs do not alias inputs or earlier outputs, are contiguous, right dtype and shape."""
    x = torch.randn(13, 37)
    cases = {
        "add_where": (add_where, (x, torch.randn(13, 37)), (13, 37)),
        "matmul": (matmul, (x, torch.randn(37, 5)), (13, 5)),
        "softmax_rows": (softmax_rows, (x,), (13, 37)),
        "layer_norm": (layer_norm, (x, torch.randn(37), torch.randn(37)), (13, 37)),
    }
    kernel, args, shape = cases[name]
    out = kernel(*args)
    assert isinstance(out, torch.Tensor)
    assert out.shape == shape and out.dtype == torch.float32 and out.device.type == "cpu"
    assert out.is_contiguous()
    assert not out.requires_grad
    for a in args:
        assert not _shares_memory(out, a)
    again = kernel(*args)
    assert not _shares_memory(out, again)
    expected = again.clone()
    out.fill_(float("nan"))  # writing an output must not change inputs or other outputs
    assert torch.equal(again, expected)
    assert torch.equal(kernel(*args), expected)


def test_op_and_eager_call_agree() -> None:
    """The custom op called directly returns fresh tensors equal to the eager kernel call."""
    x, y = torch.randn(13, 37), torch.randn(37, 5)
    outs = matmul._ops.op(x, y)
    assert len(outs) == 1 and outs[0].is_contiguous()
    assert not _shares_memory(outs[0], x) and not _shares_memory(outs[0], y)
    assert torch.equal(outs[0], matmul(x, y))


def test_output_of_same_input_twice() -> None:
    """Passing one tensor for both arguments works and returns a new tensor."""
    x = torch.randn(13, 37)
    out = add_where(x, x)
    close(out, ref_add_where(x, x))
    assert not _shares_memory(out, x)


# -- (f) bf16 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("m,k,n", [(13, 37, 5), (64, 200, 136)])
def test_matmul_bf16(m: int, k: int, n: int) -> None:
    """bf16 matmul returns bf16, close to torch's f32 product rounded to bf16."""
    x = torch.randn(m, k).bfloat16()
    y = torch.randn(k, n).bfloat16()
    out = matmul(x, y)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n) and out.is_contiguous()
    expected = (x.float() @ y.float()).bfloat16()
    scale = expected.float().abs().max().item()
    torch.testing.assert_close(out.float(), expected.float(), atol=2e-2 * scale, rtol=2e-2)


def test_layer_norm_bf16() -> None:
    """bf16 layer_norm returns bf16 close to the f32 reference."""
    x, w, b = torch.randn(13, 37).bfloat16(), torch.randn(37).bfloat16(), torch.randn(37).bfloat16()
    out = layer_norm(x, w, b)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref_layer_norm(x.float(), w.float(), b.float()),
                               atol=5e-2, rtol=2e-2)


# -- (g) keyword and default arguments --------------------------------------------------------------

def test_keyword_arguments() -> None:
    """Tensors passed by keyword, in any order, give the positional result."""
    x, y = torch.randn(13, 37), torch.randn(37, 5)
    close(matmul(y=y, x=x), x @ y)
    a, b = torch.randn(13, 37), torch.randn(13, 37)
    close(add_where(a, y=b), ref_add_where(a, b))


def test_default_scalar_argument() -> None:
    """layer_norm's default eps=1e-5 is used; eps given positionally or by keyword overrides it.

    The input's variance (~1e-6) is of the order of eps, so a wrong eps shows in the result.
    """
    x = torch.randn(13, 37) * 1e-3
    w, b = torch.randn(37), torch.randn(37)
    close(layer_norm(x, w, b), ref_layer_norm(x, w, b, 1e-5))
    close(layer_norm(x, w, b, 1e-5), ref_layer_norm(x, w, b, 1e-5))
    close(layer_norm(x, w, b, eps=1e-3), ref_layer_norm(x, w, b, 1e-3))
    close(layer_norm(x=x, w=w, b=b, eps=1e-2), ref_layer_norm(x, w, b, 1e-2))
    assert not torch.allclose(ref_layer_norm(x, w, b, 1e-5), ref_layer_norm(x, w, b, 1e-3))


def test_library_op_names_are_reserved_for_the_library() -> None:
    """User kernels and the kernel library share `torch.ops.kernel_dsl`: a user kernel named like
    a library op (the test kernel `matmul`) gets a suffix, so either may be imported first."""
    import sys

    import kernel_dsl.kernels  # noqa: F401
    from kernel_dsl.kernels.base import LibraryOp
    from kernel_dsl.torch_ops import LIBRARY_OPS

    library = {v.qualname.split("::")[1]
               for name in ("matmul", "attention", "softmax", "norms")
               for v in vars(sys.modules[f"kernel_dsl.kernels.{name}"]).values()
               if isinstance(v, LibraryOp)}
    assert library == LIBRARY_OPS
    assert matmul.name == "matmul" and matmul._ops.base.startswith("matmul_")
    assert matmul._ops.op.name() == f"kernel_dsl::{matmul._ops.base}"
