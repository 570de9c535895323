"""The torch-function mode active while a kernel is traced: host-code rules, loads and stores."""
from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from . import (
    device_arange,
    device_if,
    dtypes,
    grid_phases,
    host_epilogue,
    host_views,
    jagged,
    readback,
    runtime_scalars,
    static_slices,
    tile_bounds,
    widened,
)
from .device_ops import Tile, TileValue, _as_tile, broadcast, cast_v
from .errors import ArgumentError, DTypeError, KernelSyntaxError, ShapeError, UnsupportedOpError
from .ir import Dim, Index, TensorParam, shape_str
from .torch_functions import dispatch
from .tracing import Tracer, assigned_name, user_loc

_ALLOC_INIT = {
    torch.empty: None, torch.zeros: 0.0, torch.ones: 1.0, torch.full: "fill",
    torch.empty_like: None, torch.zeros_like: 0.0, torch.ones_like: 1.0, torch.full_like: "fill",
    torch.Tensor.new_empty: None, torch.Tensor.new_zeros: 0.0, torch.Tensor.new_ones: 1.0,
    torch.Tensor.new_full: "fill",
}
# metadata reads that host code may do on (meta) tensors
_HOST_OK = {"size", "dim", "stride", "numel", "is_contiguous", "__len__", "__format__",
            "__repr__", "element_size", "nelement", "get_device", "__hash__",
            "is_floating_point", "is_complex", "storage_offset", "untyped_storage"}
# dtype helpers that host code may call to choose output dtypes: they read only dtypes
# (torch.finfo, torch.iinfo and torch.get_default_dtype never reach the mode)
_HOST_DTYPE_OK = {torch.promote_types, torch.result_type, torch.can_cast}


def _scalar_index(it: Any) -> bool:
    """A rank-0 integer device value (a `kd.grid` index, `t.begin`, a loaded int) indexes one
    element of an axis, as a Python int does; it must be in range, as torch requires."""
    return isinstance(it, TileValue) and not it.v.shape and it.v.dtype in ("i32", "i16", "i8",
                                                                           "u8")


def _gather_index(it: Any) -> bool:
    """An integer tile value (`ids[tb]`, `t.index + 1`, or of rank N: `starts[:, None] +
    tk.index[None, :]`) indexes an axis lane by lane: a gather in a load, a scatter in a store
    (docs/ir.md "Gather and scatter"); the axis becomes the index's dims."""
    return isinstance(it, TileValue) and it.v.rank >= 1 and it.v.dtype in ("i32", "i16", "i8",
                                                                            "u8")


def _gather_error(p: TensorParam, it: Any, loc: Any) -> KernelSyntaxError:
    """Indexing with a tensor or a tile value that is not a 1-D integer index tile."""
    if isinstance(it, torch.Tensor):
        what = "a whole tensor"
    elif it.v.dtype == "bool":
        return UnsupportedOpError(
            f"`{p.name}[mask]`: indexing with a bool tile (boolean-mask indexing) is not "
            "supported", loc, f"load the block and select per element: "
            f"`torch.where(mask, {p.name}[t], 0.0)`")
    elif it.v.dtype not in ("i32", "i16", "i8", "u8"):
        what = f"a {it.v.dtype} {'scalar' if not it.v.shape else 'tile'} (indices are integers)"
    else:  # pragma: no cover - every integer tile is an index tile
        what = f"a rank-{it.v.rank} integer tile"
    return UnsupportedOpError(
        f"`{p.name}[...]` is indexed with {what}: gather and scatter go through one "
        "integer index tile per subscript", loc,
        f"index with a 1-D int tile: `{p.name}[ids[t]]`, `{p.name}[t.index + 1]` (cast with "
        "`.to(torch.int32)`); or gather in PyTorch before the kernel and pass the result")


