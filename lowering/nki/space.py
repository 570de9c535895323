"""NKI block-size candidates: within the hardware limits of notes/nki.md §3, per target.

A block size's limits follow from where the lowering puts its tiles, found by rendering once
with probe blocks (render.write records every tile dim's role):
- on partitions (SBUF/PSUM tiles, matmul K and M): <= 128;
- a matmul's N (moving free, one 2 KiB PSUM bank of fp32): <= 512;
- on the free axis only: up to 2048;
- nowhere, or a leading dim of any value (the layout drops those): 1.
Then candidates shrink until the largest combination's SBUF estimate fits the target's SBUF
bytes per partition, so every combination in the space renders and fits.
"""
from __future__ import annotations

from kernel_dsl.config import Config, ConfigSpace, named_syms, positional_syms
from kernel_dsl.ir import BlockSym, KernelIR, TileVar

from .render import target_of, write
from .targets import MOVING_FMAX, PMAX

PART = (16, 32, 64, 128)
MOVING = (128, 256, 512)
FREE = (128, 256, 512, 1024, 2048)


def _extent(ir: KernelIR, sym: BlockSym) -> int:
    return max((t.extent for t in ir.tiles if t.block is sym), default=1)


def _probe_config(ir: KernelIR, pick: dict[int, int]) -> Config:
    pos = [pick[s.index] for s in positional_syms(ir)]
    return Config(pos, **{s.name: pick[s.index] for s in named_syms(ir) if s.name})


def _in_cores(ir: KernelIR) -> set[int]:
    """Block syms whose tiles appear in the last two dims of some value (the others can only be
    leading dims, which the layout drops: block size 1)."""
    out: set[int] = set()
    for op in ir.body.walk():
        values = list(op.results) + (list(op.body.args) if op.body is not None else [])
        for v in values:
            out.update(d.block.index for d in v.shape[-2:] if isinstance(d, TileVar))
    return out


def _leading(ir: KernelIR) -> set[int]:
    """Block syms whose tiles are a leading dim (before the last two) of some value: the layout
    needs their blocks to be 1, even where another value has the same tile in its core (a
    batched softmax's [tb, tm, n] rows and their [tb, tm] statistics)."""
    out: set[int] = set()
    for op in ir.body.walk():
        values = list(op.results) + (list(op.body.args) if op.body is not None else [])
        for v in values:
            out.update(d.block.index for d in v.shape[:-2] if isinstance(d, TileVar))
    return out


def roles(ir: KernelIR, target: str) -> dict[int, set[str]]:
    """Block-sym index -> roles of its tile dims ("part", "free", "moving")."""
    core = _in_cores(ir) - _leading(ir)
    pick = {s.index: (s.choices[0] if s.choices else min(PMAX, _extent(ir, s)))
            if s.index in core else 1 for s in ir.free_syms}
    w, _ = write(ir, _probe_config(ir, pick), target)
    return {k: set(v) for k, v in w.roles.items()}


def _limit(r: set[str]) -> tuple[tuple[int, ...], int]:
    if "part" in r:
        return PART, PMAX
    if "moving" in r:
        return MOVING, MOVING_FMAX
    if "free" in r:
        return FREE, max(FREE)
    return (1,), 1


def _candidates(ir: KernelIR, sym: BlockSym, r: set[str]) -> list[int]:
    base, limit = _limit(r)
    if sym.choices:
        ok = [c for c in sym.choices if c <= limit]
        return ok or [min(sym.choices)]
    extent = _extent(ir, sym)
    out: list[int] = []
    for c in base:  # blocks at least the extent all give one whole block: keep one of them
        out.append(c)
        if c >= extent:
            break
    return out


def _fit(ir: KernelIR, target: str, cands: dict[int, list[int]]) -> dict[int, list[int]]:
    """Drops the largest candidates until the largest combination fits SBUF."""
    budget = target_of(target, ir).sbuf_bytes
    for _ in range(64):
        top = {k: max(v) for k, v in cands.items()}
        w, _ = write(ir, _probe_config(ir, top), target)
        if w.sbuf_estimate <= budget:
            break
        k = max((k for k, v in cands.items() if len(v) > 1), key=lambda k: max(cands[k]), default=None)
        if k is None:
            break
        cands[k] = cands[k][:-1]
    return cands


def candidates(ir: KernelIR, target: str) -> dict[int, list[int]]:
    r = roles(ir, target)
    lead = _leading(ir)
    cands = {s.index: _candidates(ir, s, set() if s.index in lead else r.get(s.index, set()))
             for s in ir.free_syms}
    return _fit(ir, target, cands)


def config_space(ir: KernelIR, target: str) -> ConfigSpace:
    cands = candidates(ir, target)
    return ConfigSpace([cands[s.index] for s in positional_syms(ir)],
                       {s.name: cands[s.index] for s in named_syms(ir) if s.name}, {})


def default_config(ir: KernelIR, target: str) -> Config:
    """The largest candidate of each block size: 128 rows on partitions, 512-wide matmul N
    (one PSUM bank), 2048 on the free axis, shrunk to the dims and to SBUF."""
    cands = candidates(ir, target)
    return _probe_config(ir, {k: max(v) for k, v in cands.items()})
