"""How much VMEM a kernel needs, asked of the compiler: the smallest vmem_limit_bytes it accepts.

Pure search logic over a `compiles(limit)` callback (the check worker compiles with libtpu; the
library benchmark does the same for JAX's kernels), so it is tested without a compiler.
"""
from __future__ import annotations

import math
import time
from typing import Callable

MIN_LIMIT = 4096  # no kernel fits in less: one (8, 128) f32 tile
VMEM_TOLERANCE = 0.03  # the figure is within 3% of the need...
VMEM_SLACK = 24 * 1024  # ...or 24 KiB: the probe below a climbed limit sits at figure - 8 KiB
STEP_PAST = 16 * 1024  # a climb step goes just past the reported figure (rounded to 0.01 MiB)


def smallest_limit(compiles: Callable[[int], tuple[bool, int | None]], ceiling: int | None = None,
                   deadline: float = math.inf) -> int | None:
    """The VMEM a kernel needs: the smallest vmem_limit_bytes the compiler accepts, to within
    max(VMEM_TOLERANCE, VMEM_SLACK). `compiles(limit)` -> (accepted, the allocation its overflow
    message reports). `ceiling`: a limit known to compile (the one the kernel just compiled
    under); past `deadline` the best upper bound found so far is returned.

    Overflow messages are only hints: one can report a single allocation of many (each retry
    then reports the next), or more than the kernel needs (XLA keeps whole operands in VMEM
    when the limit allows: a (64, 2048, 1) f32 output asked for 72 MiB of a kernel that
    compiles in 8). So: climb from MIN_LIMIT, at least 1.5x per step, to a limit that
    compiles; probe just below it (the usual case ends here: the message was the need); else
    bisect. None only where even MIN_LIMIT compiles: the limit does not govern this kernel
    (seen for single-step grids on TPU7x)."""
    lo = MIN_LIMIT
    fits, used = compiles(lo)
    if fits:
        return None
    hi = None
    while hi is None:  # climb
        step = max(used + STEP_PAST if used is not None else 0, lo * 3 // 2)
        if ceiling is not None and step >= ceiling:
            hi = ceiling
        elif time.perf_counter() > deadline:
            return ceiling
        else:
            fits, used = compiles(step)
            if fits:
                hi = step
            else:
                lo = step

    def close_enough() -> bool:
        return hi - lo <= max(VMEM_SLACK, VMEM_TOLERANCE * hi) or time.perf_counter() > deadline

    below = hi - max(VMEM_SLACK, int(VMEM_TOLERANCE * hi))
    if not close_enough() and below > lo:
        if not compiles(below)[0]:
            return hi
        hi = below
    while not close_enough():  # bisect: lo fails, hi compiles
        mid = (lo + hi) // 2
        if compiles(mid)[0]:
            hi = mid
        else:
            lo = mid
    return hi
