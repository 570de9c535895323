"""Writing a benchmark's results: the shared tail of the benchmarks' `main()`."""
from __future__ import annotations

import json
import os
from typing import Any


def write_json(path: str, obj: Any) -> None:
    """`obj` as indented JSON at `path`, creating its folder first."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
