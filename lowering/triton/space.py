"""Triton configs: block-size candidates (powers of two, at least 16 on dot dims), `num_warps`
and `num_stages`, and a default config that is valid for any shape.

Every block value lives in registers (Triton has no explicit on-chip buffers), so the sizes are
bounded by the largest value one program holds: the default keeps it at or below
`DEFAULT_NUMEL` elements and the space at or below `SPACE_NUMEL`. Dot operands are staged through
shared memory `num_stages` deep; the space keeps that estimate under `SMEM_BYTES` (Hopper has
228 KiB per SM) so that nearly every candidate compiles on a real GPU.
"""
from __future__ import annotations

from typing import Any

from kernel_dsl.config import Config, ConfigSpace, block_values, named_syms, positional_syms
from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import DTYPE_BITS, BlockSym, KernelIR, Op, TileVar, Value

from .layout import MIN_DOT, dot_dims, make_layout, max_numel, next_pow2

KNOBS = ("num_warps", "num_stages", "group_m")
WARPS = (1, 2, 4, 8, 16, 32)
DEFAULT_NUMEL = 1 << 14
SPACE_NUMEL = 1 << 16
SMEM_BYTES = 200 * 1024


def check_knobs(ir: KernelIR, config: Config) -> tuple[int, int, int]:
    """(num_warps, num_stages, group_m) of `config`; refuses knobs this backend does not have."""
    named = {s.name for s in ir.block_syms if s.name}
    unknown = set(config.knobs) - set(KNOBS) - named
    if unknown:
        raise ConfigError(f"unknown config knobs {sorted(unknown)} for the triton backend", ir.loc,
                          "triton knobs: num_warps (1, 2, 4, 8, 16 or 32), num_stages (>= 1), "
                          "group_m (>= 1) and named block sizes")
    warps = config.knobs.get("num_warps", 4)
    stages = config.knobs.get("num_stages", 3)
    if warps not in WARPS:
        raise ConfigError(f"num_warps={warps!r} is not one of {list(WARPS)}", ir.loc,
                          "use num_warps=4 (or 8 for large dot tiles)")
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise ConfigError(f"num_stages={stages!r} is not a positive int", ir.loc,
                          "use num_stages=2..4 (software pipelining depth of loops)")
    group = config.knobs.get("group_m", 1)
    if not isinstance(group, int) or isinstance(group, bool) or group < 1:
        raise ConfigError(f"group_m={group!r} is not a positive int", ir.loc,
                          "use group_m=1 (row-major programs) or 8 (L2-friendly groups of rows)")
    return warps, stages, group


def _role(ir: KernelIR, sym: BlockSym) -> str:
    """'dot' (an M, N or K dim of a dot), 'minor' (the contiguous axis of some access),
    'rank1' (tiles a 1-D tensor) or 'major'."""
    dtiles, _ = dot_dims(ir)
    tiles = [t for t in ir.tiles if t.block is sym]
    if any(t.id in dtiles for t in tiles):
        return "dot"
    roles = set()
    for op in ir.body.walk():
        if op.kind not in ("load", "store"):
            continue
        p = op.attrs["tensor"]
        for axis, ix in enumerate(op.attrs["index"]):
            if ix.kind == "tile" and ix.tile.block is sym:
                roles.add("rank1" if len(p.shape) == 1 else
                          "minor" if axis == len(p.shape) - 1 else "major")
    for r in ("rank1", "minor"):
        if r in roles:
            return r
    return "major"


_CANDIDATES = {"dot": [16, 32, 64, 128], "minor": [32, 64, 128, 256, 512],
               "rank1": [256, 512, 1024, 2048, 4096], "major": [1, 2, 4, 8, 16, 32, 64]}
_DEFAULT = {"dot": 64, "minor": 128, "rank1": 1024, "major": 16}


def _extent(ir: KernelIR, sym: BlockSym) -> int:
    return max((t.extent for t in ir.tiles if t.block is sym), default=1)


def _candidates(ir: KernelIR, sym: BlockSym) -> list[int]:
    if sym.choices:
        return list(sym.choices)
    out: list[int] = []
    for c in _CANDIDATES[_role(ir, sym)]:  # blocks covering the extent all give one block
        out.append(c)
        if c >= _extent(ir, sym):
            break
    return out


def _source_load(v: Value) -> Op | None:
    """The load a dot operand comes from through layout-only ops, if any."""
    while v.op is not None and v.op.kind in ("transpose", "pad_fill", "expand_dims", "broadcast"):
        v = v.op.operands[0]
    return v.op if v.op is not None and v.op.kind == "load" else None


