"""The persistent autotune cache loses nothing (issue 16): bad records are skipped, unusable files
are moved aside rather than overwritten, unwritable places keep results in memory, a planted lock
symlink is not followed, a failed write leaves no temp file, sizes are bounded, and concurrent or
killed writers lose no record."""
from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import subprocess
import sys
import time
import warnings
from typing import Any

import pytest

import kernel_dsl as kd
from kernel_dsl.autotune import cache as cache_mod
from kernel_dsl.autotune import tuner
from kernel_dsl.autotune.cache import SCHEMA, TuningCache

KEY = {"kernel": "k"}
FULL = {"kernel": "k", "version": "t"}


def _c(i: int) -> str:
    """A config's JSON (block sizes are positive)."""
    return kd.Config([i + 1]).to_json()


def _ok(i: int, seconds: float = 1.0) -> dict[str, Any]:
    return {"config": _c(i), "status": "ok", "seconds": seconds}


def _write(cache: TuningCache, content: str | bytes) -> bytes:
    os.makedirs(cache.dir, exist_ok=True)
    raw = content.encode() if isinstance(content, str) else content
    with open(cache.path, "wb") as f:
        f.write(raw)
    return raw


def _file(records: list[Any]) -> str:
    return json.dumps({"schema": SCHEMA, "records": records})


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("kernel_dsl: ")]


def _configs(cache: TuningCache, key: dict[str, Any] = KEY) -> list[str]:
    return sorted(r["config"] for r in cache.records(key))


def _temps(d: str) -> list[str]:
    return glob.glob(os.path.join(d, ".autotune.*"))


# -- bad records ---------------------------------------------------------------------------------
BAD_RECORDS = {
    "not a dict": 5,
    "a list": [FULL, _c(2)],
    "key a string": {"key": "k", "config": _c(2), "status": "ok", "seconds": 0.5},
    "key a list": {"key": ["kernel", "k"], "config": _c(2), "status": "ok", "seconds": 0.5},
    "key missing": {"config": _c(2), "status": "ok", "seconds": 0.5},
    "nested garbage in the key": {"key": {**FULL, "shapes": [1, {"x": [None]}]}, "config": _c(2)},
    "config not a string": {"key": FULL, "config": {"block_sizes": [2]}, "status": "ok",
                            "seconds": 0.5},
    "config not JSON": {"key": FULL, "config": "{block_sizes", "status": "ok", "seconds": 0.5},
    "config not an object": {"key": FULL, "config": "[2]", "status": "ok", "seconds": 0.5},
    "block sizes a string": {"key": FULL, "config": '{"block_sizes": "22"}', "status": "ok",
                             "seconds": 0.5},
    "block size zero": {"key": FULL, "config": '{"block_sizes": [0]}', "status": "ok",
                        "seconds": 0.5},
    "block size a bool": {"key": FULL, "config": '{"block_sizes": [true]}', "status": "ok",
                          "seconds": 0.5},
    "seconds a string": {"key": FULL, "config": _c(2), "status": "ok", "seconds": "fast"},
    "seconds NaN": {"key": FULL, "config": _c(2), "status": "ok", "seconds": float("nan")},
    "seconds a bool": {"key": FULL, "config": _c(2), "status": "ok", "seconds": True},
    "status not a string": {"key": FULL, "config": _c(2), "status": 1, "seconds": 0.5},
    "over the size bound": {"key": FULL, "config": _c(2), "status": "ok", "seconds": 0.5,
                            "reason": "x" * (1 << 20)},
}


