"""Conformance of kernel_dsl's NKI interpreter with AWS's documented NKI semantics, part 1: the
`nki.language` function layer, tensor views, dtypes and the program model.

Each test checks one rule stated in the SDK's API reference (aws-neuron/aws-neuron-sdk, the
docstrings of `nki/api/nki/language/__init__.py` and `nki/api/nki.api.shared.rst`, Neuron 2.32),
with the expected value worked out by hand from that text, not taken from the interpreter. Part 2
(test_nki_conformance_isa.py) covers `nki.isa` instructions.
"""
from __future__ import annotations

import dataclasses
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


def run(kernel: Any, *args: Any, target: str = "trn2", **kwargs: Any) -> Any:
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    return nki.simulate(kernel)(*args, **kwargs)


def out_of(t: Any) -> Any:
    """An HBM output holding SBUF tile `t` (DMA'd out)."""
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def not_modelled(fn: Any, *args: Any, match: str | None = None) -> None:
    with pytest.raises(NkiError, match=match) as info:
        run(fn, *args)
    assert info.value.rule == "not modelled", str(info.value)


A = np.arange(8 * 4, dtype=F32).reshape(8, 4)


# -- nl.load / nl.store ----------------------------------------------------------------------
def test_load_returns_an_sbuf_tile_and_store_writes_hbm() -> None:
    # nl.load: "a new tile on SBUF with values from src"; nl.store: "Store into a tensor on
    # device memory (HBM) from on-chip memory (SBUF)".
    @nki.jit
    def k(a):
        t = nl.load(a)
        assert t.buffer == nl.sbuf
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    np.testing.assert_array_equal(run(k, A), A)


def test_load_dtype_casts_the_new_tile() -> None:
    # "dtype: (optional) data type to cast the output type to": 2.7 and -2.5 as bf16 stay, and
    # 1 + 2**-9 rounds to 1.0 in bfloat16 (8 significant bits).
    @nki.jit
    def k(a):
        t = nl.load(a, dtype=nl.bfloat16)
        assert t.dtype == nl.bfloat16
        back = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=back, src=t)
        return out_of(back)

    a = np.array([[1 + 2 ** -9, 2.5, -2.5, 4.0]], dtype=F32)
    np.testing.assert_array_equal(run(k, a), [[1.0, 2.5, -2.5, 4.0]])


def test_load_transpose2d_puts_columns_on_partitions() -> None:
    # "Load a tensor from device memory (HBM) and 2D-transpose the data before storing into
    # on-chip memory (SBUF)"
    @nki.jit
    def k(a):
        t = nl.load_transpose2d(a)
        assert t.shape == (4, 8) and t.buffer == nl.sbuf
        return out_of(t)

    np.testing.assert_array_equal(run(k, A), A.T)


def test_memory_regions_name_the_buffers() -> None:
    assert nl.MemoryRegion.sbuf == nl.sbuf and nl.MemoryRegion.shared_hbm == nl.shared_hbm
    assert nl.is_hbm(nl.shared_hbm) and nl.is_on_chip(nl.psum) and not nl.is_sbuf(nl.psum)


# -- element-wise functions ------------------------------------------------------------------
def test_add_of_two_tiles_and_of_a_tile_and_a_scalar() -> None:
    # The nl.add docstring examples: full(3) + full(2) == 5, and full(3) + 2.0 == 5.
    @nki.jit
    def k(a):
        x = nl.full((128, 512), 3.0, dtype=nl.float32, buffer=nl.sbuf)
        y = nl.full((128, 512), 2.0, dtype=nl.float32, buffer=nl.sbuf)
        return out_of(nl.add(x, y)), out_of(nl.add(x, 2.0))

    s, c = run(k, A)
    np.testing.assert_array_equal(s, np.full((128, 512), 5.0, F32))
    np.testing.assert_array_equal(c, np.full((128, 512), 5.0, F32))


