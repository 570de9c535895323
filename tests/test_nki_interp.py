"""Conformance of kernel_dsl's NKI interpreter (lowering/nki/interp) with the checklist of
notes/nki.md §7: for each rule, a small NKI program that breaks it is rejected with a message
naming the rule (or, for the start-partition and activation-range rules, warned about), and the
semantics it models hold. Part 1: the program model, tensors and views, memory budgets; part 2
(test_nki_interp_isa.py): instructions and numerics.

Kernels here are written against the interpreter's own `nki` modules, exactly as generated code
imports them.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest

from kernel_dsl.lowering.nki.interp import (
    NkiError,
    StartPartitionWarning,
    namespace,
)

NS = namespace()
nki, nl, nisa = NS["nki"], NS["nki.language"], NS["nki.isa"]
F32 = np.float32


@pytest.fixture(autouse=True)
def _target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def run(kernel: Any, *arrays: Any, target: str = "trn2") -> Any:
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    return nki.simulate(kernel)(*arrays)


def rejects(rule: str, kernel: Any, *arrays: Any, match: str = "", target: str = "trn2") -> NkiError:
    with pytest.raises(NkiError) as info:
        run(kernel, *arrays, target=target)
    err = info.value
    assert err.rule == rule, f"expected rule {rule!r}, got {err.rule!r}: {err}"
    assert f"[rule: {rule}]" in str(err)
    if match:
        assert match in str(err), str(err)
    return err


def sbuf(shape: tuple[int, ...], dtype: Any = None) -> Any:
    return nl.ndarray(shape, dtype=dtype or nl.float32, buffer=nl.sbuf)


def psum(shape: tuple[int, ...], dtype: Any = None) -> Any:
    return nl.ndarray(shape, dtype=dtype or nl.float32, buffer=nl.psum)


def out_like(shape: tuple[int, ...], dtype: Any = None) -> Any:
    return nl.ndarray(shape, dtype=dtype or nl.float32, buffer=nl.shared_hbm)


A = np.arange(8 * 4, dtype=F32).reshape(8, 4)


# -- program model ---------------------------------------------------------------------------
def test_kernel_runs_eagerly_with_python_loops_unrolled() -> None:
    @nki.jit
    def k(a):
        out = out_like((8, 4))
        acc = sbuf((8, 4))
        nisa.memset(dst=acc, value=0.0)
        for _ in nl.affine_range(3):  # a deprecated alias of range: unrolled at trace time
            t = sbuf((8, 4))
            nisa.dma_copy(dst=t, src=a)
            nxt = sbuf((8, 4))
            nisa.tensor_tensor(dst=nxt, data1=acc, data2=t, op=nl.add)
            acc = nxt
        nisa.dma_copy(dst=out, src=acc)
        return out

    np.testing.assert_array_equal(run(k, A), 3 * A)


def test_isa_call_outside_a_launch_is_rejected() -> None:
    with pytest.raises(NkiError, match="inside a kernel launch"):
        nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)


def _star(a, *, scale=1.0):
    return a


def _is(a):
    if a is None:
        return a
    return a


def _dict_key(a):
    d = {1: a}
    return d[1]


def _class(a):
    class Box:
        pass

    return a


def _nki_class(a):
    class Box(nl.NKIObject):
        pass

    out = out_like((8, 4))
    t = sbuf((8, 4))
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("fn, match", [(_star, "`*`"), (_dict_key, "dict keys"),
                                       (_class, "NKIObject")])
def test_meta_code_outside_the_compiler_subset_is_rejected(fn: Any, match: str) -> None:
    rejects("program model", nki.jit(fn), A, match=match)


def test_is_comparisons_are_accepted() -> None:
    """AWS's own kernels test `x is None` (11 of 81 current-dialect kernels)."""
    np.testing.assert_array_equal(run(nki.jit(_is), A), A)


def test_classes_deriving_from_nkiobject_are_accepted() -> None:
    np.testing.assert_array_equal(run(nki.jit(_nki_class), A), A)


