"""Autotuning candidates run on the CPU in a worker process, each under a timeout.

The worker gets what the in-process path would run: the generated source of one config and the
argument tensors (raw bytes, no pickle); it answers the outputs and the run times. A candidate
that hangs or kills its worker is a "timeout" or "failed" candidate, and the next one gets a
fresh worker; the caller's process never runs a candidate's code.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from kernel_dsl.lowering import Generated
from kernel_dsl.workers import Worker

WORKER = "kernel_dsl.autotune.candidate_worker"
BUILTIN = ("pallas", "triton", "nki")  # backends the worker can run (it imports no user code)
STARTUP_S = 120.0  # importing torch and JAX in a fresh worker


def pack(tensors: list[torch.Tensor]) -> tuple[list[tuple[list[int], str]], bytes]:
    """(shape, dtype name) per tensor, and their bytes back to back."""
    specs, chunks = [], []
    for t in tensors:
        # a copy: `.numpy()` marks a storage non-resizable for good (FSDP2 frees its storages)
        t = t.detach().clone(memory_format=torch.contiguous_format)
        specs.append((list(t.shape), str(t.dtype).removeprefix("torch.")))
        chunks.append(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return specs, b"".join(chunks)


def unpack(specs: list[tuple[list[int], str]], data: bytes) -> list[torch.Tensor]:
    buf = bytearray(data)  # writable: torch.frombuffer warns on read-only memory
    out, at = [], 0
    for shape, name in specs:
        dtype = getattr(torch, name)
        n = torch.Size(shape).numel() * dtype.itemsize
        t = torch.frombuffer(buf, dtype=torch.uint8, count=n, offset=at) if n else \
            torch.empty(0, dtype=torch.uint8)
        out.append(t.view(dtype).reshape(shape).clone())
        at += n
    return out


@dataclass
class Outcome:
    status: str  # "ok" | "failed" | "timeout" | "budget" (cut short by the caller's deadline)
    outputs: list[torch.Tensor] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    message: str = ""


class CandidateRunner:
    """One worker at a time, restarted after a timeout or crash. Sequential on purpose: the CPU
    times of candidates run side by side would measure each other."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def run(self, gen: Generated, out_dtypes: list[str], tensors: list[torch.Tensor],
            timeout: float, left: float, repeats: int = 3) -> Outcome:
        """Runs `gen` once to build and warm up, then `repeats` timed times. `timeout` is the
        candidate's own limit, `left` what remains of the caller's budget."""
        end = time.monotonic() + left
        if left <= 0:
            return Outcome("budget", message="not run: the autotune budget ran out")
        if self.worker is None:  # a worker's start is not the candidate's time, but the budget's
            self.worker = Worker(WORKER, {"KD_CANDIDATE_WORKER": "1"}, min(STARTUP_S, left))
        wait = min(timeout, end - time.monotonic())
        specs, data = pack(tensors)
        ans = self.worker.ask({"source": gen.source, "entry": gen.entry, "backend": gen.backend,
                               "target": gen.target, "out_dtypes": out_dtypes, "inputs": specs,
                               "repeats": repeats}, wait, data)
        if isinstance(ans, str):
            tail = self.worker.stderr_tail(lines=4)
            started = self.worker.ready
            self.close()
            if not started and ans == "crash":
                return Outcome("failed", message=f"the worker process did not start: {tail}")
            if ans == "timeout":
                if wait < timeout:
                    return Outcome("budget", message="stopped: the autotune budget ran out")
                return Outcome("timeout", message=f"did not finish within {timeout:.0f} s")
            return Outcome("failed", message="the candidate killed its worker process" +
                           (f": {tail.splitlines()[-1]}" if tail else ""))
        msg, payload = ans
        if msg.get("status") != "ok":
            return Outcome("failed", message=msg.get("message", "failed"))
        return Outcome("ok", unpack(msg["outputs"], payload), list(msg["times"]))

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def __enter__(self) -> "CandidateRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
