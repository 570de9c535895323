"""The persistent autotuning cache: plain JSON, one record per evaluated config.

Records are keyed by everything that changes the answer: the kernel's IR fingerprint (its code,
shapes and dtypes), backend, target or device kind, the shape bucket, dtypes and the package
version. A config added again replaces its older record (the tuner adds each candidate as it
settles). The cache loses nothing:
- writes take a file lock and replace the file atomically, so concurrent tuners never lose
  records and a killed writer never leaves a half-written file;
- a record that is not valid is skipped with one warning per read, the rest are kept;
- a file that cannot be parsed (truncated, foreign, newer schema, too large) is ignored by reads
  and moved aside to `<path>.corrupt-<UTC time>` by the next write, never overwritten;
- when the file cannot be written (read-only directory, full disk, a planted symlink as lock),
  results are kept in memory for this process, with one warning, and written by a later add
  that succeeds.
Never pickle, never executable content.
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import stat
import tempfile
import time
import warnings
from contextlib import contextmanager, suppress
from typing import Any, Iterator

SCHEMA = 1
# Bounds, so that a foreign or runaway file can neither exhaust memory nor grow forever. A record
# is a few hundred bytes and a kernel's config space at most a few thousand configs, so each bound
# is far above real use: 64 MiB is ~200k records, parsed in about a second.
MAX_FILE_BYTES = 64 << 20  # larger files are not parsed (moved aside on write); writes drop the
#                            oldest keys' records to stay below it
MAX_RECORD_BYTES = 8 << 10  # one record's JSON (tuner reasons are cut to 200 chars); larger skipped
MAX_RECORDS_PER_KEY = 4096  # the newest are kept: every config of one tuning problem fits
# so one key's records (4096 * 8 KiB = 32 MiB) always fit in a file, with room for others
assert MAX_RECORDS_PER_KEY * (MAX_RECORD_BYTES + 2) < MAX_FILE_BYTES
LOCK_TIMEOUT_S = 60.0  # the lock is held for milliseconds; a holder stopped for longer is stuck

Records = dict[str, list[dict[str, Any]]]  # records grouped by key string, oldest first
# parsed cache files by path, while unchanged on disk (inode, mtime, size): every first call of a
# kernel looks its config up here, and parsing a file of thousands of records costs tens of ms.
# Value: (stamp, records, why the whole file is unusable or None, each key's records as written:
# an add per candidate re-encodes only the key it changes).
_PARSED: dict[str, tuple[tuple[int, int, int], Records, str | None, dict[str, str]]] = {}
# records that could not be written, by cache path: records() still sees them in this process,
# and the next add that can write flushes them to the file
_MEMORY: dict[str, Records] = {}
_WARNED: set[tuple[str, str]] = set()  # (cache path, "read"/"write") already warned about


def _warn(msg: str) -> None:
    warnings.warn(f"kernel_dsl: {msg}", stacklevel=4)


def _json_value(v: Any) -> bool:
    """A JSON scalar, or a list of them (nested lists allowed; a tuple is written as a list)."""
    if isinstance(v, (list, tuple)):
        return all(_json_value(x) for x in v)
    return v is None or isinstance(v, (str, int, float))


def _key_str(key: Any) -> str:
    if isinstance(key, dict) and all(isinstance(k, str) and _json_value(v) for k, v in key.items()):
        with suppress(ValueError):  # NaN or infinity
            return json.dumps(key, sort_keys=True, allow_nan=False)
    raise TypeError(f"autotune cache key must be a dict of JSON scalars and lists: {key!r}")


def _valid(rec: Any) -> bool:
    """What callers may rely on: a JSON-able dict under MAX_RECORD_BYTES whose "key" is a valid
    key, "config" (if any) a Config JSON object with positive int block sizes, "seconds" (if
    any) finite or None and "status" (if any) a string."""
    try:
        if not isinstance(rec, dict) or \
                len(json.dumps(rec, sort_keys=True, allow_nan=False)) > MAX_RECORD_BYTES:
            return False
        _key_str(rec.get("key"))
        if "config" in rec:
            cfg = json.loads(rec["config"]) if isinstance(rec["config"], str) else None
            bs = cfg.get("block_sizes", []) if isinstance(cfg, dict) else None
            if not isinstance(bs, list) or not all(type(b) is int and b > 0 for b in bs):
                return False
        s = rec.get("seconds")
        return (s is None or (type(s) in (int, float) and math.isfinite(s))) and \
            isinstance(rec.get("status", ""), str)
    except (TypeError, ValueError, RecursionError):  # not JSON-able, circular, too deep
        return False


def _merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`old` then `new`, the newest record per config winning, at most MAX_RECORDS_PER_KEY."""
    by_cfg: dict[Any, dict[str, Any]] = {}
    for r in (*old, *new):
        by_cfg.pop(r.get("config"), None)  # re-inserted last: a re-measured config is newest
        by_cfg[r.get("config")] = r
    return list(by_cfg.values())[-MAX_RECORDS_PER_KEY:]


