"""Shape ops (docs/ir.md "Shape ops") on NKI's 2-D (partitions, free) tiles.

`reshape` and `permute` move no data when they only add or drop unit dims or reorder dims
whose on-chip tile stays the same: the result names the operand's tile (as expand_dims does).
Regrouping dims of the (partitions, free) core would move elements between partitions, which
only DMA or TensorE can do: a BackendError. `slice` and `concat` run along the free axis (the
layout puts their axis there): a bit-exact `tensor_copy` of the free-axis range.
"""
from __future__ import annotations

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import Op, shape_str

from .layout import axis_map, carry, holds
from .lower_elementwise import layout_only
from .writer import Writer


def relayout(w: Writer, op: Op) -> None:
    x, r = op.operands[0], op.result
    xc, rc, m = w.core(x), w.core(r), axis_map(op)
    ro, mine = w.orient[r.id], w.orient.get(x.id, "N")
    if not any(carry(xc, so, rc, m) == ro or holds(xc, so, rc, ro, m) for so in (mine, "T" if mine
                                                                                   == "N" else "N")):
        raise BackendError(
            f"{op.kind} of a {shape_str(x.shape)} tile to {shape_str(r.shape)} on NKI: an on-chip "
            "tile is (partitions, free), and this regroups its dims, which moves elements "
            "between partitions (the compute engines cannot)", op.loc,
            "reshape in host code (`x.view(...)` of the argument) and index the view, or use "
            "kd.split/kd.join or slices along the last dim, or the pallas or triton backend")
    layout_only(w, op)


def _free_axis(w: Writer, op: Op) -> str:
    r = op.result
    ro = w.orient[r.id]
    rc = w.core(r)
    pos = rc.pos_of(op.attrs["axis"])
    if pos is None or pos == rc.part_pos(ro):
        raise BackendError(f"{op.kind} along dim {op.attrs['axis']} of a {shape_str(r.shape)} "
                           "tile on NKI: that dim lies on partitions, and engines do not move "
                           "data between partitions", op.loc,
                           f"{op.kind} along the last dim, or use the pallas or triton backend")
    return ro


def slice_(w: Writer, op: Op) -> None:
    ro = _free_axis(w, op)
    src = w.get(op.operands[0], ro)
    res = w.new_result(op.result)
    a = op.attrs
    w.line(f"nisa.tensor_copy(dst={res.name}, src={src.name}[:, {a['start']}:{a['stop']}])")
    w.define(op.result, res)


def concat(w: Writer, op: Op) -> None:
    ro = _free_axis(w, op)
    res = w.new_result(op.result)
    off = 0
    for v in op.operands:
        src = w.get(v, ro)
        n = src.phys[1]
        w.line(f"nisa.tensor_copy(dst={res.name}[:, {off}:{off + n}], src={src.name})")
        off += n
    w.define(op.result, res)


RULES = {"reshape": relayout, "permute": relayout, "slice": slice_, "concat": concat}
