"""VMEM from the real compiler, for library_tpu.py: what libtpu's compile-only target needs
for our kernels and for JAX's, per target. Backward: the largest of its kernels (the caller
takes the max).

- ours: `kernel.check`'s machinery (kernel_dsl.lowering.pallas.check), all jobs in one batch.
- theirs: their code sets no vmem_limit_bytes, so a worker process (this file run as a script,
  one per target) injects one into their CompilerParams and finds the smallest limit that
  compiles with `kernel.check`'s own search (check_worker.smallest_limit).

    python benchmarks/compiled_vmem.py <topology>   # the worker: JSON jobs on stdin, one per line
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

from jax_tpu_kernels import GUIDE_MM, D, blocks_for, guide_matmul, their_bwd

from kernel_dsl.kernels import KERNELS
from kernel_dsl.lowering.pallas.classify import parse_vmem
from kernel_dsl.lowering.pallas.targets import TARGETS


def our_vmem(jobs: list[tuple[str, tuple[Any, ...], str]],
             timeout: float) -> list[tuple[bool, int | None]]:
    """(compiles, VMEM the compiler needs) for each (kernel, args, target): `kernel.check`'s
    machinery, all jobs in one batch. VMEM None: the compiler accepts any limit."""
    from kernel_dsl.lowering.pallas.check import Job, check

    batch = []
    for name, args, target in jobs:
        kernel = KERNELS[name]
        ir = kernel.ir(*args)
        gen = kernel.generated(*args, backend="pallas", target=target)
        batch.append(Job(gen, [(p.shape, p.dtype) for p in ir.inputs], ir.loc))
    return [(e.ok, e.vmem_used if e.ok else None) for e in check(batch, timeout, True)]


def _their_fn(job: dict[str, Any]) -> tuple[Callable[..., Any], list[tuple[tuple[int, ...], Any]]]:
    """One job's JAX function and its argument (shape, dtype)s."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    if job["kind"] == "matmul":
        m, k, n = job["shape"]
        return (lambda x, y: guide_matmul(x, y, *GUIDE_MM)), [((m, k), jnp.bfloat16), ((k, n), jnp.bfloat16)]
    b, h, s = job["shape"]
    sizes = fa.BlockSizes(**blocks_for(job["blocks"], b, s))

    def fwd(q: Any, k: Any, v: Any) -> Any:
        return fa.flash_attention(q, k, v, causal=job["causal"], sm_scale=D ** -0.5, block_sizes=sizes)

    x, st = ((b, h, s, D), jnp.bfloat16), ((b, h, s), jnp.float32)
    if job["kind"] == "fwd":
        return fwd, [x, x, x]
    return their_bwd(job["causal"], sizes), [x, x, x, x, st, st, x]


def vmem_worker(topology: str) -> None:
    """Subprocess: the smallest vmem_limit_bytes under which JAX's kernels compile for one
    topology (their code sets none: it is injected into their CompilerParams)."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    import jax
    from jax.experimental import topologies
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import SingleDeviceSharding

    from kernel_dsl.lowering.pallas.check_worker import smallest_limit

    dev = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[0]
    orig = pltpu.CompilerParams
    limit = {"bytes": 0}

    def params(*a: Any, **kw: Any) -> Any:
        kw["vmem_limit_bytes"] = limit["bytes"]
        return orig(*a, **kw)

    pltpu.CompilerParams = params
    for line in sys.stdin:
        job = json.loads(line)
        fn, shapes = _their_fn(job)
        specs = [jax.ShapeDtypeStruct(s, d, sharding=SingleDeviceSharding(dev)) for s, d in shapes]

        def compiles(nbytes: int) -> tuple[bool, int | None]:
            limit["bytes"] = nbytes
            jax.clear_caches()  # their jitted functions would keep the previous trace's limit
            try:
                jax.jit(fn).lower(*specs).compile()  # noqa: B023  (called in this iteration)
                return True, None
            except Exception as e:  # noqa: BLE001  (the compiler's errors have no common type)
                return False, parse_vmem(str(e))[0]

        used = smallest_limit(compiles)  # the method kernel.check uses for ours
        print(json.dumps({"id": job["id"], "vmem": used}), flush=True)


def their_vmem(jobs: list[dict[str, Any]], timeout: float) -> dict[int, int | None]:
    """VMEM of each of JAX's jobs by id (None: did not compile, or any limit compiles), one
    worker per target."""
    out: dict[int, int | None] = {}
    by_target: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        by_target.setdefault(j["target"], []).append(j)
    # as kernel.check's workers: the CPU-only JAX_PLATFORMS of this process must not reach libtpu
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["TPU_SKIP_MDS_QUERY"] = "1"
    for target, tj in by_target.items():
        for attempt in range(20):  # libtpu allows one process at a time (its lock file): wait
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), TARGETS[target].topology],
                input="".join(json.dumps(j) + "\n" for j in tj), capture_output=True, text=True,
                timeout=timeout * len(tj), env=env)
            if proc.returncode == 0 or "lockfile" not in proc.stderr:
                break
            time.sleep(15)
        if proc.returncode:
            print(f"VMEM worker for {target} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                out[r["id"]] = r["vmem"]
    return out


if __name__ == "__main__":  # the worker their_vmem starts (the parent keeps JAX off libtpu)
    vmem_worker(sys.argv[1])
