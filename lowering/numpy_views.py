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

# __array_interface__ type strings; bfloat16 crosses as int16 bits, then is viewed as ml_dtypes'
_TYPESTR = {torch.float32: ("<f4", False), torch.float16: ("<f2", False),
            torch.bfloat16: ("<i2", True), torch.int32: ("<i4", False),
            torch.int16: ("<i2", False), torch.int8: ("|i1", False), torch.uint8: ("|u1", False),
            torch.bool: ("|b1", False)}
_BF16 = np.dtype(ml_dtypes.bfloat16)


class _View:
    """What NumPy reads the memory from; the array keeps it, and so the tensor, alive."""

    __slots__ = ("__array_interface__", "tensor")


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A writable NumPy array over `t`'s memory (bfloat16 as `ml_dtypes.bfloat16`). ~1.7 us for
    the contiguous tensors the runners pass (`t.numpy()`: ~1.1 us); others go through DLPack
    (~4 us), which leaves the flag alone too."""
    kind = _TYPESTR.get(t.dtype)
    if kind is None or not t.is_contiguous():
        bf16 = t.dtype == torch.bfloat16
        a = np.from_dlpack(t.view(torch.int16) if bf16 else t)
    else:
        v = _View()
        v.tensor = t
        v.__array_interface__ = {"data": (t.data_ptr(), False), "shape": tuple(t.shape),
                                 "typestr": kind[0], "version": 3}
        a = np.asarray(v)
        bf16 = kind[1]
    return a.view(_BF16) if bf16 else a
