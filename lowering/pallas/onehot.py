"""Gathers and scatters that TPU renders as a one-hot select over a resident row.

A vector register cannot be an address on TPU and Mosaic has no lane gather or scatter in VMEM.
When the gathered axis is the lane (minor) axis, the row is resident in VMEM and the index is a
vector:
- "flat": `x_flat[idx]` / `out_flat[idx] = v` of a 1-D tensor, through an index tile of any
  rank (Helion's jagged examples: `hl.load(x_flat, [flat_indices])` with a rank-3 index);
- "minor": `x[tm, idx]` of a 2-D+ tensor gathered along its minor axis through a 1-D index
  (Helion's masked concatenate: `y[tile0, tile1.index - N1]`).
Each row of the index tile (its minor axis, c lanes) is compared with an iota over the P
elements of the resident row, [P, c], and the int32 bits of the one element that matches are
summed: a select, so exact for every value (NaN, inf, -0.0), unlike a one-hot matmul (0 * inf).
A rank-N index is walked row by row (a fori_loop over its leading positions, through VMEM
scratch): each step holds one [P, c] one-hot. A 1-D tensor longer than WINDOW is walked in
aligned windows over the span [min, max] of each index row instead (a jagged row,
`start + tk.index`, spans one or two), so the work is WINDOW * c per window, whatever P. Why
not the alternatives: a one-hot matmul is inexact (0 * inf), a scalar loop over the lanes
needs the index in SMEM (not a vector the kernel computed), and Mosaic has no dynamic lane
gather. The tensor stays whole in VMEM (a quarter of the target's VMEM, `_resident`) and a
one-hot must fit `ONEHOT_BYTES`: a ConfigError otherwise. Scatters (and atomics) reduce the
one-hot over the lanes into the resident output block (all grid axes "arbitrary": steps run
in order on one core).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import DTYPE_BITS, Index, Op, TensorParam, TileVar, Value

from .syntax import JNP

if TYPE_CHECKING:
    from .render import _KernelWriter

INT = ("i32", "i16", "i8", "u8")
BITS_MIN = "jnp.int32(-2147483648)"
# one [P, c] int32 one-hot (with its iota and select alive beside it, about 3x): 4 MiB keeps
# them inside the 16 MiB default scoped VMEM of v5e (and v4's 16 MiB in all)
ONEHOT_BYTES = 4 << 20
# a 1-D row longer than this is gathered from window by window (aligned dynamic slices)
WINDOW = 1024
# the resident row is double-buffered by its BlockSpec: it may take a quarter of the target's
# VMEM (4 MiB on tpu-v4, 16 MiB on v5p / v7x, 32 MiB on v5e / v6e); 32 MiB when rendered for
# interpret mode
TABLE_BYTES = 32 << 20


def _entry(op: Op) -> tuple[int, Index] | None:
    return next(((a, ix) for a, ix in enumerate(op.attrs["index"]) if ix.kind == "gather"), None)


def form(op: Op) -> str | None:
    """"flat", "minor" or None (the lane loop of gather.py, or an error there)."""
    g = _entry(op)
    if g is None:
        return None
    p: TensorParam = op.attrs["tensor"]
    if len(p.shape) == 1:
        return "flat"
    axis, ix = g
    if op.kind != "load" or axis != len(p.shape) - 1 or ix.scalar.rank != 1:  # type: ignore[union-attr]
        return None
    # the other entries: device scalars, and at most the sublane axis as a block
    blocks = [a for a, e in enumerate(op.attrs["index"][:-1]) if e.kind not in ("int", "dyn")]
    return "minor" if blocks in ([], [len(p.shape) - 2]) else None


def wide(dtype: str, x: str) -> tuple[str, str]:
    """(`x` as int32 bits or values, how to turn such an int32 back into `dtype`): exact."""
    if dtype in INT + ("bool",):
        back = "{}.astype(jnp.bool_)" if dtype == "bool" else f"{{}}.astype({JNP[dtype]})"
        return f"{x}.astype(jnp.int32)", back
    f32 = x if dtype == "f32" else f"{x}.astype(jnp.float32)"
    back = "jax.lax.bitcast_convert_type({}, jnp.float32)"
    if dtype != "f32":
        back += f".astype({JNP[dtype]})"
    return f"jax.lax.bitcast_convert_type({f32}, jnp.int32)", back


def _dims(w: "_KernelWriter", shape: tuple) -> tuple[int, ...]:
    return tuple(w.plan.eb(d) if isinstance(d, TileVar) else d for d in shape)


def _fits(op: Op, p: TensorParam, rows: int, c: int) -> None:
    if rows * c * 4 > ONEHOT_BYTES:
        raise ConfigError(
            f"the pallas backend gathers from / scatters into `{p.name}` along its lane axis as a "
            f"one-hot select over the resident row: [{rows}, {c}] int32 is over the "
            f"{ONEHOT_BYTES >> 20} MiB this rendering allows in VMEM (TPU has no lane gather)",
            op.loc, "use smaller blocks for the index tile's minor axis, gather rows of a 2-D "
            "tensor instead (`x2d[start + tk.index, tm]`, a dynamic row load per lane), or use "
            "the triton backend")


def _resident(w: "_KernelWriter", op: Op, p: TensorParam, elems: int) -> None:
    size = elems * DTYPE_BITS[p.dtype] // 8
    vmem = getattr(w, "vmem_bytes", None)
    limit = vmem // 4 if vmem else TABLE_BYTES
    if size > limit:
        raise ConfigError(
            f"the pallas backend keeps `{p.name}` whole in VMEM to gather along its lane axis (a "
            f"one-hot select; TPU has no lane gather): {size / 2**20:.1f} MiB is over the "
            f"{limit / 2**20:.0f} MiB this rendering allows"
            + (f" (a quarter of the target's {vmem >> 20} MiB)" if vmem else ""), op.loc,
            "split the call into chunks of the tensor, gather rows of a 2-D tensor instead "
            "(`x2d[start + tk.index, tm]`: only the rows' blocks are resident), or use the "
            "triton backend")


def _row_loop(w: "_KernelWriter", lead: tuple[int, ...], fn: str) -> tuple[str, str]:
    """Opens `def fn(r, carry):` over the leading positions of an index tile; returns (the
    subscript of row r as a [1, c] block, the same with its sublane axis squeezed: [c])."""
    em = w.em
    em.line(f"def {fn}(r, carry):")
    em.indent += 1
    parts = []
    rest = "r"
    for a in range(len(lead) - 1, -1, -1):  # unravel r over the leading dims, minor first
        if a == 0:
            parts.append(rest)
        else:
            em.line(f"r{a}, q{a} = jax.lax.rem({rest}, {lead[a]}), jax.lax.div({rest}, {lead[a]})")
            parts.append(f"r{a}")
            rest = f"q{a}"
    parts.reverse()
    block = ", ".join([*parts[:-1], f"pl.ds({parts[-1]}, 1)", ":"])
    squeezed = ", ".join([*parts, ":"])
    return block, squeezed


def _end_loop(w: "_KernelWriter", steps: int, fn: str) -> None:
    """Closes `def fn(r, carry):` and runs it for r in [0, steps)."""
    w.em.line("return carry")
    w.em.indent -= 1
    w.em.line(f"jax.lax.fori_loop(0, {steps}, {fn}, 0)")


def _hit(lanes: str, elems: int, c: int, off: str = "", across: bool = False) -> str:
    """The one-hot of c lanes' indices `lanes` against the elements [off, off + elems) of the
    resident row: [elems, c] (a gather: `lanes` is [1, c]), or with `across` [c, elems] (a
    scatter, reduced over the lanes: `lanes` is [c, 1])."""
    if across:
        return f"{lanes} == jax.lax.broadcasted_iota(jnp.int32, ({c}, {elems}), 1){off}"
    return f"jax.lax.broadcasted_iota(jnp.int32, ({elems}, {c}), 0){off} == {lanes}"


def _flat(w: "_KernelWriter", op: Op) -> tuple[TensorParam, Value, tuple[int, ...], int, bool]:
    """A flat gather's or scatter's tensor, index tile, the dims of the gather's result or the
    scatter's index (the one-hot's lanes are their minor axis), the resident row's length and
    whether it is walked by WINDOWs; refuses a row or a one-hot that does not fit VMEM."""
    _, ix = _entry(op)  # type: ignore[misc]
    p: TensorParam = op.attrs["tensor"]
    idx = ix.scalar
    assert idx is not None
    shape = _dims(w, (op.result if op.kind == "load" else idx).shape)
    rows = w.plan.axes[p.name][0].block
    windowed = rows > WINDOW
    _resident(w, op, p, rows)
    _fits(op, p, WINDOW if windowed else rows, shape[-1])
    return p, idx, shape, rows, windowed


def render_gather(w: "_KernelWriter", op: Op) -> str:
    return (_flat_gather if form(op) == "flat" else _minor_gather)(w, op)


def _flat_gather(w: "_KernelWriter", op: Op) -> str:
    """`x[idx]` of a 1-D `x`: a one-hot select over the resident row, [P, c] per index row; a
    row longer than one WINDOW is walked window by window over the span of each index row."""
    v = op.result
    p, idx, shape, rows, windowed = _flat(w, op)
    c = shape[-1]
    em = w.em
    k = v.id
    bits, back = wide(p.dtype, f"{p.name}_ref[...]")
    em.line("# gather along the lane axis: TPU has no lane gather, so a one-hot select over the "
            "resident row (exact: the bits of the one matching element)", op)
    em.line(f"lane{k} = jnp.clip({w.n(idx)}.astype(jnp.int32), 0, {p.shape[0] - 1})"
            "  # out-of-range indices: clamped")
    if not windowed:
        em.line(f"bits{k} = jnp.reshape({bits}, ({rows}, 1))")
    if len(shape) == 1:
        if windowed:
            one = _windows(w, p, f"jnp.reshape(lane{k}, (1, {c}))", c, k)
            return back.format(f"jnp.reshape({one}, ({c},))")
        em.line(f"hit{k} = {_hit(f'jnp.reshape(lane{k}, (1, {c}))', rows, c)}")
        return back.format(f"jnp.sum(jnp.where(hit{k}, bits{k}, 0), axis=0)")
    em.line(f"# a rank-{len(shape)} index tile: one [{WINDOW if windowed else rows}, {c}] one-hot per "
            "row of it, through VMEM scratch")
    src, dst = f"lanes{k}_ref", f"gather{k}_ref"
    w.scratch.append((src, shape, "i32"))
    w.scratch.append((dst, shape, "i32"))
    em.line(f"{src}[...] = jnp.broadcast_to(lane{k}, {shape})")
    block, _ = _row_loop(w, shape[:-1], f"gather{k}")
    # leading positions indexed by scalars, the sublane by a 1-row slice: row r is [1, c]
    if windowed:
        em.line(f"{dst}[{block}] = {_windows(w, p, f'{src}[{block}]', c, k)}")
    else:
        em.line(f"hit = {_hit(f'{src}[{block}]', rows, c)}")
        em.line(f"{dst}[{block}] = jnp.sum(jnp.where(hit, bits{k}, 0), axis=0, keepdims=True)")
    _end_loop(w, math.prod(shape[:-1]), f"gather{k}")
    return back.format(f"{dst}[...]")


def _windows(w: "_KernelWriter", p: TensorParam, row: str, c: int, k: int) -> str:
    """Emits the walk over the aligned WINDOWs of `p` spanned by one index row ([1, c], in
    range); returns the name of its [1, c] int32 bits. Each lane matches in exactly one window,
    so summing the windows' selects is exact; a contiguous row (`start + tk.index`, the jagged
    case) spans one or two windows."""
    em = w.em
    bits, _ = wide(p.dtype, f"{p.name}_ref[pl.ds(base, {WINDOW})]")
    em.line(f"row{k} = {row}")
    em.line(f"w0_{k} = jnp.min(row{k}) - jax.lax.rem(jnp.min(row{k}), {WINDOW})")
    em.line(f"def window{k}(i, acc):")
    em.indent += 1
    em.line(f"base = pl.multiple_of(w0_{k} + i * {WINDOW}, {WINDOW})")
    em.line(f"seg = jnp.reshape({bits}, ({WINDOW}, 1))")
    em.line(f"hit = {_hit(f'row{k}', WINDOW, c, off=' + base')}")
    em.line("return acc + jnp.sum(jnp.where(hit, seg, 0), axis=0, keepdims=True)")
    em.indent -= 1
    em.line(f"one{k} = jax.lax.fori_loop(0, jax.lax.div(jnp.max(row{k}) - w0_{k}, {WINDOW}) + 1, "
            f"window{k}, jnp.zeros((1, {c}), jnp.int32))")
    return f"one{k}"


def _minor_gather(w: "_KernelWriter", op: Op) -> str:
    """`x[tm, idx]` gathered along the minor axis: the one-hot [N, c] of the index is built
    once; each row of the block (a dynamic row load, its sublane squeezed) is selected by it."""
    axis, ix = _entry(op)  # type: ignore[misc]
    p: TensorParam = op.attrs["tensor"]
    v = op.result
    idx = ix.scalar
    assert idx is not None
    shape = _dims(w, v.shape)
    c = shape[-1]
    n = w.plan.axes[p.name][axis].block
    _resident(w, op, p, n * (shape[0] if len(shape) > 1 else 1))
    _fits(op, p, n, c)
    em = w.em
    k = v.id
    em.line("# gather along the minor (lane) axis: TPU has no lane gather, so each row is a "
            "one-hot select (exact: the bits of the one matching element)", op)
    lanes = f"jnp.reshape(jnp.clip({w.n(idx)}.astype(jnp.int32), 0, {p.shape[axis] - 1}), (1, {c}))"
    em.line(f"hit{k} = {_hit(lanes, n, c)}  # out-of-range indices: clamped")
    if len(shape) == 1:  # one row at device scalars
        bits, back = wide(p.dtype, w.ref_index(op, gather=":"))
        return back.format(f"jnp.sum(jnp.where(hit{k}, jnp.reshape({bits}, ({n}, 1)), 0), axis=0)")
    sub = axis - 1
    ax = w.plan.axes[p.name][sub]
    e = op.attrs["index"][sub]
    base = w.begin(e.tile) if ax.kind == "resident" and e.kind == "tile" else "0"
    rows = shape[0]
    # 32-bit: a row loads alone; 16/8-bit: the aligned group of 16/32 rows holding it
    pack = 1 if DTYPE_BITS[p.dtype] == 32 else 8 * 32 // DTYPE_BITS[p.dtype]
    dst = f"gather{k}_ref"
    w.scratch.append((dst, shape, "i32"))
    whole = pack > 1 and rows % pack != 0  # a packed block of other than whole groups
    if whole:  # read once, widened: row r is picked from it
        grp, back = wide(p.dtype, w.ref_index(op, gather=":", row=(sub, f"pl.ds({base}, {rows})")))
        em.line(f"group{k} = {grp}")
    em.line(f"def gather{k}(r, carry):")
    em.indent += 1
    if pack == 1:  # a 32-bit row loads alone at a dynamic sublane offset
        bits, back = wide(p.dtype, w.ref_index(op, gather=":", row=(sub, f"{base} + r")))
    else:  # a 16/8-bit one only in its aligned packed group: widen it, pick row r (exact)
        at = "r" if whole else f"jax.lax.rem(r, {pack})"
        if not whole:
            g = f"pl.ds(pl.multiple_of({base} + r - {at}, {pack}), {pack})"
            grp, back = wide(p.dtype, w.ref_index(op, gather=":", row=(sub, g)))
            em.line(f"group{k} = {grp}")
        em.line(f"pick = jax.lax.broadcasted_iota(jnp.int32, group{k}.shape, 0) == {at}")
        bits = f"jnp.sum(jnp.where(pick, group{k}, 0), axis=0)"
    em.line(f"col = jnp.reshape({bits}, ({n}, 1))")
    em.line(f"{dst}[pl.ds(r, 1), :] = jnp.sum(jnp.where(hit{k}, col, 0), axis=0, keepdims=True)")
    _end_loop(w, rows, f"gather{k}")
    return back.format(f"{dst}[...]")


def render_scatter(w: "_KernelWriter", op: Op, x: str) -> None:
    """A store or atomic into a 1-D output through an index tile of any rank: per index row, a
    one-hot [c, P] of its in-range lanes reduced over the lanes (sum for add, max/min, and for
    a store the largest bits among duplicates: one of the values), applied where some lane hit.
    Lanes of the index tile past a tile's end (a ragged block) write nothing."""
    p, idx, shape, rows, windowed = _flat(w, op)
    c = shape[-1]
    v = op.operands[0]
    at = op.attrs.get("atomic")
    em = w.em
    k = f"s{v.id}_{len(w.em.lines)}"
    em.line(f"# {'kd.atomic_' + at if at else 'a scatter'} into a 1-D output: TPU has no atomics "
            "and no lane scatter; a one-hot of the lanes", op)
    em.line("# reduced over lanes, applied to the resident block (grid steps run in order on "
            "one core: all axes \"arbitrary\")")
    conds = [w.lanes_in_range(d, idx.shape, a) for a, d in enumerate(idx.shape)
             if isinstance(d, TileVar)]
    em.line(f"lane_{k} = {w.n(idx)}.astype(jnp.int32)")
    conds += [f"lane_{k} >= 0", f"lane_{k} < {p.shape[0]}"]
    # lanes past a tile's end and indices outside the axis: index -1, no write
    lane = f"jnp.where({' & '.join(f'({c_})' for c_ in conds)}, lane_{k}, -1)"
    narrow = DTYPE_BITS[p.dtype] < 32
    vdt = ("i32" if p.dtype in INT + ("bool",) else "f32") if narrow else p.dtype
    if len(shape) == 1:
        _scatter_cols(w, p, at, k, f"jnp.reshape({lane}, ({c}, 1))", f"jnp.reshape({x}, ({c}, 1))",
                      vdt, c, rows, windowed)
        return
    lref, vref = f"lanes_{k}_ref", f"vals_{k}_ref"
    w.scratch.append((lref, shape, "i32"))
    w.scratch.append((vref, shape, vdt))
    em.line(f"{lref}[...] = jnp.broadcast_to({lane}, {shape})")
    val = x if not narrow else f"({x}).astype({JNP[vdt]})"
    em.line(f"{vref}[...] = jnp.broadcast_to({val}, {shape})")
    em.line(f"# a rank-{len(shape)} index tile: its rows in order, one "
            f"[{c}, {WINDOW if windowed else rows}] one-hot each")
    _, sq = _row_loop(w, shape[:-1], f"scatter_{k}")
    _scatter_cols(w, p, at, k, f"jnp.reshape({lref}[{sq}], ({c}, 1))",
                  f"jnp.reshape({vref}[{sq}], ({c}, 1))", vdt, c, rows, windowed)
    _end_loop(w, math.prod(shape[:-1]), f"scatter_{k}")


