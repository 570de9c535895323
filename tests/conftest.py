"""Test setup: deterministic seeds; the DSL test kernels live in tests/dsl_kernels.py."""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _backends_unchanged():  # type: ignore[no-untyped-def]
    """A test that registers a backend must remove it: the fuzzer runs every registered one."""
    from kernel_dsl import lowering

    before = dict(lowering._BACKENDS)
    yield
    after = dict(lowering._BACKENDS)
    lowering._BACKENDS.clear()
    lowering._BACKENDS.update(before)  # the next tests start clean either way
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before), \
        "a test left the backend registry changed (lowering.unregister what it registers)"
