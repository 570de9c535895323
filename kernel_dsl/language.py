"""The kernel language's public functions: `kd.tile`, `kd.block_size`, `kd.zeros`, ..."""
from __future__ import annotations

import sys
from typing import Any, Iterator

import torch

from . import block_arith, block_dims, device_dot, device_ops, tile_bounds, widened
from .device_ops import Tile, TileValue
from .errors import KernelSyntaxError, LoopScopeError
from .ir import BlockSym, Op, Region, Value, shape_str
from .tracing import Tracer, current, loop_var_names, replace_uses, shape_only, user_loc, write_frame_locals


class BlockSize:
    """A block-size knob declared with `kd.block_size(name)`, shared by several `kd.tile`s."""

    def __init__(self, sym: BlockSym | None, name: str | None, tracer: Tracer | None = None,
                 extent: int | None = None):
        self.sym = sym
        self.name = name
        self.tracer = tracer  # an unnamed one is made by its first `kd.tile`, in source order
        self.extent = extent  # register_block_size's largest size: a dim of it in a tile shape

    def __repr__(self) -> str:
        return f"kd.block_size({self.name!r})" if self.name else "kd.register_block_size(...)"

    def sym_in(self, tr: Tracer, loc: Any) -> BlockSym:
        """Its symbol in the kernel `tr` traces (an unnamed one gets its symbol here)."""
        if self.sym is None and self.tracer is tr:
            self.sym = tr.block_sym()
        if self.sym is None:
            raise KernelSyntaxError("`kd.block_size` was declared outside the kernel", loc,
                                    "call `kd.block_size(...)` in the kernel's host code")
        return self.sym


block_arith.install(BlockSize)  # `x // bk * bk` in device code: an int32 scalar


def block_size(name: str, choices: list[int] | tuple[int, ...] | None = None) -> BlockSize:
    """Declares a named block size; pass it as `block_size=` to every `kd.tile` that shares it."""
    return _declare(name, tuple(choices) if choices else None, "kd.block_size")


def register_block_size(min_or_max: int, max_or_none: int | None = None) -> BlockSize:
    """Helion's `hl.register_block_size`: an unnamed block size the config picks, shared by the
    `kd.tile(..., block_size=...)` loops given it. The bounds only document intent here (any
    block size is correct; the backend's config space decides which are legal). As in Helion it
    may be a tile dim, `kd.zeros([tm, bs])`, that the loop `kd.tile(n, block_size=bs)` walks
    (kernel_dsl/block_dims.py)."""
    bs = _declare(None, None, "kd.register_block_size")
    top = max_or_none if max_or_none is not None else min_or_max
    bs.extent = top if isinstance(top, int) and not isinstance(top, bool) else None
    return bs


def _declare(name: str | None, choices: tuple[int, ...] | None, what: str) -> BlockSize:
    tr = current()
    if tr is None:
        return BlockSize(None, name)
    if tr.region is not None:
        raise KernelSyntaxError(f"`{what}` is host code", user_loc(),
                                "declare it before the `kd.tile` loops")
    if name is None:  # positional: its place in Config.block_sizes is its first loop's
        return BlockSize(None, None, tr)
    return BlockSize(tr.block_sym(name, choices), name)


def specialize(n: Any) -> Any:
    """Makes a value a compile-time constant: a float argument (otherwise a runtime scalar, so
    that a new value does not rebuild the kernel; kernel_dsl/runtime_scalars.py) then builds the
    kernel once per value. Sizes, ints and bools are already specialized per value."""
    hook = getattr(type(n), "_kd_specialize", None)  # a runtime scalar while tracing
    if hook is not None:
        return hook(n)
    return n if isinstance(n, (bool, float, torch.SymFloat)) else int(n)


def _sym_for(tr: Tracer, bs: Any, loc: Any) -> BlockSym:
    if bs is None:
        return tr.block_sym()
    if isinstance(bs, BlockSize):
        return bs.sym_in(tr, loc)
    if isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1:
        return tr.block_sym(pinned=bs)
    raise KernelSyntaxError(f"block_size={bs!r} is not a positive int, None or kd.block_size(...)",
                            loc, "pin with an int (`block_size=64`) or leave it free (None)")


