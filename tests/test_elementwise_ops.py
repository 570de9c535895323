"""Elementwise functions on tiles: pow, floor/ceil/round/trunc, sign, log1p/expm1, softplus, gelu
(both approximations), isnan/isinf/isfinite, masked_fill, clamp_min/clamp_max and float `//`/`%`,
on every backend and float dtype, against torch (special values included)."""
from __future__ import annotations

import os
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import kernel_dsl as kd
from kernel_dsl.lowering import get

BACKENDS = ("pallas", "triton", "nki")
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
SHAPES = [(37, 5), (1, 130)]
E = torch.empty
# NumPy under the Triton and NKI interpreters warns on inf results and garbage (ragged) lanes
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
SPECIAL = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e-6, -1e-6, 3.0, -0.0, 0.49999997, 8388609.0,
           -7.25, 100.5, float("nan"), float("inf"), -float("inf")]


def _kernel(fn: Callable[..., Any]) -> Any:
    @kd.kernel
    def k(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = fn(x[t])
        return out
    return k


# name -> (function, tolerance in f32, exact?, finite inputs only?)
OPS: dict[str, tuple[Callable[..., Any], bool, bool]] = {
    "floor": (torch.floor, True, False),
    "ceil": (lambda x: x.ceil(), True, False),
    "round": (torch.round, True, False),  # half to even
    "trunc": (torch.trunc, True, False),
    "sign": (torch.sign, True, False),  # sign(nan) == 0
    "log1p": (lambda x: torch.log1p(x.abs()), False, False),
    "expm1": (torch.expm1, False, False),
    "softplus": (F.softplus, False, True),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=3.0), False, True),
    "gelu": (F.gelu, False, True),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), False, True),
    "isnan_isinf": (lambda x: torch.where(torch.isnan(x), 1.0, 0.0) + torch.isinf(x) * 2.0
                    + x.isfinite() * 4.0, True, False),
    "masked_fill": (lambda x: x.masked_fill(x > 1, -3.0).masked_fill(x.isnan(), 7.0), True, False),
    "clamp": (lambda x: torch.clamp_max(x.clamp_min(-0.25), 0.5), True, False),
    "pow_scalar": (lambda x: x ** 2 + torch.pow(x, 3), False, True),
    "pow_tile": (lambda x: x.abs() ** x, False, True),
    "floordiv": (lambda x: x // 0.75 + torch.div(x, -0.5, rounding_mode="floor"), False, True),
    "remainder": (lambda x: x % 0.75 + torch.fmod(x, -0.5) + torch.remainder(x, -1.25), False, True),
    "div_trunc": (lambda x: torch.div(x, 0.75, rounding_mode="trunc"), False, True),
}
KERNELS = {name: _kernel(fn) for name, (fn, _, _) in OPS.items()}


def inputs(shape: tuple[int, int], dtype: torch.dtype, finite: bool) -> torch.Tensor:
    x = torch.randn(shape) * 4
    special = torch.tensor(SPECIAL[:-3] if finite else SPECIAL)
    n = min(special.numel(), x.numel())
    x.view(-1)[:n] = special[:n]
    x = x.to(dtype)
    return x.masked_fill(~x.isfinite(), 2.0) if finite else x  # f16 overflows 8388609.0


# every shape in f32; the 16-bit dtypes (computed in f32, rounded once) at the ragged one
CASES = [(dt, sh) for dt in FLOATS for sh in (SHAPES if dt == torch.float32 else SHAPES[:1])]


@pytest.mark.parametrize("dtype,shape", CASES, ids=str)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_matches_torch(backend: str, name: str, dtype: torch.dtype,
                                   shape: tuple[int, int]) -> None:
    fn, exact, finite = OPS[name]
    x = inputs(shape, dtype, finite)
    if name == "remainder":  # a - b * floor(a / b) in f32: its error grows with |a / b| (docs/ir.md)
        x = x.masked_fill(x.abs() > 1000, 3.0)
    with kd.backend(backend):
        got = KERNELS[name](x)
    ref = fn(x.float()).to(dtype) if dtype != torch.float32 else fn(x)
    assert got.dtype == dtype
    if exact:
        torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
    else:  # torch's own error in this dtype, plus a little (DESIGN.md §5)
        tol = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dtype]
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_log1p_and_expm1_are_accurate_near_zero(backend: str) -> None:
    """Where log(1 + x) and exp(x) - 1 lose every digit: relative error, not absolute."""
    x = torch.tensor([[1e-7, -1e-7, 3e-5, -2e-4, 1e-3, 0.3, -0.3, 0.0]])
    for name in ("log1p", "expm1"):
        k = _kernel(getattr(torch, name))
        with kd.backend(backend):
            got = k(x)
        torch.testing.assert_close(got, getattr(torch, name)(x), rtol=1e-6, atol=0)


