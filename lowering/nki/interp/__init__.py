"""kernel_dsl's own CPU interpreter for the NKI it emits (notes/nki.md §7). It is a stand-in,
not AWS's `nki.simulate`: it runs exactly the subset of `nki`, `nki.language` and `nki.isa` that
the lowering uses, plus the rules it must never break, each as a checked error.

`namespace()` builds the `nki` package object that generated source imports (`import nki`,
`import nki.language as nl`, `import nki.isa as nisa`) when the real NKI >= 0.3 is absent; the
generated text is therefore exactly what would run on Trainium.
"""
from __future__ import annotations

import types

from . import checks, isa_compute, isa_data, language, program
from .errors import (
    ActivationRangeWarning,
    NkiError,
    NkiWarning,
    StartPartitionWarning,
    TransposeExactnessWarning,
)
from .state import ENV_TARGET, TARGETS, Target

VERSION = "0.3.0+kernel_dsl.interp"  # the NKI dialect it models; never mistaken for AWS's

_ISA = {
    **{n: getattr(isa_data, n) for n in ("dma_copy", "tensor_copy", "memset",
                                          "tensor_copy_predicated", "iota", "affine_select")},
    **{n: getattr(isa_compute, n) for n in ("nc_matmul", "nc_transpose", "tensor_tensor",
                                             "tensor_scalar", "tensor_reduce", "activation",
                                             "reciprocal", "exponential", "tensor_partition_reduce",
                                             "nc_matmul_mx", "activate2")},
    **{n: getattr(checks, n) for n in ("engine", "reduce_cmd", "matmul_perf_mode", "oob_mode",
                                        "dge_mode")},
}
_cache: dict[str, types.ModuleType] = {}


def namespace() -> dict[str, types.ModuleType]:
    """The modules `nki`, `nki.language` and `nki.isa` of the interpreter (built once)."""
    if not _cache:
        nki = types.ModuleType("nki", "kernel_dsl's NKI interpreter (not AWS's nki package)")
        nl = types.ModuleType("nki.language")
        nisa = types.ModuleType("nki.isa")
        for name in language.__all__:
            setattr(nl, name, getattr(language, name))
        for name, obj in _ISA.items():
            setattr(nisa, name, obj)
        nisa.tensor_engine, nisa.vector_engine = checks.engine.tensor, checks.engine.vector
        nisa.scalar_engine, nisa.gpsimd_engine = checks.engine.scalar, checks.engine.gpsimd
        nki.language, nki.isa = nl, nisa
        nki.jit, nki.simulate = program.jit, program.simulate
        nki.__version__ = VERSION
        nki.KERNEL_DSL_INTERPRETER = True
        _cache.update({"nki": nki, "nki.language": nl, "nki.isa": nisa})
    return dict(_cache)


__all__ = ["ActivationRangeWarning", "ENV_TARGET", "NkiError", "NkiWarning",
           "StartPartitionWarning", "TARGETS", "Target", "TransposeExactnessWarning", "VERSION",
           "namespace"]
