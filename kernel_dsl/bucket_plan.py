"""Which dims of a user's kernel may run padded to a shape bucket, proven from its tile IR.

Padding a dim to its bucket (kernel_dsl/buckets.py) is only invisible when no real output
element can read a padded one. Two kinds of `kd.tile` dims are safe, and the IR says which:

- a *parallel* grid dim: the lanes never meet. No reduction or dot contracts over it, nothing
  counts its in-range lanes, and every tensor axis it indexes is indexed by it alone. Padded
  lanes compute garbage into padded output rows, which are cut off.
- a *zero-sum* loop dim: every value that has it comes from zero-padded loads through casts,
  transposes, products of such values and sums over other dims, and it ends in a sum or a dot
  over it. The padded lanes add zeros.

The kernel is then traced again at the padded sizes, and both IRs must be the same apart from
those extents: host code that reads a size as a number (`acc / n`, `kd.full([n], ...)`) makes a
difference there, and the kernel builds at its exact size instead.

A dim is padded only once it is known to change: torch.compile gave it a symbolic size, the
caller marked it (`torch._dynamo.mark_dynamic`), or the kernel has seen two sizes of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import buckets
from .ir import KernelIR, Op, TensorParam, TileVar, Value
from .ir_printer import print_ir

_ZERO_CHAIN = ("cast", "transpose", "expand_dims", "broadcast")


@dataclass
class Padded:
    """Run at padded sizes: inputs grow per axis, returned outputs are cut back."""

    pads: dict[int, dict[int, int]]  # argument index -> {axis: padded size}
    cuts: list[dict[int, int]]  # per returned output: {axis: true size}
    meta_args: tuple[Any, ...]  # the padded arguments as meta tensors (the build's key)

    def pad_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(args)
        for i, axes in self.pads.items():
            for axis, size in axes.items():
                out[i] = buckets.pad(out[i], axis, size)
        return tuple(out)

    def cut_outputs(self, outs: list[torch.Tensor]) -> list[torch.Tensor]:
        res = []
        for t, axes in zip(outs, self.cuts):
            for axis, n in axes.items():
                t = t.narrow(axis, 0, n)
            res.append(t.contiguous())
        return res


def _accesses(ir: KernelIR) -> dict[str, list[tuple[int, Any]]]:
    """tensor name -> (axis, Index) of every load and store."""
    acc: dict[str, list[tuple[int, Any]]] = {}
    for op in ir.body.walk():
        if op.kind in ("load", "store"):
            for axis, idx in enumerate(op.attrs["index"]):
                acc.setdefault(op.attrs["tensor"].name, []).append((axis, idx))
    return acc


def _axes_of(ir: KernelIR, t: TileVar, acc: dict[str, list[tuple[int, Any]]]
             ) -> list[tuple[TensorParam, int]] | None:
    """The tensor axes `t` indexes; None if one of them is also indexed otherwise or is not
    exactly `t`'s extent."""
    out = []
    for p in ir.params:
        axes = {a for a, idx in acc.get(p.name, []) if idx.kind == "tile" and idx.tile is t}
        for a in axes:
            if p.shape[a] != t.extent or any(
                    ax == a and not (idx.kind == "tile" and idx.tile is t)
                    for ax, idx in acc.get(p.name, [])):
                return None
            out.append((p, a))
    return out


def _has(v: Value, t: TileVar) -> bool:
    return any(d is t for d in v.shape)


def _parallel(ir: KernelIR, t: TileVar) -> bool:
    for op in ir.body.walk():
        k = op.kind
        if k in ("tile_count", "pad_fill") and op.attrs["tile"] is t:
            return False
        if k == "reduce" and op.operands[0].shape[op.attrs["axis"]] is t:
            return False
        if k == "dot" and op.operands[0].shape[-1] is t:
            return False
    return True


