"""Device code: tile values and the torch ops on them, each recorded as tile-IR ops.

Rules applied here so that every backend sees explicit IR:
- operands are cast to a common dtype with torch's promotion rules (scalars are 'weak');
- lanes past a ragged edge are replaced (`pad_fill`) before a reduction or a dot reads them;
- `acc + a @ b` with an f32 `acc` becomes one dot with an f32 accumulator (no rounding).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from . import dtypes
from .errors import (
    SUPPORTED_HINT,
    ControlFlowError,
    DTypeError,
    KernelSyntaxError,
    ShapeError,
    UnsupportedOpError,
)
from .ir import FP8_OPS, Dim, Region, TileVar, Value, broadcast_shapes, shape_str
from .tracing import Tracer, current, user_loc

Scalar = (int, float, bool)


def _tracer() -> Tracer:
    t = current()
    if t is None:
        raise KernelSyntaxError("tile values exist only while a kernel is traced", user_loc())
    return t


class Tile:
    """One dimension of a `kd.tile` loop, as the user sees it."""

    def __init__(self, var: TileVar, region: Region):
        self.var = var
        self.region = region  # the loop body where this tile is live

    @property
    def index(self) -> "TileValue":
        """Global indices of this tile's lanes, int32 (for masks)."""
        return _emit("iota", [], {"tile": self.var}, (self.var,), "i32")

    @property
    def begin(self) -> "TileValue":
        return _emit("tile_begin", [], {"tile": self.var}, (), "i32")

    @property
    def id(self) -> "TileValue":
        """`begin // block_size`, as Helion's `tile.id` (the block index when begin is 0)."""
        if isinstance(self.var.lo, int) and self.var.lo == 0:
            return _emit("tile_id", [], {"tile": self.var}, (), "i32")
        return binary("floordiv", self.begin, self.size)

    @property
    def size(self) -> "TileValue":
        """The block size of this tile (the last, ragged tile has fewer valid lanes)."""
        return _emit("tile_size", [], {"tile": self.var}, (), "i32")

    block_size = size  # Helion's name

    @property
    def end(self) -> "TileValue":
        """One past this block's last in-range lane: `min(begin + block_size, end)`."""
        return binary("min", self.begin + self.size, self._hi())

    @property
    def count(self) -> "TileValue":
        """How many blocks the loop takes, `cdiv(end - begin, block_size)` (Helion's `.count`)."""
        lo = self.var.lo if isinstance(self.var.lo, int) else TileValue(self.var.lo)
        return (self._hi() - lo + self.size - 1) // self.size

    def _hi(self) -> Any:
        hi = self.var.extent if self.var.hi is None else self.var.hi
        return hi if isinstance(hi, int) else TileValue(hi)

    def __repr__(self) -> str:
        return f"Tile({self.var!r} over {self.var.extent})"

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # while a kernel is traced, TraceMode sees every torch call first; reaching here means
        # a tile escaped the trace
        raise KernelSyntaxError("tile values exist only while a kernel is traced", user_loc(),
                                "keep tiles inside the kernel function")