@pytest.mark.parametrize("fn, x, expect", [
    ("rsqrt", 4.0, 0.5),        # docstring: rsqrt(4) = 0.5
    ("reciprocal", 4.0, 0.25),  # docstring: reciprocal(4.0) = 0.25
    ("trunc", 3.7, 3.0),        # docstring: truncates 3.7 toward zero to 3.0
    ("trunc", -3.7, -3.0),      # ... and -3.7 to -3.0
    ("negative", 5.0, -5.0),    # docstring: negates 5.0 to -5.0
    ("sign", -2.0, -1.0),       # "-1 if x < 0"
    ("exp", 0.0, 1.0),
])
def test_unary_functions_follow_their_docstring_examples(fn: str, x: float, expect: float) -> None:
    @nki.jit
    def k(a):
        t = nl.full((4, 8), x, dtype=nl.float32, buffer=nl.sbuf)
        return out_of(getattr(nl, fn)(t))

    np.testing.assert_allclose(run(k, A), np.full((4, 8), expect, F32), rtol=1e-6)


def test_unary_functions_keep_the_input_dtype_unless_told() -> None:
    # "if not specified, it will default to be the same as the data type of the input tile"
    @nki.jit
    def k(a):
        t = nl.full((4, 8), 1.0, dtype=nl.bfloat16, buffer=nl.sbuf)
        assert nl.exp(t).dtype == nl.bfloat16
        assert nl.exp(t, dtype=nl.float32).dtype == nl.float32
        return out_of(nl.copy(t, dtype=nl.float32))

    np.testing.assert_array_equal(run(k, A), np.ones((4, 8), F32))


def test_compute_functions_read_on_chip_tiles_only() -> None:
    # legacy error guide (err_unsupported_memory): `nl.exp` on HBM is an error
    @nki.jit
    def k(a):
        nl.exp(a)
        return a

    with pytest.raises(NkiError, match="SBUF or PSUM"):
        run(k, A)


def test_where_selects_by_a_float_condition() -> None:
    # nl.where docstring: condition 1.0 picks x (10.0), condition 0.0 picks y (5.0)
    @nki.jit
    def k(a):
        x = nl.full((2, 4), 10.0, dtype=nl.float32, buffer=nl.sbuf)
        y = nl.full((2, 4), 5.0, dtype=nl.float32, buffer=nl.sbuf)
        c = nl.load(a)
        return out_of(nl.where(c, x, y))

    cond = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], dtype=F32)
    np.testing.assert_array_equal(run(k, cond), np.where(cond != 0, 10.0, 5.0))


def test_gelu_tanh_approximation_is_the_tanh_formula() -> None:
    # nki.api.shared.rst names "Gelu with Tanh Approximation" (nl.gelu_apprx_tanh): the standard
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). At x = 1: 0.8411920...
    @nki.jit
    def k(a):
        t = nl.full((1, 2), 1.0, dtype=nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.gelu_apprx_tanh, data=t)
        return out_of(d)

    np.testing.assert_allclose(run(k, A), [[0.841192, 0.841192]], rtol=1e-5)


# -- reductions ------------------------------------------------------------------------------
def test_sum_and_max_reduce_the_last_free_axes() -> None:
    # "axis ... can only be the last contiguous dim(s) of the tile"; keepdims keeps size-1 dims
    @nki.jit
    def k(a):
        t = nl.load(a.reshape((2, 2, 3)))
        s = nl.sum(t, axis=[1, 2])
        m = nl.max(t, axis=2, keepdims=True)
        assert m.shape == (2, 2, 1)
        return out_of(s), out_of(m.reshape((2, 2)))

    x = np.array([[1, 2, 3, 4, 5, 6], [-1, -2, -3, 0, 9, 1]], dtype=F32)
    s, m = run(k, x)
    np.testing.assert_array_equal(s, [[21.0], [4.0]])
    np.testing.assert_array_equal(m, [[3.0, 6.0], [-1.0, 9.0]])


def test_reductions_never_reduce_the_partition_axis() -> None:
    # "must be free dimensions, not partition dimension (0)"
    @nki.jit
    def k(a):
        nl.sum(nl.load(a), axis=0)
        return a

    with pytest.raises(NkiError, match="partition"):
        run(k, A)


# -- creation, identity, transpose, matmul, broadcast ----------------------------------------
def test_identity_transpose_and_matmul_follow_the_docstring_examples() -> None:
    # "transpose of identity is identity"; "identity.T @ ones = ones"; matmul writes PSUM
    @nki.jit
    def k(a):
        eye = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        t = nl.transpose(eye)
        ones = nl.full((128, 128), 1.0, dtype=nl.float32, buffer=nl.sbuf)
        mm = nl.matmul(eye, ones, transpose_x=True)
        assert t.buffer == nl.psum and mm.buffer == nl.psum
        return out_of(nl.copy(t)), out_of(nl.copy(mm))

    t, mm = run(k, A)
    np.testing.assert_array_equal(t, np.eye(128, dtype=F32))
    np.testing.assert_array_equal(mm, np.ones((128, 128), F32))


