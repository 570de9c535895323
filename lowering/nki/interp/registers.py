"""Engine-sequencer registers and the loops they drive (SDK: `nisa.VirtualRegister`,
`register_alloc/move/load/store`, `nl.dynamic_range`, `nl.fori_loop`, `nl.while_loop`).

On hardware a register's value exists only at run time and a dynamic loop's body is traced once.
This interpreter runs eagerly, so a register simply holds its current 32-bit value and the loops
run their bodies once per iteration with that value. The results are the same for bodies that
carry state through SBUF/HBM, as the SDK requires; Python-level side effects in a body run once
per iteration here but once at trace time on hardware (docs/nki.md).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .errors import NkiError
from .language import NKIObject
from .tensor import NkiTensor


class VirtualRegister(NKIObject):
    """A 32-bit register; `None` until written. Usable as an int (loop bounds, offsets) and as a
    `while reg:` condition (non-zero)."""

    def __init__(self, state: Any = None, frozen: bool = False):
        self.value = None if state is None else _int32(state)

    def get(self, where: str) -> int:
        if self.value is None:
            raise NkiError(where, "reads a register that was never written", "registers",
                           "initialize it: nisa.register_alloc(0) or nisa.register_load")
        return self.value

    def __int__(self) -> int:
        return self.get("register")

    __index__ = __int__

    def __bool__(self) -> bool:
        return self.get("while <register>") != 0

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value})"


def _int32(x: Any) -> int:
    return int(np.int64(int(x)).astype(np.int32))


def _value(x: Any, where: str) -> int:
    if isinstance(x, VirtualRegister):
        return x.get(where)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    raise NkiError(where, f"{x!r} is neither an int nor a register", "registers")


def _scalar_tensor(t: Any, where: str) -> NkiTensor:
    if not isinstance(t, NkiTensor) or t.size != 1 or t.buffer == "psum":
        raise NkiError(where, f"needs a one-element HBM or SBUF tensor, got {t!r}", "registers")
    return t


def register_alloc(x: Any = None) -> VirtualRegister:
    return VirtualRegister(None if x is None else _value(x, "nisa.register_alloc"))


def register_move(dst: VirtualRegister, src: Any) -> None:
    dst.value = _int32(_value(src, "nisa.register_move"))


def register_load(dst: VirtualRegister, src: NkiTensor) -> None:
    """Reads the tensor's single (up to 32-bit) value; floats truncate toward zero."""
    t = _scalar_tensor(src, "nisa.register_load")
    v = t.raw().reshape(-1)[0]
    dst.value = _int32(np.trunc(float(v)) if t.dtype.is_float else int(v))


def register_store(dst: NkiTensor, src: VirtualRegister) -> None:
    t = _scalar_tensor(dst, "nisa.register_store")
    t.write(np.full(t.shape, src.get("nisa.register_store"), dtype=np.int64))


def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> range:
    """A runtime loop (deprecated in NKI 0.6): bounds may be registers, read when the loop
    starts; the step is a compile-time positive int."""
    w = "nl.dynamic_range"
    if not isinstance(step, (int, np.integer)) or step < 1:
        raise NkiError(w, f"step {step!r} must be a compile-time positive int", "registers")
    if stop is None:
        return range(_value(start, w))
    return range(_value(start, w), _value(stop, w), int(step))


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[VirtualRegister], Any],
              step: int = 1) -> None:
    """`for i in range(lower, upper, step): body_fun(i)`, `i` a fresh register per iteration
    (passed by value: writing it does not change the loop)."""
    for i in dynamic_range(lower, upper, step):
        body_fun(VirtualRegister(i))


def while_loop(init: VirtualRegister, body_fun: Callable[[VirtualRegister], Any]) -> None:
    """`r = init; while r != 0: r = body_fun(r)` (checked before each iteration)."""
    w = "nl.while_loop"
    if not isinstance(init, VirtualRegister):
        raise NkiError(w, f"init must be a register, got {init!r}", "registers")
    r = VirtualRegister(init.get(w))
    while r.get(w) != 0:
        nxt = body_fun(r)
        if not isinstance(nxt, VirtualRegister):
            raise NkiError(w, "the body must return the next condition register", "registers")
        r = VirtualRegister(nxt.get(w))