class TileValue:
    """A value on the device: the result of an IR op, with torch-like methods."""

    __slots__ = ("v",)

    def __init__(self, v: Value):
        self.v = v

    # -- metadata --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.v.shape

    @property
    def dtype(self) -> torch.dtype:
        return dtypes.IR_TO_TORCH[self.v.dtype]

    @property
    def ndim(self) -> int:
        return self.v.rank

    def dim(self) -> int:
        return self.v.rank

    def size(self, d: int | None = None) -> Any:
        return self.v.shape if d is None else self.v.shape[d]

    def __repr__(self) -> str:
        return f"TileValue({self.v!r}: {self.v.dtype}{shape_str(self.v.shape)})"

    # -- Python control flow cannot see device values ----------------------------------------
    def _no_host(self, what: str) -> Any:
        raise ControlFlowError(
            f"{what} needs a value that exists only on the device, while the kernel is traced",
            user_loc(), "use torch.where(cond, a, b) to select per element; Python `if`, "
            "`while`, int() and float() run once at trace time")

    def __bool__(self) -> bool:
        return self._no_host("`if`/`while`/`and`/`or` on a tile value")

    def __int__(self) -> int:
        return self._no_host("int()")

    def __float__(self) -> float:
        return self._no_host("float()")

    def __index__(self) -> int:
        return self._no_host("using a tile value as a Python index")

    def __iter__(self) -> Any:
        return self._no_host("iterating over a tile value")

    def __len__(self) -> int:
        return self._no_host("len()")

    # -- arithmetic ------------------------------------------------------------------------
    def __add__(self, o: Any) -> "TileValue": return add(self, o)
    def __radd__(self, o: Any) -> "TileValue": return add(o, self)
    def __sub__(self, o: Any) -> "TileValue": return binary("sub", self, o)
    def __rsub__(self, o: Any) -> "TileValue": return binary("sub", o, self)
    def __mul__(self, o: Any) -> "TileValue": return binary("mul", self, o)
    def __rmul__(self, o: Any) -> "TileValue": return binary("mul", o, self)
    def __truediv__(self, o: Any) -> "TileValue": return binary("div", self, o)
    def __rtruediv__(self, o: Any) -> "TileValue": return binary("div", o, self)
    def __pow__(self, o: Any) -> "TileValue": return binary("pow", self, o)
    def __rpow__(self, o: Any) -> "TileValue": return binary("pow", o, self)
    def __neg__(self) -> "TileValue": return unary("neg", self)
    def __pos__(self) -> "TileValue": return self
    def __abs__(self) -> "TileValue": return unary("abs", self)
    def __invert__(self) -> "TileValue": return unary("not", self)
    def __and__(self, o: Any) -> "TileValue": return binary("and", self, o)
    def __rand__(self, o: Any) -> "TileValue": return binary("and", o, self)
    def __or__(self, o: Any) -> "TileValue": return binary("or", self, o)
    def __ror__(self, o: Any) -> "TileValue": return binary("or", o, self)
    def __xor__(self, o: Any) -> "TileValue": return binary("xor", self, o)
    def __rxor__(self, o: Any) -> "TileValue": return binary("xor", o, self)
    def __lshift__(self, o: Any) -> "TileValue": return binary("shl", self, o)
    def __rlshift__(self, o: Any) -> "TileValue": return binary("shl", o, self)
    def __rshift__(self, o: Any) -> "TileValue": return binary("shr", self, o)
    def __rrshift__(self, o: Any) -> "TileValue": return binary("shr", o, self)
    def __floordiv__(self, o: Any) -> "TileValue": return binary("floordiv", self, o)
    def __rfloordiv__(self, o: Any) -> "TileValue": return binary("floordiv", o, self)
    def __mod__(self, o: Any) -> "TileValue": return binary("mod", self, o)
    def __rmod__(self, o: Any) -> "TileValue": return binary("mod", o, self)
    def __lt__(self, o: Any) -> "TileValue": return binary("lt", self, o)  # type: ignore[override]
    def __le__(self, o: Any) -> "TileValue": return binary("le", self, o)  # type: ignore[override]
    def __gt__(self, o: Any) -> "TileValue": return binary("gt", self, o)  # type: ignore[override]
    def __ge__(self, o: Any) -> "TileValue": return binary("ge", self, o)  # type: ignore[override]
    def __eq__(self, o: Any) -> "TileValue": return binary("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> "TileValue": return binary("ne", self, o)  # type: ignore[override]
    __hash__ = object.__hash__

    # -- torch-style methods ----------------------------------------------------------------
    def to(self, dtype: Any, *args: Any, **kwargs: Any) -> "TileValue":
        if isinstance(dtype, (TileValue, torch.Tensor)):
            dtype = dtype.dtype
        if not isinstance(dtype, torch.dtype):
            dtype = kwargs.get("dtype", dtype)
        if not isinstance(dtype, torch.dtype):
            raise KernelSyntaxError("`.to()` in device code takes a dtype", user_loc(),
                                    "write `.to(torch.float32)` or `.to(out.dtype)`")
        return cast(self, dtype)

    def clamp(self, min: Any = None, max: Any = None) -> "TileValue": return clamp(self, min, max)
    def unsqueeze(self, d: int) -> "TileValue": return expand_dims(self, d)

    @property
    def T(self) -> "TileValue":
        if self.v.rank != 2:
            raise ShapeError(f"`.T` needs a 2-D tile, this one is {shape_str(self.v.shape)}",
                             user_loc(), "use `.transpose(-2, -1)` for batched tiles")
        return transpose(self, 0, 1)

    @property
    def mT(self) -> "TileValue":
        return transpose(self, -2, -1)

    def __getitem__(self, idx: Any) -> "TileValue":
        return subscript(self, idx)

    def __getattr__(self, name: str) -> Any:
        method = METHODS.get(name)  # torch methods defined in device_math.py
        if method is not None:
            return lambda *args, **kwargs: method(self, *args, **kwargs)
        raise UnsupportedOpError(f"`.{name}` is not supported on tiles in device code", user_loc(),
                                 SUPPORTED_HINT)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # while a kernel is traced, TraceMode sees every torch call first; reaching here means
        # a tile escaped the trace
        raise KernelSyntaxError("tile values exist only while a kernel is traced", user_loc(),
                                "keep tiles inside the kernel function")


# more tile methods by name (exp, float, sum, ...) and the shift / `//` / `%` builders: device_math.py
METHODS: dict[str, Any] = {}
INT_BINARY: dict[str, Any] = {}



def _emit(kind: str, operands: list[Value], attrs: dict[str, Any], shape: tuple[Dim, ...] | None,
          dtype: str | None) -> Any:
    if kind not in FP8_OPS and any(o.dtype in dtypes.FP8 for o in operands):
        fp8 = next(o.dtype for o in operands if o.dtype in dtypes.FP8)
        raise DTypeError(f"`{kind}` of a {fp8} tile: float8 is a storage format (torch has no "
                         "arithmetic on it either)", user_loc(),
                         "cast to float32 first (`x.float()`); float8 tiles load, store, cast "
                         "and matmul (with a float32 result)")
    v = _tracer().emit(kind, operands, attrs, shape, dtype)
    return TileValue(v) if v is not None else None


def _ir_dtype(dtype: torch.dtype) -> str:
    name = dtypes.to_ir(dtype)
    if name is None:
        raise DTypeError(f"dtype {dtype} is not supported in device code", user_loc(),
                         dtypes.unsupported_reason(dtype))
    return name


def const(value: Any, dtype: str) -> TileValue:
    if dtype == "bool":
        value = bool(value)
    elif dtypes.is_float(dtype):
        value = float(value)
    else:
        value = int(value)
    return _emit("const", [], {"value": value}, (), dtype)


def cast_v(x: TileValue, dtype: str) -> TileValue:
    if x.v.dtype == dtype:
        return x
    return _emit("cast", [x.v], {"dtype": dtype}, x.v.shape, dtype)


def cast(x: Any, dtype: torch.dtype) -> TileValue:
    t, dt = _as_tile(x), _ir_dtype(dtype)
    op = t.v.op
    if dt == "f32" and t.v.dtype != "f32" and op is not None and op.kind == "dot" \
            and len(op.operands) == 2:
        # `(a @ b).to(torch.float32)`: keep the f32 product instead of rounding it first
        return _emit("dot", list(op.operands), {}, t.v.shape, "f32")
    return cast_v(t, dt)


def _as_tile(x: Any) -> TileValue:
    if isinstance(x, TileValue):
        return x
    if isinstance(x, Tile):
        raise KernelSyntaxError("a tile is a range of indices, not a value", user_loc(),
                                "use `tile.index` for its indices or index a tensor with it")
    if isinstance(x, Scalar):
        return const(x, dtypes.scalar_dtype(x))
    if isinstance(x, torch.Tensor):
        raise KernelSyntaxError("a whole tensor is used in device code", user_loc(),
                                "load a tile from it first: `x[tm, tn]`")
    if isinstance(x, torch.dtype):  # e.g. a dtype in an operand's place
        raise KernelSyntaxError(f"the dtype {x} is passed where device code expects a tile",
                                user_loc(), "a dtype goes in `dtype=`/`out_dtype=` (torch.bmm(a, "
                                "b, torch.float32) takes it third) or in `.to(dtype)`")
    raise KernelSyntaxError(f"{type(x).__name__} value cannot be used in device code", user_loc(),
                            SUPPORTED_HINT)


def _common(*xs: Any) -> tuple[list[TileValue], str]:
    """Operands cast to torch's promoted dtype (Python scalars are weak; a float argument,
    runtime_scalars.py, is a tile that promotes as one)."""
    xs = tuple(x.device_value() if hasattr(type(x), "device_value") else x for x in xs)  # kd.BlockSize
    tiles = [x for x in xs if isinstance(x, TileValue) and not hasattr(type(x), "weak_proto")] \
        or [x for x in xs if isinstance(x, TileValue)]
    if not tiles:
        raise KernelSyntaxError("device op without any tile operand", user_loc(), SUPPORTED_HINT)
    dt = tiles[0].v.dtype
    for t in tiles[1:]:
        dt = dtypes.promote(dt, t.v.dtype)
    for x in xs:
        if not isinstance(x, TileValue) and isinstance(x, Scalar):
            dt = dtypes.promote_scalar(dt, x)
        elif hasattr(type(x), "weak_proto"):
            dt = dtypes.promote_scalar(dt, x.weak_proto)
    out = [cast_v(x, dt) if isinstance(x, TileValue) else const(x, dt) if isinstance(x, Scalar)
           else _as_tile(x) for x in xs]
    return out, dt


def _bshape(kind: str, *xs: TileValue) -> tuple[Dim, ...]:
    shape: tuple[Dim, ...] | None = xs[0].v.shape
    for x in xs[1:]:
        new = broadcast_shapes(shape, x.v.shape) if shape is not None else None
        if new is None:
            raise ShapeError(
                f"`{kind}` of shapes {' and '.join(shape_str(y.v.shape) for y in xs)} "
                "do not broadcast", user_loc(),
                "tiles from different kd.tile loops never line up; add unit axes with "
                "`[:, None]` / `[None, :]` where you mean an outer product")
        shape = new
    assert shape is not None
    return shape


SYMBOL = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "floordiv": "//", "mod": "%"}


