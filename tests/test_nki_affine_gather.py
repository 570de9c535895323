"""Gathers whose index is `t.index + c` on NKI: the tile's block shifted by `c`, rendered as an
ordinary DMA at a shifted offset (lowering/nki/shifted.py) instead of the ConfigError every other
NKI gather gets. Checked against torch at ragged sizes (NKI partitions are 128) and against the
Pallas and Triton backends, which lower every gather; plus the generated source's form."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.lowering.nki import forms
from kernel_dsl.lowering.nki.runner import compile_for_torch

SIZES = (1, 7, 33, 130, 257)
BACKENDS = ("nki", "pallas", "triton")
# small NKI blocks: several blocks per axis and a ragged last one (1: the int-index DMA)
NKI_CONFIGS_1D = (None, kd.Config([32]), kd.Config([1]))


@kd.kernel
def next_minus(x: torch.Tensor):
    """`d[i] = x[i + 1] - x[i]` over a tile of n on an x of n + 1 elements."""
    n = x.shape[0] - 1
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[tb.index + 1] - x[tb]
    return out


@kd.kernel
def next_minus_two(x: torch.Tensor, y: torch.Tensor):
    """The same with the plain part from a tensor of exactly n elements, and `c + t.index`."""
    n = y.shape[0]
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[1 + tb.index] - y[tb]
    return out


@kd.kernel
def prev(x: torch.Tensor):
    """`x[i - 1]`, with lane 0 (index -1) not used."""
    n = x.shape[0]
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = torch.where(tb.index > 0, x[tb.index - 1], 0.0)
    return out


@kd.kernel
def jagged_lengths(x_offsets: torch.Tensor):
    """Helion's jagged examples: per-row lengths from an offsets tensor of num_rows + 1."""
    num_rows = x_offsets.shape[0] - 1
    out = torch.empty([num_rows], dtype=x_offsets.dtype)
    for tile_b in kd.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        out[tile_b] = ends - starts
    return out


@kd.kernel
def row_diff(x: torch.Tensor):
    """2-D, the shift on the rows (NKI partitions): `x[tm.index + 1, tn] - x[tm, tn]`."""
    m, n = x.shape
    out = torch.empty([m - 1, n], dtype=x.dtype)
    for tm, tn in kd.tile([m - 1, n]):
        out[tm, tn] = x[tm.index + 1, tn] - x[tm, tn]
    return out


@kd.kernel
def row_prev(x: torch.Tensor):
    """2-D, a clipped shift on the rows: row i - 1, row 0 unused."""
    m, n = x.shape
    out = torch.empty([m, n], dtype=x.dtype)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = torch.where((tm.index > 0)[:, None], x[tm.index - 1, tn], 0.0)
    return out


@kd.kernel
def col_next(x: torch.Tensor):
    """2-D, the shift on the columns (NKI's free axis)."""
    m, n = x.shape
    out = torch.empty([m, n - 1], dtype=x.dtype)
    for tm, tn in kd.tile([m, n - 1]):
        out[tm, tn] = x[tm, tn.index + 1] * 2.0
    return out


@kd.kernel
def shift_store(x: torch.Tensor):
    """A scatter at a shifted block: `out[i + 1] = x[i]`, out[0] stays 0."""
    n = x.shape[0]
    out = torch.zeros([n + 1], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb.index + 1] = x[tb]
    return out


