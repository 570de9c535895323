"""Autotune budgets hold on every evaluator: a hanging or crashing candidate costs at most one
candidate timeout, never wins, and a run killed midway resumes from the cache."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from dsl_kernels import add_where

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.autotune import tuner
from kernel_dsl.autotune.cache import TuningCache
from kernel_dsl.lowering.pallas import PallasBackend

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLACK_S = 4.0  # killing a worker, joining threads, writing the cache


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))


class PlantedPallas(PallasBackend):
    """Pallas whose CPU kernel for blocks [8, 128] hangs and for [8, 256] kills its process;
    only inside a candidate worker, which is where a timeout can act."""

    name = "planted_pallas"

    def render(self, ir, config, target):  # type: ignore[no-untyped-def]
        gen = super().render(ir, config, target)
        if list(config.block_sizes) == [8, 128]:
            gen.source = ("import os, time\nif os.environ.get('KD_CANDIDATE_WORKER'):\n"
                          "    time.sleep(600)\n" + gen.source)
        elif list(config.block_sizes) == [8, 256]:
            gen.source = ("import os\nif os.environ.get('KD_CANDIDATE_WORKER'):\n"
                          "    os._exit(9)\n" + gen.source)
        return gen


@pytest.fixture
def planted() -> kd.Kernel:
    lowering.register(PlantedPallas())
    try:
        yield kd.Kernel(add_where.fn, backend="planted_pallas")
    finally:
        lowering.unregister(PlantedPallas.name)


def test_interpret_budget_holds_with_a_hanging_and_a_crashing_candidate(planted: kd.Kernel) -> None:
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    budget, timeout = 30.0, 5.0
    t0 = time.monotonic()
    res = planted.autotune(x, y, target="cpu", budget=budget, timeout=timeout, strategy="exhaustive")
    wall = time.monotonic() - t0
    assert wall <= budget + timeout + SLACK_S, f"{wall:.1f} s for a {budget:.0f} s budget"
    by_blocks = {tuple(json.loads(c.config)["block_sizes"]): c for c in res.candidates}
    assert by_blocks[8, 128].status == "timeout", by_blocks[8, 128]
    assert by_blocks[8, 256].status == "failed" and "killed its worker" in by_blocks[8, 256].reason
    assert res.best is not None and res.best.block_sizes[0] == 16
    assert "timeout" in res.table()


def test_the_winner_is_never_a_candidate_that_did_not_run(planted: kd.Kernel) -> None:
    # a budget too small for anything but the reference: nothing unverified may win
    x, y = torch.randn(16, 128), torch.randn(16, 128)
    res = planted.autotune(x, y, target="cpu", budget=0.01, timeout=30, strategy="exhaustive")
    ran = {c.config for c in res.candidates if c.status == "ok"}
    assert res.best is None or res.best.to_json() in ran


_KILLED_RUN = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {tests!r})
    from dsl_kernels import add_where
    x, y = torch.randn(48, 384), torch.randn(48, 384)
    add_where.autotune(x, y, target="cpu", budget=600, strategy="exhaustive")
""")


def _settled(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for r in json.load(f)["records"] if r.get("status") in tuner.SETTLED)
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_a_run_killed_midway_resumes_from_the_cache(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN.format(tests=TESTS)], env=env)
    path = os.path.join(str(tmp_path), "autotune.json")
    deadline = time.monotonic() + 240
    while _settled(path) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _settled(path)
    assert before >= 3, "the killed run settled nothing in four minutes"
    x, y = torch.randn(48, 384), torch.randn(48, 384)
    res = add_where.autotune(x, y, target="cpu", budget=600, strategy="exhaustive",
                             cache=TuningCache(str(tmp_path), kd.__version__))
    assert not res.from_cache and res.resumed == before
    assert res.evaluations == len(add_where.configs(x, y)) and res.best is not None
    again = add_where.autotune(x, y, target="cpu", cache=TuningCache(str(tmp_path), kd.__version__))
    assert again.from_cache and again.best == res.best


class HangingCompile(PallasBackend):
    """Every TPU compile hangs (in the check worker only); CPU kernels are untouched."""

    name = "hanging_compile"

    def render(self, ir, config, target):  # type: ignore[no-untyped-def]
        gen = super().render(ir, config, target)
        if target != "cpu":
            gen.source = ("import os, time\nif os.environ.get('KD_CHECK_WORKER'):\n"
                          "    time.sleep(600)\n" + gen.source)
        return gen


@pytest.mark.slow
def test_model_budget_holds_when_every_compile_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    lowering.register(HangingCompile())
    try:
        k = kd.Kernel(add_where.fn)
        x, y = torch.empty(256, 512), torch.empty(256, 512)
        budget, timeout = 30.0, 10.0
        t0 = time.monotonic()
        res = k.autotune(x, y, target="tpu-v6e", backend="hanging_compile", budget=budget,
                         timeout=timeout, strategy="exhaustive", top_k=2)
        wall = time.monotonic() - t0
    finally:
        lowering.unregister(HangingCompile.name)
    assert wall <= budget + timeout + SLACK_S, f"{wall:.1f} s for a {budget:.0f} s budget"
    assert res.best is None
    assert any(c.status == "timeout" for c in res.candidates)
