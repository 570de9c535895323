"""Worker processes: compiles and autotuning candidates run in them, so a hang or a crash costs a
timeout and a restart, never the caller.

Both sides of one small protocol: each message is a JSON line, optionally followed by a raw
payload of `"payload"` bytes (tensor data; no pickle anywhere). Workers start isolated
(`python -P`: the caller's working directory is not on their `sys.path`) and die with their
parent: a watchdog thread polls the parent's pid, which covers SIGKILL of the parent, where no
cleanup of the parent's own can run. (`prctl(PR_SET_PDEATHSIG)` would fire when the *thread*
that started the worker exits, and the check pool starts workers from short-lived threads.)
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import IO, Any, Iterator

PARENT_ENV = "KD_PARENT_PID"
_POLL_S = 0.1  # how often a worker looks for its parent: it dies well within 2 s of it

Message = tuple[dict[str, Any], bytes]


# -- the worker's side ---------------------------------------------------------------------------
def die_with_parent() -> None:
    """In a worker: exit at once when the process that started it is gone."""
    parent = int(os.environ.get(PARENT_ENV, "0") or 0)
    if not parent:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_POLL_S)
        os._exit(1)  # reparented: the parent died, whatever the way

    threading.Thread(target=watch, daemon=True, name="kd-parent-watch").start()


class Channel:
    """The worker's end of the pipe. Anything else that writes to stdout (a library's print)
    goes to stderr instead, so it cannot corrupt the protocol."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._in = sys.stdin.buffer

    def send(self, msg: dict[str, Any], payload: bytes = b"") -> None:
        if payload:
            msg = {**msg, "payload": len(payload)}
        self._out.write(json.dumps(msg).encode() + b"\n" + payload)
        self._out.flush()

    def jobs(self) -> Iterator[Message]:
        while True:
            m = _read_message(self._in)
            if m is None:
                return  # the parent closed the pipe
            yield m


def _read_message(stream: IO[bytes]) -> Message | None:
    line = stream.readline()
    if not line:
        return None
    msg = json.loads(line)
    n = int(msg.get("payload", 0))
    data = stream.read(n) if n else b""
    if len(data) != n:
        return None  # the other side died mid-message
    return msg, data


# -- the parent's side ---------------------------------------------------------------------------
_LIVE: "weakref.WeakSet[Worker]" = weakref.WeakSet()


class Worker:
    """One worker process running `python -P -m module`; `ask` sends a job and waits for its
    answer with a timeout. A worker that timed out or died must be closed and replaced."""

    def __init__(self, module: str, env: dict[str, str | None], startup_timeout: float):
        """`env`: changes to this process's environment (None removes a variable)."""
        full = dict(os.environ)
        for k, v in env.items():
            if v is None:
                full.pop(k, None)
            else:
                full[k] = v
        full[PARENT_ENV] = str(os.getpid())
        # unlinked at creation: nothing is left on disk, whatever happens to either process
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", module], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=full)
        _LIVE.add(self)
        self._replies: queue.Queue[Message | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="kd-worker-read").start()
        hello = self._next(startup_timeout)
        self.ready = isinstance(hello, tuple)
        self.startup_failure = "" if self.ready else str(hello)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            try:
                m = _read_message(self.proc.stdout)
            except (ValueError, OSError):  # garbage on the pipe: treat as a dead worker
                m = None
            self._replies.put(m)
            if m is None:
                return

    def _next(self, timeout: float) -> Message | str:
        try:
            m = self._replies.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return "timeout"
        return "crash" if m is None else m

    def ask(self, job: dict[str, Any], timeout: float, payload: bytes = b"") -> Message | str:
        """(answer, payload), or "timeout" / "crash"."""
        if not self.ready:
            return "crash" if self.startup_failure == "crash" else "timeout"
        assert self.proc.stdin is not None
        if payload:
            job = {**job, "payload": len(payload)}
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n" + payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "crash"
        return self._next(timeout)

    def stderr_tail(self, lines: int = 8, drop: tuple[str, ...] = ()) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        kept = [ln for ln in text.splitlines() if ln.strip() and not any(d in ln for d in drop)]
        return "\n".join(kept[-lines:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self.stderr.close()
        _LIVE.discard(self)


@atexit.register
def _close_all() -> None:
    """A parent that exits normally (also after Ctrl-C) takes its workers with it at once."""
    for w in list(_LIVE):
        try:
            w.close()
        except Exception:  # noqa: BLE001  (exiting: one stuck worker must not keep the others)
            pass
