"""Gather and scatter through 1-D integer index tiles (`emb[ids[tb], td]`, `x[t.index + 1]`,
`out[perm[tb], td] = v`): correct on every backend that lowers them, a typed error on the
others, and the Pallas form compiled by the real TPU compiler."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ConfigError, UnsupportedOpError

GATHER_BACKENDS = ("pallas", "triton", "nki")
ATOMIC_BACKENDS = ("pallas", "triton", "nki")  # nki: a read-modify-write per lane (atomic_scatter.py)
TPUS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]
# small blocks so that the token axis has a ragged last block (pallas lanes: 8 rows, 128 cols)
SMALL = {"pallas": kd.Config([8, 128]), "triton": kd.Config([4, 16]), "nki": kd.Config([8, 16])}


@kd.kernel
def embedding_tiles(ids: torch.Tensor, weight: torch.Tensor):
    """Helion's examples/embedding.py with a tile of tokens: `weight[ids[tb], td]`."""
    n = ids.shape[0]
    dim = weight.shape[1]
    out = torch.empty([n, dim], dtype=weight.dtype)
    for tb, td in kd.tile([n, dim]):
        out[tb, td] = weight[ids[tb], td]
    return out


@kd.kernel
def next_rows(x: torch.Tensor):
    """Row i + 1 and row (2 i) % m: gathers whose index tiles come from `t.index`."""
    m, n = x.shape
    out = torch.empty([m - 1, n], dtype=x.dtype)
    out2 = torch.empty([m - 1, n], dtype=x.dtype)
    for tm, tn in kd.tile([m - 1, n]):
        out[tm, tn] = x[tm.index + 1, tn]
        out2[tm, tn] = x[(tm.index * 2) % m, tn] * 2
    return out, out2


@kd.kernel
def shifted(x: torch.Tensor):
    """A gather along the minor (lane) axis of a 1-D tensor."""
    n = x.shape[0]
    out = torch.empty([n - 1], dtype=x.dtype)
    for t in kd.tile(n - 1):
        out[t] = x[t.index + 1]
    return out


@kd.kernel
def scatter_rows(x: torch.Tensor, perm: torch.Tensor):
    """`out[perm[tb], td] = x[tb, td]`: a scatter through a loaded index tile."""
    n, d = x.shape
    out = torch.zeros([n, d], dtype=x.dtype)
    for tb, td in kd.tile([n, d]):
        out[perm[tb], td] = x[tb, td]
    return out


def _run(kernel, backend: str, *args, config=None):
    if config is None:
        with kd.backend(backend):
            return kernel(*args)
    outs = kernel.run_cpu(backend, args, config)
    return outs[0] if len(outs) == 1 else tuple(outs)


