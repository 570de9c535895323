"""`kernel.check` for Pallas: the real TPU toolchain on a machine without a TPU (notes/tpu.md §5).

Stage 1 (in this process, no libtpu): `jax.export(platforms=["tpu"])` runs the Pallas -> Mosaic
lowering, which rejects illegal block shapes and unsupported primitives in ~0.1 s.
Stage 2 (subprocess): libtpu's compile-only topologies run Mosaic and XLA:TPU for the target;
VMEM overflow, layout errors and the VMEM actually allocated come from there. Compiles run on one
worker process per core (libtpu allows several with ALLOW_MULTIPLE_LIBTPU_LOAD); a compile that
hangs past the timeout or kills its worker is recorded and the worker restarted, so nothing
leaks from one check into the next.
"""
from __future__ import annotations

import math
import os
import queue
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from kernel_dsl.check import BUDGET, CRASH, TIMEOUT, CheckEntry
from kernel_dsl.errors import SourceLoc
from kernel_dsl.workers import Worker

from .. import Generated
from .classify import classify, hint_for, parse_vmem
from .runner import jax, load_module
from .targets import tpu_target
from .vmem import estimate_vmem

STARTUP_S = 120.0  # importing JAX and loading libtpu in a fresh worker (not a compile's time)


@dataclass
class Job:
    gen: Generated
    specs: list[tuple[tuple[int, ...], str]]  # (shape, IR dtype) per tensor argument
    fallback_loc: SourceLoc | None = None  # where block-shape errors point (the grid's line)


def _user_line(message: str, gen: Generated, fallback: SourceLoc | None, cls: str) -> str | None:
    """The user's line an error comes from: a generated line named in the message, mapped
    through the `# src:` table, else the grid's `kd.tile` line for block-shape errors."""
    line_map: dict[int, SourceLoc] = gen.meta.get("line_map", {})
    for m in re.finditer(r"<kernel_dsl:pallas:[^>]*>\"?(?:, line |:)(\d+)", message):
        loc = line_map.get(int(m.group(1)))
        if loc is not None:
            return str(loc)
    return str(fallback) if (fallback is not None and cls == "block-rule") else None


def _entry(job: Job, status: str, **kw: Any) -> CheckEntry:
    tgt = tpu_target(job.gen.target)
    return CheckEntry(target=job.gen.target, status=status, config=repr(job.gen.config),
                      vmem_limit=kw.pop("vmem_limit", None) or (tgt.vmem_limit if tgt else None),
                      vmem_estimate=estimate_vmem(job.gen, tgt) if "blocks" in job.gen.meta
                      else None, **kw)


def lower_check(job: Job) -> CheckEntry | None:
    """Stage 1. None when the lowering passes (or needs a real device kind to decide)."""
    specs = [jax.ShapeDtypeStruct(s, jax.numpy.dtype(_JNP[d])) for s, d in job.specs]
    t0 = time.perf_counter()
    try:
        fn = getattr(load_module(job.gen), job.gen.entry)
        jax.export.export(jax.jit(lambda *a: fn(*a, interpret=False)), platforms=["tpu"])(*specs)
        return None
    except Exception as e:  # noqa: BLE001  (JAX raises many types here)
        msg = f"{type(e).__name__}: {e}"
        if "Unsupported TPU device kind" in msg:  # e.g. rank-1 blocks: stage 2 decides
            return None
        cls = classify(msg, "lower")
        return _entry(job, "failed", error_class=cls, message=msg, stage="lower",
                      hint=hint_for(msg, cls),
                      compile_s=round(time.perf_counter() - t0, 3),
                      source_line=_user_line(msg, job.gen, job.fallback_loc, cls))


_JNP = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i32": "int32", "i16": "int16",
        "i8": "int8", "u8": "uint8", "bool": "bool", "f8e4m3fn": "float8_e4m3fn",
        "f8e5m2": "float8_e5m2"}


_LIBTPU_ARGS = f"{os.environ.get('LIBTPU_INIT_ARGS', '')} --logtostderr".strip()


