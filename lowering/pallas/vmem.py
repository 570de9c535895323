"""Analytical VMEM use of a rendered Pallas kernel: cheap enough to prune configs before
compiling them (a big-tile compile can take tens of seconds).

    pipelined blocks x 2 buffers + scratch, each padded to the target's (sublane, 128) tiles

Mosaic also keeps internal temporaries (e.g. a dot's f32 result before it is added to an
accumulator) that this does not model; `benchmarks/vmem_estimate.py` measures the error
against the compiler's own figure.
"""
from __future__ import annotations

from ...ir import DTYPE_BITS
from .. import Generated
from .targets import TpuTarget

BUFFERS = 2  # Pallas' default double buffering of every BlockSpec


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
    return BUFFERS * blocks + scratch
