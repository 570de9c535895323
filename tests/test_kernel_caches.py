"""A kernel's caches of traces and builds are bounded (oldest out first): a kernel called with
ever new constant values (ints; a float is a runtime scalar and builds once) or shapes does not
keep every build it made."""
from __future__ import annotations

import torch

import kernel_dsl as kd
from kernel_dsl.bounded import Bounded


@kd.kernel
def scale(x: torch.Tensor, s: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape):
        out[t] = x[t] * s
    return out


def test_the_oldest_build_goes_first_past_the_limit() -> None:
    scale._irs.limit = scale._compiled.limit = 3
    x = torch.randn(8, 8)
    for s in (1, 2, 3, 4, 5):
        torch.testing.assert_close(scale(x, s), x * s)
    assert len(scale._irs) == len(scale._compiled) == 3
    keys = [k[-1] for k in scale._compiled]  # (int, value), the last key element
    assert [v for _, v in keys] == [3, 4, 5]
    builds = scale.stats["compiles"]
    torch.testing.assert_close(scale(x, 1), x * 1)  # evicted: built again, still right
    assert scale.stats["compiles"] == builds + 1


def test_bounded_is_a_plain_dict_for_lookups() -> None:
    d = Bounded(2)
    d["a"], d["b"], d["a"], d["c"] = 1, 2, 3, 4  # overwriting "a" evicts nothing
    assert list(d.items()) == [("b", 2), ("c", 4)] and d.get("a") is None  # "a" was oldest
    assert isinstance(d, dict)
