"""Conformance of kernel_dsl's NKI interpreter with notes/nki.md §7, part 2: the instructions
(placement, shapes, limits, dtypes, operands, generation gates) and the numerics (rounding to
storage dtypes, fp32 engines, range warnings). Part 1 and the helpers: test_nki_interp.py."""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_nki_interp import F32, A, nisa, nki, nl, out_like, psum, rejects, run, sbuf

from kernel_dsl.lowering.nki.interp import ActivationRangeWarning
from kernel_dsl.lowering.nki.runner import load_source


@pytest.fixture(autouse=True)
def _target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


# -- instructions ----------------------------------------------------------------------------
def _mm(stat_buf: str = "sbuf", dst_buf: str = "psum", k_: int = 8, m: int = 4, n: int = 4,
        sdt: Any = None, mdt: Any = None, ddt: Any = None, dst_shape: Any = None, **kw: Any) -> Any:
    @nki.jit
    def k(a):
        st = nl.ndarray((k_, m), dtype=sdt or nl.float32, buffer=getattr(nl, stat_buf))
        mv = nl.ndarray((k_, n), dtype=mdt or nl.float32, buffer=nl.sbuf)
        d = nl.ndarray(dst_shape or (m, n), dtype=ddt or nl.float32, buffer=getattr(nl, dst_buf))
        nisa.memset(dst=st, value=1)
        nisa.memset(dst=mv, value=1)
        nisa.nc_matmul(dst=d, stationary=st, moving=mv, **kw)
        return out_like((1, 1))

    return k


def test_nc_matmul_placement_shapes_and_limits() -> None:
    rejects("memory placement", _mm(stat_buf="psum"), A, match="SBUF")
    rejects("memory placement", _mm(dst_buf="sbuf"), A, match="PSUM")
    rejects("partition limit", _mm(k_=129), A)
    rejects("matmul limits", _mm(m=129, dst_shape=(4, 4)), A, match="stationary")
    rejects("matmul limits", _mm(n=513), A, match="512")
    run(_mm(n=1024, dst_shape=(4, 1024)), A, target="trn3")  # v4: up to 4096 with fp32 dst
    rejects("tensor shapes", _mm(dst_shape=(4, 5)), A, match="stationary.T @ moving")


def test_nc_matmul_dtypes() -> None:
    rejects("dtypes", _mm(sdt=nl.float32, mdt=nl.bfloat16), A, match="fp32/tf32")
    rejects("dtypes", _mm(ddt=nl.int32), A, match="float32")
    rejects("dtypes", _mm(sdt=nl.int32, mdt=nl.int32), A)
    run(_mm(sdt=nl.bfloat16, mdt=nl.float16), A)  # mixed 16-bit floats are fine


def test_nc_matmul_accumulates_in_fp32_with_auto_accumulate() -> None:
    @nki.jit
    def k(a, b):
        out = out_like((4, 4))
        d = psum((4, 4))
        for j in range(4):  # accumulate=None: the first write overwrites NaN, the rest add
            st, mv = sbuf((128, 4), nl.bfloat16), sbuf((128, 4), nl.bfloat16)
            nisa.dma_copy(dst=st, src=a[j * 128:(j + 1) * 128])
            nisa.dma_copy(dst=mv, src=b[j * 128:(j + 1) * 128])
            nisa.nc_matmul(dst=d, stationary=st, moving=mv)
        res = sbuf((4, 4))
        nisa.tensor_copy(dst=res, src=d)
        nisa.dma_copy(dst=out, src=res)
        return out

    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 4)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 4)).astype(ml_dtypes.bfloat16)
    exact = a.astype(np.float64).T @ b.astype(np.float64)
    got = run(k, a, b)
    assert np.abs(got - exact).max() < 1e-4 * np.abs(exact).max() + 1e-4


def test_nc_matmul_accumulate_true_needs_a_started_group() -> None:
    rejects("matmul accumulation", _mm(accumulate=True), A, match="no matmul has written")


def test_nc_transpose_engines_and_dtypes() -> None:
    @nki.jit
    def too_big(a):
        d = psum((128, 8))
        s = sbuf((8, 129))
        nisa.nc_transpose(dst=d, data=s)
        return out_like((1, 1))

    @nki.jit
    def to_sbuf_on_pe(a):
        d = sbuf((64, 8))
        s = sbuf((8, 64))
        nisa.nc_transpose(dst=d, data=s, engine=nisa.engine.tensor)
        return out_like((1, 1))

    @nki.jit
    def vector_too_big(a):
        d = sbuf((64, 8))
        s = sbuf((8, 64))
        nisa.nc_transpose(dst=d, data=s, engine=nisa.engine.vector)
        return out_like((1, 1))

    @nki.jit
    def dtype_change(a):
        d = psum((4, 8), nl.float32)
        s = sbuf((8, 4), nl.bfloat16)
        nisa.nc_transpose(dst=d, data=s)
        return out_like((1, 1))

    rejects("transpose limits", too_big, A, match="128x128")
    rejects("memory placement", to_sbuf_on_pe, A, match="PSUM")
    rejects("transpose limits", vector_too_big, A, match="32x32")
    rejects("dtypes", dtype_change, A)


