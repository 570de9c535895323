"""The autotuner: strategies, the analytical TPU model, the persistent cache (concurrency,
corruption), fault handling, cache hits and the CLI."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import warnings

import pytest
import torch
from dsl_kernels import add_where, matmul

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.autotune import cost_model, search, tuner
from kernel_dsl.autotune.cache import SCHEMA, TuningCache
from kernel_dsl.lowering.pallas import PallasBackend
from kernel_dsl.lowering.pallas.targets import tpu_target

E, BF = torch.empty, torch.bfloat16


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))


# -- strategies ---------------------------------------------------------------------------------
def _bowl(cfg: kd.Config) -> float:
    a, b = cfg.block_sizes
    return (a - 64) ** 2 + (b - 256) ** 2 + (0 if cfg.knobs["mode"] == "x" else 5)


SPACE = kd.ConfigSpace([[8, 16, 32, 64, 128, 256], [128, 256, 512, 1024]], {}, {"mode": ["x", "y"]})


@pytest.mark.parametrize("name", list(search.STRATEGIES))
def test_every_strategy_finds_the_minimum_of_a_bowl(name: str) -> None:
    seen = list(search.STRATEGIES[name](SPACE, kd.Config([8, 1024], mode="y"), _bowl, 10.0))
    best = min(seen, key=lambda t: t[1])[0]
    assert best == kd.Config([64, 256], mode="x")
    assert len({c for c, _ in seen}) == len(seen) <= len(SPACE)


def test_pattern_search_needs_fewer_evaluations_than_exhaustive_on_a_bowl() -> None:
    seen = []
    for cfg, val in search.pattern(SPACE, kd.Config([8, 1024], mode="y"), _bowl, 10.0):
        seen.append(val)
        if val == 0:
            break
    assert len(seen) < len(SPACE) / 2


# -- the analytical model ----------------------------------------------------------------------
def test_fetch_count_skips_unchanged_blocks() -> None:
    assert cost_model._fetches({0, 2}, (8, 4, 4)) == 8 * 4 * 4  # x[i, k] in an (i, j, k) grid
    assert cost_model._fetches({0}, (8, 4, 4)) == 8  # out[i] stays put while j, k move
    assert cost_model._fetches({0, 1}, (8, 4, 1)) == 32
    assert cost_model._fetches(set(), (8, 4, 4)) == 1


def test_model_time_grows_with_the_problem_and_respects_the_roofline() -> None:
    v6e = tpu_target("tpu-v6e")
    cfg = kd.Config([512, 1024, 1024], loop_mode="grid")
    small = cost_model.estimate(matmul.ir(E(2048, 2048, dtype=BF), E(2048, 2048, dtype=BF)), cfg, v6e)
    big = cost_model.estimate(matmul.ir(E(4096, 4096, dtype=BF), E(4096, 4096, dtype=BF)), cfg, v6e)
    assert big.flops == 8 * small.flops and big.seconds > 4 * small.seconds
    assert big.seconds >= max(big.mxu_seconds, big.hbm_seconds)
    assert 0 < big.utilization(v6e) <= 1
    # x is re-read once per column block of the output, y once per row block
    x_bytes = 4096 * 4096 * 2 * (4096 // 1024)
    y_bytes = 4096 * 4096 * 2 * (4096 // 512)
    assert big.hbm_bytes == x_bytes + y_bytes + 4096 * 4096 * 2
    assert matmul.estimate(E(4096, 4096, dtype=BF), E(4096, 4096, dtype=BF), target="tpu-v6e",
                           config=cfg) == big.seconds


# -- the cache ----------------------------------------------------------------------------------
def _c(i: int) -> str:
    """A config's JSON (the cache keeps only records whose config parses as one)."""
    return kd.Config([i + 1]).to_json()


def _writer(path: str, who: int) -> None:
    cache = TuningCache(path, version="t")
    for i in range(25):
        cache.add({"kernel": "k", "who": who}, [{"config": _c(i), "status": "ok", "seconds": i}])