def test_list_arguments_are_rejected() -> None:
    @nki.jit
    def k(a, sizes):
        return a

    rejects("program model", k, A, [1, 2], match="pass a tuple")


def test_outputs_must_be_shared_hbm_tensors() -> None:
    """Returning an input is allowed (AWS's `*_tkg` kernels and rotational_topk do it); SBUF and
    private HBM tensors are not outputs."""
    @nki.jit
    def returns_input(a):
        return a

    np.testing.assert_array_equal(run(returns_input, A), A)

    @nki.jit
    def returns_sbuf(a):
        t = sbuf((8, 4))
        nisa.dma_copy(dst=t, src=a)
        return t

    @nki.jit
    def returns_private_hbm(a):
        out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.hbm)
        return out

    for k in (returns_sbuf, returns_private_hbm):
        rejects("program model", k, A, match="shared_hbm")


def test_outputs_are_allocated_at_the_kernels_top_level() -> None:
    @nki.jit
    def k(a):
        for _ in range(1):
            out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        return out

    rejects("program model", k, A, match="top level")


def test_launch_grid_is_the_lnc_degree_1_or_2() -> None:
    @nki.jit
    def k(a):
        out = out_like((2, 4))
        pid = nl.program_id(0)
        t = sbuf((1, 4))
        nisa.dma_copy(dst=t, src=a[pid])
        nisa.dma_copy(dst=out[pid], src=t)
        return out

    np.testing.assert_array_equal(run(k[2], A), A[:2])  # two programs, program_id 0 and 1
    for grid in (3, (2, 2), 0):
        with pytest.raises(NkiError, match="LNC") as info:
            k[grid]
        assert info.value.rule == "program model"

    @nki.jit
    def bad_axis(a):
        nl.program_id(1)
        return out_like((1, 1))

    rejects("program model", bad_axis, A, match="axis 1")


def test_new_allocations_hold_nan_or_4() -> None:
    @nki.jit
    def k(a):
        out_f = out_like((8, 4))
        out_i = out_like((8, 4), nl.int32)
        f, i = sbuf((8, 4)), sbuf((8, 4), nl.int32)
        nisa.dma_copy(dst=out_f, src=f)
        nisa.dma_copy(dst=out_i, src=i)
        return out_f, out_i

    f, i = run(k, A)
    assert np.isnan(f).all() and (i == 4).all()


# -- tensors and views -----------------------------------------------------------------------
def test_on_chip_tensors_are_2d_with_at_most_128_partitions_and_5_dims() -> None:
    cases = [((128,), "tensor shapes", "1-D"), ((129, 4), "partition limit", "129 partitions"),
             ((2, 2, 2, 2, 2, 2), "tensor shapes", "6 dims")]
    for shape, rule, match in cases:
        @nki.jit
        def k(a, shape=shape):
            sbuf(shape)
            return out_like((1, 1))

        rejects(rule, k, A, match=match)


def test_integer_index_on_the_partition_dim_keeps_it() -> None:
    @nki.jit
    def k(a):
        out = out_like((1, 4))
        t = sbuf((64, 4))
        nisa.dma_copy(dst=t[0:8], src=a)
        row = t[0]  # (1, 4): the partition dim stays; t[0, 2] is (1, 1)
        assert row.shape == (1, 4) and t[32, 2].shape == (1, 1) and t[:, 2].shape == (64, 1)
        nisa.dma_copy(dst=out, src=row)
        return out

    np.testing.assert_array_equal(run(k, A), A[0:1])


def test_views_keep_the_partition_dim_first() -> None:
    @nki.jit
    def permute(a):
        sbuf((8, 2, 2)).permute((1, 0, 2))
        return out_like((1, 1))

    @nki.jit
    def broadcast(a):
        sbuf((1, 4)).broadcast(0, 8)
        return out_like((1, 1))

    rejects("tensor views", permute, A, match="partition dim")
    rejects("tensor views", broadcast, A, match="partition dim")


