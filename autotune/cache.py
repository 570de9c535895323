"""The persistent autotuning cache: plain JSON, one record per evaluated config.

Records are keyed by everything that changes the answer: the kernel's IR fingerprint (its code,
shapes and dtypes), backend, target or device kind, the shape bucket, dtypes and the package
version. Writes take a file lock and replace the file atomically, so concurrent tuners never
lose records; a corrupt, truncated or foreign file is ignored with a warning (and rewritten on
the next write). Never pickle, never executable content.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

SCHEMA = 1
# parsed cache files by path, while unchanged on disk: every first call of a kernel looks its
# config up here, and parsing a file of thousands of records costs tens of milliseconds
_PARSED: dict[str, tuple[tuple[int, int, int], dict[str, list[dict[str, Any]]]]] = {}


def _key_str(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True)


def cache_dir() -> str:
    """`$KD_CACHE_DIR`, else `$XDG_CACHE_HOME/kernel_dsl`, else `~/.cache/kernel_dsl`."""
    d = os.environ.get("KD_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "kernel_dsl")
    return d


def shape_bucket(shapes: list[tuple[int, ...]]) -> str:
    """Exact shapes: kernels are specialized per shape, so a tuned config is per shape too."""
    return ";".join("x".join(str(d) for d in s) for s in shapes)


class TuningCache:
    def __init__(self, directory: str | None = None, version: str = ""):
        self.dir = directory or cache_dir()
        self.version = version
        self.path = os.path.join(self.dir, "autotune.json")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            warnings.warn(f"kernel_dsl: ignoring unreadable autotune cache {self.path}: {e}",
                          stacklevel=3)
            return []
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or \
                not isinstance(data.get("records"), list):
            warnings.warn(f"kernel_dsl: ignoring autotune cache {self.path} with an unknown "
                          f"schema (expected schema {SCHEMA})", stacklevel=3)
            return []
        return [r for r in data["records"] if isinstance(r, dict) and isinstance(r.get("key"), dict)]

    def records(self, key: dict[str, Any]) -> list[dict[str, Any]]:
        """Every record whose key matches `key` (and this package version)."""
        return list(self._by_key().get(_key_str({**key, "version": self.version}), []))

    def _by_key(self) -> dict[str, list[dict[str, Any]]]:
        """The file's records grouped by key, parsed again only when the file changed (writes
        replace it: a new inode, mtime and size)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        hit = _PARSED.get(self.path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        grouped: dict[str, list[dict[str, Any]]] = {}
        for r in self._read():
            grouped.setdefault(_key_str(r["key"]), []).append(r)
        _PARSED[self.path] = (stamp, grouped)
        return grouped

    def add(self, key: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Appends one record per evaluated config (JSON-safe dicts), atomically."""
        full = {**key, "version": self.version}
        with self._locked():
            records = self._read()
            seen = {(_key_str(r["key"]), r.get("config")) for r in records}
            for res in results:
                rec = {"key": full, **res}
                if (_key_str(full), rec.get("config")) not in seen:
                    records.append(rec)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".autotune.", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump({"schema": SCHEMA, "records": records}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
