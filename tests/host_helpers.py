"""Shared by the host-code tests (test_host_views, test_host_conversions, test_host_epilogue):
run a kernel on one backend, compare layouts, and check a kernel's custom op."""
from __future__ import annotations

from typing import Any, Callable

import torch

import kernel_dsl as kd

BACKENDS = ("pallas", "triton", "nki")


def run(kernel: Any, backend: str, *args: Any) -> Any:
    with kd.backend(backend):
        return kernel(*args)


def same_layout(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype, (
        got.shape, got.stride(), want.shape, want.stride())


def check_op(kernel: Any, make: Callable[[], tuple[Any, ...]]) -> None:
    """The op's fake gives the outputs' shapes and strides the real run gives, opcheck passes,
    and column-major arguments give the same results."""
    args = make()
    op = kernel._ops.op
    real = op(*args)
    eager = kernel(*args)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    for r, e, f in zip(real, eager, fake):
        torch.testing.assert_close(r, e)
        same_layout(r, e)
        assert f.shape == r.shape and f.stride() == r.stride() and f.dtype == r.dtype
    result = torch.library.opcheck(op, args)
    assert all(v == "SUCCESS" for v in result.values()), result
    strided = tuple(a.T.contiguous().T if isinstance(a, torch.Tensor) and a.dim() == 2 else a
                    for a in args)  # same values, column-major layout
    for r, s in zip(real, op(*strided)):
        torch.testing.assert_close(r, s)
        same_layout(r, s)
