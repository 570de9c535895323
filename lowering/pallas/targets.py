"""Per-generation TPU facts the Pallas lowering, the checker and the cost model need.

Numbers from notes/tpu.md §4; the default scoped VMEM limits were read off libtpu's compile-only
targets on this machine (a 18 MiB kernel fails at 16 MiB on v4/v5e/v5p and compiles on v6e and
TPU7x).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class TpuTarget:
    name: str  # kernel_dsl's target name
    topology: str  # libtpu compile-only topology
    device_kind: str
    vmem_bytes: int  # per TensorCore
    default_scoped_vmem: int  # the compiler's limit when vmem_limit_bytes is not set
    megacore: bool  # parallel grid axes split across two TensorCores
    mxu_dtypes: tuple[str, ...]
    native_bf16_math: bool  # VPU/EUP compute in bf16; older chips upcast elementwise math
    bf16_sublanes: int  # second-minor tiling of a bf16 block: (16, 128)
    peak_bf16_flops: float  # per chip
    hbm_bytes_per_s: float
    mxu_size: int
    # the real compiler takes float8 (e4m3fn, e5m2) matmul operands. libtpu 0.0.52, compile-only:
    # v4 rejects them ("CompileTimeMosaicUnsupportedRhsType: Unsupported matmul RHS type on
    # target: vector<128x128xf8E4M3FN>"); v5e, v5p, v6e and TPU7x compile them. Whether the MXU
    # runs them natively or the compiler widens them first is not visible from a compile.
    fp8_dot: bool = True

    @property
    def vmem_limit(self) -> int:
        """What generated kernels ask for: all of a TensorCore's VMEM (compile time grows with
        tile size, not with the limit, so the autotuner prunes big tiles instead)."""
        return self.vmem_bytes

    def sublanes(self, bits: int) -> int:
        """Second-minor block multiple for a dtype of `bits` (8 for 32-bit, 16 bf16, 32 int8)."""
        return 8 * 32 // bits


TARGETS: dict[str, TpuTarget] = {t.name: t for t in (
    TpuTarget("tpu-v4", "v4:2x2x1", "TPU v4", 16 * MiB, 16 * MiB, True,
              ("f32", "bf16", "i8"), False, 16, 275e12, 1.23e12, 128, fp8_dot=False),
    TpuTarget("tpu-v5e", "v5e:2x2", "TPU v5 lite", 128 * MiB, 16 * MiB, False,
              ("f32", "bf16", "i8"), False, 16, 197e12, 0.819e12, 128),
    TpuTarget("tpu-v5p", "v5p:2x2x1", "TPU v5", 64 * MiB, 16 * MiB, True,
              ("f32", "bf16", "i8"), True, 16, 459e12, 2.77e12, 128),
    TpuTarget("tpu-v6e", "v6e:2x2", "TPU v6 lite", 128 * MiB, 32 * MiB, False,
              ("f32", "bf16", "i8"), True, 16, 918e12, 1.64e12, 256),
    TpuTarget("tpu-v7x", "tpu7x:2x2x1", "TPU7x", 64 * MiB, 32 * MiB, True,
              ("f32", "bf16"), True, 16, 2307e12, 7.4e12, 256),
)}
TPU_TARGETS = tuple(TARGETS)


@functools.lru_cache(maxsize=None)
def attached_tpu_target() -> str | None:
    """The target name of this host's TPU (None without one)."""
    from .runner import jax  # JAX as the CPU path imports it: a CPU host never starts libtpu

    try:
        kind = jax.devices("tpu")[0].device_kind
    except RuntimeError:
        return None
    return next((t.name for t in TARGETS.values() if t.device_kind == kind), None)


def resolve_target(name: str) -> str:
    """"tpu" (whatever chip is attached: the TPU route and `kernel.jax` on a TPU host) -> that
    generation's target, so its VMEM limit, layouts and tuned configs apply."""
    return (attached_tpu_target() or name) if name == "tpu" else name


def tpu_target(name: str) -> TpuTarget | None:
    """The TPU generation of a target name; None for "cpu" (interpret mode)."""
    return TARGETS.get(name)
