"""Gathers (`emb[ids[tb], td]`, `x[t.index + 1, :]`), scatters and atomics on TPU.

A vector register cannot be an address on TPU, and Mosaic has no vector gather from VMEM. A
gather along a non-minor axis is rendered as a loop over the lanes of the index tile: the index
expression is recomputed per lane as scalar code (the index tensors it reads go whole to SMEM,
where a scalar can be read at a computed address), clamped into the axis, and each lane's row is
a dynamic-slice load from the resident table into a VMEM scratch block. That is exact for every
dtype and every value (NaN, inf, -0.0), unlike a one-hot matmul, which spreads a NaN or inf of
one row to every row (0 * inf). Scatters and atomics (`out[ids[tb], td] = v`,
`kd.atomic_add`) update an output block resident for the whole grid, whose axes all run
"arbitrary" (in order, on one core): TPU has no atomics. A gather along a lane axis (a 1-D
tensor through an index of any rank, the minor axis of a wider one through a 1-D index) takes
a one-hot select instead (onehot.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import DTYPE_BITS, Index, KernelIR, Op, TensorParam, Value, index_values

from . import bounds, onehot
from .syntax import JNP

if TYPE_CHECKING:
    from .plan import Plan
    from .render import _KernelWriter

INT = ("i32", "i16", "i8", "u8")
_INFIX = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^",
          "shl": "<<", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_CALL = {"max": "jnp.maximum", "min": "jnp.minimum", "shr": "jnp.right_shift"}
# ops of an index tile that recompute lane by lane as scalars
_LANEWISE = ("iota", "arange", "load", "cast", "broadcast", "where", "neg", "floordiv", "mod",
             *_INFIX, *_CALL)


# kd.atomic_* as a read-modify-write of the resident block: {0} the ref, {1} the value
ATOMIC = {"add": "{0} + {1}", "max": "jnp.maximum({0}, {1})", "min": "jnp.minimum({0}, {1})"}


def shared_outputs(ir: KernelIR) -> set[str]:
    """Outputs that atomics or scatters update (through an index tile, or at a device scalar
    that is not a `kd.grid` index: `out[ids[g], td] = v`): their block is the whole tensor,
    resident for the whole grid, and every grid axis is "arbitrary": TPU has no atomics, but
    the steps of such a grid run in order on one core, so each update sees the ones before."""
    def data_dyn(ix: Index) -> bool:
        op = ix.scalar.op if ix.kind == "dyn" and ix.scalar is not None else None
        return ix.kind == "dyn" and not (op is not None and op.kind == "tile_begin"
                                         and op.attrs["tile"].block.pinned == 1)

    return {op.attrs["tensor"].name for op in ir.body.walk()
            if op.kind == "store" and (op.attrs.get("atomic") or gather_entry(op) is not None
                                       or any(data_dyn(ix) for ix in op.attrs["index"]))}


def dyn_row(plan: "Plan", op: Op) -> int | None:
    """The axis of a store into a shared output at a device scalar on the sublane axis."""
    p: TensorParam = op.attrs["tensor"]
    axis = len(p.shape) - 2
    if p.name not in plan.shared or axis < 0 or op.attrs["index"][axis].kind != "dyn":
        return None
    return axis


def render_dyn_row(w: "_KernelWriter", op: Op, x: str) -> None:
    """`out[r, td] (op)= v` at a device scalar r on the sublane axis of a shared output: a store
    at a dynamic sublane offset must be aligned (Mosaic), so the aligned group of rows holding
    r is rewritten, row r updated; lanes of a ragged `kd.tile(begin, end)` keep their value."""
    axis = dyn_row(w.plan, op)
    assert axis is not None
    p: TensorParam = op.attrs["tensor"]
    v = op.operands[0]
    index = op.attrs["index"]
    pos = sum(1 for e in index[:axis] if e.kind not in ("int", "dyn"))
    rows = scatter_rows(p, axis)
    r = w.n(index[axis].scalar)  # type: ignore[arg-type]
    em = w.em
    em.line(f"# row {r} of the resident `{p.name}`: its aligned group of {rows} rows is "
            "rewritten (a dynamic sublane store must be aligned)", op)
    em.line(f"base = pl.multiple_of({r} - jax.lax.rem({r}, {rows}), {rows})")
    ref = w.ref_index(op, row=(axis, f"pl.ds(base, {rows})"))
    em.line(f"group = {ref}")
    val = f"jnp.expand_dims({x}, {pos})"
    at = op.attrs.get("atomic")
    new = ATOMIC[at].format("group", val) if at else val
    cond = f"jax.lax.broadcasted_iota(jnp.int32, group.shape, {pos}) == {r} - base"
    dims = [ix for ix in index if ix.kind not in ("int", "dyn")]
    shape = list(v.shape)
    shape.insert(pos, 1)
    for a, ix in enumerate(dims):
        if ix.kind == "tile" and ix.tile.bounded:
            cond += f" & ({w.lanes_in_range(ix.tile, tuple(shape), a + (a >= pos))})"
    em.line(f"{ref} = jnp.where({cond}, {new}, group)")


def lane_form(op: Op) -> bool:
    """A gather along a lane axis, rendered as a one-hot select over the resident row with a
    vector index (onehot.py): from / into a 1-D tensor through an index of any rank, or from
    the minor axis of a wider one through a 1-D index."""
    return onehot.form(op) is not None


def gather_entry(op: Op) -> tuple[int, Index] | None:
    """(axis, entry) of the load's or store's gather index, if it has one."""
    return next(((a, ix) for a, ix in enumerate(op.attrs["index"]) if ix.kind == "gather"), None)


def _lane_loads(v: Value, out: list[Op]) -> bool:
    """Whether `v` recomputes per lane; collects the loads it reads (into `out`)."""
    if v.rank == 0:
        return True  # a scalar the kernel body has already computed
    op = v.op
    if op is None or op.kind not in _LANEWISE or v.rank != 1:
        return False
    if op.kind == "load":
        index = op.attrs["index"]
        if sum(1 for ix in index if ix.kind in ("tile", "full", "gather")) != 1:
            return False
        out.append(op)  # a gather of a gather (moe_matmul_ogs's `order[start + i]`): nested reads
        return all(_lane_loads(ix.scalar, out) for ix in index if ix.kind == "gather")
    return all(_lane_loads(x, out) for x in op.operands)


def smem_index_inputs(ir: KernelIR) -> set[str]:
    """Inputs that gather index tiles read: they go whole to SMEM (render checks that nothing
    else reads them as vectors)."""
    names: set[str] = set()
    for op in ir.body.walk():
        g = gather_entry(op) if op.kind in ("load", "store") else None
        if g is not None and not lane_form(op):
            loads: list[Op] = []
            if _lane_loads(g[1].scalar, loads):  # type: ignore[arg-type]
                names.update(ld.attrs["tensor"].name for ld in loads)
    return names


def lane_only_values(ir: KernelIR) -> set[int]:
    """Ids of the rank-1 values that only feed gather indices: they are recomputed per lane,
    never rendered as vectors."""
    feeders: set[int] = set()
    for op in ir.body.walk():
        g = gather_entry(op) if op.kind in ("load", "store") else None
        if g is not None and not lane_form(op):
            stack = [g[1].scalar]
            while stack:
                v = stack.pop()
                if v is None or v.rank == 0 or v.id in feeders or v.op is None:
                    continue
                feeders.add(v.id)
                stack.extend(v.op.operands + index_values(v.op))  # a nested gather's index
    users: dict[int, list[Op]] = {}
    for op in ir.body.walk():
        for v in op.operands:
            users.setdefault(v.id, []).append(op)
    only = set(feeders)
    changed = True
    while changed:  # a feeder that a vector op or a store also uses is rendered as a vector
        changed = False
        for vid in list(only):
            if not all(u.results and all(r.id in only for r in u.results)
                       for u in users.get(vid, [])):
                only.discard(vid)
                changed = True
    return only


def vector_read_inputs(ir: KernelIR) -> set[str]:
    """Inputs some load reads as a vector (a value also used by vector code, not only by the
    lane loops of gathers): an index tensor among them is passed twice (`Plan.twins`), as
    Helion's segment_reduction reads its segment ids both as the scatter's index and in its
    scan (`indices[tile_e]`)."""
    lane_only = lane_only_values(ir)
    return {op.attrs["tensor"].name for op in ir.body.walk()
            if op.kind == "load" and op.result.rank and op.result.id not in lane_only}


def check_smem(ir: KernelIR, smem: set[str], smem_max: int) -> None:
    """Tensors whole in SMEM (`Plan.smem` and `Plan.twins`' copies) must be 32-bit and fit it."""
    for op in ir.body.walk():
        if op.kind != "load" or op.attrs["tensor"].name not in smem:
            continue
        p: TensorParam = op.attrs["tensor"]
        n = 1
        for d in p.shape:
            n *= d
        if n > smem_max or DTYPE_BITS[p.dtype] != 32:
            raise ConfigError(
                f"gather index tensor `{p.name}` ({p.dtype}, {n} elements) does not fit the "
                f"TPU rendering: index tensors go whole to SMEM, which takes at most {smem_max} "
                "32-bit elements", op.loc,
                "pass int32 indices, split the call into chunks of at most "
                f"{smem_max} indices, or use another backend")


def lane_expr(w: "_KernelWriter", v: Value, lane: str) -> str:
    """`v[lane]` as scalar jnp code (see `_lane_loads` for what it can be)."""
    if v.rank == 0:
        return w.n(v)
    op = v.op
    assert op is not None
    k, a = op.kind, op.attrs
    if k == "iota":
        return f"({w.begin(a['tile'])} + {lane})"
    if k == "arange":
        return lane
    if k == "load":
        p: TensorParam = a["tensor"]
        parts = []
        for ix, n in zip(a["index"], p.shape):
            if ix.kind == "tile":  # lanes past the axis (a ragged block) read its last element
                parts.append(f"jnp.minimum({w.begin(ix.tile)} + {lane}, {n - 1})")
            elif ix.kind == "full":
                parts.append(f"jnp.minimum({lane}, {n - 1})")
            elif ix.kind == "dyn":
                parts.append(w.n(ix.scalar))  # type: ignore[arg-type]
            elif ix.kind == "gather":  # clamped as render_gather clamps a row
                parts.append(f"jnp.clip({lane_expr(w, ix.scalar, lane)}, 0, {n - 1})")  # type: ignore[arg-type]
            else:
                parts.append(str(ix.value))
        ref = f"{p.name}_sref" if p.name in w.plan.twins else f"{p.name}_ref"  # SMEM copy
        return f"{ref}[{', '.join(parts)}]"
    xs = [lane_expr(w, x, lane) for x in op.operands]
    if k == "cast":
        return f"{xs[0]}.astype({JNP[a['dtype']]})"
    if k == "broadcast":
        return xs[0]
    if k == "neg":
        return f"(-{xs[0]})"
    if k == "where":
        return f"jnp.where({xs[0]}, {xs[1]}, {xs[2]})"
    if k in ("floordiv", "mod"):
        return (bounds.floordiv if k == "floordiv" else bounds.mod)(xs[0], xs[1])
    if k in _INFIX:
        return f"({xs[0]} {_INFIX[k]} {xs[1]})"
    return f"{_CALL[k]}({xs[0]}, {xs[1]})"


def check_form(ir: KernelIR) -> None:
    """A gather the TPU rendering cannot take: say why and what to write."""
    for op in ir.body.walk():
        g = gather_entry(op) if op.kind in ("load", "store") else None
        if g is None or lane_form(op):
            continue
        axis, ix = g
        p: TensorParam = op.attrs["tensor"]
        if ix.scalar.rank > 1:  # type: ignore[union-attr]
            raise ConfigError(
                f"the pallas backend cannot {'gather from' if op.kind == 'load' else 'scatter into'}"
                f" `{p.name}` through a rank-{ix.scalar.rank} index tile: its TPU "  # type: ignore[union-attr]
                "gathers of rows are a loop over the lanes of a 1-D index (a row each); a one-hot "
                "select takes an index of any rank only along the lane axis of a 1-D tensor",
                op.loc,
                "flatten the tensor and index it through flat indices (`x.view(-1)`, "
                "`kd.load(x_flat, [rows[:, :, None] * M + tm.index[None, None, :]])`), gather "
                "rows through a 1-D index, or use the triton backend")
        if axis == len(p.shape) - 1:
            raise ConfigError(
                f"the pallas backend cannot {'gather' if op.kind == 'load' else 'scatter'} "
                f"along the minor (lane) axis of `{p.name}` here: TPU has no lane gather or "
                "scatter in VMEM; its one-hot select takes a load through a 1-D index with at "
                "most the sublane axis as a block", op.loc,
                f"gather rows: make the gathered axis a leading one (pass `{p.name}` with a "
                "trailing axis of 1, `x[:, None]`, and index `x2[idx, 0]`), or use another backend")
        if not _lane_loads(ix.scalar, []):  # type: ignore[arg-type]
            raise ConfigError(
                f"the pallas backend cannot recompute the index tile of `{p.name}[...]` lane by "
                "lane", op.loc, "compute the index from loads of index tensors, `t.index`, "
                "integer arithmetic and torch.where; or use another backend")


def render_gather(w: "_KernelWriter", op: Op) -> str:
    """Emits the lane loop of a gather load into scratch; returns the expression reading it."""
    axis, ix = gather_entry(op)  # type: ignore[misc]
    p: TensorParam = op.attrs["tensor"]
    v = op.result
    pos = sum(1 for e in op.attrs["index"][:axis] if e.kind not in ("int", "dyn"))
    ref = f"gather{v.id}_ref"
    shape = tuple(w.plan.eb(d) if not isinstance(d, int) else d for d in v.shape)
    w.scratch.append((ref, shape, scratch_dtype(p, axis)))
    em = w.em
    em.line("# gather: a vector register cannot be an address on TPU, so the index tile is "
            "recomputed lane by lane", op)
    em.line("# as scalars (index tensors whole in SMEM) and each lane's row is a dynamic-slice "
            "load into VMEM")
    em.line(f"def gather{v.id}(lane, carry):")
    em.indent += 1
    em.line(f"row = jnp.clip({lane_expr(w, ix.scalar, 'lane')}, 0, {p.shape[axis] - 1})"
            "  # out-of-range indices: clamped, no OOB read")
    dst = ", ".join("pl.ds(lane, 1)" if i == pos else ":" for i in range(v.rank))
    rows = packed_rows(p, axis)
    if rows == 1:
        em.line(f"{ref}[{dst}] = {w.ref_index(op, gather='pl.ds(row, 1)')}")
    else:  # see packed_rows: the aligned group of rows, widened exactly, picks row `row`
        wide = "jnp.int32" if p.dtype in INT + ("bool",) else "jnp.float32"
        em.line(f"base = pl.multiple_of(row - jax.lax.rem(row, {rows}), {rows})")
        em.line(f"group = {w.ref_index(op, gather=f'pl.ds(base, {rows})')}.astype({wide})")
        if wide == "jnp.float32":  # pick the bits: a float sum would turn -0.0 into 0.0
            em.line("group = jax.lax.bitcast_convert_type(group, jnp.int32)")
        em.line(f"pick = jax.lax.broadcasted_iota(jnp.int32, group.shape, {pos}) == row - base")
        em.line(f"one = jnp.sum(jnp.where(pick, group, 0), axis={pos}, keepdims=True)")
        if wide == "jnp.float32":
            em.line("one = jax.lax.bitcast_convert_type(one, jnp.float32)")
        em.line(f"{ref}[{dst}] = one")
    em.line("return carry")
    em.indent -= 1
    em.line(f"jax.lax.fori_loop(0, {shape[pos]}, gather{v.id}, 0)")
    return f"{ref}[...]" if rows == 1 else f"{ref}[...].astype({JNP[p.dtype]})"


def packed_rows(p: TensorParam, axis: int) -> int:
    """Rows of `p`'s gathered axis that one dynamic load must take. A dynamic row offset on
    the sublane dim must be provably aligned: a multiple of the packing for a 16- or 8-bit
    array (Mosaic: "cannot statically prove that index ... is a multiple of 8"), and of 8 for a
    32-bit one once the lane dim's offset is dynamic too ("dynamic load with unaligned
    indices": `A[start + tm.index, tk]` in a grouped GEMM). Such a gather loads the aligned
    group of rows holding the row (the axis is padded to whole groups, plan.py), widens it to
    32 bits (exact) and picks the row's bits; leading axes load one row."""
    if axis != len(p.shape) - 2:
        return 1
    return 8 * 32 // DTYPE_BITS[p.dtype]


def scatter_rows(p: TensorParam, axis: int) -> int:
    """Rows of the aligned group a scatter into the sublane axis rewrites (Mosaic: a store at
    a dynamic sublane offset must be provably aligned); 1 on a leading axis."""
    return 8 * 32 // DTYPE_BITS[p.dtype] if axis == len(p.shape) - 2 else 1


def scratch_dtype(p: TensorParam, axis: int) -> str:
    if packed_rows(p, axis) == 1 or DTYPE_BITS[p.dtype] == 32:
        return p.dtype
    return "i32" if p.dtype in INT + ("bool",) else "f32"


def render_scatter(w: "_KernelWriter", op: Op, x: str) -> None:
    """A store or atomic through an index tile: the values go to VMEM scratch, then a loop
    over the in-range lanes of the index tile writes (or read-modify-writes) one row each,
    in lane order, skipping indices outside the axis."""
    axis, ix = gather_entry(op)  # type: ignore[misc]
    p: TensorParam = op.attrs["tensor"]
    v = op.operands[0]
    pos = sum(1 for e in op.attrs["index"][:axis] if e.kind not in ("int", "dyn"))
    ref = f"scatter{op.operands[0].id}_{len(w.scratch)}_ref"
    shape = tuple(w.plan.eb(d) if not isinstance(d, int) else d for d in v.shape)
    # a 16/8-bit row cannot be read alone at a dynamic sublane offset: the values wait in a
    # 32-bit scratch (an exact widening) and each row narrows back as it is written
    narrow = DTYPE_BITS[p.dtype] < 32
    wide = "i32" if p.dtype in INT + ("bool",) else "f32"
    w.scratch.append((ref, shape, wide if narrow else p.dtype))
    idx = ix.scalar
    assert idx is not None
    d = idx.shape[0]
    count = str(d) if isinstance(d, int) else f"jnp.minimum({w.plan.eb(d)}, {w.end(d)} - {w.begin(d)})"
    at = op.attrs.get("atomic")
    em = w.em
    what = f"kd.atomic_{at}" if at else "a scatter"
    em.line(f"# {what} through an index tile: TPU has no atomics and no vector scatter; the grid "
            "steps run in order", op)
    em.line(f"# on one core (all axes \"arbitrary\"), so each lane's row of the resident "
            f"`{p.name}` block is updated in turn")
    em.line(f"{ref}[...] = {x}" if not narrow else f"{ref}[...] = ({x}).astype({JNP[wide]})")
    fn = f"scatter{len(w.scratch)}"
    em.line(f"def {fn}(lane, carry):")
    em.indent += 1
    em.line(f"row = {lane_expr(w, idx, 'lane')}")
    em.line(f"@pl.when((row >= 0) & (row < {p.shape[axis]}))  # out-of-range indices: no write")
    em.line(f"def _{fn}():")
    em.indent += 1
    src = f"{ref}[{', '.join('pl.ds(lane, 1)' if i == pos else ':' for i in range(v.rank))}]"
    if narrow:
        src = f"{src}.astype({JNP[p.dtype]})"
    rows = scatter_rows(p, axis)
    if rows == 1:
        dst = w.ref_index(op, gather="pl.ds(row, 1)")
        em.line(f"{dst} = {ATOMIC[at].format(dst, src) if at else src}")
    else:  # a store at a dynamic sublane offset must be aligned: update the aligned group
        em.line(f"base = pl.multiple_of(row - jax.lax.rem(row, {rows}), {rows})")
        dst = w.ref_index(op, gather=f"pl.ds(base, {rows})")
        em.line(f"group = {dst}")
        em.line(f"pick = jax.lax.broadcasted_iota(jnp.int32, group.shape, {pos}) == row - base")
        new = ATOMIC[at].format("group", src) if at else src
        em.line(f"{dst} = jnp.where(pick, {new}, group)")
    em.indent -= 1
    em.line("return carry")
    em.indent -= 1
    em.line(f"jax.lax.fori_loop(0, {count}, {fn}, 0)")
