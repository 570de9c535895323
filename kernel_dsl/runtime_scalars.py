"""Runtime scalars: a `float` kernel argument is data, not part of the build.

A new value of a float argument must not trace or compile the kernel again. So while a kernel
is traced, a float argument is a `RuntimeScalar`: a proxy for a hidden f32 input of shape
[1, 1] that the IR sees as an ordinary input `TensorParam` (named as the argument), loaded once,
at the top of the grid body, when device code first uses it. Backends need no new op, and every
run path passes the value as one more input tensor (`kernel_inputs`). Kernels whose class sets
`runtime_scalars = False` (the library's) keep floats as constants.

The proxy acts as a Python float would:
- with tiles it promotes weakly, as device_ops does for a Python float: `x_bf16 * scale` stays
  bf16 (the scalar is cast to the tile's dtype, as `const` rounds a Python float);
- Python arithmetic with numbers or other runtime scalars (`1.0 / temperature`, `-scale`) is
  deferred: a small expression that device code computes where it is used, in f32;
- anything that needs its Python value at trace time (`if eps > 0:`, `float(scale)`,
  `math.sqrt(scale)`) raises a `ControlFlowError` at the user's line that says to write
  `kd.specialize(x)`, which makes it a compile-time constant (the kernel builds per value).
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import dtypes
from .device_ops import TileValue, cast_v
from .errors import ControlFlowError, KernelSyntaxError
from .ir import Index, TensorParam, Value
from .tracing import current, user_loc

HIDDEN_SHAPE = (1, 1)  # a [1, 1] f32 block: loads as a scalar on every backend and TPU target
_INDEX = (Index("int", value=0), Index("int", value=0))
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
    "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "shl": operator.lshift, "shr": operator.rshift,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}
_UNARY: dict[str, Callable[[Any], Any]] = {"neg": operator.neg, "abs": operator.abs,
                                            "not": operator.invert}
_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
_NUMBERS = (int, float, bool)


RUNTIME_TYPES = (float, torch.SymFloat)  # a SymFloat: a float torch.compile left symbolic


def is_runtime(a: Any) -> bool:
    """True for an argument value passed as a runtime scalar (a Python float)."""
    return type(a) in RUNTIME_TYPES


def hidden_tensor(value: Any, device: Any = None) -> torch.Tensor:
    """The hidden input that carries a runtime scalar's value into the kernel."""
    return torch.full(HIDDEN_SHAPE, value, dtype=torch.float32, device=device)


def kernel_inputs(args: tuple[Any, ...] | list[Any], device: Any = None,
                  scalars: bool = True) -> list[torch.Tensor]:
    """What a compiled kernel takes for `args`, in its IR's input order: the tensor arguments
    (made contiguous) and a hidden [1, 1] f32 tensor per runtime-scalar argument (`scalars`:
    the kernel's `runtime_scalars`)."""
    out: list[torch.Tensor] = []
    for a in args:  # the eager hot path: a call without floats pays one type check per scalar
        if isinstance(a, torch.Tensor):
            out.append(a if a.is_contiguous() else a.contiguous())
        elif scalars and type(a) in RUNTIME_TYPES:
            if device is None:  # the tensors' device (`.device` costs ~0.5 us: only here)
                device = next((t.device for t in args if isinstance(t, torch.Tensor)), None)
            out.append(hidden_tensor(a, device))
    return out


class ScalarArgs:
    """The runtime scalars of one trace, and which arguments `kd.specialize` made constants."""

    def __init__(self) -> None:
        self.specialized: set[int] = set()
        self.hoisted = 0  # ops at the top of the grid body that compute runtime scalars


