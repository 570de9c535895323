"""Analytical VMEM use of a rendered Pallas kernel: cheap enough to prune configs before
compiling them (a big-tile compile can take tens of seconds).

    pipelined blocks x 2 buffers + scratch + the largest intermediate that outgrows the vector
    registers, each padded to the target's (sublane, 128) tiles

Mosaic keeps an intermediate (a dot's f32 result, a softmax's exponentials) in VMEM when it
does not fit the 64 vector registers; the largest one is counted, the others are assumed to
reuse its space. `benchmarks/vmem_estimate.py` measures the error against the compiler.
"""
from __future__ import annotations

from kernel_dsl.ir import DTYPE_BITS

from .. import Generated
from .targets import TpuTarget

BUFFERS = 2  # Pallas' default double buffering of every BlockSpec
# The estimate runs under the compiler's figure where Mosaic keeps more than one big
# intermediate: by ~18% at the largest grid blocks (flash attention forward, [4, 4096, 1024] grid
# on v6e: 124 MiB estimated, 146 MiB needed; tests/test_space_blocks.py), by up to 50% for
# 'inner' attention blocks ([4, 2048, 512] at B*H=64, S=2048 on v5p: 40 MiB estimated, 60 MiB
# measured; the shipped entries' vmem_used). A config is kept only if its estimate leaves this
# share of VMEM free; the autotuner then compiles it, which settles the rest.
PRUNE_HEADROOM = 0.2
VREG_FILE_BYTES = 64 * 8 * 128 * 4  # 64 vregs of 8 x 128 x 32 bits


def padded_bytes(shape: tuple[int, ...], dtype: str, target: TpuTarget | None) -> int:
    """Bytes of one VMEM buffer: the last two dims padded to (sublanes, 128) tiles."""
    bits = DTYPE_BITS[dtype]
    dims = (1,) * max(0, 2 - len(shape)) + tuple(shape)
    sub = target.sublanes(bits) if target is not None else 8 * 32 // bits
    rows = -(-dims[-2] // sub) * sub
    cols = -(-dims[-1] // 128) * 128
    lead = 1
    for d in dims[:-2]:
        lead *= d
    return lead * rows * cols * bits // 8


def estimate_vmem(gen: Generated, target: TpuTarget | None) -> int:
    blocks = sum(padded_bytes(shape, dt, target) for shape, dt in gen.meta["blocks"])
    scratch = sum(padded_bytes(shape, dt, target) for shape, dt in gen.meta["scratch"])
    spill = max((padded_bytes(shape, dt, target) for shape, dt in gen.meta.get("values", [])),
                default=0)
    return BUFFERS * blocks + scratch + (spill if spill > VREG_FILE_BYTES else 0)


def fits_vmem(estimate: int, target: TpuTarget) -> bool:
    """Whether the autotuner may compile a config with this VMEM estimate for `target`. (The
    shipped-config lookup, kernels/tuned.py, anchors on each entry's measured figure instead.)"""
    return estimate <= target.vmem_bytes * (1 - PRUNE_HEADROOM)
