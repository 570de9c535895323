"""IR ops without an NKI instruction, rewritten into IR ops that have one (on a copy of the IR).

- integer `floordiv` / `mod`: a float32 estimate of the quotient (VectorE multiplies by the
  reciprocal), then exact int32 arithmetic: the remainder `a - q * b`, one more estimate step for
  int32 (float32 holds 24 bits), and a final correction of one either way, so that the remainder
  has the divisor's sign (torch). A zero divisor is taken as 1: `a // 0 == a`, `a % 0 == 0`.
- `floor` / `ceil` / `round`: truncation through an int32 cast, corrected by one; `round` breaks
  ties to even. Values with |x| >= 2^23 (already whole), inf and NaN pass through unchanged.
- `log1p` / `expm1`: Kahan's forms, which divide out the rounding of `1 + x` / `exp(x)`, with
  ScalarE's `log` only fed inputs in its valid range.
- `kd.atomic_*` into a block: a load, the op, a store (the grid runs in order: docs/nki.md).

The SDK does not say whether float -> int32 conversion truncates or rounds to nearest; every
rule here is exact either way (the corrections absorb a difference of one).
"""
from __future__ import annotations

import copy
import itertools
import math
import weakref
from typing import Any, Callable

from kernel_dsl.ir import Dim, KernelIR, Op, Region, Value, broadcast_shapes

EXPANDED = ("floordiv", "mod", "floor", "ceil", "round", "log1p", "expm1")
_CMP = ("lt", "le", "gt", "ge", "eq", "ne")
_cache: "weakref.WeakKeyDictionary[KernelIR, KernelIR]" = weakref.WeakKeyDictionary()


class _Builder:
    """Appends ops to `ops`; every value lives in `region` and gets a fresh id."""

    def __init__(self, region: Region, ids: Any, loc: Any):
        self.region, self.ids, self.loc = region, ids, loc
        self.ops: list[Op] = []

    def op(self, kind: str, operands: list[Value], attrs: dict[str, Any], shape: tuple[Dim, ...],
           dtype: str, result: Value | None = None) -> Value:
        op = Op(kind, operands, attrs, loc=self.loc)
        v = result if result is not None else Value(next(self.ids), shape, dtype)
        v.op, v.region = op, self.region
        op.results = [v]
        self.ops.append(op)
        return v

    def c(self, value: Any, dtype: str) -> Value:
        return self.op("const", [], {"value": value}, (), dtype)

    def _lift(self, x: Value | float | int, dtype: str) -> Value:
        return x if isinstance(x, Value) else self.c(x, dtype)

    def bin(self, kind: str, a: Value, b: Value | float | int) -> Value:
        bv = self._lift(b, a.dtype)
        shape = broadcast_shapes(a.shape, bv.shape)
        assert shape is not None
        return self.op(kind, [a, bv], {}, shape, "bool" if kind in _CMP else a.dtype)

    def un(self, kind: str, x: Value) -> Value:
        return self.op(kind, [x], {}, x.shape, x.dtype)

    def cast(self, x: Value, dtype: str) -> Value:
        return x if x.dtype == dtype else self.op("cast", [x], {"dtype": dtype}, x.shape, dtype)

    def where(self, c: Value, a: Value | float | int, b: Value | float | int,
              dtype: str | None = None) -> Value:
        dt = dtype or (a.dtype if isinstance(a, Value) else b.dtype)  # type: ignore[union-attr]
        av, bv = self._lift(a, dt), self._lift(b, dt)
        shape = broadcast_shapes(broadcast_shapes(c.shape, av.shape) or (), bv.shape)
        assert shape is not None
        return self.op("where", [c, av, bv], {}, shape, dt)

    def finish(self, x: Value, result: Value) -> None:
        """`result` (the rewritten op's value, kept so its uses stay valid) becomes `x`."""
        self.op("cast", [x], {"dtype": result.dtype}, result.shape, result.dtype, result)


def _const(v: Value) -> Any:
    """The value of a Python-scalar operand (a `const`), else None."""
    return v.op.attrs["value"] if v.op is not None and v.op.kind == "const" else None


def _divmod(b: _Builder, op: Op) -> None:
    r_out = op.result
    a32, b32 = (b.cast(v, "i32") for v in op.operands)
    k = _const(op.operands[1])
    bs = b.where(b.bin("eq", b32, 0), 1, b32) if k is None else b.c(int(k) or 1, "i32")
    fb = b.cast(bs, "f32")
    q = b.cast(b.bin("div", b.cast(a32, "f32"), fb), "i32")
    r = b.bin("sub", a32, b.bin("mul", q, bs))
    if r_out.dtype == "i32":  # the first estimate is within a few hundred; this one within one
        q = b.bin("add", q, b.cast(b.bin("div", b.cast(r, "f32"), fb), "i32"))
        r = b.bin("sub", a32, b.bin("mul", q, bs))
    bneg = b.bin("lt", bs, 0)
    d = b.bin("sub", r, bs)
    nz = b.bin("ne", r, 0)
    same = b.bin("eq", b.bin("lt", r, 0), bneg)
    under = b.bin("and", nz, b.un("not", same))  # r has the wrong sign
    # |r| >= |b| with b's sign: r - b has b's sign or is 0 (no overflow: r and b share a sign)
    over = b.bin("and", b.bin("and", nz, same),
                 b.bin("or", b.bin("eq", d, 0), b.bin("eq", b.bin("lt", d, 0), bneg)))
    if op.kind == "floordiv":
        out = b.bin("sub", b.bin("add", q, b.cast(over, "i32")), b.cast(under, "i32"))
    else:
        out = b.bin("add", b.bin("sub", r, b.where(over, bs, 0)), b.where(under, bs, 0))
    b.finish(out, r_out)