def binary(kind: str, a: Any, b: Any) -> TileValue:
    (ta, tb), dt = _common(a, b)
    if kind in ("floordiv", "mod") and dt in ("bf16", "f16"):  # composed: in f32, rounded once
        return cast_v(binary(kind, cast_v(ta, "f32"), cast_v(tb, "f32")), dt)
    if kind == "div" and not dtypes.is_float(dt):
        ta, tb, dt = cast_v(ta, "f32"), cast_v(tb, "f32"), "f32"
    if kind in ("and", "or", "xor") and dtypes.is_float(dt):
        raise DTypeError(f"`{SYMBOL[kind]}` needs integer or bool tiles, got {dt}", user_loc(),
                         "compare first for a mask, e.g. `(a > 0) & (b > 0)`, or cast to an int dtype")
    if kind in ("shl", "shr", "floordiv", "mod"):  # torch's rules on top of the IR's ops
        return INT_BINARY[kind](ta, tb, dt)
    out_dt = "bool" if kind in ("lt", "le", "gt", "ge", "eq", "ne") else dt
    return _emit(kind, [ta.v, tb.v], {}, _bshape(kind, ta, tb), out_dt)


_FLOAT_UNARY = ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "erf",
                "log1p", "expm1")


def unary(kind: str, a: Any) -> TileValue:
    ta = _as_tile(a)
    if kind in _FLOAT_UNARY and not dtypes.is_float(ta.v.dtype):
        ta = cast_v(ta, "f32")
    if kind in ("floor", "ceil", "round") and not dtypes.is_float(ta.v.dtype):
        return ta  # integers are already whole, as torch.floor returns them
    if kind == "not" and dtypes.is_float(ta.v.dtype):
        raise DTypeError(f"`~` needs a bool or integer tile, got {ta.v.dtype}", user_loc(),
                         "compare first, e.g. `~(a > 0)`")
    return _emit(kind, [ta.v], {}, ta.v.shape, ta.v.dtype)


