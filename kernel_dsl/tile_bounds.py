"""`kd.tile(begin, end)`: checking a loop's bounds, and the static facts backends need of them.

A bound is an int or a rank-0 integer device value built from enclosing tiles' `.begin`,
`.end`, `.block_size` and `.id` with `+ - * // min max` (Helion's `hl.tile(tile_q.begin,
tile_q.end)`, a causal `hl.tile(0, tile_q.end)`). Its static range gives the loop's most blocks
(`TileVar.extent`) and its largest end (`TileVar.limit`), so block shapes, padding and the axis
check stay static; the trip count itself, `cdiv(hi - lo, block)`, is computed where the kernel
runs.
"""
from __future__ import annotations

from typing import Any

from .config import effective_block, num_blocks
from .errors import KernelSyntaxError, SourceLoc
from .ir import INT_DTYPES, TileVar, Value

Range = tuple[int, int]


def lo_min(t: TileVar) -> int:
    if isinstance(t.lo, int):
        return t.lo
    r = value_range(t.lo)
    return 0 if r is None else r[0]  # a loaded begin: at least 0 by the kernel's contract


def end_max(t: TileVar) -> int:
    """The largest index past the tile's last lane: the axis size, or the bound's maximum."""
    return t.limit if t.limit is not None else t.extent


def value_range(v: Value) -> Range | None:
    """[min, max] of an integer scalar over every grid point and config; None if unknown."""
    op = v.op
    if op is None or v.rank != 0 or v.dtype not in INT_DTYPES:
        return None
    k, a = op.kind, op.attrs
    if k == "const":
        x = a["value"]
        return (int(x), int(x)) if float(x).is_integer() else None
    if k in ("tile_begin", "tile_size", "tile_id", "tile_count"):
        t: TileVar = a["tile"]
        if k == "tile_begin":
            return lo_min(t), end_max(t) - 1
        return (1, t.extent) if k != "tile_id" else (0, end_max(t) - 1)
    if k == "where":  # either branch
        rs = [value_range(x) for x in op.operands[1:]]
        if any(r is None for r in rs):
            return None
        return min(r[0] for r in rs), max(r[1] for r in rs)  # type: ignore[index]
    ins = [value_range(x) for x in op.operands]
    if any(r is None for r in ins):
        return None
    if k == "cast":
        return ins[0]
    if k == "neg":
        return -ins[0][1], -ins[0][0]  # type: ignore[index]
    if len(ins) != 2:
        return None
    (a0, a1), (b0, b1) = ins  # type: ignore[misc]
    if k == "add":
        return a0 + b0, a1 + b1
    if k == "sub":
        return a0 - b1, a1 - b0
    if k == "min":
        return min(a0, b0), min(a1, b1)
    if k == "max":
        return max(a0, b0), max(a1, b1)
    if k == "mul" and _rounded_down(op) is not None:  # x // b * b: in (x - b, x], >= 0 if x is
        d = _rounded_down(op)
        x0, x1 = value_range(d.operands[0])  # type: ignore[misc]
        bmax = value_range(d.operands[1])[1]  # type: ignore[index]
        return (0 if x0 >= 0 else x0 - bmax + 1), x1
    if k == "mul":
        p = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return min(p), max(p)
    if k == "floordiv" and b0 > 0:
        return min(a0 // b0, a0 // b1), max(a1 // b0, a1 // b1)
    if k == "mod" and b0 > 0:
        return 0, b1 - 1
    return None


def multiple_of(v: Value, m: int, blocks: dict[int, int]) -> bool:
    """`v` is a multiple of `m` at every grid point under these block sizes (a loop split at
    `x // bk * bk`: its blocks then start at multiples of the block, so none reaches past the
    axis's last whole block)."""
    return residue(v, m, blocks) == 0


def residue(v: Value, m: int, blocks: dict[int, int]) -> int | None:
    """`v mod m`, the same at every grid point under these block sizes; None if unknown. Exact
    through `+ - *`, so a causal row block's end `min(begin + size, n) - 1 + 1` is known to be a
    multiple of the key block when the row block and `n` are."""
    op = v.op
    if op is None or m <= 0:
        return None
    k = op.kind
    if k == "const":
        x = float(op.attrs["value"])
        return int(x) % m if x.is_integer() else None
    if k == "tile_size":
        return effective_block(op.attrs["tile"], blocks) % m
    if k == "tile_begin":  # lo + id * block (split_k's `outer_k.begin` with a pinned block)
        t = op.attrs["tile"]
        lo = residue(t.lo, m, blocks) if isinstance(t.lo, Value) else t.lo % m
        whole = effective_block(t, blocks) % m == 0 or t.extent <= blocks[t.block.index]
        return lo if whole else None
    rs = [residue(x, m, blocks) for x in op.operands]
    if k == "where":  # either branch
        rs = rs[1:]
        return rs[0] if rs[0] is not None and all(r == rs[0] for r in rs) else None
    if k == "mul" and 0 in rs:
        return 0
    if any(r is None for r in rs):
        return None
    if k == "cast":
        return rs[0]
    if k == "neg":
        return -rs[0] % m  # type: ignore[operator]
    if k in ("min", "max"):  # one of its operands
        return rs[0] if all(r == rs[0] for r in rs) else None
    if k in ("add", "sub", "mul") and len(rs) == 2:
        return _PY[k](rs[0], rs[1]) % m
    return None


def _rounded_down(op: Any) -> Any:
    """The `x // b` op of a product `(x // b) * b` (either order) with b > 0, else None."""
    from .block_arith import same_size

    for q, b in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        d = q.op
        if d is not None and d.kind == "floordiv" and same_size(d.operands[1], b):
            r = value_range(b)
            if r is not None and r[0] > 0:
                return d
    return None


_PY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "min": min, "max": max, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
       "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
       "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
       "and": lambda a, b: a and b, "or": lambda a, b: a or b}


