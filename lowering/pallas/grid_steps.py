"""The grid-phase form of loops: each `kd.tile` loop runs as steps of a trailing grid axis `k`,
with carried values spilled to VMEM scratch between steps; also the first-step fill of outputs
that have an initial value (render.py writes the rest of the kernel)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_dsl.ir import Op, TileVar, Value

from . import bounds
from .call import Scratch
from .plan import LoopPhase
from .syntax import JNP, lit, tup

if TYPE_CHECKING:
    from .render import _KernelWriter


def _scratch_shape(w: "_KernelWriter", v: Value) -> tuple[tuple[int, ...], str, str]:
    """(VMEM shape, how to store a value into it, how to read it back) for a carried value.
    A vector (rank < 2, or unit leading dims as in attention's row statistics) lives as a
    column (n, 1): that round trip compiles on every TPU generation, where a (1, n) row needs a
    sublane gather that TPU v4 lacks."""
    dims = tuple(w.plan.eb(d) if isinstance(d, TileVar) else d for d in v.shape)
    n = 1
    for d in dims:
        n *= d
    if v.rank >= 2 and n != dims[-1]:
        return dims, "{}", "{}"
    return (n, 1), f"jnp.reshape({{}}, {tup((n, 1))})", f"jnp.reshape({{}}, {tup(dims)})"


def write_grid_phases(w: "_KernelWriter", scratch: list[Scratch]) -> None:
    """Loops as phases of the trailing grid axis `k`; carried values in VMEM scratch."""
    ir, plan, em = w.ir, w.plan, w.em
    segments: list[list[Op]] = [[]]
    for op in ir.body.ops:
        if op.kind == "loop":
            segments.append([])
        else:
            segments[-1].append(op)
    em.line(f"k = pl.program_id({len(ir.grid)})")
    pre = segments[0]
    for op in pre:  # pure code before the first loop is recomputed at every step (cheap)
        if op.kind != "store":
            w.op(op)
    start = em.open("@pl.when(k == 0)", "def _first_step():")
    init_outputs(w)
    for op in pre:
        if op.kind == "store":
            w.op(op)
    em.close(start, 2)
    saved: dict[int, tuple[str, str]] = {}  # value id -> (scratch ref, expression reading it)

    def spill(v: Value, ref: str, src: str) -> None:
        shape, store, read = _scratch_shape(w, v)
        dt = "i32" if v.dtype == "bool" else v.dtype
        if v.id not in saved:
            scratch.append((ref, shape, dt))
            back = ".astype(jnp.bool_)" if dt != v.dtype else ""
            saved[v.id] = (ref, read.format(f"{ref}[...]") + back)
        src = src if dt == v.dtype else f"{src}.astype({JNP[dt]})"
        em.line(f"{saved[v.id][0]}[...] = {store.format(src)}")

    def reload(values: list[Value]) -> None:
        for v in values:
            if v.id in saved and v.id not in w.names:
                w.names[v.id] = f"v{v.id}"
                em.line(f"v{v.id} = {saved[v.id][1]}")

    later_uses = _later_uses(segments, plan.phases)
    single = len(plan.phases) == 1
    for j, ph in enumerate(plan.phases):
        body = ph.op.body
        assert body is not None
        t = ph.tile
        it = f"i_{t!r}"
        w.tile_index[t.id] = it
        last = ph.offset + ph.steps - 1
        outer = dict(w.names)
        em.line(f"# loop over {t!r}: grid steps {ph.offset}..{last}, carried values in VMEM", ph.op)
        start = em.open(f"@pl.when(k == {ph.offset})", f"def _init_{t!r}():")
        reload(list(ph.op.operands))
        for init, arg in zip(ph.op.operands, body.args):
            spill(arg, f"{arg.hint or 'carry'}{arg.id}_ref", w.n(init))
        em.close(start, 2)
        w.names = dict(outer)
        if not single:  # the only loop owns every step and needs no guard
            em.open(f"@pl.when((k >= {ph.offset}) & (k <= {last}))", f"def _loop_{t!r}():")
        em.line(f"{it} = k" + (f" - {ph.offset}" if ph.offset else ""))
        before_visit = dict(w.names)
        if t.dynamic:  # kd.tile(0, end): steps past this grid point's trip count do nothing
            names = [f"i_{g!r}" for g in ir.grid]
            em.line(f"n_{t!r} = {bounds.trips(t, ir.grid, plan.blocks, names)}")
            em.open(f"@pl.when({it} < n_{t!r})", f"def _visit_{t!r}():")
        for arg in body.args:
            w.names[arg.id] = f"v{arg.id}"
            em.line(f"v{arg.id} = {saved[arg.id][1]}")
        reload([v for o in body.walk() for v in o.operands])
        w.ops(body.ops)
        for arg, y in zip(body.args, body.yields):
            spill(arg, saved[arg.id][0], w.n(y))
        if t.dynamic:
            em.indent -= 1
            w.names = before_visit  # what the skipped body defined is not defined after it
        for arg, r in zip(body.args, ph.op.results):
            saved[r.id] = saved[arg.id]
            w.names.pop(r.id, None)
        seg = segments[j + 1]
        start = em.open(f"@pl.when({it} == {ph.steps - 1})", f"def _after_{t!r}():")
        reload([v for o in seg for v in o.operands])
        w.ops(seg)
        for op in seg:
            for v in op.results:
                if v.id in later_uses.get(j + 1, set()):
                    spill(v, f"saved{v.id}_ref", w.n(v))
        em.close(start, 2)
        if not single:
            em.indent -= 1
        w.names = dict(outer)


def _later_uses(segments: list[list[Op]], phases: list[LoopPhase]) -> dict[int, set[int]]:
    """For segment j >= 1: ids of its values used by a later loop or segment."""
    out: dict[int, set[int]] = {}
    for j in range(1, len(segments)):
        defined = {r.id for op in segments[j] for r in op.results}
        used: set[int] = set()
        for ph in phases[j:]:
            used.update(v.id for v in ph.op.operands)
            used.update(v.id for o in ph.op.body.walk() for v in o.operands)  # type: ignore[union-attr]
        for seg in segments[j + 1:]:
            used.update(v.id for o in seg for v in o.operands)
        out[j] = defined & used
    return out


def init_outputs(w: "_KernelWriter") -> None:
    for p in w.ir.outputs:
        if p.init is not None:
            first = " & ".join(f"(i_{t!r} == 0)" for t in w.ir.grid)
            # a block that several steps fill row by row (a kd.grid index on its sublane dim)
            # is filled on the first of them only: later ones must keep the rows written
            picked = " & ".join(f"(jax.lax.rem(i_{a.tile!r}, {a.pick}) == 0)"
                                for a in w.plan.axes[p.name] if a.pick and a.tile is not None)
            start = 0
            if p.name in w.plan.shared and first:  # one block for the whole grid: fill it once
                start = w.em.open(f"@pl.when({first})", f"def _fill_{p.name}():")
            elif picked:
                start = w.em.open(f"@pl.when({picked})", f"def _fill_{p.name}():")
            w.em.line(f"{p.name}_ref[...] = jnp.full({p.name}_ref.shape, {lit(p.init)}, "
                      f"{p.name}_ref.dtype)")
            if start:
                w.em.close(start, 2)
