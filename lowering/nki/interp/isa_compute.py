"""Compute instructions: TensorE (`nc_matmul`, `nc_transpose`), VectorE/GpSimd
(`tensor_tensor`, `tensor_scalar`, `tensor_reduce`, `reciprocal`), ScalarE (`activation`), and
the generation-gated ones. Engines read float32, compute in float32 and round at the destination.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import accumulators as accumulate
from . import checks as ck
from . import dtypes as dt
from . import language as nl
from .checks import engine, matmul_perf_mode, reduce_cmd
from .errors import ActivationRangeWarning, NkiError, TransposeExactnessWarning, kernel_line
from .state import PMAX, PSUM_BANK_BYTES, current
from .tensor import NkiTensor

_MM_INPUTS = (dt.float32, dt.tfloat32, dt.bfloat16, dt.float16, dt.float8_e4m3, dt.float8_e5m2,
              dt.float8_e4m3fn)


def _mm_dtypes(s: NkiTensor, m: NkiTensor, w: str) -> None:
    for t, role in ((s, "stationary"), (m, "moving")):
        if t.dtype not in _MM_INPUTS:
            raise NkiError(w, f"`{role}` is {t.dtype!r}; TensorE takes fp8, bf16, fp16, tf32 or "
                           "fp32", "dtypes", "cast integer tiles to float first")
        if t.dtype is dt.float8_e4m3fn:
            ck.gen_at_least(4, w, "float8_e4m3fn matmul inputs")
    wide = {s.dtype in (dt.float32, dt.tfloat32), m.dtype in (dt.float32, dt.tfloat32)}
    if len(wide) == 2:
        raise NkiError(w, f"`stationary` is {s.dtype!r} and `moving` {m.dtype!r}; an fp32/tf32 "
                       "operand needs an fp32/tf32 partner", "dtypes", "cast both to one dtype")
    if {s.dtype, m.dtype} == {dt.float8_e4m3, dt.float8_e4m3fn}:
        raise NkiError(w, "float8_e4m3 and float8_e4m3fn cannot be mixed", "dtypes")


def nc_matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor,
              is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, accumulate: bool | None = None, tile_position: Any = (),
              tile_size: Any = (), perf_mode: Any = matmul_perf_mode.none, name: Any = None) -> None:
    """`dst = stationary.T @ moving` on TensorE: contraction on partitions, fp32 accumulation
    into PSUM. accumulate=None: the first write to a PSUM element overwrites, later ones add."""
    w = "nisa.nc_matmul"
    d, s, m = (ck.tensor(x, w, r) for x, r in ((dst, "dst"), (stationary, "stationary"),
                                               (moving, "moving")))
    why = "TensorE reads only SBUF and writes only PSUM"
    ck.placed(s, w, "stationary", ("sbuf",), why)
    ck.placed(m, w, "moving", ("sbuf",), why)
    ck.placed(d, w, "dst", ("psum",), why)
    gen = current().target.gen
    if perf_mode == matmul_perf_mode.double_row:
        ck.gen_at_least(3, w, "perf_mode=double_row")
        raise NkiError(w, "perf_mode=double_row is outside the interpreted subset", "program model")
    if bool(tile_position) != bool(tile_size):
        raise NkiError(w, "tile_position and tile_size must be set together", "operands")
    _mm_dtypes(s, m, w)
    rows = int(tile_size[0]) if tile_size else PMAX
    k, mm, n = s.shape[0], s.free_size, m.free_size
    if m.shape[0] != k:
        raise NkiError(w, f"`stationary` has {k} partitions and `moving` {m.shape[0]}; both hold "
                       "the contraction dim on partitions", "tensor shapes")
    if k > rows:
        raise NkiError(w, f"contraction over {k} partitions exceeds {rows}", "partition limit")
    if mm > 128:
        raise NkiError(w, f"`stationary` free size {mm} exceeds 128 (gemm_stationary_fmax)",
                       "matmul limits", "split M into blocks of 128")
    bf16_dst = d.dtype is dt.bfloat16
    if bf16_dst:
        ck.gen_at_least(4, w, "a bfloat16 matmul destination")
    elif d.dtype is not dt.float32:
        raise NkiError(w, f"`dst` is {d.dtype!r}; PSUM matmul results are float32", "dtypes")
    n_max = 512 if gen < 4 else (8192 if bf16_dst else 4096)
    if n > n_max:
        raise NkiError(w, f"`moving` free size {n} exceeds {n_max} (one PSUM bank of fp32)",
                       "matmul limits", "split N into blocks of 512")
    if d.shape[0] != mm or d.free_size != n:
        raise NkiError(w, f"`dst` is {list(d.shape)}; stationary.T @ moving is ({mm}, {n})",
                       "tensor shapes", "dst is (stationary free size, moving free size)")
    if gen < 4:
        lo, hi = d.free_byte_span()
        if lo // PSUM_BANK_BYTES != (hi - 1) // PSUM_BANK_BYTES:
            raise NkiError(w, f"`dst` spans bytes {lo}..{hi} of its partition, crossing a 2 KiB "
                           "PSUM bank", "matmul limits", "one matmul output must fit in one bank")
    prod = s.f32().reshape(k, mm).T @ m.f32().reshape(k, n)
    flags = d.mm_flags().reshape(mm, n)
    if accumulate is True and not flags.all():
        raise NkiError(w, "accumulate=True onto PSUM that no matmul has written", "matmul "
                       "accumulation", "start the group with accumulate=False (or None)")
    if accumulate is None:
        old = d.f32().reshape(mm, n)
        prod = np.where(flags, old + prod, prod)
    elif accumulate:
        prod = d.f32().reshape(mm, n) + prod
    d.write(prod.astype(np.float32).reshape(d.shape), matmul=True)


def nc_transpose(dst: NkiTensor, data: NkiTensor, engine: Any = engine.unknown, name: Any = None) -> None:
    """Swaps partitions with the (flattened) free dims: TensorE (<= 128x128, SBUF -> PSUM) or
    VectorE (<= 32x32, any on-chip). dst has data's dtype."""
    w = "nisa.nc_transpose"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    p, f = s.shape[0], s.free_size
    on_pe = engine == ck.engine.tensor or (engine != ck.engine.vector and
                                            (p > 32 or f > 32 or d.buffer == "psum"))
    if on_pe:
        ck.placed(s, w, "data", ("sbuf",), "a TensorE transpose reads SBUF")
        ck.placed(d, w, "dst", ("psum",), "a TensorE transpose writes PSUM")
        if p > 128 or f > 128:
            raise NkiError(w, f"`data` is {p}x{f}; TensorE transposes at most 128x128",
                           "transpose limits")
    elif p > 32 or f > 32:
        raise NkiError(w, f"`data` is {p}x{f}; VectorE transposes at most 32x32", "transpose limits")
    if d.dtype is not s.dtype:
        raise NkiError(w, f"`dst` is {d.dtype!r} and `data` {s.dtype!r}", "dtypes",
                       "a transpose keeps the dtype; cast before or after it")
    if d.shape[0] != f or d.free_size != p:
        raise NkiError(w, f"`dst` is {list(d.shape)}; the transpose of {list(s.shape)} is "
                       f"({f}, {p})", "tensor shapes")
    vals = s.raw().reshape(p, f).T
    if on_pe and current().target.gen == 2 and s.dtype.is_float and not np.isfinite(s.f32()).all():
        warnings.warn(TransposeExactnessWarning(
            f"{w}: TensorE transpose of NaN/Inf is not bit-exact on NeuronCore-v2"
            + (f"\n  at {kernel_line()}" if kernel_line() else "")), stacklevel=2)
    d.arr[...] = vals.reshape(d.shape)
    if d.storage.mm_written is not None:
        d.mm_flags()[...] = on_pe


