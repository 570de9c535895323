"""`NkiTensor`: storage in one memory (HBM, SBUF or PSUM) plus a strided view of it.

On-chip tensors keep the partition dim at dim 0 and stay at least 2-D: an integer index on dim 0
keeps it as size 1, and an integer index that would drop the last free dim keeps it as size 1
too. HBM tensors index like NumPy. Every index is bounds-checked: an access outside the storage is
an error, never a silent clamp (notes/nki.md §2 and §7).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import dtypes as dt
from .errors import NkiError
from .state import PMAX, PSUM_BANK_BYTES, PSUM_BANKS, Allocation, current
from .views import ViewMethods

HBM_BUFFERS = ("hbm", "private_hbm", "shared_hbm")
ON_CHIP = ("sbuf", "psum")
MAX_DIMS = 5


class DynSlice:
    """`nl.ds(start, size)`: a slice of `size` elements from `start`."""

    def __init__(self, start: int, size: int):
        self.start = int(start)
        self.size = int(size)

    def __repr__(self) -> str:
        return f"nl.ds({self.start}, {self.size})"


class Storage:
    """The memory behind a tensor. PSUM storage also records which elements a matmul has
    written, for `nc_matmul(accumulate=None/True)`."""

    def __init__(self, array: np.ndarray, dtype: dt.DType, buffer: str, name: str,
                 origin: str = "kernel"):
        self.array = array
        self.dtype = dtype
        self.buffer = buffer
        self.name = name
        self.origin = origin  # "kernel" (allocated in the kernel) or "argument"
        self.mm_written = np.zeros(array.shape, dtype=bool) if buffer == "psum" else None
        self.alloc: Allocation | None = None  # on-chip: its live span, for the budgets


def _fill_value(dtype: dt.DType) -> Any:
    """The simulator's sentinels for fresh memory: NaN for floats, 4 for integers."""
    return np.nan if dtype.is_float else 4


def allocate(shape: Any, dtype: Any, buffer: str, name: str = "", address: Any = None) -> NkiTensor:
    """A new tensor filled with sentinels; on-chip ones are counted against the budgets.

    With a manual `address=(partition, free_byte_offset)` the tensor still gets storage of its
    own, as in AWS's simulator (which models no aliasing): the address is checked against the
    memory's bounds (and PSUM's 2 KiB banks) and the tensor is left out of the live-bytes budget,
    because a manual allocator reuses addresses on purpose."""
    if not isinstance(dtype, dt.DType):
        raise NkiError("nl.ndarray", f"dtype {dtype!r} is not an NKI dtype", "dtypes",
                       "pass nl.float32, nl.bfloat16, nl.int32, ...")
    if dtype.kind == "packed":
        raise dt.not_modelled(dtype)
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise NkiError("nl.ndarray", f"shape {shape} needs positive sizes", "tensor shapes")
    if buffer in ON_CHIP:
        if len(shape) < 2:
            raise NkiError("nl.ndarray", f"{buffer} tensor of shape {shape} is 1-D", "tensor shapes",
                           "on-chip tensors have a partition dim and at least one free dim: "
                           "(P, 1)")
        if len(shape) > MAX_DIMS:
            raise NkiError("nl.ndarray", f"{buffer} tensor has {len(shape)} dims", "tensor shapes",
                           f"on-chip views have at most {MAX_DIMS} dims")
        if shape[0] > PMAX:
            raise NkiError("nl.ndarray", f"{buffer} tensor of shape {shape} has {shape[0]} "
                           f"partitions; the hardware has {PMAX}", "partition limit",
                           "tile the partition dim in blocks of at most 128")
    elif buffer not in HBM_BUFFERS:
        raise NkiError("nl.ndarray", f"unknown buffer {buffer!r}", "memory placement",
                       "use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm")
    array = np.full(shape, _fill_value(dtype), dtype=dtype.storage)
    st = Storage(array, dtype, buffer, name)
    row_bytes = math.prod(shape[1:]) * dtype.itemsize
    if buffer in ON_CHIP and address is not None:
        _check_address(address, shape, row_bytes, buffer)
    elif buffer in ON_CHIP:
        st.alloc = current().allocate(buffer, name, shape, row_bytes)
    return NkiTensor(st, array, 0)


def _check_address(address: Any, shape: tuple[int, ...], row_bytes: int, buffer: str) -> None:
    w = "nl.ndarray"
    try:
        part, off = (int(a) for a in address)
    except (TypeError, ValueError):
        raise NkiError(w, f"address {address!r} is not (partition, free_byte_offset)",
                       "program model") from None
    limit = current().target.sbuf_bytes if buffer == "sbuf" else PSUM_BANKS * PSUM_BANK_BYTES
    if part < 0 or part + shape[0] > PMAX or off < 0 or off + row_bytes > limit:
        raise NkiError(w, f"{buffer} address {address} for {list(shape)} leaves the memory "
                       f"({PMAX} partitions x {limit} bytes)", "memory budget")
    if buffer == "psum" and off % PSUM_BANK_BYTES:
        raise NkiError(w, f"PSUM address offset {off} is not on a 2 KiB bank boundary",
                       "memory placement")


