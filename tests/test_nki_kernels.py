"""The DSL kernels through the NKI backend on CPU, against PyTorch: ragged shapes, several
configs, bf16, and the paths the layout rules take (transposes for matmuls and for reductions
over the partition dim, contractions longer than 128, matmul N wider than one PSUM bank, loads of
more than 128 rows, carried values, integer outputs).

Each case runs through kernel_dsl's NKI interpreter, and also through AWS's `nki.simulate` when
the real NKI (>= 0.3) is installed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dsl_kernels import add_where, attention, layer_norm, matmul, softmax_rows, softmax_two_pass

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.lowering.nki.interp import TransposeExactnessWarning
from kernel_dsl.lowering.nki.runner import compile_for_torch, real_nki
from kernel_dsl.runtime_scalars import kernel_inputs

ENGINES = ["interp"] + (["nki"] if real_nki() is not None else [])
NKI = lowering.get("nki")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(kernel: kd.Kernel, args: tuple[Any, ...], cfg: kd.Config | None = None,
        engine: str = "interp", target: str = "trn2") -> torch.Tensor:
    ir = kernel.ir(*args)
    config = cfg if cfg is not None else NKI.default_config(ir, target)
    fn = compile_for_torch(NKI.render(ir, config, target), ir, engine)
    (out,) = fn(*kernel_inputs(args))  # tensors, and a float as its hidden [1, 1] input
    return out


def close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.dtype)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (16, 128), (37, 300)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128]), kd.Config([16, 256])])
def test_add_where(shape: tuple[int, int], cfg: kd.Config | None, engine: str) -> None:
    x, y = torch.randn(shape), torch.randn(shape)
    close(run(add_where, (x, y), cfg, engine), torch.where(x > y, x - y, 0.5 * y))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (29, 61, 130), (64, 256, 128), (131, 17, 257)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128, 8]), kd.Config([16, 128, 32]),
                                 kd.Config([32, 512, 128])])
def test_matmul_f32(mkn: tuple[int, int, int], cfg: kd.Config | None, engine: str) -> None:
    m, k, n = mkn
    x, y = torch.randn(m, k), torch.randn(k, n)
    close(run(matmul, (x, y), cfg, engine), x @ y, atol=1e-4, rtol=1e-4)


def test_matmul_bf16_accumulates_in_f32(engine: str) -> None:
    """bf16 in, PSUM accumulation in f32: one bf16 rounding of the exact result."""
    x = torch.randn(33, 300).to(torch.bfloat16)
    y = torch.randn(300, 70).to(torch.bfloat16)
    out = run(matmul, (x, y), kd.Config([16, 128, 128]), engine)
    exact = x.double() @ y.double()
    assert out.dtype == torch.bfloat16
    err = (out.double() - exact).abs() / (exact.abs() + 1e-2)
    assert err.max() < 2 ** -7, err.max()


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 200), (64, 1000)])
def test_softmax_rows(shape: tuple[int, int], engine: str) -> None:
    x = torch.randn(shape) * 5
    close(run(softmax_rows, (x,), None, engine), torch.softmax(x, -1))


@pytest.mark.parametrize("shape", [(1, 1), (3, 127), (37, 200), (16, 1024)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128, 128]), kd.Config([16, 256, 128]),
                                 kd.Config([128, 512, 2048])])
def test_softmax_two_pass(shape: tuple[int, int], cfg: kd.Config | None, engine: str) -> None:
    x = torch.randn(shape) * 5
    close(run(softmax_two_pass, (x,), cfg, engine), torch.softmax(x, -1))


def test_softmax_bf16(engine: str) -> None:
    x = (torch.randn(19, 260) * 4).to(torch.bfloat16)
    out = run(softmax_two_pass, (x,), kd.Config([16, 128, 128]), engine)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), atol=4e-3, rtol=1e-2)


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (64, 256)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8]), kd.Config([32])])
def test_layer_norm(shape: tuple[int, int], cfg: kd.Config | None, engine: str) -> None:
    x = torch.randn(shape) * 3 + 1
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    close(run(layer_norm, (x, w, b, 1e-5), cfg, engine), F.layer_norm(x, (shape[1],), w, b, 1e-5),
          atol=1e-4, rtol=1e-4)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    sq, skv = q.shape[2], k.shape[2]
    mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)  # bottom-right aligned
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.where(mask.any(-1)[:, None], out, torch.zeros(()))  # rows with no key: zeros


@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 8), (2, 3, 37, 50, 64), (1, 2, 64, 17, 32),
                                  (1, 1, 130, 130, 16)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cfg", [None, kd.Config([16, 16]), kd.Config([8, 32]), kd.Config([32, 8])])
def test_attention(dims: tuple[int, ...], causal: bool, cfg: kd.Config | None, engine: str) -> None:
    b, h, sq, skv, d = dims
    q, k, v = torch.randn(b, h, sq, d), torch.randn(b, h, skv, d), torch.randn(b, h, skv, d)
    close(run(attention, (q, k, v, causal), cfg, engine), _sdpa(q, k, v, causal), atol=2e-5,
          rtol=2e-5)


def test_attention_rows_without_keys_are_zero_not_nan(engine: str) -> None:
    q, k, v = torch.randn(1, 1, 20, 16), torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    out = run(attention, (q, k, v, True), kd.Config([8, 8]), engine)
    assert torch.isfinite(out).all() and (out[0, 0, :15] == 0).all()
    close(out, _sdpa(q, k, v, True), atol=2e-5, rtol=2e-5)


def test_attention_bf16(engine: str) -> None:
    q, k, v = (torch.randn(1, 2, 40, 64).to(torch.bfloat16) for _ in range(3))
    out = run(attention, (q, k, v, True), kd.Config([16, 16]), engine)
    assert out.dtype == torch.bfloat16
    want = _sdpa(q.float(), k.float(), v.float(), True)
    torch.testing.assert_close(out.float(), want, atol=3e-2, rtol=3e-2)


def test_attention_head_dim_over_128_contracts_in_blocks(engine: str) -> None:
    """d = 200 > 128: QK^T contracts over d in PSUM-accumulated blocks of 128 rows."""
    q, k, v = torch.randn(1, 1, 40, 200), torch.randn(1, 1, 50, 200), torch.randn(1, 1, 50, 200)
    close(run(attention, (q, k, v, False), kd.Config([16, 32]), engine), _sdpa(q, k, v, False),
          atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_every_target_runs(target: str) -> None:
    """On trn1 no NaN/Inf reaches a (non-exact) TensorE transpose: no TransposeExactnessWarning."""
    warnings.simplefilter("error", TransposeExactnessWarning)
    x, y = torch.randn(40, 70), torch.randn(70, 30)
    close(run(matmul, (x, y), None, "interp", target), x @ y, atol=1e-4, rtol=1e-4)
    q, k, v = torch.randn(1, 1, 20, 16), torch.randn(1, 1, 24, 16), torch.randn(1, 1, 24, 16)
    close(run(attention, (q, k, v, True), kd.Config([8, 16]), "interp", target),
          _sdpa(q, k, v, True), atol=2e-5, rtol=2e-5)


# -- kernels that take the other paths of the lowering -----------------------------------------
@kd.tpu_kernel
def iota(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.zeros([n, 2], dtype=torch.int32, device=x.device)
    for t in kd.tile(n):
        out[t, 0] = t.index
        out[t, 1] = t.index * 0 + t.begin
    return out


def test_tile_index_begin_and_zero_init_output(engine: str) -> None:
    out = run(iota, (torch.randn(300),), kd.Config([128]), engine)
    idx = torch.arange(300, dtype=torch.int32)
    assert torch.equal(out, torch.stack([idx, idx // 128 * 128], 1))


@kd.tpu_kernel
def carry(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        a = kd.zeros([tm], dtype=torch.float32)
        b = kd.full([tm], 1.0, dtype=torch.float32)
        for tn in kd.tile(n, block_size=128):
            a = a + x[tm, tn].sum(dim=-1)
            a, b = b, a  # swap every iteration
        out[tm, 0] = a
        out[tm, 1] = b
    return out


@pytest.mark.parametrize("n", [128, 256, 300])
def test_loop_carried_plain_assignment_and_swap(n: int, engine: str) -> None:
    x = torch.randn(9, n)
    want_a, want_b = torch.zeros(9), torch.ones(9)
    for j in range(0, n, 128):
        want_a = want_a + x[:, j:j + 128].sum(-1)
        want_a, want_b = want_b, want_a
    close(run(carry, (x,), kd.Config([8]), engine), torch.stack([want_a, want_b], 1),
          atol=1e-4, rtol=1e-4)


@kd.tpu_kernel
def carried_then_transposed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([2, y.shape[1]], dtype=x.dtype, device=x.device)
    for tc in kd.tile(n, block_size=16):
        acc = kd.zeros([tc, y.shape[1]], dtype=torch.float32)
        before = kd.zeros([y.shape[1]], dtype=torch.float32)
        for tm in kd.tile(m, block_size=16):
            before = before + acc.sum(dim=0)  # the carried value, transposed inside the loop
            acc = acc + x[tm, tc].T @ y[tm, :]
        out[0, :] = before
        out[1, :] = acc.sum(dim=0)  # ... and its final value, transposed after it
    return out


def test_a_carried_value_transposed_in_and_after_its_loop(engine: str) -> None:
    x, y = torch.randn(48, 16), torch.randn(48, 16)
    acc, before = torch.zeros(16, 16), torch.zeros(16)
    for j in range(0, 48, 16):
        before = before + acc.sum(0)
        acc = acc + x[j:j + 16].T @ y[j:j + 16]
    close(run(carried_then_transposed, (x, y), None, engine), torch.stack([before, acc.sum(0)]),
          atol=1e-4, rtol=1e-4)


@kd.tpu_kernel
def column_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for tn in kd.tile(n):
        out[tn] = x[:, tn].sum(dim=0)
    return out


@pytest.mark.parametrize("m", [100, 1000])
def test_reduction_over_the_partition_dim_transposes(m: int, engine: str) -> None:
    x = torch.randn(m, 70)
    close(run(column_sums, (x,), kd.Config([32]), engine), x.sum(0), atol=1e-3, rtol=1e-4)


@kd.tpu_kernel
def matmul_full_k(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, :] @ y[:, tn]
    return out


@pytest.mark.parametrize("mkn", [(20, 300, 100), (20, 64, 1100), (130, 257, 40)])
def test_matmul_over_whole_k_and_wide_n(mkn: tuple[int, int, int], engine: str) -> None:
    """K > 128 loaded in row blocks, N > 512 split over PSUM banks."""
    m, k, n = mkn
    x, y = torch.randn(m, k), torch.randn(k, n)
    close(run(matmul_full_k, (x, y), None, engine), x @ y, atol=1e-4, rtol=1e-4)


@kd.tpu_kernel
def elementwise_mix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        a, b = x[tm, tn], y[tm, tn]
        c = torch.where(a > 0, torch.exp2(a) - torch.sigmoid(b), -torch.abs(b) * torch.tanh(a))
        d = torch.where(b < a, c, a)
        out[tm, tn] = (d / (1.0 + b * b) + torch.relu(a) ** 2 - torch.rsqrt(b * b + 1.0)
                       + torch.sqrt(torch.abs(a)) + torch.log(b * b + 2.0))
    return out


def test_elementwise_ops(engine: str) -> None:
    x, y = torch.randn(37, 100), torch.randn(37, 100)
    c = torch.where(x > 0, torch.exp2(x) - torch.sigmoid(y), -torch.abs(y) * torch.tanh(x))
    d = torch.where(y < x, c, x)
    want = (d / (1.0 + y * y) + torch.relu(x) ** 2 - torch.rsqrt(y * y + 1.0)
            + torch.sqrt(torch.abs(x)) + torch.log(y * y + 2.0))
    close(run(elementwise_mix, (x, y), kd.Config([16, 64]), engine), want)


# -- routes ----------------------------------------------------------------------------------
def test_kd_backend_nki_runs_on_cpu_through_the_interpreter() -> None:
    k = kd.tpu_kernel(add_where.fn)  # fresh ops and caches
    x, y = torch.randn(20, 30), torch.randn(20, 30)
    with kd.backend("nki"):
        assert k.backend_name() == "nki"
        out = k(x, y)
    close(out, torch.where(x > y, x - y, 0.5 * y))
    assert all(key[0] == "nki" for key in k._compiled), list(k._compiled)
    assert "@nki.jit" in k.source(x, y, backend="nki")


def test_kd_backend_nki_under_torch_compile() -> None:
    k = kd.tpu_kernel(matmul.fn)
    x, y = torch.randn(20, 30), torch.randn(30, 10)
    torch._dynamo.reset()
    with kd.backend("nki"):
        f = torch.compile(lambda a, b: k(a, b) * 2.0, fullgraph=True, backend="aot_eager")
        out = f(x, y)
    close(out, (x @ y) * 2.0, atol=1e-4, rtol=1e-4)


def test_kd_backend_environment_variable() -> None:
    code = ("import torch, sys; sys.path.insert(0, 'tests'); from dsl_kernels import softmax_rows;"
            "x = torch.randn(5, 40); out = softmax_rows(x);"
            "assert softmax_rows.backend_name() == 'nki';"
            "assert ('nki',) == tuple({k[0] for k in softmax_rows._compiled});"
            "torch.testing.assert_close(out, torch.softmax(x, -1)); print('ok')")
    env = dict(os.environ, KD_BACKEND="nki")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
