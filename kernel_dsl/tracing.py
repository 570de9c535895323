"""The tracer: runs a kernel's Python once with proxy values and records the tile IR.

Host code runs on `meta` tensors (shapes, dtypes and allocation work as in torch, no data).
A `TorchFunctionMode` sees every torch call: indexing an argument with tiles becomes a `load`,
assigning becomes a `store`, torch ops on tile values become IR ops (`device_ops.py`). Each
`kd.tile` loop body is traced once into a region; loop-carried values are found by comparing
the caller's locals before and after the body, which gives Python's own semantics.
"""
from __future__ import annotations

import ctypes
import importlib.util
import linecache
import os
import re
import sys
import threading
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .errors import KernelSyntaxError, LoopScopeError, SourceLoc
from .ir import BlockSym, Dim, Index, KernelIR, Op, Region, TensorParam, TileVar, Value, index_values
from .names import identifier

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
# the backends and the autotuner are machinery too; they install as subpackages but live in
# their own folders in a source checkout, so ask the import system where they are
_MACHINERY_DIRS = tuple(
    os.path.abspath(d) + os.sep
    for sub in ("lowering", "autotune")
    for d in (importlib.util.find_spec(f"kernel_dsl.{sub}").submodule_search_locations or [])  # type: ignore[union-attr]
)
_state = threading.local()


def is_machinery(filename: str) -> bool:
    """Frames of the tracer itself and of torch; kernels in subpackages (the library, the
    examples) are user code."""
    return (os.path.dirname(filename) == _PKG_DIR or filename.startswith(_TORCH_DIR)
            or filename.startswith(_MACHINERY_DIRS))


def user_loc(depth: int = 1) -> SourceLoc | None:
    """The innermost frame outside kernel_dsl's machinery and torch: the user's line."""
    frame = sys._getframe(depth)
    while frame is not None:
        fn = frame.f_code.co_filename
        if not is_machinery(fn):
            return SourceLoc(fn, frame.f_lineno, linecache.getline(fn, frame.f_lineno))
        frame = frame.f_back
    return None


def current() -> "Tracer | None":
    return getattr(_state, "tracer", None)


def shape_only() -> bool:
    """True while the host code runs only to compute output shapes (the fake of a torch op)."""
    return getattr(_state, "shape_only", False)


class ShapeOnly:
    """Context: `kd.tile` yields nothing, so the host code only allocates its outputs."""

    def __enter__(self) -> None:
        self._prev = shape_only()
        _state.shape_only = True

    def __exit__(self, *exc: object) -> None:
        _state.shape_only = self._prev


