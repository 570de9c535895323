"""Checks the tile IR's invariants. A failure here is a kernel_dsl bug, never the user's."""
from __future__ import annotations

import math

from .errors import IRVerificationError
from .ir import (
    ALL_DTYPES,
    BINARY_OPS,
    COMPARE_OPS,
    DTYPE_BITS,
    FLOAT_DTYPES,
    FP8_DTYPES,
    FP8_OPS,
    REDUCE_OPS,
    SCAN_OPS,
    STRUCTURAL_OPS,
    UNARY_OPS,
    KernelIR,
    Op,
    Region,
    TileVar,
    Value,
    broadcast_shapes,
    index_values,
)


def _fail(op: Op | None, msg: str) -> None:
    raise IRVerificationError(f"invalid tile IR: {msg}", op.loc if op else None,
                              "this is a kernel_dsl bug; please report it with the kernel")


def _check_value(v: Value, defined: set[int], op: Op) -> None:
    if v.id not in defined:
        _fail(op, f"{v!r} is used by `{op.kind}` but not defined before it in an enclosing region")


INT_ONLY = ("shl", "shr", "floordiv", "mod")  # integer dtypes (not bool)
NOT_FLOAT = ("and", "or", "xor", "not")
FLOAT_ONLY = ("floor", "ceil", "round", "log1p", "expm1")


def _check_dtypes(op: Op) -> None:
    k, dts = op.kind, {v.dtype for v in op.operands}
    if k in INT_ONLY and not dts <= {"i32", "i16", "i8", "u8"}:
        _fail(op, f"`{k}` of {sorted(dts)}: integer operands only")
    if k in NOT_FLOAT and dts & set(FLOAT_DTYPES):
        _fail(op, f"`{k}` of float operands")
    if k in FLOAT_ONLY and not dts <= set(FLOAT_DTYPES):
        _fail(op, f"`{k}` of {sorted(dts)}: float operands only")
    if k not in FP8_OPS and (dts | {op.result.dtype if op.result else None}) & set(FP8_DTYPES):
        _fail(op, f"`{k}` of float8 values: they only load, store, cast, move and multiply")


def _check_op(op: Op, defined: set[int]) -> None:
    for v in [*op.operands, *index_values(op)]:
        _check_value(v, defined, op)
    k = op.kind
    for r in op.results:
        if r.dtype not in ALL_DTYPES:
            _fail(op, f"{r!r} has unknown dtype {r.dtype}")
    _check_dtypes(op)
    if k in UNARY_OPS or k == "cast" or k == "pad_fill":
        if op.result.shape != op.operands[0].shape:
            _fail(op, f"`{k}` changes shape")
    elif k in BINARY_OPS or k in COMPARE_OPS or k == "where":
        shape: tuple | None = op.operands[0].shape
        for v in op.operands[1:]:
            shape = broadcast_shapes(shape, v.shape) if shape is not None else None
        if shape != op.result.shape:
            _fail(op, f"`{k}` operands do not broadcast to its result shape")
        if k in COMPARE_OPS and op.result.dtype != "bool":
            _fail(op, "comparison must give bool")
    elif k == "reduce":
        if op.attrs["op"] not in REDUCE_OPS:
            _fail(op, f"unknown reduction {op.attrs['op']}")
        if not 0 <= op.attrs["axis"] < op.operands[0].rank:
            _fail(op, "reduction axis out of range")
    elif k == "scan":  # inclusive, along one axis; f32 or i32 (the tracer casts around it)
        x, a = op.operands[0], op.attrs
        if a["op"] not in SCAN_OPS + ("combine",) or not 0 <= a["axis"] < x.rank:
            _fail(op, f"bad scan {a['op']} axis={a['axis']}")
        for v, r in zip(op.operands, op.results):
            if v.dtype not in ("f32", "i32") or (v.dtype == "f32" and a["op"] in ("and", "or", "xor")):
                _fail(op, f"`{a['op']}` scan of {v.dtype}")
            if (r.shape, r.dtype) != (v.shape, v.dtype) or v.shape != x.shape:
                _fail(op, "`scan` changes shape or dtype")
        if len(op.results) != len(op.operands) or (a["op"] != "combine" and len(op.operands) != 1):
            _fail(op, "`scan` has one result per operand")
        if a["op"] == "combine":  # a region of `[]` values: args (earlier..., later...), yields
            reg = a["combine"]
            n = len(op.operands)
            if len(reg.args) != 2 * n or len(reg.yields) != n or any(
                    (v.shape, v.dtype) != ((), x.dtype) for v, x in zip(reg.args, 2 * op.operands)):
                _fail(op, "`scan` combine region does not match its operands")
            _verify_region(reg, set())  # sees nothing from outside
            if any((y.shape, y.dtype) != ((), x.dtype) for y, x in zip(reg.yields, op.operands)):
                _fail(op, "`scan` combine yields values of other types")
    elif k == "dot":
        a, b = op.operands[:2]
        if a.rank < 2 or a.rank != b.rank or a.shape[-1] is not b.shape[-2] and a.shape[-1] != b.shape[-2]:
            _fail(op, "dot operands do not contract")
        if len(op.operands) == 3 and op.operands[2].dtype != op.result.dtype:
            _fail(op, "dot accumulator dtype differs from its result")
    elif k in ("load", "store"):
        t = op.attrs["tensor"]
        if len(op.attrs["index"]) != len(t.shape):
            _fail(op, f"`{k}` of {t.name} has {len(op.attrs['index'])} indices for rank {len(t.shape)}")
        for ix in op.attrs["index"]:
            if ix.kind == "dyn" and (ix.scalar.rank != 0 or ix.scalar.dtype not in
                                     ("i32", "i16", "i8", "u8")):
                _fail(op, f"`{k}` of {t.name} indexed by a non-scalar or non-integer value")
            if ix.kind == "gather" and (ix.scalar.rank < 1 or ix.scalar.dtype not in
                                        ("i32", "i16", "i8", "u8")):
                _fail(op, f"`{k}` of {t.name} gathers through a value that is not an int tile")
        if k == "store" and op.attrs.get("atomic") not in (None, "add", "max", "min"):
            _fail(op, f"unknown atomic {op.attrs['atomic']!r}")
        for ix, n in zip(op.attrs["index"], t.shape):
            if ix.kind == "tile" and not ix.tile.bounded and ix.tile.extent > n:
                _fail(op, f"tile {ix.tile!r} over {ix.tile.extent} indexes an axis of {n}")
            if ix.kind == "slice" and not 0 <= ix.value < ix.stop <= n:
                _fail(op, f"slice {ix!r} is not inside an axis of {n}")
    elif k == "loop":
        body = op.body
        if body is None or len(body.args) != len(op.operands) or len(body.yields) != len(op.operands):
            _fail(op, "loop carried values, block args and yields differ in number")
        for init, arg, res in zip(op.operands, body.args, op.results):
            if (init.shape, init.dtype) != (arg.shape, arg.dtype) != (res.shape, res.dtype):
                _fail(op, "loop-carried value changes type")
    elif k == "bitcast":  # the same bits read as another dtype of the same width
        x, r = op.operands[0], op.result
        if r.shape != x.shape:
            _fail(op, "`bitcast` changes shape")
        if "bool" in (x.dtype, r.dtype) or DTYPE_BITS[x.dtype] != DTYPE_BITS[r.dtype]:
            _fail(op, f"`bitcast` of {x.dtype} to {r.dtype}: element widths must match")
    elif k == "broadcast":
        if broadcast_shapes(op.operands[0].shape, op.result.shape) != op.result.shape:
            _fail(op, "broadcast to a shape the operand does not broadcast to")
    elif k in ("reshape", "concat", "slice", "permute"):
        _check_shape_op(op)
    elif k not in STRUCTURAL_OPS:
        _fail(op, f"unknown op `{k}`")


