"""Views and layout ops on kernel arguments and outputs in host code (`x.view(-1)`, `w.T`,
`x[:, :-1]`, `return out.view_as(x)`).

Views are host-side: the IR never sees them. The tracer runs each view on the meta tensor,
records the chain of torch calls from the argument or allocated output it started at, and:

- a view of an input that device code indexes becomes one more ordinary input TensorParam with
  the view's shape (after the arguments' own); at call time the same torch calls run on the
  (contiguous) argument and the result is made contiguous: free for a view that already is,
  a copy for one that is not (`x.T`, `x.expand(...)`), as `.contiguous()` would do in torch.
  A kernel sees its arguments contiguous (the trace's meta tensors are), so `x.view(-1)` of a
  non-contiguous argument works as `x.contiguous().view(-1)` (eager torch would refuse it);
- a view of an output that the kernel returns is applied to the buffer the backend wrote, so
  the caller gets the shape and strides eager torch gives for that code;
- a view of an output may be written (`o2 = out.view(m, n)`; `o2[tm, tn] = ...`) when it is a
  pure reshape (contiguous, same memory as the allocation): the buffer then takes the view's
  shape, and every write must go through views of that one shape.

Two more host-code ops on inputs are recorded the same way (kernel_dsl/trace_mode.py):
- broadcasts (`x, y = torch.broadcast_tensors(x, y)`, `torch.broadcast_to(b, shape)`, Helion's
  examples/add.py): each result that changes shape is a `broadcast_to` step (an expand view,
  new leading axes included), materialized by the `.contiguous()` like any view;
- dtype conversions (`w.to(x.dtype)`, `.float()`, `.half()`, `.bfloat16()`, `.type_as(t)`;
  Helion's gather_gemv): not views but a `to` step, the same torch conversion run on the real
  argument before the kernel, as eager torch would, so the input param takes the new dtype (an
  int64 result is narrowed as an int64 argument is, kernel_dsl/wide_ints.py). A conversion that
  keeps the dtype is the tensor itself, as in torch. A device in `.to(...)` must be the tensor's
  own (`x.device`, `other`): the kernel runs on its arguments' device, so a literal device
  (`.to("cuda")`, even `.to("cpu")`: the trace does not know the call's device) is refused, as is
  a conversion of an output (the kernel writes the buffer the host code allocated).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import dtypes
from .errors import DTypeError, KernelSyntaxError, ShapeError
from .ir import TensorParam
from .tracing import Tracer, assigned_name, user_loc

# tensor methods and torch functions that give a view or a layout change of their first argument
VIEW_FNS = frozenset({
    "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten",
    "expand", "expand_as", "view_as", "reshape_as", "contiguous", "t", "movedim", "moveaxis",
    "swapaxes", "swapdims", "ravel", "broadcast_to"})
VIEW_PROPS = frozenset({"T", "mT", "H", "mH"})  # `x.T`: reach the mode as a descriptor `__get__`
_AS = {"view_as": "view", "reshape_as": "reshape", "expand_as": "expand"}  # `_as(y)`: y's shape

Step = tuple[str, tuple[Any, ...], tuple[tuple[str, Any], ...]]  # (name, args, kwargs)

# tensor methods that convert the dtype (None: the dtype comes from the arguments)
CONVERSIONS: dict[str, torch.dtype | None] = {
    "to": None, "type_as": None, "float": torch.float32, "half": torch.float16,
    "bfloat16": torch.bfloat16, "double": torch.float64, "int": torch.int32, "long": torch.int64,
    "short": torch.int16, "char": torch.int8, "byte": torch.uint8, "bool": torch.bool}
_FORMATS = (torch.preserve_format, torch.contiguous_format)
_TUPLE_ASSIGN = re.compile(r"\s*\(?\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*,?\s*\)?\s*=[^=]")


def view_name(func: Any) -> str | None:
    """The view this torch call is (`"view"`, `"T"`, ...), or None."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        return prop if prop in VIEW_PROPS else None
    return name if name in VIEW_FNS else None


def conversion_name(func: Any) -> str | None:
    """The dtype conversion this torch call is (`"to"`, `"float"`, ...), or None."""
    name = getattr(func, "__name__", "")
    return name if name in CONVERSIONS and func is getattr(torch.Tensor, name, None) else None


