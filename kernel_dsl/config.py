"""`kd.Config`: an assignment of every free block size, plus backend knobs."""
from __future__ import annotations

import json
import numbers
from typing import Any

from .errors import ConfigError
from .ir import BlockSym, KernelIR, TileVar
from .tracing import user_loc


class Config:
    """`kd.Config(block_sizes=[...], **knobs)`.

    `block_sizes` lists the free block sizes in the order their `kd.tile` calls appear in the
    source; block sizes declared with `kd.block_size(name)` and backend knobs (e.g. the Pallas
    `loop_mode`) are given by name.
    """

    __slots__ = ("block_sizes", "knobs", "_key")

    def __init__(self, block_sizes: Any = (), **knobs: Any):
        self.block_sizes = _block_sizes(block_sizes)
        self.knobs = dict(sorted(knobs.items()))
        self._key = (self.block_sizes, tuple(self.knobs.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        knobs = "".join(f", {k}={v!r}" for k, v in self.knobs.items())
        return f"Config(block_sizes={list(self.block_sizes)}{knobs})"

    def replace(self, **changes: Any) -> "Config":
        bs = changes.pop("block_sizes", self.block_sizes)
        return Config(bs, **{**self.knobs, **changes})

    def to_json(self) -> str:
        return json.dumps({"block_sizes": list(self.block_sizes), **self.knobs}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Config":
        example = 'e.g. {"block_sizes": [128, 128], "loop_mode": "grid"}'
        try:
            d = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"config {text!r} is not JSON ({e})", user_loc(), example) from None
        if not isinstance(d, dict):
            raise ConfigError(f"config {text!r} is not a JSON object", user_loc(), example)
        return Config(d.pop("block_sizes", ()), **d)


def _block_sizes(given: Any) -> tuple[int, ...]:
    """Positive ints (numpy's too); bools, floats and strings are mistakes, not sizes."""
    if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
        raise ConfigError(f"block_sizes={given!r} is not a list", user_loc(),
                          "list one block size per free `kd.tile` dimension: block_sizes=[128, 64]")
    out = tuple(given)
    for b in out:
        if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
            raise ConfigError(f"block size {b!r} in block_sizes={list(out)!r} is not a positive int",
                              user_loc(), "block sizes are positive ints, e.g. block_sizes=[128, 64]")
    return tuple(int(b) for b in out)


def positional_syms(ir: KernelIR) -> list[BlockSym]:
    """Free block sizes addressed by position in `Config.block_sizes`."""
    return [s for s in ir.free_syms if s.name is None]


def named_syms(ir: KernelIR) -> list[BlockSym]:
    return [s for s in ir.free_syms if s.name is not None]


def block_values(ir: KernelIR, config: Config) -> dict[int, int]:
    """Block size of every symbol (by `BlockSym.index`) under `config`; checks the config fits."""
    pos = positional_syms(ir)
    if len(config.block_sizes) != len(pos):
        raise ConfigError(
            f"{config!r} gives {len(config.block_sizes)} block sizes but kernel `{ir.name}` has "
            f"{len(pos)} free ones", ir.loc,
            "list one block size per free `kd.tile` dimension, in source order")
    out: dict[int, int] = {}
    for s, b in zip(pos, config.block_sizes):
        out[s.index] = b
    for s in named_syms(ir):
        if s.name not in config.knobs:
            raise ConfigError(f"{config!r} does not set block size `{s.name}`", ir.loc,
                              f"add `{s.name}=...` to the Config")
        out[s.index] = int(config.knobs[s.name])
    for s in ir.block_syms:
        if s.pinned is not None:
            out[s.index] = s.pinned
        if out[s.index] < 1:
            raise ConfigError(f"block size {out[s.index]} for {s!r} is not positive", ir.loc)
        if s.choices and out[s.index] not in s.choices:
            raise ConfigError(f"block size {out[s.index]} for `{s.name}` is not one of its "
                              f"choices {list(s.choices)}", ir.loc)
    return out


def effective_block(t: TileVar, blocks: dict[int, int]) -> int:
    """A block larger than its dimension shrinks to the dimension (one whole block)."""
    return min(blocks[t.block.index], t.extent)


def num_blocks(t: TileVar, blocks: dict[int, int]) -> int:
    b = effective_block(t, blocks)
    return -(-t.extent // b)


class ConfigSpace:
    """Candidate values per knob; every combination is a valid config for its backend/target."""

    def __init__(self, positional: list[list[int]], named: dict[str, list[int]],
                 knobs: dict[str, list[Any]]):
        self.positional = positional
        self.named = named
        self.knobs = knobs

    def __len__(self) -> int:
        n = 1
        for c in [*self.positional, *self.named.values(), *self.knobs.values()]:
            n *= len(c)
        return n

    def __iter__(self) -> Any:
        import itertools

        names = list(self.named) + list(self.knobs)
        lists = self.positional + [self.named[n] for n in self.named] + [self.knobs[k] for k in self.knobs]
        for combo in itertools.product(*lists):
            npos = len(self.positional)
            yield Config(combo[:npos], **dict(zip(names, combo[npos:])))

    def __repr__(self) -> str:
        parts = [f"block_sizes[{i}] in {c}" for i, c in enumerate(self.positional)]
        parts += [f"{k} in {v}" for k, v in {**self.named, **self.knobs}.items()]
        return f"ConfigSpace({len(self)} configs: " + "; ".join(parts) + ")"