@pytest.mark.parametrize("bad", list(BAD_RECORDS))
def test_a_bad_record_is_skipped_with_one_warning_and_the_rest_kept(tmp_path: Any,
                                                                    bad: str) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    _write(cache, _file([{"key": FULL, **_ok(1)}, BAD_RECORDS[bad], {"key": FULL, **_ok(3, 2.0)}]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _configs(cache) == [_c(1), _c(3)]
        best, _ = tuner.cached_best(cache, KEY)  # what the tuner does with them must not crash
    assert best == kd.Config.from_json(_c(1))
    assert _ours(caught) == [f"kernel_dsl: skipped 1 invalid record(s) in autotune cache "
                             f"{cache.path}"]


def test_many_bad_records_give_one_warning_per_read(tmp_path: Any) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    _write(cache, _file([*BAD_RECORDS.values(), {"key": FULL, **_ok(1)}]))
    with pytest.warns(UserWarning, match=f"skipped {len(BAD_RECORDS)} invalid") as caught:
        assert _configs(cache) == [_c(1)]
        assert _configs(TuningCache(str(tmp_path), version="t")) == [_c(1)]  # parsed once
    assert len(_ours(caught.list)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache.add(KEY, [_ok(4)])
    assert _configs(cache) == [_c(1), _c(4)]  # a write keeps the good ones


def test_invalid_results_are_not_added_the_rest_are(tmp_path: Any) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    with pytest.warns(UserWarning, match="not caching 4 invalid"):
        cache.add(KEY, [_ok(1), {"config": _c(2), "seconds": float("inf"), "status": "ok"},
                        {"config": _c(3), "status": "ok", "reason": object()}, "junk",
                        {**_ok(5), "reason": "x" * (1 << 20)}])
    assert _configs(cache) == [_c(1)]
    for key in ({"kernel": object()}, {"kernel": float("nan")}, {"kernel": {"nested": 1}}):
        with pytest.raises(TypeError, match="key must be"):  # a bad key is the caller's bug
            cache.add(key, [_ok(1)])
    cache.add({"dtypes": ("bf16", "f32")}, [_ok(1)])  # written as a list, found by either
    assert len(TuningCache(str(tmp_path), version="t").records({"dtypes": ["bf16", "f32"]})) == 1


def test_a_lock_held_too_long_keeps_results_in_memory(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "LOCK_TIMEOUT_S", 0.2)
    cache = TuningCache(str(tmp_path), version="t")
    cache.add(KEY, [_ok(1)])
    with open(cache.path + ".lock") as held:  # as a stopped tuner would hold it
        fcntl.flock(held, fcntl.LOCK_EX)
        msgs = _add_quietly(cache, _ok(2))
    assert len(msgs) == 1 and "holds the lock" in msgs[0]
    assert _configs(cache) == [_c(1), _c(2)]


# -- unusable files --------------------------------------------------------------------------------
UNUSABLE = {
    "truncated": '{"schema": 1, "records": [{"key": {"ker',
    "not JSON": "not json at all",
    "not UTF-8": b"\xff\xfe\x00garbage\x80",
    "nested too deep": "[" * 100_000,
    "newer schema": json.dumps({"schema": 99, "records": [{"key": FULL, **_ok(1)}]}),
    "a JSON list": json.dumps([1, 2, 3]),
    "records not a list": json.dumps({"schema": SCHEMA, "records": {"a": 1}}),
    "empty": "",
}


@pytest.mark.parametrize("kind", list(UNUSABLE))
def test_an_unusable_file_is_moved_aside_on_write_never_on_read(tmp_path: Any, kind: str) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    raw = _write(cache, UNUSABLE[kind])
    with pytest.warns(UserWarning, match="autotune cache"):
        assert cache.records(KEY) == []
    assert glob.glob(cache.path + ".corrupt-*") == []  # reads move nothing
    with open(cache.path, "rb") as f:
        assert f.read() == raw
    with pytest.warns(UserWarning, match="moved unusable autotune cache") as caught:
        cache.add(KEY, [_ok(1)])
    aside = glob.glob(cache.path + ".corrupt-*")
    assert len(aside) == 1 and any(aside[0] in m and cache.path in m for m in _ours(caught.list))
    with open(aside[0], "rb") as f:
        assert f.read() == raw  # the original bytes, for whoever wrote them
    assert _configs(TuningCache(str(tmp_path), version="t")) == [_c(1)]


def test_moving_aside_never_overwrites_an_earlier_corrupt_file(tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "strftime", lambda *a: "20250101T000000Z")
    cache = TuningCache(str(tmp_path), version="t")
    first = cache.path + ".corrupt-20250101T000000Z"
    _write(cache, "")
    with open(first, "w") as f:
        f.write("earlier")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in (1, 2):
            _write(cache, f"garbage {i}")
            cache.add(KEY, [_ok(i)])
    got = {p: open(p).read() for p in glob.glob(cache.path + ".corrupt-*")}
    assert got == {first: "earlier", first + ".1": "garbage 1", first + ".2": "garbage 2"}


def test_a_file_over_the_size_bound_is_not_parsed_and_moved_aside(tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    raw = _write(cache, _file([{"key": FULL, **_ok(i)} for i in range(50)]))
    monkeypatch.setattr(cache_mod, "MAX_FILE_BYTES", len(raw) - 1)
    with pytest.warns(UserWarning, match="larger than"):
        assert cache.records(KEY) == []
    with pytest.warns(UserWarning, match="moved unusable"):
        cache.add(KEY, [_ok(100)])
    assert _configs(cache) == [_c(100)]


def test_writes_stay_under_the_size_bound_dropping_the_oldest_keys(tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "MAX_FILE_BYTES", 4000)
    cache = TuningCache(str(tmp_path), version="t")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(10):
            cache.add({"kernel": f"k{k}"}, [_ok(i) for i in range(4)])
    assert os.path.getsize(cache.path) <= 4000
    assert any("dropped its" in m for m in _ours(caught))
    cache_mod._PARSED.clear()
    fresh = TuningCache(str(tmp_path), version="t")
    assert len(fresh.records({"kernel": "k9"})) == 4  # the newest survive, the file parses
    assert fresh.records({"kernel": "k0"}) == []


def test_records_per_key_are_capped_newest_kept(tmp_path: Any) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    n = cache_mod.MAX_RECORDS_PER_KEY
    assert 1000 <= n <= 100_000
    cache.add(KEY, [_ok(i) for i in range(n + 10)])
    cache_mod._PARSED.clear()
    got = TuningCache(str(tmp_path), version="t").records(KEY)
    assert len(got) == n and got[0]["config"] == _c(10) and got[-1]["config"] == _c(n + 9)


def test_a_config_added_again_replaces_its_record(tmp_path: Any) -> None:
    """The tuner adds each candidate as soon as it is evaluated, and again when it is verified."""
    cache = TuningCache(str(tmp_path), version="t")
    cache.add(KEY, [{"config": _c(1), "status": "unverified", "seconds": 2.0}, _ok(2, 1.5)])
    cache.add(KEY, [{"config": _c(1), "status": "ok", "seconds": 1.0}])
    recs = TuningCache(str(tmp_path), version="t").records(KEY)
    assert [(r["config"], r["status"]) for r in recs] == [(_c(2), "ok"), (_c(1), "ok")]
    assert tuner.cached_best(cache, KEY)[0] == kd.Config.from_json(_c(1))


# -- unwritable places -----------------------------------------------------------------------------
def _add_quietly(cache: TuningCache, *results: dict[str, Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.add(KEY, list(results))
    return _ours(caught)


def test_a_cache_path_that_cannot_be_created_keeps_results_in_memory(tmp_path: Any) -> None:
    with open(tmp_path / "file", "w") as f:
        f.write("a regular file, not a directory")
    d = str(tmp_path / "file" / "cache")
    cache = TuningCache(d, version="t")
    first = _add_quietly(cache, _ok(1))  # must not raise
    assert len(first) == 1 and cache.path in first[0] and "KD_CACHE_DIR" in first[0]
    assert _add_quietly(cache, _ok(2)) == []  # one warning per process and path
    assert _configs(cache) == [_c(1), _c(2)]
    assert _configs(TuningCache(d, version="t")) == [_c(1), _c(2)]  # same process, new object
    assert TuningCache(d, version="u").records(KEY) == []


def test_a_read_only_directory_keeps_results_in_memory_then_flushes_them(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    d = str(tmp_path / "ro")
    cache = TuningCache(d, version="t")
    cache.add(KEY, [_ok(1)])
    with open(cache.path, "rb") as f:
        before = f.read()
    os.chmod(d, 0o500)
    try:
        try:  # root writes through chmod: make the writes fail as they would for a user
            open(os.path.join(d, "probe"), "w").close()
            os.unlink(os.path.join(d, "probe"))

            def denied(*a: Any, **k: Any) -> Any:
                raise PermissionError(errno.EACCES, "Permission denied", d)
            monkeypatch.setattr(cache_mod.tempfile, "mkstemp", denied)
        except PermissionError:
            pass
        msgs = _add_quietly(cache, _ok(2))
        assert len(msgs) == 1 and "Permission denied" in msgs[0] and "KD_CACHE_DIR" in msgs[0]
        assert _add_quietly(cache, _ok(3)) == []
        assert _configs(TuningCache(d, version="t")) == [_c(1), _c(2), _c(3)]  # disk + memory
        with open(cache.path, "rb") as f:
            assert f.read() == before
    finally:
        os.chmod(d, 0o700)
        monkeypatch.undo()
    cache.add(KEY, [_ok(4)])  # writable again: what was kept in memory is written too
    cache_mod._PARSED.clear()
    with open(cache.path) as f:
        on_disk = sorted(r["config"] for r in json.load(f)["records"])
    assert on_disk == [_c(1), _c(2), _c(3), _c(4)] and cache_mod._MEMORY[cache.path] == {}


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlinked_lock_file_is_not_followed(tmp_path: Any, target_exists: bool) -> None:
    important = tmp_path / "important"
    if target_exists:
        important.write_text("precious")
    cache = TuningCache(str(tmp_path / "c"), version="t")
    os.makedirs(cache.dir)
    os.symlink(important, cache.path + ".lock")
    msgs = _add_quietly(cache, _ok(1))
    assert len(msgs) == 1 and "symlink" in msgs[0]
    assert important.read_text() == "precious" if target_exists else not important.exists()
    assert os.path.islink(cache.path + ".lock")  # the user's link is left alone
    assert _configs(cache) == [_c(1)]


class _FullDisk:
    """A file whose writes fail with ENOSPC after a few bytes went out."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.f.close()

    def write(self, s: str) -> int:
        self.f.write(s[:10])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def test_a_full_disk_leaves_no_temp_file_and_the_old_file_intact(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TuningCache(str(tmp_path), version="t")
    cache.add(KEY, [_ok(1)])
    with open(cache.path, "rb") as f:
        before = f.read()
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(real(fd, *a, **k)))
    msgs = _add_quietly(cache, _ok(2))
    monkeypatch.undo()
    assert len(msgs) == 1 and "No space left" in msgs[0]
    assert _temps(str(tmp_path)) == []
    with open(cache.path, "rb") as f:
        assert f.read() == before
    assert _configs(cache) == [_c(1), _c(2)]
    cache.add(KEY, [_ok(3)])
    cache_mod._PARSED.clear()
    assert _configs(TuningCache(str(tmp_path), version="t")) == [_c(1), _c(2), _c(3)]


def test_a_fifo_as_cache_file_does_not_hang_a_read(tmp_path: Any) -> None:
    os.mkfifo(tmp_path / "autotune.json")
    out = subprocess.run([sys.executable, "-c", _LOAD + f"""
import warnings
warnings.simplefilter("ignore")
c = cache.TuningCache({str(tmp_path)!r}, version="t")
assert c.records({{"kernel": "k"}}) == []
"""], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr


# -- concurrent and killed writers -----------------------------------------------------------------
# the writers load cache.py alone (it needs only the standard library): no torch import per process
_LOAD = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kd_cache", {cache_mod.__file__!r})
cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache)
"""

_WRITER = _LOAD + """
import json
d, who = sys.argv[1], int(sys.argv[2])
c = cache.TuningCache(d, version="t")
for i in range(20):  # as the tuner does: once when evaluated, again when verified
    cfg = json.dumps({"block_sizes": [i + 1]})
    c.add({"kernel": "k", "who": who}, [{"config": cfg, "status": "unverified", "seconds": 2.0}])
    c.add({"kernel": "k", "who": who}, [{"config": cfg, "status": "ok", "seconds": 1.0}])
    c.add({"kernel": "shared"}, [{"config": json.dumps({"block_sizes": [who + 1, i + 1]}), "status": "ok"}])
"""


def test_concurrent_writers_lose_no_record_and_keep_the_newest(tmp_path: Any) -> None:
    d = str(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, d, str(w)], stderr=subprocess.PIPE,
                              text=True) for w in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "kernel_dsl:" not in err  # no fallback to memory, nothing moved aside
    cache = TuningCache(d, version="t")
    for w in range(4):
        recs = cache.records({"kernel": "k", "who": w})
        assert sorted(r["config"] for r in recs) == sorted(_c(i) for i in range(20))
        assert {r["status"] for r in recs} == {"ok"}
    assert len(cache.records({"kernel": "shared"})) == 80
    assert _temps(d) == []


def test_a_writer_killed_mid_write_leaves_a_valid_file_and_its_temp_is_cleaned(tmp_path: Any) -> None:
    d = str(tmp_path)
    cache = TuningCache(d, version="t")
    cache.add(KEY, [_ok(1)])
    killed = subprocess.run([sys.executable, "-c", _LOAD + f"""
import os, signal
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # dies after the temp is written
cache.TuningCache({d!r}, version="t").add({{"kernel": "k"}}, [{{"config": {_c(2)!r}}}])
"""], capture_output=True, timeout=60)
    assert killed.returncode == -9
    assert len(_temps(d)) == 1
    assert _configs(TuningCache(d, version="t")) == [_c(1)]  # the old file, whole
    cache.add(KEY, [_ok(3)])
    assert _temps(d) == []  # the next writer, under the lock, removes what the killed one left
    assert _configs(cache) == [_c(1), _c(3)]
