"""The interpreter's per-launch state: the target NeuronCore generation, the program id of an
LNC launch, and the live SBUF/PSUM allocations (the budget check of notes/nki.md §7).

Liveness follows Python's references: a tile is live while the kernel can still name it. That is
what an unrolled NKI program means (a name rebound in the next iteration frees the old tile), and
it over-approximates the compiler's own allocator, which frees at last use.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from ..targets import PMAX, PSUM_BANK_BYTES, PSUM_BANKS, TARGETS, Target
from .errors import NkiError

__all__ = ["PMAX", "PSUM_BANK_BYTES", "PSUM_BANKS", "TARGETS", "Target", "Context", "current",
           "active", "launch_context", "target_from_env", "ENV_TARGET"]
_ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
            "trn3": "trn3", "gen4": "trn3"}
ENV_TARGET = "NEURON_PLATFORM_TARGET_OVERRIDE"  # the variable AWS's simulator reads too


def target_from_env() -> Target:
    """The target named by NEURON_PLATFORM_TARGET_OVERRIDE; trn3 when unset (as AWS's)."""
    raw = os.environ.get(ENV_TARGET, "trn3").strip().lower()
    if raw not in _ALIASES:
        raise NkiError("launch", f"{ENV_TARGET}={raw!r} names no NeuronCore", "target",
                       "use trn1|gen2, trn2|gen3 or trn3|gen4")
    return TARGETS[_ALIASES[raw]]


@dataclass
class _Live:
    name: str
    shape: tuple[int, ...]
    amount: int  # bytes per partition (SBUF) or banks (PSUM)


@dataclass
class Context:
    """State of one program instance of a launch."""

    target: Target
    program_id: int = 0
    num_programs: int = 1
    shared: list[Any] = field(default_factory=list)  # shared_hbm outputs, in allocation order
    shared_next: int = 0
    sbuf: dict[int, _Live] = field(default_factory=dict)
    psum: dict[int, _Live] = field(default_factory=dict)

    def live_sbuf(self) -> int:
        return sum(x.amount for x in self.sbuf.values())

    def live_psum_banks(self) -> int:
        return sum(x.amount for x in self.psum.values())

    def allocate(self, key: int, buffer: str, name: str, shape: tuple[int, ...],
                 bytes_per_partition: int) -> None:
        """Accounts a new on-chip tensor (PSUM tensors take whole 2 KiB banks)."""
        if buffer == "sbuf":
            live = self.live_sbuf()
            limit = self.target.sbuf_bytes
            if live + bytes_per_partition > limit:
                top = sorted(self.sbuf.values(), key=lambda x: -x.amount)[:4]
                held = ", ".join(f"{x.name or '?'}{list(x.shape)} {x.amount} B" for x in top)
                raise NkiError("nl.ndarray", f"SBUF budget exceeded: {name or 'a tensor'}"
                               f"{list(shape)} needs {bytes_per_partition} B per partition on top of "
                               f"{live} B live; {self.target.name} has {limit} B per partition "
                               f"(largest live: {held})", "SBUF budget",
                               "use smaller tiles (block sizes) or fewer live tiles")
            self.sbuf[key] = _Live(name, shape, bytes_per_partition)
            return
        banks = -(-bytes_per_partition // PSUM_BANK_BYTES)
        used = self.live_psum_banks()
        if used + banks > PSUM_BANKS:
            raise NkiError("nl.ndarray", f"PSUM budget exceeded: {name or 'a tensor'}{list(shape)} "
                           f"needs {banks} bank(s) of 2 KiB per partition with {used} of "
                           f"{PSUM_BANKS} banks live", "PSUM budget",
                           "evict PSUM results with nisa.tensor_copy and drop them sooner, "
                           "or use smaller matmul tiles")
        self.psum[key] = _Live(name, shape, banks)

    def free(self, key: int) -> None:
        self.sbuf.pop(key, None)
        self.psum.pop(key, None)


_local = threading.local()


def current() -> Context:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise NkiError("nki", "NKI calls must run inside a kernel launch", "program model",
                       "call the kernel through nki.simulate(kernel)(...) or kernel(...)")
    return ctx


def active() -> Context | None:
    return getattr(_local, "ctx", None)


class launch_context:
    """`with launch_context(ctx):` makes `ctx` the current program instance."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.saved: Context | None = None

    def __enter__(self) -> Context:
        self.saved = getattr(_local, "ctx", None)
        _local.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        _local.ctx = self.saved
