"""Loops bounded by values read from memory, as loops over their static reach with run-time masks
(on a copy of the IR, before the writer).

AWS's NKI unrolls every Python `for` at trace time; a trip count known only when the kernel runs
is `nl.fori_loop(lo, hi, body)` over a register (`nisa.register_load`), whose body is traced
once, so every DMA in it would need `.ap(scalar_offset=reg)` offsets and every ragged edge a
run-time mask (docs/nki.md "Dynamic loop bounds"). This lowering does not generate that. It
takes the documented fallback instead: the loop `kd.tile(lo, hi)` (Helion's jagged loops,
grouped GEMM's `kd.tile(M_g)`, `kd.jagged_tile(nnz)`) walks its *static reach*, `[lo, limit)`
with `limit` from the axes the tile indexes (`reach` below; the data must keep `lo >= 0` and the
last lane `hi - 1` inside each such axis), and the bound read from memory becomes masks:

- the live lanes `L = lo <= tile.index < hi` and the live block `B = tile.begin < hi` (and
  `tile.begin + block > lo`);
- a `pad_fill` over the tile (before a reduction, scan or dot contraction) also fills the lanes
  outside `L` with the consumer's identity;
- a store inside the loop writes only where every enclosing such loop is live: a scatter through
  an index tile that has the loops' dims gets index -1 elsewhere (outside the axis: skipped,
  gather.py), any other store is a read-modify-write (`where(mask, value, old)`);
- carried values keep their previous value in a block that is not live (`where(B, new, old)`),
  so the blocks past the run-time end change nothing;
- `tile.count` is `min(block, hi - tile.begin)`, as in the real loop.

When `lo` itself is read from memory the blocks start at 0 rather than at `lo`: the lanes' indices
are the same but the block boundaries are not, so a kernel that reads the tile's begin, id or
count there is a ConfigError. The cost: every block of the reach is visited (and DMA'd).
"""
from __future__ import annotations

import copy
import itertools
import weakref
from dataclasses import dataclass

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import FLOAT_DTYPES, Dim, Index, KernelIR, Op, Region, TensorParam, TileVar, Value
from kernel_dsl.tile_bounds import from_memory, value_range

from .expand import _Builder, _max_id
from .shifted import shift_of

_cache: "weakref.WeakKeyDictionary[KernelIR, KernelIR]" = weakref.WeakKeyDictionary()
_POSITIONS = ("tile_begin", "tile_id", "tile_count")


@dataclass
class _Dyn:
    """A loop over its static reach: its tile, its live lanes `(t,)` and live block `()`."""

    tile: TileVar
    lanes: Value
    live: Value
    hi: Value | int
    lo_loaded: bool


def _loaded(b: int | Value | None) -> bool:
    return isinstance(b, Value) and value_range(b) is None


def _expand_to(b: _Builder, v: Value, shape: tuple[Dim, ...], t: TileVar) -> Value:
    """The rank-1 `v` over `t`, with unit dims so that `t` sits where it is in `shape`."""
    k = next(i for i, d in enumerate(shape) if d is t)
    for i in range(len(shape)):
        if i != k:
            dims = list(v.shape)
            dims.insert(i, 1)
            v = b.op("expand_dims", [v], {"axis": i}, tuple(dims), v.dtype)
    return v


def _mask(b: _Builder, ctx: list[_Dyn], shape: tuple[Dim, ...]) -> Value:
    """Where a block of `shape` is live under every enclosing loop over its reach."""
    out: Value | None = None
    for d in ctx:
        m = _expand_to(b, d.lanes, shape, d.tile) if any(x is d.tile for x in shape) else d.live
        out = m if out is None else b.bin("and", out, m)
    assert out is not None
    return out


def _block_shape(p: TensorParam, index: tuple[Index, ...]) -> tuple[Dim, ...]:
    out: list[Dim] = []
    for k, ix in enumerate(index):
        if ix.kind == "tile":
            out.append(ix.tile)  # type: ignore[arg-type]
        elif ix.kind == "full":
            out.append(p.shape[k])
        elif ix.kind == "slice":
            out.append(ix.stop - ix.value)
        elif ix.kind == "gather":
            out.extend(ix.scalar.shape)  # type: ignore[union-attr]
    return tuple(out)


_GROW = ("add", "expand_dims", "broadcast", "cast")  # keep `index >= c * lane` for lanes >= 0


