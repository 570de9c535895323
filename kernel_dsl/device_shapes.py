"""Shape ops on tiles: `reshape`/`view(shape)`, `torch.cat`/`torch.stack`, Helion's `split`/`join`,
and `transpose`/`permute` beyond the last two dims. Importing this module registers the methods
and torch functions (docs/ir.md, "Shape ops").

Tile dims never merge or split: a tile dim's size is the config's block size, so a reshape keeps
the tile dims in order and regroups only the int dims between them (the rope pattern
`x.reshape([tb, tt, 2, half])` of a `[tb, tt, d]` tile). `split`/`join` of a last dim of 2 are a
slice and a concatenation; where they pair with the rope pattern's reshape and swap, the chain
is the slice (concatenation) of halves along the original dim, which is what the tracer emits:
a minor dim of size 2 is a poor layout on TPU (one used lane in 128).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from . import device_math, widened
from . import torch_functions as tf
from .device_ops import (
    METHODS,
    Tile,
    TileValue,
    _as_tile,
    _common,
    _emit,
    broadcast,
    expand_dims,
    transpose,
)
from .errors import DTypeError, KernelSyntaxError, ShapeError
from .ir import Dim, TileVar, broadcast_shapes, shape_str
from .tracing import user_loc


def _dim(s: Any) -> Dim:
    """A reshape entry as a dim: an int (-1 too), a tile, a block size, `t.block_size`."""
    from .language import BlockSize, _shape

    if isinstance(s, Tile):
        return s.var
    if isinstance(s, BlockSize):
        return _shape([s])[0]
    if isinstance(s, TileValue) and s.v.op is not None and s.v.op.kind == "tile_size":
        return s.v.op.attrs["tile"]
    if isinstance(s, TileVar) or (isinstance(s, int) and not isinstance(s, bool) and s >= -1):
        return s
    w = widened.widened(s)  # `tile.block_size * 2`: a tile merged with an int dim
    if w is not None:
        return w  # type: ignore[return-value]
    raise KernelSyntaxError(f"reshape entries are ints, -1, tiles or block sizes, got {s!r}",
                            user_loc(), "write e.g. `x.reshape([tm, d // 2, 2])`; of arithmetic on "
                            "block sizes only `c * tile.block_size` (a merge) is a shape entry")


def _segments(shape: tuple[Dim, ...]) -> tuple[list[TileVar], list[list[int]]]:
    """The tile dims in order and the int dims before, between and after them."""
    tiles: list[TileVar] = []
    segs: list[list[int]] = [[]]
    for d in shape:
        if isinstance(d, TileVar):
            tiles.append(d)
            segs.append([])
        else:
            segs[-1].append(d)
    return tiles, segs


def reshape(x: Any, *sizes: Any) -> TileValue:
    t = _as_tile(x)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    want = tuple(_dim(s) for s in sizes)
    if any(isinstance(d, widened.Widened) for d in want):
        return widened.merge(t, want)  # type: ignore[return-value]
    have = t.v.shape
    tiles_in, segs_in = _segments(have)
    tiles_out, segs_out = _segments(want)
    bad = f"reshape of a {shape_str(have)} tile to {shape_str(want)}"
    if [v.id for v in tiles_in] != [v.id for v in tiles_out]:
        raise ShapeError(f"{bad}: tile dims must stay, in order (a tile dim's size is the "
                         "config's block size)", user_loc(),
                         "regroup only the int dims around the tiles, e.g. "
                         "`x.reshape([tm, d // 2, 2])` of an `x[tm, :]` tile")
    out: list[Dim] = []
    for i, (si, so) in enumerate(zip(segs_in, segs_out)):
        n = math.prod(si)
        if so.count(-1) > 1:
            raise ShapeError(f"{bad}: only one -1 per reshape", user_loc())
        known = math.prod(s for s in so if s != -1)
        if -1 in so:
            if known == 0 or n % known:
                raise ShapeError(f"{bad}: the -1 cannot be inferred", user_loc())
            so = [n // known if s == -1 else s for s in so]
        if math.prod(so) != n or 0 in so:
            raise ShapeError(f"{bad}: the int dims {si} and {so} hold different numbers of "
                             "elements", user_loc(), "a reshape keeps the element count between "
                             "(and around) the tile dims")
        out.extend(so)
        if i < len(tiles_out):
            out.append(tiles_out[i])
    shape = tuple(out)
    if shape == have:
        return t
    src = t.v.op
    # the rope pattern's join: join(a, b).transpose(-2, -1).reshape([..., 2h]) is cat(a, b)
    if src is not None and src.kind == "transpose" and len(shape) == len(have) - 1 \
            and shape[:-1] == have[:-2] and not any(isinstance(d, TileVar) for d in have[-2:]) \
            and shape[-1] == have[-2] * have[-1]:
        parts = _joined(src.operands[0])
        if parts is not None:
            return concat([TileValue(p) for p in parts], -1)
    return _emit("reshape", [t.v], {"shape": shape}, shape, t.v.dtype)


def _joined(v: Any) -> list[Any] | None:
    """The operands `a_k` of `concat([a_k[..., None], ...], -1)`, or None."""
    op = v.op
    if op is None or op.kind != "concat" or op.attrs["axis"] != v.rank - 1:
        return None
    parts = []
    for p in op.operands:
        if p.op is None or p.op.kind != "expand_dims" or p.op.attrs["axis"] != v.rank - 1:
            return None
        parts.append(p.op.operands[0])
    return parts


def view(x: Any, *args: Any, **kwargs: Any) -> TileValue:
    """`tile.view(dtype)` is a bit view (device_math.view); `tile.view(shape)` a reshape."""
    if "dtype" in kwargs or (len(args) == 1 and isinstance(args[0], torch.dtype)):
        return device_math.view(x, *args, **kwargs)
    return reshape(x, *args)


def _axis_in(rank: int, dim: Any, what: str) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise ShapeError(f"{what}: dim {dim!r} is out of range for rank {rank}", user_loc())
    return dim % rank


def concat(xs: Any, dim: int = 0) -> TileValue:
    """`torch.cat`: along an int dim; the other dims equal (torch's promotion of dtypes)."""
    if not isinstance(xs, (list, tuple)) or not xs:
        raise KernelSyntaxError("torch.cat takes a non-empty list of tiles", user_loc())
    ts, _ = _common(*xs)
    rank = ts[0].v.rank
    if rank == 0 or any(t.v.rank != rank for t in ts):
        raise ShapeError("torch.cat of tiles of ranks "
                         f"{[t.v.rank for t in ts]}: all need the same rank >= 1", user_loc())
    axis = _axis_in(rank, dim, "torch.cat")
    shapes = [t.v.shape for t in ts]
    if any(isinstance(s[axis], TileVar) for s in shapes):
        raise ShapeError(f"torch.cat along dim {dim}, a tile dim: the result would span several "
                         "blocks", user_loc(), "store each part into its own slice of the "
                         "output (`out[tm, :n1] = a`, `out[tm, n1:] = b`), or concatenate along "
                         "an int dim")
    for s in shapes[1:]:
        if any(a is not b and a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ShapeError(f"torch.cat of {' and '.join(shape_str(x) for x in shapes)}: the "
                             f"dims other than {dim} differ", user_loc())
    if len(ts) == 1:
        return ts[0]
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    return _emit("concat", [t.v for t in ts], {"axis": axis}, tuple(shape), ts[0].v.dtype)


def stack(xs: Any, dim: int = 0) -> TileValue:
    """`torch.stack`: a new dim of len(xs) at `dim`."""
    if not isinstance(xs, (list, tuple)) or not xs:
        raise KernelSyntaxError("torch.stack takes a non-empty list of tiles", user_loc())
    ts = [_as_tile(x) for x in xs]
    rank = ts[0].v.rank
    if any(t.v.shape != ts[0].v.shape for t in ts):
        raise ShapeError(f"torch.stack of {' and '.join(shape_str(t.v.shape) for t in ts)}: "
                         "stack needs equal shapes", user_loc())
    axis = _axis_in(rank + 1, dim, "torch.stack")
    return concat([expand_dims(t, axis) for t in ts], axis)


def slice_dim(x: TileValue, axis: int, start: int, stop: int) -> TileValue:
    """Elements [start, stop) of an int dim."""
    n = x.v.shape[axis]
    if (start, stop) == (0, n):
        return x
    shape = x.v.shape[:axis] + (stop - start,) + x.v.shape[axis + 1:]
    return _emit("slice", [x.v], {"axis": axis, "start": start, "stop": stop}, shape, x.v.dtype)


def split(x: Any) -> tuple[TileValue, TileValue]:
    """Helion's `hl.split`: a last dim of size 2 -> its two halves (the dim dropped)."""
    t = _as_tile(x)
    if t.v.rank == 0 or t.v.shape[-1] != 2 or isinstance(t.v.shape[-1], TileVar):
        raise ShapeError(f"kd.split of a {shape_str(t.v.shape)} tile: the last dim must be 2",
                         user_loc(), "reshape first, e.g. `x.reshape([tm, 2, d // 2])"
                         ".permute(0, 2, 1)`")
    parts = _joined(t.v)
    if parts is not None and len(parts) == 2:  # split(join(a, b)) is (a, b)
        return TileValue(parts[0]), TileValue(parts[1])
    src = t.v.op
    # the rope pattern: x.reshape([..., 2, h]).transpose(-2, -1) split is x[..., :h], x[..., h:]
    if src is not None and src.kind == "transpose":
        y = src.operands[0]
        rs = y.op
        if rs is not None and rs.kind == "reshape" and y.shape[-2] == 2 \
                and not isinstance(y.shape[-1], TileVar) \
                and rs.operands[0].shape == y.shape[:-2] + (2 * y.shape[-1],):
            z, h = TileValue(rs.operands[0]), y.shape[-1]
            r = z.v.rank - 1
            return slice_dim(z, r, 0, h), slice_dim(z, r, h, 2 * h)
    r = t.v.rank - 1
    halves = []
    for i in range(2):
        s = slice_dim(t, r, i, i + 1)
        halves.append(_emit("reshape", [s.v], {"shape": s.v.shape[:-1]}, s.v.shape[:-1],
                            s.v.dtype))
    return halves[0], halves[1]


def join(a: Any, b: Any) -> TileValue:
    """Helion's `hl.join`: `[*broadcast_shape, 2]` from two tiles of one dtype."""
    ta, tb = _as_tile(a), _as_tile(b)
    if ta.v.dtype != tb.v.dtype:
        raise DTypeError(f"kd.join of {ta.v.dtype} and {tb.v.dtype} tiles: join needs one dtype",
                         user_loc(), "cast one side: `kd.join(a, b.to(a.dtype))`")
    shape = broadcast_shapes(ta.v.shape, tb.v.shape)
    if shape is None:
        raise ShapeError(f"kd.join of {shape_str(ta.v.shape)} and {shape_str(tb.v.shape)}: the "
                         "shapes do not broadcast", user_loc())
    r = len(shape)
    return concat([expand_dims(broadcast(t, shape), r) for t in (ta, tb)], r)


def transpose_any(x: Any, a: int, b: int) -> TileValue:
    t = _as_tile(x)
    r = t.v.rank
    if r < 2:
        return transpose(t, a, b)  # its error
    ia, ib = _axis_in(r, a, "transpose"), _axis_in(r, b, "transpose")
    perm = list(range(r))
    perm[ia], perm[ib] = perm[ib], perm[ia]
    return permute(t, perm)


def permute(x: Any, *dims: Any) -> TileValue:
    t = _as_tile(x)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list, torch.Size)):
        dims = tuple(dims[0])
    r = t.v.rank
    ints = all(isinstance(d, int) and not isinstance(d, bool) and -r <= d < r for d in dims)
    if len(dims) != r or not ints or sorted(d % r for d in dims) != list(range(r)):
        raise ShapeError(f"permute{tuple(dims)} of a rank-{r} tile: give each dim once",
                         user_loc())
    perm = tuple(d % r for d in dims)
    if perm == tuple(range(r)):
        return t
    if perm == tuple(range(r - 2)) + (r - 1, r - 2):
        return transpose(t, -2, -1)
    shape = tuple(t.v.shape[p] for p in perm)
    return _emit("permute", [t.v], {"perm": perm}, shape, t.v.dtype)


METHODS.update({
    "reshape": reshape, "view": view, "transpose": transpose_any, "permute": permute,
    "swapaxes": transpose_any,
})
tf.HANDLERS.update({
    torch.reshape: lambda x, shape: reshape(x, shape),
    torch.cat: lambda tensors, dim=0: concat(tensors, dim),
    torch.concat: lambda tensors, dim=0: concat(tensors, dim),
    torch.concatenate: lambda tensors, axis=0: concat(tensors, axis),
    torch.stack: lambda tensors, dim=0: stack(tensors, dim),
    torch.transpose: transpose_any, torch.swapaxes: transpose_any,
    torch.permute: lambda x, dims: permute(x, dims),
})