class TileLoop:
    """`for t in kd.tile(...)`: runs its body exactly once, recording it as a region."""

    def __init__(self, tr: Tracer, sizes: list[Any], block_sizes: list[Any], multi: bool,
                 begins: list[Any] | None = None):
        self.tr = tr
        self.sizes = sizes  # the ends
        self.begins = begins  # None: every dim starts at 0
        self.block_sizes = block_sizes
        self.multi = multi
        self.step = 0
        self.loc = user_loc()
        self.before: dict[str, Any] = {}
        self.op: Op | None = None
        self.parent: Region | None = None
        self.levels: list[tuple[Op, Region]] = []  # (loop op, enclosing region), outermost first

    def __iter__(self) -> "TileLoop":
        return self

    def __next__(self) -> Any:
        frame = sys._getframe(1)
        self.step += 1
        if self.step == 1:
            return self._enter(frame)
        if self.step == 2:
            self._exit(frame)
        raise StopIteration

    def _enter(self, frame: Any) -> Any:
        tr, loc = self.tr, self.loc
        if tr.region is None:
            if tr.grid_done:
                raise KernelSyntaxError(
                    "a kernel has one outermost `kd.tile` loop (the launch grid)", loc,
                    "merge the loops, put `kd.barrier()` between them (the second then starts "
                    "after every program of the first finished), or write a second kernel")
            for b, n in zip(self.begins or [0] * len(self.sizes), self.sizes):
                if not (isinstance(b, int) and b == 0 and isinstance(n, int)):
                    raise KernelSyntaxError(
                        f"the launch grid's `kd.tile({b!r}, {n!r})` does not start at 0 with an "
                        "int end", loc, "tile the grid from 0 (`kd.tile(n)`); a nested loop may "
                        "take `kd.tile(begin, end)`")
            syms = [_sym_for(tr, b, loc) for b in self.block_sizes]
            names = loop_var_names(loc, len(self.sizes))
            vars_ = [tr.new_tile(n, s, "grid", loc, nm) for n, s, nm in zip(self.sizes, syms, names)]
            tr.grid = vars_
            tr.region = tr.body
            tiles = [Tile(v, tr.body) for v in vars_]
            return tuple(tiles) if self.multi else tiles[0]
        # a nested loop over several sizes is that many nested loops, the first outermost
        _unalias(frame)
        self.before = dict(frame.f_locals)
        names = loop_var_names(loc, len(self.sizes))
        tiles = []
        for i, (n, bs, nm) in enumerate(zip(self.sizes, self.block_sizes, names)):
            sym = _sym_for(tr, bs, loc)
            var = block_dims.adopt(tr, sym, n if self.begins is None else None, loc)
            if var is None:
                var = tr.new_tile(1, sym, "loop", loc, nm)
            elif nm not in {t.name for t in tr.tiles}:  # the loop walks a dim a tile shape
                var.name = nm  # already used (`kd.zeros([tm, bs])`): it takes the loop's name
            if self.begins is None:
                var.extent = n
            else:
                tile_bounds.make_bounds(var, self.begins[i], n, loc)
            parent = tr.region
            body = Region(parent=parent)
            op = Op("loop", [], {"tile": var}, [], loc, body)
            parent.ops.append(op)
            self.levels.append((op, parent))
            tr.tile_bodies[var.id] = body
            tr.region = body
            tiles.append(Tile(var, body))
        self.op, self.parent = self.levels[0]
        return tuple(tiles) if self.multi else tiles[0]

    def _exit(self, frame: Any) -> None:
        tr = self.tr
        if self.op is None:  # the grid loop ends: back to host code
            tr.region = None
            tr.grid_done = True
            return
        for op, parent in reversed(self.levels):  # innermost first: its results feed the next
            self._close(op, parent, frame)

    def _close(self, op: Op, parent: Region, frame: Any) -> None:
        """Ends one loop: the variables its body rebound become its carried values."""
        tr = self.tr
        body = op.body
        assert body is not None
        after = frame.f_locals
        carried: list[tuple[str, Value, Value]] = []
        for name, old in self.before.items():
            new = after.get(name, old)
            if new is old:
                continue
            if isinstance(old, TileValue) and not (
                    old.v.region is None or old.v.region.encloses(parent)):
                continue  # a stale value from an earlier, finished loop: just a new local here
            if isinstance(old, TileValue) and isinstance(new, TileValue):
                carried.append((name, old.v, new.v))
            elif isinstance(old, TileValue) or (isinstance(old, (int, float)) and
                                                not isinstance(new, (Tile, tuple))):
                raise LoopScopeError(
                    f"variable `{name}` is rebound inside a `kd.tile` loop to a "
                    f"{type(new).__name__}", self.loc,
                    "the loop body is traced once: carried values must stay tiles of the same "
                    "shape and dtype (Python counters do not count iterations)")
        var = op.attrs["tile"]  # a value carried with the loop's own dim (a block-size dim)
        carried = [(name, old, block_dims.keep_past_end(var, body, old, TileValue(new)).v
                    if var in new.shape and (old.shape, old.dtype) == (new.shape, new.dtype)
                    else new) for name, old, new in carried]
        seen: dict[int, str] = {}
        updates: dict[str, Any] = {}
        for name, old, new in carried:
            if old.id in seen:
                raise LoopScopeError(
                    f"`{seen[old.id]}` and `{name}` start the loop as the same value and both "
                    "change in it", self.loc, "initialize each carried variable separately")
            seen[old.id] = name
            if (old.shape, old.dtype) != (new.shape, new.dtype):
                raise LoopScopeError(
                    f"loop-carried `{name}` is {old.dtype}{shape_str(old.shape)} before the "
                    f"loop but {new.dtype}{shape_str(new.shape)} after one iteration",
                    new.op.loc if new.op is not None and new.op.loc is not None else self.loc,
                    f"create `{name}` before the loop with the shape and dtype it has inside "
                    "(e.g. `kd.zeros([tm, tn], dtype=torch.float32)`), or cast with .to()")
            arg = tr.new_value(old.shape, old.dtype, None, body)
            arg.hint = name
            replace_uses(body, old, arg)
            body.args.append(arg)
            op.operands.append(old)
            result = tr.new_value(old.shape, old.dtype, op, parent)
            op.results.append(result)
            updates[name] = TileValue(result)
        # a carried variable may be rebound to another's old value (`a, b = b, a`): this
        # iteration's value of that variable is its block argument
        arg_of = {old.id: arg for (_, old, _), arg in zip(carried, body.args)}
        body.yields = [arg_of.get(new.id, new) for _, _, new in carried]
        tr.region = parent
        write_frame_locals(frame, updates)