def test_zeros_ones_and_full_fill_their_values() -> None:
    @nki.jit
    def k(a):
        return (out_of(nl.zeros((2, 3), dtype=nl.int32)), out_of(nl.ones((2, 3), dtype=nl.float32)),
                out_of(nl.full((2, 3), 7, dtype=nl.int16)))

    z, o, f = run(k, A)
    np.testing.assert_array_equal(z, np.zeros((2, 3), np.int32))
    np.testing.assert_array_equal(o, np.ones((2, 3), F32))
    np.testing.assert_array_equal(f, np.full((2, 3), 7, np.int16))


def test_broadcast_to_follows_numpy_rules_and_keeps_the_rank() -> None:
    # "Broadcast a tile to a new shape following numpy broadcasting rules"; "Must have the same
    # rank as x"
    @nki.jit
    def k(a):
        row = nl.load(a[0:1, :])
        return out_of(nl.broadcast_to(row, (3, 4)))

    np.testing.assert_array_equal(run(k, A), np.broadcast_to(A[0:1], (3, 4)))

    @nki.jit
    def bad(a):
        nl.broadcast_to(nl.load(a[0:1, :]), (3, 1, 4))
        return a

    with pytest.raises(NkiError, match="cannot broadcast"):
        run(bad, A)


# -- tensor views ----------------------------------------------------------------------------
def test_view_methods_give_the_documented_shapes() -> None:
    # the NkiTensor docstring examples
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 24), dtype=nl.float32, buffer=nl.sbuf)
        assert t.reshape_dim(1, (4, 6)).shape == (128, 4, 6)
        assert t.reshape_dim(1, (4, -1)).shape == (128, 4, 6)
        assert t.expand_dim(1).shape == (128, 1, 24)
        assert t.expand_dim(1).squeeze_dim(1).shape == (128, 24)
        assert t.slice(1, 8, 24, 1).shape == (128, 16)
        assert t.slice(1, 0, 24, 2).shape == (128, 12)
        u = nl.ndarray((128, 2, 3, 4), dtype=nl.float32, buffer=nl.sbuf)
        assert u.flatten_dims(1, 2).shape == (128, 6, 4)
        assert nl.ndarray((128, 8, 64), dtype=nl.float32, buffer=nl.sbuf).select(1, 3).shape == (128, 64)
        f = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        assert f.view(nl.uint8).shape == (128, 256)   # "4x expansion"
        assert f.view(nl.int32).shape == (128, 64)
        assert nl.ndarray((128, 256), dtype=nl.uint8, buffer=nl.sbuf).view(nl.float32).shape == (128, 64)
        return out_of(nl.zeros((1, 1), dtype=nl.float32))

    run(k, A)


def test_view_reinterprets_bits() -> None:
    # "Reinterpret the tensor's data as a different dtype. No data is copied."
    @nki.jit
    def k(a):
        t = nl.load(a)
        return out_of(nl.copy(t.view(nl.int32), dtype=nl.int32))

    x = np.array([[1.0, -2.0]], dtype=F32)
    np.testing.assert_array_equal(run(k, x), x.view(np.int32))


def test_ap_offset_composes_with_the_views_base() -> None:
    # .ap(offset=None) "inherits the current view's storage offset unchanged"; offset=N "shifts
    # by N additional elements"
    @nki.jit
    def k(a):
        t = nl.load(a)                       # (8, 4) SBUF, 4 elements per partition
        base = t[2:4, 1:3]                   # starts at partition 2, column 1
        same = base.ap(pattern=[[4, 2], [1, 2]])             # rows 2..3, columns 1..2
        shifted = base.ap(pattern=[[4, 2], [1, 2]], offset=1)  # columns 2..3
        return out_of(nl.copy(same)), out_of(nl.copy(shifted))

    same, shifted = run(k, A)
    np.testing.assert_array_equal(same, A[2:4, 1:3])
    np.testing.assert_array_equal(shifted, A[2:4, 2:4])


