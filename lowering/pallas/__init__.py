"""The Pallas backend: TPU kernels (Mosaic), run on CPU through Pallas interpret mode."""
from __future__ import annotations

from typing import Any, Callable

from ...config import Config
from ...ir import KernelIR
from .. import Generated
from .render import render as _render
from .space import config_space, default_config


class PallasBackend:
    name = "pallas"
    cpu_target = "cpu"

    def default_config(self, ir: KernelIR, target: str) -> Config:
        return default_config(ir, target)

    def config_space(self, ir: KernelIR, target: str) -> dict[str, list[Any]]:
        return config_space(ir, target)

    def render(self, ir: KernelIR, config: Config, target: str) -> Generated:
        return _render(ir, config, target)

    def compile(self, gen: Generated, ir: KernelIR) -> Callable[..., Any]:
        from .runner import compile_for_torch  # imports jax: only when a kernel runs

        return compile_for_torch(gen, interpret=True)


BACKEND = PallasBackend()