def _move_aside(path: str) -> str:
    """Renames the file at `path` to a new `<path>.corrupt-<UTC time>[.n]`; never overwrites."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1000):
        dest = f"{path}.corrupt-{stamp}" + (f".{n}" if n else "")
        try:
            os.link(path, dest, follow_symlinks=False)  # fails if `dest` exists
        except FileExistsError:
            continue
        except OSError:  # no hard links here (or a directory): rename, having checked under lock
            if os.path.lexists(dest):
                continue
            os.rename(path, dest)
            return dest
        os.unlink(path)
        return dest
    raise FileExistsError(errno.EEXIST, "no free name to move the corrupt cache aside", path)


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
        # Reads follow a symlinked cache file (harmless); a write replaces the link itself with
        # a regular file (os.replace), never writing through it. Only the lock is opened for
        # writing in place, and that refuses symlinks.
        self.path = os.path.join(self.dir, "autotune.json")
        self._memory = _MEMORY.setdefault(self.path, {})  # shared by every cache on this path

    @contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.dir, exist_ok=True)
        # O_NOFOLLOW: a planted symlink must not make us create or open its target; no O_TRUNC
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:  # poll rather than block: a stuck holder must not hang a finished search
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(errno.ETIMEDOUT, "another process holds the lock",
                                           self.path + ".lock") from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _read(self) -> tuple[tuple[int, int, int], Records, str | None, dict[str, str]]:
        """Parses the file: (its stamp, its valid records, why the whole file is unusable or
        None, {}); warns once if records were skipped. Raises OSError if it cannot be read."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO won't hang
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if not stat.S_ISREG(st.st_mode):
                return stamp, {}, "it is not a regular file", {}
            if st.st_size > MAX_FILE_BYTES:
                return stamp, {}, f"it is larger than {MAX_FILE_BYTES >> 20} MiB", {}
            raw = f.read(MAX_FILE_BYTES + 1)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:  # truncated, not JSON, not UTF-8, too deep
            return stamp, {}, f"it is not valid JSON ({str(e)[:100]})", {}
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or \
                not isinstance(data.get("records"), list):
            schema = data.get("schema") if isinstance(data, dict) else None
            return stamp, {}, f"it has schema {schema!r}, not {SCHEMA} (another kernel_dsl version?)", {}
        grouped: Records = {}
        skipped = 0
        for r in data["records"]:
            if _valid(r):
                grouped.setdefault(_key_str(r["key"]), []).append(r)
            else:
                skipped += 1
        if skipped:
            _warn(f"skipped {skipped} invalid record(s) in autotune cache {self.path}")
        return stamp, {k: _merge([], v) for k, v in grouped.items()}, None, {}

    def _parsed(self, writing: bool = False) -> tuple[Records, str | None, dict[str, str]]:
        """The file's records, parsed again only when the file changed (writes replace it: a
        new inode, mtime and size)."""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return {}, None, {}
        hit = _PARSED.get(self.path)
        if hit is None or hit[0] != (st.st_ino, st.st_mtime_ns, st.st_size):
            hit = _PARSED[self.path] = self._read()
            if hit[2] and not writing:
                _warn(f"ignoring autotune cache {self.path}: {hit[2]}; the next write moves it "
                      f"aside")
        return hit[1:]

    def records(self, key: dict[str, Any]) -> list[dict[str, Any]]:
        """Every record whose key matches `key` (and this package version), from the file and
        from this process's records that could not be written."""
        ks = _key_str({**key, "version": self.version})
        try:
            disk = self._parsed()[0].get(ks, [])
        except OSError as e:
            self._warn_once("read", f"cannot read the autotune cache {self.path} ({e}); using "
                            f"this process's results only")
            disk = []
        mem = self._memory.get(ks)
        return _merge(disk, mem) if mem else list(disk)

    def add(self, key: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Records one result per evaluated config (JSON-safe dicts; a config added again
        replaces its older record). Cheap enough per candidate; never raises OSError: if the
        file cannot be written the records stay in memory for this process."""
        full = {**key, "version": self.version}
        ks = _key_str(full)  # a bad key is the caller's bug: TypeError
        results = list(results)
        new = [{**r, "key": full} for r in results if isinstance(r, dict)]
        good = [r for r in new if _valid(r)]
        if len(good) < len(results):
            _warn(f"not caching {len(results) - len(good)} invalid autotune result(s) (not "
                  f"JSON, over {MAX_RECORD_BYTES >> 10} KiB, or a bad config/seconds/status)")
        if not good:
            return
        try:
            with self._locked():
                self._write(ks, good)
        except OSError as e:
            self._memory[ks] = _merge(self._memory.get(ks, []), good)
            why = f"its lock file {self.path}.lock is a symlink, which is not followed" \
                if e.errno == errno.ELOOP else str(e)
            self._warn_once("write", f"cannot write the autotune cache {self.path}: {why}; keeping "
                            f"this process's tuning results in memory only (set KD_CACHE_DIR to "
                            f"a writable directory to keep them)")

    def _write(self, ks: str, good: list[dict[str, Any]]) -> None:
        """Under the lock: the file's records + unwritten ones + `good`, replaced atomically."""
        grouped, bad, texts = self._parsed(writing=True)
        if bad:
            dest = _move_aside(self.path)
            _warn(f"moved unusable autotune cache {self.path} aside to {dest}: {bad}")
            grouped = {}
        grouped, texts = dict(grouped), dict(texts)  # the parsed copy stays as it is on disk
        for k, recs in [*self._memory.items(), (ks, good)]:
            grouped[k] = _merge(grouped.pop(k, []), recs)  # re-inserted last: newest key
            texts.pop(k, None)
        for k, recs in grouped.items():
            if k not in texts:
                texts[k] = ",\n".join(json.dumps(r, sort_keys=True, allow_nan=False) for r in recs)
        head, tail = f'{{"schema": {SCHEMA}, "records": [\n', "\n]}\n"
        size, dropped = len(head) + len(tail) + sum(len(t) + 2 for t in texts.values()), 0
        while size > MAX_FILE_BYTES and len(grouped) > 1:  # whole keys, oldest first
            k = next(iter(grouped))
            size -= len(texts.pop(k)) + 2
            dropped += len(grouped.pop(k))
        if dropped:
            _warn(f"autotune cache {self.path} reached {MAX_FILE_BYTES >> 20} MiB: dropped its "
                  f"{dropped} oldest record(s)")
        self._cleanup_temps()
        # one record per line (indent= would fall back to the slow pure-Python encoder); mkstemp
        # opens with O_EXCL, and the temp file never outlives a failure
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".autotune.", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(head + ",\n".join(texts[k] for k in grouped) + tail)
                f.flush()
                os.fsync(f.fileno())  # a power cut must not leave an empty file behind
            os.replace(tmp, self.path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
        self._memory.clear()
        try:  # our own write: no need to parse it again
            st = os.stat(self.path)
            _PARSED[self.path] = ((st.st_ino, st.st_mtime_ns, st.st_size), grouped, None, texts)
        except OSError:
            _PARSED.pop(self.path, None)

    def _cleanup_temps(self) -> None:
        """Under the lock no writer is mid-write, so temp files left here are from killed ones."""
        with suppress(OSError), os.scandir(self.dir) as it:
            for e in it:
                if e.name.startswith(".autotune.") and e.name.endswith(".json") and \
                        e.is_file(follow_symlinks=False):
                    with suppress(OSError):
                        os.unlink(e.path)

    def _warn_once(self, what: str, msg: str) -> None:
        if (self.path, what) not in _WARNED:
            _WARNED.add((self.path, what))
            _warn(msg)