@kd.kernel
def shift_store_clipped(x: torch.Tensor):
    """`out[i - 1] = x[i]` into an out of n: lane 0's index -1 writes nothing."""
    n = x.shape[0]
    out = torch.zeros([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb.index - 1] = x[tb]
    return out


@kd.kernel
def past_the_end(x: torch.Tensor):
    """`x[i + 1]` over all n elements: the last lane's index n is out of range (the user's bug)."""
    n = x.shape[0]
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[tb.index + 1]
    return out


@kd.kernel
def through_casts(x: torch.Tensor):
    """`t.index + 1`, cast to int16, `+ 1`: still the block shifted by +2."""
    n = x.shape[0] - 2
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[(tb.index + 1).to(torch.int16) + 1]
    return out


@kd.kernel
def wraps_in_int8(x: torch.Tensor):
    """`(t.index + 1).to(torch.int8)` wraps past 127: not a shifted block."""
    n = x.shape[0] - 1
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[(tb.index + 1).to(torch.int8)]
    return out


@kd.kernel
def in_a_loop(x: torch.Tensor):
    """The shifted tile is a sequential loop's, on the free axis."""
    m, n = x.shape
    out = torch.zeros([m, n - 1], dtype=x.dtype)
    for tm in kd.tile(m):
        for tn in kd.tile(n - 1):
            out[tm, tn] = x[tm, tn.index + 1] - x[tm, tn]
    return out


@kd.kernel
def doubled(x: torch.Tensor):
    """`x[2 i]`: stride 2, not a shifted block."""
    n = x.shape[0] // 2
    out = torch.empty([n], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb] = x[tb.index * 2]
    return out


def _run(kernel: kd.Kernel, backend: str, args: tuple[Any, ...], config: kd.Config | None) -> Any:
    if config is None:
        with kd.backend(backend):
            return kernel(*args)
    outs = kernel.run_cpu(backend, args, config)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _check(kernel: kd.Kernel, args: tuple[Any, ...], want: torch.Tensor,
           nki_configs: tuple[kd.Config | None, ...] = (None,),
           backends: tuple[str, ...] = BACKENDS) -> None:
    for backend in backends:
        for cfg in nki_configs if backend == "nki" else (None,):
            got = _run(kernel, backend, args, cfg)
            assert torch.equal(got, want), (backend, cfg)


CASES_1D: dict[str, tuple[kd.Kernel, Callable[[int], tuple[Any, ...]], Callable[..., torch.Tensor]]] = {
    "next_minus": (next_minus, lambda n: (torch.randn(n + 1),), lambda x: x[1:] - x[:-1]),
    "next_minus_two": (next_minus_two, lambda n: (torch.randn(n + 1), torch.randn(n)),
                       lambda x, y: x[1:] - y),
    "prev": (prev, lambda n: (torch.randn(n),),
             lambda x: torch.cat([torch.zeros(1), x[:-1]])),
    "jagged_lengths": (jagged_lengths,
                       lambda n: (torch.cumsum(torch.randint(0, 9, (n + 1,)), 0).to(torch.int32),),
                       lambda o: o[1:] - o[:-1]),
    "shift_store": (shift_store, lambda n: (torch.randn(n),),
                    lambda x: torch.cat([torch.zeros(1), x])),
    "shift_store_clipped": (shift_store_clipped, lambda n: (torch.randn(n),),
                            lambda x: torch.cat([x[1:], torch.zeros(1)])),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", list(CASES_1D))
def test_shifted_1d_matches_torch_on_every_backend(case: str, n: int) -> None:
    torch.manual_seed(n)
    kernel, make, ref = CASES_1D[case]
    args = make(n)
    _check(kernel, args, ref(*args), NKI_CONFIGS_1D)


@pytest.mark.parametrize("m", SIZES)
def test_shifted_rows_and_columns_2d(m: int) -> None:
    torch.manual_seed(m)
    x = torch.randn(m + 1, 33)
    _check(row_diff, (x,), x[1:] - x[:-1], (None, kd.Config([32, 16])))
    y = torch.randn(m, 20)
    _check(row_prev, (y,), torch.cat([torch.zeros(1, 20), y[:-1]]), (None, kd.Config([32, 16])))
    z = torch.randn(20, m + 1)
    # Pallas rejects a gather along the minor axis of a 2-D tensor (docs/ir.md)
    _check(col_next, (z,), z[:, 1:] * 2.0, (None, kd.Config([16, 8])), ("nki", "triton"))


def test_casts_and_sequential_loops() -> None:
    x = torch.randn(300)
    _check(through_casts, (x,), x[2:], (None, kd.Config([128])))
    y = torch.randn(40, 300)
    _check(in_a_loop, (y,), y[:, 1:] - y[:, :-1], (None, kd.Config([16, 128])), ("nki", "triton"))


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_other_targets(target: str) -> None:
    """trn1 zeroes the lanes past a ragged edge before the (clipped) DMA as well."""
    nki = lowering.get("nki")
    y = torch.randn(130, 20)
    ir = row_prev.ir(y)
    for cfg in (nki.default_config(ir, target), kd.Config([32, 16])):
        fn = compile_for_torch(nki.render(ir, cfg, target), ir, "interp")
        (got,) = fn(y)
        assert torch.equal(got, torch.cat([torch.zeros(1, 20), y[:-1]])), cfg


def test_a_lane_past_the_axis_reads_zero_on_nki_and_never_faults() -> None:
    """docs/ir.md: an in-range lane whose index is outside the axis is the user's bug; Pallas and
    Triton read the clamped element, NKI's clipped DMA leaves 0 there."""
    x = torch.randn(130)
    for cfg in (None, kd.Config([32]), kd.Config([1])):
        got = _run(past_the_end, "nki", (x,), cfg)
        assert torch.equal(got[:-1], x[1:]) and got[-1] == 0, cfg
    for backend in ("pallas", "triton"):
        got = _run(past_the_end, backend, (x,), None)
        assert torch.equal(got[:-1], x[1:]) and got[-1] == x[-1], backend


def test_generated_source_is_a_shifted_dma_in_allowed_forms() -> None:
    src = row_diff.source(torch.randn(131, 40), backend="nki")
    assert "the block of tm shifted by +1" in src
    assert "x[tm0 + 1:tm0 + 1 + n_tm, " in src  # statically in bounds: no clipping
    assert "max(0," not in src
    assert forms.violations(src) == []
    src = prev.source(torch.randn(300), backend="nki", config=kd.Config([128]))
    assert "shifted by -1" in src and "clipped to [0, 300)" in src
    assert "lanes whose index is outside the axis read 0" in src
    assert forms.violations(src) == []
    src = shift_store_clipped.source(torch.randn(300), backend="nki", config=kd.Config([128]))
    assert "nisa.memset" not in src.split("out_lo = ")[1]  # a store writes nothing there
    assert forms.violations(src) == []


def test_other_affine_gathers_are_indirect_dmas() -> None:
    """Not shifted blocks: a per-partition indirect DMA (lowering/nki/gather.py, the index an
    iota column); an index that wrapped negative is out of range and reads 0 there."""
    x = torch.randn(300)
    src = doubled.source(x, backend="nki")
    assert "vector_offset=" in src and "nisa.iota" in src and forms.violations(src) == []
    with kd.backend("nki"):
        assert torch.equal(doubled(x), x[0:300:2])
        got = wraps_in_int8(x)
    idx = (torch.arange(299) + 1).to(torch.int8).long()
    assert torch.equal(got[idx >= 0], x[idx[idx >= 0]])
    assert (got[idx < 0] == 0).all() and (idx < 0).sum() > 100


@kd.kernel
def into_a_longer_zeros(x: torch.Tensor):
    """A 1-D torch.zeros output longer than one init tile (2048), a shifted store into it."""
    n = x.shape[0]
    out = torch.zeros([2 * n + 1], dtype=x.dtype)
    for tb in kd.tile(n):
        out[tb.index + 1] = x[tb]
    return out


def test_a_long_1d_zeros_output_is_filled_before_the_grid() -> None:
    """The fill of a 1-D output closed no loop, so the grid and `return` sat inside its first
    chunk: elements past 2048 were never zeroed."""
    x = torch.randn(3000)
    want = torch.cat([torch.zeros(1), x, torch.zeros(3000)])
    _check(into_a_longer_zeros, (x,), want, (None, kd.Config([128])), ("nki", "triton"))
    src = into_a_longer_zeros.source(x, backend="nki", config=kd.Config([128]))
    assert "\n    for i_tb in range(" in src and "\n    return out" in src