def _target(src: torch.Tensor, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
            loc: Any) -> tuple[torch.dtype, bool]:
    """(the dtype, copy=) of the conversion `src.name(*args, **kwargs)`; refuses a device move
    and a memory format."""
    call = f"`.{name}(...)`"
    dtype, devices, copy = CONVERSIONS[name] or src.dtype, [], False
    kw = dict(kwargs)
    fmt = kw.pop("memory_format", torch.preserve_format)
    if name == "type_as":
        other = args[1] if len(args) > 1 else kw.pop("other", None)
        if not isinstance(other, torch.Tensor):
            raise KernelSyntaxError(f"{call} of a non-tensor in host code", loc,
                                    "pass a tensor: `x.type_as(y)`")
        dtype = other.dtype
    elif name == "to":
        pos = list(args[1:])
        for a in pos:
            if isinstance(a, torch.Tensor):  # `.to(other)`: other's dtype and device
                dtype = a.dtype
                devices.append(a.device)
            elif isinstance(a, torch.dtype):
                dtype = a
            elif isinstance(a, (str, int, torch.device)) and not isinstance(a, bool):
                devices.append(a)
            elif not isinstance(a, bool):  # a bool is positional non_blocking, then copy: `flags`
                raise KernelSyntaxError(f"{call} with argument {a!r} in host code", loc,
                                        "convert with a dtype: `x.to(torch.bfloat16)`")
        if "dtype" in kw and kw["dtype"] is not None:
            dtype = kw["dtype"]
        if kw.get("device") is not None:
            devices.append(kw["device"])
        flags = [a for a in pos if isinstance(a, bool)]
        copy = bool(kw.get("copy", len(flags) > 1 and flags[1]))
        kw = {k: v for k, v in kw.items() if k not in ("dtype", "device", "non_blocking", "copy")}
    if kw:
        raise KernelSyntaxError(f"{call} with keyword argument(s) {sorted(kw)} in host code", loc,
                                "convert with a dtype only: `x.to(torch.bfloat16)`")
    if fmt not in _FORMATS:
        raise KernelSyntaxError(f"{call} with memory_format={fmt} in host code", loc,
                                "kernels see their inputs contiguous: drop the memory_format")
    for d in devices:
        try:
            same = torch.device(d) == src.device
        except (RuntimeError, TypeError):
            same = False
        if not same:
            raise KernelSyntaxError(
                f"{call} moves a kernel argument or output to device {d!r} in host code", loc,
                "a kernel runs on its arguments' device: move tensors before the call "
                "(`kernel(x.to(dev))`), or give the tensor's own device (`.to(x.device)`)")
    if not isinstance(dtype, torch.dtype):
        raise KernelSyntaxError(f"{call} to {dtype!r} in host code", loc,
                                "convert with a torch dtype: `x.to(torch.bfloat16)`")
    return dtype, copy


def basic_index(idx: Any) -> bool:
    """`x[:, :-1]`, `x[0]`, `x[..., None]`: a host slice of ints, int-bounded slices, None and
    `...`, a view of the tensor (a tensor or tile index is device code)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    def is_int(b: Any) -> bool:
        return isinstance(b, int) and not isinstance(b, bool)

    def bound(b: Any) -> bool:
        return b is None or is_int(b)
    return all(it is None or it is Ellipsis or is_int(it)
               or isinstance(it, slice) and bound(it.start) and bound(it.stop) and bound(it.step)
               for it in items)


def _key(idx: Any) -> tuple[Any, ...]:
    """A hashable form of a basic index (slices are not hashable before Python 3.12)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return tuple(("slice", it.start, it.stop, it.step) if isinstance(it, slice) else it
                 for it in items)