def evaluate(v: Value, index: dict[int, int], blocks: dict[int, int]) -> int | None:
    """A bound's value at one grid point (`index`: TileVar.id -> block index); None when it
    depends on something else (a loop's own index)."""
    op = v.op
    if op is None:
        return None
    k, a = op.kind, op.attrs
    if k == "const":
        return int(a["value"])
    if k in ("tile_begin", "tile_size", "tile_id", "tile_count"):
        t: TileVar = a["tile"]
        eb = effective_block(t, blocks)
        i = index.get(t.id)
        if k == "tile_size":
            return eb
        if i is None:
            return None
        lo = t.lo if isinstance(t.lo, int) else evaluate(t.lo, index, blocks)
        if lo is None:
            return None
        begin = lo + i * eb
        if k == "tile_begin":
            return begin
        if k == "tile_id":
            return i
        hi = t.extent if t.hi is None else t.hi if isinstance(t.hi, int) else evaluate(t.hi, index, blocks)
        return None if hi is None else min(eb, hi - begin)
    xs = [evaluate(x, index, blocks) for x in op.operands]
    if any(x is None for x in xs):
        return None
    if k == "where":
        return xs[1] if xs[0] else xs[2]
    if k == "cast":
        return int(xs[0])  # type: ignore[arg-type]
    if k == "neg":
        return -xs[0]  # type: ignore[operator]
    if k in _PY and len(xs) == 2:
        return int(_PY[k](*xs))
    return None


