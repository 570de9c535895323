"""Hypothesis strategies for fuzz cases: sizes, dtypes, layouts, value classes, configs.

Sizes come from a small pool per dim, not from `integers(lo, hi)`: uniform integers almost
never hit the sizes that break tiled kernels (1, exact block multiples, one past a block, primes
that are ragged for every block size) and every new size costs a trace and a JAX compile. The
pool is biased towards small sizes (three draws in four), so most examples are cheap and
compiled kernels are reused, while every example can still reach the large end.
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from hypothesis import strategies as st

from ..config import Config
from .case import LAYOUTS, Case
from .signature import Signature

PRIMES = (2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191)
BLOCKS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SMALL = 64  # sizes up to this are "small" (drawn three times in four)
DEFAULT_DIMS = (1, 512)


def _largest_prime_at_most(n: int) -> int | None:
    for c in range(n, 1, -1):
        if all(c % p for p in range(2, int(c ** 0.5) + 1)):
            return c
    return None


def dim_pool(spec: Any) -> list[int]:
    """The sizes a dim is drawn from. `(lo, hi)`: 1 and lo and hi, primes (ragged for every
    block size), every power-of-two block size B and B + 1 (one full tile, one ragged tile past
    it), and the largest prime <= hi, all within [lo, hi]. A list: exactly those sizes. An int:
    that size."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 1:
            raise ValueError(f"dim size {spec} must be a positive int")
        return [spec]
    if isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, int) for v in spec):
        lo, hi = spec
        if not 1 <= lo <= hi:
            raise ValueError(f"dim range {spec} must have 1 <= lo <= hi")
        cands = {lo, hi, 1, *PRIMES}
        for b in BLOCKS:
            cands |= {b, b + 1}
        top = _largest_prime_at_most(hi)
        if top is not None:
            cands.add(top)
        return sorted(c for c in cands if lo <= c <= hi)
    if not isinstance(spec, (list, tuple, set, frozenset)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in spec):
        raise ValueError(f"dim {spec!r}: use a size (8), a range (lo, hi) or a list of sizes [8, 16]")
    values = sorted(set(spec))
    if not values or values[0] < 1:
        raise ValueError(f"dim sizes {spec!r} must be positive ints")
    return values


def _sized(pool: list[int]) -> st.SearchStrategy[int]:
    """Three in four draws from the small end of the pool; shrinks towards the smallest size."""
    small = [v for v in pool if v <= SMALL] or pool[:1]
    big = [v for v in pool if v > SMALL]
    if not big:
        return st.sampled_from(small)
    return st.integers(0, 3).flatmap(lambda b: st.sampled_from(big if b == 3 else small))


@st.composite
def cases(draw: Any, sig: Signature, backends: Sequence[str], dtypes: Sequence[str],
          dims: dict[str, Any], values: Sequence[str]) -> Case:
    """A case without its config (the config space depends on the traced shapes; the fuzz loop
    draws it after tracing). Lists are drawn by index, so shrinking prefers their first
    entries: the first backend, the first dtype, contiguous inputs, normal values."""
    backend = draw(st.sampled_from(list(backends)))
    dtype = draw(st.sampled_from(list(dtypes)))
    sizes = tuple((n, draw(_sized(dim_pool(dims.get(n, DEFAULT_DIMS))))) for n in sig.dim_names)
    layouts = tuple((t.name, draw(st.sampled_from(LAYOUTS if len(t.dims) >= 2 else LAYOUTS[::2])))
                    for t in sig.tensors)
    value_class = draw(st.sampled_from(list(values)))
    scalars = tuple((s.name, draw(st.sampled_from(list(s.choices)))) for s in sig.scalars)
    seed = draw(st.integers(0, 2 ** 16 - 1))
    return Case(backend, dtype, sizes, layouts, value_class, seed, scalars)


def config_choices(space: Any, default: Config, limit: int | str | Sequence[Config],
                   salt: int) -> list[Config]:
    """The configs an example may use, the backend's default first. `"all"`: the whole config
    space (every config the autotuner could pick for these shapes); an int N: the default and
    N - 1 others spread over the space (a fixed choice per `salt`); `"default"`: only the
    default; a list: exactly those."""
    if not isinstance(limit, (str, int)):
        return list(limit)
    if limit == "default":
        return [default]
    rest = [c for c in space if c != default]
    if limit == "all":
        return [default, *rest]
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"configs={limit!r}: use 'all', 'default', a positive int or a list of Configs")
    rng = random.Random(salt)  # local: the choice must not depend on global random state
    return [default, *rng.sample(rest, min(limit - 1, len(rest)))]