@pytest.mark.parametrize("sizes", [(37, 11, 19), (1, 1, 1), (13, 7, 130), (8, 1, 3)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_embedding_with_a_tile_of_tokens(backend: str, dtype: torch.dtype,
                                         sizes: tuple[int, int, int]) -> None:
    n, vocab, dim = sizes
    g = torch.Generator().manual_seed(n * 131 + vocab)
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32)
    weight = (torch.randn(vocab, dim, generator=g) * 100).to(dtype)
    want = weight[ids.long()]
    for cfg in (None, SMALL[backend]):
        got = _run(embedding_tiles, backend, ids, weight, config=cfg)
        assert torch.equal(got, want), (cfg, got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_gather_is_bit_exact_on_special_values(backend: str, dtype: torch.dtype) -> None:
    """NaN, inf and -0.0 rows come through bit for bit (a one-hot matmul would spread them)."""
    weight = torch.tensor([[float("nan"), 1.5], [float("inf"), -0.0], [-float("inf"), 3.0]])
    weight = weight.to(dtype)
    ids = torch.tensor([2, 1, 1, 0, 2], dtype=torch.int32)
    with kd.backend(backend):
        got = embedding_tiles(ids, weight)
    want = weight[ids.long()]
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    nan = want.isnan()  # 16-bit NaN payloads may come back canonical (widened to f32 on TPU)
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got.view(bits)[~nan], want.view(bits)[~nan])  # -0.0 keeps its sign


@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_non_contiguous_ids_and_table(backend: str) -> None:
    ids = torch.randint(0, 6, (40,), dtype=torch.int32)[::3]
    weight = torch.randn(9, 6).t()  # [6, 9], column-major
    with kd.backend(backend):
        got = embedding_tiles(ids, weight)
    assert torch.equal(got, weight[ids.long()])


@pytest.mark.parametrize("m", [2, 9, 33], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_gather_with_indices_from_tile_index(backend: str, m: int) -> None:
    x = torch.randn(m, 21)
    rows = torch.arange(m - 1)
    for cfg in (None, SMALL[backend]):
        a, b = _run(next_rows, backend, x, config=cfg)
        assert torch.equal(a, x[1:]), cfg
        assert torch.equal(b, x[(rows * 2) % m] * 2), cfg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_lane_gather_of_a_1d_tensor(backend: str, dtype: torch.dtype) -> None:
    x = (torch.randn(300) * 100).to(dtype)
    x[5], x[7] = -0.0, float("inf") if dtype != torch.int32 else 7
    for cfg in (None, kd.Config([128])):
        got = _run(shifted, backend, x, config=cfg)
        assert torch.equal(got, x[1:]) and torch.equal(got.signbit(), x[1:].signbit()), cfg


@kd.kernel
def cols(x: torch.Tensor, i: torch.Tensor):
    """A gather along the minor (lane) axis of a 2-D tensor."""
    m, n = x.shape
    out = torch.empty([m, i.shape[0]], dtype=x.dtype)
    for tm, ti in kd.tile([m, i.shape[0]]):
        out[tm, ti] = x[tm, i[ti]]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 9, 3), (17, 130, 37), (48, 7, 5)], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_lane_gather_of_a_2d_tensor(backend: str, m: int, n: int, k: int, dtype: torch.dtype) -> None:
    """Pallas: a one-hot select per row (exact), out-of-range ids clamped as other gathers."""
    x = (torch.randn(m, n) * 100).to(dtype)
    if dtype != torch.int32:
        x[0, 0], x[-1, -1] = float("inf"), -0.0
    i = torch.randint(0, n, (k,), dtype=torch.int32)
    for cfg in (None, SMALL[backend]):
        got = _run(cols, backend, x, i, config=cfg)
        assert torch.equal(got, x[:, i.long()]) and torch.equal(got.signbit(), x[:, i.long()].signbit())


def test_a_2d_lane_scatter_is_a_clear_error_on_pallas() -> None:
    @kd.kernel
    def put_cols(x: torch.Tensor, i: torch.Tensor):
        m, n = x.shape
        out = torch.zeros([m, n], dtype=x.dtype)
        for tm, ti in kd.tile([m, i.shape[0]]):
            out[tm, i[ti]] = x[tm, ti]
        return out

    x, i = torch.randn(5, 9), torch.tensor([8, 0, 3], dtype=torch.int32)
    with kd.backend("pallas"), pytest.raises(ConfigError) as e:
        put_cols(x, i)
    assert "minor (lane) axis of `out`" in str(e.value)
    assert "out[tm, i[ti]] = x[tm, ti]" in str(e.value)  # names the user's line


@kd.kernel
def scatter_1d(x: torch.Tensor, idx: torch.Tensor):
    n = x.shape[0]
    out = torch.zeros([n], dtype=x.dtype)
    for t in kd.tile(n):
        out[idx[t]] = x[t]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_scatter_into_a_1d_tensor(backend: str, dtype: torch.dtype) -> None:
    n = 150
    x = torch.randn(n).to(dtype)
    perm = torch.randperm(n).to(torch.int32)
    want = torch.zeros_like(x)
    want[perm.long()] = x
    for cfg in (None, kd.Config([128])):
        assert torch.equal(_run(scatter_1d, backend, x, perm, config=cfg), want), cfg
    dup = torch.tensor([3, 3, 0, 3], dtype=torch.int32)
    xs = torch.tensor([1.0, 2.0, 3.0, 4.0]).to(dtype)
    got = _run(scatter_1d, backend, xs, dup)
    assert got[0] == 3 and got[3] in (1, 2, 4) and got[1] == got[2] == 0


