"""JAX's persistent compilation cache, under kernel_dsl's cache directory, for kernels run here.

A fresh process otherwise pays XLA's compile of every interpreted (CPU) or Mosaic (TPU) kernel
again. Turned on the first time this process builds a kernel to run, unless the user configured
JAX's cache themselves (`JAX_COMPILATION_CACHE_DIR` or `jax.config`) or set `KD_JAX_CACHE=0`.
JAX's config is process-wide, so the user's own jitted functions are cached there too; that is
what JAX's own cache would do for them, and the docs say so. Not in the TPU check workers: their
compile times and VMEM searches must be real compiles.
"""
from __future__ import annotations

import functools
import os

import jax

from kernel_dsl.autotune.cache import cache_dir

MAX_BYTES = 2 << 30  # JAX evicts least recently used entries past this size


@functools.lru_cache(maxsize=None)
def enable() -> str | None:
    """The cache directory in use (None when off)."""
    if os.environ.get("KD_JAX_CACHE", "1") == "0" or os.environ.get("KD_CHECK_WORKER"):
        return None
    if jax.config.jax_compilation_cache_dir:  # the user's own choice wins
        return jax.config.jax_compilation_cache_dir
    path = os.path.join(cache_dir(), "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    # interpreted kernels compile in 0.05-0.5 s each, below JAX's default threshold of 1 s
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
