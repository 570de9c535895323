"""A dict that forgets its oldest entry past a size limit: the per-kernel caches of traces and
builds. A kernel called with ever new shapes or scalar values (no shape buckets, a float that
changes every step) would otherwise keep every trace and compiled executable it ever made.

Hand-written rather than `functools.lru_cache` or `cachetools`: the hot path is one `dict.get`
(C speed, no recency bookkeeping); only inserts pay, and oldest-first eviction is enough here.
"""
from __future__ import annotations

import os
from typing import Any

# builds per kernel (each holds compiled code); `KD_KERNEL_CACHE_SIZE` overrides
LIMIT = int(os.environ.get("KD_KERNEL_CACHE_SIZE", "256"))


class Bounded(dict):  # type: ignore[type-arg]
    def __init__(self, limit: int = LIMIT):
        super().__init__()
        self.limit = max(1, limit)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self and len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(key, value)
