"""Typed errors. Every error a user can cause names their file and line and says what to do."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's kernel source."""

    file: str
    line: int
    text: str = ""

    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class KernelError(Exception):
    """Base class of every error kernel_dsl raises about a user's kernel or call."""

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.loc is not None:
            parts.append(f"{self.loc}: ")
        parts.append(self.message)
        if self.loc is not None and self.loc.text:
            parts.append(f"\n    {self.loc.text.strip()}")
        if self.hint:
            parts.append(f"\n  hint: {self.hint}")
        return "".join(parts)


class KernelSyntaxError(KernelError):
    """Device code uses Python or torch outside the supported subset."""


class UnsupportedOpError(KernelSyntaxError):
    """A torch op that has no tile-IR equivalent."""


class ControlFlowError(KernelSyntaxError):
    """Python control flow (if/while/int()) on a value only known on the device."""


class ShapeError(KernelError):
    """Tile shapes that do not broadcast, or a store of the wrong shape."""


class DTypeError(KernelError):
    """Dtypes that device code cannot combine, or a dtype the backends do not support."""


class LoopScopeError(KernelError):
    """A value computed inside a loop used where the IR cannot see it."""


class ArgumentError(KernelError):
    """A call with the wrong number, rank, dtype or device of arguments."""


class ConfigError(KernelError):
    """A config that does not fit the kernel (wrong number of block sizes, bad knob)."""


class BackendError(KernelError):
    """A backend is unknown, not installed, or failed to build the generated source."""


class IRVerificationError(KernelError):
    """The tile IR broke one of its invariants (a bug in kernel_dsl, not in the user's code)."""


# what device code supports, for errors about anything else (docs/ir.md has the whole list)
SUPPORTED_HINT = ("device code supports arithmetic and comparisons, @ / torch.matmul / kd.dot, "
                  "exp, exp2, log, log1p, expm1, sqrt, rsqrt, tanh, sigmoid, abs, relu, floor, "
                  "ceil, round, sign, maximum, minimum, where, masked_fill, & | ^ ~ << >> // %, "
                  "amax/amin/sum/mean/prod(dim), max/min/argmax/argmin(dim), softmax, "
                  "log_softmax, logsumexp, cumsum/cumprod/kd.associative_scan(dim), rand_like, "
                  ".to(dtype), .T, [:, None], squeeze and kd.zeros/kd.full (docs/ir.md lists "
                  "them all)")