def where(cond: Any, a: Any, b: Any) -> TileValue:
    c = _as_tile(cond)
    if c.v.dtype != "bool":
        raise DTypeError(f"torch.where needs a bool condition, got {c.v.dtype}", user_loc(),
                         "compare to make a mask, e.g. `torch.where(x > 0, x, 0.0)`")
    if isinstance(a, TileValue) or isinstance(b, TileValue):
        (ta, tb), dt = _common(a, b)
    else:  # both branches scalars, e.g. a 0/1 mask: torch's dtype for the two Python scalars
        dt = dtypes.promote(dtypes.scalar_dtype(a), dtypes.scalar_dtype(b))
        ta, tb = const(a, dt), const(b, dt)
    return _emit("where", [c.v, ta.v, tb.v], {}, _bshape("where", c, ta, tb), dt)


def clamp(x: Any, lo: Any, hi: Any) -> TileValue:
    out = _as_tile(x)
    if lo is not None:
        out = binary("max", out, lo)
    if hi is not None:
        out = binary("min", out, hi)
    return out


def add(a: Any, b: Any) -> TileValue:
    """`acc + a @ b` with an f32 `acc` folds into one dot with an f32 accumulator."""
    for acc, prod in ((a, b), (b, a)):
        if (isinstance(acc, TileValue) and isinstance(prod, TileValue) and acc.v.dtype == "f32"
                and prod.v.op is not None and prod.v.op.kind == "dot"
                and len(prod.v.op.operands) == 2 and acc.v.shape == prod.v.shape):
            x, y = prod.v.op.operands
            return _emit("dot", [x, y, acc.v], {}, acc.v.shape, "f32")
    return binary("add", a, b)


