"""A tile dim merged with an int dim, as Helion's int4_gemm writes it: no IR op.

    a = A[tm, tk.begin * 2 : tk.begin * 2 + bk * 2]           # [bm, bk * 2]: lanes 2*i + j
    b = torch.stack([lo, hi], dim=1).reshape(tk.block_size * 2, tn.block_size)  # [bk * 2, bn]
    acc = kd.dot(a, b, acc=acc)

A tile's size is the config's block size, so a dim of `c * block_size` lanes is no IR dim. The
tracer keeps such a value as its `c` parts (`Merged`), part j holding lanes `c*i + j` with the
tile `tk` in the merged dim's place, and a matmul that contracts the merged dim on both sides is
the sum over j of the parts' matmuls (`dot(a_j, b_j, acc=...)`, each masked along `tk` as any
dot). The parts of a widened slice `A[..., c*tk.begin : c*tk.begin + c*bk, ...]` are loads of
the host view `A.view(..., K // c, c, ...).movedim(axis + 1, 0)` (an extra input, made contiguous
at the call: one copy of A) at `[j, ..., tk, ...]`; the parts of `x.reshape(..., c * tk.block_size,
...)` of an `[..., tk, c, ...]` value are its slices along the `c` dim (the operands themselves
when it is a `torch.stack`). Any other use of a merged value is a ShapeError.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .device_dot import dot
from .device_ops import Tile, TileValue, _emit, cast_v
from .errors import ShapeError
from .ir import TileVar, Value, shape_str
from .tracing import user_loc


@dataclass(frozen=True)
class Widened:
    """A shape entry `c * tile.block_size` (or `block_size * c`, a registered block size's)."""

    tile: TileVar
    factor: int


def _const_int(v: Value) -> int | None:
    o = v.op
    if o is not None and o.kind == "const" and isinstance(o.attrs["value"], int) \
            and not isinstance(o.attrs["value"], bool):
        return int(o.attrs["value"])
    return None


def widened(s: Any) -> Widened | None:
    """`s` as `c * block_size` (c >= 2), else None."""
    if not isinstance(s, TileValue) or s.v.op is None or s.v.op.kind != "mul":
        return None
    a, b = s.v.op.operands
    for x, y in ((a, b), (b, a)):
        c = _const_int(y)
        if x.op is not None and x.op.kind == "tile_size" and c is not None and c >= 2:
            return Widened(x.op.attrs["tile"], c)
    return None


def _same_block(a: TileVar, b: TileVar) -> bool:
    return a is b or (a.block is b.block and a.extent == b.extent)


def _begin_times(v: Value) -> Widened | None:
    """`v` as `c * t.begin` (c >= 2), else None."""
    o = v.op
    if o is None or o.kind != "mul":
        return None
    for x, y in (o.operands, o.operands[::-1]):
        c = _const_int(y)
        if x.op is not None and x.op.kind == "tile_begin" and c is not None and c >= 2:
            return Widened(x.op.attrs["tile"], c)
    return None


def widened_slice(it: Any) -> Widened | None:
    """`c * t.begin : c * t.begin + c * bs` (bs: t's block size), else None."""
    if not isinstance(it, slice) or it.step is not None:
        return None
    start, stop = it.start, it.stop
    if not isinstance(start, TileValue) or not isinstance(stop, TileValue):
        return None
    begin = _begin_times(start.v)
    to = stop.v.op
    if begin is None or to is None or to.kind != "add":
        return None
    for x, y in (to.operands, to.operands[::-1]):
        b, size = _begin_times(x), widened(TileValue(y))
        if b is not None and size is not None and b.factor == begin.factor == size.factor \
                and b.tile is begin.tile and _same_block(size.tile, begin.tile):
            return begin
    return None


class Merged:
    """A value whose dim `axis` is `factor * tile` lanes, held as `factor` parts (lane c*i + j
    of the merged dim is lane i of part j)."""

    def __init__(self, parts: list[TileValue], axis: int, w: Widened):
        self.parts, self.axis, self.w = parts, axis, w

    @property
    def shape(self) -> tuple[str, ...]:
        s = [repr(d) for d in self.parts[0].v.shape]
        s[self.axis] = f"{self.w.factor}*{s[self.axis]}"
        return tuple(s)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return torch_call(func, args, kwargs or {})  # torch's argument parser asks this first

    def __matmul__(self, o: Any) -> TileValue:
        return merged_dot(self, o)

    def __rmatmul__(self, o: Any) -> TileValue:
        return merged_dot(o, self)

    def __getattr__(self, name: str) -> Any:
        raise _only_dot(f"`.{name}`")


def _refuse(name: str) -> Callable[..., Any]:
    def f(self: Merged, *args: Any, **kwargs: Any) -> Any:
        raise _only_dot(f"`{name}`")
    return f


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "neg", "and",
              "or", "xor", "getitem", "lt", "le", "gt", "ge"):
    setattr(Merged, f"__{_name}__", _refuse(f"__{_name}__"))


def _only_dot(what: str) -> ShapeError:
    return ShapeError(f"{what} of a value whose dim merges a tile with an int dim (`c * "
                      "tile.block_size` lanes): such a value may only be a matmul operand "
                      "contracted over that dim", user_loc(),
                      "use it in `kd.dot(a, b)` / `a @ b` as Helion's int4_gemm does, or keep the "
                      "int dim separate (`[tk, 2, tn]`) and compute on it before merging")


