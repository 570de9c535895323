"""The `NkiTensor` view methods beyond indexing (SDK `nki/api/nki/language/__init__.py`,
class `NkiTensor`): `.ap()`, `view(dtype)`, `slice`, `select`, `expand_dim`, `squeeze_dim`,
`reshape_dim`, `flatten_dims`, and the layout queries `strides`, `offset`, `get_pattern`,
`is_contiguous`. Every view shares its storage; none copies data.

A mixin of `NkiTensor` (tensor.py), which provides `storage`, `arr` (the NumPy view),
`part_start`, `dtype`, `on_chip` and `_derive`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import dtypes as dt
from . import indirect
from .errors import NkiError

MAX_FREE_DIMS = 4


def _dim(d: int, ndim: int, where: str) -> int:
    if not -ndim <= int(d) < ndim:
        raise NkiError(where, f"dim {d} of a {ndim}-D tensor", "tensor views")
    return int(d) % ndim


class ViewMethods:
    storage: Any
    arr: np.ndarray
    part_start: int

    # -- layout queries ----------------------------------------------------------------------
    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements of this view's dtype."""
        item = self.arr.itemsize
        return tuple(int(s) // item for s in self.arr.strides)

    @property
    def offset(self) -> int:
        """The view's first element, counted in elements from the start of its storage."""
        base = self.arr.__array_interface__["data"][0]
        start = self.storage.array.__array_interface__["data"][0]
        return (base - start) // self.arr.itemsize

    def get_pattern(self) -> list[list[int]]:
        return [[s, n] for s, n in zip(self.strides, self.arr.shape)]

    def is_contiguous(self) -> bool:
        """Row-major contiguity over the free dims (on-chip) or all dims (HBM)."""
        dims = list(zip(self.arr.shape, self.strides))[1 if self.on_chip else 0:]  # type: ignore[attr-defined]
        expect = 1
        for n, s in reversed(dims):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    # -- simple views ------------------------------------------------------------------------
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> Any:
        d = _dim(dim, self.arr.ndim, ".slice")
        if not (0 <= start < end <= self.arr.shape[d]) or step < 1:
            raise NkiError(".slice", f"slice({dim}, {start}, {end}, {step}) of a dim of size "
                           f"{self.arr.shape[d]}", "out-of-bounds access")
        key = [slice(None)] * self.arr.ndim
        key[d] = slice(start, end, step)
        return self[tuple(key)]  # type: ignore[index]

    def select(self, dim: int, index: Any) -> Any:
        """A static selection (the dim is removed). Dynamic (tensor) indices are not modelled."""
        if not isinstance(index, (int, np.integer)):
            raise NkiError(".select", "a dynamic (tensor) index is not modelled by this "
                           "interpreter", "not modelled", "select with a Python int")
        d = _dim(dim, self.arr.ndim, ".select")
        if self.on_chip and d == 0:  # type: ignore[attr-defined]
            raise NkiError(".select", "cannot remove the partition dim of an on-chip tensor",
                           "tensor views")
        if not 0 <= index < self.arr.shape[d]:
            raise NkiError(".select", f"index {index} of a dim of size {self.arr.shape[d]}",
                           "out-of-bounds access")
        key = [slice(None)] * self.arr.ndim
        key[d] = int(index)
        view = self.arr[tuple(key)]
        return self._check_rank(view, ".select")

    def expand_dim(self, dim: int) -> Any:
        d = int(dim) % (self.arr.ndim + 1)
        if self.on_chip and d == 0:  # type: ignore[attr-defined]
            raise NkiError(".expand_dim", "cannot insert before the partition dim", "tensor views")
        return self._check_rank(np.expand_dims(self.arr, d), ".expand_dim")

    def squeeze_dim(self, dim: int) -> Any:
        d = _dim(dim, self.arr.ndim, ".squeeze_dim")
        if self.arr.shape[d] != 1:
            raise NkiError(".squeeze_dim", f"dim {dim} has size {self.arr.shape[d]}, not 1",
                           "tensor views")
        if self.on_chip and d == 0:  # type: ignore[attr-defined]
            raise NkiError(".squeeze_dim", "cannot remove the partition dim", "tensor views")
        return self._check_rank(np.squeeze(self.arr, d), ".squeeze_dim")

    def reshape_dim(self, dim: int, shape: Any) -> Any:
        d = _dim(dim, self.arr.ndim, ".reshape_dim")
        sizes = [int(s) for s in shape]
        n = self.arr.shape[d]
        if sizes.count(-1) == 1:
            known = math.prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = n // known if known and n % known == 0 else -1
        if math.prod(sizes) != n or any(s < 1 for s in sizes):
            raise NkiError(".reshape_dim", f"{list(shape)} does not split a dim of size {n}",
                           "tensor views")
        if self.on_chip and d == 0 and len(sizes) != 1:  # type: ignore[attr-defined]
            raise NkiError(".reshape_dim", "cannot split the partition dim", "tensor views")
        stride = self.arr.strides[d]
        inner = [stride * math.prod(sizes[i + 1:]) for i in range(len(sizes))]
        shp = list(self.arr.shape[:d]) + sizes + list(self.arr.shape[d + 1:])
        strides = list(self.arr.strides[:d]) + inner + list(self.arr.strides[d + 1:])
        view = np.lib.stride_tricks.as_strided(self.arr, shape=shp, strides=strides)
        return self._check_rank(view, ".reshape_dim")

    def flatten_dims(self, start_dim: int, end_dim: int) -> Any:
        s, e = _dim(start_dim, self.arr.ndim, ".flatten_dims"), _dim(end_dim, self.arr.ndim,
                                                                      ".flatten_dims")
        if self.on_chip and s == 0:  # type: ignore[attr-defined]
            raise NkiError(".flatten_dims", "cannot merge the partition dim", "tensor views")
        shp, st = self.arr.shape, self.arr.strides
        for i in range(s, e):
            if shp[i] != 1 and shp[i + 1] != 1 and st[i] != st[i + 1] * shp[i + 1]:
                raise NkiError(".flatten_dims", f"dims {s}..{e} are not contiguous in memory",
                               "tensor views")
        merged = math.prod(shp[s:e + 1])
        inner = next((st[i] for i in range(e, s - 1, -1) if shp[i] != 1), st[e])  # size-1 dims
        view = np.lib.stride_tricks.as_strided(                              # carry no stride
            self.arr, shape=[*shp[:s], merged, *shp[e + 1:]], strides=[*st[:s], inner, *st[e + 1:]])
        return self._check_rank(view, ".flatten_dims")

    def view(self, dtype: Any) -> Any:
        """`.view(dtype)`: the same bytes read as another dtype; the last dim scales by the
        ratio of the sizes."""
        if not isinstance(dtype, dt.DType):
            raise NkiError(".view", f"{dtype!r} is not an NKI dtype", "dtypes")
        if dtype.kind == "packed":
            raise dt.not_modelled(dtype)
        if self.storage.buffer == "psum" and dtype.itemsize != self.dtype.itemsize:  # type: ignore[attr-defined]
            raise NkiError(".view", "a PSUM view with another element size is not modelled "
                           "(matmul accumulation is tracked per element)", "not modelled")
        if self.arr.strides[-1] != self.arr.itemsize and self.arr.shape[-1] != 1:
            raise NkiError(".view", "the last dim is not contiguous", "tensor views")
        try:
            view = self.arr.view(dtype.storage)
        except ValueError as e:
            raise NkiError(".view", f"cannot reinterpret {list(self.arr.shape)} "
                           f"{self.dtype!r} as {dtype!r}: {e}", "tensor views") from None  # type: ignore[attr-defined]
        return self._derive(view, dtype=dtype)  # type: ignore[attr-defined]

    reinterpret_cast = view

    def _check_rank(self, view: np.ndarray, where: str) -> Any:
        if self.on_chip and not 2 <= view.ndim <= 5:  # type: ignore[attr-defined]
            raise NkiError(where, f"an on-chip view of {view.ndim} dims", "tensor shapes",
                           "on-chip views have 2 to 5 dims")
        if view.ndim < 1:
            raise NkiError(where, "a 0-D view", "tensor shapes")
        return self._derive(view)  # type: ignore[attr-defined]

    # -- access patterns ---------------------------------------------------------------------
    def ap(self, pattern: Any, offset: int | None = None, scalar_offset: Any = None,
           vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> Any:
        """An explicit access pattern `[[stride, count], ...]` over the *storage*, starting at
        this view's first element plus `offset` (SDK: "offset=0 keeps the base").

        On-chip, the first pair addresses partitions and its stride must be the storage's
        elements per partition. `dtype` reinterprets the storage (strides count elements of
        that dtype). `scalar_offset` is a one-element integer tensor or a register, read now
        (this interpreter runs eagerly): its value times this view's stride on `indirect_dim` is added to the
        start. `vector_offset` (an SBUF (P, 1) index column) makes an HBM view addressed per
        partition, a `dma_copy` operand (indirect.py).
        """
        w = ".ap"
        elem = self.dtype if dtype is None else dtype  # type: ignore[attr-defined]
        if not isinstance(elem, dt.DType):
            raise NkiError(w, f"dtype {elem!r} is not an NKI dtype", "dtypes")
        if elem.kind == "packed":
            raise dt.not_modelled(elem)
        if self.storage.buffer == "psum" and elem.itemsize != self.storage.dtype.itemsize:
            raise NkiError(w, "a PSUM pattern with another element size is not modelled "
                           "(matmul accumulation is tracked per element)", "not modelled")
        pairs = [(int(s), int(c)) for s, c in pattern]
        if not pairs or any(c < 1 for _, c in pairs):
            raise NkiError(w, f"pattern {pattern} needs counts >= 1", "tensor views")
        raw = self.storage.array.reshape(-1).view(np.uint8)
        if raw.size % elem.itemsize:
            raise NkiError(w, f"a storage of {raw.size} bytes is not a whole number of "
                           f"{elem!r} elements", "tensor views")
        flat = raw.view(elem.storage)
        base_bytes = self.offset * self.arr.itemsize
        if base_bytes % elem.itemsize:
            raise NkiError(w, f"the view starts at byte {base_bytes}, not a multiple of "
                           f"{elem!r}'s size", "tensor views")
        start = base_bytes // elem.itemsize + (0 if offset is None else int(offset))
        if vector_offset is not None:
            return indirect.make(self, flat, start, pairs, vector_offset, indirect_dim, elem,
                                 scalar_offset)
        if scalar_offset is not None:
            start += self._scalar_offset(scalar_offset, indirect_dim, elem, w)
        lo = start + sum(s * (c - 1) for s, c in pairs if s < 0)
        hi = start + sum(s * (c - 1) for s, c in pairs if s > 0)
        if lo < 0 or hi >= flat.size:
            raise NkiError(w, f"pattern {pattern} starting at element {start} reaches elements "
                           f"{lo}..{hi} of a storage of {flat.size}", "out-of-bounds access")
        part = 0
        if self.on_chip:  # type: ignore[attr-defined]
            row = flat.size // self.storage.array.shape[0]
            if pairs[0][0] != row:
                raise NkiError(w, f"the partition pair [{pairs[0][0]}, {pairs[0][1]}] must "
                               f"have stride {row} (elements per partition of the storage)",
                               "tensor views", "on-chip patterns start with [storage_free, n]")
            if len(pairs) - 1 > MAX_FREE_DIMS:
                raise NkiError(w, f"more than {MAX_FREE_DIMS} free dims", "tensor views")
            part, col = divmod(start, row)
            span_hi = col + sum(s * (c - 1) for s, c in pairs[1:] if s > 0)
            span_lo = col + sum(s * (c - 1) for s, c in pairs[1:] if s < 0)
            if span_lo < 0 or span_hi >= row or part + pairs[0][1] > self.storage.array.shape[0]:
                raise NkiError(w, f"pattern {pattern} starting at element {start} leaves the "
                               "storage's partitions or rows", "out-of-bounds access")
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(flat[start:], shape=[c for _, c in pairs],
                                               strides=[s * item for s, _ in pairs])
        return self._derive(view, part=part, dtype=None if elem is self.storage.dtype else elem)  # type: ignore[attr-defined]

    def _scalar_offset(self, t: Any, dim: int, elem: dt.DType, w: str) -> int:
        d = _dim(dim, self.arr.ndim, w)
        stride = self.arr.strides[d] // elem.itemsize
        if hasattr(t, "get") and not hasattr(t, "arr"):  # a VirtualRegister (fori_loop's `i`)
            return int(t.get(w)) * stride
        vals = getattr(t, "arr", None)
        if not isinstance(vals, np.ndarray) or vals.size != 1 or t.dtype.kind != "int":
            raise NkiError(w, f"scalar_offset must be a one-element integer tensor, got {t!r}",
                           "operands")
        return int(vals.reshape(-1)[0]) * stride
