"""Elementwise ops: `tensor_tensor` (two tiles), `tensor_scalar` (a tile and an immediate or a
per-partition (P, 1) float32 vector), `activation` (ScalarE functions), `tensor_copy` (casts);
layout-only ops (expand_dims, transpose, broadcast) alias or broadcast tiles.

Division is `x * reciprocal(y)` (`nl.divide` is not supported on hardware); `exp2(x)` is
`exp(x * ln 2)`; `-x` is `x * -1`. All engines compute in float32 and round at the destination,
which is also the IR's semantics for f32 tiles; bf16/f16 tiles round once per op as torch does.

Integer add/sub/mul/neg (and narrowing int casts) wrap around as in torch: see `int_arith`, which
also runs the integer bit ops (& | ^ ~ << >>). `//`, `%` and the rounding functions have no NKI
instruction: expand.py rewrites them into these ops before the writer runs.

Infinite immediates: AWS's kernels compare and mask with finite extremes, never with an inf
immediate, so a comparison with +-inf clamps at float32's extreme `L` and compares with it
(`inf_compare`): `x == -inf` is `max(x, -L) == -L`, true for -inf and for the -L that masks and pads
hold, so a user's guard such as `torch.where(m == -inf, 0.0, m)` still sees fully masked rows (exp
of a masked lane is then exp(-L - 0) = 0, never exp(-L - -L) = 1). The price: a float32 x equal to
+-L compares as infinite (no bf16/f16 value does). Arithmetic with +-inf keeps the user's value, as
a memset tile operand (`x + inf` stays inf).
"""
from __future__ import annotations

import math

from kernel_dsl.errors import UnsupportedOpError
from kernel_dsl.ir import Op, Value

from .affine import PY_CMP, SWAP
from .layout import Core, axis_map, carry, holds
from .names import FP32_MAX, NL_DTYPE, SHORT, inf_sign
from .writer import CMP, Operand, Tile, Writer, at

ALU = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "max": "nl.maximum",
       "min": "nl.minimum", "and": "nl.logical_and", "or": "nl.logical_or",
       "xor": "nl.logical_xor", "pow": "nl.power", **CMP}
# integer ops on GpSimd's 32-bit integer ALU (int_arith); on integers and/or/xor are bitwise
INT_ALU = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "and": "nl.bitwise_and",
           "or": "nl.bitwise_or", "xor": "nl.bitwise_xor", "shl": "nl.left_shift",
           "shr": "nl.right_shift"}
COMMUTATIVE_INT = ("and", "or", "xor")  # exact on int32 copies: no wrap needed after them
COMMUTATIVE = {"add", "mul", "max", "min", "and", "or", "xor", "eq", "ne"}
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


# Integer results of these ops wrap around in torch (int8 127 + 1 == -128).
INT_WRAP = {"i8": (8, True), "u8": (8, False), "i16": (16, True)}  # bits, signed


def int32_operand(w: Writer, v: Value, rc: Core, ro: str) -> Tile:
    """`v` as a full int32 tile of the result's shape (exact: int8/uint8/int16 values fit)."""
    with at(w, v):  # any broadcast goes next to v's definition, before the code that uses it
        o = w.operand(v, rc, ro)
    if o.kind == "scalar":
        return w.splat(o.expr, rc.phys(ro), "i32")
    with at(w, v):
        return w.cast(w.full(v, rc, ro), "i32")


