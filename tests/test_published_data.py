"""benchmarks/tpu_published.json: every record says where its number comes from and what it is."""
from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
DATA = os.path.join(ROOT, "benchmarks", "tpu_published.json")
CHIPS = {"v4", "v5e", "v5p", "v6e", "v7x"}


@pytest.fixture(scope="module")
def data() -> dict:
    with open(DATA) as f:
        return json.load(f)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def test_header(data: dict) -> None:
    assert set(data) == {"header", "records"}
    assert data["header"]["what"] and data["header"]["gathered"]


def test_every_record_is_sourced_and_measured(data: dict) -> None:
    ids = set()
    for r in data["records"]:
        rid = r.get("id")
        assert rid and rid not in ids, rid
        ids.add(rid)
        for field in ("table", "source", "chip", "kernel", "implementation", "shape", "measured"):
            assert r.get(field) not in (None, "", {}), (rid, field)
        assert r["chip"] in CHIPS, rid
        src = r["source"]
        assert src["url"].startswith("https://"), rid
        assert src.get("quote") or src.get("section"), rid  # a reviewer can check the number
        m = r["measured"]
        t, tf = m.get("time_s"), m.get("tflops")
        ok_t = _number(t) or (isinstance(t, list) and t and all(_number(x) for x in t))
        ok_tf = _number(tf) or (isinstance(tf, list) and tf and all(_number(x) for x in tf))
        assert ok_t or ok_tf, rid
        assert "derived" in m, rid  # False, or how the figure was converted
        assert isinstance(r.get("compare"), bool), rid


def test_compared_records_have_a_time(data: dict) -> None:
    for r in data["records"]:
        if r["compare"]:
            assert _number(r["measured"]["time_s"]), r["id"]
            assert r["chip"] in CHIPS and r.get("compare_note"), r["id"]


def test_compare_script_on_a_sample(data: dict, tmp_path) -> None:
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import published_compare

    want = {"jax-matmul-guide/v5e/plain/bm512-bk1024-bn1024/8192x8192x8192",
            "jax-matmul-guide/v5e/plain/bm128-bk128-bn128/4096x4096x4096",
            "jax-matmul-guide/v5e/plain/bm512-bk1024-bn1024/4096x4096x4096"}
    sample = {"header": data["header"], "records": [r for r in data["records"] if r["id"] in want]}
    assert len(sample["records"]) == len(want)
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(sample))
    res = published_compare.run(str(path))
    assert len(res["rows"]) == 3
    for row in res["rows"]:
        assert row["config_from"] == "published" and row["model_s"] > 0
        assert row["ratio"] == pytest.approx(row["model_s"] / row["measured_s"])
    table = res["tables"]["jax_pallas_matmul_guide_v5e_plain"]
    assert table["n"] == 3 and table["spearman"] is not None