def shared_output(shape: Any, dtype: Any, name: str = "") -> NkiTensor:
    """An `nl.shared_hbm` tensor. The programs of an LNC2 launch share their outputs: the k-th
    shared allocation of program 1 is program 0's k-th."""
    ctx = current()
    if ctx.shared_next < len(ctx.shared):
        t = ctx.shared[ctx.shared_next]
        if t.shape != tuple(int(s) for s in shape) or t.dtype is not dtype:
            raise NkiError("nl.ndarray", f"program {ctx.program_id} allocates shared output "
                           f"#{ctx.shared_next} as {tuple(shape)} {dtype!r}, program 0 as "
                           f"{t.shape} {t.dtype!r}", "program model",
                           "every program of a launch allocates the same outputs")
    else:
        t = allocate(shape, dtype, "shared_hbm", name)
        ctx.shared.append(t)
    ctx.shared_next += 1
    return t


def wrap_argument(array: np.ndarray, buffer: str, name: str) -> NkiTensor:
    """A kernel argument: an HBM tensor over the caller's array (updated in place)."""
    dtype = dt.from_numpy(array.dtype)
    if array.dtype == np.bool_:
        array = array.view(np.uint8)
    return NkiTensor(Storage(array, dtype, buffer, name, origin="argument"), array, 0)


def _index_entry(e: Any, n: int, dim: int, where: str) -> int | slice:
    """One normalized index entry: an in-range int or a non-empty in-range slice."""
    if isinstance(e, (bool, np.bool_)):
        raise NkiError(where, f"boolean index {e!r} on dim {dim}", "tensor views")
    if isinstance(e, (int, np.integer)):
        i = int(e)
        if not -n <= i < n:
            raise NkiError(where, f"index {i} is out of bounds for dim {dim} of size {n}",
                           "out-of-bounds access")
        return i % n
    if isinstance(e, DynSlice):
        e = slice(e.start, e.start + e.size)
    if isinstance(e, slice):
        step = 1 if e.step is None else int(e.step)
        if step < 1:
            raise NkiError(where, f"slice step {step} on dim {dim}", "tensor views",
                           "use positive steps")
        start = 0 if e.start is None else int(e.start)
        stop = n if e.stop is None else int(e.stop)
        start = start + n if start < 0 else start
        stop = stop + n if stop < 0 else stop
        if not (0 <= start <= n and 0 <= stop <= n):
            raise NkiError(where, f"slice {start}:{stop} is out of bounds for dim {dim} of size {n}",
                           "out-of-bounds access", "clamp edge tiles with min(), e.g. "
                           "x[i0:i0 + min(128, n - i0)]")
        if stop <= start:
            raise NkiError(where, f"empty slice {start}:{stop} on dim {dim}", "tensor views")
        return slice(start, stop, step)
    raise NkiError(where, f"unsupported index {e!r} on dim {dim}", "tensor views",
                   "index with ints, slices, nl.ds(start, size) or ...")


