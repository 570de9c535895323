"""Trainium targets and the hardware limits the lowering and the interpreter share
(notes/nki.md §3): 128 partitions, 8 PSUM banks of 2 KiB per partition, matmul tiles
(K <= 128, M <= 128, N <= 512 fp32 in one PSUM bank) and usable SBUF bytes per partition."""
from __future__ import annotations

from dataclasses import dataclass

PMAX = 128  # partitions (nl.tile_size.pmax); also the matmul contraction and stationary free max
MOVING_FMAX = 512  # matmul moving free size: one 2 KiB PSUM bank of fp32
PSUM_BANK_BYTES = 2048
PSUM_BANKS = 8


@dataclass(frozen=True)
class Target:
    """One NeuronCore generation."""

    name: str  # trn1 | trn2 | trn3
    gen: int  # NeuronCore-v2 | v3 | v4
    sbuf_bytes: int  # usable SBUF bytes per partition

    @property
    def version(self) -> str:
        return f"NeuronCore-v{self.gen}"


TARGETS = {
    "trn1": Target("trn1", 2, 180224),
    "trn2": Target("trn2", 3, 212984),
    "trn3": Target("trn3", 4, 245752),
}