def _scatter_cols(w: "_KernelWriter", p: TensorParam, at: str | None, k: str, lane: str, col: str,
                  vdt: str, c: int, rows: int, windowed: bool) -> None:
    """One index row ([c, 1] lanes, -1 where nothing is written) into the output; an output
    over one WINDOW is updated window by window over the row's span."""
    if not windowed:
        return _scatter_row(w, p, at, k, lane, col, vdt, c, rows)
    em = w.em
    em.line(f"col_{k} = {lane}")
    em.line(f"val_{k} = {col}")
    em.line(f"lo_{k} = jnp.min(jnp.where(col_{k} >= 0, col_{k}, {p.shape[0]}))")
    em.line(f"w0_{k} = lo_{k} - jax.lax.rem(lo_{k}, {WINDOW})")
    em.line(f"hi_{k} = jnp.max(col_{k})  # -1: no lane writes, no window")
    em.line(f"def window_{k}(i, carry):")
    em.indent += 1
    em.line(f"base = pl.multiple_of(w0_{k} + i * {WINDOW}, {WINDOW})")
    _scatter_row(w, p, at, k, f"col_{k}", f"val_{k}", vdt, c, WINDOW,
                 ref=f"{p.name}_ref[pl.ds(base, {WINDOW})]", off=" + base")
    em.line("return carry")
    em.indent -= 1
    em.line(f"jax.lax.fori_loop(0, jnp.where(hi_{k} >= 0, jax.lax.div(hi_{k} - w0_{k}, {WINDOW}) + 1, 0), "
            f"window_{k}, 0)")


