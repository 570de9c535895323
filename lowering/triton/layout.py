"""How IR dims become Triton block shapes: power-of-two lane counts, and the masks they need.

Triton tensors must have power-of-two dims, and `tl.dot` needs M, N and K of at least 16. The IR's
dims are neither: a tile dim has `eb = min(block, extent)` lanes (37 when a 64 block shrinks to a
37-long axis) and an int dim (a `:` index, a literal shape) any size (1000 for a whole row). So
every dim gets *lanes*: the next power of two, at least 16 where the dim is a dot's M, N or K.
The lanes past a dim's real size hold garbage, exactly like the out-of-range lanes of a ragged
block in the IR; they are masked on every load and store, filled with the identity before every
reduction or dot over them (for tile dims through `pad_fill`, for int dims by the renderer), and
never reach memory.

Int dims are padded by a rule that depends only on the int (every 37 becomes 64 lanes), so two
values with the same int dim still broadcast against each other. A 1 is never padded: it is the
broadcasting dim of `keepdim` reductions and `[:, None]`.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernel_dsl.config import effective_block, num_blocks
from kernel_dsl.ir import Dim, KernelIR, TileVar, Value
from kernel_dsl.tile_bounds import is_ragged

MIN_DOT = 16  # tl.dot's smallest M, N and K
MAX_NUMEL = 1 << 20  # Triton's limit on the elements of one tensor value


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def dot_dims(ir: KernelIR) -> tuple[set[int], set[int]]:
    """(ids of tiles, ints) that are the M, N or K dim of some `dot`."""
    tiles: set[int] = set()
    ints: set[int] = set()
    for op in ir.body.walk():
        if op.kind != "dot":
            continue
        a, b = op.operands[:2]
        for d in (a.shape[-2], a.shape[-1], b.shape[-1]):
            if isinstance(d, TileVar):
                tiles.add(d.id)
            elif d > 1:
                ints.add(d)
    return tiles, ints


@dataclass
class Layout:
    """Lanes of every dim under one config (block sizes by `BlockSym.index`)."""

    blocks: dict[int, int]
    tile_lanes: dict[int, int]  # TileVar.id -> lanes
    int_lanes: dict[int, int]  # int dim (> 1) -> lanes

    def eb(self, t: TileVar) -> int:
        return effective_block(t, self.blocks)

    def nb(self, t: TileVar) -> int:
        return num_blocks(t, self.blocks)

    def lanes(self, d: Dim) -> int:
        if isinstance(d, TileVar):
            return self.tile_lanes[d.id]
        return self.int_lanes.get(d, d)

    def shape(self, dims: tuple[Dim, ...]) -> list[int]:
        return [self.lanes(d) for d in dims]

    def numel(self, dims: tuple[Dim, ...]) -> int:
        n = 1
        for x in self.shape(dims):
            n *= x
        return n

    def tile_masked(self, t: TileVar) -> bool:
        """Some lanes of the tile are out of range: a ragged block, or lanes past the block."""
        return is_ragged(t, self.blocks) or self.tile_lanes[t.id] > self.eb(t)

    def int_masked(self, n: int) -> bool:
        return self.lanes(n) > n

    def masked(self, d: Dim) -> bool:
        return self.tile_masked(d) if isinstance(d, TileVar) else self.int_masked(d)


def make_layout(ir: KernelIR, blocks: dict[int, int]) -> Layout:
    dtiles, dints = dot_dims(ir)
    tile_lanes: dict[int, int] = {}
    for t in ir.tiles:
        lanes = next_pow2(effective_block(t, blocks))
        tile_lanes[t.id] = max(lanes, MIN_DOT) if t.id in dtiles else lanes
    ints: set[int] = set()
    for op in ir.body.walk():
        for v in list(op.operands) + list(op.results):
            ints.update(d for d in v.shape if not isinstance(d, TileVar))
        if op.kind in ("load", "store"):
            p = op.attrs["tensor"]
            ints.update(n for ix, n in zip(op.attrs["index"], p.shape) if ix.kind == "full")
    int_lanes: dict[int, int] = {}
    for n in sorted(ints):
        if n > 1:
            int_lanes[n] = max(next_pow2(n), MIN_DOT) if n in dints else next_pow2(n)
    return Layout(blocks, tile_lanes, int_lanes)


def all_values(ir: KernelIR) -> list[Value]:
    out: list[Value] = []
    for op in ir.body.walk():
        out.extend(op.results)
        if op.body is not None:
            out.extend(op.body.args)
    return out


def max_numel(ir: KernelIR, layout: Layout) -> tuple[int, Value | None]:
    """The largest value's element count (what a program holds in registers at once)."""
    best, where = 0, None
    for v in all_values(ir):
        n = layout.numel(v.shape)
        if n > best:
            best, where = n, v
    return best, where
