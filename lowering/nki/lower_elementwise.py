"""Elementwise ops: `tensor_tensor` (two tiles), `tensor_scalar` (a tile and an immediate or a
per-partition (P, 1) float32 vector), `activation` (ScalarE functions), `tensor_copy` (casts);
layout-only ops (expand_dims, transpose, broadcast) alias or broadcast tiles.

Division is `x * reciprocal(y)` (`nl.divide` is not supported on hardware); `exp2(x)` is
`exp(x * ln 2)`; `-x` is `x * -1`. All engines compute in float32 and round at the destination,
which is also the IR's semantics for f32 tiles; bf16/f16 tiles round once per op as torch does.
"""
from __future__ import annotations

import math

from kernel_dsl.errors import UnsupportedOpError
from kernel_dsl.ir import Op, Value

from .layout import axis_map, carry
from .names import SHORT
from .writer import CMP, Operand, Tile, Writer, at

ALU = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "max": "nl.maximum",
       "min": "nl.minimum", "and": "nl.logical_and", "or": "nl.logical_or", "pow": "nl.power",
       **CMP}
COMMUTATIVE = {"add", "mul", "max", "min", "and", "or", "eq", "ne"}
ACTIVATION = {"exp": "nl.exp", "log": "nl.log", "sqrt": "nl.sqrt", "rsqrt": "nl.rsqrt",
              "tanh": "nl.tanh", "sigmoid": "nl.sigmoid", "abs": "nl.abs", "relu": "nl.relu",
              "sin": "nl.sin", "erf": "nl.erf"}


def vector(w: Writer, x: Value, op: Operand) -> str:
    """A tensor_scalar operand: the immediate, or the (P, 1) vector as float32."""
    if op.kind == "scalar":
        return op.expr
    assert op.tile is not None
    with at(w, x):
        return w.cast(op.tile, "f32").name


def reciprocal(w: Writer, t: Tile) -> Tile:
    key = t.key("recip")
    if key not in w.converted:
        out = Tile(w.fresh(f"{t.name}_recip"), t.phys, "f32", t.dims)
        w.alloc(out.name, out.phys, "f32", dims=out.dims)
        w.line(f"nisa.reciprocal(dst={out.name}, data={t.name})")
        w.converted[key] = out
    return w.converted[key]


def binary(w: Writer, op: Op) -> None:
    r = op.result
    rc, ro = w.core(r), w.orient[r.id]
    a_v, b_v = op.operands
    with at(w, a_v):
        a = w.operand(a_v, rc, ro)
    with at(w, b_v):
        b = w.operand(b_v, rc, ro)
    kind = op.kind
    if a.kind == "scalar" and b.kind == "scalar":  # not folded at trace time: start from a tile
        a = Operand("full", tile=w.splat(a.expr, rc.phys(ro), a_v.dtype))
    if kind == "div":
        if b.kind == "scalar":
            b, kind = Operand("scalar", f"1.0 / {b.expr}"), "mul"
        else:
            assert b.tile is not None
            with at(w, b_v):
                b = Operand(b.kind, tile=reciprocal(w, b.tile))
            kind = "mul"
    if kind == "pow":  # GpSimd's power is a tensor_tensor op on SBUF tiles
        a = Operand("full", tile=w.full(a_v, rc, ro))
        b = Operand("full", tile=w.full(b_v, rc, ro))
    res = w.new_result(r)
    if a.kind == "full" and b.kind == "full":
        assert a.tile is not None and b.tile is not None
        w.line(f"nisa.tensor_tensor(dst={res.name}, data1={a.tile.name}, data2={b.tile.name}, "
               f"op={ALU[kind]})")
    elif a.kind == "full":
        assert a.tile is not None
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={a.tile.name}, op0={ALU[kind]}, "
               f"operand0={vector(w, b_v, b)})")
    else:
        assert b.kind == "full" and b.tile is not None, "a broadcast result has a full operand"
        rev = "" if kind in COMMUTATIVE else ", reverse0=True"
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={b.tile.name}, op0={ALU[kind]}, "
               f"operand0={vector(w, a_v, a)}{rev})")
    w.define(r, res)


def unary(w: Writer, op: Op) -> None:
    r, x = op.result, op.operands[0]
    ro = w.orient[r.id]
    src = w.get(x, ro)
    k = op.kind
    if k == "cos":
        raise UnsupportedOpError("torch.cos has no NKI lowering: ScalarE's sin is only valid on "
                                 "[-pi, pi] and the kernel's inputs are not range-reduced", op.loc,
                                 "use another backend for this kernel, or rewrite it with sin on a "
                                 "known range")
    res = w.new_result(r)
    if k in ACTIVATION:
        w.line(f"nisa.activation(dst={res.name}, op={ACTIVATION[k]}, data={src.name})")
    elif k == "exp2":
        w.line(f"nisa.activation(dst={res.name}, op=nl.exp, data={src.name}, "
               f"scale={math.log(2.0)!r})")
    elif k == "neg":
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={src.name}, op0=nl.multiply, "
               "operand0=-1.0)")
    elif k == "not":
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={src.name}, op0=nl.equal, operand0=0.0)")
    else:
        raise UnsupportedOpError(f"`{k}` has no NKI lowering", op.loc, "use another backend")
    w.define(r, res)


def cast(w: Writer, op: Op) -> None:
    r, x = op.result, op.operands[0]
    ro = w.orient[r.id]
    src = w.get(x, ro)
    if r.dtype == "bool":
        res = w.new_result(r)
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={src.name}, op0=nl.not_equal, "
               "operand0=0.0)")
        w.define(r, res)
        return
    if SHORT[src.dtype] == SHORT[r.dtype]:  # same storage format (e.g. bool -> u8)
        w.alias(r, x, ro, ro)
        return
    res = w.new_result(r)
    w.line(f"nisa.tensor_copy(dst={res.name}, src={src.name})")
    w.define(r, res)


def layout_only(w: Writer, op: Op) -> None:
    """expand_dims and transpose change no data: the result names the operand's tile (in the
    operand's orientation that has the same physical layout)."""
    r, x = op.result, op.operands[0]
    ro = w.orient[r.id]
    xc, rc, m = w.core(x), w.core(r), axis_map(op)
    mine = w.orient.get(x.id, "N")
    for so in (mine, "T" if mine == "N" else "N"):
        if carry(xc, so, rc, m) == ro:
            w.alias(r, x, ro, so)
            return
    raise AssertionError(f"no layout of %{x.id} holds %{r.id}")


def broadcast(w: Writer, op: Op) -> None:
    r, x = op.result, op.operands[0]
    rc, ro = w.core(r), w.orient[r.id]
    if w.core(x).sizes == rc.sizes:
        w.alias(r, x, ro, ro)
        return
    with at(w, x):
        tile = w.full(x, rc, ro)
    w.tiles[(r.id, ro)] = tile
    w.slots[r.id] = w.em.slot()


RULES = {
    **{k: binary for k in ("add", "sub", "mul", "div", "max", "min", "pow", "and", "or",
                           "lt", "le", "gt", "ge", "eq", "ne")},
    **{k: unary for k in ("neg", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs",
                          "not", "relu", "sin", "cos", "erf")},
    "cast": cast, "expand_dims": layout_only, "transpose": layout_only, "broadcast": broadcast,
}

