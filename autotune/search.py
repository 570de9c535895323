"""Search strategies over a config space, each given an objective and a budget.

- exhaustive: every config (small spaces);
- random: configs in a seeded random order;
- pattern: compass (pattern) search on the grid of knob values from the default config: poll a
  step up and down along every knob, move to the best, halve the step when nothing improves,
  restart from a random point when converged.
Each yields configs to evaluate; the caller owns evaluation, so the same strategies drive the
analytical model, the CPU interpreter or a real device.
"""
from __future__ import annotations

import random
import time
from typing import Callable, Iterator

from kernel_dsl.config import Config, ConfigSpace

Objective = Callable[[Config], float]  # seconds (lower is better); inf for an invalid config


def _axes(space: ConfigSpace) -> list[tuple[str, list[object]]]:
    axes: list[tuple[str, list[object]]] = [(f"#{i}", list(c)) for i, c in enumerate(space.positional)]
    axes += [(k, list(v)) for k, v in space.named.items()]
    axes += [(k, list(v)) for k, v in space.knobs.items()]
    return axes


def _config(space: ConfigSpace, point: tuple[int, ...]) -> Config:
    axes = _axes(space)
    vals = [vals[i] for (_, vals), i in zip(axes, point)]
    npos = len(space.positional)
    names = [name for name, _ in axes[npos:]]
    return Config(vals[:npos], **dict(zip(names, vals[npos:])))  # type: ignore[arg-type]


def _point(space: ConfigSpace, cfg: Config) -> tuple[int, ...] | None:
    named = [k for k, _ in _axes(space)[len(space.positional):]]
    vals: list[object] = [*cfg.block_sizes, *(cfg.knobs.get(k) for k in named)]
    try:
        return tuple(values.index(v) for (_, values), v in zip(_axes(space), vals))
    except ValueError:
        return None


def exhaustive(space: ConfigSpace, start: Config, objective: Objective, budget_s: float,
               seed: int = 0) -> Iterator[tuple[Config, float]]:
    deadline = time.monotonic() + budget_s
    for cfg in space:
        if time.monotonic() > deadline:
            return
        yield cfg, objective(cfg)


def random_search(space: ConfigSpace, start: Config, objective: Objective, budget_s: float,
                  seed: int = 0) -> Iterator[tuple[Config, float]]:
    deadline = time.monotonic() + budget_s
    cfgs = list(space)
    random.Random(seed).shuffle(cfgs)
    for cfg in cfgs:
        if time.monotonic() > deadline:
            return
        yield cfg, objective(cfg)


def pattern(space: ConfigSpace, start: Config, objective: Objective, budget_s: float,
            seed: int = 0) -> Iterator[tuple[Config, float]]:
    """Compass search: poll +-step along every knob, move to the best improvement, halve the
    step when nothing improves; at step 1 with no improvement, restart at a random point."""
    deadline = time.monotonic() + budget_s
    rng = random.Random(seed)
    axes = _axes(space)
    seen: dict[tuple[int, ...], float] = {}

    def visit(p: tuple[int, ...]) -> Iterator[tuple[Config, float]]:
        if p not in seen:
            cfg = _config(space, p)
            seen[p] = objective(cfg)
            yield cfg, seen[p]

    point = _point(space, start) or tuple(0 for _ in axes)
    total = len(space)
    while len(seen) < total and time.monotonic() < deadline:
        yield from visit(point)
        step = max(1, max(len(v) for _, v in axes) // 2)
        while step >= 1 and time.monotonic() < deadline:
            best = point
            for i, (_, vals) in enumerate(axes):
                for d in (-step, step):
                    j = min(max(point[i] + d, 0), len(vals) - 1)
                    nb = point[:i] + (j,) + point[i + 1:]
                    yield from visit(nb)
                    if seen[nb] < seen[best]:
                        best = nb
            if best != point:
                point = best
            else:
                step //= 2
        # converged: restart from an unvisited random point
        fresh = [tuple(rng.randrange(len(v)) for _, v in axes) for _ in range(64)]
        fresh = [p for p in fresh if p not in seen]
        if not fresh:
            break
        point = fresh[0]


STRATEGIES = {"exhaustive": exhaustive, "random": random_search, "pattern": pattern}


def run(name: str, space: ConfigSpace, start: Config, objective: Objective,
        budget_s: float) -> list[tuple[Config, float]]:
    """Runs strategy `name` to the end (budget or space exhausted): every (config, seconds)."""
    return list(STRATEGIES[name](space, start, objective, budget_s))
