"""benchmarks/published_winners.py (issue 17 "Show it"): the model's picks in the project's
space and the widened one next to the published best config, timed as published_compare.py
times that config."""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
import published_compare as pc  # noqa: E402
import published_winners as pw  # noqa: E402

from kernel_dsl import Config  # noqa: E402
from kernel_dsl.lowering.pallas.space import config_space  # noqa: E402

with open(os.path.join(HERE, "..", "benchmarks", "tpu_published.json")) as f:
    RECORDS = {r["id"]: r for r in json.load(f)["records"]}


def _check(row: dict, best: dict) -> None:
    sp, wp, pub = row["space_pick"], row["wide_pick"], row["published"]
    assert wp["model_s"] <= sp["model_s"]  # the widened space contains the project's
    ir = pc._build(dict(best, config=None))[0]
    assert Config.from_json(json.dumps(sp["config"])) in list(config_space(ir, row["target"]))
    assert pub["measured_s"] == best["measured"]["time_s"]
    it = {"rec": best, "ir": pc._build(best)[0], "target": row["target"], "how": "published",
          "cfgs": pc._build(best)[1], "epilogue": None,
          "wallclock": "timeit" in best.get("timing_method", "")}
    assert pub["model_s"] == pc.model_time(it)[2]


def test_flash_row_against_the_tokamax_winner() -> None:
    best = RECORDS["tokamax/v6e/pallas_mosaic_tpu_flash_attention/2x8192x16x128-kv16-causal"]
    row = pw._row("flash", "v6e", "2x8192x16x128-kv16-causal", dict(best, config=None), best)
    _check(row, best)
    assert row["published"]["as_config"]["block_sizes"] == [2048, 2048]


def test_matmul_row_adds_the_guides_dispatch() -> None:
    best = RECORDS["jax-matmul-guide/v5e/plain/bm512-bk1024-bn1024/4096x4096x4096"]
    row = pw._row("matmul", "v5e", "4096x4096x4096", dict(best, config=None), best)
    _check(row, best)
    assert row["wallclock"]
    assert row["published"]["model_s"] > pc.WALLCLOCK_DISPATCH_S
