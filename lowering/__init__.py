"""Backends: each renders the tile IR as source in its own language and runs it.

Every backend is a module-level object with the same small interface (`Backend`). The front end
knows only this interface and the IR; adding a backend touches nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kernel_dsl.config import Config
from kernel_dsl.errors import BackendError
from kernel_dsl.ir import KernelIR


@dataclass
class Generated:
    """Rendered source of one kernel for one config and target."""

    backend: str
    target: str
    config: Config
    source: str
    entry: str  # the function in `source` that runs the kernel
    meta: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """A code generator from the IR. Optional: `check` (compile for real targets),
    `estimate_vmem`, `resolve_target(target) -> target` (a generic device name such as
    "tpu" to the attached generation's), and `render_targets` (every target name `render`
    takes; default: `cpu_target`, `targets`, and "tpu" with `resolve_target`)."""

    name: str
    cpu_target: str  # the target whose kernels run on this machine's CPU

    def default_config(self, ir: KernelIR, target: str) -> Config: ...

    def config_space(self, ir: KernelIR, target: str) -> dict[str, list[Any]]: ...

    def render(self, ir: KernelIR, config: Config, target: str) -> Generated: ...

    def compile(self, gen: Generated, ir: KernelIR) -> Callable[..., tuple[Any, ...]]: ...


_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    _BACKENDS[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    """Removes a backend added with `register` (tests that plant a faulty one must not leak it)."""
    _BACKENDS.pop(name, None)


def get(name: str) -> Backend:
    if not isinstance(name, str) or name not in _BACKENDS:
        import difflib

        from kernel_dsl.tracing import user_loc  # the tracer imports the backends' IR users

        close = difflib.get_close_matches(name, list(_BACKENDS), n=1) if isinstance(name, str) else []
        raise BackendError(f"unknown backend {name!r}", user_loc(),
                           (f"did you mean {close[0]!r}? " if close else "")
                           + f"available backends: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def names() -> list[str]:
    return sorted(_BACKENDS)


def _register_builtin() -> None:
    # imported here, not at the top: each backend module imports this one for `Generated`
    from .nki import BACKEND as nki
    from .pallas import BACKEND as pallas
    from .triton import BACKEND as triton

    for backend in (pallas, nki, triton):
        register(backend)


_register_builtin()
