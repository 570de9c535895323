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


_POSITIONS = ("iota", "tile_begin", "tile_id", "tile_size", "tile_count")


def _parallel(ir: KernelIR, t: TileVar) -> bool:
    for op in ir.body.walk():
        k = op.kind
        # the block's size and in-range count change with the extent (a one-block tile's size
        # is the extent); lane indices do not
        if k in ("tile_size", "tile_count", "pad_fill") and op.attrs["tile"] is t:
            return False
        if k in ("reduce", "scan") and op.operands[0].shape[op.attrs["axis"]] is t:
            return False  # a scan runs within a block (and a reverse one from its end)
        if k == "dot" and op.operands[0].shape[-1] is t:
            return False
    return True


def uses_positions(ir: KernelIR, t: TileVar) -> bool:
    """The kernel reads `t`'s lane indices, block index, begin, size or count."""
    return any(op.kind in _POSITIONS and op.attrs["tile"] is t for op in ir.body.walk())


def _zero_sum(loop: Op, t: TileVar) -> bool:
    """Padding adds lanes of zeros and whole iterations of them. Both add nothing when every
    value with `t` is zero in padded lanes, every such value ends in a sum or dot over `t`
    (`nil`: zero in an all-padding iteration), and every carried value only adds those."""
    body = loop.body
    assert body is not None
    zero: set[int] = set()  # values with t that are zero in padded lanes
    nil: set[int] = set()  # values without t that are zero in an iteration of padding only
    grows: dict[int, int] = {}  # value -> the carried value it is (that value + a nil)
    args = {a.id for a in body.args}
    if any(_has(a, t) for a in body.args):
        return False
    for op in body.ops:
        k, ins, outs = op.kind, op.operands, op.results
        if k == "loop" or (k in _POSITIONS and op.attrs["tile"] is t):
            return False  # positions, counts and nested loops see the extra iterations
        out = outs[0].id if outs else None
        if k == "load":
            if _has(outs[0], t):
                zero.add(outs[0].id)
            continue
        if k == "store":  # only rows of t: a t-free store is redone by padded iterations
            if op.attrs.get("atomic"):  # an atomic of padded rows would update real ones
                return False
            if not (any(i.kind == "tile" and i.tile is t for i in op.attrs["index"])
                    and ins[0].id in zero):
                return False
            continue
        if any(_has(v, t) for v in ins) or any(_has(v, t) for v in outs):
            if any(v.id not in zero for v in ins[:2]) and k != "dot":
                return False
            if k == "reduce" and ins[0].shape[op.attrs["axis"]] is t:
                if op.attrs["op"] != "sum":
                    return False
                nil.add(out)
            elif k == "dot":  # only a contraction over t with both factors zero there
                if not (ins[0].shape[-1] is t and ins[0].id in zero and ins[1].id in zero
                        and not _has(outs[0], t)):
                    return False
                if len(ins) == 3:  # acc + a @ b
                    if ins[2].id not in args:
                        return False
                    grows[out] = ins[2].id
                else:
                    nil.add(out)
            elif k in _ZERO_CHAIN or k in ("pad_fill", "reduce", "mul", "add", "sub", "neg"):
                if k == "pad_fill" and op.attrs["fill"] != 0:
                    return False
                zero.add(out)
            else:
                return False
            continue
        touched = [v.id in nil for v in ins]
        if not any(touched):
            continue  # the same in every iteration (carried values are checked at the yield)
        if k == "add" and len(ins) == 2 and sum(touched) == 1 and any(v.id in args for v in ins):
            grows[out] = next(v.id for v in ins if v.id in args)  # acc + nil
        elif k in ("cast", "neg") or (k in ("add", "sub", "mul") and all(touched)):
            nil.add(out)
        else:
            return False
    return all(y.id == a.id or grows.get(y.id) == a.id for a, y in zip(body.args, body.yields))


def safe_tiles(ir: KernelIR, loops_too: bool = True) -> dict[str, list[tuple[TensorParam, int]]]:
    """tile name -> the tensor axes it indexes, for every tile that padding cannot affect: the
    parallel grid dims, and with `loops_too` the zero-sum loop dims."""
    if any(op.kind == "store" and (op.attrs.get("atomic") or any(
            ix.kind == "gather" for ix in op.attrs["index"])) for op in ir.body.walk()):
        return {}  # a padded lane's atomic or scatter could land in a real element
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
    try:
        big = kernel.ir(*meta)
    except Exception:  # the host code does not take the padded size (a size passed as a scalar)
        return None
    if not same_apart_from(ir, big, tiles, masked):
        return None  # the host code reads a padded size as a number
    cuts = [{a: p.shape[a] for a in range(len(p.shape)) if (p.name, a) in masked}
            for p in ir.returns]
    return Padded(chosen, cuts, tuple(meta))

