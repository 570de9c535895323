"""Runs generated NKI source on CPU: through AWS's `nki.simulate` when the real NKI >= 0.3 is
installed, otherwise through kernel_dsl's interpreter (lowering/nki/interp).

The generated text is executed unchanged. For the interpreter, its `import nki` statements are
answered by the interpreter's modules through the module's own `__import__` (nothing is put in
`sys.modules`, so the real package, if any, stays visible to everything else).
"""
from __future__ import annotations

import builtins
import importlib
import importlib.metadata
import importlib.util
import linecache
import os
import types
from typing import Any, Callable

import numpy as np
import torch

from kernel_dsl.dtypes import IR_TO_TORCH
from kernel_dsl.errors import BackendError
from kernel_dsl.ir import KernelIR
from kernel_dsl.lowering.numpy_views import numpy_view

from .. import Generated
from .interp import ENV_TARGET, namespace

ENGINES = ("auto", "interp", "nki")
_counter = 0
_real: list[types.ModuleType | None] = []


def real_nki() -> types.ModuleType | None:
    """AWS's `nki` >= 0.3 with `nki.simulate`, if installed. The PyPI package named `nki`
    (0.0.1) is an empty placeholder and does not count."""
    if not _real:
        mod = None
        try:
            if importlib.util.find_spec("nki") is not None:
                version = importlib.metadata.version("nki")
                major, minor = (int(x) for x in version.split(".")[:2])
                if (major, minor) >= (0, 3):
                    mod = importlib.import_module("nki")
                    if not (hasattr(mod, "simulate") and hasattr(mod, "jit")):
                        mod = None
        except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
            mod = None
        _real.append(mod)
    return _real[0]


def engine_name(engine: str = "auto") -> str:
    """"nki" (AWS's simulator) or "interp" (kernel_dsl's interpreter) for `engine`."""
    if engine not in ENGINES:
        raise BackendError(f"unknown NKI engine {engine!r}", None, f"use one of {ENGINES}")
    if engine == "auto":
        return "nki" if real_nki() is not None else "interp"
    if engine == "nki" and real_nki() is None:
        raise BackendError("the real NKI (>= 0.3, with nki.simulate) is not installed", None,
                           "install `nki` from AWS's Neuron package repository, or use the "
                           "interpreter (engine='interp')")
    return engine


def _importer(mods: dict[str, Any]) -> Callable[..., Any]:  # modules, and `nki.dtype` (a class)
    def imp(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
            level: int = 0) -> Any:
        if level == 0 and (name == "nki" or name.startswith("nki.")):
            if name not in mods:
                raise ImportError(f"kernel_dsl's NKI interpreter has no module {name!r}")
            return mods[name] if fromlist else mods["nki"]
        return builtins.__import__(name, globals, locals, fromlist, level)

    return imp


def load_source(source: str, entry: str, engine: str = "auto") -> Any:
    """Executes generated source as a module; returns its `@nki.jit` kernel `entry`.
    The source is registered with linecache, so tracebacks and source checks see it."""
    global _counter
    _counter += 1
    eng = engine_name(engine)
    filename = f"<kernel_dsl:nki:{entry}:{_counter}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = types.ModuleType(f"kernel_dsl_nki_{entry}_{_counter}")
    mod.__file__ = filename
    if eng == "interp":
        mod.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": _importer(namespace())}
    exec(compile(source, filename, "exec"), mod.__dict__)
    return getattr(mod, entry)


def simulate(kernel: Any, arrays: list[np.ndarray], target: str, engine: str = "auto") -> Any:
    """`nki.simulate(kernel)(*arrays)` on `target` (trn1/trn2/trn3), through the engine's `nki`."""
    nki = real_nki() if engine_name(engine) == "nki" else namespace()["nki"]
    saved = os.environ.get(ENV_TARGET)
    os.environ[ENV_TARGET] = target  # both simulators read the target from here
    try:
        return nki.simulate(kernel)(*arrays)  # type: ignore[union-attr]
    finally:
        if saved is None:
            os.environ.pop(ENV_TARGET, None)
        else:
            os.environ[ENV_TARGET] = saved


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return numpy_view(t)  # not t.numpy(): that leaves the storage non-resizable


def to_torch(a: Any, dtype: torch.dtype) -> torch.Tensor:
    a = np.asarray(a)
    if dtype == torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    if dtype == torch.bool:
        return torch.from_numpy(a.astype(np.bool_))
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and a.dtype.itemsize == 1:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint8)).view(dtype)  # ml_dtypes'
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


def compile_for_torch(gen: Generated, ir: KernelIR,
                      engine: str = "auto") -> Callable[..., tuple[torch.Tensor, ...]]:
    """The kernel as a function of CPU torch tensors returning fresh output tensors."""
    kernel = load_source(gen.source, gen.entry, engine)
    out_dtypes = [IR_TO_TORCH[p.dtype] for p in ir.returns]

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = simulate(kernel, [to_numpy(t.detach()) for t in tensors], gen.target, engine)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(to_torch(o, d) for o, d in zip(outs, out_dtypes))

    run.kernel = kernel  # type: ignore[attr-defined]
    return run