@pytest.mark.parametrize("n", [1, 7, 37], ids=str)
@pytest.mark.parametrize("backend", GATHER_BACKENDS)
def test_scatter_through_a_permutation(backend: str, n: int) -> None:
    x = torch.randn(n, 19)
    perm = torch.randperm(n).to(torch.int32)
    want = torch.zeros_like(x)
    want[perm.long()] = x
    for cfg in (None, SMALL[backend]):
        assert torch.equal(_run(scatter_rows, backend, x, perm, config=cfg), want), cfg


def test_scatter_with_duplicates_writes_one_of_the_values() -> None:
    x = torch.randn(6, 5)
    perm = torch.tensor([2, 2, 0, 2, 1, 0], dtype=torch.int32)
    for backend in GATHER_BACKENDS:
        with kd.backend(backend):
            got = scatter_rows(x, perm)
        for row, src in ((0, (2, 5)), (1, (4,)), (2, (0, 1, 3))):
            assert any(torch.equal(got[row], x[i]) for i in src), (backend, row)
        assert torch.equal(got[3:], torch.zeros(3, 5))


@kd.kernel
def windows(x: torch.Tensor, starts: torch.Tensor, w: int):
    """`x[starts[tb][:, None] + tk.index[None, :]]`: a rank-2 index tile (Helion's jagged form)."""
    n = starts.shape[0]
    out = torch.empty([n, w], dtype=x.dtype)
    for tb, tk in kd.tile([n, w]):
        out[tb, tk] = x[starts[tb][:, None] + tk.index[None, :]]
    return out


def test_rank_2_gather_on_triton_and_nki() -> None:
    """NKI: one indirect DMA per column, an index per element (tests/test_nki_gather.py)."""
    x, starts = torch.randn(30), torch.tensor([0, 7, 20], dtype=torch.int32)
    want = x[starts.long()[:, None] + torch.arange(4)]
    for backend in ("triton", "nki"):
        with kd.backend(backend):
            assert torch.equal(windows(x, starts, 4), want), backend


def test_bad_gather_indices_get_typed_errors() -> None:
    @kd.kernel
    def two_tiles(x: torch.Tensor, i: torch.Tensor):
        n = i.shape[0]
        out = torch.empty([n], dtype=x.dtype)
        for t in kd.tile(n):
            out[t] = x[i[t], i[t]]
        return out

    @kd.kernel
    def float_index(x: torch.Tensor, f: torch.Tensor):
        n = f.shape[0]
        out = torch.empty([n, x.shape[1]], dtype=x.dtype)
        for t in kd.tile(n):
            out[t, :] = x[f[t], :]
        return out

    x = torch.randn(4, 4)
    with kd.backend("triton"), pytest.raises(UnsupportedOpError) as e:
        two_tiles(x, torch.tensor([0, 1], dtype=torch.int32))
    assert "more than one index tile" in str(e.value) and "x[i[t], i[t]]" in str(e.value)
    with kd.backend("triton"), pytest.raises(UnsupportedOpError):
        float_index(x, torch.tensor([0.0, 1.0]))


@pytest.mark.slow  # the real TPU compiler, five targets: about 40-70 s
def test_pallas_gather_compiles_for_every_tpu() -> None:
    """The lane loop (f32: one dynamic row per lane; bf16: the aligned packed group) on the
    real compiler, at a ragged token count and a table of 1000 rows."""
    ids = torch.randint(0, 1000, (300,), dtype=torch.int32)
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(1000, 256).to(dtype)
        rep = embedding_tiles.check(ids, weight, targets=TPUS)
        assert [e.status for e in rep.entries] == ["ok"] * 5, rep
    src = embedding_tiles.source(ids, weight, backend="pallas")
    assert "a vector register cannot be an address on TPU" in src
    assert "memory_space=pltpu.SMEM),  # ids" in src


