"""NKI loops bounded by values read from memory (lowering/nki/static_reach.py): a static loop over
the tile's reach with run-time masks. The blocks past the run-time end must change nothing: not
a carried value (even one that is not neutral to a block of zeros), not a store (with or
without the tile's dim), and a begin read from memory masks the lanes before it.
Helion's jagged ports and grouped GEMM on NKI: tests/test_jagged_tile.py, test_grouped_loops.py.
"""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ConfigError

BLOCK = 4


@kd.kernel
def halving_walk(x: torch.Tensor, lens: torch.Tensor):
    """Per row g, over blocks of 4 of [0, lens[g]): acc = acc / 2 + the block's sum, the number
    of blocks, and a store of acc in every block (a block without the loop's dim)."""
    b, n, m = x.shape
    out = torch.zeros([b, m], dtype=torch.float32, device=x.device)
    blocks = torch.zeros([b, m], dtype=torch.float32, device=x.device)
    last = torch.full([b, m], -5.0, dtype=torch.float32, device=x.device)
    for g in kd.grid(b):
        ln = lens[g]
        for tm in kd.tile(m):
            acc = kd.zeros([tm], dtype=torch.float32)
            cnt = kd.zeros([tm], dtype=torch.float32)
            for tk in kd.tile(ln, block_size=BLOCK):
                acc = acc * 0.5 + x[g, tk, tm].sum(0)
                cnt = cnt + 1.0
                last[g, tm] = acc * 3.0
            out[g, tm] = acc
            blocks[g, tm] = cnt
    return out, blocks, last


def _walk_ref(x: torch.Tensor, lens: torch.Tensor):
    b, _, m = x.shape
    out, blocks, last = torch.zeros(b, m), torch.zeros(b, m), torch.full((b, m), -5.0)
    for g, ln in enumerate(lens.tolist()):
        for k0 in range(0, ln, BLOCK):
            out[g] = out[g] * 0.5 + x[g, k0:min(k0 + BLOCK, ln)].sum(0)
            blocks[g] += 1
            last[g] = out[g] * 3
    return out, blocks, last


@pytest.mark.parametrize("lens", [[0], [1, 0, 13], [11, 4, 0, 7, 3]], ids=str)
@pytest.mark.parametrize("backend", ["nki", "triton"])
def test_blocks_past_the_end_change_nothing(backend: str, lens: list[int]) -> None:
    g = torch.Generator().manual_seed(len(lens))
    x = torch.randn(len(lens), 13, 6, generator=g)
    ln = torch.tensor(lens, dtype=torch.int32)
    with kd.backend(backend):
        got = halving_walk(x, ln)
    for a, b in zip(got, _walk_ref(x, ln)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_generated_loop_says_it_walks_the_reach() -> None:
    x, ln = torch.randn(3, 13, 6), torch.tensor([1, 0, 13], dtype=torch.int32)
    src = halving_walk.source(x, ln, backend="nki")
    assert "for i_tk in range(4):" in src  # 13 rows in blocks of 4, whatever lens holds
    assert ("the `end` of tk read from memory: a static loop over its reach [0, 13) with "
            "run-time masks (NKI's nl.fori_loop is not generated)") in src


@kd.kernel
def segments(x: torch.Tensor, offs: torch.Tensor):
    """Segment g of x (both ends read from memory) scaled by g + 1; the rest stays 0."""
    out = torch.zeros_like(x)
    for g in kd.grid(offs.size(0) - 1):
        for tk in kd.tile(offs[g], offs[g + 1]):
            out[tk] = x[tk] * (g + 1)
    return out


@pytest.mark.parametrize("bounds", [[0, 0, 1, 6, 13, 13], [2, 3, 11], [5, 5]], ids=str)
@pytest.mark.parametrize("backend", ["nki", "triton"])
def test_a_begin_read_from_memory_masks_the_lanes_before_it(backend: str, bounds: list[int]) -> None:
    x = torch.randn(13)
    offs = torch.tensor(bounds, dtype=torch.int32)
    want = torch.zeros(13)
    for g in range(len(bounds) - 1):
        want[bounds[g]:bounds[g + 1]] = x[bounds[g]:bounds[g + 1]] * (g + 1)
    cfgs = list(segments.configs(x, offs, backend=backend))[:4]
    for cfg in cfgs:
        torch.testing.assert_close(segments.run_cpu(backend, (x, offs), cfg)[0], want)


def test_a_begin_read_from_memory_has_no_block_positions_on_nki() -> None:
    @kd.kernel
    def begins(x: torch.Tensor, offs: torch.Tensor):
        out = torch.zeros_like(x)
        for g in kd.grid(offs.size(0) - 1):
            for tk in kd.tile(offs[g], offs[g + 1]):
                out[tk] = x[tk] + tk.begin
        return out

    x, offs = torch.randn(13), torch.tensor([2, 3, 11], dtype=torch.int32)
    with kd.backend("nki"), pytest.raises(ConfigError, match="walks loop tk .* over its static "
                                          "reach in blocks from 0") as e:
        begins(x, offs)
    assert "out[tk] = x[tk] + tk.begin" in str(e.value)


def test_a_scalar_before_a_tile_in_a_comparison() -> None:
    """`tb.begin < m` on NKI: a tensor_scalar with the operands swapped, the comparison too
    (was reversed: lower_elementwise.binary swapped it twice)."""
    @kd.kernel
    def first_lanes(x: torch.Tensor, n: torch.Tensor):
        out = torch.zeros_like(x)
        for tb in kd.tile(x.shape[0]):
            out[tb] = torch.where(tb.begin < n[tb], x[tb], -1.0)
        return out

    x, n = torch.randn(8), torch.tensor([0, 1, 5, 9, 0, 3, 2, 7], dtype=torch.int32)
    with kd.backend("nki"):
        torch.testing.assert_close(first_lanes(x, n), torch.where(n > 0, x, -1.0))


@kd.kernel
def shifted_rows(x: torch.Tensor, lens: torch.Tensor):
    """Row g's first lens[g] elements, one to the right (a shifted block: a plain DMA on NKI,
    masked by a read-modify-write)."""
    b, n = x.shape
    out = torch.full([b, n + 1], 7.0, dtype=x.dtype, device=x.device)
    for g in kd.grid(b):
        for tj in kd.tile(lens[g]):
            out[g, tj.index + 1] = x[g, tj]
    return out


@pytest.mark.parametrize("backend", ["nki", "triton"])
def test_a_shifted_store_in_a_loop_bounded_from_memory(backend: str) -> None:
    x, lens = torch.randn(4, 9), torch.tensor([0, 9, 1, 5], dtype=torch.int32)
    want = torch.full((4, 10), 7.0)
    for g, k in enumerate(lens.tolist()):
        want[g, 1:k + 1] = x[g, :k]
    with kd.backend(backend):
        torch.testing.assert_close(shifted_rows(x, lens), want)
    if backend == "nki":
        src = shifted_rows.source(x, lens, backend="nki")
        assert "tj shifted by +1 (a unit-stride gather, a plain DMA)" in src
        assert "vector_offset" not in src
