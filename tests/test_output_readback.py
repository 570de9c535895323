"""Reading back an output a grid program stored in an earlier loop (kernel_dsl/readback.py):
Helion's examples/squeeze_and_excitation_net.py ported by renaming, on every backend, every
config, ragged sizes; fuzzed; and the reads that stay errors."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor

import kernel_dsl as kd
from kernel_dsl.errors import KernelSyntaxError
from kernel_dsl.testing import fuzz

BACKENDS = ["pallas", "triton", "nki"]
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- Helion's examples/squeeze_and_excitation_net.py (kernels as they are there, renamed) -------
@kd.kernel(
    # static_shapes=True gives a performance boost for matmuls
    static_shapes=True,
)
def squeeze_and_excitation_net_fwd(
    x: Tensor, a: Tensor, b: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    m, n = x.size()
    k = a.size(1)

    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    c = torch.empty([m, k], dtype=x.dtype, device=x.device)
    d = torch.empty([m, n], dtype=x.dtype, device=x.device)

    for tile_m in kd.tile(m):
        # Compute c = relu(x @ a) for this tile_m
        for tile_k in kd.tile(k):
            partial_xa = x[tile_m, :] @ a[:, tile_k]
            c[tile_m, tile_k] = torch.relu(partial_xa)

        # Compute d = sigmoid(c @ b) and out = x * d for this tile_m
        for tile_n in kd.tile(n):
            acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
            for tile_k in kd.tile(k):
                acc = torch.addmm(acc, c[tile_m, tile_k], b[tile_k, tile_n])
            d[tile_m, tile_n] = torch.sigmoid(acc)
            out[tile_m, tile_n] = x[tile_m, tile_n] * d[tile_m, tile_n]

    return out, c, d


@kd.kernel(static_shapes=True)
def squeeze_and_excitation_net_bwd_dx(
    grad_out: Tensor, x: Tensor, a: Tensor, b: Tensor, c: Tensor, d: Tensor
) -> Tensor:
    m, n = x.size()
    k = a.size(1)

    grad_x = torch.empty([m, n], dtype=x.dtype, device=x.device)

    for tile_m, tile_n in kd.tile([m, n]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
        acc += grad_out[tile_m, tile_n] * d[tile_m, tile_n]

        for tile_k in kd.tile(k):
            grad_to_d = (
                grad_out[tile_m, :] * x[tile_m, :] * d[tile_m, :] * (1.0 - d[tile_m, :])
            )
            grad_to_c = grad_to_d @ b[tile_k, :].T
            grad_c_masked = grad_to_c * (c[tile_m, tile_k] > 0)
            acc = torch.addmm(acc, grad_c_masked, a[tile_n, tile_k].T)

        grad_x[tile_m, tile_n] = acc

    return grad_x


@kd.kernel(static_shapes=True)
def squeeze_and_excitation_net_bwd_da(
    grad_out: Tensor, x: Tensor, b: Tensor, c: Tensor, d: Tensor
) -> Tensor:
    m, n = x.size()
    k = c.size(1)

    grad_a = torch.empty([n, k], dtype=x.dtype, device=x.device)

    for tile_n, tile_k in kd.tile([n, k]):
        acc_a = kd.zeros([tile_n, tile_k], dtype=torch.float32)
        for tile_m in kd.tile(m):
            grad_to_d = grad_out[tile_m, :] * x[tile_m, :]
            grad_to_cb = grad_to_d * d[tile_m, :] * (1.0 - d[tile_m, :])
            grad_to_c = grad_to_cb @ b[tile_k, :].T
            grad_through_relu = grad_to_c * (c[tile_m, tile_k] > 0)
            acc_a = torch.addmm(acc_a, x[tile_m, tile_n].T, grad_through_relu)
        grad_a[tile_n, tile_k] = acc_a

    return grad_a


@kd.kernel(static_shapes=True)
def squeeze_and_excitation_net_bwd_db(
    grad_out: Tensor, x: Tensor, d: Tensor, c: Tensor
) -> Tensor:
    m, n = grad_out.size()
    k = c.size(1)
    grad_b = torch.empty([k, n], dtype=grad_out.dtype, device=grad_out.device)

    for tile_k, tile_n in kd.tile([k, n]):
        acc = kd.zeros([tile_k, tile_n], dtype=torch.float32)
        for tile_m in kd.tile(m):
            grad_d = (
                grad_out[tile_m, tile_n]
                * x[tile_m, tile_n]
                * d[tile_m, tile_n]
                * (1.0 - d[tile_m, tile_n])
            )
            acc = torch.addmm(acc, c[tile_m, tile_k].T, grad_d)
        grad_b[tile_k, tile_n] = acc

    return grad_b


def squeeze_and_excitation_net_pytorch(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return torch.mul(x, torch.sigmoid(torch.relu(x @ a) @ b))


class SqueezeAndExcitationNetFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a, b):  # type: ignore[no-untyped-def, override]
        out, c, d = squeeze_and_excitation_net_fwd(x, a, b)
        ctx.save_for_backward(x, a, b, c, d)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[no-untyped-def, override]
        x, a, b, c, d = ctx.saved_tensors
        grad_x = squeeze_and_excitation_net_bwd_dx(grad_out, x, a, b, c, d)
        grad_a = squeeze_and_excitation_net_bwd_da(grad_out, x, b, c, d)
        grad_b = squeeze_and_excitation_net_bwd_db(grad_out, x, d, c)
        return grad_x, grad_a, grad_b


# -- tests ---------------------------------------------------------------------------------------
def _want(x: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    x, a, b = x.float(), a.float(), b.float()
    c = torch.relu(x @ a)
    d = torch.sigmoid(c @ b)
    return x * d, c, d


def _configs(backend: str, args: tuple, every: bool) -> list:
    space = list(squeeze_and_excitation_net_fwd.configs(*args, backend=backend))
    step = 1 if every else {"pallas": 4, "triton": 12, "nki": 1}[backend]
    return space[::step]  # triton, 72: each warps/stages pair; pallas, 32: each block size


SHAPES = [(13, 150, 200), (1, 1, 1), (37, 5, 3), pytest.param((13, 150, 201, "every"),
                                                                marks=pytest.mark.slow)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_every_config_matches_torch(backend: str, shape) -> None:
    m, n, k = shape[:3]
    torch.manual_seed(0)
    x, a, b = torch.randn(m, n), torch.randn(n, k) / 8, torch.randn(k, n) / 8
    want = _want(x, a, b)
    for cfg in _configs(backend, (x, a, b), len(shape) == 4 or m * n * k < 1000):
        got = squeeze_and_excitation_net_fwd.compiled(backend, (x, a, b), cfg)(x, a, b)
        for g, w, name in zip(got, want, ("out", "c", "d")):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=f"{name} {cfg}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_half_inputs(backend: str, dtype: torch.dtype) -> None:
    """Helion's check() runs HALF_DTYPE: c is stored in 16 bits and read back as stored."""
    x, a, b = (torch.randn(29, 70) / 2).to(dtype), (torch.randn(70, 33) / 8).to(dtype), \
        (torch.randn(33, 70) / 8).to(dtype)
    with kd.backend(backend):
        out, c, d = squeeze_and_excitation_net_fwd(x, a, b)
    assert out.dtype == c.dtype == d.dtype == dtype
    c_want = torch.relu(x.float() @ a.float())
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(c.float(), c_want, rtol=tol, atol=tol)
    d_want = torch.sigmoid(c.float() @ b.float())  # from c as the kernel stored it
    torch.testing.assert_close(d.float(), d_want, rtol=tol, atol=tol)
    torch.testing.assert_close(out.float(), x.float() * d.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_backward_match_torch_autograd(backend: str) -> None:
    torch.manual_seed(1)
    x, a, b = torch.randn(19, 40), torch.randn(40, 11) / 4, torch.randn(11, 40) / 4
    ins = [t.clone().requires_grad_(True) for t in (x, a, b)]
    refs = [t.clone().requires_grad_(True) for t in (x, a, b)]
    g = torch.randn(19, 40)
    with kd.backend(backend):
        out = SqueezeAndExcitationNetFunction.apply(*ins)
        out.backward(g)
    ref = squeeze_and_excitation_net_pytorch(*refs)
    ref.backward(g)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for got, want in zip(ins, refs):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


def test_fuzz_forward() -> None:
    res = fuzz(squeeze_and_excitation_net_fwd, lambda x, a, b: _want(x, a, b),
               "x[m,n], a[n,k], b[k,n]", dtypes=("f32",), configs=2,
               dims={"m": (1, 40), "n": (1, 160), "k": (1, 140)}, max_examples=6, seed=0)
    assert res.failures == 0 and res.examples >= 6, res  # a failure raises, with a snippet
    assert {b for b, _ in res.cells} == set(BACKENDS)


def test_ir_marks_the_read_back_loads_and_forwards_the_stored_block() -> None:
    x, a, b = torch.randn(5, 7), torch.randn(7, 3), torch.randn(3, 7)
    ir = squeeze_and_excitation_net_fwd.ir(x, a, b)
    back = [op.attrs["tensor"].name for op in ir.body.walk()
            if op.kind == "load" and op.attrs.get("readback")]
    # c is read back; `d[tile_m, tile_n]` right after its store is the stored value
    assert back == ["c"]
    src = squeeze_and_excitation_net_fwd.source(x, a, b, backend="triton")
    assert "tl.debug_barrier()" in src


def test_reads_that_stay_errors_name_the_line() -> None:
    @kd.kernel
    def same_loop(x: Tensor):
        out = torch.zeros_like(x)
        res = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            for tn in kd.tile(x.shape[1]):
                out[tm, tn] = x[tm, tn]
                res[tm, tn] = x[tm, tn] + out[tm, 0:1]  # the line named
        return res

    @kd.kernel
    def other_rows(x: Tensor):
        c = torch.empty_like(x)
        out = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            for tn in kd.tile(x.shape[1]):
                c[tm, tn] = x[tm, tn] * 2
            for tn in kd.tile(x.shape[1]):
                out[tm, tn] = c[:, tn].sum(0)[None, :].expand(tm, tn)  # the line named
        return out

    @kd.kernel
    def before_store(x: Tensor):
        out = torch.zeros_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = out[t] + x[t]  # the line named
        return out

    @kd.kernel
    def store_after_read(x: Tensor):
        c = torch.empty_like(x)
        out = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            for tn in kd.tile(x.shape[1]):
                c[tm, tn] = x[tm, tn]
            for tn in kd.tile(x.shape[1]):
                out[tm, tn] = c[tm, tn]
                c[tm, tn] = x[tm, tn] * 3  # the line named
        return out, c

    @kd.kernel
    def atomics(x: Tensor):
        out = torch.zeros_like(x)
        res = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            for tn in kd.tile(x.shape[1]):
                kd.atomic_add(out, [tm, tn], x[tm, tn])
            for tn in kd.tile(x.shape[1]):
                res[tm, tn] = out[tm, tn]  # the line named
        return res

    x = torch.randn(6, 5)
    cases = [(same_loop, "inside the loop that stores it", "out[tm, 0:1]"),
             (other_rows, "other programs' elements are not visible", "c[:, tn].sum(0)"),
             (before_store, "before the kernel stores into it", "out[t] + x[t]"),
             (store_after_read, "stored in the loop that reads it back", "x[tm, tn] * 3"),
             (atomics, "which kd.atomic_* updates", "res[tm, tn] = out[tm, tn]")]
    for k, what, line in cases:
        with pytest.raises(KernelSyntaxError) as e:
            k(x)
        assert what in str(e.value) and line in str(e.value), (k.name, str(e.value))


@pytest.mark.slow
def test_read_back_kernel_compiles_for_every_tpu() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        x, a, b = torch.randn(256, 512).to(dtype), torch.randn(512, 256).to(dtype), \
            torch.randn(256, 512).to(dtype)
        rep = squeeze_and_excitation_net_fwd.check(x, a, b, targets=TPU_TARGETS)
        assert rep.ok, rep


@pytest.mark.slow
def test_read_back_kernel_compiles_for_sm90() -> None:
    """The Triton kernel, with its barrier after the loop that stores `c`, for a real GPU."""
    x, a, b = torch.randn(64, 128), torch.randn(128, 64), torch.randn(64, 128)
    rep = squeeze_and_excitation_net_fwd.check(x, a, b, backend="triton")
    assert rep.ok, rep
