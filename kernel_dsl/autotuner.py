"""Helion's config fragments (`helion.autotuner.PowerOfTwoFragment`, ...): the search space of
one `kd.register_tunable` value. Import them as `from kernel_dsl.autotuner import
PowerOfTwoFragment` (the rename of Helion's import) or use `kd.PowerOfTwoFragment`.

A fragment is a finite list of `choices()` the autotuner searches and a `default()` the default
config takes; fragments compare by value, so registering one name twice with equal fragments is
fine (kernel_dsl/tunables.py)."""
from __future__ import annotations

from typing import Any

from .errors import ConfigError
from .tracing import user_loc


def _int(what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{what}={v!r} is not an int", user_loc(), "fragments take int bounds")
    return v


class ConfigSpecFragment:
    """The base: a finite, ordered search space and its default value."""

    def default(self) -> Any:
        raise NotImplementedError

    def choices(self) -> list[Any]:
        raise NotImplementedError

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(k) for k in self._key())})"


class BaseIntegerFragment(ConfigSpecFragment):
    """Ints in [low, high]; the default is `default_val` (low if not given), clamped."""

    def __init__(self, low: int, high: int, default_val: int | None = None):
        self.low = _int("low", low)
        self.high = _int("high", high)
        if self.low > self.high:
            raise ConfigError(f"{type(self).__name__}({low}, {high}): low > high", user_loc())
        self.default_val = self.low if default_val is None else _int("default_val", default_val)

    def clamp(self, v: int) -> int:
        return max(min(v, self.high), self.low)

    def default(self) -> int:
        return self.clamp(self.default_val)

    def _key(self) -> tuple[Any, ...]:
        return (self.low, self.high, self.default_val)


class IntegerFragment(BaseIntegerFragment):
    """Every int in [low, high]."""

    def choices(self) -> list[int]:
        return list(range(self.low, self.high + 1))


class PowerOfTwoFragment(BaseIntegerFragment):
    """The powers of two in [low, high] (both powers of two, as Helion asserts)."""

    def __init__(self, low: int, high: int, default_val: int | None = None):
        super().__init__(low, high, default_val)
        for what, v in (("low", self.low), ("high", self.high), ("default", self.default())):
            if v < 1 or v & (v - 1):
                raise ConfigError(f"PowerOfTwoFragment {what} {v} is not a power of two",
                                  user_loc(), "e.g. PowerOfTwoFragment(1, 256)")

    def choices(self) -> list[int]:
        out, v = [], self.low
        while v <= self.high:
            out.append(v)
            v *= 2
        return out


class EnumFragment(ConfigSpecFragment):
    """One of `choices` (ints, floats, bools or strings); the default is the first."""

    def __init__(self, choices: Any, search_choices: Any = None):
        self._choices = tuple(choices)
        if not self._choices:
            raise ConfigError("EnumFragment(choices=()) is empty", user_loc())
        for c in self._choices:
            if not isinstance(c, (int, float, str)):  # a config is JSON: the cache stores it
                raise ConfigError(f"EnumFragment choice {c!r} is not an int, float, bool or str",
                                  user_loc())
        self.search_choices = None if search_choices is None else tuple(search_choices)
        if self.search_choices is not None and not set(self.search_choices) <= set(self._choices):
            raise ConfigError(f"search_choices {self.search_choices} are not a subset of the "
                              f"choices {self._choices}", user_loc())

    def default(self) -> Any:
        return self._choices[0]

    def choices(self) -> list[Any]:
        return list(self._choices if self.search_choices is None else self.search_choices)

    def valid(self) -> tuple[Any, ...]:
        return self._choices

    def _key(self) -> tuple[Any, ...]:
        return (self._choices, self.search_choices)


class BooleanFragment(ConfigSpecFragment):
    """False or True; the default is False."""

    def default(self) -> bool:
        return False

    def choices(self) -> list[bool]:
        return [False, True]

    def _key(self) -> tuple[Any, ...]:
        return ()


def valid_values(fragment: ConfigSpecFragment) -> list[Any]:
    """Every value a config may give (the search space may be narrower: search_choices)."""
    return list(fragment.valid()) if isinstance(fragment, EnumFragment) else fragment.choices()


__all__ = ["BaseIntegerFragment", "BooleanFragment", "ConfigSpecFragment", "EnumFragment",
           "IntegerFragment", "PowerOfTwoFragment", "valid_values"]
