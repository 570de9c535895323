"""Exported (serialized StableHLO) interpreted kernels on disk: a warm process skips Pallas.

JAX's persistent cache (jax_cache.py) keeps XLA's compiled code, but JAX finds it by the HLO
module, and getting the module means importing Pallas and lowering the kernel: most of a warm
first call (about 0.1 s per kernel, 0.4 s for Pallas' import). So the lowered module itself is
kept, through `jax.export`: `$KD_CACHE_DIR/jax_export/<key>.jaxexport`, where the key hashes the
generated source, the input shapes and dtypes and the versions of jax, jaxlib and kernel_dsl.
A warm process deserializes it (about 1 ms) and JAX's cache gives the compiled code.

Only the plain CPU interpreter is kept (the faithful one calls back into Python, which an export
cannot hold). Like JAX's own cache, the files are trusted: they are computations XLA runs, not
Python. A file that does not load is rebuilt and replaced. `KD_JAX_CACHE=0` turns both off.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any, Callable

import jax
import jax.export
import jaxlib

from kernel_dsl.autotune.cache import cache_dir
from kernel_dsl.version import __version__

from .. import Generated

_JNP = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i32": "int32", "i16": "int16",
        "i8": "int8", "u8": "uint8", "bool": "bool", "f8e4m3fn": "float8_e4m3fn",
        "f8e5m2": "float8_e5m2"}
Specs = list[tuple[tuple[int, ...], str]]
FORMAT = 1  # bump when what is exported changes other than through the source (runner.py's call)


def enabled() -> bool:
    return os.environ.get("KD_JAX_CACHE", "1") != "0" and not os.environ.get("KD_CHECK_WORKER")


def _path(gen: Generated, specs: Specs) -> str:
    lowering = (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision)  # change HLO
    key = "\n".join([gen.source, repr(specs), jax.__version__, jaxlib.__version__, __version__,
                     str(FORMAT), repr(lowering)])
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    return os.path.join(cache_dir(), "jax_export", f"{gen.entry}-{name}.jaxexport")


def _load(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return jax.export.deserialize(bytearray(f.read()))
    except Exception:  # missing, truncated, or from another jax: rebuild it
        return None


def _save(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # readers see the whole file or none
    except OSError:
        pass  # a read-only or full cache only costs the next process the lowering


def jitted(gen: Generated, specs: Specs, build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """The kernel as a jitted function of arrays: from its exported module when one is on disk,
    else `build()` (the jitted interpreted kernel), exported and saved for the next process."""
    path = _path(gen, specs)
    exp = _load(path)
    if exp is None:
        fn = build()
        avals = [jax.ShapeDtypeStruct(s, jax.numpy.dtype(_JNP[d])) for s, d in specs]
        try:
            exp = jax.export.export(fn, platforms=["cpu"])(*avals)
        except Exception:  # the kernel's own error: the first call raises it, as without a cache
            return fn
        _save(path, exp.serialize())
    return jax.jit(exp.call)