class RuntimeScalar(TileValue):
    """A float argument, or a Python expression of float arguments, during tracing."""

    __slots__ = ("op", "operands", "param", "arg", "value", "ctx", "_made")

    def __init__(self, op: str, operands: tuple[Any, ...], ctx: ScalarArgs, *,
                 param: TensorParam | None = None, arg: int | None = None,
                 value: float | None = None, name: str = ""):
        # TileValue's `v` is a property here (made on use), so its __init__ is not called
        self.op = op  # "arg" for the argument itself, else an IR op kind
        self.operands = operands if op != "arg" else (name,)
        self.param, self.arg, self.value, self.ctx = param, arg, value, ctx
        self._made: TileValue | None = None

    # -- what it is --------------------------------------------------------------------------
    @property
    def is_bool(self) -> bool:
        return self.op in _COMPARE or (self.op in ("and", "or", "xor", "not") and all(
            isinstance(o, bool) or (isinstance(o, RuntimeScalar) and o.is_bool)
            for o in self.operands))

    @property
    def weak_proto(self) -> bool | float:
        """The Python scalar it promotes as (device_ops `_common`: weakly, as torch does)."""
        return True if self.is_bool else 1.0

    @property
    def shape(self) -> tuple[()]:
        return ()

    @property
    def dtype(self) -> torch.dtype:
        return torch.bool if self.is_bool else torch.float32

    @property
    def ndim(self) -> int:
        return 0

    def dim(self) -> int:
        return 0

    def names(self) -> list[str]:
        if self.op == "arg":
            return [self.operands[0]]
        return list(dict.fromkeys(n for o in self.operands if isinstance(o, RuntimeScalar)
                                  for n in o.names()))

    def describe(self) -> str:
        names = ", ".join(f"`{n}`" for n in self.names())
        return f"runtime scalar {names}" if self.op == "arg" else f"an expression of {names}"

    def __repr__(self) -> str:
        return f"<kd runtime scalar {' '.join(self.names())}>"

    # -- device code ----------------------------------------------------------------------------
    @property  # type: ignore[override]
    def v(self) -> Value:
        return self.materialize().v

    def materialize(self) -> TileValue:
        """The value as a plain f32 (or bool) tile of shape [], made at the top of the grid
        body: it reads nothing but its hidden input, so it is visible in every loop there (and
        `acc = scale` before a loop carries as a tile)."""
        tr = current()
        region = tr.region if tr is not None else None
        if region is None:
            raise KernelSyntaxError(
                f"{self.describe()} is used as a tile value in host code", user_loc(),
                "a float argument is a runtime value: use it inside the `kd.tile` loop, or make "
                f"it a compile-time constant with `{self.names()[0]} = kd.specialize("
                f"{self.names()[0]})`")
        if self._made is not None:
            return self._made
        # operands first: each moves its own ops to the top
        ops = [o.materialize() if isinstance(o, RuntimeScalar) else o for o in self.operands]
        tr.region, body = tr.body, tr.body
        start = len(body.ops)
        try:
            if self.op == "arg":
                assert self.param is not None
                t = TileValue(tr.emit("load", [], {"tensor": self.param, "index": _INDEX}, (),
                                      "f32"))
            else:
                t = _BINARY[self.op](*ops) if len(ops) == 2 else _UNARY[self.op](ops[0])
        finally:
            tr.region = region
        made, body.ops[start:] = body.ops[start:], []
        body.ops[self.ctx.hoisted:self.ctx.hoisted] = made
        self.ctx.hoisted += len(made)
        self._made = t
        return t

    def weak_for(self, dtype: str | None) -> TileValue:
        """Cast to the dtype torch gives a Python scalar of this kind next to `dtype` tiles."""
        t = self.materialize()
        if dtype is None:
            return t
        return cast_v(t, dtypes.promote_scalar(dtype, self.weak_proto))

    # -- Python's view: arithmetic is deferred, Python values are refused -----------------------
    def _host_value(self, what: str) -> Any:
        name = self.names()[0]
        raise ControlFlowError(
            f"{what} needs the Python value of {self.describe()}, a float argument that the "
            "kernel receives at run time (a new value does not rebuild the kernel)", user_loc(),
            f"make it a compile-time constant with `{name} = kd.specialize({name})` (the kernel "
            "then builds once per value), or compute with it on tiles (`torch.where(...)`, "
            f"`kd.full([tm], 1.0) * {name}`)")

    def __bool__(self) -> bool:
        return self._host_value("`if`/`while`/`and`/`or`")

    def __float__(self) -> float:
        return self._host_value("float() (or a math function)")

    def __int__(self) -> int:
        return self._host_value("int()")

    def __index__(self) -> int:
        return self._host_value("using it as an index or size")

    def __round__(self, n: Any = None) -> Any:
        return self._host_value("round()")

    def __trunc__(self) -> Any:
        return self._host_value("math.trunc()")

    def __floor__(self) -> Any:
        return self._host_value("math.floor()")

    def __ceil__(self) -> Any:
        return self._host_value("math.ceil()")

    def __format__(self, spec: str) -> str:
        return self._host_value("formatting it") if spec else repr(self)

    def _kd_specialize(self) -> Any:
        """`kd.specialize(x)`: the Python value; the kernel then keys its builds on it."""
        return self._evaluate(record=True)

    def _evaluate(self, record: bool) -> Any:
        if self.op == "arg":
            if record:
                assert self.arg is not None
                self.ctx.specialized.add(self.arg)
            return self.value
        vals = [o._evaluate(record) if isinstance(o, RuntimeScalar) else o for o in self.operands]
        return _BINARY[self.op](*vals) if len(vals) == 2 else _UNARY[self.op](vals[0])

    __hash__ = TileValue.__hash__


