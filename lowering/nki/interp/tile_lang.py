"""The function-style `nki.language` layer (SDK `nki/api/nki/language/__init__.py`, marked
experimental there): functions that take tiles and return new tiles, as the SDK tutorials use them.

- `nl.load` / `nl.store`: HBM -> a new SBUF tile, SBUF -> HBM (DMA semantics: casts go
  through fp32).
- Creation: `zeros`, `ones`, `full`, `zeros_like`, `empty_like`, `shared_constant`,
  `shared_identity_matrix`.
- Element-wise: every operator token is callable (`nl.add(x, y)`, `nl.exp(x)`, ...; see
  `elementwise`), plus `where`, `negative`, `broadcast_to`, `expand_dims`, `transpose`,
  `matmul`.
- Reductions over trailing free axes: `sum`, `max`, `min`, `mean`, `var`, `prod`, `all`,
  and `softmax`.

Results are new SBUF tiles (PSUM for `matmul` / `transpose`, which run on TensorE), unless said
otherwise. Engines read float32 and round at the destination, as the ISA instructions do.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes as dt
from . import language as _lang
from .errors import NkiError
from .state import PMAX, current
from .tensor import HBM_BUFFERS, ON_CHIP, NkiTensor, allocate, shared_output

_NUM = (int, float, bool, np.integer, np.floating, np.bool_)


def _tile(x: Any, where: str, role: str = "x") -> NkiTensor:
    if not isinstance(x, NkiTensor):
        raise NkiError(where, f"`{role}` must be a tile, got {type(x).__name__}", "operands")
    if not x.on_chip:
        raise NkiError(where, f"`{role}` is in {x.buffer.upper()}; nl compute functions read "
                       "SBUF or PSUM tiles", "memory placement", "nl.load it into SBUF first")
    if x.storage.alloc is not None:
        current().touch(x.storage.alloc)
    return x


def _check_dtype(dtype: Any, where: str) -> dt.DType:
    if not isinstance(dtype, dt.DType):
        raise NkiError(where, f"dtype {dtype!r} is not an NKI dtype", "dtypes")
    return dtype


def _promote(dtypes: list[dt.DType]) -> dt.DType:
    """The result dtype of mixed tile operands. The SDK does not spell this rule out; this follows
    NumPy's spirit: a float beats an int, a wider type beats a narrower one, and bfloat16 with
    float16 gives float32."""
    uniq = list(dict.fromkeys(dtypes))
    if len(uniq) == 1:
        return uniq[0]
    floats = [d for d in uniq if d.is_float]
    pool = floats or uniq
    widest = max(d.itemsize for d in pool)
    top = [d for d in pool if d.itemsize == widest]
    return top[0] if len(top) == 1 else dt.float32


def _new_tile(shape: tuple[int, ...], dtype: dt.DType, buffer: str = "sbuf") -> NkiTensor:
    return allocate(tuple(int(s) for s in shape), dtype, buffer)


# -- memory -----------------------------------------------------------------------------------
def load(src: NkiTensor, dtype: Any = None) -> NkiTensor:
    """A new SBUF tile holding `src` (an HBM tensor), cast to `dtype` if given."""
    w = "nl.load"
    if not isinstance(src, NkiTensor) or src.buffer not in HBM_BUFFERS:
        raise NkiError(w, f"`src` must be an HBM tensor, got {src!r}", "memory placement",
                       "nl.load reads HBM; copy on-chip tiles with nisa.tensor_copy")
    out_dt = src.dtype if dtype is None else _check_dtype(dtype, w)
    shape = src.shape if src.ndim >= 2 else (src.shape[0], 1)
    t = _new_tile(shape, out_dt)
    _dma(t, src)
    return t


def store(dst: NkiTensor, value: NkiTensor) -> None:
    """Writes an SBUF tile into an HBM tensor (element counts must match)."""
    w = "nl.store"
    if not isinstance(dst, NkiTensor) or dst.buffer not in HBM_BUFFERS:
        raise NkiError(w, f"`dst` must be an HBM tensor, got {dst!r}", "memory placement")
    v = _tile(value, w, "value")
    if v.buffer != "sbuf":
        raise NkiError(w, "`value` is in PSUM; DMA cannot read PSUM", "memory placement",
                       "copy it to SBUF with nl.copy or nisa.tensor_copy first")
    _dma(dst, v)


def load_transpose2d(src: NkiTensor, dtype: Any = None) -> NkiTensor:
    """A new SBUF tile holding the 2-D HBM tensor `src` transposed (its columns on partitions)."""
    w = "nl.load_transpose2d"
    if not isinstance(src, NkiTensor) or src.buffer not in HBM_BUFFERS or src.ndim != 2:
        raise NkiError(w, f"`src` must be a 2-D HBM tensor, got {src!r}", "memory placement")
    t = _new_tile((src.shape[1], src.shape[0]), src.dtype if dtype is None else _check_dtype(dtype, w))
    if t.dtype is src.dtype:
        t.arr[...] = src.raw().T
    else:
        t.write(src.f32().T)
    return t


def _dma(dst: NkiTensor, src: NkiTensor) -> None:
    if dst.size != src.size:
        raise NkiError("nl.load/store", f"{list(src.shape)} and {list(dst.shape)} differ in "
                       "element count", "tensor shapes")
    if dst.dtype is src.dtype:
        dst.arr[...] = src.raw().reshape(-1).reshape(dst.shape)
    else:
        dst.write(src.f32().reshape(-1).reshape(dst.shape))


# -- creation ---------------------------------------------------------------------------------
def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = "sbuf", name: str = "") -> NkiTensor:
    d = _check_dtype(dtype, "nl.full")
    t = shared_output(shape, d, name) if buffer == "shared_hbm" else allocate(shape, d, buffer, name)
    t.write(np.full(t.shape, fill_value, dtype=np.float64))
    return t


def zeros(shape: Any, dtype: Any, buffer: Any = "sbuf", name: str = "") -> NkiTensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: Any = "sbuf", name: str = "") -> NkiTensor:
    return full(shape, 1, dtype, buffer, name)


def zeros_like(x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def empty_like(x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return _lang.ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def shared_constant(constant: Any) -> NkiTensor:
    """A shared-HBM tensor holding `constant` (a NumPy array or the path of a .npy file)."""
    arr = np.load(constant) if isinstance(constant, str) else np.asarray(constant)
    d = dt.from_numpy(arr.dtype)
    t = allocate(arr.shape, d, "shared_hbm", "shared_constant")
    t.arr[...] = arr.astype(d.storage)
    return t


def shared_identity_matrix(n: int, dtype: Any = dt.uint8, dst: Any = None) -> NkiTensor:
    """An (n, n) identity matrix in SBUF (written into `dst` when given)."""
    d = _check_dtype(dtype, "nl.shared_identity_matrix")
    t = dst if dst is not None else _new_tile((n, n), d)
    if t.shape != (n, n):
        raise NkiError("nl.shared_identity_matrix", f"`dst` is {list(t.shape)}, not ({n}, {n})",
                       "tensor shapes")
    t.write(np.eye(n, dtype=np.float32))
    return t


# -- element-wise -----------------------------------------------------------------------------
def _values(x: Any, native_int: bool) -> Any:
    if isinstance(x, NkiTensor):
        return x.raw().astype(np.int64) if native_int else x.f32()
    return np.int64(x) if native_int else np.float32(x)


def elementwise(op: Any, args: tuple[Any, ...], dtype: Any = None) -> NkiTensor:
    """`nl.<op>(x[, y], dtype=None)`: a new SBUF tile. Operands are tiles (SBUF/PSUM) or
    numbers; tiles share their partition count and broadcast along free dims of size 1.
    Arithmetic runs in float32 (nki.api.shared.rst, "Supported Math Operators"), except that
    all-int32/uint32 operands use exact integer arithmetic, as nisa.tensor_tensor's default
    GpSimd dispatch does; bitvec operators work on integer bit patterns."""
    w = f"nl.{op.name}"
    want = 1 if op.unary else 2
    if len(args) != want:
        raise NkiError(w, f"takes {want} operand(s), got {len(args)}", "operands")
    tiles = [_tile(a, w, f"arg{i}") for i, a in enumerate(args) if isinstance(a, NkiTensor)]
    if not tiles:
        raise NkiError(w, "needs at least one tile operand", "operands")
    for a in args:
        if not isinstance(a, (NkiTensor, *_NUM)):
            raise NkiError(w, f"operand {a!r} is neither a tile nor a number", "operands")
    parts = {t.shape[0] for t in tiles}
    if len(parts) > 1:
        raise NkiError(w, f"operands span {sorted(parts)} partitions", "tensor shapes",
                       "broadcast across partitions explicitly with nl.broadcast_to")
    try:
        shape = np.broadcast_shapes(*(t.shape for t in tiles))
    except ValueError:
        raise NkiError(w, f"shapes {[list(t.shape) for t in tiles]} do not broadcast",
                       "tensor shapes") from None
    out_dt = _promote([t.dtype for t in tiles]) if dtype is None else _check_dtype(dtype, w)
    ints32 = (dt.int32, dt.uint32)
    if op.kind == "bitvec":
        if any(t.dtype.kind == "float" for t in tiles) or out_dt.kind == "float":
            raise NkiError(w, f"bitvec operator {op!r} needs integer tiles", "dtypes")
        native = True
    else:
        native = all(t.dtype in ints32 for t in tiles) and out_dt in ints32 and all(
            isinstance(a, NkiTensor) or float(a).is_integer() for a in args)
    vals = [_values(a, native) for a in args]
    with np.errstate(all="ignore"):
        res = op.fn(*vals)
    out = _new_tile(tuple(shape), out_dt)
    out.write(np.broadcast_to(np.asarray(res), shape))
    return out


def negative(x: NkiTensor, dtype: Any = None) -> NkiTensor:
    return elementwise(_lang.multiply, (x, -1.0), dtype or x.dtype)


def where(condition: NkiTensor, x: Any, y: Any, dtype: Any = None) -> NkiTensor:
    """`x` where `condition` is non-zero, else `y` (tiles or numbers)."""
    w = "nl.where"
    c = _tile(condition, w, "condition")
    tiles = [c] + [_tile(v, w) for v in (x, y) if isinstance(v, NkiTensor)]
    shape = np.broadcast_shapes(*(t.shape for t in tiles))
    vals = [t.f32() if isinstance(t, NkiTensor) else np.float32(t) for t in (x, y)]
    ref = [t for t in (x, y) if isinstance(t, NkiTensor)]
    out_dt = (_promote([t.dtype for t in ref]) if ref else dt.float32) if dtype is None else dtype
    out = _new_tile(tuple(shape), _check_dtype(out_dt, w))
    out.write(np.broadcast_to(np.where(c.f32() != 0, vals[0], vals[1]), shape))
    return out


def broadcast_to(x: NkiTensor, shape: Any, dtype: Any = None) -> NkiTensor:
    """A new tile of `shape` (same rank as `x`; each dim equal or broadcast from 1). Unlike a
    `.broadcast()` view, this may broadcast the partition dim (it copies)."""
    w = "nl.broadcast_to"
    t = _tile(x, w)
    shape = tuple(int(s) for s in shape)
    if len(shape) != t.ndim or any(a != b and a != 1 for a, b in zip(t.shape, shape)):
        raise NkiError(w, f"cannot broadcast {list(t.shape)} to {list(shape)}", "tensor shapes",
                       "same rank; each dim equal or 1")
    if shape == t.shape and (dtype is None or dtype is t.dtype):
        return t
    out = _new_tile(shape, t.dtype if dtype is None else _check_dtype(dtype, w))
    out.write(np.broadcast_to(t.f32(), shape))
    return out


def expand_dims(x: NkiTensor, axis: int) -> NkiTensor:
    return x.expand_dim(axis)


def transpose(x: NkiTensor, dtype: Any = None) -> NkiTensor:
    """Swaps the partition dim and the free dim of a 2-D tile (on TensorE, into PSUM)."""
    w = "nl.transpose"
    t = _tile(x, w)
    if t.ndim != 2 or t.shape[0] > PMAX or t.shape[1] > PMAX:
        raise NkiError(w, f"needs a 2-D tile of at most 128x128, got {list(t.shape)}",
                       "transpose limits")
    out = _new_tile((t.shape[1], t.shape[0]), t.dtype if dtype is None else _check_dtype(dtype, w),
                    "psum")
    out.arr[...] = t.raw().T if out.dtype is t.dtype else dt.to_storage(t.f32().T, out.dtype)
    return out


def matmul(x: NkiTensor, y: NkiTensor, transpose_x: bool = False) -> NkiTensor:
    """`x @ y` (or `x.T @ y`) on TensorE: a float32 PSUM tile. x's contraction dim <= 128,
    its other dim <= 128, y's free dim <= 512."""
    w = "nl.matmul"
    a, b = _tile(x, w, "x"), _tile(y, w, "y")
    for t, r in ((a, "x"), (b, "y")):
        if t.buffer != "sbuf" or t.ndim != 2:
            raise NkiError(w, f"`{r}` must be a 2-D SBUF tile, got {t!r}", "memory placement")
    av = a.f32() if transpose_x else a.f32().T
    k, m = av.shape
    if b.shape[0] != k:
        raise NkiError(w, f"contraction sizes differ: {k} and {b.shape[0]}", "tensor shapes")
    if k > PMAX or m > 128 or b.shape[1] > 512:
        raise NkiError(w, f"({m}x{k}) @ ({k}x{b.shape[1]}) exceeds K, M <= 128, N <= 512",
                       "matmul limits")
    out = _new_tile((m, b.shape[1]), dt.float32, "psum")
    out.write(av.T @ b.f32())
    return out