def test_round_breaks_ties_to_even_on_every_backend() -> None:
    x = torch.tensor([[0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.49999997, 4194304.5]])
    want = [[0.0, 2.0, 2.0, 4.0, -0.0, -2.0, -2.0, 0.0, 4194304.0]]
    for backend in BACKENDS:
        with kd.backend(backend):
            assert KERNELS["round"](x).tolist() == want, backend


@kd.kernel
def int_functions(x: torch.Tensor):
    """On integers: floor/round are the identity, sign keeps the dtype, isnan is all False,
    integer ** integer stays integer."""
    a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x, dtype=torch.bool)
    for t in kd.tile(x.shape):
        v = x[t]
        a[t] = torch.floor(v) + torch.round(v) + torch.sign(v) * 100
        b[t] = v.clamp_min(-3).clamp_max(5) ** 2 + v.masked_fill(v > 3, 9) + v.clamp(0, 3) ** v.clamp(0, 4)
        c[t] = torch.isnan(v) | torch.isinf(v)
    return a, b, c


@pytest.mark.parametrize("dtype", (torch.int32, torch.int16, torch.int8), ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_functions_of_integer_tiles(backend: str, dtype: torch.dtype) -> None:
    x = torch.randint(-20, 20, (37, 5), dtype=dtype)
    with kd.backend(backend):
        a, b, c = int_functions(x)
    assert torch.equal(a, torch.floor(x) + torch.round(x) + torch.sign(x) * 100)
    assert torch.equal(b, x.clamp_min(-3).clamp_max(5) ** 2 + x.masked_fill(x > 3, 9)
                       + x.clamp(0, 3) ** x.clamp(0, 4))
    assert not c.any() and c.dtype == torch.bool


def test_float_functions_reject_integer_tiles_as_torch_does() -> None:
    k = _kernel(F.gelu)
    with pytest.raises(kd.DTypeError, match="gelu of a i32 tile"):
        k.ir(E(8, 8, dtype=torch.int32))
    with pytest.raises(kd.KernelSyntaxError, match="approximate"):
        _kernel(lambda x: F.gelu(x, approximate="fast")).ir(E(8, 8))


def test_nki_expands_rounding_into_supported_instructions() -> None:
    """NKI has no floor/round instruction: the kernel truncates through an int32 copy."""
    src = KERNELS["round"].source(E(37, 5), backend="nki")
    assert "floor" not in src.replace("# src", "") and "dtype=nl.int32" in src
    assert "nisa.tensor_copy(" in src


@kd.kernel
def many(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape):
        v = x[t]
        out[t] = (torch.floor(v) + torch.ceil(v) + torch.round(v) + torch.sign(v)
                  + torch.log1p(v.abs()) + torch.expm1(v) + F.softplus(v) + F.gelu(v)
                  + F.gelu(v, approximate="tanh") + v.masked_fill(v.isnan() | v.isinf(), 0.0)
                  + v.clamp_min(0.1) + v ** 2 + v // 0.75 + v % 0.75)
    return out


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                    reason="TRITON_INTERPRET=1: no GPU compiler in this process")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_elementwise_kernel_compiles_for_a_real_gpu(dtype: torch.dtype) -> None:
    gen = many.generated(E(37, 300, dtype=dtype), backend="triton", target="cuda")
    report = get("triton").verify(gen)
    assert report["ok"], report["error"]


def test_elementwise_kernel_compiles_for_a_real_tpu() -> None:
    r = many.check(E(256, 512), targets=["tpu-v5e"], measure_vmem=False)
    assert r.ok, r.table()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)  # TPUs have no f16
def test_elementwise_kernel_compiles_for_every_tpu(dtype: torch.dtype) -> None:
    r = many.check(E(256, 512, dtype=dtype), measure_vmem=False)
    assert r.ok, r.table()
