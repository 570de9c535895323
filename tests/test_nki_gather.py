"""Gathers and scatters through 1-D index tiles on the NKI backend: per-partition indirect DMA,
`hbm.ap(pattern, offset, vector_offset=idx, indirect_dim=axis)` (lowering/nki/gather.py), run on
kernel_dsl's NKI interpreter (interp/indirect.py). Helion's embedding, ported literally, against
torch at ragged sizes, int32 and int64 ids, and every config of the NKI config space."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.lowering.nki import forms


@kd.kernel
def embedding(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Helion's examples/embedding.py, renamed only (hl -> kd)."""
    x_flat = x.reshape(-1)  # collapse x into a single dimension
    _, embedding_dim = weight.size()
    out = torch.empty([x_flat.size(0), embedding_dim], dtype=weight.dtype, device=weight.device)
    for tile_b, tile_e in kd.tile([x_flat.size(0), embedding_dim]):
        out[tile_b, tile_e] = weight[x_flat[tile_b], tile_e]
    return out.view(*x.size(), embedding_dim)


def _ids(shape: tuple[int, ...], vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g).to(dtype)


@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("shape,vocab,dim", [((3, 67), 97, 300), ((1,), 1, 1), ((131,), 13, 19),
                                             ((2, 1), 5, 130)], ids=str)
def test_helion_embedding_matches_torch_in_every_config(shape: tuple[int, ...], vocab: int, dim: int,
                                                        id_dtype: torch.dtype) -> None:
    x = _ids(shape, vocab, id_dtype, sum(shape) + vocab)
    weight = torch.randn(vocab, dim, generator=torch.Generator().manual_seed(dim)) * 100
    want = torch.nn.functional.embedding(x, weight)
    with kd.backend("nki"):
        assert torch.equal(embedding(x, weight), want)
    space = list(embedding.configs(x, weight, backend="nki"))
    assert space and all(c.block_sizes[0] <= 128 for c in space)  # one id per partition
    for cfg in space:
        assert torch.equal(embedding.run_cpu("nki", (x, weight), cfg)[0], want), cfg


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.int8], ids=str)
def test_embedding_tables_of_other_dtypes_are_bit_exact(dtype: torch.dtype) -> None:
    weight = (torch.randn(23, 40) * 50).to(dtype)
    if dtype.is_floating_point:
        weight[3, :3] = torch.tensor([float("nan"), float("-inf"), -0.0]).to(dtype)
    x = _ids((4, 9), 23, torch.int64, 5)
    x[0, :3] = 3
    with kd.backend("nki"):
        got = embedding(x, weight)
    want = weight[x]
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    assert torch.equal(got.view(bits), want.view(bits))  # NaN payloads and -0.0 too


@kd.kernel
def columns(x: torch.Tensor, i: torch.Tensor):
    """`x[tm, i[ti]]`: the gather on the last axis; its dim goes on partitions (orientation T)."""
    m = x.shape[0]
    out = torch.empty([m, i.shape[0]], dtype=x.dtype)
    for tm, ti in kd.tile([m, i.shape[0]]):
        out[tm, ti] = x[tm, i[ti]]
    return out


@kd.kernel
def row_sums(ids: torch.Tensor, w: torch.Tensor, h: int):
    """A gather with an int and a `:` in its subscript, feeding a reduction."""
    n = ids.shape[0]
    out = torch.empty([n], dtype=torch.float32)
    for tb in kd.tile(n):
        out[tb] = (w[h, ids[tb], :].float() * 2).sum(-1)
    return out


@kd.kernel
def permute_rows(x: torch.Tensor, perm: torch.Tensor):
    """`out[perm[tb], td] = x[tb, td] + 1`: a scatter through a loaded index tile."""
    n, d = x.shape
    out = torch.zeros([n, d], dtype=x.dtype)
    for tb, td in kd.tile([n, d]):
        out[perm[tb], td] = x[tb, td] + 1
    return out