def _scale(v: Value, t: TileVar) -> int | None:
    """A `c >= 1` with `v >= c * t.index` wherever `v` is (`v` a gather index built from
    `t.index` with + of values >= 0 by the kernel's contract (offsets read from memory, other
    tiles' indices, non-negative ints) and `* k` for ints k >= 1), else None."""
    op = v.op
    if op is None:
        return None
    if op.kind == "iota":
        return 1 if op.attrs["tile"] is t else None
    if op.kind in _GROW:
        if not all(_nonneg(x) for x in op.operands):
            return None
        scales = [c for c in (_scale(x, t) for x in op.operands) if c is not None]
        return max(scales) if scales else None
    if op.kind == "mul":
        k = [x.op.attrs["value"] for x in op.operands if x.op is not None and x.op.kind == "const"]
        inner = [c for c in (_scale(x, t) for x in op.operands) if c is not None]
        if len(k) == 1 and isinstance(k[0], int) and k[0] >= 1 and inner:
            return inner[0] * k[0]
    return None


def _nonneg(v: Value) -> bool:
    op = v.op
    if op is None:
        return False
    if op.kind == "const":
        return op.attrs["value"] >= 0
    if op.kind in ("load", "iota", "tile_begin", "tile_size", "tile_id"):
        return True  # a load: offsets and lengths are >= 0 by the kernel's contract
    if op.kind in (*_GROW, "mul", "max"):
        return all(_nonneg(x) for x in op.operands)
    return False


