"""Checks of the plain arguments of the public API (targets, seconds, configs, strategies), at
the user's call: a bad one must not reach a backend or the tuner, which would run anyway (an
unknown target falls through to the CPU path and labels its result with the bad name) or fail
deep inside with an internal error."""
from __future__ import annotations

import difflib
import math
from typing import Any, Sequence

from .config import Config
from .errors import ArgumentError, ConfigError
from .lowering.pallas.targets import TPU_TARGETS
from .tracing import user_loc


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def valid_targets(be: Any) -> tuple[str, ...]:
    """What `be` renders for: its compile targets, its CPU target, and "tpu" (the attached chip)
    where it resolves one. A backend may list them itself as `render_targets`."""
    given = getattr(be, "render_targets", None)
    if given is not None:
        return tuple(given)
    generic = ("tpu",) if hasattr(be, "resolve_target") else ()
    return tuple(dict.fromkeys((*getattr(be, "targets", ()), be.cpu_target, *generic)))


def check_target(be: Any, target: Any) -> str:
    valid = valid_targets(be)
    if not isinstance(target, str) or target not in valid:
        what = f"{target!r}" if isinstance(target, str) else f"of type {type(target).__name__}"
        close = did_you_mean(target, valid) if isinstance(target, str) else ""
        raise ArgumentError(f"unknown target {what} for the {be.name} backend", user_loc(),
                            f"{close}{be.name} targets: {', '.join(valid)}")
    return target


def autotune_target(be: Any, target: Any) -> str:
    """The target the tuner gets. "cpu": times on this machine's CPU interpreter, under the
    target the CPU path renders for and reads tuned configs under (`be.cpu_target`; trn2 for
    NKI). TPU targets: the TPU cost model and compiler. Nothing else has an evaluator."""
    if isinstance(target, str) and target == "tpu" and hasattr(be, "resolve_target"):
        target = be.resolve_target(target)  # the attached generation, if a TPU is attached
    if target == "cpu":
        return be.cpu_target
    tpus = [t for t in valid_targets(be) if t in TPU_TARGETS]
    if isinstance(target, str) and target in tpus:
        return target
    choices = ["cpu", *tpus]
    name = repr(target) if isinstance(target, str) else f"of type {type(target).__name__}"
    why = ("no TPU is attached to this host; name a generation" if target == "tpu" else
           "Trainium and CUDA chips have no cost model here, and CPU interpreter times say "
           "nothing about them")
    raise ArgumentError(
        f"autotune has no evaluator for target {name} on the {be.name} backend", user_loc(),
        f"{did_you_mean(target, choices) if isinstance(target, str) else ''}{why}; autotune "
        f"targets: cpu (times the {be.name} kernel on this CPU; CPU runs use the winner)"
        + (f", {', '.join(tpus)} (cost model and TPU compiler)" if tpus else ""))


def positive_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or value <= 0:
        raise ArgumentError(f"{name}={value!r} is not a positive number of seconds", user_loc(),
                            f"give seconds as a number, e.g. {name}=60")
    return float(value)


def check_config(config: Any) -> None:
    if config is not None and not isinstance(config, Config):
        raise ConfigError(f"config={config!r} is a {type(config).__name__}, not a kd.Config",
                          user_loc(), "pass kd.Config(block_sizes=[...], **knobs)")


def check_strategy(strategy: Any, strategies: Sequence[str]) -> None:
    choices = ["auto", *strategies]
    if strategy not in choices:
        close = did_you_mean(strategy, choices) if isinstance(strategy, str) else ""
        raise ConfigError(f"unknown autotune strategy {strategy!r}", user_loc(),
                          f"{close}strategies: {', '.join(choices)}")
