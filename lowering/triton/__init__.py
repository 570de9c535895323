"""The Triton backend: NVIDIA GPU kernels, run on CPU through Triton's interpreter.

Importing this package does not import Triton: every kernel's custom op is made at decoration,
and Triton (with its interpreter switch) is only loaded when a kernel first runs.
"""
from __future__ import annotations

from typing import Any, Callable

from kernel_dsl import tunables
from kernel_dsl.config import Config, ConfigSpace
from kernel_dsl.ir import KernelIR
from kernel_dsl.lowering import Generated
from kernel_dsl.lowering.phases import phased

from .render import render as _render
from .space import config_space, default_config


@phased  # kd.barrier(): one launch per grid loop, in order (lowering/phases.py)
class TritonBackend:
    name = "triton"
    cpu_target = "cpu"
    targets = ("cuda",)  # compile targets (`kernel.check`); render also takes cpu_target

    def default_config(self, ir: KernelIR, target: str) -> Config:
        return tunables.extend_default(ir, default_config(ir, target))

    def config_space(self, ir: KernelIR, target: str) -> ConfigSpace:
        return tunables.extend_space(ir, config_space(ir, target))

    def render(self, ir: KernelIR, config: Config, target: str) -> Generated:
        return tunables.render(_render, ir, config, target)

    def compile(self, gen: Generated, ir: KernelIR) -> Callable[..., Any]:
        from .runner import compile_for_torch  # imports triton: only when a kernel runs

        return compile_for_torch(gen, interpret=True)

    def verify(self, gen: Generated, arch: int = 90) -> dict[str, Any]:
        """Compiles `gen` for a real NVIDIA GPU, sm_<arch> (no GPU needed); see check.py."""
        from .check import compile_for_gpu  # imports triton: only when checking

        return compile_for_gpu(gen, arch)

    def check(self, ir: KernelIR, gens: list[Generated], timeout: float,
              measure_vmem: bool) -> list[Any]:
        """`kernel.check(..., backend="triton")`: compile-only for sm_90, one entry per target."""
        from .check import check_entries

        return check_entries(gens)


BACKEND = TritonBackend()
