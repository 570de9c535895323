"""A subprocess that runs autotuning candidates on the CPU (autotune/isolated.py).

Each job is one config's generated source and the argument tensors; the answer is the outputs
and the times of `repeats` runs after one warm-up run. Not an API:
`python -m kernel_dsl.autotune.candidate_worker`.
"""
from __future__ import annotations

import time
import types
from typing import Any

from kernel_dsl.workers import Channel, die_with_parent

die_with_parent()  # before the slow imports: a parent killed meanwhile takes this worker along

from kernel_dsl import lowering  # noqa: E402
from kernel_dsl.config import Config  # noqa: E402

from .isolated import pack, unpack  # noqa: E402


def _stand_in_ir(out_dtypes: list[str]) -> Any:
    """What a backend's `compile` reads from the IR: only the returns' dtypes (NKI's runner)."""
    return types.SimpleNamespace(returns=[types.SimpleNamespace(dtype=d) for d in out_dtypes])


def run_job(job: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    gen = lowering.Generated(job["backend"], job["target"], Config([]), job["source"],
                             job["entry"])
    fn = lowering.get(job["backend"]).compile(gen, _stand_in_ir(job["out_dtypes"]))
    tensors = unpack(job["inputs"], data)
    fn(*tensors)  # build and warm up
    times = []
    for _ in range(job.get("repeats", 3)):
        t = time.perf_counter()
        outs = fn(*tensors)
        times.append(time.perf_counter() - t)
    specs, payload = pack(list(outs))
    return {"status": "ok", "times": times, "outputs": specs}, payload


def main() -> None:
    channel = Channel()
    channel.send({"ready": True})  # imports done: jobs get their timeout
    for job, data in channel.jobs():
        try:
            ans, payload = run_job(job, data)
        except Exception as e:  # noqa: BLE001  (a candidate may fail in any layer)
            ans, payload = {"status": "failed",
                            "message": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                            if str(e) else type(e).__name__}, b""
        channel.send(ans, payload)


if __name__ == "__main__":
    main()
