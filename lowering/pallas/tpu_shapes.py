"""Shape ops a TPU generation's compiler rejects (docs/ir.md "Shape ops"), as BackendErrors
before Mosaic's own message.

libtpu 0.0.52, compile-only: tpu-v4's Mosaic cannot split a minor (lane) dim wider than 128
into a minor dim that is not a multiple of 128 (`[m, 256] -> [m, 128, 2]`, `[m, 300] -> [m, 3,
100]`, `[m, 256] -> [m, 256, 1]`: "infer-vector-layout: unsupported shape cast", "Sublane gather
not supported by this TPU generation"); tpu-v5e and newer compile them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import KernelIR, Op, TileVar, Value, shape_str
from kernel_dsl.tile_bounds import multiple_of

if TYPE_CHECKING:
    from .plan import Plan

LANES = 128


def check(ir: KernelIR, target: str, eb: Any) -> None:
    if target != "tpu-v4":
        return
    for op in ir.body.walk():
        if op.kind == "reduce":
            _check_minor_reduce(op, target, eb)
        if op.kind != "reshape":
            continue
        x, r = op.operands[0], op.result
        old, new = (eb(v.shape[-1]) if isinstance(v.shape[-1], TileVar) else v.shape[-1]
                    for v in (x, r))
        if old > LANES and new < old and new % LANES:
            raise BackendError(
                f"{target} cannot reshape a {shape_str(x.shape)} tile to {shape_str(r.shape)}: "
                f"its compiler does not split a minor dim of {old} lanes into one of {new} "
                "(Mosaic: unsupported shape cast)", op.loc,
                "keep the minor dim a multiple of 128 (for rope: "
                "`x.reshape([tm, 2, d // 2]).permute(0, 2, 1)` then kd.split, which is two "
                "slices), or target tpu-v5e or newer")


def check_lane_offsets(ir: KernelIR, plan: "Plan", target: str) -> None:
    """A `kd.tile(begin, end)` whose begin is known only at run time and not provably a
    multiple of 128 cannot index the lane axis of a resident block: every generation's Mosaic
    requires a dynamic lane offset to be aligned ("E2003: cannot statically prove that index in
    dimension 1 is a multiple of 128", libtpu 0.0.52). Interpret mode runs it."""
    for op in ir.body.walk():
        if op.kind not in ("load", "store"):
            continue
        p = op.attrs["tensor"]
        ix = op.attrs["index"][-1]
        if p.name in plan.smem or ix.kind != "tile" or plan.axes[p.name][-1].kind != "resident":
            continue
        t = ix.tile
        if t.bounded and isinstance(t.lo, Value) and not multiple_of(t.lo, LANES, plan.blocks):
            raise BackendError(
                f"{target} cannot index the lane axis of `{p.name}` at the start of `kd.tile("
                "begin, end)` here: its begin is known only at run time and not provably a "
                "multiple of 128, and Mosaic requires a dynamic lane offset to be aligned "
                "(E2003: cannot statically prove that index ... is a multiple of 128)", op.loc,
                "start the loop at an aligned bound (`kd.tile(begin // 128 * 128, end)` with a "
                "mask for the lanes below begin), or run it in interpret mode or on another "
                "backend")


def _check_minor_reduce(op: Op, target: str, eb: Any) -> None:
    """tpu-v4 (libtpu 0.0.52): a reduction over the minor axis of a rank >= 3 value whose
    result keeps the sublane axis, now minor (`tmp[tm, tn, :].sum(-1)`, Helion's
    split_k_barrier, 16 or 32 lanes), needs a sublane-to-lane move Mosaic lowers to
    `xir.dynamic_gather`, which v4 does not legalize ("failed to legalize operation
    'xir.dynamic_gather'")."""
    x = op.operands[0]
    if x.rank < 3 or op.attrs["axis"] != x.rank - 1 or op.attrs.get("keepdim"):
        return
    sub, lanes = ((eb(d) if isinstance(d, TileVar) else d) for d in x.shape[-2:])
    if sub > 1 and lanes < LANES:  # seen with 16 and 32 lanes (split_k); wider ones not seen
        raise BackendError(
            f"{target} cannot reduce the minor axis of a {shape_str(x.shape)} value into "
            f"{shape_str(op.result.shape)}: the result's lanes come from sublanes, a move its "
            "compiler does not lower (Mosaic: failed to legalize 'xir.dynamic_gather')", op.loc,
            "make the reduced axis a leading one (`tmp` as [split_k, m, n], summed over dim "
            "0), or target tpu-v5e or newer")