def _zero_sum(loop: Op, t: TileVar) -> bool:
    zero: set[int] = set()  # ids of values that are zero in every padded lane

    def z(v: Value) -> bool:
        return v.id in zero

    assert loop.body is not None
    if any(_has(a, t) for a in loop.body.args):
        return False
    for op in loop.body.walk():
        k, ins, outs = op.kind, op.operands, op.results
        if k == "load":
            if _has(outs[0], t):
                zero.add(outs[0].id)
            continue
        if k in ("iota", "tile_count") and op.attrs["tile"] is t:
            return False  # lane positions and counts are not zeros
        touches = any(_has(v, t) for v in ins) or any(_has(v, t) for v in outs)
        if not touches:
            continue
        if k in _ZERO_CHAIN and z(ins[0]):
            ok = True
        elif k == "pad_fill":
            ok = z(ins[0]) and op.attrs["fill"] == 0
        elif k in ("mul", "add", "sub"):
            ok = all(z(v) for v in ins)
        elif k == "neg":
            ok = z(ins[0])
        elif k == "reduce":
            over_t = ins[0].shape[op.attrs["axis"]] is t
            ok = z(ins[0]) and (op.attrs["op"] == "sum" or not over_t)
            if ok and not over_t:
                zero.add(outs[0].id)
            continue
        elif k == "dot" and ins[0].shape[-1] is t:  # contracts over t: both factors zero there
            if not (z(ins[0]) and z(ins[1]) and not _has(outs[0], t)):
                return False
            continue
        elif k == "dot":  # t is a row or column: zero rows give zero rows
            ok = all(z(v) for v in ins[:2] if _has(v, t)) and (len(ins) < 3 or z(ins[2]))
        elif k == "store":
            ok = z(ins[0])
        else:
            ok = False
        if not ok:
            return False
        if outs:
            zero.add(outs[0].id)
    return True


def safe_tiles(ir: KernelIR, loops_too: bool = True) -> dict[str, list[tuple[TensorParam, int]]]:
    """tile name -> the tensor axes it indexes, for every tile that padding cannot affect: the
    parallel grid dims, and with `loops_too` the zero-sum loop dims."""
    acc = _accesses(ir)
    loops = {op.attrs["tile"].id: op for op in ir.body.walk() if op.kind == "loop"}
    safe = {}
    for t in ir.tiles:
        axes = _axes_of(ir, t, acc)
        if not axes or (t.kind != "grid" and not loops_too):
            continue
        ok = _parallel(ir, t) if t.kind == "grid" else (
            t.id in loops and _zero_sum(loops[t.id], t))
        if ok:
            safe[t.name] = axes
    return safe


def same_apart_from(a: KernelIR, b: KernelIR, tiles: set[str], axes: set[tuple[str, int]]) -> bool:
    """True if two traces of a kernel differ only in the extents of `tiles` and the sizes of
    the tensor `axes` they index."""
    return _shape_free(a, tiles, axes) == _shape_free(b, tiles, axes)


def _shape_free(ir: KernelIR, tiles: set[str], axes: set[tuple[str, int]]) -> str:
    """The printed IR with the padded extents blanked: equal texts mean equal kernels."""
    saved_t = [(t, t.extent) for t in ir.tiles if t.name in tiles]
    saved_p = [(p, p.shape) for p in ir.params]
    try:
        for t, _ in saved_t:
            t.extent = -1
        for p, shape in saved_p:
            p.shape = tuple(-1 if (p.name, a) in axes else d for a, d in enumerate(shape))
        return print_ir(ir, locs=False)
    finally:
        for t, e in saved_t:
            t.extent = e
        for p, shape in saved_p:
            p.shape = shape


def plan(kernel: Any, args: tuple[Any, ...], dynamic: set[tuple[int, int]]) -> Padded | None:
    """How to run `kernel` on `args` padded to buckets, or None to build it at exact sizes."""
    ir = kernel.ir(*args)
    chosen: dict[int, dict[int, int]] = {}  # argument index -> {axis: padded size}
    tiles: set[str] = set()
    masked: set[tuple[str, int]] = set()  # (tensor, axis) of every padded axis, outputs too
    for name, axes in safe_tiles(ir).items():
        ins = [(p.arg_index, a) for p, a in axes if p.arg_index is not None]
        n = axes[0][0].shape[axes[0][1]]
        size = buckets.bucket(n)
        if size == n or not any(k in dynamic for k in ins):
            continue
        tiles.add(name)
        masked.update((p.name, a) for p, a in axes)
        for i, a in ins:
            chosen.setdefault(i, {})[a] = size
    if not chosen:
        return None
    meta = list(args)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            shape = [chosen.get(i, {}).get(axis, d) for axis, d in enumerate(a.shape)]
            meta[i] = torch.empty(shape, dtype=a.dtype, device="meta")
    big = kernel.ir(*meta)
    if not same_apart_from(ir, big, tiles, masked):
        return None  # the host code reads a padded size as a number
    cuts = [{a: p.shape[a] for a in range(len(p.shape)) if (p.name, a) in masked}
            for p in ir.returns]
    return Padded(chosen, cuts, tuple(meta))