def _index(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(slice(*it[1:]) if isinstance(it, tuple) else it for it in key)


def apply(t: torch.Tensor, chain: tuple[Step, ...]) -> torch.Tensor:
    for name, args, kwargs in chain:
        if name == "__getitem__":
            t = t[_index(args)]
        else:
            t = getattr(t, name) if name in VIEW_PROPS else getattr(t, name)(*args, **dict(kwargs))
    return t


@dataclass(frozen=True)
class HostViews:
    """What a call does around the backend's kernel: `inputs[i] = (position of the source in the
    argument inputs, chain)` for each view input (passed after the argument inputs in `keep`);
    `returns[j]` the chain applied to the
    j-th returned buffer (`reshape` first: the shape the host code allocated, when a write
    through a view gave the buffer another shape)."""

    inputs: tuple[tuple[int, tuple[Step, ...]], ...]
    returns: tuple[tuple[tuple[int, ...] | None, tuple[Step, ...]], ...]
    keep: tuple[int, ...] | None = None  # the argument inputs the kernel reads; None: all
    # host code after the kernel (host_epilogue.Epilogue): it makes the returned tensors from the
    # buffers and the argument inputs, in place of `returns`
    after: Any = None

    def prologue(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        views = [apply(tensors[src], chain).contiguous() for src, chain in self.inputs]
        return (tensors if self.keep is None else [tensors[i] for i in self.keep]) + views

    def epilogue(self, outs: Any, inputs: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """The returned tensors from the kernel's buffers `outs` (and the argument inputs, which
        host code after the kernel may read)."""
        if self.after is not None:
            return self.after.run(list(outs), list(inputs or ()))
        res, seen = [], set()
        for o, (shape, chain) in zip(outs, self.returns):
            if id(o) in seen:  # `return out, out.T`: the op's outputs are fresh tensors, never
                o = o.clone()  # aliases of each other (the custom op's contract); values and
            seen.add(id(o))    # layout are torch's
            res.append(apply(o if shape is None else o.view(shape), chain))
        return res


def wrap(host: HostViews | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A compiled kernel that takes and returns what a call without views would: the argument
    inputs (`runtime_scalars.kernel_inputs`) in, the returned tensors out."""
    if host is None:
        return fn

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        outs = fn(*host.prologue(list(tensors)))
        return host.epilogue([outs] if isinstance(outs, torch.Tensor) else outs, list(tensors))

    run.host_views = host  # type: ignore[attr-defined]
    run.inner = fn  # type: ignore[attr-defined]
    return run


def unaliased(outs: list[Any]) -> list[Any]:
    """The fake's outputs as the run gives them: two views of one allocation (`return out,
    out.T`) come back as separate tensors of the same shapes and strides."""
    seen: set[int] = set()
    res = []
    for o in outs:
        if isinstance(o, torch.Tensor):
            key = o.untyped_storage()._cdata
            if key in seen:
                o = o.clone()  # keeps the strides of a dense view (`preserve_format`)
            seen.add(key)
        res.append(o)
    return res


def kernel_tensors(host: HostViews | None, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """What the backend's kernel itself takes for the argument inputs `tensors`."""
    return tensors if host is None else host.prologue(tensors)


class ViewTracker:
    """The tracer's record of views: meta tensor -> (root param, chain from the root's meta)."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer
        self.of: dict[int, tuple[TensorParam, tuple[Step, ...], torch.Tensor, str]] = {}
        self.input_views: list[tuple[TensorParam, TensorParam, tuple[Step, ...]]] = []
        self.param_of_view: dict[int, TensorParam] = {}  # id(view meta) -> its input param
        self.alloc_shape: dict[int, tuple[int, ...]] = {}  # id(output param) -> allocated shape
        self.root_meta: dict[int, torch.Tensor] = {}  # id(root param) -> its meta

    def tracked(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and (self.tracer.param(t) is not None or id(t) in self.of)

    def root(self, t: torch.Tensor) -> tuple[TensorParam, tuple[Step, ...]]:
        p = self.tracer.param(t)
        if p is not None and id(t) not in self.of:
            return p, ()
        root, chain, _, _ = self.of[id(t)]
        return root, chain

    def view(self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Runs a view op of host code on a tracked meta tensor and records it."""
        src = args[0]
        loc = user_loc()
        self._in_host_code(name, loc)
        rest = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args[1:])
        if any(isinstance(a, torch.Tensor) for a in kwargs.values()):
            raise KernelSyntaxError(f"`{name}` with a tensor keyword argument in host code", loc,
                                    "pass shapes and dims as Python ints")
        out = func(*args, **kwargs)
        if out is src:  # `x.contiguous()` of a contiguous tensor: the tensor itself
            return out
        step: Step = (_AS.get(name, name), rest, tuple(sorted(kwargs.items())))
        if name in VIEW_PROPS:
            step = (name, (), ())
        elif name == "__getitem__":  # `x[:, :-1]`
            step = (name, _key(args[1]), ())
        elif name == "broadcast_to":  # `torch.broadcast_to(b, (m, n))`: the shape as ints
            step = (name, (tuple(int(d) for d in out.shape),), ())
        return self._record(src, out, step, loc)

    def _record(self, src: torch.Tensor, out: torch.Tensor, step: Step, loc: Any,
                name: str | None = None) -> torch.Tensor:
        root, chain = self.root(src)
        self.root_meta.setdefault(id(root), self._root_meta(src, root))
        name = assigned_name(loc, "") if name is None else name
        self.of[id(out)] = (root, chain + (step,), out, name)
        self.tracer._keep.append(out)
        return out

    def device_view(self, src: torch.Tensor, step: Step, out: torch.Tensor, suffix: str = "") -> torch.Tensor:
        """A view the tracer makes for device code (kernel_dsl/widened.py): recorded as host
        code's are, so it becomes one more input, made at the call."""
        root, _ = self.root(src)
        return self._record(src, out, step, user_loc(), f"{root.name}_{suffix}" if suffix else "")

    def _in_host_code(self, what: str, loc: Any) -> None:
        if self.tracer.region is not None:
            raise KernelSyntaxError(
                f"`{what}` of a kernel argument or output inside a `kd.tile` loop", loc,
                "make host views and conversions before the loop (`x2 = x.view(-1, k)`, "
                "`w2 = w.to(torch.float32)`) and index them inside it; to reshape or cast a "
                "tile, use the tile ops (`x[t].to(torch.float32)`)")

    def broadcast(self, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """`torch.broadcast_tensors(x, y)` in host code: each result that changes shape is a
        `broadcast_to` view of its tensor (an expand; leading axes added for a lower rank)."""
        loc = user_loc()
        self._in_host_code("broadcast_tensors", loc)
        try:
            shape = tuple(int(d) for d in torch.broadcast_shapes(*(t.shape for t in tensors)))
        except RuntimeError:
            raise ShapeError("`torch.broadcast_tensors` of shapes "
                             f"{', '.join(str(list(t.shape)) for t in tensors)} in host code, "
                             "which do not broadcast", loc,
                             "each axis must match or be 1 (aligned from the last)") from None
        m = _TUPLE_ASSIGN.match(loc.text) if loc is not None else None  # `x, y = ...`: names
        names = [n.strip() for n in m.group(1).split(",")] if m else []
        names = names if len(names) == len(tensors) else [""] * len(tensors)
        return tuple(t if tuple(t.shape) == shape else
                     self._record(t, t.broadcast_to(shape), ("broadcast_to", (shape,), ()), loc,
                                  n) for t, n in zip(tensors, names))

    def convert(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        """`w.to(x.dtype)`, `x.float()` in host code: the same conversion of the real argument
        runs before the kernel (a `to` step); a conversion that keeps the dtype is `src` itself."""
        src = args[0]
        loc = user_loc()
        self._in_host_code(name, loc)
        dtype, copy = _target(src, name, args, kwargs, loc)
        root, _ = self.root(src)
        if root.is_output and (dtype != src.dtype or copy):
            what = f"to {dtype}" if dtype != src.dtype else "(a copy)"
            raise KernelSyntaxError(
                f"`.{name}(...)` converts output `{root.name}` {what} in host code", loc,
                f"allocate `{root.name}` with the dtype it should have (`torch.empty(..., "
                f"dtype={dtype})`) and cast the stored tiles (`{root.name}[t] = v.to("
                f"{root.name}.dtype)`), or convert the kernel's result after the call")
        if dtype == src.dtype:  # torch gives the tensor itself (an input's copy reads the same)
            return src
        return self._record(src, src.to(dtype), ("to", (dtype,), ()), loc)

    def _root_meta(self, src: torch.Tensor, root: TensorParam) -> torch.Tensor:
        return src if id(src) not in self.of else self.root_meta[id(root)]

    # -- indexing a view in device code -------------------------------------------------------------
    def direct(self, t: torch.Tensor, p: TensorParam, what: str) -> TensorParam:
        """An output's own allocation, after a write through a view gave its buffer another shape."""
        if p.is_output and tuple(t.shape) != p.shape:
            raise KernelSyntaxError(
                f"{what} output `{p.name}` of shape {list(t.shape)}, written through a view of "
                f"shape {list(p.shape)}", user_loc(),
                f"write `{p.name}` through one view only (the {list(p.shape)} one here)")
        return p

    def param(self, t: torch.Tensor, what: str) -> TensorParam | None:
        """The TensorParam device code indexes for the view `t` (made on first use)."""
        entry = self.of.get(id(t))
        if entry is None:
            return None
        root, chain, meta, name = entry
        if root.is_output:
            return self._output_view(t, root, chain, what)
        p = self.param_of_view.get(id(t))
        if p is None:
            dt = dtypes.to_ir(meta.dtype)
            if dt is None:
                raise DTypeError(f"a host view or conversion of `{root.name}` has dtype "
                                 f"{meta.dtype}", user_loc(), dtypes.unsupported_reason(meta.dtype))
            tr = self.tracer
            taken = {q.name for q in tr.params}
            base = name or f"{root.name}_view"
            pname, i = base, 2
            while pname in taken:
                pname, i = f"{base}{i}", i + 1
            p = TensorParam(pname, tuple(int(d) for d in meta.shape), dt, False, None, None,
                            "i64" if meta.dtype == torch.int64 else None)  # narrowed at the call
            tr.params.append(p)
            self.param_of_view[id(t)] = p
            self.input_views.append((p, root, chain))
        return p

    def _output_view(self, t: torch.Tensor, root: TensorParam, chain: tuple[Step, ...],
                     what: str) -> TensorParam:
        loc = user_loc()
        base = self.root_meta[id(root)]
        pure = (t.is_contiguous() and base.is_contiguous() and t.storage_offset() == 0
                and t.numel() == base.numel() and t.dtype == base.dtype
                and t.untyped_storage()._cdata == base.untyped_storage()._cdata)
        if not pure:
            raise KernelSyntaxError(
                f"{what} a host view of output `{root.name}` that is not a plain reshape "
                f"(shape {list(t.shape)}, strides {list(t.stride())})", loc,
                f"write `{root.name}` itself (or a `.view(...)` of it with the same memory "
                f"order) and return the view: `return {root.name}.T`")
        shape = tuple(int(d) for d in t.shape)
        if shape == root.shape:
            return root
        tr = self.tracer
        if id(root) in tr.stored or id(root) in self.alloc_shape:
            raise KernelSyntaxError(
                f"output `{root.name}` is written through two shapes ({list(root.shape)} and "
                f"{list(shape)})", loc,
                f"write `{root.name}` through one view only, e.g. always `{root.name}.view(...)` "
                "with the same shape")
        # the buffer takes the view's shape; the allocation's own shape is a view of it now
        new = TensorParam(root.name, shape, root.dtype, True, root.init, root.arg_index)
        tr.params[tr.params.index(root)] = new
        for k, v in list(tr.param_of.items()):
            if v is root:
                tr.param_of[k] = new
        for k, (r, c, m, n) in list(self.of.items()):
            if r is root:
                self.of[k] = (new, c, m, n)
        self.root_meta[id(new)] = base
        self.alloc_shape[id(new)] = tuple(int(d) for d in base.shape)
        return new

    # -- the result ---------------------------------------------------------------------------------
    def returned(self, o: Any) -> tuple[TensorParam | None, tuple[Step, ...]]:
        if not isinstance(o, torch.Tensor):
            return None, ()
        if id(o) in self.of:
            return self.root(o)
        return self.tracer.param(o), ()

    def host_views(self, returns: list[tuple[TensorParam, tuple[Step, ...]]],
                   after: Any = None) -> HostViews | None:
        rets = () if after is not None else tuple(
            (self.alloc_shape.get(id(p)), chain) for p, chain in returns)
        if not self.input_views and all(s is None and not c for s, c in rets) and after is None:
            return None
        # the kernel takes the argument inputs it reads, in their order, then the view inputs:
        # an argument read only through views is not passed (Pallas would copy it per step)
        views = {id(v) for v, _, _ in self.input_views}
        viewed = {id(src) for _, src, _ in self.input_views}
        read = {id(op.attrs["tensor"]) for body in self.tracer.bodies() for op in body.walk()
                if op.kind == "load"}
        params = self.tracer.params
        args = [p for p in params if not p.is_output and id(p) not in views]
        pos = {id(p): i for i, p in enumerate(args)}
        keep = tuple(i for i, p in enumerate(args) if id(p) in read or id(p) not in viewed)
        params[:] = ([p for p in params if id(p) not in views and (p.is_output or pos[id(p)] in keep)]
                     + [v for v, _, _ in self.input_views])
        return HostViews(tuple((pos[id(src)], chain) for _, src, chain in self.input_views), rets,
                         None if len(keep) == len(args) else keep, after)