def _native_int32(d: NkiTensor, a: NkiTensor, b: NkiTensor, eng: Any) -> bool:
    """nisa.tensor_tensor docstring: when all tiles are int32/uint32 the op "defaults to GpSimd
    Engine, which uses native integer arithmetic"; passing engine=vector overrides that, and the
    dispatch "falls back to Vector Engine when any operand resides in PSUM". VectorE casts to
    float32 like every arithmetic op."""
    if not all(t.dtype in (dt.int32, dt.uint32) for t in (d, a, b)):
        return False
    if eng == ck.engine.vector or any(t.buffer == "psum" for t in (d, a, b)):
        return False
    return True


def tensor_tensor(dst: NkiTensor, data1: NkiTensor, data2: NkiTensor, op: Any,
                  engine: Any = engine.unknown, name: Any = None) -> None:
    """Elementwise `data1 op data2` (VectorE; GpSimd for nl.power). The inputs may not both be
    in PSUM; nl.power runs on GpSimd, which cannot access PSUM at all."""
    w = "nisa.tensor_tensor"
    d, a, b = (ck.tensor(x, w, r) for x, r in ((dst, "dst"), (data1, "data1"), (data2, "data2")))
    o = ck.operator(op, w, "op", alu=True)
    for t, r in ((d, "dst"), (a, "data1"), (b, "data2")):
        ck.placed(t, w, r, ("sbuf", "psum"))
    ck.same_layout(a, b, w, "data1", "data2")
    ck.same_layout(d, a, w, "dst", "data1")
    if a.buffer == "psum" and b.buffer == "psum":
        raise NkiError(w, "`data1` and `data2` are both in PSUM", "memory placement",
                       "copy one of them to SBUF first")
    if o is nl.power or engine == ck.engine.gpsimd:
        ck.no_psum([(d, "dst"), (a, "data1"), (b, "data2")], w, "GpSimd cannot access PSUM")
    if o.unary:
        raise NkiError(w, f"op={o!r} is unary", "operands", "use nisa.tensor_scalar or activation")
    if o.kind == "bitvec":
        if not all(t.dtype.kind != "float" for t in (d, a, b)):
            raise NkiError(w, f"bitvec op {o!r} needs integer tiles", "dtypes")
        out = o.fn(a.raw().reshape(d.shape).astype(np.int64), b.raw().reshape(d.shape).astype(np.int64))
    elif _native_int32(d, a, b, engine):  # GpSimd's native 32-bit integer arithmetic
        out = o.fn(a.raw().reshape(d.shape).astype(np.int64), b.raw().reshape(d.shape).astype(np.int64))
    else:
        with np.errstate(all="ignore"):
            out = o.fn(a.f32().reshape(d.shape), b.f32().reshape(d.shape))
    d.write(np.asarray(out))