def _smem_bytes(ir: KernelIR, blocks: dict[int, int], stages: int) -> int:
    """A rough bound on the dots' shared memory: operands loaded inside a loop are pipelined
    `stages` deep, other loaded operands staged once; computed ones stay in registers."""
    layout = make_layout(ir, blocks)
    in_loop = {id(o) for loop in ir.loops() for o in loop.body.walk()}  # type: ignore[union-attr]
    total = 0
    for op in ir.body.walk():
        if op.kind == "dot":
            for v in op.operands[:2]:
                load = _source_load(v)
                if load is not None:
                    n = layout.numel(v.shape[-2:]) * DTYPE_BITS[v.dtype] // 8
                    total += n * (stages if id(load) in in_loop else 1)
    return total


def _trim(ir: KernelIR, lists: dict[int, list[int]], limit_numel: int, stages: int) -> None:
    """Drops the largest candidates until the combination of all maxima fits."""
    free = {s.index: s for s in ir.free_syms if not s.choices}
    while True:
        blocks = block_values_from(ir, {i: c[-1] for i, c in lists.items()})
        numel, _ = max_numel(ir, make_layout(ir, blocks))
        if numel <= limit_numel and _smem_bytes(ir, blocks, stages) <= SMEM_BYTES:
            return
        shrinkable = [i for i in free if len(lists[i]) > 1]
        if not shrinkable:
            return
        lanes = {i: min(lists[i][-1], next_pow2(_extent(ir, free[i]))) for i in shrinkable}
        biggest = max(shrinkable, key=lambda i: (lanes[i], i))
        lists[biggest].pop()


def block_values_from(ir: KernelIR, by_index: dict[int, int]) -> dict[int, int]:
    """Block sizes of every symbol, given values for the free ones (by `BlockSym.index`)."""
    out = dict(by_index)
    for s in ir.block_syms:
        if s.pinned is not None:
            out[s.index] = s.pinned
    return out


def _has_loops(ir: KernelIR) -> bool:
    return any(op.kind == "loop" for op in ir.body.walk())


def _groupable(ir: KernelIR) -> bool:
    """Whether the last two grid tiles both have free block sizes (a 2-D grid of output tiles)."""
    return len(ir.grid) >= 2 and all(t.block.free for t in ir.grid[-2:])


def config_space(ir: KernelIR, target: str) -> ConfigSpace:
    stages = [2, 3, 4] if _has_loops(ir) else [1]
    lists = {s.index: _candidates(ir, s) for s in ir.free_syms}
    _trim(ir, lists, SPACE_NUMEL, stages[-1])
    knobs: dict[str, list[Any]] = {"num_warps": [4, 8], "num_stages": stages}
    if _groupable(ir) and _has_loops(ir):
        knobs["group_m"] = [1, 8]
    return ConfigSpace([lists[s.index] for s in positional_syms(ir)],
                       {s.name: lists[s.index] for s in named_syms(ir) if s.name}, knobs)


def _shrink_to_fit(ir: KernelIR, values: dict[int, int], limit: int, stages: int) -> None:
    """Halves the largest free block until the biggest value has at most `limit` elements and
    the dots' operands fit in shared memory `stages` deep."""
    dtiles, _ = dot_dims(ir)
    while True:
        blocks = block_values_from(ir, values)
        numel, _ = max_numel(ir, make_layout(ir, blocks))
        if numel <= limit and _smem_bytes(ir, blocks, stages) <= SMEM_BYTES:
            return
        lanes: dict[int, int] = {}
        for s in ir.free_syms:
            if s.choices:
                continue
            tiles: list[TileVar] = [t for t in ir.tiles if t.block is s]
            floor = MIN_DOT if any(t.id in dtiles for t in tiles) else 1
            eff = min(values[s.index], next_pow2(_extent(ir, s)))
            if eff > floor:
                lanes[s.index] = eff
        if not lanes:
            return  # render() explains what to change if a value is still too large
        i = max(lanes, key=lambda j: (lanes[j], j))
        values[i] = lanes[i] // 2


def default_config(ir: KernelIR, target: str) -> Config:
    """Valid for any shape: blocks shrink to small dims, to a register budget and to shared
    memory; 2 pipeline stages where even 16-wide dot blocks need more than SMEM_BYTES at 3."""
    values: dict[int, int] = {}
    for s in ir.free_syms:
        values[s.index] = s.choices[0] if s.choices else _DEFAULT[_role(ir, s)]
    stages = 3 if _has_loops(ir) else 1
    _shrink_to_fit(ir, values, DEFAULT_NUMEL, stages)
    while stages > 1 and _smem_bytes(ir, block_values_from(ir, values), stages) > SMEM_BYTES:
        stages -= 1
    knobs: dict[str, Any] = {s.name: values[s.index] for s in named_syms(ir) if s.name}
    knobs["num_warps"] = 4
    knobs["num_stages"] = stages
    if _groupable(ir) and _has_loops(ir):
        knobs["group_m"] = 8
    cfg = Config([values[s.index] for s in positional_syms(ir)], **knobs)
    block_values(ir, cfg)  # the config must fit the kernel
    return cfg