# -- atomics -----------------------------------------------------------------------------------
@kd.kernel
def segment_sum(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    """A scatter-add (`index_add_`): rows of x summed per segment id, duplicates accumulate."""
    n, d = x.shape
    out = torch.zeros([nseg, d], dtype=x.dtype)
    for tb, td in kd.tile([n, d]):
        kd.atomic_add(out, [seg[tb], td], x[tb, td])
    return out


@kd.kernel
def column_stats(x: torch.Tensor):
    """Column sums, maxima and minima of x, one block of rows per grid step: atomics with
    tile indices from every step of a grid axis."""
    n, d = x.shape
    total = torch.zeros([d], dtype=torch.float32)
    hi = torch.full([d], float("-inf"), dtype=torch.float32)
    lo = torch.full([d], float("inf"), dtype=torch.float32)
    for tb, td in kd.tile([n, d]):
        v = x[tb, td]
        kd.atomic_add(total, [td], v.sum(0))
        kd.atomic_max(hi, [td], v.amax(0))
        kd.atomic_min(lo, [td], v.amin(0))
    return total, hi, lo


@kd.kernel
def histogram(x: torch.Tensor, bins: int):
    """Helion-style histogram: `atomic_add(hist, [x[t]], 1)` on a 1-D int tensor."""
    n = x.shape[0]
    hist = torch.zeros([bins], dtype=torch.int32)
    for t in kd.tile(n):
        kd.atomic_add(hist, [x[t]], 1)
    return hist


@kd.kernel
def matmul_split_k(x: torch.Tensor, y: torch.Tensor):
    """Helion's examples/matmul_split_k.py: the k axis split over a grid axis, each split's
    partial product atomically added into the output."""
    m, k = x.shape
    _, n = y.shape
    out = torch.zeros([m, n], dtype=torch.float32)
    for tm, tn, outer_k in kd.tile([m, n, k]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for inner_k in kd.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tm, inner_k], y[inner_k, tn])
        kd.atomic_add(out, [tm, tn], acc)
    return out


