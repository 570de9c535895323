"""Loads generated Triton source as a module and runs it: on CPU tensors through Triton's
interpreter (`TRITON_INTERPRET=1`), on CUDA tensors as real GPU kernels.

The documented switch is the environment variable, read when `@triton.jit` runs. Setting it for
the whole process is not enough here: anything that imports Triton first (`torch.compile` does,
even with the eager backends) fixes Triton's own `@triton.jit` library (`tl.sum`, `tl.max`,
`tl.sigmoid`) as compiled-only functions the interpreter cannot call, and a process that
interprets everything can no longer compile for a GPU. So the interpreter is scoped, per kernel
and per launch (`interpreting()`):
- the generated module is executed with the knob set, so its kernel is an `InterpretedFunction`;
- during an interpreted launch, library functions that are compiled-only get interpreted twins;
- afterwards the `triton.language` attributes the interpreter patches are put back, so a later
  GPU compile in the same process sees the real language (the interpreter's own restore misses
  the patches its nested device-function calls make).
"""
from __future__ import annotations

import contextlib
import linecache
import os
import types
from typing import Any, Callable, Iterator

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # today's behaviour, without the warning
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from kernel_dsl.errors import BackendError  # noqa: E402

from .. import Generated  # noqa: E402

_counter = 0
_twins: dict[str, InterpretedFunction] = {}


def _language_objects() -> list[Any]:
    """Modules and classes of `triton.language` whose attributes the interpreter patches."""
    objs: list[Any] = [tl, tl.core, tl.math]
    for value in vars(tl.core).values():
        if isinstance(value, type) and value.__module__.startswith("triton.language"):
            objs.append(value)
    return objs


def _snapshot() -> list[tuple[Any, dict[str, Any]]]:
    return [(obj, dict(vars(obj))) for obj in _language_objects()]


def _restore(snap: list[tuple[Any, dict[str, Any]]]) -> None:
    for obj, saved in snap:
        now = vars(obj)
        if isinstance(obj, type):  # patched-in class attributes go; names the interpreter
            for name in [n for n in now if n not in saved]:  # adds to module globals stay
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(obj, name)
        for name, value in saved.items():
            if now.get(name, _MISSING) is not value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(obj, name, value)


_MISSING = object()


@contextlib.contextmanager
def interpreting() -> Iterator[None]:
    """Runs the body with Triton in interpreter mode, leaving `triton.language` as it was."""
    snap = _snapshot()
    try:
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = True
            for name, value in list(vars(tl).items()):
                if isinstance(value, JITFunction):  # Triton was imported without the knob
                    if name not in _twins:
                        _twins[name] = InterpretedFunction(value.fn)
                    setattr(tl, name, _twins[name])
            yield
    finally:
        _restore(snap)


def load_module(gen: Generated, interpret: bool) -> types.ModuleType:
    """Executes the generated source as a module (registered with linecache, where Triton and
    tracebacks read the kernel's source from)."""
    global _counter
    if not interpret and not isinstance(tl.sum, JITFunction):
        raise BackendError(
            f"kernel `{gen.entry}`: this process imported Triton with TRITON_INTERPRET=1, so it "
            "cannot compile kernels for a GPU", None,
            "unset TRITON_INTERPRET (kernel_dsl interprets CPU kernels without it)")
    _counter += 1
    kind = "interpret" if interpret else "gpu"
    filename = f"<kernel_dsl:triton:{kind}:{gen.entry}:{_counter}>"
    linecache.cache[filename] = (len(gen.source), None, gen.source.splitlines(True), filename)
    mod = types.ModuleType(f"kernel_dsl_triton_{gen.entry}_{_counter}")
    mod.__file__ = filename
    code = compile(gen.source, filename, "exec")
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        exec(code, mod.__dict__)
    return mod


def compile_for_torch(gen: Generated, interpret: bool = True) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The generated launcher: tensors in (CPU when interpreting), a tuple of fresh outputs out."""
    launcher = getattr(load_module(gen, interpret), gen.entry)

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not interpret:
            return launcher(*tensors)
        with interpreting():
            return launcher(*tensors)

    run.launcher = launcher  # type: ignore[attr-defined]
    return run


def kernel_function(gen: Generated, interpret: bool = False) -> Any:
    """The `@triton.jit` kernel object of `gen` (a JITFunction unless interpreting)."""
    return getattr(load_module(gen, interpret), gen.meta["kernel"])