def trips(t: TileVar, index: dict[int, int], blocks: dict[int, int]) -> int | None:
    """How many blocks loop `t` takes at one grid point."""
    if not t.dynamic:
        return num_blocks(t, blocks)
    lo = t.lo if isinstance(t.lo, int) else evaluate(t.lo, index, blocks)
    hi = t.hi if isinstance(t.hi, int) else evaluate(t.hi, index, blocks)  # type: ignore[arg-type]
    if lo is None or hi is None:
        return None
    eb = effective_block(t, blocks)
    return max(0, -(-(hi - lo) // eb))


def _tiles_read(t: TileVar) -> set[int]:
    """Ids of the tiles whose positions `t`'s bounds read."""
    out: set[int] = set()
    todo = [b for b in (t.lo, t.hi) if isinstance(b, Value)]
    while todo:
        v = todo.pop()
        if v.op is None:
            continue
        if "tile" in v.op.attrs:
            out.add(v.op.attrs["tile"].id)
        todo.extend(v.op.operands)
    return out


def mean_body_runs(chain: list[TileVar], grid: list[TileVar], blocks: dict[int, int],
                   max_points: int = 4096, budget: int = 200_000) -> float:
    """How often the body of the innermost loop of `chain` (enclosing loops, outermost first)
    runs per launch grid point, averaged over the grid: the cost model's count for nested
    loops, where an inner loop's bounds may read an outer loop's index (`kd.tile(0, tm.end)`
    inside `for tm in kd.tile(m)`) and loop counts that depend on the same grid index do not
    multiply as averages. The grid is sampled so that at most about `budget` loop indices are
    enumerated; past that, a loop counts at its static most, as `mean_trips` does."""
    if not any(t.dynamic for t in chain):
        n = 1.0
        for t in chain:
            n *= num_blocks(t, blocks)
        return n
    reads = [_tiles_read(t) if t.dynamic else set() for t in chain]
    # an enclosing loop's index matters only if a deeper loop's bounds read it
    read_below = [set().union(*reads[i + 1:]) for i in range(len(chain))]
    used = set().union(*reads)
    grid = [g for g in grid if g.id in used]
    counts = [num_blocks(g, blocks) for g in grid]
    left = [budget]

    def runs(i: int, index: dict[int, int]) -> float:
        if i == len(chain):
            return 1.0
        t = chain[i]
        k = trips(t, index, blocks) if left[0] > 0 else None
        if k is None:
            k = num_blocks(t, blocks)
        if t.id not in read_below[i]:
            return k * runs(i + 1, index)
        total = 0.0
        for j in range(k):
            left[0] -= 1
            total += runs(i + 1, {**index, t.id: j})
        return total

    per_point = 1  # loop indices enumerated per grid point, at most
    for t, below in zip(chain, read_below):
        if t.id in below:
            per_point *= num_blocks(t, blocks)
    max_points = max(1, min(max_points, budget // per_point))
    n = 1
    for c in counts:
        n *= c
    step = -(-n // max_points) if n > max_points else 1  # a regular sample of a huge grid
    total = points = 0.0
    for flat in range(0, n, step):
        index, rest = {}, flat
        for g, c in zip(reversed(grid), reversed(counts)):
            index[g.id], rest = rest % c, rest // c
        total += runs(0, index)
        points += 1
    return total / max(points, 1)


def mean_trips(t: TileVar, grid: list[TileVar], blocks: dict[int, int],
               max_points: int = 4096) -> float:
    """Loop `t`'s blocks averaged over the launch grid (the cost model's count of visited
    blocks). Bounds that read a loop's own index count at their static most."""
    return mean_body_runs([t], grid, blocks, max_points)


def bound(x: Any, what: str, loc: SourceLoc | None) -> tuple[int | Value, Range | None]:
    """An int, or a device value whose range is known; anything else is the user's error."""
    from .device_ops import TileValue

    if isinstance(x, int) and not isinstance(x, bool):
        return x, (x, x)
    if isinstance(x, TileValue) and not x.v.shape and x.v.dtype in INT_DTYPES:
        return x.v, value_range(x.v)  # None: read from memory (`offsets[b]`), range unknown
    raise KernelSyntaxError(
        f"`kd.tile` {what} {x!r} is not an int or an integer device scalar", loc,
        "bound a loop with ints, sizes, an outer tile's `.begin`/`.end`/`.block_size`/`.id`, "
        "or int32 scalars read from a tensor (`offsets[b]`), combined with + - * // and "
        ".clamp(min=, max=)")


def make_bounds(t: TileVar, lo: Any, hi: Any, loc: SourceLoc | None) -> None:
    """Sets `t`'s bounds, and its static extent and limit from their ranges."""
    lo_v, lo_r = bound(lo, "begin", loc)
    hi_v, hi_r = bound(hi, "end", loc)
    t.lo, t.hi = lo_v, hi_v
    if lo_r is None or hi_r is None:  # bounds read from memory: the axes the tile indexes
        t.limit = t.extent = 0  # bound them (check_axis); the data must stay inside them
        return
    if lo_r[0] < 0:
        raise KernelSyntaxError(f"`kd.tile` begin {lo!r} can be negative ({lo_r[0]})", loc,
                                "clamp it, e.g. `begin.clamp(min=0)`")
    t.limit = hi_r[1]
    t.extent = max(hi_r[1] - lo_r[0], 1)  # a loop that can never run still has one-lane blocks


def from_memory(t: TileVar) -> bool:
    """A bound is read from memory: its range is the data's, unknown when tracing."""
    return any(value_range(b) is None for b in t.bound_values())


def check_axis(t: TileVar, n: int, tensor: str, loc: SourceLoc | None) -> None:
    """A bounded tile indexes an axis of `n` only if its end cannot pass `n`; one bounded by
    values read from memory takes the largest axis it indexes as its reach."""
    if from_memory(t):
        t.extent = t.limit = max(t.extent, n)
        return
    if end_max(t) > n:
        raise KernelSyntaxError(
            f"tile `{t!r}` can reach index {end_max(t) - 1} but axis of `{tensor}` has {n}",
            loc, f"bound the loop's end by the axis, e.g. `end.clamp(max={n})`")


def reach_through_gather(idx: Value, n: int) -> None:
    """A loop bounded by values read from memory whose lanes index an axis of `n` only through
    a gather (Helion's grouped GEMM: `A[start + tile_m.index, tk]` in `kd.tile(m_g)`): its
    lanes' indices stay inside the axis, so its blocks are at most `n` lanes too."""
    seen: set[int] = set()
    stack = [idx]
    while stack:
        v = stack.pop()
        if v.id in seen or v.op is None:
            continue
        seen.add(v.id)
        t = v.op.attrs.get("tile") if v.op.kind == "iota" else None
        if isinstance(t, TileVar) and t.bounded and from_memory(t):
            t.extent = t.limit = max(t.extent, n)
        stack.extend(v.op.operands)


def trip_count(t: TileVar, lo: str, hi: str, eb: int) -> str:
    """The trip count expression of a bounded loop, in a backend's own syntax for lo and hi."""
    return f"({hi} - {lo} + {eb - 1}) // {eb}"


def is_ragged(t: TileVar, blocks: dict[int, int]) -> bool:
    """Some block has lanes past the end. With bounds that are device values, unless `hi - lo`
    is a multiple of the block at every grid point (residue): a causal loop split
    at `x // bk * bk` and ending at a block-aligned row block's end takes whole blocks only."""
    eb = effective_block(t, blocks)
    if not t.dynamic:
        return t.extent % eb != 0
    if t.hi is None:
        return True
    lo, hi = (b if isinstance(b, int) else residue(b, eb, blocks) for b in (t.lo, t.hi))
    return lo is None or hi is None or (hi - lo) % eb != 0