def test_ap_scalar_offset_scales_by_the_indirect_dims_stride() -> None:
    # "indirect_dim: dimension in self.shape whose stride scales the indirect scalar/vector
    # offset": reading row idx of an (8, 4) HBM tensor with indirect_dim=0 adds idx * 4
    @nki.jit
    def k(a, idx):
        i = nl.load(idx)
        row = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=a.ap(pattern=[[4, 1], [1, 4]], scalar_offset=i, indirect_dim=0))
        return out_of(row)

    np.testing.assert_array_equal(run(k, A, np.array([[5]], dtype=np.int32)), A[5:6])


def test_ap_dtype_reinterprets_the_storage() -> None:
    # ".ap(..., dtype=nl.bfloat16)": "reinterpret storage as this dtype"; a float32 1.0 is
    # 0x3F800000, whose upper half (little-endian element 1) is bfloat16 1.0
    @nki.jit
    def k(a):
        t = nl.load(a)                                           # (1, 2) float32
        hi = t.ap(pattern=[[4, 1], [2, 2]], offset=1, dtype=nl.bfloat16)  # the upper halves
        return out_of(nl.copy(hi, dtype=nl.float32))

    np.testing.assert_array_equal(run(k, np.array([[1.0, -3.0]], dtype=F32)), [[1.0, -3.0]])


def test_vector_offset_on_an_on_chip_tensor_is_rejected() -> None:
    # dma_copy's docstring: "The tensor being indexed (the one .ap() is called on) must be in
    # HBM" (the indirect DMA itself: tests/test_nki_indirect.py)
    @nki.jit
    def k(a):
        idx = nl.zeros((4, 1), dtype=nl.int32)
        t = nl.load(a)
        t.ap(pattern=[[4, 4], [1, 4]], vector_offset=idx)
        return a

    with pytest.raises(NkiError, match="must be in HBM"):
        run(k, A)


# -- dtypes ----------------------------------------------------------------------------------
def test_packed_x4_dtypes_exist_and_are_rejected_when_used() -> None:
    # nki.api.shared.rst lists float8_e4m3fn_x4, float8_e5m2_x4 and float4_e2m1fn_x4 ("Packed")
    for name in ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"):
        assert getattr(nl, name) is not None

        @nki.jit
        def k(a, name=name):
            nl.ndarray((4, 4), dtype=getattr(nl, name), buffer=nl.sbuf)
            return a

        not_modelled(k, A, match="x4-packed")


def test_nki_dtype_names_the_dtype_type() -> None:
    # AWS's kernels annotate `dtype: nki.dtype = nl.bfloat16`; its tests `import nki.dtype as nt`
    assert isinstance(nl.bfloat16, nki.dtype) and isinstance(nl.float8_e8m0fnu, nki.dtype)
    assert NS["nki.dtype"].float8_e4m3 is nl.float8_e4m3


# -- the program model -----------------------------------------------------------------------
def test_dtype_valued_kernel_arguments_are_accepted() -> None:
    # AWS's kernels take `softmax_dtype=nl.float32` / `dtype: nki.dtype = nl.bfloat16`
    @nki.jit
    def k(a, dtype=nl.float32):
        return out_of(nl.load(a, dtype=dtype))

    assert run(k, A, dtype=nl.int32).dtype == np.int32
    assert run(k, A).dtype == np.float32


def test_is_and_is_not_are_accepted() -> None:
    @nki.jit
    def k(a, bias=None):
        t = nl.load(a)
        if bias is not None:
            t = nl.add(t, nl.load(bias))
        return out_of(t)

    np.testing.assert_array_equal(run(k, A), A)
    np.testing.assert_array_equal(run(k, A, A), 2 * A)


def test_a_returned_view_has_the_views_shape() -> None:
    @nki.jit
    def k(a):
        out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=nl.load(a))
        return out.reshape((4, 8))

    np.testing.assert_array_equal(run(k, A), A.reshape(4, 8))


def test_an_output_passed_in_as_an_argument_may_be_returned() -> None:
    # the `*_tkg` pattern of AWS's nki-library: the caller allocates the output
    @nki.jit
    def k(a, out):
        nisa.dma_copy(dst=out, src=nl.add(nl.load(a), 1.0))
        return out

    res = run(k, A, np.zeros_like(A))
    np.testing.assert_array_equal(res, A + 1)


def test_program_ndim_is_zero_without_a_grid() -> None:
    # nl.program_ndim: "0 if no grid"
    @nki.jit
    def k(a):
        return out_of(nl.full((1, 1), nl.program_ndim(), dtype=nl.int32))

    assert run(k, A)[0, 0] == 0
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn2"
    assert nki.simulate(k[1])(A)[0, 0] == 1


