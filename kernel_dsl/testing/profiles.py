"""Fuzzing profiles: a deterministic one for CI and a long one for soak runs.

CI must give the same verdict on every run and finish in bounded time, so its profile has a
fixed seed, no example database (a database replays failures found elsewhere, which makes a
run depend on the machine's history) and time budgets. The long profile is for a person or a
nightly job hunting bugs: a random seed each run, ten times the examples, and hypothesis's
example database, so a failure found once is tried first on the next run until it is fixed.

Select with the environment variable KD_FUZZ_PROFILE=ci|long (default ci); explicit
arguments to `fuzz` (max_examples=, seed=) override the profile.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

ENV_PROFILE = "KD_FUZZ_PROFILE"
ENV_DATABASE = "KD_FUZZ_DB"  # where the long profile keeps failing examples


@dataclass(frozen=True)
class Profile:
    name: str
    max_examples: int
    seed: int | None  # None: a random seed per run
    database: bool  # hypothesis's example database (replays earlier failures first)
    time_budget: float  # seconds of searching; later examples are not run (reported)
    shrink_budget: float  # seconds of shrinking after the first failure


CI = Profile("ci", max_examples=100, seed=0, database=False, time_budget=900.0, shrink_budget=120.0)
LONG = Profile("long", max_examples=1000, seed=None, database=True, time_budget=4 * 3600.0,
               shrink_budget=900.0)
PROFILES = {p.name: p for p in (CI, LONG)}


def active(name: str | None = None) -> Profile:
    """The profile named `name`, else the one $KD_FUZZ_PROFILE names, else CI."""
    key = name or os.environ.get(ENV_PROFILE, "ci")
    if key not in PROFILES:
        raise ValueError(f"unknown fuzz profile {key!r} (from {'argument' if name else ENV_PROFILE}); "
                         f"use one of {', '.join(PROFILES)}")
    return PROFILES[key]


def database_path() -> str:
    return os.environ.get(ENV_DATABASE, os.path.join(".hypothesis", "kdsl-fuzz"))
