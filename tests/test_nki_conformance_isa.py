"""Conformance of kernel_dsl's NKI interpreter with AWS's documented NKI semantics, part 2: the
`nki.isa` instructions added or corrected for AWS's own kernels.

Each test checks one rule of an instruction's SDK docstring (aws-neuron/aws-neuron-sdk,
`nki/api/nki/isa/__init__.py`, Neuron 2.32), with the expected value computed by hand from the
documented formula, not taken from the interpreter. Part 1: test_nki_conformance.py.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest

from kernel_dsl.lowering.nki.interp import NkiError, StartPartitionWarning, namespace

NS = namespace()
nki, nl, nisa = NS["nki"], NS["nki.language"], NS["nki.isa"]
F32 = np.float32


@pytest.fixture(autouse=True)
def _target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def run(kernel: Any, *args: Any, target: str = "trn2") -> Any:
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    return nki.simulate(kernel)(*args)


def sb(shape: tuple[int, ...], dtype: Any = None) -> Any:
    return nl.ndarray(shape, dtype=dtype or nl.float32, buffer=nl.sbuf)


def out_of(t: Any) -> Any:
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def load(a: Any) -> Any:
    t = sb(a.shape, a.dtype)
    nisa.dma_copy(dst=t, src=a)
    return t


# -- integer arithmetic ----------------------------------------------------------------------
def test_int32_tensor_tensor_is_exact_by_default_and_fp32_on_the_vector_engine() -> None:
    # tensor_tensor: all-int32 operands "default to GpSimd Engine, which uses native integer
    # arithmetic ... You may override this by passing engine=nki.isa.engine.vector", and VectorE
    # computes arithmetic in float32. 16777217 (2**24 + 1) is not a float32: it becomes 16777216,
    # and 16777216 + 1 rounds back to 16777216.
    @nki.jit
    def k(a, b):
        x, y = load(a), load(b)
        exact, vec = sb(a.shape, nl.int32), sb(a.shape, nl.int32)
        nisa.tensor_tensor(dst=exact, data1=x, data2=y, op=nl.add)
        nisa.tensor_tensor(dst=vec, data1=x, data2=y, op=nl.add, engine=nisa.vector_engine)
        return out_of(exact), out_of(vec)

    a = np.array([[16777217]], dtype=np.int32)
    exact, vec = run(k, a, np.ones_like(a))
    assert exact[0, 0] == 16777218
    assert vec[0, 0] == 16777216


def test_int32_tensor_tensor_with_a_psum_operand_falls_back_to_fp32() -> None:
    # "the automatic GpSimd dispatch for int32/uint32 falls back to Vector Engine when any operand
    # resides in PSUM"
    @nki.jit
    def k(a, b):
        x = load(a)
        p = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=load(b))
        out = sb(a.shape, nl.int32)
        nisa.tensor_tensor(dst=out, data1=x, data2=p, op=nl.add)
        return out_of(out)

    a = np.array([[16777217]], dtype=np.int32)
    assert run(k, a, np.ones_like(a))[0, 0] == 16777216


def test_narrow_integer_results_wrap() -> None:
    # Arithmetic runs in float32 and "the float32 results are cast to dst.dtype"; the SDK does not
    # say what the cast does out of range. The interpreter's documented choice (docs/nki.md,
    # dtypes.to_storage): truncate, then wrap modulo 2**bits, as torch integer arithmetic does:
    # int8 100 + 100 = 200 - 256 = -56; uint8 250 + 10 = 260 - 256 = 4.
    @nki.jit
    def k(a, b, c, d):
        s8, u8 = sb(a.shape, nl.int8), sb(c.shape, nl.uint8)
        nisa.tensor_tensor(dst=s8, data1=load(a), data2=load(b), op=nl.add)
        nisa.tensor_tensor(dst=u8, data1=load(c), data2=load(d), op=nl.add)
        return out_of(s8), out_of(u8)

    s8, u8 = run(k, np.array([[100, -100]], np.int8), np.array([[100, -100]], np.int8),
                 np.array([[250, 3]], np.uint8), np.array([[10, 4]], np.uint8))
    np.testing.assert_array_equal(s8, [[-56, 56]])
    np.testing.assert_array_equal(u8, [[4, 7]])


# -- selects and reductions ------------------------------------------------------------------
def test_affine_select_cmp_op_defaults_to_equal() -> None:
    # signature: affine_select(..., cmp_op=equal, offset=0); predicate = cmp_op(affine_value, 0)
    # with affine_value = offset + p * channel_multiplier + pattern . i. With pattern [[-1, 4]],
    # multiplier 1, offset 0: affine = p - i, so only the diagonal p == i keeps on_true_tile.
    @nki.jit
    def k(a):
        out = sb((4, 4))
        nisa.affine_select(dst=out, pattern=[[-1, 4]], channel_multiplier=1,
                           on_true_tile=load(a), on_false_value=-1.0)
        return out_of(out)

    a = np.full((4, 4), 7.0, F32)
    np.testing.assert_array_equal(run(k, a), np.where(np.eye(4) == 1, 7.0, -1.0))


def test_tensor_reduce_bitwise_or_and_and_work_on_bit_patterns() -> None:
    # tensor_reduce "supports two types of reduction operators: 1) bitvec operators (e.g.,
    # bitwise_and, bitwise_or)"; 1 | 2 | 4 = 7, 7 & 6 & 12 = 4
    @nki.jit
    def k(a, b):
        o1, o2 = sb((1, 1), nl.int32), sb((1, 1), nl.int32)
        nisa.tensor_reduce(dst=o1, op=nl.bitwise_or, data=load(a), axis=1)
        nisa.tensor_reduce(dst=o2, op=nl.bitwise_and, data=load(b), axis=1)
        return out_of(o1), out_of(o2)

    o1, o2 = run(k, np.array([[1, 2, 4]], np.int32), np.array([[7, 6, 12]], np.int32))
    assert (o1[0, 0], o2[0, 0]) == (7, 4)


def test_tensor_partition_reduce_average() -> None:
    # tensor_partition_reduce op: "add, average, max, bitwise_or, bitwise_and"
    @nki.jit
    def k(a):
        out = sb((1, 2))
        nisa.tensor_partition_reduce(dst=out, op=nl.average, data=load(a))
        return out_of(out)

    a = np.array([[1.0, 10.0], [3.0, 20.0]], F32)
    np.testing.assert_array_equal(run(k, a), [[2.0, 15.0]])


# -- scans and fused vector ops --------------------------------------------------------------
def test_tensor_tensor_scan_follows_its_recurrence() -> None:
    # result[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0]);
    # result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i]).
    # op0 = multiply, op1 = add, initial 1: r0 = 2*1 + 1 = 3, r1 = 3*3 + 1 = 10, r2 = 0.5*10 - 2 = 3
    @nki.jit
    def k(a, b):
        out = sb(a.shape)
        nisa.tensor_tensor_scan(dst=out, data0=load(a), data1=load(b), initial=1.0,
                                op0=nl.multiply, op1=nl.add)
        return out_of(out)

    np.testing.assert_array_equal(run(k, np.array([[2.0, 3.0, 0.5]], F32),
                                      np.array([[1.0, 1.0, -2.0]], F32)), [[3.0, 10.0, 3.0]])


def test_tensor_tensor_scan_reverse1_swaps_op1s_operands() -> None:
    # "reverse1: if true, data1 is the lhs of op1": op0 = add (initial 0), op1 = subtract
    # reversed: r_i = data1_i - (data0_i + r_{i-1}): r0 = 10 - (1 + 0) = 9, r1 = 10 - (2 + 9) = -1
    @nki.jit
    def k(a, b):
        out = sb(a.shape)
        nisa.tensor_tensor_scan(dst=out, data0=load(a), data1=load(b), initial=0.0,
                                op0=nl.add, op1=nl.subtract, reverse1=True)
        return out_of(out)

    np.testing.assert_array_equal(run(k, np.array([[1.0, 2.0]], F32), np.array([[10.0, 10.0]], F32)),
                                  [[9.0, -1.0]])


def test_scalar_tensor_tensor_applies_both_operators_in_order() -> None:
    # (data op0 operand0) op1 operand1; reverse0: operand0 is the lhs of op0
    # (5 - 2) * 3 = 9; reversed: (2 - 5) * 3 = -9
    @nki.jit
    def k(a, b):
        x, y = load(a), load(b)
        o1, o2 = sb(a.shape), sb(a.shape)
        nisa.scalar_tensor_tensor(dst=o1, data=x, op0=nl.subtract, operand0=2.0, op1=nl.multiply,
                                  operand1=y)
        nisa.scalar_tensor_tensor(dst=o2, data=x, op0=nl.subtract, operand0=2.0, op1=nl.multiply,
                                  operand1=y, reverse0=True)
        return out_of(o1), out_of(o2)

    o1, o2 = run(k, np.array([[5.0]], F32), np.array([[3.0]], F32))
    assert (o1[0, 0], o2[0, 0]) == (9.0, -9.0)


def test_tensor_scalar_reduce_accumulates_across_calls() -> None:
    # reset_reduce starts from the identity, reduce continues, load_reduce starts from
    # reduce_init; reduce_res_negate negates only the written result.
    # dst = data * 2: [2, 4] then [6, 8]; sums 6, then 6 + 14 = 20; load_reduce from 100: 114.
    @nki.jit
    def k(a, b):
        x, y = load(a), load(b)
        d1, d2, r1, r2, r3 = sb(a.shape), sb(a.shape), sb((1, 1)), sb((1, 1)), sb((1, 1))
        init = nl.full((1, 1), 100.0, dtype=nl.float32)
        nisa.tensor_scalar_reduce(dst=d1, data=x, op0=nl.multiply, operand0=2.0,
                                  reduce_op=nl.add, reduce_res=r1)
        nisa.tensor_scalar_reduce(dst=d2, data=y, op0=nl.multiply, operand0=2.0,
                                  reduce_op=nl.add, reduce_res=r2, reduce_cmd=nisa.reduce_cmd.reduce,
                                  reduce_res_negate=True)
        nisa.tensor_scalar_reduce(dst=d2, data=y, op0=nl.multiply, operand0=2.0,
                                  reduce_op=nl.add, reduce_res=r3,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=init)
        return out_of(d1), out_of(r1), out_of(r2), out_of(r3)

    d1, r1, r2, r3 = run(k, np.array([[1.0, 2.0]], F32), np.array([[3.0, 4.0]], F32))
    np.testing.assert_array_equal(d1, [[2.0, 4.0]])
    assert (r1[0, 0], r2[0, 0], r3[0, 0]) == (6.0, -20.0, 114.0)


def test_activation_reduce_reduces_the_activation_result() -> None:
    # output = op(data * scale + bias); reduce_res = reduce_op(output, axis=<FreeAxis>)
    # exp(0 * 1 + 0) = 1 over 4 elements: sum 4
    @nki.jit
    def k(a):
        x = load(a)
        out, r = sb(a.shape), sb((a.shape[0], 1))
        nisa.activation_reduce(dst=out, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=r)
        return out_of(out), out_of(r)

    out, r = run(k, np.zeros((2, 4), F32))
    np.testing.assert_array_equal(out, np.ones((2, 4), F32))
    np.testing.assert_array_equal(r, [[4.0], [4.0]])


def test_activation_reduce_registers_persist_across_instructions() -> None:
    # activation: reset_reduce "reset reduce_regs to zero and then store the reduction result";
    # reduce "reduce activated data over existing values"; reduce_res reads reduce_regs.
    # copy([1, 2]) sums 3; then copy([10, 20]) adds 30: 33.
    @nki.jit
    def k(a, b):
        d, r1, r2 = sb(a.shape), sb((1, 1)), sb((1, 1))
        nisa.activation(dst=d, op=nl.copy, data=load(a), reduce_op=nl.add, reduce_res=r1,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=d, op=nl.copy, data=load(b), reduce_op=nl.add, reduce_res=r2,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        return out_of(r1), out_of(r2)

    r1, r2 = run(k, np.array([[1.0, 2.0]], F32), np.array([[10.0, 20.0]], F32))
    assert (r1[0, 0], r2[0, 0]) == (3.0, 33.0)

    @nki.jit
    def idle(a):
        # the default reduce_cmd is idle: it leaves reduce_regs alone, so there is nothing to read
        nisa.activation(dst=sb(a.shape), op=nl.copy, data=load(a), reduce_op=nl.add,
                        reduce_res=sb((1, 1)))
        return a

    with pytest.raises(NkiError, match="idle"):
        run(idle, np.array([[1.0, 2.0]], F32))


# -- data movement ---------------------------------------------------------------------------
def test_dma_transpose_default_permutations() -> None:
    # "For 2-d input tile, the permutation will be [1, 0]; for 3-d ... [2, 1, 0]"
    @nki.jit
    def k(a, b):
        t2 = sb((a.shape[1], a.shape[0]))
        nisa.dma_transpose(dst=t2, src=a)
        t3 = nl.ndarray((b.shape[2], b.shape[1], b.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t3, src=b)
        return out_of(t2), out_of(t3)

    a = np.arange(6, dtype=F32).reshape(2, 3)
    b = np.arange(24, dtype=F32).reshape(2, 3, 4)
    t2, t3 = run(k, a, b)
    np.testing.assert_array_equal(t2, a.T)
    np.testing.assert_array_equal(t3, b.transpose(2, 1, 0))


def test_dma_transpose_needs_neuroncore_v3() -> None:
    @nki.jit
    def k(a):
        nisa.dma_transpose(dst=sb((a.shape[1], a.shape[0])), src=a)
        return a

    with pytest.raises(NkiError, match="NeuronCore-v3"):
        run(k, np.zeros((2, 3), F32), target="trn1")


def test_dma_may_address_any_start_partition() -> None:
    # the start-partition rule binds compute engines; AWS's cross_entropy DMAs one partition at a
    # time into partitions 1, 2, 3, ...
    @nki.jit
    def k(a):
        t = sb((8, 4))
        for p in range(8):
            nisa.dma_copy(dst=t[p:p + 1, :], src=a[p:p + 1, :])
        return out_of(t)

    a = np.arange(32, dtype=F32).reshape(8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StartPartitionWarning)
        np.testing.assert_array_equal(run(k, a), a)


def test_dma_compute_adds_its_sources_in_float32() -> None:
    # dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...), reduce_op nl.add, scales 1.0
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(dst=out, srcs=[a, load(b)], reduce_op=nl.add)
        return out

    np.testing.assert_array_equal(run(k, np.array([[1.0, 2.0]], F32), np.array([[10.0, 20.0]], F32)),
                                  [[11.0, 22.0]])


def test_tensor_copy_accepts_dtype_equal_to_dst() -> None:
    @nki.jit
    def k(a):
        d = sb(a.shape, nl.bfloat16)
        nisa.tensor_copy(dst=d, src=load(a), dtype=nl.bfloat16)
        with_other = sb(a.shape, nl.float32)
        try:
            nisa.tensor_copy(dst=with_other, src=d, dtype=nl.bfloat16)
        except NkiError:
            return out_of(d)
        raise AssertionError("a dtype= that differs from dst's must be rejected")

    np.testing.assert_array_equal(run(k, np.array([[1.5, 2.0]], F32)).astype(F32), [[1.5, 2.0]])


def test_nc_stream_shuffle_moves_partitions_within_each_quadrant() -> None:
    # "shuffle_mask[i] indicates which input partition the output partition [i] copies from
    # within each 32-partition quadrant"; 255 leaves the output partition unmodified; the same
    # mask applies to every quadrant
    @nki.jit
    def k(a):
        src, dst = load(a), sb(a.shape)
        nisa.memset(dst=dst, value=-1.0)
        mask = [31 - i for i in range(32)]
        mask[0] = 255
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)
        return out_of(dst)

    a = np.arange(64, dtype=F32).reshape(64, 1)
    expect = np.concatenate([31 - np.arange(32), 63 - np.arange(32)]).astype(F32).reshape(64, 1)
    expect[0, 0] = expect[32, 0] = -1.0
    np.testing.assert_array_equal(run(k, a), expect)


def test_bn_stats_and_bn_aggr_give_mean_and_variance() -> None:
    # bn_stats: (count, mean, variance * count) of the even elements, then of the odd ones;
    # bn_aggr: (mean, variance) of all. [1..6]: even 1, 3, 5 -> (3, 3, 8); odd 2, 4, 6 -> (3, 4, 8);
    # mean 3.5, variance 35 / 12 (population variance of 1..6)
    @nki.jit
    def k(a):
        st, ag = sb((1, 6)), sb((1, 2))
        nisa.bn_stats(dst=st, data=load(a))
        nisa.bn_aggr(dst=ag, data=st)
        return out_of(st), out_of(ag)

    st, ag = run(k, np.arange(1, 7, dtype=F32).reshape(1, 6))
    np.testing.assert_array_equal(st, [[3, 3, 8, 3, 4, 8]])
    np.testing.assert_allclose(ag, [[3.5, 35 / 12]], rtol=1e-6)


# -- search instructions ---------------------------------------------------------------------
def test_max8_gives_the_eight_largest_in_descending_order() -> None:
    @nki.jit
    def k(a):
        out = sb((1, 8))
        nisa.max8(dst=out, src=load(a))
        return out_of(out)

    a = np.array([[3, 9, 1, 7, 5, 11, 2, 8, 6, 10, 4, 0]], F32)
    np.testing.assert_array_equal(run(k, a), [[11, 10, 9, 8, 7, 6, 5, 4]])


def test_nc_find_index8_first_occurrence_and_missing_sentinel() -> None:
    # "outputs the indices (starting at 0) of the first occurrence of each value"; duplicates
    # take their matches in ascending order; a missing value gives 0xFFFFFFFF (uint32)
    @nki.jit
    def k(a, v):
        out = sb((1, 8), nl.uint32)
        nisa.nc_find_index8(dst=out, data=load(a), vals=load(v))
        return out_of(out)

    data = np.array([[5, 7, 5, 9, 1, 2, 3, 4, 7, 6]], F32)
    vals = np.array([[5, 5, 7, 9, 6, 100, 1, 4]], F32)
    np.testing.assert_array_equal(run(k, data, vals), [[0, 2, 1, 3, 9, 0xFFFFFFFF, 4, 7]])


def test_nc_match_replace8_follows_the_docstring_example() -> None:
    # data = [1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8], vals = [3, 8, 8, 8, 8, 8, 8, 8]:
    # dst_idx is [2, 10, 9, 8, 7, 6, 5, 4]; every matched element is replaced by imm
    @nki.jit
    def k(a, v):
        out, idx = sb(a.shape), sb((1, 8), nl.uint32)
        nisa.nc_match_replace8(dst=out, data=load(a), vals=load(v), imm=-1.0, dst_idx=idx)
        return out_of(out), out_of(idx)

    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], F32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], F32)
    out, idx = run(k, data, vals)
    np.testing.assert_array_equal(idx, [[2, 10, 9, 8, 7, 6, 5, 4]])
    np.testing.assert_array_equal(out, [[1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1]])


def test_nonzero_with_count_follows_the_docstring_example() -> None:
    # Input [0, 1, 1, 0, 0, 1, 0, 0], index_offset 16, padding -1 ->
    # [17, 18, 21, -1, -1, -1, -1, -1, 3], on partitions 0, 16, ... only (others untouched)
    @nki.jit
    def k(a):
        out = sb((17, 9), nl.int32)
        nisa.memset(dst=out, value=7)
        nisa.nonzero_with_count(dst=out, src=load(a), index_offset=16, padding_val=-1)
        return out_of(out)

    a = np.tile(np.array([[0, 1, 1, 0, 0, 1, 0, 0]], F32), (17, 1))
    res = run(k, a)
    np.testing.assert_array_equal(res[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])
    np.testing.assert_array_equal(res[16], res[0])
    np.testing.assert_array_equal(res[1:16], np.full((15, 9), 7))


def test_range_select_follows_its_numpy_equivalent() -> None:
    # indices = range_start + arange(F); mask = comp_op0(indices, bound0) & comp_op1(indices,
    # bound1); out = where(mask, on_true_tile, FP32_MIN); reduce_res = max(out, axis=1).
    # Row 0: bounds [1, 3) with range_start 0 keeps columns 1, 2 -> max 30; row 1: [2, 4) -> 40.
    fmin = float(np.finfo(F32).min)

    @nki.jit
    def k(a, lo, hi):
        out, mx = sb(a.shape), sb((a.shape[0], 1))
        nisa.range_select(dst=out, on_true_tile=load(a), comp_op0=nl.greater_equal,
                          comp_op1=nl.less, bound0=load(lo), bound1=load(hi), reduce_res=mx,
                          reduce_op=nl.maximum, on_false_value=fmin)
        return out_of(out), out_of(mx)

    a = np.array([[10, 20, 30, 40], [10, 20, 30, 40]], F32)
    out, mx = run(k, a, np.array([[1], [2]], F32), np.array([[3], [4]], F32))
    np.testing.assert_array_equal(out, [[fmin, 20, 30, fmin], [fmin, fmin, 30, 40]])
    np.testing.assert_array_equal(mx, [[30], [40]])


def test_select_reduce_follows_its_numpy_equivalent() -> None:
    # result = where(predicate, on_true, on_false); reduction = max(result, axis=1);
    # reverse_pred flips the predicate
    @nki.jit
    def k(a, p):
        out, mx = sb(a.shape), sb((1, 1))
        nisa.select_reduce(dst=out, predicate=load(p), on_true=load(a), on_false=-5.0,
                           reduce_res=mx, reduce_cmd=nisa.reduce_cmd.reset_reduce,
                           reverse_pred=True)
        return out_of(out), out_of(mx)

    out, mx = run(k, np.array([[1.0, 9.0, 3.0]], F32), np.array([[1, 0, 0]], np.uint8))
    np.testing.assert_array_equal(out, [[-5.0, 9.0, 3.0]])
    assert mx[0, 0] == 9.0


def test_nc_n_gather_gathers_within_each_partition() -> None:
    # "For each partition, the free dimensions of data are conceptually flattened, and elements
    # are gathered according to the corresponding flattened indices from the same partition"
    @nki.jit
    def k(a, i):
        x = load(a)
        out = sb((2, 3))
        nisa.nc_n_gather(dst=out, data=x.reshape((2, 2, 2)), indices=load(i))
        return out_of(out)

    a = np.array([[10, 11, 12, 13], [20, 21, 22, 23]], F32)
    idx = np.array([[3, 0, 0], [1, 2, 3]], np.uint32)
    np.testing.assert_array_equal(run(k, a, idx), [[13, 10, 10], [21, 22, 23]])


def test_get_nc_version_names_the_target_generation() -> None:
    got = {}
    for target in ("trn1", "trn2", "trn3"):
        @nki.jit
        def k(a):
            got[os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"]] = nisa.get_nc_version()
            return out_of(load(a))

        run(k, np.zeros((1, 1), F32), target=target)
    assert got == {"trn1": nisa.nc_version.gen2, "trn2": nisa.nc_version.gen3,
                   "trn3": nisa.nc_version.gen4}
    assert nisa.nc_version.gen3 >= nisa.nc_version.gen2  # nki-library compares generations


@pytest.mark.parametrize("instr", ["sendrecv", "core_barrier", "quantize_mx", "local_gather",
                                   "sequence_bounds", "topk"])
def test_unmodelled_instructions_say_so(instr: str) -> None:
    @nki.jit
    def k(a):
        getattr(nisa, instr)()
        return a

    with pytest.raises(NkiError, match="not modelled") as info:
        run(k, np.zeros((1, 1), F32))
    assert info.value.rule == "not modelled"