def test_gather_along_the_last_axis_in_every_config() -> None:
    x = torch.randn(37, 50)
    i = _ids((29,), 50, torch.int16, 1)
    for cfg in columns.configs(x, i, backend="nki"):
        assert torch.equal(columns.run_cpu("nki", (x, i), cfg)[0], x[:, i.long()]), cfg


def test_gather_with_int_and_full_entries_feeds_a_reduction() -> None:
    w = torch.randn(3, 41, 70)
    ids = _ids((59,), 41, torch.int32, 2)
    with kd.backend("nki"):
        got = row_sums(ids, w, 2)
    torch.testing.assert_close(got, (w[2, ids.long()] * 2).sum(-1))
    src = row_sums.source(ids, w, 2, backend="nki")  # offset: h * 41 * 70
    assert "w.ap(pattern=[[70, 59], [1, 70]], offset=5740, vector_offset=ids_0, indirect_dim=1)" in src
    assert forms.violations(src) == []


@pytest.mark.parametrize("n", [1, 7, 130], ids=str)
def test_scatter_through_a_permutation_in_every_config(n: int) -> None:
    x = torch.randn(n, 33)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(n)).to(torch.int64)
    want = torch.zeros_like(x)
    want[perm] = x + 1
    for cfg in permute_rows.configs(x, perm, backend="nki"):
        assert torch.equal(permute_rows.run_cpu("nki", (x, perm), cfg)[0], want), cfg


def test_out_of_range_ids_read_zero_and_scatter_nowhere() -> None:
    """An id outside [0, size) is the user's bug (docs/ir.md); NKI's DMA skips that row
    (oob_mode.skip): a gather reads 0 there, a scatter writes nothing."""
    weight = torch.randn(6, 5)
    x = torch.tensor([1, 6, -1, 5, 100], dtype=torch.int32)
    with kd.backend("nki"):
        got = embedding(x, weight)
        moved = permute_rows(torch.randn(5, 5), x)
    assert torch.equal(got[[0, 3]], weight[[1, 5]])
    assert torch.equal(got[[1, 2, 4]], torch.zeros(3, 5))
    assert torch.equal(moved[[0, 2, 3, 4]], torch.zeros(4, 5))  # rows 1 and 5 were written
    src = embedding.source(x, weight, backend="nki")
    assert "oob_mode=nisa.oob_mode.skip" in src and "nisa.memset(dst=weight_" in src


def test_generated_gather_is_one_indirect_dma_in_aws_forms() -> None:
    x, weight = _ids((300,), 50, torch.int64, 3), torch.randn(50, 64, dtype=torch.bfloat16)
    src = embedding.source(x, weight, backend="nki", config=kd.Config([128, 64]))
    assert forms.violations(src) == []
    assert ("nisa.dma_copy(dst=weight_1[0:n_tile_b, :], src=weight.ap(pattern=[[64, n_tile_b], "
            "[1, 64]], offset=tile_e0, vector_offset=x_flat_0[0:n_tile_b, :], indirect_dim=0), "
            "oob_mode=nisa.oob_mode.skip)") in src
    assert "nisa.nc_transpose" not in src  # the ids are DMA'd straight into an (n, 1) column


