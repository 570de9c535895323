"""The schedule-based evaluator (autotune/schedule.py): libtpu's scheduled bundles of a Pallas
kernel body, compiled for a compile-only TPU target in a fresh process (seconds each: slow)."""
from __future__ import annotations

import pytest
import torch
from dsl_kernels import matmul

from kernel_dsl import Config
from kernel_dsl.autotune import schedule

BF = torch.bfloat16


def _ir(n: int = 1024):  # type: ignore[no-untyped-def]
    return matmul.ir(torch.empty(n, n, dtype=BF, device="meta"),
                     torch.empty(n, n, dtype=BF, device="meta"))


@pytest.fixture(scope="module")
def profiles() -> dict[int, dict]:  # type: ignore[type-arg]
    ir = _ir()
    return {b: schedule.bundle_profile(ir, (), Config([b, b, b], loop_mode="grid"), "tpu-v5e")
            for b in (256, 512)}


@pytest.mark.slow
def test_small_matmul_has_bundles_and_a_grid_loop(profiles: dict) -> None:  # type: ignore[type-arg]
    p = profiles[256]
    assert p["total_bundles"] > 0 and p["parsed_bundles"] == p["total_bundles"]
    assert p["grid_steps"] == 64
    # the grid pipeline's loop runs the steps plus its prologue / epilogue stages
    assert p["grid_loop_trips"] == p["grid_steps"] + 2  # v5e: one TensorCore
    assert p["grid_loop_trips_is_core_steps_plus_2"]
    assert 0 < p["step_bundles_steady"] <= p["step_bundles"] <= p["step_bundles_all_regions"]
    est = schedule.schedule_estimate(_ir(), Config([256, 256, 256], loop_mode="grid"),
                                     "tpu-v5e", p)
    assert est["seconds"] > 0 and est["bound"] in ("compute", "dma")


@pytest.mark.slow
def test_bigger_block_gives_more_bundles_per_step(profiles: dict) -> None:  # type: ignore[type-arg]
    small, big = profiles[256], profiles[512]
    assert big["step_bundles"] > 2 * small["step_bundles"]  # 8x the MXU work per step
    # and the MXU work sets it: 512^3 bf16 at v5e's 197 TFLOP/s is ~1.36 us a step
    assert 1.0e-6 < big["step_compute_s"] < 3.0e-6


@pytest.mark.slow
def test_inner_fori_loop_trips_multiply_its_body() -> None:
    p = schedule.bundle_profile(_ir(), (), Config([512, 512, 256], loop_mode="inner"), "tpu-v5e")
    inner = [lp for lp in p["loops"] if lp["depth"] == 2]
    assert len(inner) == 1 and inner[0]["trips"] == 4  # fori_loop over 1024 / 256 k blocks
    assert p["step_bundles_all_regions"] > 3 * inner[0]["static_bundles"]


def test_parser_rejects_a_directory_without_the_dump(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "123-TLP-72-schedule-analysis_final_bundles.txt").write_text(
        "total scheduled bundles: 5\n")
    with pytest.raises(schedule.ScheduleDumpError, match="_lambda_.*final_bundles"):
        schedule.read_dump(str(tmp_path))


def test_parser_reads_loops_trips_and_branches() -> None:
    text = "\n".join([
        "   0   :  { %1 = smov.u32 0 }",
        "  0x1 LB: > { %2 = sadd.s32 1, %s3_s1  ;;  %p4_p0 = scmp.ge.s32.totalorder %s3_s1, 6 "
        "/* loop exit test */ }",
        "  0x2   : > { %5 = sbr.rel (%p9_p1) target = $region7 }",
        "  0x3   :  {}",
        "  0x4   : > { %6 = vst [vmem:[#a]] %v1 }",
        "  0x5 PF: > { %7 = vld [vmem:[#a]] } /* Start/End empty region 7 */",
        "  0x6   : > { %8 = sbr.rel (!%p4_p0) target = $region2 }",
        "  0x7   :  { %9 = vsyncpa [#b], 1 }",
    ])
    s = schedule.parse_final_bundles(text)
    assert s.total == 8 and s.bundles[3] == 1  # the empty bundle sits inside the loop
    assert [(lp.start, lp.end, lp.trips) for lp in s.loops] == [(1, 6, 6)]
    assert [(b.at, b.target, b.bundles) for b in s.branches] == [(2, 5, 2)]


def test_overhead_variant_adds_the_models_serial_cost_per_step() -> None:
    """`seconds_with_overhead` adds what a static schedule cannot see, as the analytical model
    prices it: step_s plus dma_issue_s per block DMA on every step (the calibrated model keeps
    most of it in step_s: adding dma_issue_s alone left 128-blocks ~2x too fast)."""
    from kernel_dsl.autotune import cost_model

    cfg = Config([128, 128, 128], loop_mode="grid")
    steps = 8 ** 3
    cal = cost_model.CALIBRATION["tpu-v5e"]
    # compute-bound steps (1 us each, far above the DMA), no code outside the grid loop
    prof = {"clock_hz": 1e9, "grid_steps": steps, "step_compute_s": 1e-6, "outside_loop_bundles": 0}
    est = schedule.schedule_estimate(_ir(), cfg, "tpu-v5e", prof)
    assert est["bound"] == "compute" and est["overhead_step_s"] > cal.step_s
    extra = est["seconds_with_overhead"] - est["seconds"]
    assert extra == pytest.approx(est["core_steps"] * est["overhead_step_s"])
    assert extra >= est["core_steps"] * cal.step_s


