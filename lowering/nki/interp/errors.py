"""What the interpreter raises and warns. Every message names the instruction, the broken rule
(the checklist of notes/nki.md §7) and the kernel line that issued it, so a failure in generated
NKI reads like a compiler diagnostic rather than a NumPy traceback."""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def kernel_line() -> str:
    """`file:line: code` of the innermost frame outside the interpreter (the kernel's line)."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
    if f is None:
        return ""
    import linecache

    code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno}" + (f": {code}" if code else "")


class NkiError(Exception):
    """A program the NKI compiler or the hardware would reject (or run with undefined results).

    `rule` names the checklist item, e.g. "memory placement" or "partition limit".
    """

    def __init__(self, where: str, message: str, rule: str, hint: str | None = None):
        self.where = where
        self.rule = rule
        self.hint = hint
        self.line = kernel_line()
        text = f"{where}: {message} [rule: {rule}]"
        if self.line:
            text += f"\n  at {self.line}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class NkiWarning(UserWarning):
    """Legal for the compiler, but slow or wrong on some hardware."""


class StartPartitionWarning(NkiWarning):
    """An on-chip access starts on a partition the engines cannot start at for its size."""


class ActivationRangeWarning(NkiWarning):
    """An activation function got inputs outside its valid range (garbage on hardware)."""


class TransposeExactnessWarning(NkiWarning):
    """A TensorE transpose of NaN/Inf on NeuronCore-v2, which is not bit-exact there."""