@kd.kernel
def segment_sum(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    out = torch.zeros([nseg, x.shape[1]], dtype=x.dtype)
    for tb, td in kd.tile(x.shape):
        kd.atomic_add(out, [seg[tb], td], x[tb, td])
    return out


def test_atomics_through_an_index_tile_accumulate_duplicates() -> None:
    """A read-modify-write per lane (atomic_scatter.py; tests/test_segment_atomics.py)."""
    x, seg = torch.randn(9, 4), torch.tensor([0, 1, 1, 2, 0, 0, 2, 1, 1], dtype=torch.int32)
    with kd.backend("nki"):
        got = segment_sum(x, seg, 3)
    torch.testing.assert_close(got, torch.zeros(3, 4).index_add_(0, seg.long(), x))


# -- rank-N index tiles: one indirect DMA per column of the block, an index per element ------
@kd.kernel
def windows(x: torch.Tensor, starts: torch.Tensor, w: int):
    """`x[starts[tb][:, None] + tk.index[None, :]]` (Helion's jagged_dense_add form)."""
    n = starts.shape[0]
    out = torch.empty([n, w], dtype=x.dtype)
    for tb, tk in kd.tile([n, w]):
        out[tb, tk] = x[starts[tb][:, None] + tk.index[None, :]]
    return out


@kd.kernel
def jagged_sum_static(x_data: torch.Tensor, x_offsets: torch.Tensor, kmax: int):
    """Helion's jagged_sum with a static bound on the row length (`kd.tile(kmax)` and a mask)
    in place of `kd.jagged_tile`, which NKI refuses (a loop bounded from memory)."""
    M = x_data.shape[1]
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, M], dtype=x_data.dtype)
    x_flat = x_data.view(-1)
    for tile_b in kd.tile(num_rows):
        starts = x_offsets[tile_b]
        nnz = x_offsets[tile_b.index + 1] - starts
        for tile_m in kd.tile(M):
            acc = kd.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in kd.tile(kmax):
                base = starts[:, None] + tile_k.index[None, :]
                flat = base[:, :, None] * M + tile_m.index[None, None, :]
                mask = (tile_k.index[None, :] < nnz[:, None])[:, :, None]
                acc = acc + kd.load(x_flat, [flat], extra_mask=mask).sum(dim=1)
            out[tile_b, tile_m] = acc
    return out


@kd.kernel
def scatter_windows(v: torch.Tensor, starts: torch.Tensor, size: int):
    """`out[starts[tb][:, None] + tk.index[None, :]] = v[tb, tk]`: a rank-2 scatter."""
    n, w = v.shape
    out = torch.zeros([size], dtype=v.dtype)
    for tb, tk in kd.tile([n, w]):
        out[starts[tb][:, None] + tk.index[None, :]] = v[tb, tk]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_rank_2_gather_in_every_config(dtype: torch.dtype) -> None:
    x = (torch.randn(300) * 100).to(dtype)
    starts = torch.tensor([0, 7, 150, 299, 3, 280] * 7, dtype=torch.int32)  # 42 rows
    idx = starts.long()[:, None] + torch.arange(21)
    inside = idx < 300
    space = list(windows.configs(x, starts, 21, backend="nki"))
    assert space
    for cfg in space:
        got = windows.run_cpu("nki", (x, starts, 21), cfg)[0]
        assert torch.equal(got[inside], x[idx[inside]]), cfg
        assert (got[~inside] == 0).all(), cfg  # past the axis: skipped by the DMA, 0
    src = windows.source(x, starts, 21, backend="nki", config=space[0])
    assert "one indirect DMA per column" in src and forms.violations(src) == []


@pytest.mark.parametrize("lengths", [[3, 0, 1, 7, 2, 5], [1], [0, 0, 4]], ids=str)
def test_jagged_sum_with_a_rank_3_index_in_every_config(lengths: list[int]) -> None:
    lens = torch.tensor(lengths)
    offs = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]).to(torch.int32)
    x = torch.randn(max(int(lens.sum()), 1), 37)
    want = torch.stack([x[offs[i]:offs[i + 1]].sum(0) for i in range(len(lengths))])
    for cfg in jagged_sum_static.configs(x, offs, 7, backend="nki"):
        got = jagged_sum_static.run_cpu("nki", (x, offs, 7), cfg)[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=str(cfg))


def test_rank_2_scatter() -> None:
    v = torch.randn(5, 4)
    starts = torch.tensor([0, 4, 12, 20, 8], dtype=torch.int32)  # disjoint windows
    want = torch.zeros(24)
    want[(starts.long()[:, None] + torch.arange(4)).reshape(-1)] = v.reshape(-1)
    for cfg in scatter_windows.configs(v, starts, 24, backend="nki"):
        assert torch.equal(scatter_windows.run_cpu("nki", (v, starts, 24), cfg)[0], want), cfg
