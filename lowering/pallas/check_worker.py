"""A subprocess that compiles generated Pallas kernels with libtpu's compile-only TPU targets.

Reads one JSON job per line on stdin, answers one JSON result per line on stdout. Run by
`check.py`, which kills and restarts it when a compile hangs or crashes, so one bad kernel
never stops the others. Not an API: `python -m kernel_dsl.lowering.pallas.check_worker`.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from .. import Generated  # noqa: E402
from .classify import classify, parse_vmem  # noqa: E402
from .runner import load_module  # noqa: E402

_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "i32": jnp.int32,
           "i16": jnp.int16, "i8": jnp.int8, "u8": jnp.uint8, "bool": jnp.bool_}
_devices: dict[str, Any] = {}
MAX_LADDER = 16  # climbing steps before giving up (doubling from 4 KiB: 128 MiB)
MIN_LIMIT = 4096  # no kernel fits in less: one (8, 128) f32 tile
VMEM_TOLERANCE = 0.03  # bisection stops within 3% of the figure


def _device(topology: str) -> Any:
    if topology not in _devices:
        _devices[topology] = topologies.get_topology_desc(
            platform="tpu", topology_name=topology).devices[0]
    return _devices[topology]


def _compile(mod: Any, entry: str, specs: list[Any], dev: Any, limit: int | None) -> None:
    if limit is not None:
        mod.VMEM_LIMIT_BYTES = limit  # the generated kernel reads it when traced
    fn = getattr(mod, entry)
    # Pallas asks the default device for the chip's tiling (rank-1 blocks): make it the target
    with jax.default_device(dev):
        jax.jit(lambda *a: fn(*a, interpret=False)).lower(*specs).compile()


def _compiles(mod: Any, entry: str, specs: list[Any], dev: Any, limit: int) -> tuple[bool, int | None]:
    """(compiles under `limit`, the allocation the overflow message reports if not)."""
    try:
        _compile(mod, entry, specs, dev, limit)
        return True, None
    except Exception as e:  # noqa: BLE001  (the compiler's errors have no common type)
        return False, parse_vmem(str(e))[0]


def _measure_vmem(mod: Any, entry: str, specs: list[Any], dev: Any) -> int | None:
    """The VMEM the kernel needs: the smallest vmem_limit_bytes the compiler accepts, to within
    VMEM_TOLERANCE. Overflow messages give a first upper bound, but only a bound: they report
    what the compiler tried to allocate, and XLA places whole operands in VMEM when the limit
    allows (a (64, 2048, 1) f32 output asked for 72 MiB of a kernel that compiles in 8), so the
    bound is bisected down. None where even MIN_LIMIT compiles (the limit does not govern this
    kernel: seen for single-step grids on TPU7x)."""
    lo = MIN_LIMIT
    fits, used = _compiles(mod, entry, specs, dev, lo)
    if fits:
        return None
    hi = None
    for _ in range(MAX_LADDER):  # climb to the first limit that compiles
        # just past the reported figure (rounded to 0.01 MiB); double where none helps
        step = used + 16 * 1024 if used is not None and used > lo else 2 * lo
        fits, used = _compiles(mod, entry, specs, dev, step)
        if fits:
            hi = step
            break
        lo = step
    if hi is None:
        return None
    below = hi - max(64 * 1024, int(VMEM_TOLERANCE * hi))
    if below > lo:
        if not _compiles(mod, entry, specs, dev, below)[0]:
            return hi  # the usual case, one compile: the message was the need
        hi = below
    while hi - lo > max(64 * 1024, VMEM_TOLERANCE * hi):
        mid = (lo + hi) // 2
        if _compiles(mod, entry, specs, dev, mid)[0]:
            hi = mid
        else:
            lo = mid
    return hi


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    gen = Generated("pallas", job["target"], None, job["source"], job["entry"])  # type: ignore[arg-type]
    mod = load_module(gen)
    dev = _device(job["topology"])
    specs = [jax.ShapeDtypeStruct(tuple(s), _DTYPES[d], sharding=SingleDeviceSharding(dev))
             for s, d in job["specs"]]
    t0 = time.perf_counter()
    out: dict[str, Any] = {"id": job["id"], "status": "ok", "stage": "compile"}
    try:
        _compile(mod, job["entry"], specs, dev, None)
    except Exception as e:  # noqa: BLE001
        out.update(status="failed", message=str(e), error_class=classify(str(e), "compile"))
        used, limit = parse_vmem(str(e))
        out.update(vmem_used=used, vmem_limit=limit)
    out["compile_s"] = round(time.perf_counter() - t0, 3)
    if out["status"] == "ok" and job.get("measure_vmem", True):
        out["vmem_used"] = _measure_vmem(mod, job["entry"], specs, dev)
    return out


def main() -> None:
    sys.stdout.write(json.dumps({"ready": True}) + "\n")  # imports done: jobs get their timeout
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            res = run_job(job)
        except Exception as e:  # noqa: BLE001  (a failure outside the compile itself)
            res = {"id": job.get("id"), "status": "failed", "error_class": "error",
                   "message": f"{type(e).__name__}: {e}", "stage": "compile"}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
