"""Values that need no tile of their own (notes/nki.md: loops unroll at trace time, so every
block index is a Python int in the generated code):

- `Scalar`: a rank-0 compile-time value, e.g. `0.125` or `tq0 + 13` (an instruction immediate);
- `Splat`: a tile filled with one such value (`kd.full`, `kd.zeros`), materialized by `memset`
  only where a tile is needed;
- `Affine`: an integer tile `const + Σ coef·lane` built from `tile.index`, materialized by
  `nisa.iota`;
- `Pred`: a comparison of an `Affine` with 0: a mask that `nisa.affine_select` evaluates on the fly
  (the causal mask, ragged edges).

`analyze` classifies every value of the IR; anything not listed is a real tile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from kernel_dsl.ir import FLOAT_DTYPES, KernelIR, Op, Region, TileVar

from .names import lit

FLIP = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}
SWAP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}
PY_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@dataclass(frozen=True)
class Scalar:
    expr: str
    dtype: str


@dataclass(frozen=True)
class Splat:
    expr: str
    dtype: str


@dataclass(frozen=True)
class Affine:
    """`const + Σ coef·lane(axis)`; axes count from the right (-1 is the last dim)."""

    const: str
    coef: tuple[tuple[int, int], ...]
    dtype: str

    def c(self, axis: int) -> int:
        return dict(self.coef).get(axis, 0)


@dataclass(frozen=True)
class Pred:
    """`cmp(diff, 0)`."""

    diff: Affine
    cmp: str


Virtual = Union[Scalar, Splat, Affine, Pred]


def _sum(a: str, b: str, sign: str) -> str:
    if b == "0":
        return a
    if a == "0" and sign == "+":
        return b
    needs = sign == "-" and any(ch in b for ch in "+-")
    return f"{a} {sign} ({b})" if needs else f"{a} {sign} {b}"


def _coef(a: Affine, b: Affine, sign: int) -> tuple[tuple[int, int], ...]:
    out = dict(a.coef)
    for k, v in b.coef:
        out[k] = out.get(k, 0) + sign * v
    return tuple(sorted((k, v) for k, v in out.items() if v != 0))


def _as_affine(v: Virtual | None, dtype: str) -> Affine | None:
    if isinstance(v, Affine):
        return v
    if isinstance(v, Scalar) and v.dtype not in FLOAT_DTYPES and v.dtype != "bool":
        return Affine(v.expr, (), dtype)
    return None


def _int_literal(op: Op | None) -> int | None:
    if op is not None and op.kind == "const" and isinstance(op.attrs["value"], int) \
            and not isinstance(op.attrs["value"], bool):
        return int(op.attrs["value"])
    return None


def _py_binary(kind: str, a: str, b: str, dtype: str) -> str | None:
    if kind == "add":
        return f"({a} + {b})"
    if kind == "sub":
        return f"({a} - {b})"
    if kind == "mul":
        return f"({a} * {b})"
    if kind == "div" and dtype in FLOAT_DTYPES:
        return f"({a} / {b})"
    if kind in ("max", "min"):
        return f"{kind}({a}, {b})"
    if kind in ("floordiv", "mod") and dtype not in FLOAT_DTYPES:  # Python's floor, as torch's
        return f"({a} {'//' if kind == 'floordiv' else '%'} {b})"
    if kind in PY_CMP:
        return f"({a} {PY_CMP[kind]} {b})"
    return None


def _cast_expr(e: str, dtype: str) -> str:
    if dtype in FLOAT_DTYPES:
        return f"float({e})"
    return f"bool({e})" if dtype == "bool" else f"int({e})"


class _Analyzer:
    def __init__(self, begin: Callable[[TileVar], str], eb: Callable[[TileVar], int],
                 count: Callable[[TileVar], str]):
        self.begin, self.eb, self.count = begin, eb, count
        self.out: dict[int, Virtual] = {}

    def get(self, op: Op, i: int) -> Virtual | None:
        return self.out.get(op.operands[i].id)

    def region(self, region: Region) -> None:
        for op in region.ops:
            if op.body is not None:
                self.region(op.body)
            elif op.results:
                v = self.classify(op)
                if v is not None:
                    self.out[op.result.id] = v

    def classify(self, op: Op) -> Virtual | None:
        k, a, r = op.kind, op.attrs, op.result if op.results else None
        assert r is not None
        ins = [self.out.get(x.id) for x in op.operands]
        if k == "const":
            v = a["value"]
            return Scalar(lit(float(v) if r.dtype in FLOAT_DTYPES else v), r.dtype)
        if k == "tile_begin":
            return Scalar(self.begin(a["tile"]), "i32")
        if k == "tile_id":
            return Scalar(f"i_{a['tile']!r}", "i32")
        if k == "tile_size":
            return Scalar(str(self.eb(a["tile"])), "i32")
        if k == "tile_count":
            return Scalar(self.count(a["tile"]), "i32")
        if k == "full":
            v = a["value"]
            return Splat(lit(float(v) if r.dtype in FLOAT_DTYPES else v), r.dtype)
        if k == "iota":
            return Affine(self.begin(a["tile"]), ((-1, 1),), "i32")
        if k == "arange":
            return Affine("0", ((-1, 1),), "i32")
        if any(x is None for x in ins):
            return None
        if k in ("broadcast", "expand_dims"):
            x = ins[0]
            if isinstance(x, Scalar):
                return Splat(x.expr, x.dtype)
            if k == "broadcast" or isinstance(x, Splat):
                return x
            return self.expand(x, op.operands[0].rank, a["axis"])  # type: ignore[arg-type]
        if k == "cast":
            x = ins[0]
            if isinstance(x, (Scalar, Splat)):
                return type(x)(_cast_expr(x.expr, r.dtype), r.dtype)
            if isinstance(x, Affine) and r.dtype != "bool":
                return Affine(x.const, x.coef, r.dtype)
            return None
        if k == "neg":
            x = ins[0]
            if isinstance(x, (Scalar, Splat)):
                return type(x)(f"(-{x.expr})", r.dtype)
            if isinstance(x, Affine):
                return Affine(f"-({x.const})", tuple((ax, -c) for ax, c in x.coef), x.dtype)
            return None
        if k == "not":
            x = ins[0]
            if isinstance(x, Pred):
                return Pred(x.diff, FLIP[x.cmp])
            if isinstance(x, (Scalar, Splat)):
                return type(x)(f"(not {x.expr})", r.dtype)
            return None
        if k == "where" and all(isinstance(x, Scalar) for x in ins):  # a scalar select
            c, x, y = (v.expr for v in ins)  # type: ignore[union-attr]
            return Scalar(f"({x} if {c} else {y})", r.dtype)
        if len(ins) == 2 and all(isinstance(x, (Scalar, Splat)) for x in ins):
            e = _py_binary(k, ins[0].expr, ins[1].expr, r.dtype)  # type: ignore[union-attr]
            if e is None:
                return None
            return (Splat if any(isinstance(x, Splat) for x in ins) else Scalar)(e, r.dtype)
        if k in ("add", "sub") and r.dtype not in FLOAT_DTYPES:
            x, y = (_as_affine(v, r.dtype) for v in ins)
            if x is None or y is None:
                return None
            sign = "+" if k == "add" else "-"
            return Affine(_sum(x.const, y.const, sign), _coef(x, y, 1 if k == "add" else -1), r.dtype)
        if k == "mul" and r.dtype not in FLOAT_DTYPES:
            for i in (0, 1):
                c = _int_literal(op.operands[1 - i].op)
                x = ins[i]
                if c is not None and isinstance(x, Affine):
                    return Affine(f"({x.const}) * {c}", tuple((ax, v * c) for ax, v in x.coef),
                                  r.dtype)
            return None
        if k in SWAP:
            x, y = (_as_affine(v, "i32") for v in ins)
            if x is None or y is None:
                return None
            return Pred(Affine(_sum(x.const, y.const, "-"), _coef(x, y, -1), "i32"), k)
        return None

    @staticmethod
    def expand(x: Virtual, rank: int, axis: int) -> Virtual:
        """Inserting a unit dim at `axis` moves the axes left of it one further from the right."""
        def move(coef: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
            return tuple(sorted((ax - 1 if ax + rank < axis else ax, c) for ax, c in coef))

        if isinstance(x, Affine):
            return Affine(x.const, move(x.coef), x.dtype)
        if isinstance(x, Pred):
            return Pred(Affine(x.diff.const, move(x.diff.coef), x.diff.dtype), x.cmp)
        return x


def analyze(ir: KernelIR, begin: Callable[[TileVar], str], eb: Callable[[TileVar], int],
            count: Callable[[TileVar], str]) -> dict[int, Virtual]:
    """Value id -> its virtual form, for every value that needs no tile of its own."""
    an = _Analyzer(begin, eb, count)
    an.region(ir.body)
    return an.out