def int_arith(w: Writer, r: Value, kind: str, a: Tile, b: Tile) -> None:
    """`a kind b` on int32 tiles, defining `r` (an integer value) wrapped to its dtype.

    VectorE computes integer arithmetic in float32 and converts to the destination dtype, and
    the SDK does not say what that conversion does on overflow (our interpreter saturates,
    as float-to-int conversions commonly do): torch wraps. So the op runs on int32 tiles only,
    which nisa.tensor_tensor sends to GpSimd's native 32-bit integer ALU ("exact results for
    all 32-bit integer values", SDK nki.isa.tensor_tensor; its int32 overflow is taken to wrap,
    two's complement, as torch's does: the SDK does not say), and a narrower result is wrapped
    explicitly with int32 bit operations before the (then exact, in-range) copy to its dtype."""
    res = w.new_result(r) if r.dtype == "i32" else None
    phys = a.phys
    dst = res.name if res is not None else w.fresh(f"v{r.id}_i32")
    if res is None:
        w.alloc(dst, phys, "i32")
    w.line(f"nisa.tensor_tensor(dst={dst}, data1={a.name}, data2={b.name}, op={INT_ALU[kind]})")
    if res is None:
        if kind not in COMMUTATIVE_INT and kind != "shr":  # bit ops and >> stay in range
            wrap_int32(w, dst, phys, r.dtype)
        res = w.new_result(r)
        w.line(f"nisa.tensor_copy(dst={res.name}, src={dst})")
    w.define(r, res)


def wrap_int32(w: Writer, t: str, phys: tuple[int, int], dtype: str) -> None:
    """In place: int32 tile `t` modulo 2^bits of `dtype` (signed: ((t + h) & m) - h)."""
    bits, signed = INT_WRAP[dtype]
    mask = w.const_tile(f"k{(1 << bits) - 1}", phys, "i32", str((1 << bits) - 1))
    if not signed:
        w.line(f"nisa.tensor_tensor(dst={t}, data1={t}, data2={mask}, op=nl.bitwise_and)",
               comment=f"wrap to {dtype} as torch does")
        return
    half = w.const_tile(f"k{1 << (bits - 1)}", phys, "i32", str(1 << (bits - 1)))
    w.line(f"nisa.tensor_tensor(dst={t}, data1={t}, data2={half}, op=nl.add)",
           comment=f"wrap to {dtype} as torch does")
    w.line(f"nisa.tensor_tensor(dst={t}, data1={t}, data2={mask}, op=nl.bitwise_and)")
    w.line(f"nisa.tensor_tensor(dst={t}, data1={t}, data2={half}, op=nl.subtract)")


def binary(w: Writer, op: Op) -> None:
    r = op.result
    rc, ro = w.core(r), w.orient[r.id]
    a_v, b_v = op.operands
    if op.kind in INT_ALU and r.dtype in ("i32", *INT_WRAP):
        a, b = int32_operand(w, a_v, rc, ro), int32_operand(w, b_v, rc, ro)
        return int_arith(w, r, op.kind, a, b)
    with at(w, a_v):
        a = w.operand(a_v, rc, ro)
    with at(w, b_v):
        b = w.operand(b_v, rc, ro)
    kind = op.kind
    if a.kind == "scalar" and b.kind == "scalar":  # not folded at trace time: start from a tile
        a = Operand("full", tile=w.splat(a.expr, rc.phys(ro), a_v.dtype))
    if kind in CMP and (a.kind == "scalar" or b.kind == "scalar"):
        # `c < x` is `x > c`, for the inf check only: the tensor_scalar below swaps it itself
        x, c, xk = (a, b.expr, kind) if b.kind == "scalar" else (b, a.expr, SWAP[kind])
        if inf_sign(c):
            return inf_compare(w, r, x, xk, inf_sign(c))
    # x + inf: the user's inf as a memset tile (AWS memsets -inf), never an inf immediate
    if a.kind == "scalar" and inf_sign(a.expr):
        a = Operand("full", tile=w.fill(a.expr, rc.phys(ro), a_v.dtype))
    if b.kind == "scalar" and inf_sign(b.expr):
        b = Operand("full", tile=w.fill(b.expr, rc.phys(ro), b_v.dtype))
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
        op = f"op0={ALU[SWAP.get(kind, kind)]}, operand0={vector(w, a_v, a)}"
        if kind == "sub":  # c - x as (x * -1) + c, exact: AWS passes reverse0 only with an op1
            op = f"op0=nl.multiply, operand0=-1.0, op1=nl.add, operand1={vector(w, a_v, a)}"
        assert kind in COMMUTATIVE or kind in SWAP or kind == "sub", kind
        w.line(f"nisa.tensor_scalar(dst={res.name}, data={b.tile.name}, {op})")
    w.define(r, res)


