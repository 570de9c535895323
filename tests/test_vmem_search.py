"""The VMEM search (lowering/pallas/vmem_search.py) against fake compilers: what it returns is a
limit that compiles, close to the smallest one, whatever the overflow messages say."""
from __future__ import annotations

from typing import Callable

import pytest

from kernel_dsl.lowering.pallas.vmem_search import MIN_LIMIT, VMEM_SLACK, VMEM_TOLERANCE, smallest_limit

MiB = 1 << 20


def fake(need: int, report: Callable[[int], int | None]) -> tuple[Callable[[int], tuple[bool, int | None]],
                                                                  list[int]]:
    """A compiler that accepts limits >= need; an overflow message reports report(limit)."""
    tried: list[int] = []

    def compiles(limit: int) -> tuple[bool, int | None]:
        tried.append(limit)
        return (True, None) if limit >= need else (False, report(limit))
    return compiles, tried


def close(got: int | None, need: int) -> bool:
    return got is not None and need <= got <= need + max(VMEM_SLACK, VMEM_TOLERANCE * got)


@pytest.mark.parametrize("need", [8 * 1024, 300 * 1024, 10 * MiB + 12345, 90 * MiB])
def test_exact_messages_take_three_compiles(need: int) -> None:
    rounded = round(need / (0.01 * MiB)) * int(0.01 * MiB)  # messages round to 0.01 MiB
    compiles, tried = fake(need, lambda limit: rounded)
    assert close(smallest_limit(compiles), need)
    assert len(tried) <= 3


def test_a_message_asking_for_more_than_needed_is_bisected_down() -> None:
    compiles, _ = fake(8 * MiB, lambda limit: 72 * MiB)  # XLA would keep a whole output in VMEM
    assert close(smallest_limit(compiles), 8 * MiB)


def test_messages_that_report_one_allocation_at_a_time_still_converge() -> None:
    compiles, tried = fake(45 * MiB, lambda limit: limit + MiB)  # each retry: the next allocation
    assert close(smallest_limit(compiles), 45 * MiB)
    assert len(tried) < 25


@pytest.mark.parametrize("report", [lambda limit: None, lambda limit: 1024])
def test_useless_messages_fall_back_to_growth_and_bisection(report: Callable[[int], int | None]) -> None:
    compiles, _ = fake(3 * MiB, report)
    assert close(smallest_limit(compiles), 3 * MiB)


def test_the_limit_it_compiled_under_caps_the_search() -> None:
    compiles, tried = fake(20 * MiB, lambda limit: None)
    got = smallest_limit(compiles, ceiling=32 * MiB)
    assert close(got, 20 * MiB) and max(tried) < 32 * MiB


def test_past_the_deadline_an_upper_bound_comes_back() -> None:
    compiles, tried = fake(20 * MiB, lambda limit: 72 * MiB)
    got = smallest_limit(compiles, ceiling=32 * MiB, deadline=0.0)
    assert got is not None and got >= 20 * MiB and len(tried) <= 2


def test_a_kernel_the_limit_does_not_govern_has_no_figure() -> None:
    compiles, tried = fake(0, lambda limit: None)
    assert smallest_limit(compiles) is None and tried == [MIN_LIMIT]
