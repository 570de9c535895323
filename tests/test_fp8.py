"""float8 (e4m3fn, e5m2) tiles: load, store, cast both ways as torch converts (ties to even;
e4m3fn saturating at +-448, e5m2 overflowing to inf), and matmuls with f32 accumulation, on the
backends that have them; arithmetic on float8 is a clear error, as in torch. The real TPU
compiler decides which generations take float8 matmul operands."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import KernelError
from kernel_dsl.lowering import get
from kernel_dsl.lowering.nki.runner import compile_for_torch
from kernel_dsl.runtime_scalars import kernel_inputs

F8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# NKI's float8_e4m3fn is a NeuronCore-v4 type: trn3 (the CPU path models trn2)
BACKENDS = ("pallas", "triton", "nki-trn3")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def call(backend: str, kernel: kd.Kernel, *args: Any) -> Any:
    if backend == "nki-trn3":
        nki = get("nki")
        ir = kernel.ir(*args)
        fn = compile_for_torch(nki.render(ir, nki.default_config(ir, "trn3"), "trn3"), ir)
        outs = fn(*kernel_inputs(args))
        return outs[0] if len(outs) == 1 else outs
    with kd.backend(backend):
        return kernel(*args)


@kd.kernel
def to_f8(x: torch.Tensor, h: torch.Tensor):
    a = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    b = torch.empty(x.shape, dtype=torch.float8_e5m2, device=x.device)
    c = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    for t in kd.tile(x.shape):
        a[t] = x[t].to(torch.float8_e4m3fn)
        b[t] = x[t].to(torch.float8_e5m2)
        c[t] = h[t]  # a casting store, from bf16
    return a, b, c


@kd.kernel
def from_f8(a: torch.Tensor, b: torch.Tensor):
    fa = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    hb = torch.empty(b.shape, dtype=torch.bfloat16, device=b.device)
    for t in kd.tile(a.shape):
        fa[t] = a[t].float()
        hb[t] = b[t].to(torch.bfloat16)
    return fa, hb


def _hard_values() -> torch.Tensor:
    """Every finite float8 value of both formats, the midpoints between neighbours and the f32
    values just either side of them, specials, and random values at several scales."""
    every = torch.cat([torch.arange(256, dtype=torch.uint8).view(d).float() for d in F8])
    grid = every[every.isfinite()].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    up, down = torch.tensor(float("inf")), torch.tensor(-float("inf"))
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0,
                            465.0, 1e6, -1e6, 57344.0, 61439.0, 61440.0, 1e-10, 2.0**-10])
    x = torch.cat([grid, mids, mids.nextafter(up), mids.nextafter(down), special,
                   torch.randn(3000) * 100, torch.randn(3000) * 1e-3])
    return x[: x.numel() // 64 * 64].reshape(-1, 64)


def _same(got: torch.Tensor, ref: torch.Tensor) -> None:
    g, r = got.float(), ref.float()
    assert got.dtype == ref.dtype
    bad = ~((g == r) | (g.isnan() & r.isnan()))
    assert not bad.any(), (g[bad][:5].tolist(), r[bad][:5].tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_casts_into_float8_round_as_torch(backend: str) -> None:
    x = _hard_values()
    h = x.to(torch.bfloat16)
    a, b, c = call(backend, to_f8, x, h)
    _same(a, x.to(torch.float8_e4m3fn))
    _same(b, x.to(torch.float8_e5m2))
    _same(c, h.to(torch.float8_e4m3fn))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float8_values_widen_exactly(backend: str) -> None:
    bits = torch.arange(256, dtype=torch.uint8).repeat(4).reshape(16, 64)
    a, b = bits.view(torch.float8_e4m3fn), bits.view(torch.float8_e5m2)
    fa, hb = call(backend, from_f8, a, b)
    _same(fa, a.float())
    _same(hb, b.to(torch.bfloat16))


@kd.kernel
def f8_matmul(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty([m, n], dtype=torch.bfloat16, device=a.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += a[tm, tk] @ b[tk, tn]
        out[tm, tn] = (acc * scale).to(torch.bfloat16)
    return out


@kd.kernel
def f8_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty([a.shape[0], b.shape[1]], dtype=torch.float32, device=a.device)
    for tm, tn in kd.tile(out.shape):
        out[tm, tn] = a[tm, :] @ b[:, tn]  # float8 @ float8 -> f32
    return out


@pytest.mark.parametrize("dtypes", [(torch.float8_e4m3fn,) * 2, (torch.float8_e5m2,) * 2],
                         ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_float8_matmul_accumulates_in_f32(backend: str, dtypes: tuple[torch.dtype, ...]) -> None:
    a = (torch.randn(37, 70) * 2).to(dtypes[0])  # ragged everywhere: K pads must be zeros
    b = (torch.randn(70, 45) * 2).to(dtypes[1])
    ref = a.float() @ b.float()
    got, prod = call(backend, f8_matmul, a, b, 0.5), call(backend, f8_product, a, b)
    torch.testing.assert_close(got, (ref * 0.5).to(torch.bfloat16), atol=1e-2, rtol=1e-2)
    assert prod.dtype == torch.float32
    torch.testing.assert_close(prod, ref, atol=1e-3, rtol=1e-5)


def test_nki_e5m2_runs_on_trn2_and_e4m3fn_is_a_clear_error_there() -> None:
    a = (torch.randn(37, 70) * 2).to(torch.float8_e5m2)
    with kd.backend("nki"):  # the CPU path's trn2
        torch.testing.assert_close(f8_product(a, a.T.contiguous()), a.float() @ a.float().T,
                                   atol=1e-3, rtol=1e-5)
        with pytest.raises(KernelError, match="trn2 .NeuronCore-v3. has no float8_e4m3fn") as e:
            f8_product(a.float().to(torch.float8_e4m3fn), a.T.float().to(torch.float8_e4m3fn))
    assert "target trn3" in str(e.value)


def test_arithmetic_on_float8_is_a_clear_error() -> None:
    @kd.kernel
    def add8(a: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        for t in kd.tile(a.shape):
            out[t] = a[t] + a[t]
        return out

    with pytest.raises(KernelError, match="float8 is a storage format") as e:
        add8(torch.zeros(8, 8, dtype=torch.float8_e4m3fn))
    assert "x.float()" in str(e.value) and "test_fp8.py" in str(e.value)


@pytest.mark.slow
def test_the_real_tpu_compiler_takes_float8_matmuls_from_v5e_on() -> None:
    a = torch.randn(256, 256).to(torch.float8_e4m3fn)
    report = f8_matmul.check(a, a, 1.0, targets=["tpu-v5e", "tpu-v6e", "tpu-v7x"],
                             measure_vmem=False)
    assert [e.status for e in report.entries] == ["ok"] * 3, report
    with pytest.raises(KernelError, match="tpu-v4 cannot multiply f8e4m3fn") as e:
        f8_matmul.check(a, a, 1.0, targets=["tpu-v4"], measure_vmem=False)
    assert "bfloat16" in str(e.value)
