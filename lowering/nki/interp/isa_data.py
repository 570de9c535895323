"""Data-movement and pattern instructions: `dma_copy`, `tensor_copy`, `memset`,
`tensor_copy_predicated`, `iota`, `affine_select` (signatures of NKI >= 0.3, destination first)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import checks as ck
from . import dtypes as dt
from . import indirect
from . import language as nl
from .checks import engine
from .errors import NkiError
from .language import Op
from .state import current
from .tensor import NkiTensor


def dma_copy(dst: NkiTensor, src: NkiTensor, priority: Any = None, oob_mode: Any = None,
             dge_mode: Any = None, engine: Any = None, name: Any = None) -> None:
    """HBM <-> SBUF (or SBUF -> SBUF). Element counts match; a dtype change goes through fp32.
    DMA cannot touch PSUM since NKI 0.3. A `.ap(vector_offset=)` side is a gather or scatter
    (indirect.py), checked against `oob_mode` (default: error)."""
    w = "nisa.dma_copy"
    if isinstance(dst, indirect.IndirectTensor) or isinstance(src, indirect.IndirectTensor):
        if not isinstance(dst, (NkiTensor, indirect.IndirectTensor)):
            ck.tensor(dst, w, "dst")
        if not isinstance(src, (NkiTensor, indirect.IndirectTensor)):
            ck.tensor(src, w, "src")
        indirect.dma(dst, src, oob_mode, dge_mode, _dma_convert)
        return
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    why = "DMA cannot read or write PSUM since NKI 0.3; evict PSUM with nisa.tensor_copy first"
    ck.placed(s, w, "src", ("hbm", "sbuf"), why, engine_access=False)
    ck.placed(d, w, "dst", ("hbm", "sbuf"), why, engine_access=False)
    if d.size != s.size:
        raise NkiError(w, f"`src` {list(s.shape)} has {s.size} elements, `dst` {list(d.shape)} has "
                       f"{d.size}", "tensor shapes", "slice both to the same number of elements")
    if d.dtype is s.dtype:
        d.arr[...] = s.raw().reshape(-1).reshape(d.shape)
    else:
        d.write(s.f32().reshape(-1).reshape(d.shape))


def _dma_convert(vals: np.ndarray, frm: dt.DType, to: dt.DType) -> np.ndarray:
    return vals if frm is to else np.asarray(dt.to_storage(vals.astype(np.float32), to))


def tensor_copy(dst: NkiTensor, src: NkiTensor, engine: Any = engine.unknown, name: Any = None,
                dtype: Any = None) -> None:
    """On-chip copy (the PSUM eviction): bit-exact for equal dtypes, else cast through fp32.
    `dtype` (the older destination-dtype argument, still used by AWS's nki-samples) must be
    dst's dtype: the destination decides the cast."""
    w = "nisa.tensor_copy"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    if dtype is not None and dtype is not d.dtype:
        raise NkiError(w, f"dtype={dtype!r} differs from dst's {d.dtype!r}", "dtypes",
                       "drop dtype=; the copy casts to dst's dtype")
    ck.placed(s, w, "src", ("sbuf", "psum"), "use nisa.dma_copy for HBM")
    ck.placed(d, w, "dst", ("sbuf", "psum"), "use nisa.dma_copy for HBM")
    ck.same_layout(d, s, w, "dst", "src")
    if engine == ck.engine.gpsimd:
        ck.no_psum([(d, "dst"), (s, "src")], w, "GpSimd cannot access PSUM")
    if engine == ck.engine.scalar and current().target.gen == 2:
        raise NkiError(w, "tensor_copy on the Scalar Engine is not supported on NeuronCore-v2",
                       "generation gates", "use nisa.activation(op=nl.copy)")
    if d.dtype is s.dtype:
        d.arr[...] = s.raw().reshape(d.shape)
        if d.storage.mm_written is not None:
            d.mm_flags()[...] = False
    else:
        d.write(s.f32().reshape(d.shape))


def memset(dst: NkiTensor, value: Any, engine: Any = engine.unknown, name: Any = None) -> None:
    """Fills an on-chip tile with a compile-time constant of the tile's dtype."""
    w = "nisa.memset"
    d = ck.tensor(dst, w, "dst")
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    if engine == ck.engine.gpsimd:
        ck.no_psum([(d, "dst")], w, "GpSimd cannot access PSUM")
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    is_num = is_int or isinstance(value, (float, np.floating, bool, np.bool_))
    if not is_num:
        raise NkiError(w, f"value {value!r} is not a number", "memset value")
    if d.dtype.kind == "int" and not is_int:
        raise NkiError(w, f"value {value!r} ({type(value).__name__}) does not match the {d.dtype!r} "
                       "destination", "memset value", "memset integer tiles with an int")
    if d.dtype.kind == "bool" and value not in (0, 1, True, False):
        raise NkiError(w, f"value {value!r} does not match the nl.bool_ destination", "memset value")
    d.write(np.full(d.shape, value, dtype=np.float64 if d.dtype.is_float else np.int64))


def tensor_copy_predicated(dst: NkiTensor, src: Any, predicate: NkiTensor, reverse_pred: bool = False,
                           name: Any = None) -> None:
    """`dst = src` where `predicate` (uint8/16/32) is non-zero; other elements keep their value."""
    w = "nisa.tensor_copy_predicated"
    d, p = ck.tensor(dst, w, "dst"), ck.tensor(predicate, w, "predicate")
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.placed(p, w, "predicate", ("sbuf", "psum"))
    ck.same_layout(d, p, w, "dst", "predicate")
    if p.dtype not in (dt.uint8, dt.uint16, dt.uint32, dt.bool_):
        raise NkiError(w, f"`predicate` is {p.dtype!r}; it must be uint8, uint16 or uint32", "dtypes")
    mask = p.raw().reshape(d.shape) != 0
    if reverse_pred:
        mask = ~mask
    if isinstance(src, NkiTensor):
        ck.placed(src, w, "src", ("sbuf", "psum"))
        ck.same_layout(d, src, w, "dst", "src")
        if src.buffer == "psum" and p.buffer == "psum":
            raise NkiError(w, "`src` and `predicate` are both in PSUM", "memory placement",
                           "at most one of them may be in PSUM")
        if src.dtype is not d.dtype:
            raise NkiError(w, f"`src` is {src.dtype!r} and `dst` {d.dtype!r}", "dtypes",
                           "src and dst must share a dtype")
        d.arr[mask] = src.raw().reshape(d.shape)[mask]
    else:
        vals = np.full(d.shape, src, dtype=np.float64)
        d.arr[mask] = dt.to_storage(vals, d.dtype)[mask]


def _pattern(pattern: Any, t: NkiTensor, where: str) -> np.ndarray:
    """The free-dim values Σ step·idx of a `[[step, num], ...]` pattern (≤ 4 dims)."""
    pairs = [(int(s), int(n)) for s, n in pattern]
    if not pairs or len(pairs) > 4:
        raise NkiError(where, f"pattern {pattern} needs 1 to 4 [step, num] pairs", "operands")
    total = int(np.prod([n for _, n in pairs]))
    if total != t.free_size:
        raise NkiError(where, f"pattern {pattern} has {total} elements; `dst` has {t.free_size} "
                       "per partition", "tensor shapes")
    acc = np.zeros([n for _, n in pairs], dtype=np.int64)
    for axis, (s, n) in enumerate(pairs):
        shape = [1] * len(pairs)
        shape[axis] = n
        acc = acc + s * np.arange(n, dtype=np.int64).reshape(shape)
    return acc.reshape(-1)


def _affine(pattern: Any, offset: int, channel_multiplier: int, t: NkiTensor, where: str) -> np.ndarray:
    free = _pattern(pattern, t, where)
    parts = np.arange(t.shape[0], dtype=np.int64)[:, None] * int(channel_multiplier)
    vals = int(offset) + parts + free[None, :]
    return vals.astype(np.int32).astype(np.int64)  # int32 arithmetic, as GpSimd computes


def iota(dst: NkiTensor, pattern: Any, offset: int = 0, channel_multiplier: int = 0,
         name: Any = None) -> None:
    """`dst[p, i] = offset + p * channel_multiplier + Σ step·idx` on GpSimd (SBUF only)."""
    w = "nisa.iota"
    d = ck.tensor(dst, w, "dst")
    ck.placed(d, w, "dst", ("sbuf",), "GpSimd cannot access PSUM")
    d.write(_affine(pattern, offset, channel_multiplier, d, w).reshape(d.shape))


def affine_select(dst: NkiTensor, pattern: Any, channel_multiplier: int, on_true_tile: NkiTensor,
                  on_false_value: Any, cmp_op: Any = nl.equal, offset: int = 0,
                  name: Any = None) -> None:
    """`dst = on_true_tile` where `cmp_op(affine(p, i), 0)` holds, else `on_false_value`
    (GpSimd: SBUF only). `cmp_op` defaults to nl.equal, as in the SDK's signature."""
    w = "nisa.affine_select"
    d, src = ck.tensor(dst, w, "dst"), ck.tensor(on_true_tile, w, "on_true_tile")
    ck.placed(d, w, "dst", ("sbuf",), "GpSimd cannot access PSUM")
    ck.placed(src, w, "on_true_tile", ("sbuf",), "GpSimd cannot access PSUM")
    ck.same_layout(d, src, w, "dst", "on_true_tile")
    op: Op = ck.operator(cmp_op, w, "cmp_op", alu=True)
    if not isinstance(on_false_value, (int, float, np.integer, np.floating)):
        raise NkiError(w, f"`on_false_value` must be a float32 scalar, got {on_false_value!r}",
                       "operands")
    vals = _affine(pattern, offset, channel_multiplier, d, w).astype(np.float32)
    keep = op.fn(vals, np.float32(0.0)) != 0
    out = np.where(keep, src.f32().reshape(keep.shape), np.float32(on_false_value))
    d.write(out.reshape(d.shape))