class TraceMode(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.tracer.grid_done and self.tracer.region is None and \
                self._after_kernel(func, args, kwargs):  # host code after the grid loop
            return self._epilogue().record(func, args, kwargs)
        if func is torch.Tensor.__getitem__:
            if (self.tracer.region is None and host_views.basic_index(args[1])
                    and self._views().tracked(args[0])):  # `x[:, :-1]` in host code: a view
                return self._views().view(func, "__getitem__", args, kwargs)
            return self._getitem(args[0], args[1])
        if func is torch.Tensor.__setitem__:
            return self._setitem(args[0], args[1], args[2])
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(a, widened.Merged) for a in flat):  # int4_gemm's merged operands
            return widened.torch_call(func, args, kwargs)
        if any(isinstance(a, (TileValue, Tile)) for a in flat):
            if runtime_scalars.has_runtime(flat):  # float arguments promote as Python floats
                args, kwargs = runtime_scalars.weak_args(func, args, kwargs)
            return dispatch(func, args, kwargs)
        if func is torch.arange and self.tracer.region is not None:  # int bounds, in a loop
            return device_arange.arange(*args, **kwargs)
        if func in _ALLOC_INIT:
            return self._alloc(func, args, kwargs)
        view = host_views.view_name(func)  # `x.view(-1)`, `w.T` of an argument or output
        if view is not None and args and self._views().tracked(args[0]):
            return self._views().view(func, view, args, kwargs)
        conv = host_views.conversion_name(func)  # `w.to(x.dtype)`, `x.float()` of an argument
        if conv is not None and args and self._views().tracked(args[0]):
            return self._views().convert(conv, args, kwargs)
        if func is torch.broadcast_tensors and args and all(map(self._views().tracked, args)):
            return self._views().broadcast(args)  # `x, y = torch.broadcast_tensors(x, y)`
        name = getattr(func, "__name__", "")
        if name == "__get__" or name in _HOST_OK or func in _HOST_DTYPE_OK:
            return func(*args, **kwargs)
        if name == "item":  # jagged_softmax's `N = int(x_offsets[-1].item())`
            raise KernelSyntaxError(
                "`.item()` reads a tensor's value in host code before the kernel's loop",
                user_loc(), "the kernel is traced once without data: compute the value before "
                "the call and pass it as an int argument (a size that follows a tensor's shape "
                "reads `.shape`: `x.shape[0]`)")
        raise KernelSyntaxError(
            f"`{name or func}` computes on tensor data in host code before the kernel's loop",
            user_loc(), "host code before the `kd.tile` loop may only read shapes/dtypes, make "
            "views and allocate outputs (torch.empty, torch.zeros, *_like): compute on tiles "
            "inside the loop, or in torch before the call and pass the result in; host code "
            "after the loop may compute on the outputs (`return out.sum()`)")

    def _after_kernel(self, func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
        """Whether a torch call of host code after the grid loop is an epilogue node
        (host_epilogue.py): not a metadata read, not device code, and not a view of an argument
        or output (a host view chain, host_views.py) unless a conversion of an output."""
        name = getattr(func, "__name__", "")
        view = host_views.view_name(func)
        if (name == "__get__" and view is None) or name in _HOST_OK or func in _HOST_DTYPE_OK:
            return False
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(a, Tile) or (isinstance(a, TileValue) and not runtime_scalars.has_runtime([a]))
               for a in flat):
            return False  # a tile value outside its loop: device code's own error
        rec = self.tracer.epilogue
        if rec is not None and any(rec.is_result(a) for a in flat):
            return True
        views = self._views()
        if not (args and views.tracked(args[0])
                and all(views.tracked(a) for a in flat if isinstance(a, torch.Tensor))):
            return True
        if func is torch.Tensor.__getitem__:
            return not host_views.basic_index(args[1])
        if view is not None or func is torch.broadcast_tensors:
            return False
        if host_views.conversion_name(func) is not None:
            return views.root(args[0])[0].is_output
        return True

    def _epilogue(self) -> host_epilogue.Recorder:
        if self.tracer.epilogue is None:
            self.tracer.epilogue = host_epilogue.Recorder(self.tracer, self._views())
        return self.tracer.epilogue

    # -- outputs -------------------------------------------------------------------------------
    def _alloc(self, func: Any, args: Any, kwargs: dict[str, Any]) -> torch.Tensor:
        tr = self.tracer
        loc = user_loc()
        if tr.region is not None:
            raise KernelSyntaxError(
                f"`{func.__name__}` allocates a tensor inside a `kd.tile` loop", loc,
                "allocate outputs in host code before the loop; for a tile use "
                "`kd.zeros([tm, tn], dtype=...)`")
        init = _ALLOC_INIT[func]
        if init == "fill":
            fill = kwargs.get("fill_value", args[-1] if args else None)
            init = float(fill) if isinstance(fill, (int, float)) else None
        kwargs = dict(kwargs, device="meta")
        meta = func(*args, **kwargs)
        dt = dtypes.to_ir(meta.dtype)
        if dt is None:
            raise DTypeError(f"output dtype {meta.dtype} is not supported", loc,
                             dtypes.unsupported_reason(meta.dtype))
        name = assigned_name(loc, f"out{len(tr.params)}")
        if any(p.name == name for p in tr.params):
            name = f"{name}{len(tr.params)}"
        tr.add_param(meta, name, dt, is_output=True, init=init)
        return meta

    def _views(self) -> host_views.ViewTracker:
        if self.tracer.views is None:
            self.tracer.views = host_views.ViewTracker(self.tracer)
        return self.tracer.views

    # -- loads and stores -------------------------------------------------------------------------
    def _param(self, t: Any, what: str) -> TensorParam:
        p = self.tracer.param(t) if isinstance(t, torch.Tensor) else None
        views = self.tracer.views
        if views is not None and isinstance(t, torch.Tensor):
            p = views.direct(t, p, what) if p is not None else views.param(t, what)
        if p is None:
            raise KernelSyntaxError(
                f"{what} a tensor that is not a kernel argument, an allocated output or a host "
                "view of one", user_loc(), "index the kernel's arguments and outputs, or views "
                "of them made in host code (`x.view(-1, k)`, `w.T`); tensors computed in host "
                "code are not kernel inputs: compute them before the call and pass them in")
        return p

    def _index(self, p: TensorParam, idx: Any,
               load: bool = False) -> tuple[tuple[Index, ...], tuple[Dim, ...]]:
        loc = user_loc()
        items = list(idx) if isinstance(idx, tuple) else [idx]
        for it in items:  # before any `==`: a tile value's `==` is a device op, not a test
            if isinstance(it, (TileValue, torch.Tensor)) and not _scalar_index(it) \
                    and not _gather_index(it):
                raise _gather_error(p, it, loc)
        if sum(1 for it in items if _gather_index(it)) > 1:
            raise UnsupportedOpError(
                f"`{p.name}[...]` is indexed with more than one index tile", loc,
                "gather along one axis per subscript; for a 2-D gather index the flattened "
                "tensor with one computed index tile (`row * n + col`)")
        if any(it is Ellipsis for it in items):
            i = next(i for i, it in enumerate(items) if it is Ellipsis)
            items[i:i + 1] = [slice(None)] * (len(p.shape) - len(items) + 1)
        if len(items) > len(p.shape):
            raise ShapeError(f"{len(items)} indices for `{p.name}` of rank {len(p.shape)}", loc)
        items += [slice(None)] * (len(p.shape) - len(items))
        index: list[Index] = []
        shape: list[Dim] = []
        tr = self.tracer
        for axis, (it, n) in enumerate(zip(items, p.shape)):
            if isinstance(it, Tile):
                if tr.region is None or not it.region.encloses(tr.region):
                    raise KernelSyntaxError("this tile's loop has already ended", loc,
                                            "use a tile only inside its own `for` loop")
                if it.var.bounded:  # kd.tile(begin, end): its end must stay inside the axis
                    tile_bounds.check_axis(it.var, n, p.name, loc)
                elif it.var.extent > n:
                    raise ShapeError(
                        f"a tile over {it.var.extent} elements indexes axis {axis} of "
                        f"`{p.name}`, which has {n}", loc,
                        f"tile that axis's own size, e.g. `kd.tile({p.name}.shape[{axis}])`")
                elif it.var.extent < n:  # a leading part of the axis (`offsets[tile_b]`)
                    tr.prefix_uses.setdefault(it.var.id, (p.name, axis, n))
                index.append(Index("tile", it.var))
                shape.append(it.var)
            elif isinstance(it, TileValue) and it.v.shape:  # an index tile: `emb[ids[tb], td]`
                tr.check_visible(it.v, loc)  # a gather (scatter in a store) along this axis
                tile_bounds.reach_through_gather(it.v, n)  # `A[start + tm.index, tk]`
                it = device_if.guard_index(it) if load else it  # in a device `if`: in range
                index.append(Index("gather", scalar=it.v))
                shape.extend(it.v.shape)  # an N-D index: the axis becomes its dims
            elif isinstance(it, TileValue):  # a device scalar: `x[g, :]`, `emb[ids[t], :]`
                tr.check_visible(it.v, loc)
                it = device_if.guard_index(it) if load else it  # in a device `if`: in range
                index.append(Index("dyn", scalar=it.v))
            elif isinstance(it, slice):  # `:` or a static `a:b` (kernel_dsl/static_slices.py)
                ix = static_slices.slice_index(p.name, axis, it, n, loc)
                index.append(ix)
                shape.append(n if ix.kind == "full" else ix.stop - ix.value)
            elif isinstance(it, int) and not isinstance(it, bool):
                if not -n <= it < n:
                    raise ShapeError(f"index {it} is out of range for axis {axis} of "
                                     f"`{p.name}` (size {n})", loc)
                index.append(Index("int", value=it % n))
            else:
                raise KernelSyntaxError(
                    f"`{p.name}[...]` index {it!r} is not supported", loc,
                    "index tensors with tiles from kd.tile, `:` or Python ints")
        static_slices.check_no_gather_mix(p.name, index, loc)
        return tuple(index), tuple(shape)

    def _getitem(self, t: Any, idx: Any) -> Any:
        if isinstance(idx, tuple) and any(widened.widened_slice(it) for it in idx):  # int4_gemm's A
            return widened.load(self._getitem, self._views(), t, idx, self.tracer.region)
        p = self._param(t, "indexing")
        p = self.tracer.sealed.get(id(p), p)  # written before kd.barrier(): an input now
        index, shape = self._index(p, idx, load=True)
        attrs: dict[str, Any] = {"tensor": p, "index": index}
        if p.is_output:  # what this grid program stored before (readback.py)
            stored = readback.on_read(self.tracer, p, index, user_loc())
            if stored is not None:
                return jagged.mask_load(self.tracer, TileValue(stored), p.name)
            attrs["readback"] = True
        v = self.tracer.emit("load", [], attrs, shape, p.dtype)
        return jagged.mask_load(self.tracer, TileValue(v), p.name)  # in kd.jagged_tile: 0 past ends

    def _setitem(self, t: Any, idx: Any, value: Any, atomic: dict[str, str] | None = None) -> None:
        """`out[idx] = value`. As torch's setitem, the value is cast to the output's dtype
        (an IR `cast`: floats round to nearest even, float -> int truncates toward zero,
        nonzero -> True for bool) and broadcast to the indexed block's shape."""
        p = self._param(t, "assigning into")
        loc = user_loc()
        grid_phases.check_store(self.tracer, p, loc)
        if not p.is_output:
            raise ArgumentError(
                f"kernel writes into its argument `{p.name}`", loc,
                f"allocate an output (`out = torch.empty_like({p.name})`), write it and return it")
        index, shape = self._index(p, idx)
        items, pred = jagged.store_items(self.tracer, list(idx) if isinstance(idx, tuple)
                                         else [idx], shape, p.name)
        if pred is not None:  # in kd.jagged_tile: lanes past their row's end are not written
            preds = self.tracer.__dict__.setdefault("if_preds", [])
            outer = device_if.predicate()
            preds.append(pred if outer is None else outer & pred)
            try:
                return self._setitem_at(p, index, shape, value, atomic)
            finally:
                preds.pop()
        if items is not None and jagged.jagged_dims(self.tracer, shape):  # a scatter: index -1
            index, shape = self._index(p, tuple(items))
        return self._setitem_at(p, index, shape, value, atomic)

    def _setitem_at(self, p: TensorParam, index: tuple[Index, ...], shape: tuple[Dim, ...],
                    value: Any, atomic: dict[str, str] | None) -> None:
        loc = user_loc()
        if isinstance(value, (int, float, bool)) and not isinstance(value, TileValue):
            from .device_ops import const
            v = const(value, p.dtype)
        else:
            v = _as_tile(value)
        # cast before broadcasting: the cast then runs on the smaller (unbroadcast) value
        v = cast_v(v, p.dtype)
        if v.v.shape != shape:
            try:
                v = broadcast(v, shape)
            except ShapeError:
                raise ShapeError(f"storing a {shape_str(v.v.shape)} tile into "
                                 f"`{p.name}[...]` of shape {shape_str(shape)}", loc,
                                 "the value must have the shape of the indexed block") from None
        # inside a device `if` (device_if.py) the lanes of a branch not taken keep memory's value
        v = device_if.guard_store(v, lambda: TileValue(self.tracer.emit(
            "load", [], {"tensor": p, "index": index}, shape, p.dtype)),
            (atomic or {}).get("atomic"), p.dtype)
        readback.on_store(self.tracer, p, index, bool(atomic), loc, v.v)
        # kd.atomic_add/max/min (kernel_dsl/atomics.py) are stores with attrs "atomic", "sem"
        self.tracer.emit("store", [v.v], {"tensor": p, "index": index, **(atomic or {})})
        self.tracer.stored.add(id(p))
