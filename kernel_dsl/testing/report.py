"""What a fuzz run did: counts per backend and dtype, the slowest case, how close any example
came to the tolerance, and a progress bar for the CLI.

Kept apart from the search so that `kdsl fuzz`, the pytest helpers and a failure message all
print the same table.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO


@dataclass
class Cell:
    """One (backend, dtype) row of the summary."""

    examples: int = 0  # examples run and compared
    failures: int = 0  # examples that failed (before and during shrinking)
    skipped: int = 0  # not run: dtype/backend unsupported, reference undefined
    seconds: float = 0.0
    tightest: float = 0.0  # the largest fraction of the tolerance any passing example used


@dataclass
class FuzzResult:
    """The summary of one `fuzz` call; also attached to its AssertionError as `.fuzz_result`."""

    kernel: str
    reference: str
    profile: str
    seed: int | None
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    slowest: tuple[float, str] = (0.0, "")
    skip_reasons: dict[str, int] = field(default_factory=dict)
    budget_hit: bool = False
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None

    @property
    def examples(self) -> int:
        return sum(c.examples for c in self.cells.values())

    @property
    def failures(self) -> int:
        return sum(c.failures for c in self.cells.values())

    @property
    def seconds(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    def cell(self, backend: str, dtype: str) -> Cell:
        return self.cells.setdefault((backend, dtype), Cell())

    def record(self, backend: str, dtype: str, seconds: float, tightest: float, ok: bool,
               description: str) -> None:
        c = self.cell(backend, dtype)
        c.examples += 1
        c.seconds += seconds
        if ok:
            c.tightest = max(c.tightest, tightest)
        else:
            c.failures += 1
        if seconds > self.slowest[0]:
            self.slowest = (seconds, description)

    def skip(self, backend: str, dtype: str, reason: str) -> None:
        self.cell(backend, dtype).skipped += 1
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + 1

    def table(self) -> str:
        """The summary table (plain text, fixed-width)."""
        head = ("backend", "dtype", "examples", "failures", "skipped", "tightest", "seconds")
        rows = [head]
        for (be, dt), c in sorted(self.cells.items()):
            rows.append((be, dt, str(c.examples), str(c.failures), str(c.skipped),
                         f"{c.tightest:.2f}", f"{c.seconds:.1f}"))
        total = Cell()
        for c in self.cells.values():
            total.examples += c.examples
            total.failures += c.failures
            total.skipped += c.skipped
            total.seconds += c.seconds
            total.tightest = max(total.tightest, c.tightest)
        rows.append(("total", "", str(total.examples), str(total.failures), str(total.skipped),
                     f"{total.tightest:.2f}", f"{total.seconds:.1f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"fuzz {self.kernel} against {self.reference} (profile {self.profile}, "
                 f"seed {self.seed if self.seed is not None else 'random'}): "
                 f"{self.examples} examples in {self.seconds:.1f} s"]
        for j, r in enumerate(rows):
            lines.append("  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                                   for i, (v, w) in enumerate(zip(r, widths))))
            if j == 0 or j == len(rows) - 2:
                lines.append("  ".join("-" * w for w in widths))
        if self.slowest[1]:
            lines.append(f"slowest case: {self.slowest[0]:.2f} s  {self.slowest[1]}")
        for reason, n in sorted(self.skip_reasons.items()):
            lines.append(f"skipped {n}x: {reason}")
        if self.budget_hit:
            lines.append("time budget reached: the remaining examples were not run")
        lines.append("tightest: the largest fraction of the tolerance a passing example used")
        return "\n".join(lines)


class ProgressBar:
    """`[#####.....] 50/100 examples, 1 failure, 12.3 s` on one rewritten line of a terminal
    (one line per 10% when the stream is not a terminal, so CI logs stay short)."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30):
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_decile = -1

    def __call__(self, result: FuzzResult, done: int) -> None:
        frac = min(done / self.total, 1.0)
        if not self.tty:
            decile = int(frac * 10)
            if decile == self.last_decile:
                return
            self.last_decile = decile
        n = int(frac * self.width)
        fails = result.failures
        text = (f"[{'#' * n}{'.' * (self.width - n)}] {done}/{self.total} examples, "
                f"{result.examples} run, {fails} failure{'s' if fails != 1 else ''}, "
                f"{result.seconds:.1f} s")
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


Progress = Callable[[FuzzResult, int], None]
