"""What every library kernel shares: the kernel class that knows the shipped TPU configs.

A library kernel is an ordinary DSL kernel (`kd.Kernel`) with one difference: when no config
is given, it looks up the winner of the offline autotuner for the TPU generation it renders for
(`kernels/configs/<target>.json`, see `tuned.py`) before falling back to the backend's default.
Order: explicit `config=` -> the user's own autotuning cache -> shipped config -> default.
On CPU (every interpreter) the default config is used: shipped configs are TPU configs.

The kernel object's TPU route renders for the pseudo-target "tpu"; here that is resolved to the
attached chip's generation (from JAX's `device_kind`), so the shipped config and the VMEM limit
of that generation apply.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from ..autotune.tuner import tuned_config
from ..config import Config
from ..ir import KernelIR
from ..kernel_object import Kernel
from ..lowering.pallas.targets import TARGETS, tpu_target
from . import tuned

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.lru_cache(maxsize=None)
def attached_tpu_target() -> str | None:
    """The kernel_dsl target name of this host's TPU (None without one)."""
    import jax  # only reached when rendering for a real TPU

    try:
        kind = jax.devices("tpu")[0].device_kind
    except RuntimeError:
        return None
    return next((t.name for t in TARGETS.values() if t.device_kind == kind), None)


def resolve_target(target: str | None) -> str | None:
    if target == "tpu":
        return attached_tpu_target() or target
    return target


class LibraryKernel(Kernel):
    """A DSL kernel of the library: shipped TPU configs, and the real TPU generation."""

    def _config_for(self, ir: KernelIR, backend_name: str, target: str,
                    config: Config | None) -> Config:
        if config is not None or self.config is not None or backend_name != "pallas":
            return super()._config_for(ir, backend_name, target, config)
        target = resolve_target(target) or target
        cached = tuned_config(self, ir, backend_name, target)
        if cached is not None:
            return cached
        tgt = tpu_target(target)
        if tgt is not None:
            shipped = tuned.lookup(self.name, ir, tgt)
            if shipped is not None:
                return shipped
        return super()._config_for(ir, backend_name, target, None)

    def generated(self, *args: Any, backend: str | None = None, config: Config | None = None,
                  target: str | None = None) -> Any:
        return super().generated(*args, backend=backend, config=config,
                                 target=resolve_target(target))


def library_kernel(fn: Callable[..., Any]) -> LibraryKernel:
    """Decorator for the library's DSL kernels (`@kd.tpu_kernel` with shipped configs)."""
    return LibraryKernel(fn)


def check_float(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; the kernel library takes float32, bfloat16 "
                        "or float16 (float64 has no TPU/Trainium units: compute in float32)")
