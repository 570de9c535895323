"""The tile IR: small, explicit and backend-neutral.

A kernel is a list of tensor parameters (inputs and host-allocated outputs), a parallel grid
of tiles, and one region of ops run per grid point. Sequential `kd.tile` loops inside the grid
are `loop` ops with a body region and loop-carried values. Value shapes are written in tiles
(one block of a tiled dimension, whose size a config fixes) and concrete ints, so one IR serves
every config and every backend. Nothing here knows about any backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from .errors import SourceLoc

# dtype names used in the IR; frontends and backends map them to their own types.
FLOAT_DTYPES = ("f32", "bf16", "f16")
INT_DTYPES = ("i32", "i16", "i8", "u8")
# storage-only floats: they flow into loads, stores, casts, data movement and matmuls (docs/ir.md)
FP8_DTYPES = ("f8e4m3fn", "f8e5m2")
FP8_OPS = ("load", "store", "cast", "dot", "pad_fill", "expand_dims", "transpose", "broadcast",
           "full", "loop", "bitcast", "reshape", "concat", "slice", "permute")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",) + FP8_DTYPES
DTYPE_BITS = {"f32": 32, "bf16": 16, "f16": 16, "i32": 32, "i16": 16, "i8": 8, "u8": 8, "bool": 8,
              "f8e4m3fn": 8, "f8e5m2": 8}

UNARY_OPS = ("neg", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "not",
             "relu", "sin", "cos", "erf", "floor", "ceil", "round", "log1p", "expm1")
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "xor", "shl", "shr",
              "floordiv", "mod")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
REDUCE_OPS = ("sum", "max", "min", "prod")
SCAN_OPS = ("add", "mul", "max", "min", "and", "or", "xor")  # the combines of `scan`
# every other op kind; each has reference semantics in ir_verify and one rule per backend
STRUCTURAL_OPS = ("load", "store", "const", "full", "iota", "arange", "tile_begin", "tile_id", "tile_size",
                  "tile_count", "cast", "where", "reduce", "dot", "expand_dims", "transpose",
                  "broadcast", "pad_fill", "loop", "bitcast", "scan", "reshape", "concat", "slice",
                  "permute")


@dataclass(eq=False)
class BlockSym:
    """A block size: free (an autotuning knob) unless `pinned`."""

    index: int
    name: str | None = None
    choices: tuple[int, ...] | None = None
    pinned: int | None = None

    @property
    def free(self) -> bool:
        return self.pinned is None

    def __repr__(self) -> str:
        return f"B{self.index}" + (f"({self.name})" if self.name else "")


@dataclass(eq=False)
class TileVar:
    """One dimension of a `kd.tile` loop: `extent` elements walked in blocks of `block`."""

    id: int
    extent: int
    block: BlockSym
    kind: str  # "grid" (parallel launch axis) or "loop" (sequential, inside the kernel)
    loc: SourceLoc | None = None
    name: str = ""  # the user's loop variable, unique within the kernel
    # `kd.tile(begin, end)`: the loop walks [lo, hi) from lo; each is an int or a rank-0 i32
    # value of the enclosing region (an outer tile's `.end`, ...). `extent` is then a static
    # bound on hi - lo (the most blocks the loop can take) and `limit` one on hi.
    lo: "int | Value" = 0
    hi: "int | Value | None" = None
    limit: int | None = None

    def __repr__(self) -> str:
        return self.name or f"t{self.id}"

    @property
    def bounded(self) -> bool:
        """Made by `kd.tile(begin, end)`: lanes are masked against `hi`, not the axis size."""
        return self.hi is not None

    @property
    def dynamic(self) -> bool:
        """Its bounds are device values: the trip count is known only when the kernel runs."""
        if isinstance(self.lo, int) and isinstance(self.hi, int):
            return self.hi - self.lo < 1  # static but empty: the trip count expression gives 0
        return not (isinstance(self.lo, int) and self.hi is None)

    def bound_values(self) -> list["Value"]:
        return [b for b in (self.lo, self.hi) if isinstance(b, Value)]


Dim = Union[int, TileVar]


@dataclass(eq=False)
class TensorParam:
    """A tensor in HBM: a kernel argument or an output the host code allocated."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool = False
    init: float | None = None  # outputs made with torch.zeros/full start with this value
    arg_index: int | None = None
    # "i64": the caller's tensor (or the host code's allocation) is int64; the kernel sees it
    # as `dtype` i32, narrowed before and widened after the call (kernel_dsl/wide_ints.py)
    host_dtype: str | None = None
    # a hidden int32[1] input holding the seed of one `torch.rand_like` call site: every call of
    # the kernel passes a fresh one, drawn from torch's generator (kernel_dsl/device_random.py)
    rng_seed: bool = False
    # in a phase after `kd.barrier()`: this input is the output `readback_of`, which an earlier
    # phase wrote (kernel_dsl/grid_phases.py)
    readback_of: "TensorParam | None" = None