def _apply(o: nl.Op, x: np.ndarray, operand: Any, reverse: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        if o.unary:
            return o.fn(x)
        return o.fn(operand, x) if reverse else o.fn(x, operand)


def tensor_scalar(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, reverse0: bool = False,
                  op1: Any = None, operand1: Any = None, reverse1: bool = False,
                  engine: Any = engine.unknown, name: Any = None) -> None:
    """`(data op0 operand0) op1 operand1`; each operand a float32 scalar or a `(P, 1)` float32
    tile broadcast along the free dim; op0 and op1 of the same class."""
    w = "nisa.tensor_scalar"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, s, w, "dst", "data")
    o0 = ck.operator(op0, w, "op0", alu=True)
    x0 = ck.scalar_or_vector(operand0, s, w, "operand0") if not o0.unary else None
    if (op1 is None) != (operand1 is None) and not (op1 is not None and op1.unary):
        raise NkiError(w, "op1 and operand1 are set together or not at all", "operands")
    o1 = ck.operator(op1, w, "op1", alu=True) if op1 is not None else None
    if o1 is not None and (o0.kind == "bitvec") != (o1.kind == "bitvec"):
        raise NkiError(w, f"op0={o0!r} and op1={o1!r} mix bitvec and arithmetic operators",
                       "operands", "both operators must be of the same class")
    if engine == ck.engine.gpsimd:
        ck.no_psum([(d, "dst"), (s, "data")], w, "GpSimd cannot access PSUM")
    x = s.f32().reshape(s.shape)
    out = _apply(o0, x, x0, reverse0)
    if o1 is not None:
        x1 = ck.scalar_or_vector(operand1, s, w, "operand1") if not o1.unary else None
        out = _apply(o1, out, x1, reverse1)
    d.write(np.asarray(out).reshape(d.shape))


