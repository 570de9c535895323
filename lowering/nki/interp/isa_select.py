"""Search and selection instructions, from their SDK docstrings (`nki/api/nki/isa/__init__.py`):
`max8`, `nc_find_index8`, `nc_match_replace8`, `nc_stream_shuffle`, `range_select`,
`select_reduce` (VectorE, compare in float32) and `nonzero_with_count` (GpSimd, NeuronCore-v3+)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import accumulators as accumulate
from . import checks as ck
from . import dtypes as dt
from . import language as nl
from .errors import NkiError
from .state import current
from .tensor import NkiTensor

_MIN_F, _MAX_F = 8, 16384


def _rows(t: NkiTensor, w: str, role: str) -> np.ndarray:
    if not _MIN_F <= t.free_size <= _MAX_F:
        raise NkiError(w, f"`{role}` has {t.free_size} elements per partition; the instruction "
                       f"reads {_MIN_F} to {_MAX_F}", "tensor shapes")
    return t.f32().reshape(t.shape[0], -1)


def _eight(d: NkiTensor, p: int, w: str, role: str = "dst") -> None:
    if d.shape[0] != p or d.free_size != 8:
        raise NkiError(w, f"`{role}` is {list(d.shape)}; it must be ({p}, 8)", "tensor shapes")


def max8(dst: NkiTensor, src: NkiTensor, name: Any = None) -> None:
    """The 8 largest values of each partition, in descending order."""
    w = "nisa.max8"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    ck.placed(s, w, "src", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    x = _rows(s, w, "src")
    _eight(d, s.shape[0], w)
    d.write(-np.sort(-x, axis=1)[:, :8].reshape(d.shape))


def _sentinel(d: NkiTensor, w: str) -> int:
    if d.dtype not in (dt.uint16, dt.uint32):
        raise NkiError(w, f"`dst` is {d.dtype!r}; indices are uint16 or uint32", "dtypes")
    return 0xFFFF if d.dtype is dt.uint16 else 0xFFFFFFFF


def nc_find_index8(dst: NkiTensor, data: NkiTensor, vals: NkiTensor, name: Any = None) -> None:
    """Per partition, the index of the first occurrence of each of the 8 `vals` in `data`;
    repeated vals take successive occurrences in ascending order; a missing value gives the
    all-ones sentinel."""
    w = "nisa.nc_find_index8"
    d, x, v = (ck.tensor(t, w, r) for t, r in ((dst, "dst"), (data, "data"), (vals, "vals")))
    for t, r in ((d, "dst"), (x, "data"), (v, "vals")):
        ck.placed(t, w, r, ("sbuf", "psum"))
    rows = _rows(x, w, "data")
    p = x.shape[0]
    _eight(d, p, w)
    _eight(v, p, w, "vals")
    miss = _sentinel(d, w)
    want = v.f32().reshape(p, 8)
    out = np.full((p, 8), miss, dtype=np.int64)
    for r in range(p):
        used: set[int] = set()
        for i in range(8):
            hits = [j for j in np.flatnonzero(rows[r] == want[r, i]) if j not in used]
            if hits:
                out[r, i] = hits[0]
                used.add(int(hits[0]))
    d.arr[...] = out.astype(d.dtype.storage).reshape(d.shape)


def nc_match_replace8(dst: NkiTensor, data: NkiTensor, vals: NkiTensor, imm: float,
                      dst_idx: Any = None, name: Any = None) -> None:
    """`dst = data` with the first occurrence of each of the 8 `vals` replaced by `imm`; vals are
    processed from the last to the first, so repeated vals take successive occurrences from
    the highest slot down. A value with no (unmatched) occurrence is not documented, so it is
    an error here."""
    w = "nisa.nc_match_replace8"
    d, x, v = (ck.tensor(t, w, r) for t, r in ((dst, "dst"), (data, "data"), (vals, "vals")))
    for t, r in ((d, "dst"), (x, "data"), (v, "vals")):
        ck.placed(t, w, r, ("sbuf", "psum"))
    ck.same_layout(d, x, w, "dst", "data")
    rows = _rows(x, w, "data").copy()
    p = x.shape[0]
    _eight(v, p, w, "vals")
    want = v.f32().reshape(p, 8)
    idx = np.zeros((p, 8), dtype=np.int64)
    for r in range(p):
        used: set[int] = set()
        for i in range(7, -1, -1):
            hits = [j for j in np.flatnonzero(rows[r] == want[r, i]) if j not in used]
            if not hits:
                raise NkiError(w, f"partition {r}: value {want[r, i]} has no unmatched occurrence "
                               "in `data`; the SDK does not document this case", "not modelled")
            idx[r, i] = hits[0]
            used.add(int(hits[0]))
        rows[r, sorted(used)] = np.float32(imm)
    d.write(rows.reshape(d.shape))
    if dst_idx is not None:
        di = ck.tensor(dst_idx, w, "dst_idx")
        ck.placed(di, w, "dst_idx", ("sbuf", "psum"))
        _eight(di, p, w, "dst_idx")
        di.write(idx.reshape(di.shape))


def nonzero_with_count(dst: NkiTensor, src: NkiTensor, index_offset: int = 0,
                       padding_val: int = -1, name: Any = None) -> None:
    """On partitions 0, 16, ..., 112 only (each GpSimd core's first): the indices of the nonzero
    elements plus `index_offset`, then `padding_val`, then the count. Other partitions of dst
    are left unchanged."""
    w = "nisa.nonzero_with_count"
    ck.gen_at_least(3, w, "nisa.nonzero_with_count")
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    ck.placed(s, w, "src", ("sbuf",), "GpSimd cannot access PSUM")
    ck.placed(d, w, "dst", ("sbuf",), "GpSimd cannot access PSUM")
    if s.dtype not in (dt.float32, dt.int32) or d.dtype is not dt.int32:
        raise NkiError(w, f"`src` is {s.dtype!r} and `dst` {d.dtype!r}; src is float32 or int32, "
                       "dst int32", "dtypes")
    n = s.free_size
    if d.shape[0] != s.shape[0] or d.free_size != n + 1:
        raise NkiError(w, f"`dst` {list(d.shape)} must have {s.shape[0]} partitions and "
                       f"{n + 1} elements each (one more than src)", "tensor shapes")
    x = s.raw().reshape(s.shape[0], -1)
    out = d.raw().reshape(d.shape[0], -1).astype(np.int64)
    for r in range(s.shape[0]):
        if (s.part_start + r) % 16:
            continue  # not a GpSimd core's first partition: untouched
        nz = np.flatnonzero(x[r] != 0) + int(index_offset)
        out[r, :] = int(padding_val)
        out[r, :nz.size] = nz
        out[r, n] = nz.size
    d.arr[...] = out.astype(np.int32).reshape(d.shape)


def nc_stream_shuffle(dst: NkiTensor, src: NkiTensor, shuffle_mask: Any, name: Any = None) -> None:
    """Cross-partition moves within each quadrant of 32 partitions (VectorE): output partition
    i of a quadrant copies input partition shuffle_mask[i] of the same quadrant; 255 leaves it
    unchanged. The same mask applies to every quadrant; in place is allowed."""
    w = "nisa.nc_stream_shuffle"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    ck.placed(s, w, "src", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    if d.dtype is not s.dtype or d.free_size != s.free_size:
        raise NkiError(w, f"`dst` {list(d.shape)} {d.dtype!r} and `src` {list(s.shape)} "
                       f"{s.dtype!r} differ in dtype or elements per partition", "operands")
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        raise NkiError(w, f"shuffle_mask {mask} must list 32 partitions in 0..31 (or 255)",
                       "operands")
    active = -(-max(d.shape[0], s.shape[0]) // 32) * 32
    starts = (0,) if active > 64 else (0, 64) if active > 32 else (0, 32, 64, 96)
    for t, r in ((s, "src"), (d, "dst")):
        if t.part_start not in starts:
            raise NkiError(w, f"`{r}` starts at partition {t.part_start}; with {active} active "
                           f"partitions it must start at {' or '.join(map(str, starts))}",
                           "start partition")
    x = s.raw().reshape(s.shape[0], -1).copy()  # read everything first: in place is allowed
    rows = d.raw().reshape(d.shape[0], -1).copy()
    for q in range(active // 32):
        for i, m in enumerate(mask):
            o, j = q * 32 + i, q * 32 + m
            if m == 255 or o >= d.shape[0]:
                continue
            if j >= s.shape[0]:
                raise NkiError(w, f"output partition {o} copies input partition {j}, but `src` "
                               f"has {s.shape[0]}", "out-of-bounds access")
            rows[o] = x[j]
    d.arr[...] = rows.reshape(d.shape)
    if d.storage.mm_written is not None:
        d.mm_flags()[...] = False


FP32_MIN = float(np.finfo(np.float32).min)  # -3.4028235e38
_COMPARE = ("equal", "less", "less_equal", "greater", "greater_equal")


def _vector_reduce(w: str, vals: np.ndarray, s: NkiTensor, reduce_op: Any, reduce_res: Any,
                   cmd: Any) -> None:
    if getattr(reduce_op, "name", None) != "maximum":
        raise NkiError(w, f"reduce_op={reduce_op!r}; only nl.maximum is supported", "operands")
    if cmd == ck.reduce_cmd.idle:
        # "Even when reduce_cmd is set to idle, the accumulator state may still be modified"
        current().accumulator("vector")[s.part_start:s.part_start + s.shape[0]] = np.nan
        if reduce_res is not None:
            raise NkiError(w, "reduce_res with reduce_cmd=idle reads undefined accumulators",
                           "reduction accumulators", "pass reduce_cmd=nisa.reduce_cmd.reset_reduce")
        return
    accumulate.vector_engine(w, vals, s, "maximum", reduce_res, cmd)


def range_select(dst: NkiTensor, on_true_tile: NkiTensor, comp_op0: Any, comp_op1: Any,
                 bound0: NkiTensor, bound1: NkiTensor, reduce_cmd: Any = ck.reduce_cmd.reset_reduce,
                 reduce_res: Any = None, reduce_op: Any = None, range_start: int = 0,
                 on_false_value: Any = FP32_MIN, name: Any = None) -> None:
    """VectorE, NeuronCore-v3+: keeps on_true_tile[p, i] where comp_op0(range_start + i, bound0[p])
    and comp_op1(range_start + i, bound1[p]) both hold (compared in float32), else FP32_MIN;
    the row maximum goes to the accumulator (and reduce_res)."""
    w = "nisa.range_select"
    ck.gen_at_least(3, w, "nisa.range_select")
    d, t = ck.tensor(dst, w, "dst"), ck.tensor(on_true_tile, w, "on_true_tile")
    ck.placed(t, w, "on_true_tile", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, t, w, "dst", "on_true_tile")
    ops = [ck.operator(o, w, r, alu=True) for o, r in ((comp_op0, "comp_op0"), (comp_op1, "comp_op1"))]
    if any(o.name not in _COMPARE for o in ops):
        raise NkiError(w, f"comparison operators {ops} must be equal, less, less_equal, greater "
                       "or greater_equal", "operands")
    if np.float32(on_false_value) != np.float32(FP32_MIN):  # e.g. the literal -3.4028235e38
        raise NkiError(w, f"on_false_value {on_false_value!r} must be FP32_MIN (-3.4028235e+38), "
                       "a hardware constraint", "operands")
    if not t.dtype.is_float:
        raise NkiError(w, f"`on_true_tile` is {t.dtype!r}; it must be a float type", "dtypes")
    p = t.shape[0]
    bounds = [ck.scalar_or_vector(b, t, w, r) for b, r in ((bound0, "bound0"), (bound1, "bound1"))]
    idx = np.float32(range_start) + np.arange(t.free_size, dtype=np.float32)[None, :]
    b0, b1 = (np.asarray(b, dtype=np.float32).reshape(-1, 1) for b in bounds)
    keep = (ops[0].fn(idx, b0) != 0) & (ops[1].fn(idx, b1) != 0)
    out = np.where(keep, t.f32().reshape(p, -1), np.float32(FP32_MIN))
    d.write(out.reshape(d.shape))
    _vector_reduce(w, out, t, reduce_op if reduce_op is not None else nl.maximum, reduce_res,
                   reduce_cmd)


def select_reduce(dst: NkiTensor, predicate: NkiTensor, on_true: NkiTensor, on_false: Any,
                  reduce_res: Any = None, reduce_cmd: Any = ck.reduce_cmd.idle,
                  reduce_op: Any = None, reverse_pred: bool = False, name: Any = None) -> None:
    """VectorE: dst = where(predicate, on_true, on_false) (on_false a float32 scalar or (P, 1)
    tile), with an optional row-maximum into the accumulator (and reduce_res)."""
    w = "nisa.select_reduce"
    d, pr, t = (ck.tensor(x, w, r) for x, r in ((dst, "dst"), (predicate, "predicate"),
                                                (on_true, "on_true")))
    for x, r in ((d, "dst"), (pr, "predicate"), (t, "on_true")):
        ck.placed(x, w, r, ("sbuf", "psum"))
    if pr.buffer == "psum" and t.buffer == "psum":
        raise NkiError(w, "`on_true` and `predicate` are both in PSUM", "memory placement")
    ck.same_layout(d, t, w, "dst", "on_true")
    ck.same_layout(pr, t, w, "predicate", "on_true")
    if pr.dtype not in (dt.int8, dt.uint8, dt.int16, dt.uint16, dt.bool_):
        raise NkiError(w, f"`predicate` is {pr.dtype!r}; it must be int8/uint8/int16/uint16",
                       "dtypes")
    if t.dtype in (dt.tfloat32, dt.int32, dt.uint32):
        raise NkiError(w, f"`on_true` is {t.dtype!r}, which select_reduce does not take", "dtypes")
    p = t.shape[0]
    mask = pr.raw().reshape(p, -1) != 0
    if reverse_pred:
        mask = ~mask
    off = np.asarray(ck.scalar_or_vector(on_false, t, w, "on_false"), dtype=np.float32)
    out = np.where(mask, t.f32().reshape(p, -1), off.reshape(-1, 1) if off.ndim else off)
    d.write(out.reshape(d.shape))
    if reduce_res is not None or reduce_cmd != ck.reduce_cmd.idle:
        _vector_reduce(w, out, t, reduce_op if reduce_op is not None else nl.maximum, reduce_res,
                       reduce_cmd)
    elif reduce_cmd == ck.reduce_cmd.idle:
        current().accumulator("vector")[t.part_start:t.part_start + p] = np.nan


def nc_n_gather(dst: NkiTensor, data: NkiTensor, indices: NkiTensor, name: Any = None) -> None:
    """GpSimd, SBUF only: per partition, dst[p, j] = flat(data[p])[indices[p, j]] (uint32
    indices within the partition's elements; dst keeps data's dtype)."""
    w = "nisa.nc_n_gather"
    d, x, i = (ck.tensor(t, w, r) for t, r in ((dst, "dst"), (data, "data"), (indices, "indices")))
    for t, r in ((d, "dst"), (x, "data"), (i, "indices")):
        ck.placed(t, w, r, ("sbuf",), "GpSimd cannot access PSUM")
    if i.dtype is not dt.uint32 or d.dtype is not x.dtype:
        raise NkiError(w, f"`indices` is {i.dtype!r} (must be uint32) and `dst` {d.dtype!r} "
                       f"(must be data's {x.dtype!r})", "dtypes")
    p = x.shape[0]
    if i.shape[0] != p or d.shape[0] != p or d.free_size != i.free_size:
        raise NkiError(w, f"`dst` {list(d.shape)}, `data` {list(x.shape)} and `indices` "
                       f"{list(i.shape)} need equal partitions, and dst indices' free size",
                       "tensor shapes")
    idx = i.raw().reshape(p, -1).astype(np.int64)
    if idx.min() < 0 or idx.max() >= x.free_size:
        raise NkiError(w, f"indices reach {int(idx.max())}; a partition of `data` has "
                       f"{x.free_size} elements", "out-of-bounds access")
    d.arr[...] = np.take_along_axis(x.raw().reshape(p, -1), idx, axis=1).reshape(d.shape)
