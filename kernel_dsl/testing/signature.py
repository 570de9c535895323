"""The fuzzing signature: `"x[m,k], y[k,n], eps=1e-5, causal=False|True"`.

It names every tensor argument's dims so that arguments sharing a dim name get the same size (a
matmul's `k`), and says how scalar arguments are chosen. A separate small grammar (rather than
reading shapes from the kernel) because the kernel's host code only says which shapes it
*accepts* at trace time; the fuzzer needs to know which shapes to *make* before tracing.

Grammar, entries separated by commas outside brackets:
- `name[d0, d1, ...]`: a tensor argument; each dim is a name (drawn once per example, shared
  by every argument that uses it) or an integer literal (fixed). A `:f32` suffix pins that
  argument's dtype (e.g. f32 norm weights next to bf16 activations); otherwise it takes the
  example's dtype.
- `name=v1|v2|...`: a scalar argument drawn from these Python literals (`eps=1e-5` is fixed).
- `name`: a scalar argument with its default in the kernel, or `False|True` for a bool.
Scalar parameters the signature leaves out take the kernel's defaults.
"""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

_ENTRY = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\[(.*)\]\s*(?::\s*(\w+))?|=(.*))?\s*$", re.S)
DTYPE_NAMES = ("f32", "bf16", "f16", "i32", "i16", "i8", "u8", "bool")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dims: tuple[str | int, ...]  # dim names (shared) or fixed sizes
    dtype: str | None = None  # pinned dtype name, or None: the example's dtype


@dataclass(frozen=True)
class ScalarSpec:
    name: str
    choices: tuple[Any, ...]


@dataclass
class Signature:
    """Parsed signature, in the kernel's parameter order."""

    text: str
    tensors: list[TensorSpec] = field(default_factory=list)
    scalars: list[ScalarSpec] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # kernel parameter names in order

    @property
    def dim_names(self) -> list[str]:
        """Dim names in order of first appearance (the order they are drawn in)."""
        seen: list[str] = []
        for t in self.tensors:
            for d in t.dims:
                if isinstance(d, str) and d not in seen:
                    seen.append(d)
        return seen

    def tensor(self, name: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.name == name), None)

    def shape(self, spec: TensorSpec, sizes: dict[str, int]) -> list[int]:
        return [sizes[d] if isinstance(d, str) else d for d in spec.dims]


def _split(text: str) -> list[str]:
    """Splits on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (s.strip() for s in parts) if p]


def _literal(text: str, entry: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise ValueError(f"signature entry {entry!r}: {text.strip()!r} is not a Python literal") from None


def parse(text: str, params: list[inspect.Parameter] | None = None,
          kinds: list[str] | None = None) -> Signature:
    """Parses `text`; with the kernel's `params`/`kinds`, checks it against the kernel and fills
    in the scalars it leaves out (their defaults)."""
    sig = Signature(text)
    entries: dict[str, TensorSpec | ScalarSpec | None] = {}
    for part in _split(text):
        m = _ENTRY.match(part)
        if m is None:
            raise ValueError(f"signature entry {part!r}: expected `name[d0, d1]`, `name=value` or `name`")
        name, dims, pinned, values = m.group(1), m.group(2), m.group(3), m.group(4)
        if name in entries:
            raise ValueError(f"signature names `{name}` twice")
        if dims is not None:
            parsed: list[str | int] = []
            for d in (s.strip() for s in dims.split(",")):
                if re.fullmatch(r"\d+", d) and int(d) >= 1:
                    parsed.append(int(d))
                elif re.fullmatch(r"[A-Za-z_]\w*", d):
                    parsed.append(d)
                else:
                    raise ValueError(f"signature entry {part!r}: dim {d!r} is not a name or a positive int")
            if not parsed:
                raise ValueError(f"signature entry {part!r}: a tensor needs at least one dim")
            if pinned is not None and pinned not in DTYPE_NAMES:
                raise ValueError(f"signature entry {part!r}: dtype {pinned!r} is not one of "
                                 f"{', '.join(DTYPE_NAMES)}")
            entries[name] = TensorSpec(name, tuple(parsed), pinned)
        elif values is not None:
            entries[name] = ScalarSpec(name, tuple(_literal(v, part) for v in values.split("|")))
        else:
            entries[name] = None  # a scalar with its default
    if params is None:
        for name, e in entries.items():
            if isinstance(e, TensorSpec):
                sig.tensors.append(e)
            elif isinstance(e, ScalarSpec):
                sig.scalars.append(e)
            else:
                raise ValueError(f"signature entry `{name}` needs `[dims]` or `=value` without a kernel")
            sig.order.append(name)
        return sig
    kinds = kinds or ["Tensor"] * len(params)
    unknown = set(entries) - {p.name for p in params}
    if unknown:
        raise ValueError(f"signature names {sorted(unknown)}, which the kernel does not take "
                         f"(its parameters: {', '.join(p.name for p in params)})")
    for p, kind in zip(params, kinds):
        e = entries.get(p.name)
        sig.order.append(p.name)
        if kind == "Tensor":
            if not isinstance(e, TensorSpec):
                raise ValueError(f"tensor parameter `{p.name}` needs its dims in the signature, "
                                 f"e.g. `{p.name}[m, n]`")
            sig.tensors.append(e)
            continue
        if isinstance(e, TensorSpec):
            raise ValueError(f"`{p.name}` is a {kind} parameter, not a tensor")
        if isinstance(e, ScalarSpec):
            sig.scalars.append(e)
        elif p.default is not inspect.Parameter.empty:
            sig.scalars.append(ScalarSpec(p.name, (p.default,)))
        elif kind == "bool":
            sig.scalars.append(ScalarSpec(p.name, (False, True)))
        else:
            raise ValueError(f"scalar parameter `{p.name}` has no default: give it as `{p.name}=VALUE`")
    return sig
