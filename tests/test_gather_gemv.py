"""Helion's examples/gather_gemv.py, ported by renaming (`hl.` -> `kd.`), on all three backends.

Its gather index `idx[tile_n_s.index // S] * S + tile_n_s.index % S` reads the index tensor
through an index of its own. Pallas recomputes it lane by lane as scalar code: `idx` whole in
SMEM, read at `(begin + lane) // S` (lowering/pallas/gather.py, `_lane_loads`)."""
from __future__ import annotations

import random

import pytest
import torch
from torch import Tensor

import kernel_dsl as kd

BACKENDS = ["pallas", "triton", "nki"]
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- Helion's examples/gather_gemv.py, the kernel as it is there (renamed) ----------------------
@kd.kernel
def gather_gemv(w: Tensor, idx: Tensor, x: Tensor) -> Tensor:
    B, S1, S2 = w.size()
    N = idx.size(0)
    S = x.size(0)
    assert S1 == S2, f"Weight matrix must be square, got {S1} != {S2}"
    assert S == S1, f"Vector size {S} must match matrix size {S1}"

    # Rearrange shapes for matrix-vector multiplication
    w_view = w.contiguous().view(B * S, S).to(x.dtype)  # Shape: [N, S, S]
    x = x.view(S, 1)

    # Create output tensor
    out = torch.empty([N * S, 1], dtype=x.dtype, device=x.device)

    # Perform matrix-vector multiplication for each gathered matrix
    for tile_n_s in kd.tile(N * S):
        acc = kd.zeros([tile_n_s, 1], dtype=torch.float32)
        idx_id = tile_n_s.index // S
        idx_gather = idx[idx_id]
        for tile_k in kd.tile(S):
            # Matrix-vector multiplication
            gathered = w_view[idx_gather * S + tile_n_s.index % S, tile_k]
            acc += kd.dot(gathered, x[tile_k, :])
        out[tile_n_s, :] = acc

    return out.contiguous().view(N, S)


def _args(B: int, S: int, N: int, dtype: torch.dtype, wdtype: torch.dtype | None = None) -> tuple:
    torch.manual_seed(B * 1000 + S * 10 + N)
    w = torch.randn(B, S, S).to(wdtype or dtype)
    idx = torch.randint(0, B, [N], dtype=torch.int32)
    return w, idx, torch.randn(S).to(dtype)


def _want(w: Tensor, idx: Tensor, x: Tensor) -> Tensor:
    """Helion's baseline, in float64 (each row's dot rounded once to x's dtype)."""
    return torch.stack([w[i].to(x.dtype).double() @ x.double() for i in idx.tolist()])


TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (1e-2, 5e-2), torch.bfloat16: (2e-2, 2e-1)}
# ragged: primes, 1, S past a 128 block; (8, 9, 2): the driver's B and N at a small S
SIZES = [(8, 9, 2), (3, 7, 5), (1, 1, 1), (5, 131, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_gemv_matches_torch(backend: str, dtype: torch.dtype) -> None:
    rtol, atol = TOL[dtype]
    for size in SIZES:
        w, idx, x = _args(*size, dtype)
        with kd.backend(backend):
            got = gather_gemv(w, idx, x)
        assert got.dtype == dtype and got.shape == (size[2], size[1])
        torch.testing.assert_close(got.double(), _want(w, idx, x), rtol=rtol, atol=atol,
                                   msg=f"{size}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_weights_converted_in_host_code(backend: str) -> None:
    """`w.to(x.dtype)` in host code: f32 weights, bf16 vector."""
    w, idx, x = _args(4, 33, 6, torch.bfloat16, torch.float32)
    with kd.backend(backend):
        got = gather_gemv(w, idx, x)
    torch.testing.assert_close(got.double(), _want(w, idx, x), rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_configs_of_the_space_match_torch(backend: str, every: bool) -> None:
    """A seeded sample of the space (4 configs; slow tier: up to 12)."""
    w, idx, x = _args(5, 131, 3, torch.float32)
    want = _want(w, idx, x)
    space = list(gather_gemv.configs(w, idx, x, backend=backend))
    configs = random.Random(0).sample(space, min(12 if every else 4, len(space)))
    for cfg in configs:
        got = gather_gemv.compiled(backend, (w, idx, x), cfg)(w, idx, x)[0]
        torch.testing.assert_close(got.view(3, 131).double(), want, rtol=1e-5, atol=1e-4,
                                   msg=f"{cfg}")


def test_pallas_reads_idx_lane_by_lane_from_smem() -> None:
    w, idx, x = _args(8, 9, 2, torch.float32)
    src = gather_gemv.source(w, idx, x, backend="pallas")
    assert "pl.BlockSpec(memory_space=pltpu.SMEM),  # idx" in src
    assert "idx_ref[jnp.clip(" in src  # the nested index, per lane, clamped into idx


def test_index_tensor_read_as_a_vector_too_is_passed_twice() -> None:
    """idx in SMEM has no vector loads: a second, vector use of it gets its own VMEM blocks (the
    input is passed twice, Plan.twins), and both uses read the same values."""
    @kd.kernel
    def both(w: Tensor, idx: Tensor) -> Tensor:
        n = idx.size(0)
        out = torch.empty([n, w.size(1)], dtype=w.dtype)
        for t in kd.tile(n):
            rows = idx[t.index // 1]
            out[t, :] = w[rows, :] + idx[t][:, None].to(w.dtype)
        return out

    w, idx = torch.randn(6, 4), torch.randint(0, 6, [5], dtype=torch.int32)
    want = w[idx.long()] + idx[:, None].float()
    for backend in BACKENDS:
        with kd.backend(backend):
            torch.testing.assert_close(both(w, idx), want)


# -- the real TPU compiler -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_gather_gemv_compiles_for_every_tpu_target(dtype: torch.dtype) -> None:
    """Helion's B=8, N=2 at S=256; and a ragged S=200. (float16 has no vector type on TPU: the
    check reports "unsupported" with the bf16 hint, as for every kernel.)"""
    for size in [(8, 256, 2), (8, 200, 3)]:
        w, idx, x = _args(*size, dtype)
        rep = gather_gemv.check(w, idx, x, targets=TPU_TARGETS)
        assert rep.ok, rep.table()
