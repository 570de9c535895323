"""A subprocess that compiles generated Pallas kernels with libtpu's compile-only TPU targets.

Reads one JSON job per line on stdin, answers one JSON result per line (kernel_dsl.workers). Run by
`check.py`, which kills and restarts it when a compile hangs or crashes, so one bad kernel
never stops the others. Not an API: `python -m kernel_dsl.lowering.pallas.check_worker`.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any

from kernel_dsl.workers import Channel, die_with_parent

die_with_parent()  # before the slow imports: a parent killed meanwhile takes this worker along
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from .. import Generated  # noqa: E402
from .classify import classify, parse_vmem  # noqa: E402
from .runner import load_module  # noqa: E402
from .vmem_search import smallest_limit  # noqa: E402

_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "i32": jnp.int32,
           "i16": jnp.int16, "i8": jnp.int8, "u8": jnp.uint8, "bool": jnp.bool_,
           "f8e4m3fn": jnp.float8_e4m3fn, "f8e5m2": jnp.float8_e5m2}
_devices: dict[str, Any] = {}


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


def _measure_vmem(mod: Any, entry: str, specs: list[Any], dev: Any, ceiling: int | None,
                  budget_s: float) -> int | None:
    return smallest_limit(lambda limit: _compiles(mod, entry, specs, dev, limit), ceiling,
                          time.perf_counter() + budget_s)


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
    # the limit it just compiled under bounds the search; its budget (a few compiles' worth)
    # keeps the whole job inside the caller's wait, else no figure rather than a cut-short one
    budget = 5.0 + 8 * out["compile_s"]
    if out["status"] == "ok" and job.get("measure_vmem", True) and \
            out["compile_s"] + budget + 5.0 <= job.get("wait_s", math.inf):
        out["vmem_used"] = _measure_vmem(mod, job["entry"], specs, dev,
                                         getattr(mod, "VMEM_LIMIT_BYTES", None), budget)
    return out


def main() -> None:
    channel = Channel()
    channel.send({"ready": True})  # imports done: jobs get their timeout
    for job, _ in channel.jobs():
        try:
            res = run_job(job)
        except Exception as e:  # noqa: BLE001  (a failure outside the compile itself)
            res = {"id": job.get("id"), "status": "failed", "error_class": "error",
                   "message": f"{type(e).__name__}: {e}", "stage": "compile"}
        channel.send(res)


if __name__ == "__main__":
    main()
