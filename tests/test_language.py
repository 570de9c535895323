"""Language features beyond the DSL test kernels: named block sizes, int indexing, kd.dot,
tile attributes, backend selection, the CLI and the JAX entry point."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from dsl_kernels import matmul

import kernel_dsl as kd


@kd.tpu_kernel
def shared_block(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Two loops share one named block size."""
    m, n = x.shape
    bn = kd.block_size("block_n", choices=[128, 256])
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m, block_size=8):
        s = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n, block_size=bn):
            s = s + x[tm, tn].sum(dim=1)
        for tn in kd.tile(n, block_size=bn):
            s = s + y[tm, tn].amax(dim=1)
        out[tm] = s
    return out


def test_named_block_size_is_one_knob_shared_by_two_loops() -> None:
    x, y = torch.randn(10, 300), torch.randn(10, 300)
    ir = shared_block.ir(x, y)
    assert [s.name for s in ir.free_syms] == ["block_n"]
    space = shared_block.configs(x, y)
    assert [c.knobs["block_n"] for c in space] == [128, 128, 256, 256]  # x loop_mode
    for cfg in space:
        b = cfg.knobs["block_n"]
        want = x.sum(1) + sum(y[:, j:j + b].amax(1) for j in range(0, 300, b))
        (out,) = shared_block.run_cpu("pallas", (x, y), cfg)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    with pytest.raises(kd.ConfigError, match="block_n"):
        shared_block.source(x, y, config=kd.Config([], block_n=64))


@kd.tpu_kernel
def int_index_and_dot(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`x[2, tm, :]` (an int index) and `kd.dot(a, b, acc=...)` with an explicit accumulator."""
    _, m, k = x.shape
    n = w.shape[1]
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.full([tm, tn], 1.0, dtype=torch.float32)
        out[tm, tn] = kd.dot(x[2, tm, :], w[:, tn], acc=acc)
    return out


def test_int_index_and_explicit_accumulator() -> None:
    x, w = torch.randn(3, 20, 33), torch.randn(33, 140)
    (out,) = int_index_and_dot.run_cpu("pallas", (x, w), kd.Config([8, 128]))
    torch.testing.assert_close(out, x[2] @ w + 1.0, atol=1e-4, rtol=1e-4)


@kd.tpu_kernel
def tile_attrs(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty([n], dtype=torch.float32, device=x.device)
    for t in kd.tile(n):
        out[t] = x[t] * 0 + t.id * 1000 + t.size + t.index.float() / 10000
    return out


def test_tile_id_size_index() -> None:
    (out,) = tile_attrs.run_cpu("pallas", (torch.randn(2500),), kd.Config([1024]))
    i = torch.arange(2500)
    torch.testing.assert_close(out, (i // 1024) * 1000.0 + 1024 + i / 10000)


def test_backend_context_and_unknown_backend() -> None:
    x, y = torch.randn(8, 16), torch.randn(16, 8)
    with kd.backend("pallas"):
        torch.testing.assert_close(matmul(x, y), x @ y, atol=1e-4, rtol=1e-4)
    with pytest.raises(kd.BackendError, match="available backends"):
        kd.backend("cuda-magic")


def test_kd_backend_environment_variable() -> None:
    code = ("import kernel_dsl as kd, torch\n"
            "@kd.kernel\n"
            "def f(x: torch.Tensor) -> torch.Tensor:\n"
            "    out = torch.empty_like(x)\n"
            "    for t in kd.tile(x.shape[0]):\n"
            "        out[t] = x[t] + 1\n"
            "    return out\n"
            "print(f.backend_name())\n"
            "f(torch.zeros(4))\n")
    env = dict(os.environ, KD_BACKEND="nosuch")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.stdout.strip() == "nosuch"
    assert "unknown backend 'nosuch'" in r.stderr
    env["KD_BACKEND"] = "pallas"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "pallas", r.stderr


def test_decorator_config_is_used() -> None:
    @kd.tpu_kernel(config=kd.Config([16]))
    def double(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t, :] = x[t, :] * 2
        return out

    x = torch.randn(40, 128)
    assert "Config(block_sizes=[16])" in double.source(x)
    assert "grid=(3,)" in double.source(x)
    torch.testing.assert_close(double(x), x * 2)


def test_jax_entry_point() -> None:
    import jax.numpy as jnp

    a = np.random.default_rng(0).standard_normal((30, 20), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((20, 10), dtype=np.float32)
    out = matmul.jax(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(out), a @ b, atol=1e-4, rtol=1e-4)


def test_cli_show_prints_ir_and_source() -> None:
    path = os.path.join(os.path.dirname(__file__), "dsl_kernels.py")
    r = subprocess.run([sys.executable, "-m", "kernel_dsl", "show", f"{path}:matmul", "--shapes",
                        "100x37:bf16", "37x50:bf16", "--config",
                        '{"block_sizes": [64, 128, 128], "loop_mode": "inner"}'],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "kernel matmul(x: bf16[100, 37], y: bf16[37, 50]) -> (out)" in r.stdout
    assert "loop tk = tile(37, B2)" in r.stdout
    assert "i_tk = 0  # one block: the loop body once, inline" in r.stdout  # 37 <= 128
    assert "# src: dsl_kernels.py:" in r.stdout


def test_cli_reports_kernel_errors_without_traceback() -> None:
    path = os.path.join(os.path.dirname(__file__), "dsl_kernels.py")
    r = subprocess.run([sys.executable, "-m", "kernel_dsl", "show", f"{path}:matmul", "--shapes",
                        "10x7", "8x5"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "ShapeError" in r.stderr and "dsl_kernels.py:" in r.stderr
    assert "Traceback" not in r.stderr


@kd.kernel
def two_outputs(x: torch.Tensor):
    a = torch.empty_like(x)
    b = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        a[t] = x[t] + 1
        b[t] = x[t] * 2
    return b, a  # not the allocation order


@pytest.mark.parametrize("backend", kd.lowering.names())
def test_outputs_come_back_in_return_order(backend: str) -> None:
    x = torch.randn(300)
    with kd.backend(backend):
        b, a = two_outputs(x)
    assert torch.equal(b, x * 2) and torch.equal(a, x + 1)


@kd.kernel
def positive_mask(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape):
        out[t] = torch.where(x[t] > 0, 1.0, 0.0)  # both branches scalars
    return out


@pytest.mark.parametrize("backend", kd.lowering.names())
def test_where_with_two_scalar_branches(backend: str) -> None:
    x = torch.randn(37, 300)
    with kd.backend(backend):
        assert torch.equal(positive_mask(x), (x > 0).float())


@kd.kernel
def _aliased_accumulator(x: torch.Tensor):
    m, n = x.shape
    out = torch.empty([m, 1], dtype=torch.float32)
    for tm in kd.tile(m):
        a = kd.full([tm, 1], 1.0, dtype=torch.float32)
        b = a  # two names, one value; only `b` changes in the loop
        for tk in kd.tile(n, block_size=8):  # several iterations
            b = b + x[tm, tk].sum(-1, keepdim=True) * a
        out[tm, :] = b + a
    return out


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_a_name_sharing_a_carried_value_keeps_its_own(backend: str) -> None:
    """`b = a` before a loop that rebinds only `b`: reads of `a` in the body stay `a`."""
    x = torch.randn(6, 37)
    with kd.backend(backend):
        got = _aliased_accumulator(x)
    torch.testing.assert_close(got, 2 + x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)