def _tiles(shape: tuple) -> list[int]:
    return [d.id for d in shape if isinstance(d, TileVar)]


def _ints(shape: tuple) -> int:
    return math.prod(d for d in shape if not isinstance(d, TileVar))


def _check_shape_op(op: Op) -> None:
    """reshape keeps the tile dims in order and the int elements; concat joins along an int
    axis; slice takes [start, stop) of an int axis; permute reorders the dims."""
    k, x, r, a = op.kind, op.operands[0], op.result, op.attrs
    if any(v.dtype != r.dtype for v in op.operands):
        _fail(op, f"`{k}` changes the dtype")
    if k == "reshape":
        if a["shape"] != r.shape or _tiles(x.shape) != _tiles(r.shape) \
                or _ints(x.shape) != _ints(r.shape):
            _fail(op, "`reshape` must keep the tile dims in order and the element count")
    elif k == "permute":
        if sorted(a["perm"]) != list(range(x.rank)) or \
                tuple(x.shape[p] for p in a["perm"]) != r.shape:
            _fail(op, "`permute` result does not match its perm")
    else:
        ax = a["axis"]
        if not 0 <= ax < x.rank or isinstance(x.shape[ax], TileVar):
            _fail(op, f"`{k}` along axis {ax}, which is not an int dim")
        if k == "slice" and not (0 <= a["start"] < a["stop"] <= x.shape[ax]
                                 and r.shape == x.shape[:ax] + (a["stop"] - a["start"],)
                                 + x.shape[ax + 1:]):
            _fail(op, "`slice` bounds or result shape are wrong")
        if k == "concat":
            rest = [v.shape[:ax] + v.shape[ax + 1:] for v in op.operands]
            if any(s != rest[0] for s in rest) or any(v.rank != x.rank for v in op.operands) \
                    or r.shape[ax] != sum(v.shape[ax] for v in op.operands):
                _fail(op, "`concat` operands do not line up")


def _verify_region(region: Region, defined: set[int]) -> None:
    scope = set(defined)
    scope.update(a.id for a in region.args)
    for op in region.ops:
        _check_op(op, scope)
        if op.body is not None:
            _verify_region(op.body, scope)
            for v, arg in zip(op.body.yields, op.body.args):
                if (v.shape, v.dtype) != (arg.shape, arg.dtype):
                    _fail(op, f"loop yields {v!r} whose type differs from its carried value")
        scope.update(r.id for r in op.results)
    for y in region.yields:
        if y.id not in scope:
            _fail(None, f"{y!r} yielded but not defined in the loop body")


def verify(ir: KernelIR) -> None:
    for t in ir.grid:
        if t.kind != "grid":
            _fail(None, f"grid tile {t!r} is not marked grid")
    for t in ir.tiles:
        if not isinstance(t, TileVar) or t.block not in ir.block_syms:
            _fail(None, f"tile {t!r} uses an unknown block size")
    _verify_region(ir.body, set())
