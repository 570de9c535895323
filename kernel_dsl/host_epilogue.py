"""Host code after the kernel: plain torch on its outputs (and inputs), run after the launch.

Helion's kernels end in host code (`return losses.mean()`, `torch.sum(loss) / BT`, jsd's
`final_loss = torch.sum(loss)`; `return final_loss, dX`). While a kernel is traced, every torch
call of host code after the grid loop (one that is not a metadata read, nor a view of an argument
or output, which host_views.py records as a chain) is recorded here as one `Node`: the function
and its arguments with each tensor replaced by a reference (`Out`: a buffer the kernel wrote,
`In`: an argument, `Res`: an earlier node's result), a float argument by its expression
(`Scalar`) and the `meta` device by the call's device (`DEVICE`). The call runs on the meta
tensors at once, so shapes, dtypes and errors come out at the user's line; the `Epilogue` replays
the same calls on the real tensors after every launch (host_views.HostViews.epilogue), so the
result is what eager torch gives for that code, through every run path and the custom op. The
op's fake runs the host code itself (kernel_object.shapes_only), epilogue included.

What host code after the kernel cannot do: read values into Python (`.item()`, `if t > 0:`,
`float(t)`): the trace has no data. In-place ops may change the kernel's outputs and the
epilogue's own tensors, never an argument; a result may not be (a view of) an argument.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .errors import KernelSyntaxError, SourceLoc
from .host_views import Step, ViewTracker, _target, apply, conversion_name, unaliased
from .ir import TensorParam
from .runtime_scalars import _BINARY, _UNARY, RuntimeScalar
from .tracing import Tracer, user_loc

# calls that read tensor values into Python: the trace has no data
_READS = {"item": "`.item()`", "tolist": "`.tolist()`", "numpy": "`.numpy()`",
          "__bool__": "`if`/`and`/`or`/`bool()` on a tensor", "__int__": "`int()` of a tensor",
          "__float__": "`float()` of a tensor", "__index__": "a tensor as a Python index",
          "__complex__": "`complex()` of a tensor", "backward": "`.backward()`",
          "data_ptr": "`.data_ptr()`", "__array__": "a tensor as a NumPy array"}


@dataclass(frozen=True)
class Out:
    """The k-th buffer the kernel returns, as the allocation's shape, then the chain of host
    views it was named through (host_views.py)."""
    k: int
    shape: tuple[int, ...] | None
    chain: tuple[Step, ...]


@dataclass(frozen=True)
class In:
    """The argument input at `pos` (runtime_scalars.kernel_inputs order), through `chain`."""
    pos: int
    chain: tuple[Step, ...]


@dataclass(frozen=True)
class Res:
    """Tensor `leaf` (in pytree order) of node `node`'s result."""
    node: int
    leaf: int


@dataclass(frozen=True)
class Scalar:
    """A float argument or a Python expression of them: ("arg", pos) | (op kind, *operands)."""
    expr: tuple[Any, ...]


class _Device:
    def __repr__(self) -> str:
        return "DEVICE"


DEVICE = _Device()  # the device the call runs on (the trace's `meta`)


@dataclass(frozen=True)
class _OutP:  # while tracing: the output param (its return index is known at `finish`)
    param: TensorParam
    chain: tuple[Step, ...]


@dataclass(frozen=True)
class _InP:
    param: TensorParam
    chain: tuple[Step, ...]


@dataclass(frozen=True)
class Node:
    func: Callable[..., Any]
    args: Any  # pytree of constants and refs
    kwargs: Any
    loc: SourceLoc | None


