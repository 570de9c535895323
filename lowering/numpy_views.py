"""Zero-copy NumPy views of CPU torch tensors that leave the tensor's storage resizable.

`Tensor.numpy()` marks the tensor's storage non-resizable for good (so that NumPy's view can never
dangle), even after the array is gone. A kernel call would then break every later
`storage.resize_()` of its inputs: FSDP2 frees its all-gathered parameters that way ("Trying to
resize storage that is not resizable"). These views do not touch the flag; the runners hold them
only for the duration of one call.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

# __array_interface__ type strings, and the ml_dtypes type to view the bits as (bfloat16 and the
# float8 formats cross as integers of their width: NumPy has no such types of its own)
_TYPESTR = {torch.float32: ("<f4", None), torch.float16: ("<f2", None),
            torch.bfloat16: ("<i2", np.dtype(ml_dtypes.bfloat16)), torch.int32: ("<i4", None),
            torch.int16: ("<i2", None), torch.int8: ("|i1", None), torch.uint8: ("|u1", None),
            torch.bool: ("|b1", None),
            torch.float8_e4m3fn: ("|u1", np.dtype(ml_dtypes.float8_e4m3fn)),
            torch.float8_e5m2: ("|u1", np.dtype(ml_dtypes.float8_e5m2))}
_BITS = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8,
         torch.float8_e5m2: torch.uint8}


class _View:
    """What NumPy reads the memory from; the array keeps it, and so the tensor, alive."""

    __slots__ = ("__array_interface__", "tensor")


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A writable NumPy array over `t`'s memory (bfloat16 and float8 as ml_dtypes' types).
    ~1.7 us for the contiguous tensors the runners pass (`t.numpy()`: ~1.1 us); others go
    through DLPack (~4 us), which leaves the flag alone too."""
    kind = _TYPESTR.get(t.dtype)
    if kind is None or not t.is_contiguous():
        bits = _BITS.get(t.dtype)
        a = np.from_dlpack(t.view(bits) if bits is not None else t)
        view = _TYPESTR[t.dtype][1] if bits is not None else None
    else:
        v = _View()
        v.tensor = t
        v.__array_interface__ = {"data": (t.data_ptr(), False), "shape": tuple(t.shape),
                                 "typestr": kind[0], "version": 3}
        a = np.asarray(v)
        view = kind[1]
    return a.view(view) if view is not None else a