def test_objective_falls_back_to_the_analytical_model_without_a_clock() -> None:
    from kernel_dsl.autotune import cost_model
    from kernel_dsl.lowering.pallas.targets import TARGETS

    log: list[dict] = []  # type: ignore[type-arg]
    cfg = Config([256, 256, 256], loop_mode="grid")
    obj = schedule.schedule_objective(_ir(), "tpu-v6e", log=log)
    assert obj(cfg) == cost_model.estimate(_ir(), cfg, TARGETS["tpu-v6e"]).seconds
    assert log[0]["evaluator"] == "analytical" and "no clock" in log[0]["reason"]


@pytest.mark.slow
def test_objective_ranks_with_the_schedule_on_v5e() -> None:
    log: list[dict] = []  # type: ignore[type-arg]
    obj = schedule.schedule_objective(_ir(), "tpu-v5e", log=log)
    small, big = obj(Config([128, 128, 128], loop_mode="grid")), obj(
        Config([512, 512, 512], loop_mode="grid"))
    assert [e["evaluator"] for e in log] == ["schedule", "schedule"]
    assert 0 < big < small  # 512 steps 64x fewer grid steps: cheaper end to end


# -- the schedule as an autotune evaluator (`kernel.autotune(evaluator="schedule")`) --------------
def test_schedule_evaluator_refuses_targets_without_a_clock_and_the_cpu() -> None:
    from kernel_dsl.errors import ConfigError

    args = (torch.empty(256, 256, dtype=BF), torch.empty(256, 256, dtype=BF))
    with pytest.raises(ConfigError, match="no TensorCore clock for tpu-v6e"):
        matmul.autotune(*args, target="tpu-v6e", evaluator="schedule", budget=5)
    with pytest.raises(ConfigError, match="does not apply to target 'cpu'"):
        matmul.autotune(*args, target="cpu", evaluator="schedule", budget=5)


@pytest.mark.slow
def test_schedule_evaluator_reprices_the_best_modelled_configs(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two configs re-priced from the compiler's schedule, tried first in schedule order; the
    winner is cached under the schedule's own key, which later calls prefer."""
    from kernel_dsl.autotune import tuner

    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))
    args = (torch.empty(1024, 1024, dtype=BF), torch.empty(1024, 1024, dtype=BF))
    res = matmul.autotune(*args, target="tpu-v5e", evaluator="schedule", rerank=2, budget=120)
    priced = [c for c in res.candidates if c.priced_by is not None]
    assert res.evaluator == "schedule" and len(priced) == 2, res.table()
    for c in priced:  # a schedule under the MXU's peak time is not a cycle count: model price
        assert c.priced_by in ("schedule", "model: schedule unusable"), c
    assert res.best is not None and res.best_candidate in priced, res.table()
    assert res.best_candidate.seconds == min(c.seconds for c in priced)
    assert f"({res.best_candidate.priced_by})" in res.table()
    ir = matmul.ir(*args)
    key = tuner.cache_key(matmul, ir, "pallas", "tpu-v5e", "schedule")
    assert tuner.cached_best(tuner.TuningCache(version=tuner.__version__), key)[0] == res.best
    assert tuner.tuned_config(matmul, ir, "pallas", "tpu-v5e") == res.best
    assert matmul.autotune(*args, target="tpu-v5e", evaluator="schedule", budget=120).from_cache


def test_a_config_compiled_for_its_schedule_is_not_compiled_again(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The schedule's compile is the verification compile (issue 17, item 2): configs whose
    pricing compile succeeded go straight to the CPU check; only the others are compiled."""
    from kernel_dsl.autotune import cost_model
    from kernel_dsl.check import CheckEntry
    from kernel_dsl.lowering.pallas import BACKEND
    from kernel_dsl.lowering.pallas.targets import TARGETS

    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))
    args = (torch.empty(256, 256, dtype=BF), torch.empty(256, 256, dtype=BF))
    priced: list[str] = []

    def fake_objective(ir, target, *, with_overhead=False, log=None, **_):  # type: ignore[no-untyped-def]
        def objective(cfg: Config) -> float:  # a stand-in for the libtpu compile with dumps
            seconds = cost_model.estimate(ir, cfg, TARGETS[target]).seconds
            log.append({"config": cfg.to_json(), "compiled": True, "evaluator": "schedule",
                        "seconds": seconds})
            priced.append(cfg.to_json())
            return seconds
        return objective

    compiled: list[str] = []

    def fake_check(ir, gens, timeout, measure_vmem, deadline=None):  # type: ignore[no-untyped-def]
        if not measure_vmem:  # verification compiles (the winner's VMEM search is apart)
            compiled.extend(g.config.to_json() for g in gens)  # the others: "fail" to compile
        return [CheckEntry(g.target, "failed", g.config.to_json(), "compile", "stand-in")
                for g in gens]

    monkeypatch.setattr(schedule, "schedule_objective", fake_objective)
    monkeypatch.setattr(BACKEND, "check", fake_check)
    res = matmul.autotune(*args, target="tpu-v5e", evaluator="schedule", rerank=2, budget=60)
    assert len(priced) == 2 and not set(priced) & set(compiled)
    assert res.best is not None and res.best_candidate.config in priced, res.table()
    assert res.best_candidate.status == "ok" and res.best_candidate.priced_by == "schedule"
    assert all(c.status != "compiled" for c in res.candidates)