@dataclass(frozen=True)
class Epilogue:
    """The host code after the kernel: `nodes` in program order, then what the kernel returns."""
    nodes: tuple[Node, ...]
    returns: tuple[Any, ...]  # Out | Res

    def run(self, outs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        device = (outs or inputs)[0].device
        vals: list[list[Any]] = []

        def scalar(e: tuple[Any, ...]) -> Any:
            if e[0] == "arg":
                return inputs[e[1]].item()  # the hidden [1, 1] f32 input
            ops = [scalar(o) if isinstance(o, tuple) else o for o in e[1:]]
            return _BINARY[e[0]](*ops) if len(ops) == 2 else _UNARY[e[0]](ops[0])

        def get(r: Any) -> Any:
            if isinstance(r, Res):
                return vals[r.node][r.leaf]
            if isinstance(r, Out):
                t = outs[r.k]
                return apply(t if r.shape is None else t.view(r.shape), r.chain)
            if isinstance(r, In):
                return apply(inputs[r.pos], r.chain)
            if r is DEVICE:
                return device
            if isinstance(r, Scalar):
                return scalar(r.expr)
            return r

        for node in self.nodes:
            args, kwargs = tree_map(get, (node.args, node.kwargs))
            vals.append(tree_flatten(node.func(*args, **kwargs))[0])
        return unaliased([get(r) for r in self.returns])


def _error(what: str, loc: SourceLoc | None, hint: str) -> KernelSyntaxError:
    return KernelSyntaxError(what, loc, hint)


class Recorder:
    """The tracer's record of host code after the grid loop (tracer.epilogue)."""

    def __init__(self, tracer: Tracer, views: ViewTracker):
        self.tracer, self.views = tracer, views
        self.nodes: list[Node] = []
        self.ref_of: dict[int, Res] = {}  # id(meta result) -> its reference
        self.metas: list[torch.Tensor] = []  # keeps the ids above alive

    def is_result(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and id(t) in self.ref_of

    # -- recording --------------------------------------------------------------------------------
    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        loc = user_loc()
        name = getattr(func, "__name__", "") or str(func)
        if name in _READS:
            raise _error(f"{_READS[name]} reads tensor values in host code after the kernel", loc,
                         "host code is traced once without data: keep the result a tensor "
                         "(`torch.where(t > 0, a, b)`, `t.sum()`), or read it after the call")
        refs: list[Any] = []

        def stand_in(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                ref, meta = self._ref(a, loc, name)
                refs.append(ref)
                return meta
            if isinstance(a, RuntimeScalar):  # shapes and dtypes do not depend on its value
                return True if a.is_bool else 1.0
            return a

        def template(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                return refs.pop(0)
            if isinstance(a, RuntimeScalar):
                return Scalar(_expr(a))
            if isinstance(a, torch.device) and a.type == "meta":
                return DEVICE
            return a

        meta_args, meta_kwargs = tree_map(stand_in, (args, kwargs))
        targs, tkwargs = tree_map(template, (args, kwargs))  # the same leaf order: refs in turn
        writes = self._check_in_place(name, args, kwargs, loc)
        conv = conversion_name(func)
        if conv is not None and meta_args and isinstance(meta_args[0], torch.Tensor):
            _target(meta_args[0], conv, meta_args, meta_kwargs, loc)  # refuses a device move
        try:
            out = func(*meta_args, **meta_kwargs)
        except Exception as e:  # the user's torch call fails on these shapes and dtypes
            raise _error(f"`{name}` in host code after the kernel: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}", loc,
                         "host code after the kernel is plain torch on the kernel's outputs; "
                         "this call fails in torch for these shapes and dtypes") from None
        leaves = tree_flatten(out)[0]
        if not writes and not any(isinstance(x, torch.Tensor) for x in leaves):
            return out  # a metadata read (`torch.is_floating_point(t)`)
        j = len(self.nodes)
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor) and not self._known(x):
                self.ref_of[id(x)] = Res(j, i)
                self.metas.append(x)
        self.nodes.append(Node(func, targs, tkwargs, loc))
        return out

    def _known(self, t: torch.Tensor) -> bool:
        return id(t) in self.ref_of or self.views.tracked(t)

    def _ref(self, t: torch.Tensor, loc: SourceLoc | None, name: str) -> tuple[Any, torch.Tensor]:
        if id(t) in self.ref_of:
            return self.ref_of[id(t)], t
        if self.views.tracked(t):
            root, chain = self.views.root(t)
            meta = t if t.device.type == "meta" else torch.empty(
                tuple(t.shape), dtype=t.dtype, device="meta")  # a tensor a callable captured
            return (_OutP(root, chain) if root.is_output else _InP(root, chain)), meta
        raise _error(f"`{name}` in host code after the kernel takes a tensor that is not a kernel "
                     "argument, an output or computed from them", loc,
                     "pass the tensor to the kernel as an argument")

    def _check_in_place(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        loc: SourceLoc | None) -> bool:
        """Whether the call writes into a tensor (refused for an argument)."""
        in_place = (name == "__setitem__" or (name.startswith("__i") and name.endswith("__"))
                    or (name.endswith("_") and not name.endswith("__")))
        out = kwargs.get("out")
        target = out if isinstance(out, torch.Tensor) else (
            args[0] if in_place and args and isinstance(args[0], torch.Tensor) else None)
        if target is None:
            return False
        if self.views.tracked(target) and id(target) not in self.ref_of:
            writes_input = not self.views.root(target)[0].is_output
        else:
            writes_input = id(target) in self.ref_of and self._aliases_input(target)
        if writes_input:
            raise _error(f"`{name}` writes into a kernel argument (or a view or conversion of one) "
                         "in host code after the kernel", loc,
                         "a kernel does not change its arguments: compute a new tensor "
                         "(`y = x + 1` rather than `x.add_(1)`)")
        return True

    def _aliases_input(self, t: torch.Tensor) -> bool:
        key = t.untyped_storage()._cdata
        for m in self.tracer._keep:
            if isinstance(m, torch.Tensor) and m.device.type == "meta":
                p = self.tracer.param(m)
                root = p if p is not None else (self.views.root(m)[0] if self.views.tracked(m)
                                                 else None)
                if root is not None and not root.is_output and \
                        m.untyped_storage()._cdata == key:
                    return True
        return False

    # -- the result -------------------------------------------------------------------------------
    def finish(self, outs: tuple[Any, ...], loc: SourceLoc | None
               ) -> tuple[list[TensorParam], Epilogue]:
        """The params the kernel returns (those the host code after it reads, the returned
        ones first) and the epilogue that makes the returned tensors from them."""
        rets: list[Any] = []
        for o in outs:
            ref = None
            if isinstance(o, torch.Tensor):
                ref = self.ref_of.get(id(o))
                if ref is None and self.views.tracked(o):
                    root, chain = self.views.root(o)
                    ref = _OutP(root, chain) if root.is_output else None
            if ref is None and self.views.tracked(o):
                raise _error(f"the kernel returns argument `{self.views.root(o)[0].name}` (or a "
                             "host view of it)", loc, "return a copy (`.clone()`): a kernel's "
                             "results are fresh tensors")
            if ref is None:
                raise _error("a kernel must return the tensors its host code allocated or "
                             "computed from them after the kernel", loc,
                             "allocate outputs with `out = torch.empty(...)` and `return out` "
                             "(or torch of it: `return out.sum()`)")
            if isinstance(ref, Res) and self._aliases_input(o):
                raise _error("the kernel returns a view of one of its arguments",
                             self.nodes[ref.node].loc, "return a copy (`.clone()`): a kernel's "
                             "results are fresh tensors")
            rets.append(ref)
        params: list[TensorParam] = []

        def note(r: Any) -> Any:
            if isinstance(r, _OutP):
                if all(p is not r.param for p in params):
                    params.append(r.param)
            return r

        tree_map(note, rets)
        for n in self.nodes:
            tree_map(note, (n.args, n.kwargs))
        for p in params:
            if id(p) not in self.tracer.stored and p.init is None:
                raise _error(f"output `{p.name}` is used after the kernel but never written", loc,
                             f"store into it inside the grid loop: `{p.name}[tile] = ...`")
        index = {id(p): k for k, p in enumerate(params)}
        views = {id(v) for v, _, _ in self.views.input_views}
        inputs = [p for p in self.tracer.params if not p.is_output and id(p) not in views]
        pos = {id(p): i for i, p in enumerate(inputs)}

        def final(r: Any) -> Any:
            if isinstance(r, _OutP):
                return Out(index[id(r.param)], self.views.alloc_shape.get(id(r.param)), r.chain)
            if isinstance(r, _InP):
                return In(pos[id(r.param)], r.chain)
            if isinstance(r, Scalar):
                return Scalar(_positions(r.expr, pos))
            return r

        nodes = tuple(Node(n.func, *tree_map(final, (n.args, n.kwargs)), n.loc) for n in self.nodes)
        return params, Epilogue(nodes, tuple(final(r) for r in rets))


def _expr(s: RuntimeScalar) -> tuple[Any, ...]:
    if s.op == "arg":
        return ("arg", s.param)
    return (s.op, *(_expr(o) if isinstance(o, RuntimeScalar) else o for o in s.operands))


def _positions(e: tuple[Any, ...], pos: dict[int, int]) -> tuple[Any, ...]:
    if e[0] == "arg":
        return ("arg", pos[id(e[1])])
    return (e[0], *(_positions(o, pos) if isinstance(o, tuple) else o for o in e[1:]))
