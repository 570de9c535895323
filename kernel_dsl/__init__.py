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
from .autotuner import BooleanFragment, EnumFragment, IntegerFragment, PowerOfTwoFragment
from .buckets import set_shape_buckets, shape_buckets
from .check import CheckEntry, CheckReport
from .config import Config, ConfigSpace
from .device_arange import arange
from .device_load import load, store
from .device_randn import randn
from .device_random import rand, randint
from .device_scans import associative_scan, cumprod, cumsum
from .device_shapes import join, split
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
from .grid_phases import barrier
from .ir import KernelIR
from .ir_printer import print_ir
from .jagged import jagged_tile
from .kernel_object import Kernel, backend, interpret_mode, kernel, tpu_kernel
from .language import BlockSize, block_size, dot, full, grid, register_block_size, specialize, tile, zeros
from .tunables import cdiv, next_power_of_2, register_tunable
from .version import __version__

__all__ = [
    "atomic_add", "atomic_max", "atomic_min", "barrier",
    "ArgumentError", "BackendError", "BlockSize", "BooleanFragment", "EnumFragment",
    "IntegerFragment", "PowerOfTwoFragment", "cdiv", "next_power_of_2", "register_tunable",
    "CheckEntry", "CheckReport", "Config",
    "ConfigError", "ConfigSpace", "ControlFlowError", "DTypeError", "Kernel", "KernelError",
    "KernelIR", "KernelSyntaxError", "LoopScopeError", "ShapeError", "UnsupportedOpError",
    "arange", "associative_scan", "backend", "block_size", "cumprod", "cumsum", "dot", "full",
    "grid", "interpret_mode", "jagged_tile", "join", "kernel", "load", "print_ir", "rand", "randint", "randn",
    "register_block_size", "set_shape_buckets", "shape_buckets", "specialize", "split", "store",
    "tile", "tpu_kernel", "zeros",
    "__version__",
]
