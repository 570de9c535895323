"""`kd.grid` (Helion's `hl.grid`): integer indices as the launch grid and as a loop; device
scalars (a grid index, index arithmetic, a loaded int) index one element of an axis, on every
backend; the Pallas forms the real TPU compiler accepts (leading dims squeezed, sublane dims
picked from a sublane tile, scalar-read inputs in SMEM)."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ConfigError, KernelSyntaxError, UnsupportedOpError

BACKENDS = ("pallas", "triton", "nki")


@kd.kernel
def row_scale(x: torch.Tensor, w: torch.Tensor):
    """out[b, :] = x[b, :] * w[b, 0]: a grid index on the sublane dim, a scalar-read input."""
    b, n = x.shape
    out = torch.empty([b, n], dtype=torch.float32)
    for g in kd.grid(b):
        for tn in kd.tile(n):
            out[g, tn] = x[g, tn] * w[g, 0]
    return out


@kd.kernel
def weighted_rows(x: torch.Tensor):
    """out[b, :] = sum_r (r + 1) * x[b, r, :]: a grid index on a leading dim, a nested
    `kd.grid` loop whose index takes arithmetic."""
    b, m, n = x.shape
    out = torch.empty([b, n], dtype=torch.float32)
    for bi in kd.grid(b):
        acc = kd.zeros([n], dtype=torch.float32)
        for r in kd.grid(m):
            acc = acc + x[bi, r, :] * (r + 1)
        out[bi, :] = acc
    return out


@kd.kernel
def embedding(ids: torch.Tensor, weight: torch.Tensor):
    """Helion's embedding with one token per grid step: a loaded int indexes the table."""
    n = ids.shape[0]
    dim = weight.shape[1]
    out = torch.empty([n, dim], dtype=weight.dtype)
    for t in kd.grid(n):
        for td in kd.tile(dim):
            out[t, td] = weight[ids[t], td]
    return out


@kd.kernel
def pick_and_lse(logits: torch.Tensor, labels: torch.Tensor):
    """Cross entropy per row: logsumexp(row) - row[label], the label read as a scalar."""
    n, v = logits.shape
    losses = torch.empty([n], dtype=torch.float32)
    for t in kd.grid(n):
        row = logits[t, :]
        losses[t] = torch.logsumexp(row, dim=-1) - logits[t, labels[t]]
    return losses


