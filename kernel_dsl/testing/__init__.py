"""`kernel_dsl.testing`: correctness fuzzing of kernels against PyTorch references.

    from kernel_dsl.testing import fuzz

    fuzz(matmul, lambda x, y: x @ y, "x[m,k], y[k,n]", dtypes=(torch.float32, torch.bfloat16),
         dims={"m": (1, 512), "k": (1, 2048), "n": (1, 512)})

Files, one job each: signature.py (the "x[m,k], y[k,n]" grammar), case.py (one example and its
inputs), strategies.py (hypothesis strategies: size pools, configs), tolerance.py (the
tolerance policy), snippet.py (runnable reproduction), report.py (summary table, progress),
profiles.py (CI and long profiles), search.py (`fuzz` itself: the hypothesis search), random.py
(`reference_rand`: kd.rand's stream in plain torch).
"""
from __future__ import annotations

from .case import Case, build_args, make_input, poison_outputs
from .profiles import CI, LONG, Profile, active
from .random import reference_rand, reference_randint, reference_randn, reference_random_bits
from .report import FuzzResult, ProgressBar
from .search import DEFAULT_DTYPES, DEFAULT_VALUES, fuzz, replay
from .signature import Signature, parse
from .snippet import load_object
from .strategies import dim_pool
from .tolerance import TOLERANCES, Comparison, Tolerance, compare

__all__ = [
    "CI", "DEFAULT_DTYPES", "DEFAULT_VALUES", "LONG", "Case", "Comparison", "FuzzResult", "Profile",
    "ProgressBar", "Signature", "TOLERANCES", "Tolerance", "active", "build_args", "compare",
    "dim_pool", "fuzz", "load_object", "make_input", "parse", "poison_outputs",
    "reference_rand", "reference_randint", "reference_randn", "reference_random_bits", "replay",
]