def tensor_reduce(dst: NkiTensor, op: Any, data: NkiTensor, axis: Any, negate: bool = False,
                  keepdims: bool = False, name: Any = None) -> None:
    """Reduces trailing free axes on VectorE; the partition axis (0) is never reduced."""
    w = "nisa.tensor_reduce"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    o = ck.operator(op, w, "op", alu=True, reduce=True)
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    axes = sorted({int(a) % s.ndim for a in (axis if isinstance(axis, (tuple, list)) else [axis])})
    if 0 in axes:
        raise NkiError(w, "axis 0 is the partition axis, which tensor_reduce cannot reduce",
                       "free-axis reductions", "transpose first (nisa.nc_transpose), or matmul "
                       "with a ones vector")
    if axes != list(range(axes[0], s.ndim)):
        raise NkiError(w, f"axis={tuple(axes)} of a {s.ndim}-D tile; the reduced axes must be the "
                       "trailing free axes", "free-axis reductions", f"e.g. axis={s.ndim - 1}")
    kept = int(np.prod(s.shape[1:axes[0]]))
    if d.shape[0] != s.shape[0] or d.free_size != kept:
        raise NkiError(w, f"`dst` {list(d.shape)} does not hold the reduction of {list(s.shape)} "
                       f"over axis={tuple(axes)} ({s.shape[0]} partitions x {kept})", "tensor shapes")
    if o.kind == "bitvec":  # bit patterns, no float cast (nki.api.shared.rst: bitvec operators)
        if s.dtype.kind == "float" or d.dtype.kind == "float":
            raise NkiError(w, f"bitvec reduction {o!r} needs integer tiles", "dtypes")
        if negate:
            raise NkiError(w, "negate applies to arithmetic reductions only", "operands")
        bits = o.fn.reduce(s.raw().astype(np.int64), axis=tuple(axes))
        d.write(np.asarray(bits).reshape(d.shape))
        return
    x = s.f32()
    with np.errstate(all="ignore"):
        if o is nl.subtract:
            first = x[(slice(None),) * axes[0] + (slice(0, 1),)] if len(axes) == 1 else None
            if first is None:
                raise NkiError(w, "subtract reduces one axis", "operands")
            out = first.squeeze(axes[0]) - x[(slice(None),) * axes[0] + (slice(1, None),)].sum(axes[0])
        else:
            reducer = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
                       "minimum": np.minimum, "logical_and": np.logical_and,
                       "logical_or": np.logical_or, "logical_xor": np.logical_xor}.get(o.name)
            if o.name == "average":
                out = x.mean(axis=tuple(axes), dtype=np.float32)
            elif reducer is None:
                raise NkiError(w, f"reduction op {o!r} is not modelled", "not modelled")
            else:
                out = reducer.reduce(x, axis=tuple(axes)).astype(np.float32)
    if negate:
        out = -out
    d.write(np.asarray(out).reshape(d.shape))


def _range_warning(o: nl.Op, x: np.ndarray, w: str) -> None:
    if o.valid is None:
        return
    lo, hi = o.valid
    mag = np.abs(x) if o.symmetric else x
    finite = mag[np.isfinite(mag)]
    if finite.size and (finite.min() < lo or finite.max() > hi):
        rng = f"±[{lo:g}, {hi:g}]" if o.symmetric else f"[{lo:g}, {hi:g}]"
        warnings.warn(ActivationRangeWarning(
            f"{w}: op={o!r} got inputs in [{float(x[np.isfinite(x)].min()):g}, "
            f"{float(x[np.isfinite(x)].max()):g}], outside its valid range {rng}; ScalarE "
            "returns garbage there [rule: activation range]"
            + (f"\n  at {kernel_line()}" if kernel_line() else "")), stacklevel=3)