def _memset_rows(start: int, rows: int) -> Any:
    @nki.jit
    def k(a):
        t = sbuf((128, 4))
        nisa.memset(dst=t[start:start + rows], value=1.0)
        return out_like((1, 1))

    return k


def test_start_partition_rule_warns() -> None:
    with pytest.warns(StartPartitionWarning, match="start at partition 0 or 32 or 64 or 96"):
        run(_memset_rows(1, 32), A)
    with pytest.warns(StartPartitionWarning, match="start at partition 0 or 64"):
        run(_memset_rows(32, 64), A)
    with pytest.warns(StartPartitionWarning, match="start at partition 0 "):
        run(_memset_rows(32, 65), A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StartPartitionWarning)
        for start, rows in ((96, 32), (64, 64), (0, 128)):
            run(_memset_rows(start, rows), A)


def test_access_patterns_address_storage_and_out_of_bounds_is_an_error() -> None:
    @nki.jit
    def k(a):
        out = out_like((4, 2))
        t = sbuf((8, 4))
        nisa.dma_copy(dst=t, src=a)
        v = t.ap(pattern=[[4, 4], [2, 2]], offset=1)  # partitions 0..3, columns 1 and 3
        u = sbuf((4, 2))
        nisa.tensor_copy(dst=u, src=v)
        nisa.dma_copy(dst=out, src=u)
        return out

    np.testing.assert_array_equal(run(k, A), A[0:4, 1::2])

    @nki.jit
    def bad_pair(a):
        sbuf((8, 4)).ap(pattern=[[3, 4], [1, 2]])
        return out_like((1, 1))

    @nki.jit
    def past_end(a):
        sbuf((8, 4)).ap(pattern=[[4, 8], [1, 4]], offset=4)
        return out_like((1, 1))

    @nki.jit
    def slice_past_end(a):
        out = out_like((8, 4))
        t = sbuf((8, 4))
        nisa.dma_copy(dst=t, src=a[0:9])
        return out

    rejects("tensor views", bad_pair, A, match="[storage_free, n]")
    rejects("out-of-bounds access", past_end, A)
    rejects("out-of-bounds access", slice_past_end, A, match="min()")


def test_sbuf_budget_per_generation() -> None:
    @nki.jit
    def k(a):
        big = sbuf((128, 50000))  # 200000 B per partition
        nisa.memset(dst=big, value=0.0)
        return out_like((1, 1))

    run(k, A, target="trn2")  # 212984 B per partition
    rejects("SBUF budget", k, A, target="trn1", match="180224")

    @nki.jit
    def two(a):
        x, y, z = sbuf((128, 31000)), sbuf((128, 31000)), sbuf((128, 1))
        nisa.memset(dst=x, value=1.0)
        nisa.memset(dst=y, value=2.0)  # x is still live: it is read below
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
        nisa.memset(dst=z, value=0.0)
        return out_like((1, 1))

    err = rejects("SBUF budget", two, A, target="trn3", match="248000 B per partition are live")
    assert "245752" in str(err) and "test_nki_interp.py:" in str(err)

    @nki.jit
    def dead_tiles_do_not_count(a):
        for _ in range(4):  # 4 x 124000 B, each dead after its memset (the compiler's liveness)
            x = sbuf((128, 31000))
            nisa.memset(dst=x, value=0.0)
        return out_like((1, 1))

    run(dead_tiles_do_not_count, A, target="trn2")


def test_psum_budget_is_8_banks_of_2_kib() -> None:
    @nki.jit
    def k(a):
        tiles = tuple(psum((128, 512)) for _ in range(9))
        for t in tiles:  # all nine live at once
            nisa.memset(dst=t, value=0.0)
        return out_like((1, 1))

    rejects("PSUM budget", k, A, match="9 banks of 2 KiB per partition are live; PSUM has 8")
