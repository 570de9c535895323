"""Prints the outcome counts per category for the bad-input tables (the issue's closing note):

    KD_CACHE_DIR=$(mktemp -d) python tests/reliability/report.py [-v]

`-v` also lists each case with its outcome and the first line of what the user saw."""
from __future__ import annotations

import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
os.environ.setdefault("KD_CACHE_DIR", tempfile.mkdtemp())  # autotune rows must not touch ~/.cache
warnings.simplefilter("ignore")

from reliability.outcomes import table  # noqa: E402
from reliability.test_api_inputs import CASES, run_case  # noqa: E402
from reliability.test_cli import CLI_CASES, classify_cli, run_cli  # noqa: E402


def main() -> None:
    verbose = "-v" in sys.argv
    rows = []
    for case in CASES:
        outcome, exc = run_case(case)
        rows.append((case.category, outcome))
        if verbose:
            first = (str(exc).splitlines() or [""])[0][:110]
            seen = f"{type(exc).__name__}: {first}" if exc else "(returned)"
            print(f"{case.category:<10} {outcome:<12} {case.what:<44} {seen}")
    for c in CLI_CASES:
        rc, _, err = run_cli(c.argv)
        outcome = classify_cli(rc, err)
        rows.append((f"kdsl {c.category}", outcome))
        if verbose:
            last = (err.strip().splitlines() or ["(nothing)"])[-1][:110]
            print(f"kdsl {c.category:<5} {outcome:<12} {c.what:<44} rc={rc} {last}")
    print(table(rows))


if __name__ == "__main__":
    main()