def test_tile_size_sbuf_queries() -> None:
    # total_available_sbuf_size: "the usable SBUF capacity per partition" (= sbuf_fmax_bytes);
    # sbuf_size_bytes: "all partitions combined"
    @nki.jit
    def k(a):
        ts = nl.tile_size
        assert ts.total_available_sbuf_size == ts.sbuf_fmax_bytes
        assert ts.sbuf_size_bytes == ts.sbuf_fmax_bytes * ts.pmax
        return out_of(nl.zeros((1, 1), dtype=nl.float32))

    run(k, A)


def test_nkiobject_dataclasses_take_keywords_for_plain_attributes() -> None:
    # nki-library builds `@dataclass class P(nl.NKIObject): x = None` with P(x=...)
    @dataclasses.dataclass
    class P(nl.NKIObject):
        first: int = 0
        second = None

    p = P(first=1, second=2)
    assert (p.first, p.second) == (1, 2)


def test_manual_addresses_are_checked_and_psum_needs_bank_boundaries() -> None:
    # migration guide: a PSUM address must start on a 2 KiB bank boundary
    @nki.jit
    def ok(a):
        nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf, address=(0, 1024))
        nl.ndarray((8, 512), dtype=nl.float32, buffer=nl.psum, address=(0, 2048))
        return out_of(nl.zeros((1, 1), dtype=nl.float32))

    run(ok, A)

    @nki.jit
    def bad(a):
        nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.psum, address=(0, 100))
        return a

    with pytest.raises(NkiError, match="bank boundary"):
        run(bad, A)


def test_submodules_import_as_aws_kernels_import_them() -> None:
    # `from nki.isa.constants import oob_mode, dge_mode`, `from nki.typing import tensor`
    assert NS["nki.isa.constants"].oob_mode is nisa.oob_mode
    assert NS["nki.isa.constants"].dge_mode is nisa.dge_mode
    assert NS["nki.typing"].tensor is nl.NkiTensor
    assert nki.isa.constants is NS["nki.isa.constants"]


@pytest.mark.parametrize("name", ["all_reduce", "all_gather", "rank_id"])
def test_collectives_are_rejected_as_not_modelled(name: str) -> None:
    coll = NS["nki.collectives"]

    @nki.jit
    def k(a):
        getattr(coll, name)()
        return a

    not_modelled(k, A, match="collective")


def test_rng_is_rejected_as_not_modelled() -> None:
    @nki.jit
    def rand(a):
        nl.rand((4, 4), dtype=nl.float32)
        return a

    not_modelled(rand, A)


def test_registers_drive_runtime_loops() -> None:
    # fori_loop "is roughly equivalent to: for i in range(lower, upper, step): body_fun(i)", i a
    # register usable as a scalar_offset; while_loop: "r = init; while r != 0: r = body_fun(r)";
    # register_load reads a one-element tensor, register_store writes one.
    @nki.jit
    def k(a, n):
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=nl.zeros((1, 4), dtype=nl.float32))
        ub = nisa.register_alloc()
        nisa.register_load(ub, nl.load(n))          # 3
        tmp = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

        def body(i):                                   # out[0, i] = a[0, i] for i < 3
            nisa.dma_copy(dst=tmp, src=a.ap([[4, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
            nisa.dma_copy(dst=out.ap([[4, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=tmp)

        nl.fori_loop(0, ub, body)
        count = nl.load(n)                             # counts 3, 2, 1 down to 0
        one = nl.full((1, 1), 1, dtype=nl.int32)
        steps = nl.zeros((1, 1), dtype=nl.int32)

        def down(r):
            nisa.tensor_tensor(dst=count, data1=count, data2=one, op=nl.subtract)
            nisa.tensor_tensor(dst=steps, data1=steps, data2=one, op=nl.add)
            nisa.register_load(r, count)
            return r

        nl.while_loop(ub, down)
        total = nisa.register_alloc(0)
        for _ in nl.dynamic_range(ub):
            nisa.register_move(total, 7)
        res = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(res, total)
        return out, out_of(steps), out_of(res)

    row = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=F32)
    out, steps, res = run(k, row, np.array([[3]], dtype=np.int32))
    np.testing.assert_array_equal(out, [[1.0, 2.0, 3.0, 0.0]])
    assert steps[0, 0] == 3 and res[0, 0] == 7