def _combine(kind: str, a: Any, b: Any) -> Any:
    if (isinstance(a, TileValue) and not isinstance(a, RuntimeScalar)) or (
            isinstance(b, TileValue) and not isinstance(b, RuntimeScalar)):
        tile = a if not isinstance(a, RuntimeScalar) else b  # a plain tile: weak promotion to it
        dt = tile.v.dtype
        a2 = a.weak_for(dt) if isinstance(a, RuntimeScalar) else a
        b2 = b.weak_for(dt) if isinstance(b, RuntimeScalar) else b
        return _BINARY[kind](a2, b2)  # TileValue's own operator: its rules (dot folding) apply
    if not all(isinstance(x, (RuntimeScalar, *_NUMBERS)) for x in (a, b)):
        return NotImplemented
    ctx = a.ctx if isinstance(a, RuntimeScalar) else b.ctx
    return RuntimeScalar(kind, (a, b), ctx)


def _methods(kind: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    return (lambda self, o: _combine(kind, self, o)), (lambda self, o: _combine(kind, o, self))


for _kind, _names in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv"),
                      ("floordiv", "floordiv"), ("mod", "mod"), ("pow", "pow"), ("and", "and"),
                      ("or", "or"), ("xor", "xor"), ("shl", "lshift"), ("shr", "rshift")):
    _fwd, _rev = _methods(_kind)
    setattr(RuntimeScalar, f"__{_names}__", _fwd)
    setattr(RuntimeScalar, f"__r{_names}__", _rev)
# comparisons: the reflection of `a < b` is `b > a`
for _kind, _rev_kind in (("lt", "gt"), ("le", "ge"), ("gt", "lt"), ("ge", "le"), ("eq", "eq"),
                         ("ne", "ne")):
    setattr(RuntimeScalar, f"__{_kind}__",
            (lambda k: lambda self, o: _combine(k, self, o))(_kind))
for _kind, _name in (("neg", "neg"), ("abs", "abs"), ("not", "invert")):
    setattr(RuntimeScalar, f"__{_name}__",
            (lambda k: lambda self: RuntimeScalar(k, (self,), self.ctx))(_kind))
RuntimeScalar.__pos__ = lambda self: self  # type: ignore[method-assign]


def argument(name: str, value: float, param: TensorParam, arg: int, ctx: ScalarArgs) -> RuntimeScalar:
    return RuntimeScalar("arg", (), ctx, param=param, arg=arg, value=value, name=name)


def weak_args(func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A torch function's arguments with runtime scalars made tiles of the dtype torch would
    give a Python float there (the promoted dtype of the other tile operands)."""
    flat, _ = tree_flatten((args, kwargs))
    scalars = [a for a in flat if isinstance(a, RuntimeScalar)]
    tr = current()
    if tr is None or tr.region is None:
        name = getattr(func, "__name__", str(func))
        raise KernelSyntaxError(
            f"`torch.{name}` of {scalars[0].describe()} in host code", user_loc(),
            "a float argument is a runtime value: host code may do Python arithmetic on it "
            "(`1.0 / scale`), which device code computes; call torch functions on it inside "
            f"the `kd.tile` loop, or write `{scalars[0].names()[0]} = kd.specialize("
            f"{scalars[0].names()[0]})`")
    dt: str | None = None
    for a in flat:
        if isinstance(a, TileValue) and not isinstance(a, RuntimeScalar):
            dt = a.v.dtype if dt is None else dtypes.promote(dt, a.v.dtype)
    return tree_map(lambda a: a.weak_for(dt) if isinstance(a, RuntimeScalar) else a,
                    (args, kwargs))


def has_runtime(flat: list[Any]) -> bool:
    return any(isinstance(a, RuntimeScalar) for a in flat)
