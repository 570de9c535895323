"""Kernel parameters that are not tensors: their kinds, schema types and cache keys.

- `float`: a runtime scalar (runtime_scalars.py): its key is its type, so a new value reuses
  the build; `kd.specialize(x)` in the kernel puts the value in the key instead.
- `int`, `bool`: compile-time constants (they are usually sizes and flags): keyed by value.
- `list[int]` / `tuple[int, ...]`: compile-time constants too, keyed by their values.
- `Optional[torch.Tensor]` / `torch.Tensor | None` (or a default of None): a tensor or None; None
  is a compile-time constant, so `if bias is not None:` is decided while tracing. Schema `Tensor?`.
- `str` (a mode flag: `activation: str = "gelu"`): a constant keyed by value. Schema `str`.
- an `enum.Enum` member: a constant keyed by the member. The custom op takes its name (`str`).
- a callable (annotated `Callable[...]`, or given a function as default): a constant, called on
  tiles in device code and traced inline. A function is keyed by its code and its closure's
  values (`_callable_key`), so a lambda made anew for each call with the same code reuses the
  build; other callables by identity. Tensors its closure holds (`captured_tensors`: Helion's
  `lambda acc, tile: acc + bias[tile[1]]`) are hidden kernel inputs, keyed by shape and dtype and
  read from the closure at each call; they get no gradient (a call that would need one is
  refused). It is not in the custom op's schema: the op takes an `int` handle that `encode` gives the function
  (kept in a bounded table, `_CALLABLES`), and its body looks the function up. Under
  torch.compile the handle is made outside the graph (a graph break: `fullgraph=True` is refused,
  see torch_ops.py), as the table changes from Python.
Anything else (a dict, a set, an object) is refused at the call with an `ArgumentError`.
"""
from __future__ import annotations

import collections.abc
import enum
import inspect
import itertools
import re
import types
import typing
from typing import Any, Callable

import torch

from .bounded import Bounded

SCALARS = (int, float, bool)
INT_LIST = "int[]"
FLOAT_KEY = (float,)  # the whole key of a runtime float: its type
_NAMED = {"int": int, "float": float, "bool": bool}
OPTIONAL, STR, ENUM, CALLABLE = "Tensor?", "str", "enum", "callable"
ENCODED = (ENUM, CALLABLE)  # passed to the custom op in another form (`encode`, `decode`)
_OPTIONAL_TEXT = re.compile(r"^(typing\.)?Optional\[\s*(torch\.)?Tensor\s*\]$|"
                            r"^(torch\.)?Tensor\s*\|\s*None$|^None\s*\|\s*(torch\.)?Tensor$")
_CALLABLE_TEXT = re.compile(r"^(typing\.|collections\.abc\.)?Callable(\[.*\])?$")
_LIST_TEXT = re.compile(r"^(typing\.)?(list|List|tuple|Tuple|Sequence)(\[\s*int\s*(,\s*\.\.\.\s*)?\])?$")


def _is_int_list_type(ann: Any) -> bool:
    if ann in (list, tuple):
        return True
    origin = typing.get_origin(ann)
    if origin not in (list, tuple):
        return False
    return all(a is int or a is Ellipsis for a in typing.get_args(ann))


def _is_optional_tensor(ann: Any) -> bool:
    if typing.get_origin(ann) not in (typing.Union, types.UnionType):
        return False
    return set(typing.get_args(ann)) == {torch.Tensor, type(None)}


def _is_callable_type(ann: Any) -> bool:
    return ann in (Callable, collections.abc.Callable) or typing.get_origin(ann) is collections.abc.Callable


def _resolve(ann: Any, scope: dict[str, Any] | None) -> Any:
    """A string annotation's object when it names one in the function's globals (an enum class),
    else the string: names imported under TYPE_CHECKING only must not fail."""
    if isinstance(ann, str) and scope is not None and ann.strip().isidentifier():
        return scope.get(ann.strip(), ann)
    return ann


def arg_kind(p: inspect.Parameter, scope: dict[str, Any] | None = None) -> str:
    """"Tensor", "int", "float", "bool", "int[]", "Tensor?", "str", "enum" or "callable", from the
    annotation (names looked up in `scope`, the function's globals) or the default."""
    ann = _resolve(p.annotation, scope)
    if isinstance(ann, str):  # `from __future__ import annotations`
        text = ann.strip()
        if _LIST_TEXT.match(text):
            return INT_LIST
        if _OPTIONAL_TEXT.match(text):
            return OPTIONAL
        if _CALLABLE_TEXT.match(text):
            return CALLABLE
        if text == "str":
            return STR
        ann = _NAMED.get(ann, ann)
    if ann in SCALARS:
        return ann.__name__
    if _is_int_list_type(ann):
        return INT_LIST
    if _is_optional_tensor(ann):
        return OPTIONAL
    if ann is str:
        return STR
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return ENUM
    if _is_callable_type(ann):
        return CALLABLE
    if ann is inspect.Parameter.empty or isinstance(ann, str):  # a default tells the rest
        d = p.default
        if isinstance(d, SCALARS):
            return type(d).__name__
        if isinstance(d, (list, tuple)) and is_int_list(d):
            return INT_LIST
        if d is None:
            return OPTIONAL
        if isinstance(d, str):
            return STR
        if isinstance(d, enum.Enum):
            return ENUM
        if callable(d) and not isinstance(d, (type, torch.Tensor)):
            return CALLABLE
    return "Tensor"


def is_int_list(a: Any) -> bool:
    return isinstance(a, (list, tuple)) and all(
        isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool) for x in a)


