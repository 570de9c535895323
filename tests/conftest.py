"""Test setup: deterministic seeds; the DSL test kernels live in tests/dsl_kernels.py."""
from __future__ import annotations

import os
import sys

import pytest
import torch

# The suite builds kernels at exact sizes, as the TPU route compiles them, so that ragged edges
# stay tested; tests/test_buckets.py turns shape buckets on where it tests them.
os.environ["KD_SHAPE_BUCKETS"] = "off"

# `python -m pytest` from the checkout puts its root on sys.path, where the folders `kernels/`,
# `lowering/` and `autotune/` (installed as kernel_dsl.kernels, ...) would import a second time
# under their bare names: transformers probes for Hugging Face's `kernels` package by importing
# `kernels`, which re-registered every library op from a duplicate module. Tests see only the
# installed package.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
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


@pytest.fixture
def dynamo_reset():  # type: ignore[no-untyped-def]
    """Fresh Dynamo caches before and after a compile test."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
