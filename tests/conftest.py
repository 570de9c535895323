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