# -- reductions -------------------------------------------------------------------------------
def _axes(t: NkiTensor, axis: Any, w: str) -> list[int]:
    axes = sorted({int(a) % t.ndim for a in (axis if isinstance(axis, (tuple, list)) else [axis])})
    if 0 in axes:
        raise NkiError(w, "axis 0 is the partition dim", "free-axis reductions",
                       "reduce free dims only; transpose first")
    if axes != list(range(axes[0], t.ndim)):
        raise NkiError(w, f"axis={axes}: the reduced axes must be the last contiguous dims",
                       "free-axis reductions")
    return axes


def _reduce(name: str, fn: Any, x: NkiTensor, axis: Any, dtype: Any, keepdims: bool) -> NkiTensor:
    w = f"nl.{name}"
    t = _tile(x, w)
    axes = _axes(t, axis, w)
    with np.errstate(all="ignore"):
        res = np.asarray(fn(t.f32(), axis=tuple(axes), keepdims=True), dtype=np.float32)
    shape = res.shape if keepdims else tuple(n for i, n in enumerate(res.shape) if i not in axes)
    if len(shape) < 2:
        shape = (shape[0], 1)  # on-chip tiles stay 2-D
    out = _new_tile(shape, t.dtype if dtype is None else _check_dtype(dtype, w))
    out.write(res.reshape(shape))
    return out


