"""The interpreter's per-launch state: the target NeuronCore generation, the program id of an
LNC launch, and the SBUF/PSUM allocations for the budget check of notes/nki.md §7.

A tile is live from its allocation to the last instruction that touches it, as the NKI compiler's
allocator sees it (Python names that still refer to a dead tile do not count). Every operand
check advances a clock and stamps the tile; at the end of the program a sweep finds the peak of
live bytes per partition (SBUF) and of live 2 KiB banks (PSUM).
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from kernel_dsl.lowering.nki.targets import PMAX, PSUM_BANK_BYTES, PSUM_BANKS, TARGETS, Target

from .errors import NkiError

__all__ = ["PMAX", "PSUM_BANK_BYTES", "PSUM_BANKS", "TARGETS", "Target", "Allocation", "Context", "current",
           "active", "launch_context", "target_from_env", "ENV_TARGET"]
_ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
            "trn3": "trn3", "gen4": "trn3"}
ENV_TARGET = "NEURON_PLATFORM_TARGET_OVERRIDE"  # the variable AWS's simulator reads too
_HERE = os.path.dirname(os.path.abspath(__file__))


def target_from_env() -> Target:
    """The target named by NEURON_PLATFORM_TARGET_OVERRIDE; trn3 when unset (as AWS's)."""
    raw = os.environ.get(ENV_TARGET, "trn3").strip().lower()
    if raw not in _ALIASES:
        raise NkiError("launch", f"{ENV_TARGET}={raw!r} names no NeuronCore", "target",
                       "use trn1|gen2, trn2|gen3 or trn3|gen4")
    return TARGETS[_ALIASES[raw]]


@dataclass
class Allocation:
    """One on-chip tensor: its size and the clock span in which it is live."""

    buffer: str
    name: str
    shape: tuple[int, ...]
    amount: int  # bytes per partition (SBUF) or 2 KiB banks (PSUM)
    born: int
    last: int
    site: tuple[str, int]  # the kernel line that allocated it


_inside: dict[str, bool] = {}


def _site() -> tuple[str, int]:
    """The innermost frame outside the interpreter: the kernel line that allocates."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        inside = _inside.get(name)
        if inside is None:
            inside = _inside[name] = os.path.dirname(os.path.abspath(name)) == _HERE
        if not inside:
            return (name, f.f_lineno)
        f = f.f_back
    return ("?", 0)


@dataclass
class Context:
    """State of one program instance of a launch."""

    target: Target
    program_id: int = 0
    num_programs: int = 1
    shared: list[Any] = field(default_factory=list)  # shared_hbm outputs, in allocation order
    shared_next: int = 0
    clock: int = 0
    allocations: list[Allocation] = field(default_factory=list)
    grid_ndim: int = 0  # nl.program_ndim(): 1 for kernel[g](...), 0 for a plain call
    accumulators: dict[str, Any] = field(default_factory=dict)  # engine reduction registers

    def accumulator(self, engine: str) -> Any:
        """An engine's 128 per-partition reduction registers (NaN: never started)."""
        import numpy as np

        if engine not in self.accumulators:
            self.accumulators[engine] = np.full(PMAX, np.nan, dtype=np.float32)
        return self.accumulators[engine]

    def limit(self, buffer: str) -> int:
        return self.target.sbuf_bytes if buffer == "sbuf" else PSUM_BANKS

    def allocate(self, buffer: str, name: str, shape: tuple[int, ...],
                 bytes_per_partition: int) -> Allocation:
        """Records a new on-chip tensor (PSUM tensors take whole 2 KiB banks)."""
        amount = bytes_per_partition if buffer == "sbuf" else -(-bytes_per_partition // PSUM_BANK_BYTES)
        if amount > self.limit(buffer):
            self._over(buffer, amount, [], f"{name or 'a tensor'}{list(shape)} alone")
        self.clock += 1
        rec = Allocation(buffer, name, shape, amount, self.clock, self.clock, _site())
        self.allocations.append(rec)
        return rec

    def touch(self, rec: Allocation) -> None:
        self.clock += 1
        rec.last = self.clock

    def check_budgets(self) -> None:
        """The peak of live SBUF bytes per partition and of live PSUM banks over the program."""
        for buffer in ("sbuf", "psum"):
            recs = [a for a in self.allocations if a.buffer == buffer]
            events = sorted([(a.born, 0, i) for i, a in enumerate(recs)] +
                            [(a.last, 1, i) for i, a in enumerate(recs)])
            live: set[int] = set()
            total = 0
            for _, kind, i in events:
                if kind == 1:
                    live.discard(i)
                    total -= recs[i].amount
                    continue
                live.add(i)
                total += recs[i].amount
                if total > self.limit(buffer):
                    site = recs[i].site
                    self._over(buffer, total, [recs[j] for j in live],
                               f"{recs[i].name or 'a tensor'}{list(recs[i].shape)} at "
                               f"{site[0]}:{site[1]}")

    def _over(self, buffer: str, total: int, live: list[Allocation], what: str) -> None:
        top = sorted(live, key=lambda a: -a.amount)[:4]
        held = ", ".join(f"{a.name or '?'}{list(a.shape)} ({a.site[0].rsplit('/', 1)[-1]}:"
                         f"{a.site[1]})" for a in top)
        if buffer == "sbuf":
            raise NkiError("nl.ndarray", f"SBUF budget exceeded: with {what}, {total} B per "
                           f"partition are live; {self.target.name} has {self.target.sbuf_bytes} B "
                           f"per partition" + (f" (largest live: {held})" if held else ""),
                           "SBUF budget", "use smaller tiles (block sizes) or fewer live tiles")
        raise NkiError("nl.ndarray", f"PSUM budget exceeded: with {what}, {total} banks of 2 KiB "
                       f"per partition are live; PSUM has {PSUM_BANKS}"
                       + (f" (largest live: {held})" if held else ""), "PSUM budget",
                       "evict PSUM results with nisa.tensor_copy sooner, or use smaller matmul tiles")


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
