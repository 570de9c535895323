"""`torch.vmap` over a kernel's op: fold the batch into a parallel grid dim, else loop.

A kernel's host code names the rank of each argument (`m, n = x.shape`), so a vmapped dim cannot
simply become a new grid dim. But when the batched arguments' first dims are all walked by one
parallel grid tile (bucket_plan.py: its lanes never meet), the batch can join that dim: the
elements are stacked along it, `[B, M, ...] -> [B*M, ...]`, one launch computes them all, and
each output `[B*M, ...]` splits back into `[B, M, ...]`. The kernel is traced at both sizes,
which must give the same IR apart from that dim's size (host code that reads it as a number
would see B*M). Otherwise the kernel runs once per batch element, with one warning per kernel.
(The library ops fold by their own rules: kernels/batching.py.)
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from . import bucket_plan

_warned: set[str] = set()


def _fold_tile(kernel: Any, elems: tuple[Any, ...], batched: list[int], b: int) -> str | None:
    """The parallel grid tile that walks exactly the batched arguments' first dims and every
    returned output's first dim, if the kernel traced at `b` times that size is the same."""
    ir = kernel.ir(*elems)
    if ir.host is not None:  # host views (`x.view(-1)`, `out.T`) move the batch dim: per element
        return None
    want = {(p.name, 0) for p in ir.inputs if p.arg_index in batched}
    tiles = {t.name: t for t in ir.tiles}
    for name, axes in bucket_plan.safe_tiles(ir, loops_too=False).items():
        ins = {(p.name, a) for p, a in axes if not p.is_output}
        outs = {(p.name, a) for p, a in axes if p.is_output}
        if (ins != want or any(a != 0 for _, a in outs)
                or not all((p.name, 0) in outs for p in ir.returns)
                or bucket_plan.uses_positions(ir, tiles[name])):  # stacked rows move
            continue
        big = list(elems)
        for i in batched:
            e = elems[i]
            big[i] = torch.empty((e.shape[0] * b, *e.shape[1:]), dtype=e.dtype, device="meta")
        try:
            stacked = kernel.ir(*big)
        except Exception:  # the host code does not take the stacked size
            return None
        if bucket_plan.same_apart_from(ir, stacked, {name}, ins | outs):
            return name
    return None


def _stacked(a: torch.Tensor, d: int) -> torch.Tensor:
    """[..., B (at d), M, ...] -> [B*M, ...]: the batch elements one after another along M."""
    m = a.movedim(d, 0)
    return m.reshape(m.shape[0] * m.shape[1], *m.shape[2:])


def per_element(kernel: Any, op: Callable[..., list[torch.Tensor]]) -> Callable[..., Any]:
    """A `register_vmap` rule for `op` (which returns `Tensor[]`)."""
    folds: dict[tuple[Any, ...], bool] = {}

    def rule(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[list[torch.Tensor], list[int]]:
        b = info.batch_size
        batched = [i for i, d in enumerate(in_dims) if d is not None]
        elems = tuple(a.select(d, 0) if d is not None else a for a, d in zip(args, in_dims))
        key = (kernel.arg_key(elems), tuple(in_dims), b)
        if key not in folds:
            folds[key] = _fold_tile(kernel, elems, batched, b) is not None
        if folds[key]:
            outs = op(*(_stacked(a, d) if d is not None else a for a, d in zip(args, in_dims)))
            return [o.reshape(b, o.shape[0] // b, *o.shape[1:]) for o in outs], [0] * len(outs)
        if kernel.name not in _warned:
            _warned.add(kernel.name)
            warnings.warn(f"kernel_dsl: torch.vmap over kernel `{kernel.name}` runs it once per "
                          f"batch element ({b} calls here): no parallel grid dim walks the "
                          "batched arguments' first dims alone, so the batch cannot join the "
                          "grid. For speed, give the kernel the batch dim itself.", stacklevel=2)
        runs = [op(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)))
                for i in range(b)]
        outs = [torch.stack([r[j] for r in runs]) for j in range(len(runs[0]))]
        return outs, [0] * len(outs)

    return rule
