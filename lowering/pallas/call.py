"""The host-side wrapper of a rendered Pallas kernel: grid, BlockSpecs and their index maps,
scratch and compiler parameters."""
from __future__ import annotations

from typing import Any

from kernel_dsl.ir import KernelIR

from . import bounds
from .plan import AxisPlan, Plan
from .syntax import JNP, tup

Scratch = tuple[str, tuple[int, ...], str]  # (ref name, VMEM shape, IR dtype)


def index_map(plan: Plan, axes: list[AxisPlan], nargs: int) -> str:
    params = [f"i{n}" for n in range(len(plan.grid_tiles))] + (["k"] if plan.loop_axis else [])
    parts = []
    for ax in axes:
        if ax.kind == "grid":
            i = f"i{plan.grid_tiles.index(ax.tile)}"  # type: ignore[arg-type]
            parts.append(f"jax.lax.div({i}, {ax.pick})" if ax.pick else i)
        elif ax.kind == "loop":
            expr = ""
            for t in ax.loops:
                ph = plan.phase_of(t)
                assert ph is not None
                here = f"jnp.clip(k - {ph.offset}, 0, {ph.steps - 1})" if ph.offset or \
                    ph.steps != plan.loop_steps else "k"
                if t.dynamic:  # a skipped step keeps the last visited block: no DMA
                    last = f"jnp.maximum({bounds.trips(t, plan.grid_tiles, plan.blocks)} - 1, 0)"
                    here = f"jnp.minimum({here}, {last})"
                expr = here if not expr else f"jnp.where(k >= {ph.offset}, {here}, {expr})"
            parts.append(expr)
        else:
            parts.append("0")
    return f"lambda {', '.join(params)}: {tup(parts)}"


def twins_of(ir: KernelIR, plan: Plan) -> list[Any]:
    """The inputs passed a second time, whole in SMEM (`Plan.twins`), in argument order."""
    return [p for p in ir.inputs if p.name in plan.twins]


def pallas_call(ir: KernelIR, plan: Plan, scratch: list[Scratch],
                 vmem_limit: bool) -> list[str]:
    """The host-side wrapper: grid, BlockSpecs, scratch and compiler parameters."""
    ins, outs = ir.inputs, ir.outputs
    # an output block that several steps of a grid axis fill row by row (a kd.grid index on
    # its sublane dim) must see those steps on one core: that axis is "arbitrary"
    shared = {plan.grid_tiles.index(a.tile) for p in outs for a in plan.axes[p.name]
              if a.pick and a.tile is not None}
    if plan.shared:  # atomics and scatters: read-modify-write of one resident block, in order
        shared = set(range(len(ir.grid)))
    sem = ["arbitrary" if i in shared else "parallel" for i in range(len(ir.grid))] + \
        (["arbitrary"] if plan.loop_axis else [])
    nargs = len(plan.grid)

    def spec(p: Any) -> str:
        if p.name in plan.smem:  # read only as scalars (indices, offsets): whole, in SMEM
            return "pl.BlockSpec(memory_space=pltpu.SMEM)"
        axes = plan.axes[p.name]
        blocks = tup("None" if a.squeezed else a.block for a in axes)
        return f"pl.BlockSpec({blocks}, {index_map(plan, axes, nargs)})"

    params = f"dimension_semantics={tuple(sem)!r}"
    if vmem_limit:
        params += ", vmem_limit_bytes=VMEM_LIMIT_BYTES"
    args = ", ".join(p.name for p in ins)
    twins = twins_of(ir, plan)  # index tensors also read as vectors: again, whole in SMEM
    call_args = ", ".join([p.name for p in ins] + [p.name for p in twins])
    order = [outs.index(p) for p in ir.returns]  # pallas_call gives allocation order
    in_order = order == list(range(len(outs)))
    return [
        f"def {ir.name}({args}{', ' if args else ''}*, interpret=False):",
        "    return pl.pallas_call(" if in_order else "    outs = pl.pallas_call(",
        f"        {ir.name}_kernel,",
        f"        grid={tup(plan.grid)},",
        "        in_specs=[",
        *[f"            {spec(p)},  # {p.name}" for p in ins],
        *[f"            pl.BlockSpec(memory_space=pltpu.SMEM),  # {p.name} (lane reads)" for p in twins],
        "        ],",
        "        out_specs=[",
        *[f"            {spec(p)},  # {p.name}" for p in outs],
        "        ],",
        "        out_shape=[",
        *[f"            jax.ShapeDtypeStruct({tuple(p.shape)}, {JNP[p.dtype]})," for p in outs],
        "        ],",
        "        scratch_shapes=[",
        *[f"            pltpu.VMEM({tup(shape)}, {JNP[dt]}),  # {name}" for name, shape, dt in scratch],
        "        ],",
        f"        compiler_params=pltpu.CompilerParams({params}),",
        "        interpret=interpret,",
        f"    )({call_args})",
        *([] if in_order else [f"    return {tup(f'outs[{i}]' for i in order)}"]),
        "",
    ]
