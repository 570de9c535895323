"""Globals and closure variables a kernel reads, so that its cached traces follow them.

Like torch.compile (Dynamo guards on the globals it reads and recompiles when they change), a
kernel is re-traced when a scalar it reads from its module's globals or its closure changes:
`SCALE = 2.0` used in the body, a global int used as a size or loop bound. The reads are found
once, from the code: names the kernel's code objects (nested ones too) load, and those of plain
functions it calls through a global or closure name. Only scalars (int, float, bool, str, None
and tuples of them) are watched; modules, functions, classes and tensors are not.
"""
from __future__ import annotations

import types
from typing import Any

from .tracing import is_machinery

_SCALAR_TYPES = (int, float, bool, str, type(None))
OTHER = object()  # what a read that is not a scalar contributes to the key: not compared


def _scalar(v: Any) -> bool:
    t = type(v)
    return t in _SCALAR_TYPES or (t is tuple and all(_scalar(e) for e in v))


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):  # nested functions, lambdas, comprehensions
            names |= _names(c)
    return names


Read = tuple[Any, Any]  # (globals dict, name) or (closure cell, None)


def reads(fn: Any) -> tuple[Read, ...]:
    """The scalar globals and closure cells `fn` reads, directly or through helpers it calls."""
    out: list[Read] = []
    seen: set[int] = set()

    def visit(f: types.FunctionType) -> None:
        if id(f.__code__) in seen or is_machinery(f.__code__.co_filename):
            return
        seen.add(id(f.__code__))
        g = f.__globals__
        for name in sorted(_names(f.__code__)):
            if name in g:
                v = g[name]
                if isinstance(v, types.FunctionType):
                    visit(v)
                elif _scalar(v):
                    out.append((g, name))
        for cell in f.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:  # not bound yet
                continue
            if isinstance(v, types.FunctionType):
                visit(v)
            elif _scalar(v):
                out.append((cell, None))

    if isinstance(fn, types.FunctionType):
        visit(fn)
    return tuple(out)


def values(rs: tuple[Read, ...]) -> tuple[Any, ...]:
    """The current values of `rs` (OTHER where one no longer holds a scalar): part of the key of
    a kernel's traces and builds. Kept cheap: it runs on every call."""
    out = []
    for ns, name in rs:
        try:
            v = ns.get(name, OTHER) if name is not None else ns.cell_contents
        except ValueError:
            v = OTHER
        out.append((type(v), v) if _scalar(v) else OTHER)  # the type: 1, 1.0 and True differ
    return tuple(out)