def _scatter_row(w: "_KernelWriter", p: TensorParam, at: str | None, k: str, lane: str, col: str,
                 vdt: str, c: int, rows: int, ref: str | None = None, off: str = "") -> None:
    em = w.em
    em.line(f"hit_{k} = {_hit(lane, rows, c, off=off, across=True)}")
    em.line(f"any_{k} = jnp.any(hit_{k}, axis=0)")
    ref = ref or f"{p.name}_ref[...]"
    if at == "add":
        upd = f"jnp.sum(jnp.where(hit_{k}, {col}, 0), axis=0).astype({JNP[p.dtype]})"
        new = f"{ref} + upd_{k}"
    elif at in ("max", "min"):
        fill = ("-jnp.inf" if at == "max" else "jnp.inf") if vdt == "f32" else (
            BITS_MIN if at == "max" else "jnp.int32(2147483647)")
        upd = f"jnp.{at}(jnp.where(hit_{k}, {col}, {fill}), axis=0).astype({JNP[p.dtype]})"
        new = f"jnp.{'maximum' if at == 'max' else 'minimum'}({ref}, upd_{k})"
    else:
        bits, back = wide(p.dtype, col)
        upd = back.format(f"jnp.max(jnp.where(hit_{k}, {bits}, {BITS_MIN}), axis=0)")
        new = f"upd_{k}"
    em.line(f"upd_{k} = {upd}")
    em.line(f"{ref} = jnp.where(any_{k}, {new}, {ref})")