def _unalias(frame: Any) -> None:
    """Names that share one tile value (`b = a`) get values of their own before a loop: the
    body is traced once and carried values are found by which names change, so were `b`
    rebound in the loop while `a` is not, the body's reads of `a` would become reads of `b`."""
    seen: set[int] = set()
    updates: dict[str, Any] = {}
    for name, v in frame.f_locals.items():
        if not isinstance(v, TileValue):
            continue
        if v.v.id in seen:  # an identity cast: a distinct value with the same contents
            updates[name] = TileValue(current().emit("cast", [v.v], {"dtype": v.v.dtype},  # type: ignore[union-attr]
                                                     v.v.shape, v.v.dtype))
        seen.add(v.v.id)
    write_frame_locals(frame, updates)


def tile(begin_or_end: Any, end_or_none: Any = None, block_size: Any = None) -> Iterator[Any]:
    """`kd.tile(n)` tiles [0, n); `kd.tile(begin, end)` tiles [begin, end), as Helion's
    `hl.tile`. Either may be a list (one entry per dim). The outermost loop is the launch grid;
    a nested loop's bounds may be device values (an outer tile's `.begin`/`.end`, ...)."""
    sizes = begin_or_end if end_or_none is None else end_or_none
    begins = None if end_or_none is None else begin_or_end
    multi = isinstance(sizes, (list, tuple))
    size_list = list(sizes) if multi else [sizes]
    begin_list = None if begins is None else list(begins) if multi else [begins]
    if begin_list is not None and (isinstance(begins, (list, tuple)) != multi
                                   or len(begin_list) != len(size_list)):
        raise KernelSyntaxError(f"`kd.tile({begins!r}, {sizes!r})`: begins and ends differ in "
                                "number", user_loc(), "give one begin per end")
    if shape_only():
        return iter(())
    tr = current()
    loc = user_loc()
    if tr is None:
        raise KernelSyntaxError("`kd.tile` is used outside a kernel", loc,
                                "decorate the function with `@kd.kernel`")
    if isinstance(block_size, (list, tuple)):
        bs = list(block_size)
        if len(bs) != len(size_list):
            raise KernelSyntaxError(f"{len(bs)} block sizes for {len(size_list)} tiled sizes", loc,
                                    "give one block size (or None) per size")
    else:
        bs = [block_size] * len(size_list)
    if begin_list is None and any(isinstance(n, TileValue) for n in size_list):
        begin_list = [0] * len(size_list)  # Helion's `hl.tile(m_g)` with a device m_g: [0, m_g)
    if begin_list is None:
        for n in size_list:
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise KernelSyntaxError(
                    f"`kd.tile` size {n!r} is not a positive int", loc,
                    "tile sizes read from `.shape` (empty tensors are not supported); a nested "
                    "loop over device bounds is `kd.tile(begin, end)`")
    return TileLoop(tr, size_list, bs, multi, begin_list)


