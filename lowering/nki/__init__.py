"""The NKI backend: AWS Trainium kernels (NKI >= 0.3, `import nki`), run on CPU through AWS's
`nki.simulate` when the real NKI is installed, else through kernel_dsl's own NKI interpreter
(lowering/nki/interp). `cpu_target` is the generation the CPU path models.

Files: layout.py (where tile dims go on chip), affine.py (values that need no tile), writer.py
(tiles and conversions), lower_*.py (one file per op family), render.py (the kernel), space.py
(block-size candidates), runner.py (CPU execution), neuron.py (the TorchNeuron `nki_op` adapter).
"""
from __future__ import annotations

from typing import Any, Callable

from kernel_dsl import tunables
from kernel_dsl.config import Config, ConfigSpace
from kernel_dsl.ir import KernelIR
from kernel_dsl.lowering import Generated
from kernel_dsl.lowering.phases import phased

from .neuron import make_neuron_op
from .render import render as _render
from .runner import compile_for_torch
from .space import config_space, default_config
from .targets import TARGETS


@phased  # kd.barrier(): one launch per grid loop, in order (lowering/phases.py)
class NkiBackend:
    name = "nki"
    cpu_target = "trn2"
    targets = tuple(TARGETS)

    def default_config(self, ir: KernelIR, target: str) -> Config:
        return tunables.extend_default(ir, default_config(ir, target))

    def config_space(self, ir: KernelIR, target: str) -> ConfigSpace:
        return tunables.extend_space(ir, config_space(ir, target))

    def render(self, ir: KernelIR, config: Config, target: str) -> Generated:
        return tunables.render(_render, ir, config, target)

    def compile(self, gen: Generated, ir: KernelIR) -> Callable[..., Any]:
        return compile_for_torch(gen, ir)


BACKEND = NkiBackend()

__all__ = ["BACKEND", "NkiBackend", "make_neuron_op"]
