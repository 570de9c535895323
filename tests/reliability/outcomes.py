"""Classifies what happens when bad input reaches a public entry point, and counts outcomes.

An outcome is one of OUTCOMES: a KernelError naming the user's line with a hint (the goal where
there is a user line), another clear error, a "traceback" (an internal exception type or an
internal-looking message), a "wrong answer" (a result its row knows is wrong), "accepted" (bad
input went through) or "correct" (unusual but valid input, right answer).
`python tests/reliability/report.py` prints the counts per category.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Callable

from kernel_dsl.errors import KernelError
from kernel_dsl.tracing import is_machinery

LINE_HINT, CLEAR, TRACEBACK, WRONG, ACCEPTED, CORRECT = (
    "line+hint", "clear", "traceback", "wrong answer", "accepted", "correct")
OUTCOMES = (LINE_HINT, CLEAR, TRACEBACK, WRONG, ACCEPTED, CORRECT)
WRONG_ANSWER = object()  # a row's callable returns this when the result it got is wrong

# messages Python itself writes when kernel_dsl fails to check its input first
_INTERNAL = re.compile(r"invalid literal for|could not convert|not enough values to unpack|"
                       r"too many values to unpack|object is not|has no attribute|NoneType|"
                       r"unsupported operand|takes \d+ positional|object cannot be interpreted|"
                       r"Expecting value|list index out of range|unhashable")


def classify_exception(exc: BaseException) -> str:
    if isinstance(exc, KernelError):
        named = exc.loc is not None and not is_machinery(exc.loc.file)  # the user's code
        return LINE_HINT if named and exc.hint else CLEAR
    if isinstance(exc, (ValueError, TypeError)) and not _INTERNAL.search(str(exc)):
        return CLEAR
    return TRACEBACK


def classify(fn: Callable[[], Any], none_ok: bool = False) -> tuple[str, BaseException | None]:
    """Runs `fn` (a row's callable) and says what happened; `none_ok`: the input is valid."""
    try:
        got = fn()
    except Exception as e:  # noqa: BLE001  (classifying every failure is the point)
        return classify_exception(e), e
    if got is WRONG_ANSWER:
        return WRONG, None
    return (CORRECT if none_ok else ACCEPTED), None


def table(rows: list[tuple[str, str]]) -> str:
    """`rows`: (category, outcome) per case -> a count table, one line per category."""
    cats: dict[str, Counter[str]] = {}
    for cat, outcome in rows:
        cats.setdefault(cat, Counter())[outcome] += 1
    head = f"{'category':<14}{'cases':>6}" + "".join(f"{o:>13}" for o in OUTCOMES)
    lines = [head, "-" * len(head)]
    total: Counter[str] = Counter()
    for cat, c in cats.items():
        total.update(c)
        lines.append(f"{cat:<14}{sum(c.values()):>6}" + "".join(f"{c[o]:>13}" for o in OUTCOMES))
    lines.append(f"{'total':<14}{sum(total.values()):>6}" + "".join(f"{total[o]:>13}" for o in OUTCOMES))
    return "\n".join(lines)