def _axis(x: TileValue, dim: Any) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise KernelSyntaxError("reduction needs an int `dim`", user_loc(),
                                "write e.g. `x.sum(dim=-1)` or `x.amax(1, keepdim=True)`")
    r = x.v.rank
    if not -r <= dim < r:
        raise ShapeError(f"dim {dim} is out of range for a tile of rank {r}", user_loc())
    return dim % r


def pad_fill(x: TileValue, axis: int, fill: float) -> TileValue:
    """Lanes past the end of a ragged tile along `axis` become `fill` (identity of the consumer)."""
    d = x.v.shape[axis]
    if not isinstance(d, TileVar):
        return x
    tr = _tracer()
    if d.kind == "loop" and not tr.tile_live(d):  # after its loop (block_dims.py): no mask
        return x
    key = (x.v.id, axis, fill)
    done = tr.pad_fills.get(key)  # the same masking twice (x.sum(-1) and x.mean(-1)): reuse it
    # only within one region: a loop body must mask its own copy, since the loop's exit rewires
    # uses of a carried value inside the body (and only there)
    if done is not None and done.region is tr.region:
        return TileValue(done)
    out = _emit("pad_fill", [x.v], {"axis": axis, "tile": d, "fill": fill}, x.v.shape, x.v.dtype)
    if tr.jagged_fill is not None:  # in kd.jagged_tile: lanes past a row's end too
        out = tr.jagged_fill(out, axis, fill)
    tr.pad_fills[key] = out.v
    return out


def _identity(op: str, dtype: str) -> float:
    if op == "sum":
        return 0.0
    if op == "prod":
        return 1.0
    if dtypes.is_float(dtype):
        return -math.inf if op == "max" else math.inf
    info = torch.iinfo(dtypes.IR_TO_TORCH[dtype]) if dtype != "bool" else None
    if info is None:
        return 0.0 if op == "max" else 1.0
    return float(info.min if op == "max" else info.max)


def reduce(op: str, x: Any, dim: Any, keepdim: bool = False) -> TileValue:
    t = _as_tile(x)
    if dim is None:
        for d in reversed(range(t.v.rank)):
            t = reduce(op, t, d, keepdim)
        return t
    if isinstance(dim, (tuple, list)):
        for d in sorted((_axis(t, d) for d in dim), reverse=True):
            t = reduce(op, t, d, keepdim)
        return t
    axis = _axis(t, dim)
    src_dt = t.v.dtype
    if op in ("sum", "prod") and not dtypes.is_float(src_dt):
        t = cast_v(t, "i32")  # torch gives int64; kernels stay 32-bit (docs/ir.md)
    elif src_dt in ("bf16", "f16"):
        t = cast_v(t, "f32")  # reduce in f32 as torch does, then round once
    t = pad_fill(t, axis, _identity(op, t.v.dtype))
    shape = list(t.v.shape)
    if keepdim:
        shape[axis] = 1
    else:
        del shape[axis]
    out = _emit("reduce", [t.v], {"op": op, "axis": axis, "keepdim": keepdim}, tuple(shape), t.v.dtype)
    return cast_v(out, src_dt) if src_dt in ("bf16", "f16") else out


def mean(x: Any, dim: Any, keepdim: bool = False) -> TileValue:
    t = _as_tile(x)
    if not dtypes.is_float(t.v.dtype):
        raise DTypeError("mean of an integer tile", user_loc(), "cast first: `x.float().mean(-1)`")
    dims = range(t.v.rank) if dim is None else dim if isinstance(dim, (tuple, list)) else [dim]
    axes = [_axis(t, d) for d in dims]
    total = reduce("sum", cast_v(t, "f32"), list(axes), keepdim)
    count: Any = 1
    for a in axes:
        d = t.v.shape[a]
        n = _emit("tile_count", [], {"tile": d}, (), "i32") if isinstance(d, TileVar) else d
        count = count * n if not (isinstance(count, int) and count == 1) else n
    return cast_v(binary("div", total, count), t.v.dtype)