def _worker(startup_timeout: float) -> Worker:
    return Worker("kernel_dsl.lowering.pallas.check_worker", {
        "JAX_PLATFORMS": None,  # this process's CPU-only JAX must not keep libtpu from the TPU
        "TPU_SKIP_MDS_QUERY": "1",
        "KD_CHECK_WORKER": "1",  # lets fault-injection tests act only inside a worker
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",  # workers compile side by side
        # libtpu otherwise leaves three log files per worker process in /tmp/tpu_logs (or
        # $TMPDIR) forever; on stderr they land in the worker's unlinked stderr file, which a
        # crash report quotes. A TPU_LOG_DIR the user set wins.
        "LIBTPU_INIT_ARGS": _LIBTPU_ARGS if "TPU_LOG_DIR" not in os.environ else
        os.environ.get("LIBTPU_INIT_ARGS"),
    }, startup_timeout)


_NOISE = ("TPU_WORKER_HOSTNAMES", "accelerator type")  # libtpu's startup chatter on stderr


def compile_checks(jobs: list[Job], timeout: float, measure_vmem: bool,
                   workers: int | None = None, deadline: float | None = None) -> list[CheckEntry]:
    """Stage 2 for each job, on a pool of worker processes (one per core by default). With a
    `deadline` (time.monotonic()), no wait runs past it: jobs it cuts short or never starts
    are entries of class BUDGET, not failures of the kernel."""
    results: dict[int, CheckEntry] = {}
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(jobs)):
        todo.put(i)

    def left() -> float:
        return math.inf if deadline is None else deadline - time.monotonic()

    def serve() -> None:
        worker: Worker | None = None
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                break
            if left() <= 0:
                results[i] = _entry(jobs[i], "failed", error_class=BUDGET, stage="compile",
                                    message="not compiled: the autotune budget ran out")
                continue
            worker = worker or _worker(min(STARTUP_S, left()))
            results[i], keep = _run_one(worker, jobs[i], i, timeout, left(), measure_vmem)
            if not keep:  # hung or died: the next job gets a fresh worker
                worker.close()
                worker = None
        if worker is not None:
            worker.close()

    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    threads = [threading.Thread(target=serve, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(jobs))]


def _run_one(worker: Worker, job: Job, i: int, timeout: float, left: float,
             measure_vmem: bool) -> tuple[CheckEntry, bool]:
    tgt = tpu_target(job.gen.target)
    assert tgt is not None, job.gen.target
    wait = min(timeout, left)
    ans = worker.ask({"id": i, "source": job.gen.source, "entry": job.gen.entry,
                      "specs": job.specs, "topology": tgt.topology, "target": job.gen.target,
                      "measure_vmem": measure_vmem, "wait_s": wait}, wait)
    if isinstance(ans, str):
        if ans == "timeout" and wait < timeout:  # the budget's end, not the kernel's fault
            return _entry(job, "failed", error_class=BUDGET, stage="compile", compile_s=wait,
                          message="compile stopped: the autotune budget ran out"), False
        msg = (f"compile did not finish within {timeout:.0f} s" if ans == "timeout"
               else "the compiler process died:\n" + worker.stderr_tail(drop=_NOISE))
        return _entry(job, "failed", error_class=TIMEOUT if ans == "timeout" else CRASH,
                      message=msg, stage="compile",
                      compile_s=timeout if ans == "timeout" else 0.0), False
    ans = ans[0]
    msg = ans.get("message", "")
    cls = ans.get("error_class")
    used, limit = ans.get("vmem_used"), ans.get("vmem_limit")
    if cls == "vmem-overflow" and used is None:
        used, limit = parse_vmem(msg)
    return _entry(job, ans["status"], error_class=cls, message=msg, vmem_used=used,
                  vmem_limit=limit, stage="compile", hint=hint_for(msg, cls or ""),
                  compile_s=ans.get("compile_s", 0.0),
                  source_line=_user_line(msg, job.gen, job.fallback_loc, cls or "")), True


def check(jobs: list[Job], timeout: float = 300.0, measure_vmem: bool = True,
          deadline: float | None = None) -> list[CheckEntry]:
    out: list[CheckEntry | None] = [lower_check(j) for j in jobs]
    todo = [i for i, e in enumerate(out) if e is None]
    for i, e in zip(todo, compile_checks([jobs[i] for i in todo], timeout, measure_vmem,
                                         deadline=deadline)):
        out[i] = e
    return [e for e in out if e is not None]