def test_tensor_tensor_layout_and_psum_inputs() -> None:
    @nki.jit
    def mismatch(a):
        x, y, d = sbuf((8, 4)), sbuf((8, 2)), sbuf((8, 4))
        nisa.tensor_tensor(dst=d, data1=x, data2=y, op=nl.add)
        return out_like((1, 1))

    @nki.jit
    def both_psum(a):
        x, y, d = psum((8, 4)), psum((8, 4)), sbuf((8, 4))
        nisa.tensor_tensor(dst=d, data1=x, data2=y, op=nl.add)
        return out_like((1, 1))

    rejects("tensor shapes", mismatch, A)
    rejects("memory placement", both_psum, A, match="both in PSUM")


def test_tensor_scalar_operands() -> None:
    @nki.jit
    def wide_vector(a):
        x, v, d = sbuf((8, 4)), sbuf((8, 2)), sbuf((8, 4))
        nisa.tensor_scalar(dst=d, data=x, op0=nl.add, operand0=v)
        return out_like((1, 1))

    @nki.jit
    def bf16_vector(a):
        x, v, d = sbuf((8, 4)), sbuf((8, 1), nl.bfloat16), sbuf((8, 4))
        nisa.tensor_scalar(dst=d, data=x, op0=nl.add, operand0=v)
        return out_like((1, 1))

    @nki.jit
    def mixed_classes(a):
        x, d = sbuf((8, 4), nl.int32), sbuf((8, 4), nl.int32)
        nisa.tensor_scalar(dst=d, data=x, op0=nl.add, operand0=1, op1=nl.bitwise_and, operand1=3)
        return out_like((1, 1))

    rejects("operands", wide_vector, A, match="(8, 1)")
    rejects("dtypes", bf16_vector, A, match="float32")
    rejects("operands", mixed_classes, A, match="same class")


def test_activation_bias_and_scale() -> None:
    @nki.jit
    def scalar_bias(a):
        out = out_like((8, 4))
        x, d = sbuf((8, 4)), sbuf((8, 4))
        nisa.dma_copy(dst=x, src=a)
        nisa.activation(dst=d, op=nl.copy, data=x, bias=1.0, scale=2.0)
        nisa.dma_copy(dst=out, src=d)
        return out

    np.testing.assert_array_equal(run(scalar_bias, A, target="trn2"), 2 * A + 1)
    rejects("generation gates", scalar_bias, A, target="trn1", match="(P, 1) bias")

    @nki.jit
    def wide_scale(a):
        x, s, d = sbuf((8, 4)), sbuf((8, 4)), sbuf((8, 4))
        nisa.activation(dst=d, op=nl.exp, data=x, scale=s)
        return out_like((1, 1))

    rejects("operands", wide_scale, A)


def test_reductions_only_over_trailing_free_axes() -> None:
    for axis, dst, match in [(0, (1, 4), "partition axis"), (1, (8, 1, 1), "trailing"),
                             ((1, 2), (8, 2), "")]:
        @nki.jit
        def k(a, axis=axis, dst=dst):
            x, d = sbuf((8, 2, 4)), sbuf(dst)
            nisa.tensor_reduce(dst=d, op=nl.add, data=x, axis=axis)
            return out_like((1, 1))

        rejects("tensor shapes" if not match else "free-axis reductions", k, A, match=match)


@pytest.mark.parametrize("instr", ["iota", "affine_select", "tensor_partition_reduce", "power"])
def test_gpsimd_never_touches_psum(instr: str) -> None:
    @nki.jit
    def k(a):
        d, x = psum((8, 4)), sbuf((8, 4))
        if instr == "iota":
            nisa.iota(dst=d, pattern=[[1, 4]], offset=0)
        elif instr == "affine_select":
            nisa.affine_select(dst=sbuf((8, 4)), pattern=[[1, 4]], channel_multiplier=0,
                               on_true_tile=d, on_false_value=0.0, cmp_op=nl.greater_equal)
        elif instr == "tensor_partition_reduce":
            nisa.tensor_partition_reduce(dst=sbuf((1, 4)), op=nl.add, data=d)
        else:
            nisa.tensor_tensor(dst=sbuf((8, 4)), data1=d, data2=x, op=nl.power)
        return out_like((1, 1))

    rejects("memory placement", k, A, match="PSUM")


def test_dma_copy_hbm_and_sbuf_only_with_matching_counts_and_fp32_casts() -> None:
    @nki.jit
    def from_psum(a):
        out = out_like((8, 4))
        nisa.dma_copy(dst=out, src=psum((8, 4)))
        return out

    @nki.jit
    def counts(a):
        t = sbuf((8, 3))
        nisa.dma_copy(dst=t, src=a)
        return out_like((1, 1))

    @nki.jit
    def cast(a):
        out = out_like((8, 4), nl.bfloat16)
        t = sbuf((8, 4))
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    rejects("memory placement", from_psum, A, match="tensor_copy")
    rejects("tensor shapes", counts, A)
    x = (np.arange(32, dtype=F32).reshape(8, 4) + np.float32(1 / 3))
    np.testing.assert_array_equal(run(cast, x), x.astype(ml_dtypes.bfloat16))