def sum_(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("sum", np.sum, x, axis, dtype, keepdims)


def max_(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("max", np.max, x, axis, dtype, keepdims)


def min_(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("min", np.min, x, axis, dtype, keepdims)


def mean(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("mean", np.mean, x, axis, dtype, keepdims)


def var(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("var", np.var, x, axis, dtype, keepdims)  # population variance, as NumPy


def prod(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _reduce("prod", np.prod, x, axis, dtype, keepdims)


def all_(x: NkiTensor, axis: Any, dtype: Any = None) -> NkiTensor:
    return _reduce("all", lambda v, **k: np.all(v != 0, **k), x, axis, dtype, False)


def softmax(x: NkiTensor, axis: Any = -1, dtype: Any = None) -> NkiTensor:
    w = "nl.softmax"
    t = _tile(x, w)
    axes = tuple(_axes(t, axis, w))
    v = t.f32()
    with np.errstate(all="ignore"):
        e = np.exp(v - v.max(axis=axes, keepdims=True))
        res = e / e.sum(axis=axes, keepdims=True)
    out = _new_tile(t.shape, t.dtype if dtype is None else _check_dtype(dtype, w))
    out.write(res)
    return out


# -- helpers of the language module -----------------------------------------------------------
def is_hbm(buffer: Any) -> bool:
    return buffer in HBM_BUFFERS


def is_on_chip(buffer: Any) -> bool:
    return buffer in ON_CHIP


def is_psum(buffer: Any) -> bool:
    return buffer == "psum"


def is_sbuf(buffer: Any) -> bool:
    return buffer == "sbuf"


class no_reorder:  # noqa: N801 - NKI's name
    """`with nl.no_reorder():` pins instruction order; this interpreter runs in program order
    anyway."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def device_print(print_prefix: str, tensor: NkiTensor) -> None:
    """Prints immediately, as the SDK says CPU simulation does."""
    print(print_prefix, np.asarray(tensor.raw()))


def program_ndim() -> int:
    """Dimensions of the launch grid: 1 for `kernel[g](...)`, 0 for a plain call (SDK: "0 if no
    grid")."""
    return current().grid_ndim


def _not_modelled(name: str, why: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        raise NkiError(f"nl.{name}", f"{why} is not modelled by this interpreter", "not modelled")

    run.__name__ = name
    return run


rand = _not_modelled("rand", "hardware random number generation")
random_seed = _not_modelled("random_seed", "hardware random number generation")
dropout = _not_modelled("dropout", "hardware random number generation")
gather_flattened = _not_modelled("gather_flattened", "a flattened gather")
rms_norm = _not_modelled("rms_norm", "the fused rms_norm wrapper")

EXPORTS = {
    "load": load, "store": store, "full": full, "zeros": zeros, "ones": ones,
    "zeros_like": zeros_like, "empty_like": empty_like, "shared_constant": shared_constant,
    "shared_identity_matrix": shared_identity_matrix, "negative": negative, "where": where,
    "broadcast_to": broadcast_to, "expand_dims": expand_dims, "transpose": transpose,
    "matmul": matmul, "sum": sum_, "max": max_, "min": min_, "mean": mean, "var": var,
    "prod": prod, "all": all_, "softmax": softmax, "is_hbm": is_hbm, "is_on_chip": is_on_chip,
    "is_psum": is_psum, "is_sbuf": is_sbuf, "no_reorder": no_reorder,
    "device_print": device_print, "program_ndim": program_ndim, "rand": rand, "random_seed": random_seed,
    "dropout": dropout, "load_transpose2d": load_transpose2d, "gather_flattened": gather_flattened,
    "rms_norm": rms_norm,
}


_lang._elementwise = elementwise  # `nl.add(x, y)`: language.py's Op.__call__