def expand_dims(x: TileValue, axis: int) -> TileValue:
    r = x.v.rank + 1
    if not -r <= axis < r:
        raise ShapeError(f"unsqueeze({axis}) out of range for rank {x.v.rank}", user_loc())
    axis %= r
    shape = x.v.shape[:axis] + (1,) + x.v.shape[axis:]
    return _emit("expand_dims", [x.v], {"axis": axis}, shape, x.v.dtype)


def transpose(x: TileValue, a: int, b: int) -> TileValue:
    r = x.v.rank
    if r < 2 or sorted((a % r, b % r)) != [r - 2, r - 1]:
        raise UnsupportedOpError(
            f"transpose({a}, {b}) of a rank-{r} tile: only the last two dims can be swapped",
            user_loc(), "write `.transpose(-2, -1)` (or `.T` for 2-D tiles)")
    shape = x.v.shape[:-2] + (x.v.shape[-1], x.v.shape[-2])
    return _emit("transpose", [x.v], {}, shape, x.v.dtype)


def permute(x: TileValue, dims: Any) -> TileValue:
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else tuple(dims)
    r = x.v.rank
    swap = tuple(range(r - 2)) + (r - 1, r - 2)
    if tuple(d % r for d in dims) != swap:
        raise UnsupportedOpError(f"permute{dims}: only swapping the last two dims is supported",
                                 user_loc(), "write `.transpose(-2, -1)`")
    return transpose(x, -2, -1)


def _sizes(sizes: Any) -> tuple[Dim, ...]:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    return tuple(s.var if isinstance(s, Tile) else s for s in sizes)


def broadcast(x: Any, shape: tuple[Dim, ...]) -> TileValue:
    t = _as_tile(x)
    shape = tuple(s.var if isinstance(s, Tile) else s for s in shape)
    if t.v.shape == shape:
        return t
    if broadcast_shapes(t.v.shape, shape) != shape:
        raise ShapeError(f"cannot broadcast {shape_str(t.v.shape)} to {shape_str(shape)}", user_loc())
    return _emit("broadcast", [t.v], {"shape": shape}, shape, t.v.dtype)


def subscript(x: TileValue, idx: Any) -> TileValue:
    """`v[:, None]`, `v[None]`, `v[..., None]`: only adding unit axes."""
    items = list(idx) if isinstance(idx, tuple) else [idx]
    if any(isinstance(it, TileValue) for it in items):  # before `in`: a tile's `==` is a device op
        raise UnsupportedOpError("indexing a tile value with another tile (a gather) is not "
                                 "supported", user_loc(), "index the tensor with kd.tile tiles "
                                 "(`x[tm, tk]`); gathers through index tensors are not supported yet")
    if any(it is Ellipsis for it in items):
        i = next(i for i, it in enumerate(items) if it is Ellipsis)
        n_real = sum(1 for it in items if it is not None and it is not Ellipsis)
        items[i:i + 1] = [slice(None)] * (x.v.rank - n_real)
    out, axis = x, 0
    for it in items:
        if it is None:
            out = expand_dims(out, axis)
            axis += 1
        elif isinstance(it, slice) and it == slice(None):
            axis += 1
        else:
            raise UnsupportedOpError("slicing or indexing a tile value is not supported", user_loc(),
                                     "index the tensor instead (`x[tm, tk]`); on tiles only "
                                     "`[:, None]`-style unit axes are allowed")
    return out


def full(shape: Any, value: Any, dtype: torch.dtype | None) -> TileValue:
    dims: list[Dim] = []
    for s in (shape if isinstance(shape, (tuple, list)) else [shape]):
        if isinstance(s, Tile):
            dims.append(s.var)
        elif isinstance(s, TileVar) or (isinstance(s, int) and not isinstance(s, bool) and s >= 1):
            dims.append(s)
        else:
            raise KernelSyntaxError(f"tile shape entries are tiles or positive ints, got {s!r}",
                                    user_loc(), "write e.g. `kd.zeros([tm, tn], dtype=torch.float32)`")
    dt = _ir_dtype(dtype) if dtype is not None else dtypes.scalar_dtype(value)
    if dt == "bool":
        value = bool(value)
    return _emit("full", [], {"shape": tuple(dims), "value": float(value) if dtypes.is_float(dt)
                              else int(value)}, tuple(dims), dt)