def inf_compare(w: Writer, r: Value, x: Operand, kind: str, sign: int) -> None:
    """`x kind (sign * inf)` as `clamp(x) kind (sign * L)`, one tensor_scalar (see the module doc)."""
    assert x.kind == "full" and x.tile is not None, "a broadcast result has a full operand"
    lim, clamp = (FP32_MAX, "nl.minimum") if sign > 0 else (f"-{FP32_MAX}", "nl.maximum")
    res = w.new_result(r)
    w.line(f"nisa.tensor_scalar(dst={res.name}, data={x.tile.name}, op0={clamp}, operand0={lim}, "
           f"op1={CMP[kind]}, operand1={lim})", comment=f"{PY_CMP[kind]} {'-' if sign < 0 else ''}inf")
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
    if k in ("neg", "not") and r.dtype in ("i32", *INT_WRAP):
        # -x is 0 - x, wrapping (-(-128) == -128); ~x is -1 - x (two's complement)
        rc = w.core(r)
        first = w.splat("0" if k == "neg" else "-1", rc.phys(ro), "i32")
        with at(w, x):
            x32 = w.cast(src, "i32")
        return int_arith(w, r, "sub", first, x32)
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
    if r.dtype in INT_WRAP and src.dtype in ("i32", "i16", "i8", "u8"):  # torch wraps: 300 -> 44
        x32 = w.fresh(f"{src.name}_wrap")
        w.alloc(x32, src.phys, "i32")
        w.line(f"nisa.tensor_copy(dst={x32}, src={src.name})")
        wrap_int32(w, x32, src.phys, r.dtype)
        src = Tile(x32, src.phys, "i32")
    if r.dtype == "f8e4m3fn" and src.dtype != "bool":
        # torch saturates at the largest e4m3fn, 448 (inf too); the conversion on the way out of
        # the engine is not documented to, so clamp first (min/max keep NaN, the SDK says)
        sat = w.fresh(f"{src.name}_sat")
        w.alloc(sat, src.phys, "f32")
        w.line(f"nisa.tensor_scalar(dst={sat}, data={src.name}, op0=nl.minimum, operand0=448.0, "
               "op1=nl.maximum, operand1=-448.0)")
        src = Tile(sat, src.phys, "f32")
    w.line(f"nisa.tensor_copy(dst={res.name}, src={src.name})")
    w.define(r, res)


def bitcast(w: Writer, op: Op) -> None:
    """Same-width bit view: an NKI tensor view (`t.view(nl.int32)`, the SDK's
    NkiTensor.view), no data moves and no engine converts the bits."""
    r, x = op.result, op.operands[0]
    ro = w.orient[r.id]
    src = w.get(x, ro)
    name = w.value_name(r)
    w.line(f"{name} = {src.name}.view({NL_DTYPE[r.dtype]})")
    w.define(r, Tile(name, src.phys, r.dtype, src.dims, src.version))


def layout_only(w: Writer, op: Op) -> None:
    """expand_dims and transpose change no data: the result names the operand's tile (in the
    operand's orientation that has the same physical layout)."""
    r, x = op.result, op.operands[0]
    ro = w.orient[r.id]
    xc, rc, m = w.core(x), w.core(r), axis_map(op)
    mine = w.orient.get(x.id, "N")
    for so in (mine, "T" if mine == "N" else "N"):
        if carry(xc, so, rc, m) == ro or holds(xc, so, rc, ro, m):
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
    # the result's own dims: a store of it slices ragged edges by them (the broadcast tile has
    # None for the dims it was broadcast along)
    dims = (rc.part_dim(ro), rc.free_dim(ro))
    w.tiles[(r.id, ro)] = Tile(tile.name, tile.phys, tile.dtype, dims, tile.version)
    w.slots[r.id] = w.em.slot()


RULES = {
    **{k: binary for k in ("add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "xor",
                           "shl", "shr", "lt", "le", "gt", "ge", "eq", "ne")},
    **{k: unary for k in ("neg", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs",
                          "not", "relu", "sin", "cos", "erf")},
    "cast": cast, "bitcast": bitcast, "expand_dims": layout_only, "transpose": layout_only,
    "broadcast": broadcast,
}