def test_concurrent_writers_lose_no_record(tmp_path: object) -> None:
    d = str(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(d, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = TuningCache(d, version="t")
    for w in range(4):
        assert sorted(r["config"] for r in cache.records({"kernel": "k", "who": w})) == \
            sorted(_c(i) for i in range(25))


@pytest.mark.parametrize("content", ['{"schema": 1, "records": [{"key": {"ker', "not json at all",
                                     json.dumps({"schema": SCHEMA + 1, "records": []}),
                                     json.dumps([1, 2, 3])])
def test_corrupt_truncated_or_foreign_files_are_ignored_with_a_warning(tmp_path: object,
                                                                       content: str) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    os.makedirs(cache.dir, exist_ok=True)
    with open(cache.path, "w") as f:
        f.write(content)
    with pytest.warns(UserWarning, match="autotune cache"):
        assert cache.records({"kernel": "k"}) == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache.add({"kernel": "k"}, [{"config": _c(1), "status": "ok", "seconds": 1.0}])
    assert [r["config"] for r in cache.records({"kernel": "k"})] == [_c(1)]  # file repaired


def test_lookups_parse_the_file_once_until_it_changes(tmp_path: object,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    cache.add({"kernel": "k"}, [{"config": _c(1), "status": "ok", "seconds": 1.0}])
    from kernel_dsl.autotune import cache as cache_mod
    cache_mod._PARSED.clear()  # as in a new process
    parses = []
    real = TuningCache._read
    monkeypatch.setattr(TuningCache, "_read", lambda self: parses.append(1) or real(self))
    for _ in range(3):
        assert [r["config"] for r in cache.records({"kernel": "k"})] == [_c(1)]
    assert len(parses) == 1
    # an add (once per candidate) does not parse the file again when only this process wrote it
    TuningCache(str(tmp_path), version="t").add({"kernel": "k"}, [{"config": _c(2), "status": "ok"}])
    assert sorted(r["config"] for r in cache.records({"kernel": "k"})) == [_c(1), _c(2)]
    assert len(parses) == 1
    os.utime(cache.path, ns=(1, 1))  # changed by someone else: parsed again
    assert len(cache.records({"kernel": "k"})) == 2 and len(parses) == 2


def test_unknown_record_fields_are_kept() -> None:
    cache = TuningCache(version="t")
    cache.add({"kernel": "k"}, [{"config": _c(1), "status": "ok", "seconds": 1.0, "from_v2": [1]}])
    assert cache.records({"kernel": "k"})[0]["from_v2"] == [1]
    assert cache.records({"kernel": "other"}) == []
    assert TuningCache(version="u").records({"kernel": "k"}) == []  # another package version


# -- tuning on the CPU interpreter --------------------------------------------------------------
def test_interpret_autotune_picks_a_correct_config_and_calls_use_it() -> None:
    x, y = torch.randn(24, 300), torch.randn(24, 300)
    res = add_where.autotune(x, y, target="cpu", budget=60, strategy="exhaustive")
    assert res.evaluator == "interpret" and res.best is not None and not res.from_cache
    assert res.evaluations == len(add_where.configs(x, y))
    assert "not performance" in res.table()
    again = add_where.autotune(x, y, target="cpu", budget=60)
    assert again.from_cache and again.best == res.best
    # a plain call with these shapes now renders the tuned config
    assert repr(res.best) in add_where.source(x, y)


# -- faults: raise, hang, wrong result, VMEM overflow -------------------------------------------
class FaultyPallas(PallasBackend):
    """Pallas with planted faults, chosen by the first block size of a config."""

    name = "faulty_pallas"

    def render(self, ir, config, target):  # type: ignore[no-untyped-def]
        gen = super().render(ir, config, target)
        b = config.block_sizes[0]
        if b == 8 and target != "cpu":
            gen.source = "raise RuntimeError('planted: the compiler raised')\n" + gen.source
        elif b == 16 and target != "cpu":
            # a compile that hangs: only in the check worker, where the timeout applies
            gen.source = ("import os, time\nif os.environ.get('KD_CHECK_WORKER'):\n"
                          "    time.sleep(600)\n" + gen.source)
        elif b == 32 and target != "cpu":
            gen.source = gen.source.replace("VMEM_LIMIT_BYTES = ", "VMEM_LIMIT_BYTES = 65536  # ")
        elif b == 64 and target == "cpu":
            gen.source = gen.source.replace("out_ref[...] = v", "out_ref[...] = 1 + v")
        return gen


@pytest.mark.slow
def test_faulty_candidates_are_skipped_with_their_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    lowering.register(FaultyPallas())
    try:
        _faulty_candidates_are_skipped(monkeypatch)
    finally:  # later tests fuzz "every registered backend": the planted faults must not leak there
        lowering.unregister(FaultyPallas.name)


def _faulty_candidates_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    kd.Kernel(add_where.fn)  # ops for the new backend
    x, y = E(256, 512), E(256, 512)
    real = cost_model.estimate

    def ranked(ir, cfg, tgt):  # type: ignore[no-untyped-def]
        est = real(ir, cfg, tgt)
        est.seconds = {8: 1.0, 16: 2.0, 32: 3.0, 64: 4.0}.get(cfg.block_sizes[0], 10.0) * 1e-6 * \
            cfg.block_sizes[1]
        return est

    monkeypatch.setattr(tuner, "estimate", ranked)
    k = kd.Kernel(add_where.fn)
    res = k.autotune(x, y, target="tpu-v6e", backend="faulty_pallas", strategy="exhaustive",
                     budget=300, timeout=15, top_k=len(k.configs(x, y, backend="faulty_pallas")))
    status = {json.loads(c.config)["block_sizes"][0]: (c.status, c.reason) for c in res.candidates
              if json.loads(c.config)["block_sizes"][1] == 128}
    assert status[8][0] == "failed" and "planted" in status[8][1]
    assert status[16][0] == "timeout"
    assert status[32][0] == "failed" and "vmem" in status[32][1]
    assert status[64][0] == "wrong" and "differ" in status[64][1]
    assert res.best is not None and res.best.block_sizes[0] not in (8, 16, 32, 64)
    assert res.failures()["failed"] >= 2


def test_cpu_check_reference_is_a_cheap_different_tiling() -> None:
    """The tuner's CPU check compares a winner with a reference config on a reduced problem
    (two of the winner's blocks a dim): the default's blocks, raised to a quarter of the
    winner's, so 2048-blocks cut to 4096^3 are checked against 512-blocks (8^3 interpreted
    steps), not the default's 128-blocks (32768 steps, past the candidate timeout)."""
    be = PallasBackend()
    cfg = kd.Config([2048, 2048, 2048], loop_mode="grid")
    small = tuner._reduced_args(matmul.ir(E(8192, 8192, dtype=BF), E(8192, 8192, dtype=BF)),
                                (E(8192, 8192, dtype=BF), E(8192, 8192, dtype=BF)), cfg)
    assert [tuple(a.shape) for a in small] == [(4096, 4096), (4096, 4096)]
    ref = tuner._reference_config(be, matmul.ir(*small), cfg)
    default = be.default_config(matmul.ir(*small), be.cpu_target)
    assert ref.block_sizes == (512, 512, 512) and ref.knobs == default.knobs and ref != cfg
    # small candidates keep the default's blocks (never below them)
    few = tuner._reference_config(be, matmul.ir(E(256, 256), E(256, 256)), kd.Config([128, 128, 128]))
    assert few.block_sizes == default.block_sizes


# -- offline TPU tuning at real sizes: slow tier ------------------------------------------------
# 8192^3 on v5e/v6e once spent the budget on the CPU check's reference run (the default config,
# 32768 interpreted steps at the reduced 4096^3) and on VMEM searches of every candidate
CASES = [(t, n) for t in ("tpu-v5e", "tpu-v6e", "tpu-v7x") for n in (4096, 8192)]


@pytest.mark.slow
@pytest.mark.parametrize("target, n", CASES)
def test_offline_autotune_bf16_matmul_within_budget(n: int, target: str) -> None:
    import time

    args = (E(n, n, dtype=BF), E(n, n, dtype=BF))
    t0 = time.monotonic()
    res = matmul.autotune(*args, target=target, budget=150)
    # the documented bound: the budget plus one candidate timeout (120 s), as a compile begun
    # before the budget ends may run to its timeout (blocks up to 4096 compile for minutes)
    assert time.monotonic() - t0 < 150 + 120 + 30
    assert res.best is not None and res.best_candidate.status == "ok", res.table()
    assert 0.3 < res.best_candidate.utilization <= 1.0
    assert matmul.check(*args, targets=[target], config=res.best, measure_vmem=False).ok
    assert matmul.autotune(*args, target=target, budget=150).from_cache


def test_cli_autotune_json_and_plot(tmp_path: object) -> None:
    path = os.path.join(os.path.dirname(__file__), "dsl_kernels.py")
    png = os.path.join(str(tmp_path), "search.png")
    r = subprocess.run([sys.executable, "-m", "kernel_dsl", "autotune", f"{path}:add_where",
                        "--shapes", "16x256", "16x256", "--target", "cpu", "--budget", "30s",
                        "--json", "--plot", png], capture_output=True, text=True,
                       env=dict(os.environ, KD_CACHE_DIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["best"]["block_sizes"] and out["evaluator"] == "interpret"
    assert os.path.getsize(png) > 10_000
