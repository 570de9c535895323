"""`kd.tile(0, end)` loops as phases of the trailing grid axis.

A loop whose end is a device value takes the same number of grid steps at every grid point:
its most blocks. Steps past the loop's trip count at a grid point skip the body (`pl.when`), and
the BlockSpecs of its streamed inputs clamp their block index to the last visited block, so a
skipped step fetches nothing (Pallas skips a DMA whose block index does not change). That is how
JAX's own TPU flash attention skips the blocks above the causal diagonal. Index maps see only
the grid indices, so the end is rendered again from them here; a bound this cannot render (or
a loop that starts past 0) runs as a fori_loop instead (plan.py).
"""
from __future__ import annotations

from kernel_dsl.config import effective_block
from kernel_dsl.ir import TileVar, Value

_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">="}


def floordiv(a: str, b: str) -> str:
    """Python's (and torch's) floor division of int32 scalars from truncating `lax.div`:
    jnp's `//` lowers through `sign`, whose Mosaic rule asks for the TPU's generation, which an
    export on a host without a TPU (the TorchTPU route) cannot give. x // 0 == x, as ir.md says."""
    d = f"jnp.where({b} == 0, 1, {b})"
    r = f"jax.lax.rem({a}, {d})"
    return f"(jax.lax.div({a}, {d}) - (({r} != 0) & (({r} < 0) != ({d} < 0))).astype(jnp.int32))"


def mod(a: str, b: str) -> str:
    """`a - b * (a // b)`, sign of the divisor (torch.remainder); x % 0 == 0."""
    d = f"jnp.where({b} == 0, 1, {b})"
    r = f"jax.lax.rem({a}, {d})"
    return f"jnp.where(({r} != 0) & (({r} < 0) != ({d} < 0)), {r} + {d}, {r})"
_CALL = {"min": "jnp.minimum", "max": "jnp.maximum"}


def grid_expr(v: Value, grid: list[TileVar], blocks: dict[int, int] | None,
              names: list[str] | None = None) -> str | None:
    """`v` as a jnp expression of the index-map parameters `i0, i1, ...` (one per grid tile),
    or None if it depends on anything but grid tiles and constants (`blocks` None: only that
    question, with placeholder block sizes)."""
    op = v.op
    if op is None:
        return None
    k, a = op.kind, op.attrs
    if k == "const":
        return f"jnp.int32({int(a['value'])})" if v.dtype != "bool" else str(bool(a["value"]))
    if k in ("tile_begin", "tile_size", "tile_id", "tile_count"):
        t: TileVar = a["tile"]
        if t not in grid:
            return None
        pos = grid.index(t)
        i = names[pos] if names else f"i{pos}"
        eb = effective_block(t, blocks) if blocks is not None else 1
        return {"tile_begin": f"({i} * {eb})", "tile_size": f"jnp.int32({eb})", "tile_id": i,
                "tile_count": f"jnp.minimum({eb}, {t.extent} - {i} * {eb})"}[k]
    xs = [grid_expr(x, grid, blocks, names) for x in op.operands]
    if any(x is None for x in xs):
        return None
    if k == "cast":
        return xs[0]
    if k == "neg":
        return f"(-{xs[0]})"
    if k == "where":
        return f"jnp.where({xs[0]}, {xs[1]}, {xs[2]})"
    if k in _INFIX and len(xs) == 2:
        return f"({xs[0]} {_INFIX[k]} {xs[1]})"
    if k in ("floordiv", "mod"):
        return (floordiv if k == "floordiv" else mod)(xs[0], xs[1])  # type: ignore[arg-type]
    if k in _CALL:
        return f"{_CALL[k]}({xs[0]}, {xs[1]})"
    return None


def can_phase(t: TileVar, grid: list[TileVar], blocks: dict[int, int] | None = None) -> bool:
    """A loop can be a grid phase: static bounds from 0, or a device end the index maps can
    compute."""
    if not t.bounded:
        return True
    if t.lo != 0:
        return False
    return not t.dynamic or (isinstance(t.hi, Value) and grid_expr(t.hi, grid, blocks) is not None)


def trips(t: TileVar, grid: list[TileVar], blocks: dict[int, int],
          names: list[str] | None = None) -> str:
    """The phase's trip count at this grid point (its end over the block size, rounded up)."""
    assert isinstance(t.hi, Value)
    eb = effective_block(t, blocks)
    # truncating division: a negative count (hi < lo) stays <= 0, which runs no step
    return f"jax.lax.div(({grid_expr(t.hi, grid, blocks, names)}) + {eb - 1}, {eb})"
