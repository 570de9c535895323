"""Pallas block-size candidates: the (8,128) block rule and dtype sublane tiling (notes/tpu.md §2).

Blocks go up to 4096 on the minor and second-minor axes: the published real-TPU winners use
2048-4096 blocks (Tokamax's flash-attention caches, benchmarks/published_winners.py), and the
calibrated cost model prefers them too where 512-row tiles leave a kernel HBM-bound (bf16 matmul
on v6e). Configs that cannot fit a target's VMEM are pruned by the autotuner's estimate
(lowering/pallas/vmem.py) before any compile; lists stop at the dim's extent, so small problems
keep small spaces.
"""
from __future__ import annotations

from typing import Any

from kernel_dsl.config import Config, ConfigSpace, named_syms, positional_syms
from kernel_dsl.ir import DTYPE_BITS, BlockSym, KernelIR

from .plan import grid_mode_possible

MAX_BLOCK = 4096  # the largest minor / second-minor block tried (see the module docstring)


def _roles(ir: KernelIR, sym: BlockSym) -> tuple[set[str], int]:
    """How `sym` is used: 'minor' (last axis), 'sublane' (second-last), 'rank1', 'major'."""
    roles: set[str] = set()
    sublane = 8
    for op in ir.body.walk():
        if op.kind not in ("load", "store"):
            continue
        p = op.attrs["tensor"]
        for axis, ix in enumerate(op.attrs["index"]):
            if ix.kind != "tile" or ix.tile.block is not sym:
                continue
            from_end = len(p.shape) - 1 - axis
            if len(p.shape) == 1:
                roles.add("rank1")
            elif from_end == 0:
                roles.add("minor")
            elif from_end == 1:
                roles.add("sublane")
                sublane = max(sublane, 8 * 32 // DTYPE_BITS[p.dtype])
            else:
                roles.add("major")
    return roles, sublane


def _candidates(ir: KernelIR, sym: BlockSym) -> list[int]:
    if sym.choices:
        return list(sym.choices)
    roles, sublane = _roles(ir, sym)
    if "rank1" in roles:
        cands = [1024, 2048, 4096, 8192]
    elif "minor" in roles:
        cands = [128, 256, 512, 1024, 2048, MAX_BLOCK]
    elif "sublane" in roles:
        cands = [c for c in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, MAX_BLOCK) if c % sublane == 0]
    else:
        cands = [1, 2, 4, 8]
    extent = max((t.extent for t in ir.tiles if t.block is sym), default=1)
    out: list[int] = []
    for c in cands:  # blocks at least the extent all give one whole block: keep one of them
        out.append(c)
        if c >= extent:
            break
    return out


def _default(ir: KernelIR, sym: BlockSym) -> int:
    if sym.choices:
        return sym.choices[0]
    roles, _ = _roles(ir, sym)
    if "rank1" in roles:
        return 1024
    if roles & {"minor", "sublane"}:
        return 128
    return 1


def config_space(ir: KernelIR, target: str) -> ConfigSpace:
    knobs: dict[str, list[Any]] = {}
    if grid_mode_possible(ir):
        knobs["loop_mode"] = ["grid", "inner"]
    return ConfigSpace([_candidates(ir, s) for s in positional_syms(ir)],
                       {s.name: _candidates(ir, s) for s in named_syms(ir) if s.name}, knobs)


def default_config(ir: KernelIR, target: str) -> Config:
    """Valid for any shape: blocks shrink to small dims; big dims stream through VMEM."""
    knobs: dict[str, Any] = {s.name: _default(ir, s) for s in named_syms(ir) if s.name}
    if grid_mode_possible(ir):
        knobs["loop_mode"] = "grid"
    return Config([_default(ir, s) for s in positional_syms(ir)], **knobs)