def activation(dst: NkiTensor, op: Any, data: NkiTensor, bias: Any = None, scale: Any = 1.0,
               reduce_op: Any = None, reduce_res: Any = None, reduce_cmd: Any = reduce_cmd.idle,
               name: Any = None) -> None:
    """`op(data * scale + bias)` on ScalarE in float32. scale: scalar or (P, 1) fp32 vector;
    bias: (P, 1) vector, or (NeuronCore-v3+) a scalar."""
    w = "nisa.activation"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    o = ck.operator(op, w, "op", act=True)
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, s, w, "dst", "data")
    x = s.f32().reshape(s.shape) * ck.scalar_or_vector(scale, s, w, "scale")
    if bias is not None:
        if not isinstance(bias, NkiTensor) and current().target.gen < 3:
            raise NkiError(w, "a scalar `bias` needs NeuronCore-v3+; NeuronCore-v2 takes a (P, 1) "
                           "bias vector", "generation gates", "memset a (P, 1) tile and pass it")
        if isinstance(bias, NkiTensor):
            ck.placed(bias, w, "bias", ("sbuf", "psum"))
            if bias.shape[0] != s.shape[0] or bias.free_size != 1:
                raise NkiError(w, f"`bias` is {list(bias.shape)}; it must be ({s.shape[0]}, 1)",
                               "operands")
            b = bias.f32().reshape(s.shape[0], *([1] * (s.ndim - 1)))
        else:
            b = np.float32(bias)
        x = x + b
    x = x.astype(np.float32)
    _range_warning(o, x, w)
    out = o.fn(x)
    d.write(out.reshape(d.shape))
    accumulate.scalar_engine(w, out, s, reduce_op, reduce_res, reduce_cmd)


def reciprocal(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """`1 / data` on VectorE in float32."""
    w = "nisa.reciprocal"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, s, w, "dst", "data")
    with np.errstate(all="ignore"):
        d.write((np.float32(1.0) / s.f32()).reshape(d.shape))


def exponential(dst: NkiTensor, src: NkiTensor, max_value: Any = 0.0, reduce_res: Any = None,
                reduce_cmd: Any = reduce_cmd.idle, reduce_init: Any = 0.0, name: Any = None) -> None:
    """`exp(src - max_value)` on VectorE; NeuronCore-v4 only."""
    w = "nisa.exponential"
    ck.gen_at_least(4, w, "nisa.exponential")
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    ck.placed(s, w, "src", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, s, w, "dst", "src")
    m = ck.scalar_or_vector(max_value, s, w, "max_value")
    with np.errstate(all="ignore"):
        d.write(np.exp(s.f32().reshape(s.shape) - m).reshape(d.shape))
    if reduce_res is not None or reduce_cmd != ck.reduce_cmd.idle:  # sum(dst) into the registers
        accumulate.vector_engine(w, d.f32(), s, "add", reduce_res, reduce_cmd, reduce_init)


def tensor_partition_reduce(dst: NkiTensor, op: Any, data: NkiTensor, name: Any = None) -> None:
    """Reduces across partitions on GpSimd (which cannot access PSUM)."""
    w = "nisa.tensor_partition_reduce"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf",), "GpSimd cannot access PSUM")
    ck.placed(d, w, "dst", ("sbuf",), "GpSimd cannot access PSUM")
    o = ck.operator(op, w, "op", alu=True, reduce=True)
    if d.shape[0] != 1 or d.free_size != s.free_size:
        raise NkiError(w, f"`dst` {list(d.shape)} must be (1, {s.free_size})", "tensor shapes")
    # the documented operators: add, average, max (and min), bitwise_or, bitwise_and
    if o.name in ("bitwise_or", "bitwise_and"):
        if s.dtype.kind == "float":
            raise NkiError(w, f"bitvec reduction {o!r} needs integer tiles", "dtypes")
        res = o.fn.reduce(s.raw().reshape(s.shape[0], -1).astype(np.int64), axis=0)
    elif o.name == "average":
        res = s.f32().reshape(s.shape[0], -1).mean(axis=0, dtype=np.float32)
    else:
        reducer = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}.get(o.name)
        if reducer is None:
            raise NkiError(w, f"op={o!r} is not a partition-reduction operator", "operands",
                           "use nl.add, nl.average, nl.maximum, nl.bitwise_or or nl.bitwise_and")
        res = reducer.reduce(s.f32().reshape(s.shape[0], -1), axis=0)
    d.write(np.asarray(res).reshape(d.shape))


def _v4_only(instr: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> None:
        ck.gen_at_least(4, f"nisa.{instr}", f"nisa.{instr}")
        raise NkiError(f"nisa.{instr}", "is not modelled by kernel_dsl's NKI interpreter",
                       "not modelled", "run the kernel with AWS's nki.simulate")

    run.__name__ = instr
    return run


nc_matmul_mx = _v4_only("nc_matmul_mx")
activate2 = _v4_only("activate2")
