"""The Pallas backend: TPU kernels (Mosaic), run on CPU through Pallas interpret mode."""
from __future__ import annotations

from typing import Any, Callable

from kernel_dsl import tunables
from kernel_dsl.check import CheckEntry
from kernel_dsl.config import Config
from kernel_dsl.ir import KernelIR
from kernel_dsl.lowering import Generated
from kernel_dsl.lowering.phases import phased

from .render import render as _render
from .space import config_space, default_config
from .targets import TPU_TARGETS, resolve_target, tpu_target
from .vmem import estimate_vmem


@phased  # kd.barrier(): one launch per grid loop, in order (lowering/phases.py)
class PallasBackend:
    name = "pallas"
    cpu_target = "cpu"
    targets = TPU_TARGETS

    def default_config(self, ir: KernelIR, target: str) -> Config:
        return tunables.extend_default(ir, default_config(ir, target))

    def config_space(self, ir: KernelIR, target: str) -> dict[str, list[Any]]:
        return tunables.extend_space(ir, config_space(ir, target))

    def render(self, ir: KernelIR, config: Config, target: str) -> Generated:
        return tunables.render(_render, ir, config, target)

    def resolve_target(self, target: str) -> str:
        return resolve_target(target)

    def compile(self, gen: Generated, ir: KernelIR, faithful: bool = False) -> Callable[..., Any]:
        """`faithful`: Pallas' TPU interpreter (out-of-bounds reads raise, new memory is NaN,
        races are reported) instead of the fast plain-HLO interpreter."""
        from .runner import compile_for_torch, faithful_params  # JAX: only when a kernel runs

        if faithful:
            return compile_for_torch(gen, interpret=faithful_params())
        # kept on disk for the next process; autotuning candidates (a stand-in IR) are not
        inputs = getattr(ir, "inputs", None)
        return compile_for_torch(gen, specs=None if inputs is None else
                                 [(p.shape, p.dtype) for p in inputs])

    def check(self, ir: KernelIR, gens: list[Generated], timeout: float,
              measure_vmem: bool, deadline: float | None = None) -> list[CheckEntry]:
        from .check import Job, check  # JAX and subprocesses: only when checking

        specs = [(p.shape, p.dtype) for p in ir.inputs]
        return check([Job(g, specs, ir.loc) for g in gens], timeout, measure_vmem, deadline)

    def estimate_vmem(self, gen: Generated) -> int:
        return estimate_vmem(gen, tpu_target(gen.target))


BACKEND = PallasBackend()
