"""Shape ops (docs/ir.md "Shape ops") on Triton's power-of-two blocks.

An int dim of n elements has `lanes(n)` lanes (the next power of two, layout.py), the ones past n
garbage. `reshape` is `tl.reshape` where the dims it regroups have no padding lanes (a regrouped
padded dim would move garbage between real elements); `slice` and `concat` pick their lanes with
`tl.gather` along the axis (the clamped source lane for each result lane), so any sizes work.
"""
from __future__ import annotations

from typing import Any

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import Op, TileVar, Value, shape_str


def _pos(w: Any, v: Value, axis: int, lanes: int) -> str:
    """int32 lane positions along `axis`, broadcast to `v`'s block with `lanes` on that axis."""
    shape = w.lay.shape(v.shape)
    shape[axis] = lanes
    idx = f"tl.arange(0, {lanes})"
    if v.rank > 1:
        idx = f"{idx}[{', '.join(':' if i == axis else 'None' for i in range(v.rank))}]"
    return f"tl.broadcast_to({idx}, {shape})"


def _regrouped_padding(w: Any, op: Op) -> list[int]:
    """Int dims with padding lanes in the groups of dims the reshape changes."""
    def groups(shape: tuple) -> list[list[int]]:
        out: list[list[int]] = [[]]
        for d in shape:
            if isinstance(d, TileVar):
                out.append([])
            else:
                out[-1].append(d)
        return out

    bad = []
    for gi, go in zip(groups(op.operands[0].shape), groups(op.result.shape)):
        if [d for d in gi if d != 1] != [d for d in go if d != 1]:
            bad += [d for d in gi + go if w.lay.lanes(d) != d]
    return bad


def render(w: Any, op: Op, ins: list[str]) -> str:
    k, a, r, x = op.kind, op.attrs, op.result, op.operands[0]
    if k == "reshape":
        bad = _regrouped_padding(w, op)
        if bad:
            raise BackendError(
                f"reshape of a {shape_str(x.shape)} tile to {shape_str(r.shape)}: Triton blocks "
                f"have power-of-two dims, and the regrouped dim(s) {sorted(set(bad))} are padded",
                op.loc, "regroup dims whose sizes are powers of two (the rope pattern with an "
                "even head_dim of 2**k), or use the pallas backend")
        return f"tl.reshape({ins[0]}, {w.lay.shape(r.shape)})"
    ax = a["axis"]
    lanes = w.lay.lanes(r.shape[ax])
    w.em.line(f"pos{r.id} = {_pos(w, r, ax, lanes)}")
    pos = f"pos{r.id}"
    if k == "slice":
        src = f"tl.minimum({pos} + {a['start']}, {a['stop'] - 1})"
        return f"tl.gather({ins[0]}, {src}, {ax})"
    expr, off = "", 0
    parts = []
    for v, name in zip(op.operands, ins):
        n = v.shape[ax]
        src = f"tl.minimum(tl.maximum({pos} - {off}, 0), {n - 1})"
        parts.append((off, f"tl.gather({name}, {src}, {ax})"))
        off += n
    expr = parts[-1][1]
    for (o, g), (nxt, _) in zip(reversed(parts[:-1]), reversed(parts[1:])):
        expr = f"tl.where({pos} < {nxt}, {g}, {expr})"
    return expr