class NkiTensor(ViewMethods):
    """A view of a `Storage`. `part_start` is the first partition of an on-chip view."""

    def __init__(self, storage: Storage, view: np.ndarray, part_start: int,
                 dtype: dt.DType | None = None):
        self.storage = storage
        self.arr = view  # the NumPy view of storage.array (or of its bytes, reinterpreted)
        self.part_start = part_start
        self._dtype = dtype  # set when the view reinterprets its storage (.view / .ap(dtype=))

    def _derive(self, view: np.ndarray, part: int | None = None,
                dtype: dt.DType | None = None) -> NkiTensor:
        """Another view of the same storage (keeping a reinterpreted dtype)."""
        return NkiTensor(self.storage, view, self.part_start if part is None else part,
                         dtype or self._dtype)

    # -- properties --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.arr.shape)

    @property
    def dtype(self) -> dt.DType:
        return self._dtype or self.storage.dtype

    @property
    def buffer(self) -> str:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return self.arr.ndim

    @property
    def size(self) -> int:
        return int(self.arr.size)

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def free_size(self) -> int:
        """Elements per partition (on-chip views)."""
        return math.prod(self.shape[1:])

    def __repr__(self) -> str:
        return f"NkiTensor({self.name or '?'}, {list(self.shape)}, {self.dtype!r}, {self.buffer})"

    # -- views -------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> NkiTensor:
        where = f"{self.name or 'tensor'}[...]"
        keys = list(key) if isinstance(key, tuple) else [key]
        if sum(k is Ellipsis for k in keys) > 1:
            raise NkiError(where, "more than one `...`", "tensor views")
        if Ellipsis in keys:
            at = keys.index(Ellipsis)
            fill = self.ndim - (len(keys) - 1)
            keys[at:at + 1] = [slice(None)] * max(fill, 0)
        if len(keys) > self.ndim:
            raise NkiError(where, f"{len(keys)} indices for a {self.ndim}-D tensor", "tensor views")
        keys += [slice(None)] * (self.ndim - len(keys))
        entries = [_index_entry(k, n, d, where) for d, (k, n) in enumerate(zip(keys, self.shape))]
        part = self.part_start
        if self.on_chip:
            first = entries[0]
            if isinstance(first, int):
                entries[0] = slice(first, first + 1, 1)
            elif first.step != 1:
                raise NkiError(where, "strided access on the partition dim", "tensor views",
                               "partitions are contiguous; slice dim 0 with step 1")
            part += entries[0].start
            if all(isinstance(e, int) for e in entries[1:]):
                last = entries[-1]
                entries[-1] = slice(last, last + 1, 1)  # on-chip views stay at least 2-D
        elif all(isinstance(e, int) for e in entries):
            last = entries[-1]
            entries[-1] = slice(last, last + 1, 1)  # HBM views stay at least 1-D
        return self._derive(self.arr[tuple(entries)], part)

    def permute(self, dims: Any) -> NkiTensor:
        """Reordered dims; on-chip the partition dim stays first."""
        dims = tuple(int(d) for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise NkiError("permute", f"{dims} is not a permutation of {self.ndim} dims", "tensor views")
        if self.on_chip and dims[0] != 0:
            raise NkiError("permute", f"{dims} moves the partition dim of an on-chip tensor",
                           "tensor views", "keep dim 0 first: permute((0, ...))")
        return self._derive(self.arr.transpose(dims))

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        """A size-1 dim repeated `size` times (stride 0); never the partition dim on-chip."""
        if self.on_chip and dim == 0:
            raise NkiError("broadcast", "cannot broadcast the partition dim of an on-chip tensor",
                           "tensor views", "broadcast across partitions costs a TensorE matmul "
                           "with a ones vector")
        if self.shape[dim] != 1:
            raise NkiError("broadcast", f"dim {dim} has size {self.shape[dim]}, not 1", "tensor views")
        shape = list(self.shape)
        shape[dim] = int(size)
        return self._derive(np.broadcast_to(self.arr, shape))

    def reshape(self, shape: Any) -> NkiTensor:
        """A view with another shape over contiguous elements (the partition dim kept on-chip)."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != self.size:
            raise NkiError("reshape", f"{list(self.shape)} has {self.size} elements, {list(shape)} "
                           f"has {math.prod(shape)}", "tensor views")
        if self.on_chip and (not shape or shape[0] != self.shape[0]):
            raise NkiError("reshape", "an on-chip reshape must keep the partition dim",
                           "tensor views")
        if self.on_chip and not 2 <= len(shape) <= MAX_DIMS:
            raise NkiError("reshape", f"an on-chip view of {len(shape)} dims", "tensor shapes",
                           f"on-chip views have 2 to {MAX_DIMS} dims")
        inner = self.arr[0] if self.on_chip else self.arr
        if not inner.flags.c_contiguous:
            raise NkiError("reshape", "the view is not contiguous", "tensor views")
        return self._derive(self.arr.reshape(shape))

    # -- data (the interpreter's own accessors) ----------------------------------------------
    def f32(self) -> np.ndarray:
        """Values as engines read them: converted to float32."""
        return self.arr.astype(np.float32)

    def raw(self) -> np.ndarray:
        return self.arr

    def write(self, values: np.ndarray, *, matmul: bool = False) -> None:
        """Stores engine results, rounding to the storage dtype. A non-matmul write to PSUM ends
        any accumulation group there."""
        self.arr[...] = np.asarray(dt.to_storage(values, self.dtype)).reshape(self.arr.shape)
        if self.storage.mm_written is not None:
            self.mm_flags()[...] = matmul

    def mm_flags(self) -> np.ndarray:
        """The matmul-written flags of this PSUM view (same geometry as `view`)."""
        st = self.storage
        assert st.mm_written is not None
        offset = self.arr.__array_interface__["data"][0] - st.array.__array_interface__["data"][0]
        item = st.array.itemsize
        flat = st.mm_written.reshape(-1)
        return np.lib.stride_tricks.as_strided(
            flat[offset // item:], shape=self.arr.shape,
            strides=[s // item * flat.itemsize for s in self.arr.strides])

    def free_byte_span(self) -> tuple[int, int]:
        """[first, last+1) bytes this view touches within one partition row of its storage."""
        st = self.storage.array
        row = math.prod(st.shape[1:]) * st.itemsize
        offset = self.arr.__array_interface__["data"][0] - st.__array_interface__["data"][0]
        lo = offset - self.part_start * row
        hi = lo + sum((n - 1) * s for n, s in zip(self.arr.shape[1:], self.arr.strides[1:]))
        return lo, hi + st.itemsize