def _rounding(b: _Builder, op: Op) -> None:
    x = b.cast(op.operands[0], "f32")
    small = b.bin("lt", b.un("abs", x), 8388608.0)  # False for inf and NaN
    ti = b.cast(x, "i32")  # toward zero
    t = b.cast(ti, "f32")
    if op.kind == "floor":
        y = b.bin("sub", t, b.cast(b.bin("gt", t, x), "f32"))
    elif op.kind == "ceil":
        y = b.bin("add", t, b.cast(b.bin("lt", t, x), "f32"))
    else:  # half to even: the fraction decides, ties go to the even neighbour
        f = b.bin("sub", x, t)
        odd = b.bin("ne", b.bin("and", ti, 1), 0)
        up = b.bin("or", b.bin("gt", f, 0.5), b.bin("and", b.bin("eq", f, 0.5), odd))
        down = b.bin("or", b.bin("lt", f, -0.5), b.bin("and", b.bin("eq", f, -0.5), odd))
        y = b.bin("sub", b.bin("add", t, b.cast(up, "f32")), b.cast(down, "f32"))
    b.finish(b.where(small, y, x), op.result)


def _log1p(b: _Builder, op: Op) -> None:
    x = b.cast(op.operands[0], "f32")
    u = b.bin("add", x, 1.0)
    pos = b.bin("gt", u, 0.0)
    uu = b.where(pos, u, 1.0)
    d = b.bin("sub", uu, 1.0)
    dz = b.bin("eq", d, 0.0)
    k = b.where(dz, x, b.bin("mul", b.un("log", uu), b.bin("div", x, b.where(dz, 1.0, d))))
    k = b.where(b.bin("eq", u, math.inf), u, k)
    b.finish(b.where(pos, k, b.where(b.bin("eq", u, 0.0), -math.inf, math.nan, "f32")), op.result)


def _expm1(b: _Builder, op: Op) -> None:
    x = b.cast(op.operands[0], "f32")
    u = b.un("exp", x)
    small = b.bin("lt", b.un("abs", x), 1.0)  # elsewhere exp(x) - 1 does not cancel
    uu = b.where(small, u, 2.0)
    one = b.bin("eq", uu, 1.0)
    k = b.bin("mul", b.bin("sub", uu, 1.0), b.bin("div", x, b.where(one, 1.0, b.un("log", uu))))
    b.finish(b.where(small, b.where(one, x, k), b.bin("sub", u, 1.0)), op.result)


def _atomic(b: _Builder, op: Op) -> None:
    """`kd.atomic_*` into a block (no index tile): a read-modify-write. The NKI grid is loops
    of one kernel on one NeuronCore, run in order, so no other update interleaves (docs/nki.md)."""
    x = op.operands[0]
    old = b.op("load", [], {"tensor": op.attrs["tensor"], "index": op.attrs["index"]}, x.shape,
               x.dtype)
    new = b.bin(op.attrs["atomic"], old, x)
    attrs = {k: v for k, v in op.attrs.items() if k not in ("atomic", "sem")}
    b.ops.append(Op("store", [new], attrs, loc=op.loc))


RULES: dict[str, Callable[[_Builder, Op], None]] = {
    "floordiv": _divmod, "mod": _divmod, "floor": _rounding, "ceil": _rounding,
    "round": _rounding, "log1p": _log1p, "expm1": _expm1,
}


def _max_id(region: Region) -> int:
    n = max((a.id for a in region.args), default=0)
    for op in region.ops:
        n = max([n, *(r.id for r in op.results)])
        if op.body is not None:
            n = max(n, _max_id(op.body))
    return n


def _position_scalar(op: Op) -> bool:
    """`tile.begin // 128`: a Python int when the kernel is traced (affine.py), no tile op."""
    from kernel_dsl.tile_bounds import value_range

    return op.kind in ("floordiv", "mod") and value_range(op.result) is not None


def _rule(op: Op) -> Callable[[_Builder, Op], None] | None:
    if op.kind == "store" and op.attrs.get("atomic"):
        # through an index tile: a read-modify-write per lane (atomic_scatter.py), not a block's
        index_tile = any(ix.kind == "gather" for ix in op.attrs["index"])
        return None if index_tile else _atomic
    return RULES.get(op.kind)


def _rewrite(region: Region, ids: Any) -> None:
    ops: list[Op] = []
    for op in region.ops:
        if op.body is not None:
            _rewrite(op.body, ids)
        rule = _rule(op)
        if rule is None or _position_scalar(op):
            ops.append(op)
            continue
        b = _Builder(region, ids, op.loc)
        rule(b, op)
        ops.extend(b.ops)
    region.ops = ops


def expand(ir: KernelIR) -> KernelIR:
    """`ir` itself if nothing needs rewriting, else a rewritten copy (cached per IR object)."""
    if not any(_rule(op) is not None for op in ir.body.walk()):
        return ir
    out = _cache.get(ir)
    if out is None:
        out = copy.deepcopy(ir)
        _rewrite(out.body, itertools.count(_max_id(out.body) + 1))
        _cache[ir] = out
    return out
