"""Helion's examples/int4_gemm.py ported literally (hl -> kd): a tile dim merged with an int dim
(kernel_dsl/widened.py): the widened load `A[tm, 2 * tk.begin : 2 * tk.begin + 2 * bk]` and
`torch.stack([lo, hi], dim=1).reshape(tk.block_size * 2, tn.block_size)`, contracted by `kd.dot`.
Against torch on pallas, triton and nki at ragged even K (the driver asserts K even), size-1
dims, f32/bf16/f16 activations and the configs the autotuner picks from; the real TPU compiler
on the five targets in a slow test; the errors for an odd K and for other uses of a merged value."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor

import kernel_dsl as kd

BACKENDS = ("pallas", "triton", "nki")
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


@kd.kernel(static_shapes=False)
def matmul_bf16_int4(A: Tensor, B: Tensor) -> Tensor:
    """Helion's matmul_bf16_int4, as written there (hl -> kd)."""
    M, K = A.shape
    _, N = B.shape

    C = torch.zeros(M, N, dtype=torch.bfloat16, device=A.device)
    block_size_k_packed = kd.register_block_size(K // 2)

    # Use Helion to tile the computation
    for tile_m, tile_n in kd.tile([M, N]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)

        for tile_k_packed in kd.tile(K // 2, block_size=block_size_k_packed):
            a_tile_begin = tile_k_packed.begin * 2
            a_tile_len = block_size_k_packed * 2
            a_tile = A[
                tile_m, a_tile_begin : (a_tile_begin + a_tile_len)
            ]  # [BLOCK_SIZE_M, BLOCK_SIZE_K]

            # Load packed int8 data from B
            b_tile = B[tile_k_packed, tile_n]  # [BLOCK_SIZE_K//2, BLOCK_SIZE_N]

            b_lo_raw = (b_tile & 0xF).to(torch.int32)
            b_lo = torch.where(b_lo_raw >= 8, b_lo_raw - 16, b_lo_raw)  # low 4 bits
            b_hi = (b_tile >> 4).to(torch.int32)  # high 4 bits (arithmetic >>)

            b_stacked = torch.stack([b_lo.to(A.dtype), b_hi.to(A.dtype)], dim=1)
            b_unpacked = b_stacked.reshape(
                tile_k_packed.block_size * 2, tile_n.block_size
            )

            acc = kd.dot(a_tile, b_unpacked, acc=acc)  # [BLOCK_SIZE_M, BLOCK_SIZE_N]

        C[tile_m, tile_n] = acc.to(torch.bfloat16)

    return C


def pack(w: Tensor) -> Tensor:
    """The example's int4_gemm_tritonbench packing: rows 2k (low nibble) and 2k + 1 (high)."""
    w_int8 = w.to(torch.int8)
    w_reshaped = w_int8.reshape(w.shape[0] // 2, 2, w.shape[1]).permute(1, 0, 2)
    return ((w_reshaped[0] & 0xF) | (w_reshaped[1] << 4)).to(torch.int8)


def reference(a: Tensor, w: Tensor) -> Tensor:
    return (a.float() @ w.float()).to(torch.bfloat16)


def _close(got: Tensor, want: Tensor) -> None:
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=2e-2)


def test_pack_round_trips() -> None:
    w = torch.randint(-8, 8, (6, 3))
    p = pack(w).int()
    lo = torch.where((p & 0xF) >= 8, (p & 0xF) - 16, p & 0xF)
    assert torch.equal(torch.stack([lo, p >> 4], 1).reshape(6, 3), w.int())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mkn", [(37, 46, 29), (1, 2, 1), (5, 258, 3)], ids=str)
def test_port_matches_torch(backend: str, mkn: tuple[int, int, int]) -> None:
    m, k, n = mkn
    a = torch.randn(m, k).bfloat16()
    w = torch.randint(-8, 8, (k, n))
    with kd.backend(backend):
        got = matmul_bf16_int4(a, pack(w))
    _close(got, reference(a, w))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_activation_dtypes(backend: str, dtype: torch.dtype) -> None:
    a = torch.randn(9, 22).to(dtype)
    w = torch.randint(-8, 8, (22, 17))
    with kd.backend(backend):
        got = matmul_bf16_int4(a, pack(w))
    _close(got, reference(a, w))


@pytest.mark.parametrize("backend", BACKENDS)
def test_configs(backend: str) -> None:
    """Block sizes of K // 2 that leave a ragged last block (23 = 16 + 7, 8 + 8 + 7, ...)."""
    a = torch.randn(19, 46).bfloat16()
    w = torch.randint(-8, 8, (46, 11))
    b, want = pack(w), reference(a, w)
    space = list(matmul_bf16_int4.configs(a, b, backend=backend))
    by_blocks = {tuple(c.block_sizes): c for c in space}
    assert len(by_blocks) > 1
    for cfg in list(by_blocks.values())[:: max(1, len(by_blocks) // 6)]:
        _close(matmul_bf16_int4.run_cpu(backend, (a, b), cfg)[0], want)


@kd.kernel
def unpacked_3d(A: Tensor, B3: Tensor) -> Tensor:
    """A merge of a loaded `[tk, 2, tn]` value (its parts are slices) and no accumulator."""
    M, K = A.shape
    C = torch.empty(M, B3.shape[2], dtype=A.dtype, device=A.device)
    bk = kd.register_block_size(K // 2)
    for tm, tn in kd.tile([M, B3.shape[2]]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(K // 2, block_size=bk):
            a = A[tm, tk.begin * 2 : tk.begin * 2 + tk.block_size * 2]
            b = B3[tk, :, tn].reshape(tk.block_size * 2, tn.block_size)
            acc = acc + a @ b
        C[tm, tn] = acc
    return C


@pytest.mark.parametrize("backend", BACKENDS)
def test_merge_of_a_loaded_value(backend: str) -> None:
    a, w = torch.randn(13, 14), torch.randn(14, 6)
    space = list(unpacked_3d.configs(a, w.reshape(7, 2, 6), backend=backend))
    for cfg in space[:: max(1, len(space) // 4)]:
        got = unpacked_3d.run_cpu(backend, (a, w.reshape(7, 2, 6)), cfg)[0]
        torch.testing.assert_close(got, a @ w, rtol=1e-4, atol=1e-4)


@kd.kernel
def merged_plus_one(A: Tensor) -> Tensor:
    M, K = A.shape
    C = torch.empty(M, 1, dtype=A.dtype, device=A.device)
    bk = kd.register_block_size(K // 2)
    for tm in kd.tile(M):
        for tk in kd.tile(K // 2, block_size=bk):
            a = A[tm, tk.begin * 2 : tk.begin * 2 + tk.block_size * 2]
            C[tm, 0] = (a + 1).sum(1)
    return C


@kd.kernel
def merged_exp(A: Tensor) -> Tensor:
    M, K = A.shape
    C = torch.empty(M, 1, dtype=A.dtype, device=A.device)
    bk = kd.register_block_size(K // 2)
    for tm in kd.tile(M):
        for tk in kd.tile(K // 2, block_size=bk):
            a = A[tm, tk.begin * 2 : tk.begin * 2 + tk.block_size * 2]
            C[tm, 0] = torch.exp(a).sum(1)
    return C


def test_errors() -> None:
    with kd.backend("triton"):
        with pytest.raises(kd.ShapeError, match="(?s)2 \\* 23.*K even") as e:
            matmul_bf16_int4(torch.randn(4, 47).bfloat16(), torch.zeros(23, 3, dtype=torch.int8))
        assert "test_int4_gemm.py" in str(e.value)
        with pytest.raises(kd.ShapeError, match="may only be a matmul operand"):
            merged_plus_one(torch.randn(4, 8))
        with pytest.raises(kd.ShapeError, match="(?s)`exp`.*may only be a matmul operand"):
            merged_exp(torch.randn(4, 8))


@pytest.mark.slow
def test_compiles_for_every_tpu_target() -> None:
    a, w = torch.randn(256, 512).bfloat16(), torch.randint(-8, 8, (512, 256))
    r = matmul_bf16_int4.check(a, pack(w), targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r
