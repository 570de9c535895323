"""Atomics through index tiles with duplicate indices (issue 13): Helion's
examples/segment_reduction.py ported literally (tests/dsl_kernels.py), and
`kd.atomic_add/max/min(out, [ids[tb], ...], v)` with heavy duplication, on pallas, triton and nki
against torch's index_add / scatter_reduce.

Pallas: the segment ids are read as the scatter's index (lane by lane, from SMEM) and as vectors
(the scan), so the tensor is passed twice (lowering/pallas/plan.py `twins`). NKI: a
read-modify-write per lane of the index tile (lowering/nki/atomic_scatter.py)."""
from __future__ import annotations

import pytest
import torch
from dsl_kernels import segmented_reduction_helion

import kernel_dsl as kd
from kernel_dsl.errors import ConfigError

BACKENDS = ("pallas", "triton", "nki")
TPUS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- direct atomics through an index tile ---------------------------------------------------------
@kd.kernel
def seg_rows(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    """Rows of x added / maxed / mined into rows seg[i] of three [nseg, d] outputs."""
    n, d = x.shape
    s = torch.zeros([nseg, d], dtype=x.dtype)
    hi = torch.zeros([nseg, d], dtype=x.dtype)
    lo = torch.zeros([nseg, d], dtype=x.dtype)
    for tb, td in kd.tile([n, d]):
        ids = seg[tb]
        v = x[tb, td]
        kd.atomic_add(s, [ids, td], v)
        kd.atomic_max(hi, [ids, td], v)
        kd.atomic_min(lo, [ids, td], v)
    return s, hi, lo


@kd.kernel
def seg_add(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    """atomic_add only (16-bit floats take no atomic max/min)."""
    n, d = x.shape
    s = torch.zeros([nseg, d], dtype=x.dtype)
    for tb, td in kd.tile([n, d]):
        kd.atomic_add(s, [seg[tb], td], x[tb, td])
    return s


@kd.kernel
def hist_max(x: torch.Tensor, seg: torch.Tensor, nseg: int):
    """1-D outputs: a count per segment and the max per segment."""
    n = x.shape[0]
    cnt = torch.zeros([nseg], dtype=torch.int32)
    hi = torch.zeros([nseg], dtype=x.dtype)
    for tb in kd.tile(n):
        kd.atomic_add(cnt, [seg[tb]], 1)
        kd.atomic_max(hi, [seg[tb]], x[tb])
    return cnt, hi


def _ref_rows(x: torch.Tensor, seg: torch.Tensor, nseg: int, op: str) -> torch.Tensor:
    """torch's scatter_reduce over rows into zeros, lanes with an index outside [0, nseg) dropped."""
    ok = (seg >= 0) & (seg < nseg)
    xs, ss = x[ok], seg[ok].long()
    out = torch.zeros(nseg, *x.shape[1:], dtype=x.dtype)
    if op == "add":
        return out.index_add_(0, ss, xs)
    red = {"max": "amax", "min": "amin"}[op]
    index = ss.view(-1, *([1] * (x.dim() - 1))).expand_as(xs)
    return out.scatter_reduce_(0, index, xs, red, include_self=True)


def _values(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Small integers: every sum of them is exact in f32 and bf16, whatever the order."""
    return torch.randint(-8, 9, shape).to(dtype)


def _run(kernel, backend: str, *args, config=None):
    if config is None:
        with kd.backend(backend):
            return kernel(*args)
    outs = kernel.run_cpu(backend, args, config)
    return outs[0] if len(outs) == 1 else tuple(outs)


# small blocks: several blocks per axis, ragged last ones (pallas lanes: 8 rows, 128 columns)
SMALL = {"pallas": kd.Config([8, 128]), "triton": kd.Config([4, 16]), "nki": kd.Config([8, 16])}


SMALL_1D = {"pallas": kd.Config([128]), "triton": kd.Config([16]), "nki": kd.Config([16])}


def _configs(kernel, args, backend: str, every: bool, small=SMALL):
    """The default and `small`; with `every`, also up to six configs spread over the autotuner's space."""
    space = list(kernel.configs(*args, backend=backend)) if every else []
    if len(space) > 6:  # a spread: the triton interpreter takes minutes per config at these sizes
        space = space[:: -(-len(space) // 6)]
    return [None, small[backend], *space]


SIZES = [(50, 13, 9), (1, 1, 1), (37, 3, 130), (131, 7, 2)]  # (elements, segments, features)
FAST = {torch.float32: 2, torch.bfloat16: 1, torch.int32: 1}  # default runs: sizes per dtype


def _port_case(backend: str, dtype: torch.dtype, sizes, every: bool) -> None:
    torch.manual_seed(0)
    for e, nseg, c in sizes:
        idx = torch.randint(0, nseg, (e,)).sort()[0]  # sorted, as Helion's main() makes them
        x = _values((e, c), dtype)
        want = torch.zeros(nseg, c, dtype=dtype).index_add_(0, idx, x)
        for cfg in _configs(segmented_reduction_helion, (idx, x, nseg), backend, every):
            got = _run(segmented_reduction_helion, backend, idx, x, nseg, config=cfg)
            assert torch.equal(got, want), (backend, e, nseg, c, cfg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_segment_reduction_port(backend: str, dtype: torch.dtype) -> None:
    if backend == "triton" and dtype == torch.bfloat16:  # a lane loop in Triton's interpreter:
        e, nseg, c = SIZES[0]  # SMALL blocks only (4 lanes); the slow test runs a spread of configs
        idx, x = torch.randint(0, nseg, (e,)).sort()[0], _values((e, c), dtype)
        got = _run(segmented_reduction_helion, backend, idx, x, nseg, config=SMALL[backend])
        assert torch.equal(got, torch.zeros(nseg, c, dtype=dtype).index_add_(0, idx, x))
        return
    _port_case(backend, dtype, SIZES[:FAST[dtype]], every=False)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_segment_reduction_port_every_size_and_config(backend: str, dtype: torch.dtype) -> None:
    _port_case(backend, dtype, SIZES, every=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_segment_reduction_port_random_f32(backend: str) -> None:
    """Random values (the sums' order is unspecified: close, not equal)."""
    torch.manual_seed(1)
    for e, nseg, c in SIZES:
        idx = torch.randint(0, nseg, (e,)).sort()[0]
        x = torch.randn(e, c)
        want = torch.zeros(nseg, c).index_add_(0, idx, x)
        for cfg in _configs(segmented_reduction_helion, (idx, x, nseg), backend, True):
            got = _run(segmented_reduction_helion, backend, idx, x, nseg, config=cfg)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=str(cfg))


DUP_SIZES = [(70, 3, 5), (1, 1, 1), (45, 2, 130), (20, 1, 3)]  # (lanes, segments, features)


def _dup_case(backend: str, dtype: torch.dtype, sizes, every: bool) -> None:
    """Few segments, many lanes (every block holds each id many times), unsorted ids, and ids
    outside [0, nseg) in in-range lanes (they update nothing, docs/ir.md)."""
    torch.manual_seed(2)
    for n, nseg, d in sizes:
        seg = torch.randint(0, nseg, (n,), dtype=torch.int32)
        if n > 4:
            seg[1], seg[3] = -1, nseg  # out of range: skipped
        x = _values((n, d), dtype)
        for cfg in _configs(seg_rows, (x, seg, nseg), backend, every):
            s, hi, lo = _run(seg_rows, backend, x, seg, nseg, config=cfg)
            for got, op in ((s, "add"), (hi, "max"), (lo, "min")):
                assert torch.equal(got, _ref_rows(x, seg, nseg, op)), (backend, op, n, cfg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_add_max_min_rows_with_heavy_duplication(backend: str, dtype: torch.dtype) -> None:
    _dup_case(backend, dtype, DUP_SIZES[:2] if dtype == torch.float32 else DUP_SIZES[:1], False)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_add_max_min_rows_every_size_and_config(backend: str, dtype: torch.dtype) -> None:
    _dup_case(backend, dtype, DUP_SIZES, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_add_rows_with_duplicates(backend: str) -> None:
    torch.manual_seed(3)
    for n, nseg, d in ((70, 4, 9), (1, 1, 1)):
        seg = torch.randint(0, nseg, (n,), dtype=torch.int32)
        x = _values((n, d), torch.bfloat16)
        for cfg in _configs(seg_add, (x, seg, nseg), backend, False):
            got = _run(seg_add, backend, x, seg, nseg, config=cfg)
            assert torch.equal(got, _ref_rows(x, seg, nseg, "add")), (backend, n, cfg)


@pytest.mark.parametrize("backend", BACKENDS)
def test_1d_count_and_max_with_duplicates(backend: str) -> None:
    torch.manual_seed(4)
    for n, nseg in ((200, 5), (1, 1), (129, 2)):
        seg = torch.randint(0, nseg, (n,), dtype=torch.int32)
        x = torch.randn(n)
        for cfg in _configs(hist_max, (x, seg, nseg), backend, False, SMALL_1D):
            cnt, hi = _run(hist_max, backend, x, seg, nseg, config=cfg)
            assert torch.equal(cnt, torch.bincount(seg.long(), minlength=nseg).int()), cfg
            assert torch.equal(hi, _ref_rows(x, seg, nseg, "max")), (backend, cfg)


def test_nki_renders_a_read_modify_write_per_lane() -> None:
    """The generated NKI: per lane an indirect gather of the row, the op, an indirect scatter,
    both skipping an index outside the output (no dma_compute: it takes unique indices only)."""
    x, seg = torch.randn(20, 6), torch.zeros(20, dtype=torch.int32)
    with kd.backend("nki"):
        src = seg_rows.source(x, seg, 2)
    assert src.count("for lane") == 3 and "dma_compute" not in src
    assert src.count("oob_mode=nisa.oob_mode.skip") >= 6
    assert "op=nl.maximum" in src and "op=nl.minimum" in src


def test_nki_refuses_an_atomic_through_a_rank2_index() -> None:
    @kd.kernel
    def per_element(x: torch.Tensor, ids: torch.Tensor, n: int):
        out = torch.zeros([n], dtype=x.dtype)
        for ta, tb in kd.tile([x.shape[0], x.shape[1]]):
            kd.atomic_add(out, [ids[ta, tb]], x[ta, tb])
        return out

    x, ids = torch.randn(4, 6), torch.randint(0, 5, (4, 6), dtype=torch.int32)
    with kd.backend("triton"):
        want = per_element(x, ids, 5)
    torch.testing.assert_close(want, torch.zeros(5).index_add_(0, ids.view(-1).long(), x.view(-1)))
    with kd.backend("nki"), pytest.raises(ConfigError) as e:
        per_element(x, ids, 5)
    msg = str(e.value)
    assert "rank-2 index tile" in msg and "kd.atomic_add(out, [ids[ta, tb]], x[ta, tb])" in msg


def test_pallas_passes_the_segment_ids_twice() -> None:
    """Read as vectors (the scan) and lane by lane (the scatter): VMEM blocks and SMEM whole."""
    idx, x = torch.zeros(20, dtype=torch.int64), torch.randn(20, 3)
    src = segmented_reduction_helion.source(idx, x, 2, target="tpu-v6e")
    assert "indices_sref[" in src and "memory_space=pltpu.SMEM),  # indices (lane reads)" in src
    assert ")(indices, input_data, indices)" in src


@pytest.mark.slow  # the real TPU compiler, five targets
def test_pallas_segment_atomics_compile_for_every_tpu() -> None:
    idx = torch.randint(0, 13, (50,)).sort()[0].to(torch.int32)
    seg = torch.randint(0, 3, (70,), dtype=torch.int32)
    cases = [(segmented_reduction_helion, (idx, torch.randn(50, 9), 13)),
             (segmented_reduction_helion, (idx, torch.randn(50, 9).bfloat16(), 13)),
             (seg_rows, (torch.randn(70, 130), seg, 3)),
             (seg_add, (torch.randn(70, 9).bfloat16(), seg, 3)),
             (hist_max, (torch.randn(70), seg, 3))]
    for k, args in cases:
        report = k.check(*args, targets=TPUS, measure_vmem=False)
        assert [e.status for e in report.entries] == ["ok"] * len(TPUS), report
