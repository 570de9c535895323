"""Builds generated Pallas source into a jitted JAX function and runs it on torch tensors."""
from __future__ import annotations

import linecache
import os
import sys
import types
from typing import Any, Callable

import torch

from kernel_dsl.lowering.numpy_views import numpy_view

from .. import Generated

_counter = 0


def _quiet_jax_on_cpu_hosts() -> None:
    """Without a TPU, keep JAX on CPU so libtpu does not probe for hardware on import."""
    if "jax" in sys.modules or "JAX_PLATFORMS" in os.environ:
        return
    vfio = os.listdir("/dev/vfio") if os.path.isdir("/dev/vfio") else []
    has_tpu = os.path.exists("/dev/accel0") or len(vfio) > 1
    if not has_tpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")


_quiet_jax_on_cpu_hosts()
import jax  # noqa: E402
import jax.dlpack  # noqa: E402

from . import export_cache, jax_cache  # noqa: E402  (import JAX: after the CPU-host setup above)


def load_module(gen: Generated) -> types.ModuleType:
    """Executes the generated source as a module (registered with linecache for tracebacks)."""
    global _counter
    _counter += 1
    filename = f"<kernel_dsl:pallas:{gen.entry}:{_counter}>"
    linecache.cache[filename] = (len(gen.source), None, gen.source.splitlines(True), filename)
    mod = types.ModuleType(f"kernel_dsl_generated_{gen.entry}_{_counter}")
    exec(compile(gen.source, filename, "exec"), mod.__dict__)
    return mod


def to_numpy(t: torch.Tensor) -> Any:
    """A zero-copy NumPy view of a CPU tensor. A jitted function takes NumPy arguments in its
    C++ fast path (~1 us each), where DLPack or jnp.asarray cost 12-20 us per array. Not
    `t.numpy()`, which would leave the input's storage non-resizable (numpy_views.py)."""
    return numpy_view(t)


def faithful_params() -> Any:
    """Pallas' TPU interpreter set to act like the hardware where it matters for correctness."""
    from jax.experimental.pallas import tpu as pltpu  # Pallas: imported only when it is used

    return pltpu.InterpretParams(out_of_bounds_reads="raise", uninitialized_memory="nan",
                                 detect_races=True)


def jax_function(gen: Generated, interpret: Any = True) -> Callable[..., Any]:
    """The kernel as a jitted JAX function of JAX arrays (what `kernel.jax` exposes)."""
    jax_cache.enable()  # a fresh process reuses what an earlier one compiled
    fn = getattr(load_module(gen), gen.entry)
    return jax.jit(lambda *args: fn(*args, interpret=interpret))


def compile_for_torch(gen: Generated, interpret: Any = True,
                      specs: export_cache.Specs | None = None) -> Callable[..., tuple[torch.Tensor, ...]]:
    """`specs` (the inputs' shapes and IR dtypes): keep the lowered kernel on disk for the next
    process (export_cache.py); the faithful interpreter is never kept."""
    if interpret is True and specs is not None and export_cache.enabled():
        jax_cache.enable()
        jitted = export_cache.jitted(gen, specs, lambda: jax_function(gen, interpret))
    else:
        jitted = jax_function(gen, interpret)

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = jitted(*[to_numpy(t) for t in tensors])
        return tuple(torch.from_dlpack(o) for o in outs)

    run.jitted = jitted  # type: ignore[attr-defined]
    return run