class Tracer:
    def __init__(self, name: str):
        self.name = name
        self.params: list[TensorParam] = []
        self.param_of: dict[int, TensorParam] = {}  # id(meta tensor) -> param
        self._keep: list[torch.Tensor] = []
        self.block_syms: list[BlockSym] = []
        self.named_syms: dict[str, BlockSym] = {}
        self.tiles: list[TileVar] = []
        self.grid: list[TileVar] | None = None
        self.body = Region()
        self.region: Region | None = None  # None while in host code
        self.grid_done = False
        self._next_value = 0
        self.stored: set[int] = set()
        self.pending_dims: dict[int, TileVar] = {}  # block sym -> dim awaiting its loop (block_dims.py)
        self.size_tiles: dict[int, TileVar] = {}  # block sym -> its value's tile (block_arith.py)
        self.tile_bodies: dict[int, Region] = {}  # loop tile id -> its loop's body
        # tile id -> (tensor, axis, size): a tile over a leading part of a longer axis
        self.prefix_uses: dict[int, tuple[str, int, int]] = {}
        self.pad_fills: dict[tuple[int, int, float], Value] = {}  # (value id, axis, fill) -> value
        # set by kd.jagged_tile (jagged.py) for its loops: also fills lanes past a row's end
        self.jagged_fill: Any = None
        self.views: Any = None  # host_views.ViewTracker, made by the first host view
        self.epilogue: Any = None  # host_epilogue.Recorder: torch calls after the grid loop
        # kd.register_tunable (tunables.py): the values to trace with, the fragments registered
        # and the values the trace took
        self.tunable_values: dict[str, Any] = {}
        self.tunables: dict[str, Any] = {}
        self.tunables_used: dict[str, Any] = {}
        # kd.barrier() (grid_phases.py): the grid loops before it, the read-only input that stands
        # for each output they wrote, and grid_phases.py's builder of the phases' IRs
        self.phases: list[Any] = []
        self.sealed: dict[int, TensorParam] = {}
        self.phase_builder: Any = None
        self.phase_start = 0  # the first tile of the phase being traced

    # -- values and ops ------------------------------------------------------------------
    def new_value(self, shape: tuple[Dim, ...], dtype: str, op: Op | None, region: Region) -> Value:
        v = Value(self._next_value, tuple(shape), dtype, op, region)
        self._next_value += 1
        return v

    def emit(self, kind: str, operands: list[Value], attrs: dict[str, Any],
             shape: tuple[Dim, ...] | None = None, dtype: str | None = None) -> Value | None:
        loc = user_loc(2)
        region = self.require_region(kind, loc)
        for v in operands:
            self.check_visible(v, loc)
        op = Op(kind, list(operands), attrs, [], loc)
        if shape is not None:
            assert dtype is not None
            op.results.append(self.new_value(shape, dtype, op, region))
        region.ops.append(op)
        return op.results[0] if op.results else None

    def require_region(self, what: str, loc: SourceLoc | None) -> Region:
        if self.region is None:
            raise KernelSyntaxError(
                f"`{what}` is device code but runs outside any `kd.tile` loop", loc,
                "put device code inside `for tile in kd.tile(...):`; host code may only read "
                "shapes and allocate outputs")
        return self.region

    def check_visible(self, v: Value, loc: SourceLoc | None) -> None:
        if self.region is None or v.region is None or v.region.encloses(self.region):
            return
        where = v.op.loc if v.op is not None and v.op.loc is not None else None
        raise LoopScopeError(
            f"this value was computed inside a `kd.tile` loop"
            f"{f' (at line {where.line})' if where else ''} and is not available here", loc,
            "to carry a value out of a loop, create it before the loop (e.g. "
            "`acc = kd.zeros([tm, tn], dtype=torch.float32)`) and update it inside")

    # -- block sizes and tiles -----------------------------------------------------------
    def block_sym(self, name: str | None = None, choices: tuple[int, ...] | None = None,
                  pinned: int | None = None) -> BlockSym:
        if name is not None and name in self.named_syms:
            return self.named_syms[name]
        s = BlockSym(len(self.block_syms), name, choices, pinned)
        self.block_syms.append(s)
        if name is not None:
            self.named_syms[name] = s
        return s

    def tile_live(self, t: TileVar) -> bool:
        """The tile's loop encloses the code being traced (a grid tile: the whole body)."""
        if t.kind == "grid":
            return True
        body = self.tile_bodies.get(t.id)
        return body is not None and self.region is not None and body.encloses(self.region)

    def new_tile(self, extent: int, block: BlockSym, kind: str, loc: SourceLoc | None,
                 name: str = "") -> TileVar:
        taken = {t.name for t in self.tiles}
        name = name or f"t{len(self.tiles)}"
        if name in taken:
            i = 2
            while f"{name}{i}" in taken:
                i += 1
            name = f"{name}{i}"
        t = TileVar(len(self.tiles), extent, block, kind, loc, name)
        self.tiles.append(t)
        return t

    # -- tensor parameters ---------------------------------------------------------------
    def add_param(self, meta: torch.Tensor, name: str, dtype: str, is_output: bool,
                  init: float | None = None, arg_index: int | None = None) -> TensorParam:
        p = TensorParam(name, tuple(int(d) for d in meta.shape), dtype, is_output, init, arg_index,
                        "i64" if meta.dtype == torch.int64 else None)
        self.params.append(p)
        self.param_of[id(meta)] = p
        self._keep.append(meta)
        return p

    def param(self, t: torch.Tensor) -> TensorParam | None:
        return self.param_of.get(id(t))

    # -- the result ----------------------------------------------------------------------
    def finish(self, returned: Any, loc: SourceLoc | None) -> KernelIR:
        if self.region is not None:
            raise KernelSyntaxError(
                "the kernel left a `kd.tile` loop early (`break` or `return` inside it)", loc,
                "loops over tiles always run to the end; use torch.where to skip work")
        if self.grid is None and self.phases:
            raise KernelSyntaxError("`kd.barrier()` is not followed by a grid loop", loc or user_loc(),
                                    "drop the barrier, or put a `kd.tile` loop after it")
        if self.grid is None:
            raise KernelSyntaxError(f"kernel `{self.name}` has no `for ... in kd.tile(...)` loop",
                                    loc or user_loc(),  # no loop to point at: the call, then
                                    "wrap the device code in `for tile in kd.tile(size):`")
        outs = returned if isinstance(returned, (tuple, list)) else (returned,)
        returns: list[TensorParam] = []
        chains: list[Any] = []  # per returned tensor: the host view of its buffer (host_views.py)
        after = None  # host code after the kernel (host_epilogue.py)
        if self.epilogue is not None and self.epilogue.nodes:
            returns, after = self.epilogue.finish(tuple(outs), loc)
            chains = [()] * len(returns)
        for o in outs if after is None else ():
            p, chain = (self.views.returned(o) if self.views is not None
                        else (self.param(o) if isinstance(o, torch.Tensor) else None, ()))
            chains.append(chain)
            if p is None or not p.is_output:
                raise KernelSyntaxError(
                    "a kernel must return the tensors its host code allocated", loc,
                    "allocate outputs with `out = torch.empty(...)` and `return out`")
            if id(p) not in self.stored and p.init is None:
                raise KernelSyntaxError(f"output `{p.name}` is returned but never written", loc,
                                        f"store into it inside the grid loop: `{p.name}[tile] = ...`")
            returns.append(p)
        for t in self.pending_dims.values():  # block_dims.py: a dim made for a loop never run
            raise KernelSyntaxError("a block size is used as a tile dim but no `kd.tile` loop "
                                    "takes it", t.loc, "loop over the axis with "
                                    "`kd.tile(n, block_size=bs)` after making the tile")
        for t in self.tiles:  # kd.tile(offsets[b], offsets[b + 1]) sized by what it indexes
            if t.bounded and t.extent < 1:
                raise KernelSyntaxError(
                    f"loop `{t!r}` is bounded by values read from memory but indexes no tensor",
                    t.loc, "index a tensor with the tile: its axis bounds the loop's blocks")
        for body in self.bodies():
            _eliminate_dead_code(body)
        host = (self.views.host_views(list(zip(returns, chains)), after)
                if self.views is not None else None)
        # the IR's name names generated functions and files: an ASCII identifier (names.py)
        ir = KernelIR(identifier(self.name), self.params, self.grid, self.body, self.block_syms,
                      self.tiles, returns, self.grid[0].loc, host, dict(self.tunables),
                      dict(self.tunables_used))
        return self.phase_builder(self, ir) if self.phases else ir

    def bodies(self) -> list[Region]:
        """The grid bodies traced so far: one per phase (kd.barrier())."""
        return [ph.body for ph in self.phases] + [self.body]