@kd.kernel
def pair_grid(x: torch.Tensor):
    """`kd.grid([b, h])` and `kd.grid(begin, end)`: the rows from h on, per (b, h)."""
    b, h, n = x.shape
    out = torch.empty([b, h, n], dtype=torch.float32)
    for bi, hi in kd.grid([b, h]):
        acc = kd.zeros([n], dtype=torch.float32)
        for r in kd.grid(hi, h):
            acc = acc + x[bi, r, :]
        out[bi, hi, :] = acc
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (13, 130), (17, 3)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_grid_index_on_the_sublane_dim(backend: str, shape: tuple[int, int]) -> None:
    x, w = torch.randn(*shape), torch.randn(shape[0], 1)
    with kd.backend(backend):
        torch.testing.assert_close(row_scale(x, w), x * w, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_grid_loop_and_index_arithmetic(backend: str) -> None:
    x = torch.randn(3, 4, 9)
    want = (x * torch.arange(1, 5, dtype=torch.float32)[None, :, None]).sum(1)
    with kd.backend(backend):
        torch.testing.assert_close(weighted_rows(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grid_of_two_and_a_bounded_grid_loop(backend: str) -> None:
    x = torch.randn(2, 5, 7)
    want = torch.stack([x[:, h:].sum(1) for h in range(5)], 1)
    with kd.backend(backend):
        torch.testing.assert_close(pair_grid(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_embedding_by_a_loaded_index(backend: str, dtype: torch.dtype) -> None:
    ids = torch.tensor([3, 0, 10, 10, 7, 1, 0], dtype=torch.int32)
    weight = torch.randn(11, 19).to(dtype)
    with kd.backend(backend):
        torch.testing.assert_close(embedding(ids, weight), weight[ids.long()], rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_cross_entropy_picks_the_label(backend: str) -> None:
    logits, labels = torch.randn(9, 33), torch.randint(0, 33, (9,), dtype=torch.int32)
    want = torch.nn.functional.cross_entropy(logits, labels.long(), reduction="none")
    with kd.backend(backend):
        torch.testing.assert_close(pick_and_lse(logits, labels), want, rtol=1e-5, atol=1e-5)


def test_nki_says_a_loaded_index_is_not_supported() -> None:
    ids, weight = torch.tensor([1, 0], dtype=torch.int32), torch.randn(3, 4)
    with kd.backend("nki"), pytest.raises(ConfigError) as e:
        embedding(ids, weight)
    assert "cannot index a tensor by a value loaded from memory" in str(e.value)
    assert "test_grid_index.py" in str(e.value)


def test_pallas_forms_compile_for_tpu() -> None:
    """The real compiler takes the picked sublane row, the squeezed leading dim and the SMEM
    index table."""
    cases = [(row_scale, (torch.randn(16, 512), torch.randn(16, 1))),
             (weighted_rows, (torch.randn(4, 8, 256),)),
             (embedding, (torch.randint(0, 11, (8,), dtype=torch.int32), torch.randn(11, 256)))]
    for kernel, args in cases:
        src = kernel.source(*args, backend="pallas")
        rep = kernel.check(*args, targets=["tpu-v5e", "tpu-v6e"])
        assert [e.status for e in rep.entries] == ["ok", "ok"], (rep, src)
    assert "memory_space=pltpu.SMEM" in embedding.source(*cases[2][1], backend="pallas")


def test_a_float_scalar_is_not_an_index() -> None:
    @kd.kernel
    def bad(x: torch.Tensor):
        out = torch.empty_like(x)
        for g in kd.grid(x.shape[0]):
            out[g, :] = x[x[g, 0], :]
        return out

    with pytest.raises(UnsupportedOpError):
        bad.ir(torch.randn(4, 4))


@kd.kernel
def jagged_sum(values: torch.Tensor, offsets: torch.Tensor):
    """Helion's jagged pattern, one segment per grid step: a loop bounded by offsets read from
    memory (`kd.tile(start, end)`)."""
    d = values.shape[1]
    b = offsets.shape[0] - 1
    out = torch.empty([b, d], dtype=torch.float32)
    for g in kd.grid(b):
        start = offsets[g]
        end = offsets[g + 1]
        acc = kd.zeros([d], dtype=torch.float32)
        for tj in kd.tile(start, end):
            acc = acc + values[tj, :].sum(0)
        out[g, :] = acc
    return out


def _jagged(lens: list[int], d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    offsets = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    values = torch.randn(max(int(offsets[-1]), 1), d)
    ref = torch.stack([values[offsets[i]:offsets[i + 1]].sum(0) for i in range(len(lens))])
    return values, offsets, ref


@pytest.mark.parametrize("lens", [[3, 0, 7, 1, 12], [1], [0, 0, 5], [40, 2, 17]], ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_loop_bounded_by_offsets_in_memory(backend: str, lens: list[int]) -> None:
    values, offsets, ref = _jagged(lens, 5)
    for blocks in ([8], [64], [3]):  # the grid is pinned to blocks of 1
        got = jagged_sum.run_cpu(backend, (values, offsets), kd.Config(blocks))[0]
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_offset_bounds_compile_for_tpu_and_walk_their_reach_on_nki() -> None:
    values, offsets, ref = _jagged([100, 0, 156], 128)
    rep = jagged_sum.check(values, offsets, targets=["tpu-v5e"])
    assert [e.status for e in rep.entries] == ["ok"], rep
    src = jagged_sum.source(values, offsets, backend="nki")
    assert "the `begin` and `end` of tj read from memory: a static loop over its reach [0, 256)" in src
    with kd.backend("nki"):
        torch.testing.assert_close(jagged_sum(values, offsets), ref, rtol=1e-4, atol=1e-4)


def test_a_loop_bounded_by_memory_must_index_a_tensor() -> None:
    @kd.kernel
    def counts(offsets: torch.Tensor):
        out = torch.empty([offsets.shape[0] - 1], dtype=torch.int32)
        for g in kd.grid(offsets.shape[0] - 1):
            n = kd.zeros([1], dtype=torch.int32)
            for tj in kd.tile(offsets[g], offsets[g + 1]):
                n = n + 1
            out[g] = n.sum()
        return out

    with pytest.raises(KernelSyntaxError, match="bounded by values read from memory but indexes"):
        counts.ir(torch.tensor([0, 3, 5], dtype=torch.int32))


@kd.kernel
def rows_into_zeros(x: torch.Tensor):
    """A `torch.zeros` output filled one row per grid step: on Pallas several steps share one
    sublane block, which must be zero-filled on the first of them only."""
    b, n = x.shape
    out = torch.zeros([b, n], dtype=torch.float32)
    for g in kd.grid(b):
        for tn in kd.tile(n):
            out[g, tn] = x[g, tn] * 2
    return out


@pytest.mark.parametrize("shape", [(13, 130), (8, 5), (1, 3)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_zeros_output_filled_row_by_row_keeps_every_row(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    with kd.backend(backend):
        torch.testing.assert_close(rows_into_zeros(x), x * 2, rtol=0, atol=0)


def test_a_zeros_output_filled_row_by_row_compiles_for_tpu() -> None:
    """With the row's whole width in one block. Narrower lane blocks of a zeros-filled output
    stay resident across the loop, and Mosaic rejects the store of row g at a lane offset
    (E2003: it cannot prove the row offset aligned); that case is open, not hidden."""
    x = torch.randn(16, 256)
    rep = rows_into_zeros.check(x, targets=["tpu-v5e"], config=kd.Config([256], loop_mode="grid"))
    assert [e.status for e in rep.entries] == ["ok"], rep
