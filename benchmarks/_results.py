"""Writing a benchmark's results: the shared tail of the benchmarks' `main()`."""
from __future__ import annotations

import json
import os
import time
from typing import Any


def write_json(path: str, obj: Any) -> None:
    """`obj` as indented JSON at `path`, creating its folder first."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def save(path: str, res: dict[str, Any], t0: float) -> None:
    """`res` with its `wall_s` (seconds since `t0`, a `time.monotonic()`) as JSON at `path`, and a
    line saying so."""
    res["wall_s"] = round(time.monotonic() - t0, 1)
    write_json(path, res)
    print(f"wrote {path} ({res['wall_s']} s)")
