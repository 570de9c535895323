"""Per-partition indirect DMA: `hbm.ap(pattern, offset, vector_offset=idx, indirect_dim=d)`
as the source (gather) or destination (scatter) of `nisa.dma_copy`.

Facts (aws-neuron/aws-neuron-sdk @81ce03a `nki/api/nki/isa/__init__.py`, `dma_copy`: "Indirect
addressing"; `nki/api/nki/language/__init__.py`, `NkiTensor.ap` / `vector_select`; the same form
in aws-neuron/nki-library `experimental/moe/forward/bwmm_shard_on_H.py`):
- `vector_offset` is an SBUF tensor of shape (P, 1), one row index per partition; the tensor
  `.ap()` is called on must be in HBM; `vector_offset` and `scalar_offset` exclude each other;
  the result's partition count is `vector_offset.shape[0]` (the pattern's first pair, `[stride,
  P]`). Partition p moves the elements `base + idx[p] * stride(indirect_dim) + sum(i_k * s_k)`
  over the pattern's other pairs: the index replaces the first pair's walk (AWS gathers token
  rows with `pattern=[[H, 128], [1, H]]`, `vector_offset=idx`, `indirect_dim=0`);
- the gather or scatter is a software-DGE DMA; out-of-bound checking is on "automatically during
  execution": `oob_mode=oob_mode.error` (the default) raises a runtime error, `oob_mode.skip`
  "silently skips any operations involving out-of-bounds indices" (that partition's transfer
  does not happen: a gather leaves its destination row as it was, a scatter writes nothing).
An index is in bounds when `0 <= idx[p] < shape[indirect_dim]` of the tensor `.ap()` was called
on (the SDK: "values that exceed the dimensions of the target array"). The index is read when the
DMA runs. AWS's examples use int32 and uint32 indices; other dtypes are refused. An indirect view
is only a `dma_copy` operand here; every other use (`dma_transpose`'s indirect gather,
`dma_compute`'s read-modify-write, views of it) is "not modelled".
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes as dt
from .errors import NkiError

INDEX_DTYPES = ("int32", "uint32")


class IndirectTensor:
    """An HBM view addressed per partition by an SBUF index column (a `dma_copy` operand)."""

    def __init__(self, base: Any, flat: np.ndarray, start: int, pairs: list[tuple[int, int]],
                 index: Any, stride: int, bound: int, elem: dt.DType):
        self.base = base  # the HBM tensor `.ap()` was called on
        self.flat = flat  # its storage as elements of `elem`
        self.start = start
        self.pairs = pairs
        self.index = index
        self.stride = stride  # elements per index step (the stride of `indirect_dim`)
        self.bound = bound  # indices in [0, bound) are in bounds
        self._dtype = elem

    shape = property(lambda self: tuple(c for _, c in self.pairs))
    dtype = property(lambda self: self._dtype)
    buffer = property(lambda self: self.base.buffer)
    name = property(lambda self: self.base.name)
    size = property(lambda self: int(np.prod(self.shape)))
    ndim = property(lambda self: len(self.pairs))

    def __repr__(self) -> str:
        return f"IndirectTensor({self.name or '?'}, {list(self.shape)}, {self.dtype!r}, vector_offset)"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        raise NkiError(f".{attr}", "a vector_offset view is only a nisa.dma_copy operand here; "
                       "views and other uses of it are not modelled", "not modelled")

    def rows(self, where: str, skip: bool) -> tuple[np.ndarray, np.ndarray]:
        """(element offsets of shape (P, F), in-bounds mask of shape (P,)), reading the index."""
        ix = self.index
        vals = ix.arr.reshape(ix.shape[0], -1)[:, 0].astype(np.int64)
        ok = (vals >= 0) & (vals < self.bound)
        if not skip and not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise NkiError(where, f"partition {bad}'s index {int(vals[bad])} is outside [0, "
                           f"{self.bound}) of `{self.name}` (oob_mode.error, the default: a "
                           "runtime error)", "out-of-bounds access",
                           "pass oob_mode=nisa.oob_mode.skip to skip out-of-bound rows")
        free = np.zeros(1, dtype=np.int64)
        for s, c in self.pairs[1:]:
            free = (free[:, None] + s * np.arange(c, dtype=np.int64)[None, :]).reshape(-1)
        addr = self.start + np.where(ok, vals, 0)[:, None] * self.stride + free[None, :]
        if ((addr < 0) | (addr >= self.flat.size))[ok].any():
            raise NkiError(where, f"the pattern {[list(p) for p in self.pairs]} leaves the "
                           f"storage of `{self.name}` for an in-bounds index", "out-of-bounds access")
        return addr, ok


def make(base: Any, flat: np.ndarray, start: int, pairs: list[tuple[int, int]], index: Any,
         indirect_dim: int, elem: dt.DType, scalar_offset: Any) -> IndirectTensor:
    """`.ap(..., vector_offset=index)` on `base` (checks the SDK's placement and shape rules)."""
    w = ".ap"
    if scalar_offset is not None:
        raise NkiError(w, "vector_offset and scalar_offset are mutually exclusive", "operands")
    if base.on_chip:
        raise NkiError(w, f"vector_offset on `{base.name}` in {base.buffer}: the tensor being "
                       "indexed must be in HBM", "memory placement")
    if isinstance(index, IndirectTensor) or not hasattr(index, "arr"):
        raise NkiError(w, f"vector_offset must be an SBUF tensor, got {index!r}", "operands")
    if index.buffer != "sbuf":
        raise NkiError(w, f"vector_offset is in {index.buffer}; indices must be in SBUF",
                       "memory placement")
    if index.dtype.name not in INDEX_DTYPES:
        raise NkiError(w, f"vector_offset is {index.dtype!r}; AWS passes int32 or uint32 "
                       "indices", "dtypes")
    if index.ndim != 2 or index.shape[1] != 1:
        raise NkiError(w, f"vector_offset has shape {list(index.shape)}; it is (P, 1), one "
                       "index per partition", "tensor shapes")
    if pairs[0][1] != index.shape[0]:
        raise NkiError(w, f"the pattern's first pair {list(pairs[0])} walks {pairs[0][1]} "
                       f"partitions, vector_offset has {index.shape[0]}", "tensor shapes")
    if not -base.ndim <= int(indirect_dim) < base.ndim:
        raise NkiError(w, f"indirect_dim {indirect_dim} of a {base.ndim}-D tensor", "tensor views")
    d = int(indirect_dim) % base.ndim
    stride = base.arr.strides[d] // elem.itemsize
    return IndirectTensor(base, flat, start, pairs, index, stride, base.shape[d], elem)


def dma(dst: Any, src: Any, oob_mode: Any, dge_mode: Any, convert: Any) -> None:
    """`nisa.dma_copy` with an indirect side. `convert(values, from_dtype, to_dtype)` casts like
    a DMA (through float32 when the dtypes differ)."""
    w = "nisa.dma_copy"
    if isinstance(dst, IndirectTensor) and isinstance(src, IndirectTensor):
        raise NkiError(w, "both src and dst are vector_offset views", "not modelled")
    if getattr(dge_mode, "name", "unknown") in ("none", "hwdge"):
        raise NkiError(w, f"dge_mode={dge_mode.name}: a gather or scatter through a list of "
                       "indices is a software-DGE DMA", "operands",
                       "leave dge_mode unset or pass nisa.dge_mode.swdge")
    skip = getattr(oob_mode, "name", "error") == "skip"
    ind, other = (src, dst) if isinstance(src, IndirectTensor) else (dst, src)
    if other.buffer == "psum":
        raise NkiError(w, "DMA cannot read or write PSUM since NKI 0.3", "memory placement")
    if other.size != ind.size:
        raise NkiError(w, f"the vector_offset view {list(ind.shape)} has {ind.size} elements, "
                       f"the other side {list(other.shape)} has {other.size}", "tensor shapes")
    addr, ok = ind.rows(w, skip)
    p = addr.shape[0]
    if ind is src:  # gather: rows in bounds land in dst's elements, in row-major order
        cur = np.array(other.raw()).reshape(p, -1)
        got = convert(ind.flat[addr], ind.dtype, other.dtype)
        cur[ok] = got[ok]
        other.arr[...] = cur.reshape(other.shape)
    else:  # scatter: partition order (a later duplicate index overwrites an earlier one)
        vals = convert(np.array(other.raw()).reshape(p, -1), other.dtype, ind.dtype)
        for r in np.flatnonzero(ok):
            ind.flat[addr[r]] = vals[r]
