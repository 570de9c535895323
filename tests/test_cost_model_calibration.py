"""The calibrated TPU cost model against published real-TPU points (issue 17).

benchmarks/published_compare.py compares every published point; this keeps the Tokamax
flash-attention caches (published configs, no config search: fast) in the suite: the share of
points of at least 1 ms within 10% and the worst of them, fit set (v5p, v6e) and held out
(TPU7x, never fitted; its vector-rate rule was chosen after seeing its residuals, REPORT.md
§8) apart, no worse than REPORT.md §8 states; a few large points each; the measured order of
a small table; Tokamax's layout transposes counted.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
import published_compare as pc  # noqa: E402

from kernel_dsl.autotune import cost_model  # noqa: E402

with open(os.path.join(HERE, "..", "benchmarks", "tpu_published.json")) as f:
    RECORDS = {r["id"]: r for r in json.load(f)["records"]}

FA = "tokamax/{chip}/pallas_mosaic_tpu_flash_attention/{shape}"
HELD_OUT = [FA.format(chip="v7x", shape=s) for s in (
    "1x16384x16x128-kv16", "2x8192x32x64-kv32-causal", "4x4096x16x128-kv16-res",
    "1x16384x8x256-kv8")]
FIT = [FA.format(chip=c, shape=s) for c, s in (
    ("v6e", "2x8192x16x128-kv16-causal"), ("v5p", "2x8192x16x128-kv16"),
    ("v6e", "1x16384x16x128-kv16"))] + ["jax-matmul-guide/v5e/plain/bm512-bk1024-bn1024/8192x8192x8192"]


def _ratio(rid: str) -> float:
    rec = RECORDS[rid]
    ir, cfgs, how = pc._build(rec)
    assert how == "published"
    it = {"rec": rec, "ir": ir, "target": pc.CHIP_TARGET[rec["chip"]], "how": how, "cfgs": cfgs,
          "wallclock": "timeit" in rec.get("timing_method", ""), "epilogue": None}
    sh = rec["shape"]
    if rec["kernel"].endswith("attention_fwd") and sh.get("return_residuals"):
        r = pc._meta((sh["batch"] * sh["heads_q"] * sh["seq_q"], pc.LANES), pc.torch.float32)
        it["epilogue"] = pc.residual_epilogue.ir(r, r)
    return pc.model_time(it)[2] / rec["measured"]["time_s"]


@pytest.mark.parametrize(("chips", "within", "of", "worst"), [
    (("v5p", "v6e"), 95, 101, 0.14),  # fit set: REPORT.md §8 (95 of 101, worst 14%)
    (("v7x",), 46, 47, 0.18),  # held out: REPORT.md §8 (46 of 47, worst 18%)
])
def test_flash_attention_caches_stay_within_the_reported_error(
        chips: tuple[str, ...], within: int, of: int, worst: float) -> None:
    ratios = [_ratio(rid) for rid, r in RECORDS.items()
              if r["table"].startswith("tokamax_autotune_cache") and r["chip"] in chips
              and r["kernel"] == "flash_attention_fwd" and r.get("compare")
              and r["measured"]["time_s"] >= 1e-3]
    assert len(ratios) == of
    assert sum(abs(x - 1) <= 0.10 for x in ratios) >= within
    assert max(abs(x - 1) for x in ratios) <= worst


@pytest.mark.parametrize("rid", HELD_OUT)
def test_large_held_out_tpu7x_points(rid: str) -> None:
    assert RECORDS[rid]["measured"]["time_s"] >= 1e-3
    assert 0.90 <= _ratio(rid) <= 1.10


@pytest.mark.parametrize("rid", FIT)
def test_fit_points_are_within_ten_percent(rid: str) -> None:
    assert 0.90 <= _ratio(rid) <= 1.10


def test_model_keeps_the_measured_order_across_head_dims_and_masks() -> None:
    # (the model does swap 1x16384x8x256 and 1x16384x16x128-causal, 6% apart: REPORT.md §8)
    ids = [FA.format(chip="v6e", shape=s) for s in (
        "1x16384x32x64-kv32", "1x16384x16x128-kv16", "2x8192x16x128-kv16",
        "1x16384x16x128-kv16-causal", "1x16384x8x256-kv8-causal")]
    measured = [RECORDS[i]["measured"]["time_s"] for i in ids]
    modelled = [_ratio(i) * m for i, m in zip(ids, measured)]
    assert sorted(range(5), key=modelled.__getitem__) == sorted(range(5), key=measured.__getitem__)


def test_tokamax_records_add_their_xla_layout_transposes() -> None:
    rec = RECORDS[FA.format(chip="v6e", shape="1x16384x16x128-kv16")]
    n = 16384 * 16 * 128
    assert pc.tokamax_transpose_bytes(rec) == 2 * 2 * 4 * n  # q, k, v, out: read + write bf16
    gqa = RECORDS["tokamax/v7x/pallas_mosaic_tpu_flash_attention/32x4096x32x128-kv8-causal"]
    q = 32 * 4096 * 32 * 128
    assert pc.tokamax_transpose_bytes(gqa) == 2 * 2 * (2 * q + 2 * q // 4)  # k, v at 8 heads
    splash = next(r for r in RECORDS.values() if r["table"].startswith("tokamax_splash"))
    assert pc.tokamax_transpose_bytes(splash) == 0.0  # timed on [heads, seq, d] directly


def test_causal_block_skipping_counts_the_visible_block_pairs() -> None:
    assert pc.causal_live_fraction(4096, 4096, 1024, 1024) == (1 + 2 + 3 + 4) / 16
    assert pc.causal_live_fraction(4096, 4096, 4096, 4096) == 1.0
    assert pc.causal_live_fraction(4096, 4096, 2048, 1024) == (2 + 4) / 8


def test_tokamax_masks_only_the_diagonal_block_pairs() -> None:
    assert pc.causal_masked_share(4096, 4096, 1024, 1024) == 4 / 10  # the 4 diagonal of 10 visited
    assert pc.causal_masked_share(1024, 1024, 1024, 1024) == 1.0
    assert pc.causal_masked_share(4096, 4096, 2048, 1024) == 4 / 6  # 2 + 2 cut, 2 whole
    assert pc.causal_masked_share(1024, 2048, 1024, 1024) == 1 / 2  # bottom-right: kv block 0 whole
    # priced between the unmasked kernel and one that masks every visited block
    rec = RECORDS[FA.format(chip="v6e", shape="2x8192x16x128-kv16-causal")]
    ir, (cfg,), _ = pc._build(rec)
    tgt = pc.TARGETS["tpu-v6e"]
    live = pc._live(rec, cfg)
    every = cost_model.estimate(ir, cfg, tgt, live_fraction=live).seconds
    none = cost_model.estimate(pc.unmasked_ir(rec), cfg, tgt, live_fraction=live).seconds
    diag = pc._estimate(rec, ir, pc.unmasked_ir(rec), cfg, "tpu-v6e").seconds
    share = pc.causal_masked_share(8192, 8192, 2048, 2048)
    assert none < diag < every and diag == pytest.approx(none + share * (every - none))


def test_every_target_has_a_calibration() -> None:
    from kernel_dsl.lowering.pallas.targets import TARGETS
    assert set(TARGETS) <= set(cost_model.CALIBRATION)
    for cal in cost_model.CALIBRATION.values():
        assert 0 < cal.mxu_efficiency <= 1 and 0 < cal.hbm_efficiency <= 1