def captured_tensors(fn: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors a function argument captures, as (variable name, tensor): those its closure
    holds (in the order of its free variables), then the module globals its code names. Device
    code may index them (Helion's epilogues: `lambda acc, tile: acc + bias[tile[1]]`): each is
    lifted to a hidden kernel input, read afresh at every call (kernel_object.py `_trace`,
    `_run`)."""
    if not isinstance(fn, types.FunctionType):
        return []
    out = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:  # an unbound free variable
            continue
        if isinstance(v, torch.Tensor):
            out.append((name, v))
    for name in fn.__code__.co_names:
        v = fn.__globals__.get(name)
        if isinstance(v, torch.Tensor):
            out.append((name, v))
    return out


def _callable_key(fn: Any) -> Any:
    """A function is keyed by its code and what its closure holds (a tensor by shape, dtype and
    device: its data is a hidden input; any other value by value), so a lambda made anew per
    call with the same code and constants reuses the build. A closure value that is not
    hashable keys the function by identity."""
    if not isinstance(fn, types.FunctionType):
        return (type(fn), fn)
    parts = []
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:
            parts.append(None)
            continue
        if isinstance(v, torch.Tensor):
            parts.append(("tensor", tuple(v.shape), v.dtype, v.device))
            continue
        try:
            hash(v)
        except TypeError:
            return (type(fn), fn)
        parts.append((type(v), v))
    for name in fn.__code__.co_names:  # global tensors: by shape, dtype and device too
        v = fn.__globals__.get(name)
        if isinstance(v, torch.Tensor):
            parts.append((name, tuple(v.shape), v.dtype, v.device))
    try:
        hash(fn.__defaults__)
    except TypeError:
        return (type(fn), fn)
    return (types.FunctionType, fn.__code__, id(fn.__globals__), fn.__defaults__, tuple(parts))


def key_part(a: Any) -> Any:
    """A hashable key for a non-tensor argument value (a list is keyed by its items)."""
    if isinstance(a, types.FunctionType):
        return _callable_key(a)
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(key_part(x) for x in a))
    try:
        hash(a)
    except TypeError:  # a dict or another unhashable value: `_validate` names it next
        return (type(a), id(a))
    return (type(a), a)


def check(kind: str, a: Any) -> str | None:
    """What is wrong with `a` for a parameter of `kind` (not "Tensor"), or None. A tensor given
    to a "Tensor?" parameter is checked as a tensor by the caller."""
    if kind == INT_LIST:
        return None if is_int_list(a) else "a list or tuple of ints"
    if kind == OPTIONAL:
        return None if a is None or isinstance(a, torch.Tensor) else "a torch.Tensor or None"
    if kind == STR:
        return None if isinstance(a, str) else "a str"
    if kind == ENUM:
        return None if isinstance(a, enum.Enum) else "an enum.Enum member"
    if kind == CALLABLE:
        return None if callable(a) and not isinstance(a, torch.Tensor) else "a callable"
    if isinstance(a, SCALARS):
        return None
    return kind


# -- the custom op's form of enum and callable arguments (torch_ops.py) ---------------------------
_CALLABLES: dict[int, Callable[..., Any]] = Bounded()  # handle -> function (held: ids stay unique)
_HANDLES: dict[int, int] = Bounded()  # id(function) -> handle
_next_handle = itertools.count(1)


def encode(kind: str, a: Any) -> Any:
    """What the custom op is given for an argument of `kind`: an enum member's name, a
    callable's handle; anything else as it is."""
    if kind == ENUM:
        return a.name
    if kind == CALLABLE:
        h = _HANDLES.get(id(a))
        if h is None or _CALLABLES.get(h) is not a:
            h = _HANDLES[id(a)] = next(_next_handle)
            _CALLABLES[h] = a
        return h
    return a


def decode(kind: str, cls: Any, a: Any) -> Any:
    """The inverse of `encode`, in the op's body and fake; `cls` is the parameter's enum class."""
    if kind == ENUM and isinstance(a, str):
        return cls[a]
    if kind == CALLABLE and isinstance(a, int):
        fn = _CALLABLES.get(a)
        if fn is None:
            from .errors import ArgumentError
            from .tracing import user_loc

            raise ArgumentError(f"no callable has handle {a} (or it was evicted: the table keeps "
                                f"the last {len(_CALLABLES)} functions)", user_loc(),
                                "call the kernel itself with the function rather than its op")
        return fn
    return a


def enum_class(p: inspect.Parameter, scope: dict[str, Any] | None = None) -> Any:
    """The enum class of an "enum" parameter: its annotation, else its default's type."""
    ann = _resolve(p.annotation, scope)
    return ann if isinstance(ann, type) and issubclass(ann, enum.Enum) else type(p.default)


def tensor_hint(a: Any) -> str:
    """The hint for a non-tensor value passed to a tensor parameter."""
    if is_int_list(a):
        return ("annotate the parameter `list[int]` (or `tuple[int, ...]`) to pass a list of ints; "
                "it is a compile-time constant")
    if isinstance(a, SCALARS):
        return f"annotate the parameter `{type(a).__name__}` to pass a Python {type(a).__name__}"
    if a is None:
        return "annotate the parameter `torch.Tensor | None` (or give it the default None) to pass None"
    if isinstance(a, str):
        return "annotate the parameter `str` to pass a string; it is a compile-time constant"
    if isinstance(a, enum.Enum):
        return f"annotate the parameter `{type(a).__name__}` to pass one of its members"
    if callable(a):
        return "annotate the parameter `Callable[..., torch.Tensor]` to pass a function"
    if isinstance(a, dict):
        return ("a dict argument is not supported: pass its entries as separate parameters "
                "(tensors, ints, floats, bools, str, None, enums, callables)")
    return ("kernel arguments are tensors, int, float, bool, list[int], str, None, enum members "
            "or callables; pass this one's parts as such")