def _has_effects(op: Op) -> bool:
    if op.kind == "store":
        return True
    return op.body is not None and any(_has_effects(o) for o in op.body.ops)


def _eliminate_dead_code(region: Region) -> None:
    """Drops ops whose results nothing uses (e.g. a bf16 product folded into an f32 acc)."""
    changed = True
    while changed:
        used: set[int] = set()
        def mark(r: Region) -> None:
            used.update(y.id for y in r.yields)
            for op in r.ops:
                used.update(v.id for v in op.operands)
                if op.kind == "loop":  # `kd.tile(begin, end)`: the loop reads its bounds
                    used.update(v.id for v in op.attrs["tile"].bound_values())
                used.update(v.id for v in index_values(op))  # x[g, :]: reads g
                if op.body is not None:
                    mark(op.body)
        mark(region)
        changed = False
        def sweep(r: Region) -> None:
            nonlocal changed
            keep = []
            for op in r.ops:
                if op.body is not None:
                    sweep(op.body)
                if _has_effects(op) or any(v.id in used for v in op.results):
                    keep.append(op)
                else:
                    changed = True
            r.ops = keep
        sweep(region)


def replace_uses(region: Region, old: Value, new: Value) -> None:
    for op in region.ops:
        op.operands = [new if v is old else v for v in op.operands]
        if op.kind == "loop":
            t = op.attrs["tile"]
            t.lo, t.hi = (new if b is old else b for b in (t.lo, t.hi))
        if any(v is old for v in index_values(op)):
            op.attrs["index"] = tuple(Index(ix.kind, scalar=new) if ix.scalar is old else ix
                                      for ix in op.attrs["index"])
        if op.body is not None:
            replace_uses(op.body, old, new)
    region.yields = [new if v is old else v for v in region.yields]


def write_frame_locals(frame: Any, updates: dict[str, Any]) -> None:
    """Rebinds local variables of a running frame (after a traced loop body)."""
    if not updates:
        return
    f_locals = frame.f_locals
    for k, v in updates.items():
        f_locals[k] = v
    if sys.version_info < (3, 13):  # from 3.13 on, f_locals writes through (PEP 667)
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


_FOR = re.compile(r"^\s*for\s+\(?([\w\s,]+?)\)?\s+in\s")


def loop_var_names(loc: SourceLoc | None, n: int) -> list[str]:
    """`tm`, `tn` for a line `for tm, tn in kd.tile(...)`: names tiles in the IR and code."""
    m = _FOR.match(loc.text) if loc is not None else None
    names = [x.strip() for x in m.group(1).split(",")] if m else []
    return names if len(names) == n and all(x.isidentifier() for x in names) else [""] * n


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


def assigned_name(loc: SourceLoc | None, default: str) -> str:
    """`out` for a line `out = torch.empty(...)`: names outputs in IR and generated code."""
    m = _ASSIGN.match(loc.text) if loc is not None else None
    return m.group(1) if m else default


def run_traced(fn: Callable[..., Any], tracer: Tracer, args: list[Any], mode: TorchFunctionMode) -> Any:
    prev = current()
    _state.tracer = tracer
    try:
        with mode:
            return fn(*args)
    finally:
        _state.tracer = prev