def reach(t: TileVar, body: Region) -> int:
    """A static bound on the end of loop `t`: the front end's `limit` (the largest axis the tile
    indexes, tile_bounds.check_axis), narrowed to the smallest axis it indexes, directly or
    through a gather index of at least `c` times its lane index (`start + t.index`; the flat
    `(starts + t.index) * M + tile_m.index` of Helion's jagged examples: c = M), since the data
    keep every index inside its axis: `c * lane <= n - 1`."""
    out = t.limit or t.extent
    for op in body.walk():
        if op.kind not in ("load", "store"):
            continue
        p: TensorParam = op.attrs["tensor"]
        for k, ix in enumerate(op.attrs["index"]):
            n = p.shape[k]
            if ix.kind == "tile" and ix.tile is t:
                out = min(out, n)
            elif ix.kind == "gather" and ix.scalar is not None:
                c = _scale(ix.scalar, t)
                if c is not None:
                    out = min(out, (n - 1) // c + 1)
    return out


class _Rewriter:
    def __init__(self, ir: KernelIR):
        self.ir = ir
        self.ids = itertools.count(_max_id(ir.body) + 1)

    def region(self, region: Region, ctx: list[_Dyn]) -> None:
        ops: list[Op] = []
        for op in region.ops:
            b = _Builder(region, self.ids, op.loc)
            if op.kind == "loop":
                self.loop(op, ctx)
            elif op.kind == "pad_fill" and any(d.tile is op.attrs["tile"] for d in ctx):
                d = next(d for d in ctx if d.tile is op.attrs["tile"])
                x = op.operands[0]
                lanes = _expand_to(b, d.lanes, x.shape, d.tile)
                fill = op.attrs["fill"]
                fill = fill if x.dtype in FLOAT_DTYPES else int(fill)
                op.operands = [b.where(lanes, x, fill)]
            elif op.kind == "store" and ctx:
                self.store(b, op, ctx)
            elif op.kind == "tile_count" and any(d.tile is op.attrs["tile"] for d in ctx):
                d = next(d for d in ctx if d.tile is op.attrs["tile"])
                t = d.tile
                begin = b.op("tile_begin", [], {"tile": t}, (), "i32")
                size = b.op("tile_size", [], {"tile": t}, (), "i32")
                hi = d.hi if isinstance(d.hi, Value) else b.c(d.hi, "i32")
                b.finish(b.bin("min", size, b.bin("sub", hi, begin)), op.result)
                ops.extend(b.ops)
                continue
            ops.extend(b.ops)
            ops.append(op)
        region.ops = ops

    def store(self, b: _Builder, op: Op, ctx: list[_Dyn]) -> None:
        p: TensorParam = op.attrs["tensor"]
        index: tuple[Index, ...] = op.attrs["index"]
        shape = _block_shape(p, index)
        gathers = [k for k, ix in enumerate(index) if ix.kind == "gather"]
        if len(gathers) == 1 and shift_of(op) is None:  # a shifted block stays a plain DMA
            idx = index[gathers[0]].scalar
            assert idx is not None
            in_block = [d for d in ctx if any(x is d.tile for x in shape)]
            if all(any(x is d.tile for x in idx.shape) for d in in_block):
                # lanes of a dead block or past the bound scatter to -1: outside the axis, skipped
                keep = _mask(b, ctx, idx.shape)
                new = b.where(keep, idx, -1)
                index = tuple(Index("gather", scalar=new) if k == gathers[0] else ix
                              for k, ix in enumerate(index))
                op.attrs = {**op.attrs, "index": index}
                return
        x = op.operands[0]
        keep = _mask(b, ctx, shape)
        old = b.op("load", [], {"tensor": p, "index": index}, shape, p.dtype)
        op.operands = [b.where(keep, b.cast(x, p.dtype), old)]

    def loop(self, op: Op, ctx: list[_Dyn]) -> None:
        body = op.body
        assert body is not None
        t: TileVar = op.attrs["tile"]
        if t.kind != "loop" or not from_memory(t):
            self.region(body, ctx)
            return
        # the front end refuses such a loop that indexes no axis (tile_bounds.check_axis)
        assert t.limit, f"loop {t!r} bounded from memory has no reach"
        lo_loaded = _loaded(t.lo)
        if lo_loaded:
            for inner in body.walk():
                if inner.kind in _POSITIONS and inner.attrs["tile"] is t:
                    raise ConfigError(
                        f"the NKI lowering walks loop {t!r} (its begin read from memory) over its "
                        f"static reach in blocks from 0, so its blocks are not the loop's: "
                        f"`{inner.kind.replace('tile_', '.')}` has no value here", inner.loc,
                        "use `tile.index` only, or the triton backend")
        hi, lo = t.hi, t.lo
        assert hi is not None
        b = _Builder(body, self.ids, op.loc)
        iota = b.op("iota", [], {"tile": t}, (t,), "i32")
        hi_v = hi if isinstance(hi, Value) else b.c(hi, "i32")
        lanes = b.bin("lt", iota, hi_v)
        begin = b.op("tile_begin", [], {"tile": t}, (), "i32")
        live = b.bin("lt", begin, hi_v)
        if lo_loaded:
            assert isinstance(lo, Value)
            lanes = b.bin("and", b.bin("ge", iota, lo), lanes)
            end = b.bin("add", begin, b.op("tile_size", [], {"tile": t}, (), "i32"))
            live = b.bin("and", live, b.bin("gt", end, lo))
        body.ops[:0] = b.ops
        t.lo = 0 if lo_loaded else lo
        t.hi = t.limit = reach(t, body)
        if isinstance(hi, int):
            t.hi = t.limit = min(t.limit, hi)
        t.extent = max(1, t.limit - (lo if isinstance(lo, int) else 0))
        what = " and ".join(f"`{v}`" for v, loaded in (("begin", lo_loaded), ("end", _loaded(hi)))
                            if loaded)
        op.attrs = {**op.attrs, "static_reach": (
            f"the {what} of {t!r} read from memory: a static loop over its reach "
            f"[{0 if lo_loaded else lo if isinstance(lo, int) else 'its begin'}, {t.limit}) with "
            "run-time masks (NKI's nl.fori_loop is not generated)")}
        d = _Dyn(t, lanes, live, hi, lo_loaded)
        self.region(body, [*ctx, d])
        if body.yields:
            yb = _Builder(body, self.ids, op.loc)
            body.yields = [yb.where(live, y, a) for y, a in zip(body.yields, body.args)]
            body.ops.extend(yb.ops)


def static_reach(ir: KernelIR) -> KernelIR:
    """`ir` itself if no loop is bounded from memory, else a rewritten copy (cached per IR)."""
    if not any(op.kind == "loop" and op.attrs["tile"].kind == "loop" and from_memory(op.attrs["tile"])
               for op in ir.body.walk()):
        return ir
    out = _cache.get(ir)
    if out is None:
        out = copy.deepcopy(ir)
        _Rewriter(out).region(out.body, [])
        _cache[ir] = out
    return out


__all__ = ["static_reach"]
