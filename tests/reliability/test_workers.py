"""Worker processes die with their parent within 2 s, however the parent ends, even in the middle
of a job; and no run leaves files in the temporary directory."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATE = "kernel_dsl.autotune.candidate_worker"
CHECK = "kernel_dsl.lowering.pallas.check_worker"

# a parent that starts a worker, gives it a job that never ends, prints the worker's pid, waits
_PARENT = textwrap.dedent("""
    import json, signal, sys, time
    # Ctrl-C as in a terminal, even where this test was started with SIGINT ignored (a shell's
    # background job inherits SIG_IGN, and Python then installs no KeyboardInterrupt handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from kernel_dsl.workers import Worker
    w = Worker({module!r}, {{}}, 120)
    assert w.ready, w.stderr_tail()
    job = {{"id": 0, "source": "import time\\ntime.sleep(600)\\n", "entry": "k", "backend": "pallas",
           "target": "tpu-v5e", "topology": "v5e:1x1", "specs": [], "out_dtypes": [], "inputs": []}}
    w.proc.stdin.write(json.dumps(job).encode() + b"\\n")
    w.proc.stdin.flush()
    print(w.proc.pid, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def _worker_outlives(module: str, sig: signal.Signals) -> float:
    """Seconds the worker lived on after its parent got `sig` (busy in a job all along)."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT.format(module=module)],
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    time.sleep(0.5)  # the job is running
    assert _alive(pid)
    parent.send_signal(sig)
    t0 = time.monotonic()
    while _alive(pid) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    gone = time.monotonic() - t0
    parent.wait(timeout=30)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    return gone


def test_a_candidate_worker_dies_within_2s_of_its_parents_sigkill() -> None:
    assert _worker_outlives(CANDIDATE, signal.SIGKILL) < 2.0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
@pytest.mark.parametrize("module", [CANDIDATE, CHECK], ids=["candidate", "check"])
def test_workers_die_within_2s_of_their_parent(module: str, sig: signal.Signals) -> None:
    assert _worker_outlives(module, sig) < 2.0


_RUN = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {tests!r})
    from dsl_kernels import add_where
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    assert add_where.check(x, y, targets=["tpu-v5e"], measure_vmem=False).ok
    print(add_where.autotune(x, y, target="cpu", budget=30, use_cache=False).best, flush=True)
    print(add_where.autotune(x, y, target="tpu-v5e", budget=30, use_cache=False).best, flush=True)
""")


@pytest.mark.slow
def test_checking_and_tuning_leave_no_temporary_files(tmp_path: object) -> None:
    tmp = os.path.join(str(tmp_path), "tmp")
    os.makedirs(tmp)
    env = {**os.environ, "TMPDIR": tmp, "KD_CACHE_DIR": os.path.join(str(tmp_path), "cache")}
    env.pop("TPU_LOG_DIR", None)
    logs = "/tmp/tpu_logs"  # where libtpu logs when nobody tells it otherwise
    before = set(os.listdir(logs)) if os.path.isdir(logs) else set()
    out = subprocess.run([sys.executable, "-c", _RUN.format(tests=TESTS)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert os.listdir(tmp) == []
    after = set(os.listdir(logs)) if os.path.isdir(logs) else set()
    mine = [f for f in after - before if f.rsplit(".", 1)[-1].isdigit()]
    assert not mine, f"libtpu logs left behind: {mine[:3]}"
    assert out.stdout.count("Config(") == 2, out.stdout  # both runs found a winner


def test_candidate_workers_do_not_import_from_the_callers_directory(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `json.py` in the working directory must not run inside a candidate worker (as the
    compile workers' test in test_tpu_check.py, for the CPU evaluator's workers)."""
    import torch
    from dsl_kernels import add_where

    marker = os.path.join(str(tmp_path), "imported")
    with open(os.path.join(str(tmp_path), "json.py"), "w") as f:
        f.write(f"open({marker!r}, 'w').close()\nraise SystemExit('planted json.py was imported')\n")
    monkeypatch.chdir(str(tmp_path))
    monkeypatch.setenv("KD_CACHE_DIR", os.path.join(str(tmp_path), "cache"))
    x = torch.randn(8, 128)
    res = add_where.autotune(x, x, target="cpu", budget=30, use_cache=False)
    assert not os.path.exists(marker), "the candidate worker imported json.py from the caller's cwd"
    assert res.best is not None, res.table()