def grid(begin_or_end: Any, end_or_none: Any = None) -> Iterator[Any]:
    """Helion's `hl.grid`: integer indices, one per element of [0, n) (or [begin, end)), as
    the launch grid or as a sequential loop; `kd.grid([n, m])` gives a tuple. Each index is an
    int32 device scalar: it indexes one element of an axis (`x[b, tj]`) and takes arithmetic."""
    it = tile(begin_or_end, end_or_none, block_size=1)
    if shape_only():
        return it
    return _GridLoop(it)  # type: ignore[arg-type]


class _GridLoop:
    """A `kd.tile` loop with blocks of one that yields each block's index instead of the tile."""

    def __init__(self, loop: TileLoop):
        self.loop = loop

    def __iter__(self) -> "_GridLoop":
        return self

    def __next__(self) -> Any:
        frame = sys._getframe(1)
        self.loop.step += 1
        if self.loop.step == 1:
            got = self.loop._enter(frame)
            tiles = got if isinstance(got, tuple) else (got,)
            idx = tuple(t.begin for t in tiles)
            return idx if self.loop.multi else idx[0]
        if self.loop.step == 2:
            self.loop._exit(frame)
        raise StopIteration


def _shape(shape: Any) -> Any:
    """Block sizes in a tile shape become the dims of the loops that take them (block_dims.py)."""
    entries = shape if isinstance(shape, (tuple, list)) else [shape]
    if not any(isinstance(s, BlockSize) for s in entries):
        return shape
    tr, loc = current(), user_loc()
    return [block_dims.dim_of(tr, _sym_for(tr, s, loc), s.extent, loc)
            if isinstance(s, BlockSize) else s for s in entries]


def zeros(shape: Any, dtype: torch.dtype = torch.float32, device: Any = None) -> TileValue:
    """A tile of zeros, e.g. an accumulator `kd.zeros([tm, tn], dtype=torch.float32)`; a
    block size may be a dim: `kd.zeros([tm, bs])` (Helion's `hl.register_block_size`).
    `device` (Helion's `hl.zeros(..., device=x.device)`) is accepted and ignored: a tile lives
    where the kernel runs."""
    return device_ops.full(_shape(shape), 0, dtype)


def full(shape: Any, value: float, dtype: torch.dtype = torch.float32,
         device: Any = None) -> TileValue:
    return device_ops.full(_shape(shape), value, dtype)


def dot(a: Any, b: Any, acc: Any = None, out_dtype: torch.dtype | None = None) -> TileValue:
    """Matrix product on the matrix unit with f32 accumulation; `acc` keeps the f32 sum.
    `out_dtype` (Helion's) is the product's dtype before accumulation (default: the operands'
    dtype, f32 for float8)."""
    if isinstance(a, widened.Merged) or isinstance(b, widened.Merged):  # int4_gemm's operands
        return widened.merged_dot(a, b, acc, out_dtype)
    return device_dot.dot(a, b, acc, out_dtype)
