"""Helion's grouped GEMM as its users write it (examples/grouped_gemm.py, `hl.` -> `kd.`): a
`kd.grid` over groups, `kd.tile([M_g, N])` with a size read from memory, a nested loop over
several sizes, and rows gathered and scattered through `start + tile_m.index`. On NKI the loop
over `M_g` (read from memory) walks its static reach, A's rows, with run-time masks
(lowering/nki/static_reach.py)."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd


@kd.kernel
def grouped_gemm_jagged(A_packed: torch.Tensor, B: torch.Tensor,
                        group_offsets: torch.Tensor) -> torch.Tensor:
    total_M, K = A_packed.shape
    K2, N = B.shape
    assert K == K2, "K dimension mismatch between A_packed and B"

    out = torch.empty(
        total_M,
        N,
        dtype=torch.promote_types(A_packed.dtype, B.dtype),
        device=A_packed.device,
    )

    G = group_offsets.size(0) - 1

    # Process each group independently, tiling over its specific M_g dimension
    for g in kd.grid(G):
        start = group_offsets[g]
        end = group_offsets[g + 1]
        M_g = end - start
        if M_g != 0:
            # Create 2D tiling pattern over output dimensions (M_g x N) for current group
            for tile_m, tile_n in kd.tile([M_g, N]):
                acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
                # K-reduction loop: multiply tiles along K dimension
                for tile_k in kd.tile(K):
                    a_blk = A_packed[start + tile_m.index, tile_k]
                    b_blk = B[tile_k, tile_n]
                    # Perform fused multiply-add with FP32 accumulation for numerical stability
                    acc = torch.addmm(acc, a_blk, b_blk)
                # Convert accumulator to output dtype and store result
                out[start + tile_m.index, tile_n] = acc.to(out.dtype)

    return out


@kd.kernel
def block_sums(x: torch.Tensor):
    """A nested loop over two sizes carries its accumulator through both levels."""
    m, a, b = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for ta, tb in kd.tile([a, b]):
            acc = acc + x[tm, ta, tb].float().sum(-1).sum(-1)
        out[tm] = acc
    return out


@kd.kernel
def batched_scale(x: torch.Tensor):
    B, M, N = x.shape
    out = torch.empty_like(x)
    for g in kd.grid(B):
        for tm, tn in kd.tile([M, N]):
            out[g, tm, tn] = x[g, tm, tn] * 2 + 1
    return out


@kd.kernel
def jagged_row_copy(x: torch.Tensor, offsets: torch.Tensor):
    """`kd.tile(n)` with n read from memory tiles [0, n), as Helion's `hl.tile(n)` does."""
    out = torch.zeros_like(x)
    for g in kd.grid(offsets.size(0) - 1):
        start = offsets[g]
        for tj in kd.tile(offsets[g + 1] - start):
            out[start + tj.index, :] = x[start + tj.index, :] * 3
    return out


def _offsets(counts: list[int]) -> torch.Tensor:
    return torch.cumsum(torch.tensor([0] + counts), 0).to(torch.int32)


GROUPS = [[1], [5, 0, 9], [0, 17, 1, 33], [130]]  # empty groups, size 1, primes, > 128


