"""A store into a shared output at a device scalar on its lane (minor) axis.

Helion's split_k_barrier stores each split's partial product at `tmp[tm, tn, outer_k.id]`:
the split index is the minor axis of `tmp`. The output is shared (gather.shared_outputs: its
block is the whole tensor, resident in VMEM, every grid axis "arbitrary"), and Mosaic refuses
a store at a dynamic lane offset it cannot prove aligned ("E2003: cannot statically prove that
index in dimension 2 is a multiple of 128", libtpu 0.0.52). So, as gather.render_dyn_row does
for a sublane, the aligned group of lanes holding the element is read, the one lane replaced
(`where` on a lane iota) and the group written back whole: 128 lanes when the resident axis is
a multiple of 128 wider than that, else the whole axis.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_dsl.ir import Op, TensorParam

from .gather import ATOMIC, dyn_row

if TYPE_CHECKING:
    from .plan import Plan
    from .render import _KernelWriter

LANES = 128


def dyn_lane(plan: "Plan", op: Op) -> int | None:
    """The lane axis of a store into a shared output at a device scalar there, else None."""
    p: TensorParam = op.attrs["tensor"]
    axis = len(p.shape) - 1
    if p.name not in plan.shared or len(p.shape) < 2 or op.attrs["index"][axis].kind != "dyn" \
            or dyn_row(plan, op) is not None:
        return None
    return axis


def render(w: "_KernelWriter", op: Op, x: str) -> None:
    axis = dyn_lane(w.plan, op)
    assert axis is not None
    p: TensorParam = op.attrs["tensor"]
    index = op.attrs["index"]
    block = w.plan.axes[p.name][axis].block
    lanes = LANES if block > LANES and block % LANES == 0 else block
    r = w.n(index[axis].scalar)  # type: ignore[arg-type]
    em = w.em
    pos = sum(1 for e in index[:axis] if e.kind not in ("int", "dyn"))  # the group's lane dim
    em.line(f"# lane {r} of the resident `{p.name}`: its aligned group of {lanes} lanes is "
            "rewritten (a dynamic lane store must be aligned)", op)
    base = f"pl.multiple_of({r} - jax.lax.rem({r}, {lanes}), {lanes})" if lanes < block else "0"
    em.line(f"base = {base}")
    ref = w.ref_index(op, row=(axis, f"pl.ds(base, {lanes})"))
    em.line(f"group = {ref}")
    val = f"jnp.expand_dims({x}, {pos})"
    at = op.attrs.get("atomic")
    new = ATOMIC[at].format("group", val) if at else val
    cond = f"jax.lax.broadcasted_iota(jnp.int32, group.shape, {pos}) == {r} - base"
    dims = [ix for ix in index if ix.kind not in ("int", "dyn")]
    shape = list(op.operands[0].shape) + [1]
    for a, ix in enumerate(dims):  # lanes of a ragged `kd.tile(begin, end)` keep their value
        if ix.kind == "tile" and ix.tile.bounded:
            cond += f" & ({w.lanes_in_range(ix.tile, tuple(shape), a)})"
    em.line(f"{ref} = jnp.where({cond}, {new}, group)")
