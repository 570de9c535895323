"""Kernel parameters that are not tensors: their kinds, schema types and cache keys.

- `float`: a runtime scalar (runtime_scalars.py): its key is its type, so a new value reuses
  the build; `kd.specialize(x)` in the kernel puts the value in the key instead.
- `int`, `bool`: compile-time constants (they are usually sizes and flags): keyed by value.
- `list[int]` / `tuple[int, ...]`: compile-time constants too, keyed by their values.
"""
from __future__ import annotations

import inspect
import re
import typing
from typing import Any

import torch

SCALARS = (int, float, bool)
INT_LIST = "int[]"
FLOAT_KEY = (float,)  # the whole key of a runtime float: its type
_NAMED = {"int": int, "float": float, "bool": bool}
_LIST_TEXT = re.compile(r"^(typing\.)?(list|List|tuple|Tuple|Sequence)(\[\s*int\s*(,\s*\.\.\.\s*)?\])?$")


def _is_int_list_type(ann: Any) -> bool:
    if ann in (list, tuple):
        return True
    origin = typing.get_origin(ann)
    if origin not in (list, tuple):
        return False
    return all(a is int or a is Ellipsis for a in typing.get_args(ann))


def arg_kind(p: inspect.Parameter) -> str:
    """"Tensor", "int", "float", "bool" or "int[]", from the annotation or the default."""
    ann = p.annotation
    if isinstance(ann, str):  # `from __future__ import annotations`
        if _LIST_TEXT.match(ann.strip()):
            return INT_LIST
        ann = _NAMED.get(ann, ann)
    if ann in SCALARS:
        return ann.__name__
    if _is_int_list_type(ann):
        return INT_LIST
    if ann is inspect.Parameter.empty:
        if isinstance(p.default, SCALARS):
            return type(p.default).__name__
        if isinstance(p.default, (list, tuple)) and is_int_list(p.default):
            return INT_LIST
    return "Tensor"


def is_int_list(a: Any) -> bool:
    return isinstance(a, (list, tuple)) and all(
        isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool) for x in a)


def key_part(a: Any) -> Any:
    """A hashable key for a non-tensor argument value (a list is keyed by its items)."""
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(key_part(x) for x in a))
    try:
        hash(a)
    except TypeError:  # a dict or another unhashable value: `_validate` names it next
        return (type(a), id(a))
    return (type(a), a)


def check(kind: str, a: Any) -> str | None:
    """What is wrong with `a` for a parameter of `kind` (not "Tensor"), or None."""
    if kind == INT_LIST:
        return None if is_int_list(a) else "a list or tuple of ints"
    if isinstance(a, SCALARS):
        return None
    return kind


def tensor_hint(a: Any) -> str:
    """The hint for a non-tensor value passed to a tensor parameter."""
    if is_int_list(a):
        return ("annotate the parameter `list[int]` (or `tuple[int, ...]`) to pass a list of ints; "
                "it is a compile-time constant")
    if isinstance(a, SCALARS):
        return f"annotate the parameter `{type(a).__name__}` to pass a Python {type(a).__name__}"
    return ""
