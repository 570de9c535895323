"""A tile over a leading part of a longer axis (Helion's jagged form: `x_offsets[tile_b]` with
tile_b over num_rows of an offsets tensor of num_rows + 1): lanes past the tile's extent are
masked, in loads and in stores, on every backend. Before this, kernel_dsl refused it (a tile had
to index axes of its own extent), and a `kd.tile(0, n)` store into a longer torch.zeros output
came back with garbage rows on Pallas."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ShapeError

BACKENDS = ("pallas", "triton", "nki")
SIZES = (1, 7, 33, 130)  # size 1, primes, a ragged second NKI partition block


@kd.kernel
def lengths(x_offsets: torch.Tensor):
    """Per-row lengths of a jagged tensor, as Helion's jagged examples read them."""
    num_rows = x_offsets.size(0) - 1
    out = torch.empty([num_rows], dtype=torch.int32, device=x_offsets.device)
    for tile_b in kd.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        out[tile_b] = ends - starts
    return out


@kd.kernel
def head_rows(x: torch.Tensor, k: int):
    """Twice the first rows of `x` into a torch.zeros output of x's shape: the rest stay 0."""
    out = torch.zeros_like(x)
    for tb, tn in kd.tile([x.shape[0] - k, x.shape[1]]):
        out[tb, tn] = x[tb, tn] * 2
    return out


@kd.kernel
def head_rows_filled(x: torch.Tensor):
    out = torch.full_like(x, -1.5)
    for tb in kd.tile(x.shape[0] - 2):
        out[tb, :] = x[tb, :] + 1
    return out


@kd.kernel
def bounded_head_rows(x: torch.Tensor):
    """The same through `kd.tile(0, end)`: its rows past the end were garbage on Pallas."""
    out = torch.zeros_like(x)
    for tb, tn in kd.tile([0, 0], [x.shape[0] - 3, x.shape[1]]):
        out[tb, tn] = x[tb, tn] * 2
    return out


@kd.kernel
def head_cols_sum(x: torch.Tensor):
    """A sequential loop over a leading part of the reduced axis (all but its last 5 columns)."""
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tk in kd.tile(n - 5):
            acc += x[tm, tk].sum(-1)
        out[tm] = acc
    return out


@kd.kernel
def common_rows(x: torch.Tensor, y: torch.Tensor):
    """Rows both tensors have: a prefix of whichever is longer."""
    out = torch.zeros_like(x)
    for tb, tn in kd.tile([min(x.shape[0], y.shape[0]), x.shape[1]]):
        out[tb, tn] = x[tb, tn] + y[tb, tn]
    return out


def _common_rows_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r = min(x.shape[0], y.shape[0])
    out = torch.zeros_like(x)
    out[:r] = x[:r] + y[:r]
    return out


def _offsets(num_rows: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 6, (num_rows,), generator=g, dtype=torch.int32)
    return torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(counts, 0).int()])


@pytest.mark.parametrize("num_rows", SIZES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_jagged_row_lengths_from_offsets(backend: str, num_rows: int) -> None:
    offs = _offsets(num_rows)
    with kd.backend(backend):
        got = lengths(offs)
    torch.testing.assert_close(got, offs[1:] - offs[:-1])


@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prefix_store_leaves_the_zeros_past_it(backend: str, m: int) -> None:
    x = torch.randn(m + 3, 150)
    want = torch.zeros_like(x)
    want[:m] = x[:m] * 2
    with kd.backend(backend):
        torch.testing.assert_close(head_rows(x, 3), want)
        torch.testing.assert_close(bounded_head_rows(x), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prefix_store_leaves_a_full_outputs_fill_past_it(backend: str) -> None:
    x = torch.randn(11, 5)
    want = torch.full_like(x, -1.5)
    want[:9] = x[:9] + 1
    with kd.backend(backend):
        torch.testing.assert_close(head_rows_filled(x), want)


@pytest.mark.parametrize("m", (1, 9))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_over_a_leading_part_of_the_reduced_axis(backend: str, m: int) -> None:
    x = torch.randn(m, 300)
    with kd.backend(backend):
        got = head_cols_sum(x)
    torch.testing.assert_close(got, x[:, :295].sum(-1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [(5, 9), (9, 5), (1, 2), (6, 6)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_shorter_tensor_sets_the_tile(backend: str, rows: tuple[int, int]) -> None:
    x, y = torch.randn(rows[0], 7), torch.randn(rows[1], 7)
    with kd.backend(backend):
        torch.testing.assert_close(common_rows(x, y), _common_rows_ref(x, y))


@pytest.mark.parametrize("config", [kd.Config([8, 128]), kd.Config([16, 128]), kd.Config([8, 256])],
                         ids=str)
def test_every_pallas_block_gives_the_same_rows(config: kd.Config) -> None:
    """Blocks smaller than the tile (several steps over a resident axis), and larger."""
    x = torch.randn(40, 300)
    want = torch.zeros_like(x)
    want[:37] = x[:37] * 2
    torch.testing.assert_close(head_rows.run_cpu("pallas", (x, 3), config)[0], want)


def test_a_tile_longer_than_the_axis_is_still_an_error() -> None:
    @kd.kernel
    def too_long(x: torch.Tensor):
        out = torch.empty([x.shape[0] + 1], dtype=x.dtype, device=x.device)
        for t in kd.tile(x.shape[0] + 1):
            out[t] = x[t]
        return out

    with pytest.raises(ShapeError, match=r"a tile over 6 elements indexes axis 0 of `x`, which has 5"):
        too_long(torch.randn(5))


def test_fuzz_prefix_tiles() -> None:
    from kernel_dsl.testing import fuzz

    fuzz(common_rows, _common_rows_ref, "x[m,n], y[k,n]", dtypes=[torch.float32, torch.bfloat16],
         dims={"m": (1, 40), "k": (1, 40), "n": (1, 200)}, configs=3,
         backends=list(BACKENDS), max_examples=6, seed=0)


@pytest.mark.slow
def test_prefix_tiles_compile_for_every_tpu_generation() -> None:
    """The real Mosaic compiler: one block shrunk to 7 rows starts at a static 0 (provably
    aligned), several blocks stream a resident axis, and the offsets gather compiles."""
    for m in (7, 300):
        r = head_rows.check(torch.empty(m + 3, 256), 3, measure_vmem=False)
        assert r.ok, r.table()
        r = lengths.check(torch.empty(m + 1, dtype=torch.int32), measure_vmem=False)
        assert r.ok, r.table()


def test_a_matmul_contracting_a_prefix_is_the_shape_bug_it_looks_like() -> None:
    """`x[tm, tk] @ w[tk, tn]` with w taller than x is wide keeps its ShapeError: a silent
    prefix read would hide the mismatch."""
    @kd.kernel
    def mm(x: torch.Tensor, w: torch.Tensor):
        m, k = x.shape
        out = torch.empty([m, w.shape[1]], dtype=torch.float32)
        for tm, tn in kd.tile([m, w.shape[1]]):
            acc = kd.zeros([tm, tn], dtype=torch.float32)
            for tk in kd.tile(k):
                acc = kd.dot(x[tm, tk], w[tk, tn], acc)
            out[tm, tn] = acc
        return out

    with pytest.raises(ShapeError, match=r"contracts tile `tk` over 7 elements, but it indexes "
                                         r"axis 0 of `w`, which has 8"):
        mm(torch.randn(10, 7), torch.randn(8, 5))
