"""kernel_dsl's own CPU interpreter of NKI (notes/nki.md §7, docs/nki.md). It is a stand-in,
not AWS's `nki.simulate`: it runs the current-dialect `nki`, `nki.language` and `nki.isa` API as
the SDK documents it, and every part it does not model raises an `NkiError` that says so
(rule "not modelled"), never a silent guess.

`namespace()` builds the module objects that kernel source imports (`import nki`,
`import nki.language as nl`, `import nki.isa as nisa`, `from nki.isa.constants import oob_mode`,
`from nki.typing import tensor`, `import nki.collectives`) when the real NKI >= 0.3 is absent;
the generated text is therefore exactly what would run on Trainium.
"""
from __future__ import annotations

import types
from enum import Enum
from typing import Any

from . import (
    checks,
    dtypes,
    isa_compute,
    isa_data,
    isa_more,
    isa_select,
    language,
    program,
    registers,
    tile_lang,
)
from .errors import (
    ActivationRangeWarning,
    NkiError,
    NkiWarning,
    StartPartitionWarning,
    TransposeExactnessWarning,
)
from .state import ENV_TARGET, TARGETS, Target
from .tensor import NkiTensor

VERSION = "0.3.0+kernel_dsl.interp"  # the NKI dialect it models; never mistaken for AWS's

_ENUMS = {"engine": checks.engine, "reduce_cmd": checks.reduce_cmd,
          "matmul_perf_mode": checks.matmul_perf_mode, "oob_mode": checks.oob_mode,
          "dge_mode": checks.dge_mode, "nc_version": isa_more.nc_version,
          "dma_engine": isa_more.dma_engine}
_ISA = {
    **{n: getattr(isa_data, n) for n in ("dma_copy", "tensor_copy", "memset",
                                          "tensor_copy_predicated", "iota", "affine_select")},
    **{n: getattr(isa_compute, n) for n in ("nc_matmul", "nc_transpose", "tensor_tensor",
                                             "tensor_scalar", "tensor_reduce", "activation",
                                             "reciprocal", "exponential", "tensor_partition_reduce",
                                             "nc_matmul_mx", "activate2")},
    **{n: getattr(isa_more, n) for n in ("tensor_tensor_scan", "scalar_tensor_tensor",
                                          "tensor_scalar_reduce", "activation_reduce",
                                          "dma_transpose", "get_nc_version", "get_nc_sub_version",
                                          "bn_stats", "bn_aggr", "dma_compute")},
    **{n: getattr(isa_select, n) for n in ("max8", "nc_find_index8", "nc_match_replace8",
                                            "nonzero_with_count", "nc_stream_shuffle", "range_select",
                                            "select_reduce", "nc_n_gather")},
    **{n: getattr(registers, n) for n in ("VirtualRegister", "register_alloc", "register_move",
                                           "register_load", "register_store")},
    **isa_more.STUBS,
    **_ENUMS,
}
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all",
                "all_to_all_v", "collective_permute", "collective_permute_implicit",
                "collective_permute_implicit_reduce",
                "collective_permute_implicit_current_processing_rank_id", "rank_id")
_cache: dict[str, Any] = {}


class MemoryRegion(str, Enum):
    """`nl.MemoryRegion`; members equal the buffer names (`nl.sbuf == "sbuf"`)."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


class NkiInstruction(language.NKIObject):
    """`nisa.NkiInstruction`: a traced-instruction handle. This interpreter runs instructions
    at once and returns None from them, so scheduling edges (`depends_on`) have nothing to act
    on."""

    def __init__(self, handle: object = None) -> None:
        super().__init__()
        self.handle = handle

    def depends_on(self, *producers: object) -> NkiInstruction:
        return self  # program order already runs producers first


class ReplicaGroup(language.NKIObject):
    """`nki.collectives.ReplicaGroup`: constructible, but every collective is rejected."""

    def __init__(self, *groups: object, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.groups = groups


def _collective(name: str) -> object:
    def run(*args: object, **kwargs: object) -> None:
        raise NkiError(f"nki.collectives.{name}", "a multi-core collective is not modelled by "
                       "kernel_dsl's NKI interpreter (it runs one NeuronCore)", "not modelled")

    run.__name__ = name
    return run


def _module(name: str, doc: str, attrs: dict[str, object]) -> types.ModuleType:
    m = types.ModuleType(name, doc)
    m.__path__ = []  # a package, so `import nki.x.y` style imports resolve through sys.modules
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


def namespace() -> dict[str, Any]:
    """The modules `nki`, `nki.language`, `nki.isa`, `nki.isa.constants`, `nki.typing`,
    `nki.collectives` of the interpreter, and `nki.dtype` (the dtype class), built once."""
    if not _cache:
        nl = _module("nki.language", "nki.language (kernel_dsl interpreter)",
                     {**{n: getattr(language, n) for n in language.__all__}, **tile_lang.EXPORTS,
                      "DType": dtypes.DType, "MemoryRegion": MemoryRegion,
                      # used by AWS's nki-library, though not in the SDK's API reference:
                      "range": language.range_, "bool": dtypes.bool_,
                      **{n: getattr(registers, n) for n in ("dynamic_range", "fori_loop",
                                                             "while_loop")}})
        constants = _module("nki.isa.constants", "nki.isa.constants (kernel_dsl interpreter)",
                            dict(_ENUMS))
        nisa = _module("nki.isa", "nki.isa (kernel_dsl interpreter)",
                       {**_ISA, "constants": constants, "NkiInstruction": NkiInstruction,
                        "NkiValidationError": NkiError, "unknown_engine": checks.engine.unknown,
                        "tensor_engine": checks.engine.tensor, "vector_engine": checks.engine.vector,
                        "scalar_engine": checks.engine.scalar, "gpsimd_engine": checks.engine.gpsimd})
        typing = _module("nki.typing", "nki.typing (kernel_dsl interpreter)",
                         {"tensor": NkiTensor, "mutable_tensor": NkiTensor})
        coll = _module("nki.collectives", "nki.collectives: not modelled (single core)",
                       {"ReplicaGroup": ReplicaGroup, **{n: _collective(n) for n in _COLLECTIVES}})
        nki = _module("nki", "kernel_dsl's NKI interpreter (not AWS's nki package)",
                      {"language": nl, "isa": nisa, "typing": typing, "collectives": coll,
                       "jit": program.jit, "simulate": program.simulate, "dtype": dtypes.DType,
                       "__version__": VERSION, "KERNEL_DSL_INTERPRETER": True})
        _cache.update({"nki": nki, "nki.language": nl, "nki.isa": nisa,
                       "nki.isa.constants": constants, "nki.typing": typing,
                       "nki.collectives": coll, "nki.dtype": dtypes.DType})
    return dict(_cache)


__all__ = ["ActivationRangeWarning", "ENV_TARGET", "NkiError", "NkiWarning",
           "StartPartitionWarning", "TARGETS", "Target", "TransposeExactnessWarning", "VERSION",
           "namespace"]
