"""Semantics that match torch (issue 16): NaN through max/min, integer wrap-around, and kernels
that read module globals or closure variables re-trace when those change."""
from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch

import kernel_dsl as kd

BACKENDS = ["pallas", "triton", "nki"]
# the Triton interpreter's NumPy reductions warn on the all-NaN test columns
pytestmark = pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")
NAN = math.nan


# -- NaN propagation in max/min ---------------------------------------------------------------
@kd.tpu_kernel
def col_max_min(x: torch.Tensor):
    """amax/amin over dim 0 (the rows), and torch.max/min(x) of a whole block."""
    m, n = x.shape
    mx = torch.empty([n], dtype=x.dtype, device=x.device)
    mn = torch.empty([n], dtype=x.dtype, device=x.device)
    for tn in kd.tile(n):
        v = x[:, tn]
        mx[tn] = v.amax(dim=0)
        mn[tn] = torch.amin(v, dim=0)
    return mx, mn


@kd.tpu_kernel
def row_max_min(x: torch.Tensor):
    """amax/amin over dim 1 (the columns)."""
    m, n = x.shape
    mx = torch.empty([m], dtype=x.dtype, device=x.device)
    mn = torch.empty([m], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        v = x[tm, :]
        mx[tm] = torch.amax(v, dim=1)
        mn[tm] = v.amin(dim=1)
    return mx, mn


@kd.tpu_kernel
def elementwise_max_min(x: torch.Tensor, y: torch.Tensor):
    m, n = x.shape
    mx = torch.empty_like(x)
    mn = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        a, b = x[tm, tn], y[tm, tn]
        mx[tm, tn] = torch.maximum(a, b)
        mn[tm, tn] = a.min(b)
    return mx, mn


def _nan_columns(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """[rows, cols]: column 0/1/2 has a NaN in the first/middle/last row, 3 is all NaN, 4 holds
    -inf and one NaN, 5 is all -inf, 6 all +inf with a NaN; the rest have no NaN."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, cols, generator=g)
    x[0, 0] = NAN
    x[rows // 2, 1] = NAN
    x[rows - 1, 2] = NAN
    x[:, 3] = NAN
    x[:, 4] = -math.inf
    x[rows // 3, 4] = NAN
    x[:, 5] = -math.inf
    x[:, 6] = math.inf
    x[rows - 1, 6] = NAN
    return x.to(dtype)


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("rows", [1, 15, 16, 17, 300])
def test_max_min_reductions_propagate_nan(backend: str, dtype: torch.dtype, rows: int) -> None:
    # 128 wide: XLA-CPU's vectorized reduce-max drops NaN from 32 rows on at this width
    x = _nan_columns(rows, 128, dtype)
    try:
        mx, mn = col_max_min.run_cpu(backend, (x,))
        _same(mx, x.amax(0))
        _same(mn, x.amin(0))
    except kd.ConfigError as e:  # a clear error is fine, a wrong answer is not
        assert backend == "nki" and rows > 128 and "partitions" in str(e)
    xt = x.T.contiguous()
    mx, mn = row_max_min.run_cpu(backend, (xt,))
    _same(mx, xt.amax(1))
    _same(mn, xt.amin(1))


def test_max_reduction_propagates_nan_in_faithful_interpret_mode() -> None:
    x = _nan_columns(300, 128, torch.float32)
    with kd.interpret_mode("faithful"):
        mx, mn = col_max_min.run_cpu("pallas", (x,))
    _same(mx, x.amax(0))
    _same(mn, x.amin(0))


def test_pallas_restores_nan_where_xla_cpu_drops_it_only() -> None:
    """The CPU rendering (interpret mode on XLA:CPU) checks for NaN; TPU renderings do not:
    Mosaic's maximumf/minimumf reductions propagate it (lowering/pallas/render.py)."""
    x = torch.randn(300, 128)
    assert "jnp.isnan(" in col_max_min.source(x, backend="pallas")
    assert "jnp.isnan(" not in col_max_min.source(x, backend="pallas", target="tpu-v5e")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_elementwise_maximum_minimum_propagate_nan(backend: str, dtype: torch.dtype) -> None:
    x, y = torch.randn(40, 130), torch.randn(40, 130)
    x[::3, ::7] = NAN
    y[1::5, ::3] = NAN
    x[2, :] = -math.inf
    x, y = x.to(dtype), y.to(dtype)
    mx, mn = elementwise_max_min.run_cpu(backend, (x, y))
    _same(mx, torch.maximum(x, y))
    _same(mn, torch.minimum(x, y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_of_a_row_with_nan_is_nan(backend: str) -> None:
    from kernel_dsl.kernels.softmax import softmax_fwd, softmax_fwd_streamed

    x = torch.randn(20, 700)
    x[3, 5] = NAN
    x[7, 699] = NAN
    want = torch.softmax(x, -1)
    (got,) = softmax_fwd.run_cpu(backend, (x,))
    torch.testing.assert_close(got, want, equal_nan=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got,) = softmax_fwd_streamed.run_cpu(backend, (x,), kd.Config([8, 128, 128]))
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got[3].isnan().all() and got[7].isnan().all() and not got[0].isnan().any()


# -- integer wrap-around ----------------------------------------------------------------------
@kd.tpu_kernel
def int_arith(x: torch.Tensor, y: torch.Tensor):
    m, n = x.shape
    s, d, p = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    k, ng = torch.empty_like(x), torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        a, b = x[tm, tn], y[tm, tn]
        s[tm, tn] = a + b
        d[tm, tn] = a - b
        p[tm, tn] = a * b
        k[tm, tn] = a * 3 + 100  # with Python scalars
        ng[tm, tn] = -a
    return s, d, p, k, ng


@kd.tpu_kernel
def int_narrow(x: torch.Tensor):
    (n,) = x.shape
    i8 = torch.empty([n], dtype=torch.int8, device=x.device)
    u8 = torch.empty([n], dtype=torch.uint8, device=x.device)
    i16 = torch.empty([n], dtype=torch.int16, device=x.device)
    for t in kd.tile(n):
        v = x[t]
        i8[t] = v.to(torch.int8)
        u8[t] = v.to(torch.uint8)
        i16[t] = v.to(torch.int16)
    return i8, u8, i16


def _extremes(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of the dtype's extreme values: x[i, j] = e[i], y[i, j] = e[j]."""
    info = torch.iinfo(dtype)
    lo = [info.min, info.min + 1, -2, -1] if info.min < 0 else []
    e = torch.tensor(lo + [0, 1, 2, 3, info.max // 2 + 1, info.max - 1, info.max], dtype=torch.int64)
    n = len(e)
    return e[:, None].expand(n, n).to(dtype).contiguous(), e[None, :].expand(n, n).to(dtype).contiguous()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32],
                         ids=["i8", "u8", "i16", "i32"])
def test_integer_overflow_wraps_as_in_torch(backend: str, dtype: torch.dtype) -> None:
    x, y = _extremes(dtype)
    got = int_arith.run_cpu(backend, (x, y))
    want = (x + y, x - y, x * y, x * 3 + 100, -x)
    for name, g, w in zip(["a + b", "a - b", "a * b", "a * 3 + 100", "-a"], got, want):
        assert torch.equal(g, w), f"{name}: {g.tolist()} != {w.tolist()}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_narrowing_integer_casts_wrap_as_in_torch(backend: str) -> None:
    x = torch.tensor([-2**31, -32769, -32768, -129, -128, -1, 0, 127, 128, 255, 256, 300,
                      32767, 32768, 65535, 2**31 - 1], dtype=torch.int32)
    got = int_narrow.run_cpu(backend, (x,))
    for g, dt in zip(got, [torch.int8, torch.uint8, torch.int16]):
        assert torch.equal(g, x.to(dt)), f"{dt}: {g.tolist()} != {x.to(dt).tolist()}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_flash_attention_rows_that_see_a_nan_are_nan(backend: str) -> None:
    from kernel_dsl.kernels import flash_attention

    q, k, v = torch.randn(1, 2, 40, 16), torch.randn(1, 2, 300, 16), torch.randn(1, 2, 300, 16)
    q[0, 0, 3, 5] = NAN  # one query row
    k[0, 1, 250, 0] = NAN  # one key: every row of head 1 sees it (not causal)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    with kd.backend(backend):
        got = flash_attention(q, k, v)
    torch.testing.assert_close(got, want, equal_nan=True, atol=2e-5, rtol=2e-5)
    assert got[0, 0, 3].isnan().all() and got[0, 1].isnan().all() and not got[0, 0, 4].isnan().any()


# -- globals and closure variables ------------------------------------------------------------
SCALE = 2.0
STEPS = 2
UNUSED = 5


def _shift(v: Any) -> Any:  # a helper the kernel calls: its globals count too
    return v + SCALE


@kd.tpu_kernel
def scaled(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        acc = x[t] * SCALE
        for _ in range(STEPS):  # a global loop bound
            acc = acc + 1.0
        out[t] = _shift(acc)
    return out


def _closure_kernel(offset: float) -> Any:
    @kd.tpu_kernel
    def shifted(x: torch.Tensor) -> torch.Tensor:
        (n,) = x.shape
        out = torch.empty_like(x)
        for t in kd.tile(n):
            out[t] = x[t] + offset
        return out

    def set_offset(v: float) -> None:
        nonlocal offset
        offset = v

    return shifted, set_offset


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_changed_global_re_traces(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.arange(8.0)
    with kd.backend(backend):
        torch.testing.assert_close(scaled(x), x * 2 + 2 + 2)
        stats = dict(scaled.stats)
        torch.testing.assert_close(scaled(x), x * 2 + 2 + 2)  # unchanged: the cached build
        monkeypatch.setattr(__import__(__name__), "UNUSED", 6)  # not read by the kernel
        scaled(x)
        assert scaled.stats == stats
        monkeypatch.setattr(__import__(__name__), "SCALE", 3.0)
        torch.testing.assert_close(scaled(x), x * 3 + 2 + 3)
        monkeypatch.setattr(__import__(__name__), "STEPS", 5)
        torch.testing.assert_close(scaled(x), x * 3 + 5 + 3)
        monkeypatch.setattr(__import__(__name__), "SCALE", 3)  # an int now: the same value
        torch.testing.assert_close(scaled(x), x * 3 + 5 + 3)
        # three new builds (traces are shared by the backends: the first backend made them)
        assert scaled.stats["compiles"] == stats["compiles"] + 3
        monkeypatch.undo()
        torch.testing.assert_close(scaled(x), x * 2 + 2 + 2)  # back: the first build again
        assert scaled.stats["compiles"] == stats["compiles"] + 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_changed_closure_variable_re_traces(backend: str) -> None:
    shifted, set_offset = _closure_kernel(1.0)
    x = torch.arange(8.0)
    with kd.backend(backend):
        torch.testing.assert_close(shifted(x), x + 1)
        set_offset(-4.0)
        torch.testing.assert_close(shifted(x), x - 4)
        shifted(x)
    assert shifted.stats["traces"] == 2


def test_kernel_ir_follows_globals(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.arange(8.0)
    loops = len([op for op in scaled.ir(x).body.ops if op.kind == "add"])
    monkeypatch.setattr(__import__(__name__), "STEPS", STEPS + 3)
    assert len([op for op in scaled.ir(x).body.ops if op.kind == "add"]) != loops