def _squeeze(x: TileValue, axis: int) -> TileValue:
    shape = x.v.shape[:axis] + x.v.shape[axis + 1:]
    return _emit("reshape", [x.v], {"shape": shape}, shape, x.v.dtype)


def merge(x: TileValue, want: tuple[Any, ...]) -> Merged:
    """`x.reshape(want)` where one entry of `want` is a Widened `c * tile`: x has `tile, c` there."""
    have = x.v.shape
    pos = [i for i, d in enumerate(want) if isinstance(d, Widened)]
    bad = f"reshape of a {shape_str(have)} tile to {[repr(d) for d in want]}"
    if len(pos) != 1:
        raise ShapeError(f"{bad}: one merged tile dim per reshape", user_loc())
    i = pos[0]
    w: Widened = want[i]
    ok = len(have) == len(want) + 1 and i + 1 < len(have) and isinstance(have[i], TileVar) \
        and _same_block(have[i], w.tile) and have[i + 1] == w.factor \
        and all(a is b or a == b for a, b in zip(have[:i] + have[i + 2:], want[:i] + want[i + 1:]))
    if not ok:
        raise ShapeError(f"{bad}: `{w.factor} * {w.tile!r}.block_size` merges a `{w.tile!r}` dim "
                         f"with the int dim {w.factor} right after it, and nothing else changes",
                         user_loc(), f"reshape a [..., {w.tile!r}, {w.factor}, ...] value, e.g. "
                         "`torch.stack([lo, hi], dim=1)` of two tiles")
    src = x.v.op
    if src is not None and src.kind == "concat" and src.attrs["axis"] == i + 1 \
            and all(o.shape[i + 1] == 1 for o in src.operands):  # torch.stack: its operands
        parts = [TileValue(o.op.operands[0]) if o.op is not None and o.op.kind == "expand_dims"
                 and o.op.attrs["axis"] == i + 1 else _squeeze(TileValue(o), i + 1)
                 for o in src.operands]
    else:
        parts = []
        for j in range(w.factor):
            shape = have[:i + 1] + (1,) + have[i + 2:]
            s = _emit("slice", [x.v], {"axis": i + 1, "start": j, "stop": j + 1}, shape, x.v.dtype)
            parts.append(_squeeze(s, i + 1))
    return Merged(parts, i, w)


def load(getitem: Callable[[Any, Any], TileValue], views: Any, t: Any, idx: tuple[Any, ...],
         region: Any) -> Merged:
    """`t[idx]` with one widened slice: the parts are loads of a host view (module docstring)."""
    axis = next(a for a, it in enumerate(idx) if widened_slice(it) is not None)
    w = widened_slice(idx[axis])
    assert w is not None
    n = t.shape[axis]
    if n % w.factor or n // w.factor != w.tile.extent:
        raise ShapeError(f"a widened slice `{w.factor} * {w.tile!r}.begin` of an axis of {n} "
                         f"elements: it needs {w.factor} * {w.tile.extent} (the tile's extent "
                         f"times {w.factor}) elements", user_loc(),
                         f"make the axis {w.factor} * {w.tile.extent} long (int4_gemm: K even)")
    if len(idx) != t.dim():
        raise ShapeError("a widened slice needs an index entry for every axis", user_loc(),
                         "write every axis, e.g. `A[tm, s:e]`")
    shape = tuple(t.shape[:axis]) + (n // w.factor, w.factor) + tuple(t.shape[axis + 1:])
    v = views.device_view(t, ("view", (shape,), ()), t.view(shape))
    v = views.device_view(v, ("movedim", (axis + 1, 0), ()), v.movedim(axis + 1, 0), "widened")
    tile = Tile(w.tile, region)
    rest = tuple(tile if a == axis else it for a, it in enumerate(idx))
    return Merged([getitem(v, (j,) + rest) for j in range(w.factor)], axis - sum(
        1 for it in idx[:axis] if isinstance(it, int)), w)


def torch_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A torch function of a merged value: `torch.matmul(a, b)` / `a @ b`, else a ShapeError."""
    if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm) \
            and len(args) == 2 and not kwargs:
        return merged_dot(*args)
    raise _only_dot(f"`{getattr(func, '__name__', func)}`")


def merged_dot(a: Any, b: Any, acc: Any = None, out_dtype: Any = None) -> TileValue:
    """a @ b contracting a merged dim on both sides: the sum of the parts' products."""
    if not (isinstance(a, Merged) and isinstance(b, Merged)):
        raise _only_dot("a matmul with one merged operand")
    ra = len(a.parts[0].v.shape)
    if a.axis != ra - 1 or b.axis != ra - 2 or a.w.factor != b.w.factor \
            or not _same_block(a.w.tile, b.w.tile):
        raise ShapeError(f"matmul of {a.shape} and {b.shape}: the merged dims must be the "
                         "contracted ones, of the same tile and factor", user_loc(),
                         "merge A's last dim and B's first with the same `c * tile.block_size`")
    if acc is not None:
        out = acc
        for pa, pb in zip(a.parts, b.parts):
            out = dot(pa, pb, out, out_dtype)
        return out
    # no accumulator: the parts' products summed in f32 and rounded once, as one matmul is
    first = dot(a.parts[0], b.parts[0], None, out_dtype)
    out = cast_v(first, "f32")
    for pa, pb in zip(a.parts[1:], b.parts[1:]):
        out = dot(pa, pb, out, out_dtype)
    return cast_v(out, first.v.dtype)