def test_memset_value_matches_the_dtype() -> None:
    @nki.jit
    def k(a):
        nisa.memset(dst=sbuf((8, 4), nl.int32), value=0.5)
        return out_like((1, 1))

    rejects("memset value", k, A, match="int32")


@pytest.mark.parametrize("name", ["divide", "fmod", "mod"])
def test_operators_the_hardware_lacks_are_rejected(name: str) -> None:
    @nki.jit
    def as_op(a):
        x, d = sbuf((8, 4)), sbuf((8, 4))
        nisa.tensor_tensor(dst=d, data1=x, data2=x, op=getattr(nl, name))
        return out_like((1, 1))

    @nki.jit
    def as_call(a):
        getattr(nl, name)(sbuf((8, 4)), 2.0)
        return out_like((1, 1))

    rejects("unsupported operators", as_op, A, match=f"nl.{name}")
    rejects("unsupported operators", as_call, A, match=f"nl.{name}")


@pytest.mark.parametrize("case", ["exponential", "nc_matmul_mx", "activate2", "fp8_e4m3fn",
                                  "bf16_psum", "double_row"])
def test_generation_gates(case: str) -> None:
    @nki.jit
    def k(a):
        x, d = sbuf((8, 4)), sbuf((8, 4))
        nisa.memset(dst=x, value=0.0)
        if case == "exponential":
            nisa.exponential(dst=d, src=x)
        elif case == "nc_matmul_mx":
            nisa.nc_matmul_mx(dst=psum((4, 4)), stationary=x, moving=x, stationary_scale=x,
                              moving_scale=x)
        elif case == "activate2":
            nisa.activate2(dst=d, op=nl.exp, data=x, imm0=0.0, imm1=0.0, op0=nl.add, op1=nl.add)
        elif case == "fp8_e4m3fn":
            s = sbuf((8, 4), nl.float8_e4m3fn)
            nisa.memset(dst=s, value=0.0)
            nisa.nc_matmul(dst=psum((4, 4)), stationary=s, moving=s)
        elif case == "bf16_psum":
            s = sbuf((8, 4), nl.bfloat16)
            nisa.memset(dst=s, value=0.0)
            nisa.nc_matmul(dst=psum((4, 4), nl.bfloat16), stationary=s, moving=s)
        else:
            nisa.nc_matmul(dst=psum((4, 4)), stationary=x, moving=x,
                           perf_mode=nisa.matmul_perf_mode.double_row)
        return out_like((1, 1))

    target = "trn1" if case == "double_row" else "trn2"
    rejects("generation gates", k, A, target=target, match="NeuronCore-v")
    if case in ("exponential", "fp8_e4m3fn", "bf16_psum"):
        run(k, A, target="trn3")  # allowed on NeuronCore-v4


# -- numerics --------------------------------------------------------------------------------
def test_writes_round_to_the_storage_dtype_and_engines_compute_in_fp32() -> None:
    @nki.jit
    def k(a, b):
        out = out_like((8, 4), nl.bfloat16)
        x, y, d = sbuf((8, 4), nl.bfloat16), sbuf((8, 4), nl.bfloat16), sbuf((8, 4), nl.bfloat16)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        nisa.tensor_tensor(dst=d, data1=x, data2=y, op=nl.multiply)
        nisa.dma_copy(dst=out, src=d)
        return out

    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16)
    want = (a.astype(F32) * b.astype(F32)).astype(ml_dtypes.bfloat16)  # fp32 math, one rounding
    got = run(k, a, b)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


def test_activation_input_range_warns() -> None:
    @nki.jit
    def k(a):
        out = out_like((8, 4))
        x, d = sbuf((8, 4)), sbuf((8, 4))
        nisa.dma_copy(dst=x, src=a)
        nisa.activation(dst=d, op=nl.sin, data=x)
        nisa.dma_copy(dst=out, src=d)
        return out

    with pytest.warns(ActivationRangeWarning, match=r"valid range \[-3.14159"):
        run(k, A)


def test_generated_source_imports_the_interpreter_when_nki_is_absent() -> None:
    src = ("import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n@nki.jit\n"
           "def copy(a):\n    out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)\n"
           "    t = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)\n"
           "    nisa.dma_copy(dst=t, src=a)\n    nisa.dma_copy(dst=out, src=t)\n    return out\n")
    k = load_source(src, "copy", engine="interp")
    np.testing.assert_array_equal(run(k, A), A)
    assert nki.__version__.endswith("kernel_dsl.interp") and nki.KERNEL_DSL_INTERPRETER