@pytest.mark.parametrize("counts", GROUPS, ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_grouped_gemm_matches_torch(backend: str, counts: list[int]) -> None:
    offs = _offsets(counts)
    a, b = torch.randn(int(offs[-1]), 33), torch.randn(33, 17)
    with kd.backend(backend):
        got = grouped_gemm_jagged(a, b, offs)
    torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_grouped_gemm_in_bf16(backend: str) -> None:
    """Helion's own driver runs bf16: on Pallas the rows scatter into a packed bf16 output."""
    offs = _offsets([7, 0, 20, 1])
    a, b = torch.randn(28, 64).bfloat16(), torch.randn(64, 24).bfloat16()
    with kd.backend(backend):
        got = grouped_gemm_jagged(a, b, offs)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_grouped_gemm_nki_configs() -> None:
    """A spread of the NKI configs: row blocks shorter and longer than the groups (the masks
    keep a block's rows past its group out of the next group's rows)."""
    offs = _offsets([0, 17, 1, 33, 5])
    a, b = torch.randn(int(offs[-1]), 33), torch.randn(33, 17)
    cfgs = list(grouped_gemm_jagged.configs(a, b, offs, backend="nki"))
    spread = list({tuple(c.block_sizes): c for c in cfgs}.values())[::2]
    assert len(spread) >= 3
    for cfg in spread:
        torch.testing.assert_close(grouped_gemm_jagged.run_cpu("nki", (a, b, offs), cfg)[0], a @ b,
                                   rtol=1e-4, atol=1e-4)
    src = grouped_gemm_jagged.source(a, b, offs, backend="nki")
    assert "the `end` of tile_m read from memory: a static loop over its reach [0, 56)" in src


@kd.kernel
def scatter_rows(x: torch.Tensor, idx: torch.Tensor):
    """The first len(idx) rows of x go to rows idx; rows no index names keep their zeros."""
    out = torch.zeros_like(x)
    for tb in kd.tile(idx.shape[0]):
        out[idx[tb], :] = x[tb, :]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int8, torch.int16,
                                   torch.bool], ids=str)
def test_pallas_scatters_rows_into_packed_outputs(dtype: torch.dtype) -> None:
    x = (torch.randn(37, 130) * 10).to(dtype)
    idx = torch.randperm(37).int()[:29]
    want = torch.zeros_like(x)
    want[idx.long()] = x[:29]
    with kd.backend("pallas"):
        assert torch.equal(scatter_rows(x, idx), want)


@pytest.mark.parametrize("counts", [[1], [4, 0, 11], [130, 3]], ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_a_tile_over_a_size_read_from_memory(backend: str, counts: list[int]) -> None:
    offs = _offsets(counts)
    x = torch.randn(int(offs[-1]), 6)
    with kd.backend(backend):
        torch.testing.assert_close(jagged_row_copy(x, offs), x * 3)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 9, 130), (3, 33, 5)], ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_nested_loops_over_several_sizes(backend: str, shape: tuple[int, int, int]) -> None:
    x = torch.randn(*shape)
    with kd.backend(backend):
        torch.testing.assert_close(block_sums(x), x.sum((1, 2)), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(batched_scale(x), x * 2 + 1)


def test_a_nested_multi_size_loop_is_nested_loops_in_the_ir() -> None:
    ir = block_sums.ir(torch.randn(4, 5, 6))
    outer = next(op for op in ir.body.ops if op.kind == "loop")
    inner = [op for op in outer.body.ops if op.kind == "loop"]
    assert len(inner) == 1 and len(inner[0].results) == 1 == len(outer.results)


def test_fuzz_nested_loops() -> None:
    from kernel_dsl.testing import fuzz

    fuzz(block_sums, lambda x: x.float().sum((1, 2)), "x[m,a,b]",
         dtypes=[torch.float32, torch.bfloat16], dims={"m": (1, 20), "a": (1, 20), "b": (1, 150)},
         configs=2, backends=["pallas", "triton", "nki"], max_examples=4, seed=0)


@pytest.mark.slow
def test_grouped_gemm_compiles_for_every_tpu_generation() -> None:
    """The row gathers load the aligned 8-row group (a dynamic sublane offset with a dynamic
    lane offset must be provably aligned) and compile on the real Mosaic compiler."""
    offs = _offsets([100, 0, 256])
    r = grouped_gemm_jagged.check(torch.empty(356, 256), torch.empty(256, 128), offs,
                                  measure_vmem=False)
    assert r.ok, r.table()
    r = batched_scale.check(torch.empty(4, 64, 256), measure_vmem=False)
    assert r.ok, r.table()
    r = grouped_gemm_jagged.check(torch.empty(356, 256).bfloat16(), torch.empty(256, 128).bfloat16(),
                                  offs, measure_vmem=False)
    assert r.ok, r.table()
