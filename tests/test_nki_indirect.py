"""Per-partition indirect DMA in kernel_dsl's NKI interpreter (lowering/nki/interp/indirect.py):
`nisa.dma_copy` with `hbm.ap(pattern, offset, vector_offset=idx, indirect_dim=0)` as source
(gather) or destination (scatter), with the rules of the SDK's `dma_copy` docstring ("Indirect
addressing", `oob_mode`) and `NkiTensor.ap`. Expected values are worked out with NumPy."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from kernel_dsl.lowering.nki.interp import NkiError, namespace

NS = namespace()
nki, nl, nisa = NS["nki"], NS["nki.language"], NS["nki.isa"]
F32 = np.float32


@pytest.fixture(autouse=True)
def _target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def run(kernel: Any, *arrays: Any) -> Any:
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn2"
    return nki.simulate(kernel)(*arrays)


def rejects(rule: str, match: str, kernel: Any, *arrays: Any) -> None:
    with pytest.raises(NkiError) as info:
        run(kernel, *arrays)
    assert info.value.rule == rule, str(info.value)
    assert match in str(info.value), str(info.value)


TABLE = np.arange(10 * 6, dtype=F32).reshape(10, 6) * 0.5 - 3.0


def _gather(oob: str | None = None, fill: float = -7.0, dtype: Any = None, idx_dtype: Any = None,
            offset: int = 0, cols: int = 6):
    """out[p, :] = table[idx[p], offset:offset + cols], rows skipped keep `fill`."""
    @nki.jit
    def k(table, ids):
        p = ids.shape[0]
        n, f = table.shape
        out = nl.ndarray((p, cols), dtype=dtype or table.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray((p, 1), dtype=idx_dtype or nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids)
        rows = nl.ndarray((p, cols), dtype=dtype or table.dtype, buffer=nl.sbuf)
        nisa.memset(dst=rows, value=fill)
        src = table.ap(pattern=[[f, p], [1, cols]], offset=offset, vector_offset=idx, indirect_dim=0)
        if oob is None:
            nisa.dma_copy(dst=rows, src=src)
        else:
            nisa.dma_copy(dst=rows, src=src, oob_mode=getattr(nisa.oob_mode, oob))
        nisa.dma_copy(dst=out, src=rows)
        return out
    return k


@pytest.mark.parametrize("p", [1, 5, 128], ids=str)
def test_gather_reads_one_row_per_partition(p: int) -> None:
    rng = np.random.default_rng(p)
    ids = rng.integers(0, 10, size=(p, 1)).astype(np.int32)
    np.testing.assert_array_equal(run(_gather(), TABLE, ids), TABLE[ids[:, 0]])


def test_gather_with_an_offset_walks_the_other_pairs_from_there() -> None:
    # AWS's MoE H-shard gather: pattern [[H, P], [1, H_shard]], offset = the shard's first column
    ids = np.array([[3], [0], [9], [3]], dtype=np.int32)
    got = run(_gather(offset=2, cols=3), TABLE, ids)
    np.testing.assert_array_equal(got, TABLE[ids[:, 0], 2:5])


def test_gather_with_uint32_indices_and_a_casting_destination() -> None:
    ids = np.array([[1], [8]], dtype=np.uint32)
    got = run(_gather(dtype=nl.bfloat16, idx_dtype=nl.uint32), TABLE, ids)
    import ml_dtypes

    np.testing.assert_array_equal(got.astype(F32), TABLE[[1, 8]].astype(ml_dtypes.bfloat16).astype(F32))


def test_out_of_bounds_index_is_a_runtime_error_by_default() -> None:
    ids = np.array([[1], [10]], dtype=np.int32)
    rejects("out-of-bounds access", "partition 1's index 10 is outside [0, 10)", _gather(), TABLE, ids)
    rejects("out-of-bounds access", "index -1", _gather(oob="error"), TABLE,
            np.array([[-1]], dtype=np.int32))


def test_oob_skip_leaves_the_destination_row_as_it_was() -> None:
    ids = np.array([[2], [10], [-3], [0]], dtype=np.int32)
    got = run(_gather(oob="skip"), TABLE, ids)
    np.testing.assert_array_equal(got[[0, 3]], TABLE[[2, 0]])
    np.testing.assert_array_equal(got[[1, 2]], np.full((2, 6), -7.0, F32))


def test_scatter_writes_rows_and_skips_out_of_bounds_ones() -> None:
    @nki.jit
    def k(vals, ids, base):
        p, f = vals.shape
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        init = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=init, src=base)
        nisa.dma_copy(dst=out, src=init)
        v = nl.ndarray((p, f), dtype=vals.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=v, src=vals)
        idx = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids)
        nisa.dma_copy(dst=out.ap(pattern=[[f, p], [1, f]], offset=0, vector_offset=idx, indirect_dim=0),
                      src=v, oob_mode=nisa.oob_mode.skip)
        return out

    vals = np.arange(4 * 6, dtype=F32).reshape(4, 6) + 100
    ids = np.array([[7], [12], [0], [-1]], dtype=np.int32)
    base = np.zeros((10, 6), dtype=F32)
    got = run(k, vals, ids, base)
    want = base.copy()
    want[7], want[0] = vals[0], vals[2]
    np.testing.assert_array_equal(got, want)


def test_the_index_is_read_when_the_dma_runs() -> None:
    @nki.jit
    def k(table):
        out = nl.ndarray((2, 6), dtype=table.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=idx, pattern=[[0, 1]], offset=1, channel_multiplier=3)  # [[1], [4]]
        rows = nl.ndarray((2, 6), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap(pattern=[[6, 2], [1, 6]], vector_offset=idx, indirect_dim=0))
        nisa.dma_copy(dst=out, src=rows)
        return out

    np.testing.assert_array_equal(run(k, TABLE), TABLE[[1, 4]])


def test_rules_of_the_indirect_view() -> None:
    def bad(idx_shape, idx_dtype, buffer, pattern, **kw):
        @nki.jit
        def k(table):
            idx = nl.ndarray(idx_shape, dtype=idx_dtype, buffer=buffer)
            if buffer != nl.psum:
                nisa.memset(dst=idx, value=0)
            rows = nl.ndarray((4, 6), dtype=table.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=rows, src=table.ap(pattern=pattern, vector_offset=idx, indirect_dim=0),
                          **kw)
            return table
        return k

    rejects("dtypes", "int32 or uint32", bad((4, 1), nl.int16, nl.sbuf, [[6, 4], [1, 6]]), TABLE)
    rejects("tensor shapes", "one index per partition", bad((4, 2), nl.int32, nl.sbuf, [[6, 4], [1, 3]]),
            TABLE)
    rejects("tensor shapes", "walks 3 partitions", bad((4, 1), nl.int32, nl.sbuf, [[6, 3], [1, 8]]), TABLE)
    rejects("memory placement", "must be in SBUF", bad((4, 1), nl.int32, nl.psum, [[6, 4], [1, 6]]), TABLE)
    rejects("operands", "software-DGE", bad((4, 1), nl.int32, nl.sbuf, [[6, 4], [1, 6]],
                                           dge_mode=nisa.dge_mode.hwdge), TABLE)

    @nki.jit
    def on_compute_engine(table):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=idx, value=0)
        rows = nl.ndarray((4, 6), dtype=table.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=rows, src=table.ap(pattern=[[6, 4], [1, 6]], vector_offset=idx))
        return table

    rejects("not modelled", "only nisa.dma_copy", on_compute_engine, TABLE)

    @nki.jit
    def both_offsets(table):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=idx, value=0)
        table.ap(pattern=[[6, 4], [1, 6]], vector_offset=idx, scalar_offset=idx[0:1, :])
        return table

    rejects("operands", "mutually exclusive", both_offsets, TABLE)


def test_pattern_leaving_the_storage_is_an_error() -> None:
    ids = np.array([[9]], dtype=np.int32)
    rejects("out-of-bounds access", "leaves the storage", _gather(offset=4, cols=6), TABLE, ids)
