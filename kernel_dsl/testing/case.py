"""One fuzz example, fully determined by a few plain values, and how to build its inputs.

Inputs are made from a seed, not stored: a failure is then reproduced from a short snippet
(`make_input(shape, dtype, layout=, values=, seed=)`) on any machine, and hypothesis shrinks
the seed like any other number. Everything here is deterministic for a given torch version.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from .. import dtypes
from ..config import Config
from .signature import Signature

LAYOUTS = ("contiguous", "transposed", "strided")
VALUES = ("normal", "large", "special")
# "large": x 1e4, logits that overflow exp() without max-subtraction and sums far from 1; in
# f16 x 1e2, so that a product of two stays inside its range (65504)
LARGE = {torch.float16: 1e2}
LARGE_DEFAULT = 1e4


@dataclass(frozen=True)
class Case:
    """What one example runs: backend, dtype, sizes of every dim name, a layout per tensor
    argument, the value class and seed of the inputs, scalar arguments and the config."""

    backend: str
    dtype: str  # "f32" | "bf16" | "f16": the dtype of every tensor argument not pinned
    sizes: tuple[tuple[str, int], ...]
    layouts: tuple[tuple[str, str], ...]
    values: str
    seed: int
    scalars: tuple[tuple[str, Any], ...]
    config: Config | None = None

    def with_config(self, config: Config) -> "Case":
        return Case(self.backend, self.dtype, self.sizes, self.layouts, self.values, self.seed,
                    self.scalars, config)

    def to_json(self) -> str:
        """A stable, one-line form (for `kdsl fuzz --replay` and failure messages)."""
        cfg = json.loads(self.config.to_json()) if self.config is not None else None
        return json.dumps({"backend": self.backend, "dtype": self.dtype, "sizes": dict(self.sizes),
                           "layouts": dict(self.layouts), "values": self.values, "seed": self.seed,
                           "scalars": dict(self.scalars), "config": cfg}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Case":
        d = json.loads(text)
        cfg = Config.from_json(json.dumps(d["config"])) if d.get("config") is not None else None
        return Case(d["backend"], d["dtype"], tuple(d["sizes"].items()), tuple(d["layouts"].items()),
                    d["values"], int(d["seed"]), tuple(d["scalars"].items()), cfg)

    def describe(self, sig: Signature) -> str:
        """`pallas bf16 x[3, 7] y[7, 5]^T normal seed=0 Config(...)`: one line for tables."""
        sizes = dict(self.sizes)
        layouts = dict(self.layouts)
        parts = [self.backend, self.dtype]
        for t in sig.tensors:
            mark = {"contiguous": "", "transposed": "ᵀ", "strided": "[::2]"}[layouts[t.name]]
            parts.append(f"{t.name}{sig.shape(t, sizes)}{mark}")
        parts += [f"{k}={v!r}" for k, v in self.scalars if len(_choices(sig, k)) > 1]
        parts += [self.values, f"seed={self.seed}", repr(self.config)]
        return " ".join(parts)


def _choices(sig: Signature, name: str) -> tuple[Any, ...]:
    return next((s.choices for s in sig.scalars if s.name == name), ())


def _torch_dtype(name: str) -> torch.dtype:
    return dtypes.IR_TO_TORCH[name]


def _view(buf: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "transposed":
        return buf.transpose(-1, -2)
    if layout == "strided":
        return buf[..., 1::2]
    return buf


def _physical_shape(shape: list[int], layout: str) -> list[int]:
    if layout == "transposed":
        return shape[:-2] + [shape[-1], shape[-2]]
    if layout == "strided":
        return shape[:-1] + [2 * shape[-1] + 1]
    return list(shape)


def make_input(shape: list[int], dtype: torch.dtype, *, layout: str = "contiguous",
               values: str = "normal", seed: int = 0) -> torch.Tensor:
    """A deterministic test tensor of logical `shape` and `dtype`.

    layout: "contiguous"; "transposed" (the last two dims swapped in memory, rank >= 2);
    "strided" (every other element of a wider buffer, with an offset: a sliced view).
    values: "normal" (standard normal); "large" (normal x 1e4, x 1e2 in f16: huge logits);
    "special" (normal with about 1 in 32 elements set to +inf, -inf or NaN, and one row whose
    prefix, sometimes all of it, is -inf and the rest normal: fully and partly masked rows)."""
    if layout == "transposed" and len(shape) < 2:
        layout = "contiguous"
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    if values not in VALUES:
        raise ValueError(f"values {values!r} is not one of {VALUES}")
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(_physical_shape(list(shape), layout), generator=g, dtype=torch.float64)
    if not dtype.is_floating_point:
        lo, hi = (0, 2) if dtype == torch.bool else (-100, 100)
        ints = torch.randint(lo, hi, buf.shape, generator=g, dtype=torch.int64)
        return _view(ints.to(dtype), layout)
    if values == "large":
        buf *= LARGE.get(dtype, LARGE_DEFAULT)
    if values == "special":
        view = _view(buf, layout)
        rows = view.reshape(-1, view.shape[-1]).clone()  # contiguous logical rows
        clean = rows.clone()
        count = max(1, rows.numel() // 32)
        pos = torch.randint(0, rows.numel(), (count,), generator=g).tolist()
        kind = torch.randint(0, 3, (count,), generator=g).tolist()
        specials = (float("inf"), float("-inf"), float("nan"))
        for p, k in zip(pos, kind):
            rows[p // rows.shape[1], p % rows.shape[1]] = specials[k]
        r = int(torch.randint(0, rows.shape[0], (1,), generator=g))
        n = rows.shape[1]
        pick = int(torch.randint(0, 3, (1,), generator=g))  # all, all but the last, any prefix
        any_j = int(torch.randint(1, n + 1, (1,), generator=g))
        j = (n, max(n - 1, 1), any_j)[pick]
        rows[r] = clean[r]  # a masked row is otherwise clean: -inf prefix, then normal values
        rows[r, :j] = float("-inf")
        view.copy_(rows.reshape(view.shape))  # through the view into `buf`
    info = torch.finfo(dtype)
    buf = torch.where(buf.isfinite(), buf.clamp(-info.max, info.max), buf)
    return _view(buf.to(dtype), layout)


def arg_dtype(sig: Signature, name: str, case: Case) -> torch.dtype:
    spec = sig.tensor(name)
    return _torch_dtype(spec.dtype if spec is not None and spec.dtype else case.dtype)


def build_args(sig: Signature, case: Case) -> tuple[Any, ...]:
    """The kernel's arguments for `case`, in parameter order; tensor i gets seed `seed + i`."""
    sizes = dict(case.sizes)
    layouts = dict(case.layouts)
    scalars = dict(case.scalars)
    args: list[Any] = []
    i = 0
    for name in sig.order:
        spec = sig.tensor(name)
        if spec is None:
            args.append(scalars[name])
            continue
        args.append(make_input(sig.shape(spec, sizes), arg_dtype(sig, name, case),
                               layout=layouts[name], values=case.values, seed=case.seed + i))
        i += 1
    return tuple(args)


def to_float64(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The same arguments with floating tensors in float64 (same values, same layout): the
    inputs of the exact reference."""
    return tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


@contextlib.contextmanager
def poison_outputs() -> Iterator[None]:
    """Outputs a kernel never writes read as NaN, so a dropped store fails the comparison.

    Pallas interpret mode and the NKI interpreter already fill new buffers with NaN; runners
    that allocate with `torch.empty` (Triton's launcher) get NaN through PyTorch's own switch
    for deterministic mode, `torch.utils.deterministic.fill_uninitialized_memory`."""
    was = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