@kd.kernel
def segment_rows(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    """One row per grid step, updated at a loaded segment id: an atomic at a device scalar,
    and a plain store there (the last row of each segment, or one of them)."""
    n, d = x.shape
    out = torch.zeros([nseg, d], dtype=torch.float32)
    last = torch.zeros([nseg, d], dtype=torch.float32)
    for g in kd.grid(n):
        for td in kd.tile(d):
            kd.atomic_add(out, [seg[g], td], x[g, td])
            last[seg[g], td] = x[g, td]
    return out, last


@pytest.mark.parametrize("backend", ("pallas", "triton"))  # nki: no index read from memory
def test_atomic_and_store_at_a_loaded_scalar(backend: str) -> None:
    x = torch.randn(37, 200)
    seg = torch.randint(0, 5, (37,), dtype=torch.int32)
    seg[:5] = torch.arange(5, dtype=torch.int32)
    with kd.backend(backend):
        out, last = segment_rows(x, seg, 5)
    torch.testing.assert_close(out, torch.zeros(5, 200).index_add_(0, seg.long(), x),
                               rtol=1e-5, atol=1e-5)
    for s in range(5):
        assert any(torch.equal(last[s], x[i]) for i in range(37) if seg[i] == s), s


@pytest.mark.parametrize("sizes", [(37, 5, 19), (1, 1, 1), (16, 3, 130)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=str)
@pytest.mark.parametrize("backend", ATOMIC_BACKENDS)
def test_segment_sum_accumulates_duplicates(backend: str, dtype: torch.dtype,
                                            sizes: tuple[int, int, int]) -> None:
    n, nseg, d = sizes
    x = (torch.randn(n, d) * 10).to(dtype)
    seg = torch.randint(0, nseg, (n,), dtype=torch.int32)
    want = torch.zeros(nseg, d, dtype=dtype).index_add_(0, seg.long(), x)
    for cfg in (None, SMALL[backend]):
        got = _run(segment_sum, backend, x, seg, nseg, config=cfg)
        if dtype == torch.int32:
            assert torch.equal(got, want), cfg
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", ATOMIC_BACKENDS)
def test_atomic_add_max_min_across_grid_steps(backend: str) -> None:
    x = torch.randn(45, 150)
    for cfg in (None, SMALL[backend]):
        total, hi, lo = _run(column_stats, backend, x, config=cfg)
        torch.testing.assert_close(total, x.sum(0), rtol=1e-5, atol=1e-5)
        assert torch.equal(hi, x.amax(0)) and torch.equal(lo, x.amin(0)), cfg


@pytest.mark.parametrize("backend", ATOMIC_BACKENDS)
def test_histogram(backend: str) -> None:
    x = torch.randint(0, 10, (1000,), dtype=torch.int32)
    want = torch.bincount(x.long(), minlength=10).to(torch.int32)
    for cfg in (None, kd.Config([128])):
        assert torch.equal(_run(histogram, backend, x, 10, config=cfg), want), cfg


@pytest.mark.parametrize("backend", ("pallas", "triton"))
def test_matmul_split_k(backend: str) -> None:
    x, y = torch.randn(20, 300), torch.randn(300, 24)
    cfg = {"pallas": kd.Config([8, 128, 128, 64]), "triton": kd.Config([16, 16, 128, 32])}[backend]
    for c in (None, cfg):
        torch.testing.assert_close(_run(matmul_split_k, backend, x, y, config=c), x @ y,
                                   rtol=1e-4, atol=1e-4)


def test_atomics_get_typed_errors() -> None:
    from kernel_dsl.errors import ArgumentError, DTypeError

    @kd.kernel
    def into_input(x: torch.Tensor):
        for t in kd.tile(x.shape[0]):
            kd.atomic_add(x, [t], 1.0)
        return x

    @kd.kernel
    def bf16_target(x: torch.Tensor):
        out = torch.zeros([x.shape[0]], dtype=torch.bfloat16)
        for t in kd.tile(x.shape[0]):
            kd.atomic_max(out, [t], x[t])  # 16-bit floats: atomic_add only
        return out

    x = torch.randn(5)
    with kd.backend("triton"):
        with pytest.raises(ArgumentError) as e:
            into_input(x)
        assert "kd.atomic_add(x, [t], 1.0)" in str(e.value)
        with pytest.raises(DTypeError) as e2:
            bf16_target(x)
        assert "atomics take f32, i32 tensors" in str(e2.value)
    # NKI: atomics into blocks are read-modify-writes (tests/test_register_tunable.py); through
    # a 1-D index tile, one per lane (tests/test_segment_atomics.py)
    x = torch.randint(0, 10, (50,), dtype=torch.int32)
    with kd.backend("nki"):
        assert torch.equal(histogram(x, 10), torch.bincount(x.long(), minlength=10).int())


def test_nki_atomics_into_blocks() -> None:
    """NKI: the grid is loops of one kernel, run in order, so an atomic into a block is a load,
    the op and a store (lowering/nki/expand.py)."""
    x = torch.randn(45, 150)
    for cfg in (None, kd.Config([16, 128])):
        total, hi, lo = _run(column_stats, "nki", x, config=cfg)
        torch.testing.assert_close(total, x.sum(0), rtol=1e-5, atol=1e-5)
        assert torch.equal(hi, x.amax(0)) and torch.equal(lo, x.amin(0)), cfg


@pytest.mark.slow  # the real TPU compiler, five targets: about 40-70 s
def test_pallas_atomics_and_scatter_compile_for_every_tpu() -> None:
    x, seg = torch.randn(300, 256), torch.randint(0, 50, (300,), dtype=torch.int32)
    for kernel, args in ((segment_sum, (x, seg, 50)), (column_stats, (x,)),
                         (scatter_rows, (x, torch.randperm(300).to(torch.int32))),
                         (histogram, (seg, 50)), (shifted, (x[0],)), (cols, (x, seg)),
                         (cols, (x.bfloat16(), seg)), (shifted, (torch.randn(3000),)),
                         (segment_rows, (x, seg, 50))):
        rep = kernel.check(*args, targets=TPUS)
        assert [e.status for e in rep.entries] == ["ok"] * 5, (kernel, rep)
    src = segment_sum.source(x, seg, 50, backend="pallas")
    assert "dimension_semantics=('arbitrary', 'arbitrary')" in src
    assert "TPU has no atomics" in src


@pytest.mark.skipif(__import__("os").environ.get("TRITON_INTERPRET") == "1",
                    reason="TRITON_INTERPRET=1: no GPU compiler in this process")
def test_triton_gathers_scatters_and_atomics_compile_for_sm90() -> None:
    """Triton's real GPU compiler (compile-only, Hopper) takes the pointer-and-mask forms and
    tl.atomic_add/max/min."""
    from kernel_dsl.lowering import get

    x, seg = torch.randn(37, 19), torch.randint(0, 5, (37,), dtype=torch.int32)
    cases = [(embedding_tiles, (seg, torch.randn(5, 19))), (segment_sum, (x, seg, 5)),
             (column_stats, (x,)), (histogram, (seg, 5)), (scatter_rows, (x, seg)),
             (next_rows, (x,))]
    for kernel, args in cases:
        kernel.run_cpu("triton", args, None)
        report = get("triton").verify(kernel.generated(*args, backend="triton", target="cuda"))
        assert report["ok"], (kernel, report["error"])


def test_fuzz_gathers_from_tile_index() -> None:
    """kernel_dsl.testing.fuzz over sizes, dtypes, configs and value classes (NaN/inf rows come
    through a gather as they are)."""
    from kernel_dsl.testing import fuzz

    def reference(x: torch.Tensor):
        m = x.shape[0]
        return x[1:], x[(torch.arange(m - 1) * 2) % m] * 2

    fuzz(next_rows, reference, "x[m,n]", dtypes=[torch.float32, torch.bfloat16],
         dims={"m": (2, 40), "n": (1, 300)}, configs=3, backends=list(ATOMIC_BACKENDS),
         max_examples=6, seed=0)


@kd.kernel
def embedding_bag(ids: torch.Tensor, emb: torch.Tensor):
    """A gather inside a sequential `kd.tile` loop: the sum of the bag's embeddings."""
    n = ids.shape[0]
    d = emb.shape[1]
    out = torch.empty([d], dtype=torch.float32)
    for td in kd.tile(d):
        acc = kd.zeros([td], dtype=torch.float32)
        for tb in kd.tile(n):
            acc = acc + emb[ids[tb], td].sum(0)
        out[td] = acc
    return out


def test_gather_inside_a_loop_in_both_pallas_loop_modes() -> None:
    ids, emb = torch.randint(0, 50, (37,), dtype=torch.int32), torch.randn(50, 200)
    want = emb[ids.long()].sum(0)
    for backend, cfg in (("pallas", kd.Config([128, 8])),
                         ("pallas", kd.Config([128, 8], loop_mode="inner")),
                         ("triton", kd.Config([32, 8]))):
        torch.testing.assert_close(_run(embedding_bag, backend, ids, emb, config=cfg), want,
                                   rtol=1e-5, atol=1e-5)


def test_pallas_index_tensor_also_read_as_a_vector_is_passed_twice() -> None:
    """Blocked in VMEM for the vector read and whole in SMEM for the lane loop (plan.py twins)."""
    @kd.kernel
    def both(ids: torch.Tensor, emb: torch.Tensor):
        n, d = ids.shape[0], emb.shape[1]
        out = torch.empty([n, d], dtype=emb.dtype)
        ids_out = torch.empty([n], dtype=torch.int32)
        for tb, td in kd.tile([n, d]):
            out[tb, td] = emb[ids[tb], td]
            ids_out[tb] = ids[tb]
        return out, ids_out

    ids, emb = torch.randint(0, 50, (37,), dtype=torch.int32), torch.randn(50, 20)
    with kd.backend("triton"):
        a, b = both(ids, emb)
    assert torch.equal(a, emb[ids.long()]) and torch.equal(b, ids)
    with kd.backend("pallas"):
        a, b = both(ids, emb)
    assert torch.equal(a, emb[ids.long()]) and torch.equal(b, ids)