@dataclass(frozen=True)
class Index:
    """One entry of a tensor subscript: a tile, `:` (the whole axis), an int, or a device
    scalar ("dyn": a `kd.grid` index or a loaded int; the axis is dropped, as for an int), or
    an integer value of rank >= 1 ("gather": lane i reads/writes element scalar[i] of the
    axis; the axis becomes the value's dims), or a static slice `a:b` ("slice": elements [value, stop) of the
    axis, ints with 0 <= value < stop <= size; shape dim = stop - value)."""

    kind: str  # "tile" | "full" | "int" | "dyn" | "gather" | "slice"
    tile: TileVar | None = None
    value: int = 0
    scalar: "Value | None" = None
    stop: int = 0  # "slice" only: one past its last element

    def __repr__(self) -> str:
        if self.kind == "tile":
            return repr(self.tile)
        if self.kind == "dyn":
            return repr(self.scalar)
        if self.kind == "gather":
            return f"gather({self.scalar!r})"
        if self.kind == "slice":
            return f"{self.value}:{self.stop}"
        return ":" if self.kind == "full" else str(self.value)


@dataclass(eq=False)
class Value:
    id: int
    shape: tuple[Dim, ...]
    dtype: str
    op: "Op | None" = None  # None for loop-carried block arguments
    region: "Region | None" = None
    hint: str = ""  # the user's variable name, where known (loop-carried values)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"%{self.id}"


@dataclass(eq=False)
class Op:
    kind: str
    operands: list[Value]
    attrs: dict[str, Any]
    results: list[Value] = field(default_factory=list)
    loc: SourceLoc | None = None
    body: "Region | None" = None  # only for `loop`

    @property
    def result(self) -> Value:
        return self.results[0]


@dataclass(eq=False)
class Region:
    """An ordered list of ops; loop bodies also have block args (carried) and yields."""

    parent: "Region | None" = None
    ops: list[Op] = field(default_factory=list)
    args: list[Value] = field(default_factory=list)
    yields: list[Value] = field(default_factory=list)

    def encloses(self, other: "Region | None") -> bool:
        """True if `other` is this region or nested inside it."""
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False

    def walk(self) -> Iterator[Op]:
        for op in self.ops:
            yield op
            if op.body is not None:
                yield from op.body.walk()


@dataclass(eq=False)
class KernelIR:
    name: str
    params: list[TensorParam]
    grid: list[TileVar]
    body: Region
    block_syms: list[BlockSym]
    tiles: list[TileVar]
    returns: list[TensorParam]
    loc: SourceLoc | None = None
    # host_views.HostViews: torch views applied to the inputs before the kernel and to its returned
    # buffers after it (`x.view(-1)`, `return out.T`); None when the host code makes none
    host: Any = None
    # kd.register_tunable (kernel_dsl/tunables.py): name -> fragment, the values this IR was
    # traced with, and `retrace(values) -> KernelIR` for other values (None: this IR only)
    tunables: dict[str, Any] = field(default_factory=dict)
    tunable_values: dict[str, Any] = field(default_factory=dict)
    retrace: Any = None
    # grid loops separated by `kd.barrier()` (kernel_dsl/grid_phases.py): one KernelIR per loop, run
    # in order; then `body` is empty and `grid` is the first phase's
    phases: list["KernelIR"] = field(default_factory=list)

    @property
    def inputs(self) -> list[TensorParam]:
        return [p for p in self.params if not p.is_output]

    @property
    def outputs(self) -> list[TensorParam]:
        return [p for p in self.params if p.is_output]

    @property
    def free_syms(self) -> list[BlockSym]:
        return [s for s in self.block_syms if s.free]

    def loops(self) -> list[Op]:
        return [op for op in self.body.walk() if op.kind == "loop"]


def index_values(op: Op) -> list[Value]:
    """The device values a load or store is indexed by (its "dyn" and "gather" entries)."""
    if op.kind not in ("load", "store"):
        return []
    return [ix.scalar for ix in op.attrs["index"] if ix.scalar is not None]


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """Numpy broadcasting over dims that are ints or tiles; None if they do not broadcast."""
    out: list[Dim] = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da is db or da == db:
            out.append(da)
        elif da == 1:
            out.append(db)
        elif db == 1:
            out.append(da)
        else:
            return None
    return tuple(reversed(out))


def dim_str(d: Dim) -> str:
    return f"{d!r}" if isinstance(d, TileVar) else str(d)


def shape_str(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join(dim_str(d) for d in shape) + "]"
