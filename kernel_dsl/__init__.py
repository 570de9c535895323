"""kernel_dsl: write a tile kernel once in Python, run it on TPU, Trainium and GPU as a torch op.

    import kernel_dsl as kd

    @kd.tpu_kernel
    def add(x, y):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] + y[t]
        return out
"""
from __future__ import annotations

from .atomics import atomic_add, atomic_max, atomic_min
from .buckets import set_shape_buckets, shape_buckets
from .check import CheckEntry, CheckReport
from .config import Config, ConfigSpace
from .device_arange import arange
from .device_load import load, store
from .device_random import rand, randint
from .errors import (
                     ArgumentError,
                     BackendError,
                     ConfigError,
                     ControlFlowError,
                     DTypeError,
                     KernelError,
                     KernelSyntaxError,
                     LoopScopeError,
                     ShapeError,
                     UnsupportedOpError,
)
from .ir import KernelIR
from .ir_printer import print_ir
from .jagged import jagged_tile
from .kernel_object import Kernel, backend, interpret_mode, kernel, tpu_kernel
from .language import BlockSize, block_size, dot, full, grid, register_block_size, specialize, tile, zeros
from .version import __version__

__all__ = [
    "atomic_add", "atomic_max", "atomic_min",
    "ArgumentError", "BackendError", "BlockSize", "CheckEntry", "CheckReport", "Config",
    "ConfigError", "ConfigSpace", "ControlFlowError", "DTypeError", "Kernel", "KernelError",
    "KernelIR", "KernelSyntaxError", "LoopScopeError", "ShapeError", "UnsupportedOpError",
    "arange", "backend", "block_size", "dot", "full", "grid", "interpret_mode", "kernel", "load",
    "print_ir", "rand", "randint", "register_block_size", "set_shape_buckets", "shape_buckets",
    "jagged_tile", "specialize", "store", "tile", "tpu_kernel", "zeros",
    "__version__",
]
