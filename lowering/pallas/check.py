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

import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from kernel_dsl.check import CRASH, TIMEOUT, CheckEntry
from kernel_dsl.errors import SourceLoc

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
        "i8": "int8", "u8": "uint8", "bool": "bool"}


class _Worker:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
        env["TPU_SKIP_MDS_QUERY"] = "1"
        env["KD_CHECK_WORKER"] = "1"  # lets fault-injection tests act only inside a worker
        env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # workers compile side by side
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            # -P: the caller's working directory stays off the worker's sys.path, so a
            # `json.py` lying there is not imported into it (and run)
            [sys.executable, "-P", "-m", "kernel_dsl.lowering.pallas.check_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = self._next(STARTUP_S) not in ("timeout", "crash")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the worker exited

    def _next(self, timeout: float) -> dict[str, Any] | str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return "timeout"
        return "crash" if line is None else json.loads(line)

    def ask(self, job: dict[str, Any], timeout: float) -> dict[str, Any] | str:
        """The worker's answer, or "timeout" / "crash"."""
        assert self.proc.stdin is not None
        if not self.ready:
            return "crash"
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "crash"
        return self._next(timeout)

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().splitlines()
                 if ln.strip() and "TPU_WORKER_HOSTNAMES" not in ln and "accelerator type" not in ln]
        return "\n".join(lines[-8:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


def compile_checks(jobs: list[Job], timeout: float, measure_vmem: bool,
                   workers: int | None = None) -> list[CheckEntry]:
    """Stage 2 for each job, on a pool of worker processes (one per core by default)."""
    results: dict[int, CheckEntry] = {}
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(jobs)):
        todo.put(i)

    def serve() -> None:
        worker: _Worker | None = None
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                break
            worker = worker or _Worker()
            results[i], keep = _run_one(worker, jobs[i], i, timeout, measure_vmem)
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


def _run_one(worker: _Worker, job: Job, i: int, timeout: float,
             measure_vmem: bool) -> tuple[CheckEntry, bool]:
    tgt = tpu_target(job.gen.target)
    assert tgt is not None, job.gen.target
    ans = worker.ask({"id": i, "source": job.gen.source, "entry": job.gen.entry,
                      "specs": job.specs, "topology": tgt.topology, "target": job.gen.target,
                      "measure_vmem": measure_vmem}, timeout)
    if isinstance(ans, str):
        msg = (f"compile did not finish within {timeout:.0f} s" if ans == "timeout"
               else "the compiler process died:\n" + worker.stderr_tail())
        return _entry(job, "failed", error_class=TIMEOUT if ans == "timeout" else CRASH,
                      message=msg, stage="compile",
                      compile_s=timeout if ans == "timeout" else 0.0), False
    msg = ans.get("message", "")
    cls = ans.get("error_class")
    used, limit = ans.get("vmem_used"), ans.get("vmem_limit")
    if cls == "vmem-overflow" and used is None:
        used, limit = parse_vmem(msg)
    return _entry(job, ans["status"], error_class=cls, message=msg, vmem_used=used,
                  vmem_limit=limit, stage="compile", hint=hint_for(msg, cls or ""),
                  compile_s=ans.get("compile_s", 0.0),
                  source_line=_user_line(msg, job.gen, job.fallback_loc, cls or "")), True


def check(jobs: list[Job], timeout: float = 300.0, measure_vmem: bool = True) -> list[CheckEntry]:
    out: list[CheckEntry | None] = [lower_check(j) for j in jobs]
    todo = [i for i, e in enumerate(out) if e is None]
    for i, e in zip(todo, compile_checks([jobs[i] for i in todo], timeout, measure_vmem)):
        out[i] = e
    return [e for e in out if e is not None]
