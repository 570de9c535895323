"""Views and layout ops on kernel arguments and outputs in host code (`x.view(-1)`, `w.T`,
`return out.view_as(x)`).

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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import dtypes
from .errors import DTypeError, KernelSyntaxError
from .ir import TensorParam
from .tracing import Tracer, assigned_name, user_loc

# tensor methods and torch functions that give a view or a layout change of their first argument
VIEW_FNS = frozenset({
    "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten",
    "expand", "expand_as", "view_as", "reshape_as", "contiguous", "t", "movedim", "moveaxis",
    "swapaxes", "swapdims", "ravel"})
VIEW_PROPS = frozenset({"T", "mT", "H", "mH"})  # `x.T`: reach the mode as a descriptor `__get__`
_AS = {"view_as": "view", "reshape_as": "reshape", "expand_as": "expand"}  # `_as(y)`: y's shape

Step = tuple[str, tuple[Any, ...], tuple[tuple[str, Any], ...]]  # (name, args, kwargs)


def view_name(func: Any) -> str | None:
    """The view this torch call is (`"view"`, `"T"`, ...), or None."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        return prop if prop in VIEW_PROPS else None
    return name if name in VIEW_FNS else None


def apply(t: torch.Tensor, chain: tuple[Step, ...]) -> torch.Tensor:
    for name, args, kwargs in chain:
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

    def prologue(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        views = [apply(tensors[src], chain).contiguous() for src, chain in self.inputs]
        return (tensors if self.keep is None else [tensors[i] for i in self.keep]) + views

    def epilogue(self, outs: Any) -> list[torch.Tensor]:
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
        return host.epilogue([outs] if isinstance(outs, torch.Tensor) else outs)

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
        if self.tracer.region is not None:
            raise KernelSyntaxError(
                f"`{name}` of a kernel argument or output inside a `kd.tile` loop", loc,
                "make host views before the loop (`x2 = x.view(-1, k)`) and index the view "
                "inside it; to reshape a tile, use the tile ops")
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
        root, chain = self.root(src)
        self.root_meta.setdefault(id(root), self._root_meta(src, root))
        self.of[id(out)] = (root, chain + (step,), out, assigned_name(loc, ""))
        self.tracer._keep.append(out)
        return out

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
                raise DTypeError(f"a host view of `{root.name}` has dtype {meta.dtype}", user_loc(),
                                 dtypes.unsupported_reason(meta.dtype))
            tr = self.tracer
            taken = {q.name for q in tr.params}
            base = name or f"{root.name}_view"
            pname, i = base, 2
            while pname in taken:
                pname, i = f"{base}{i}", i + 1
            p = TensorParam(pname, tuple(int(d) for d in meta.shape), dt, False, None, None)
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

    def host_views(self, returns: list[tuple[TensorParam, tuple[Step, ...]]]) -> HostViews | None:
        rets = tuple((self.alloc_shape.get(id(p)), chain) for p, chain in returns)
        if not self.input_views and all(s is None and not c for s, c in rets):
            return None
        # the kernel takes the argument inputs it reads, in their order, then the view inputs:
        # an argument read only through views is not passed (Pallas would copy it per step)
        views = {id(v) for v, _, _ in self.input_views}
        viewed = {id(src) for _, src, _ in self.input_views}
        read = {id(op.attrs["tensor"]) for op in self.tracer.body.walk() if op.kind == "load"}
        params = self.tracer.params
        args = [p for p in params if not p.is_output and id(p) not in views]
        pos = {id(p): i for i, p in enumerate(args)}
        keep = tuple(i for i, p in enumerate(args) if id(p) in read or id(p) not in viewed)
        params[:] = ([p for p in params if id(p) not in views and (p.is_output or pos[id(p)] in keep)]
                     + [v for v, _, _ in self.input_views])
        return HostViews(tuple((pos[id(src)], chain) for _, src, chain in self.input_views), rets,
                         None if len(keep) == len(args) else keep)
