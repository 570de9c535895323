"""`torch.vmap` rules for the library ops: the vmapped dim joins the ops' own batch dims.

Every forward op treats its leading dims as batch (rows for softmax and the norms, `b` for
attention, x's leading dims for matmul), so a vmapped dim moved to the front is one more batch
dim: one kernel launch for the whole vmap. Where that would change the answer (a batched norm
weight or matmul `y`, and the backward ops that sum weight grads over rows), the rule runs the
op once per batch element instead, which is always correct.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

Rule = Callable[..., tuple[Any, Any]]


def _front(t: torch.Tensor | None, d: int | None, n: int) -> torch.Tensor | None:
    """`t` with its vmapped dim first (broadcast to `n` when it has none)."""
    if t is None:
        return None
    return t.movedim(d, 0) if d is not None else t.expand(n, *t.shape)


def _at_front(outs: Any) -> tuple[Any, Any]:
    """(outputs, out_dims): every output batched on dim 0; out_dims mirrors the outputs'
    structure (a tuple for a tuple, a list for `Tensor[]`), as vmap requires."""
    return outs, type(outs)(0 for _ in outs)


def _loop(op: Any) -> Rule:
    def rule(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[Any, Any]:
        runs = [op(*(a.select(d, i) if d is not None and a is not None else a
                     for a, d in zip(args, in_dims))) for i in range(info.batch_size)]
        if isinstance(runs[0], torch.Tensor):
            return torch.stack(runs), 0
        outs = [torch.stack([r[j] for r in runs]) for j in range(len(runs[0]))]
        return _at_front(outs if isinstance(runs[0], list) else tuple(outs))
    return rule


def _rank_dim(dim: int, rank: int) -> int:
    """A per-element `dim` in the batched tensor (one more leading dim)."""
    return dim % rank + 1


def _softmax(info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, dim: int) -> tuple[Any, Any]:
    x0 = _front(x, in_dims[0], info.batch_size)
    return torch.ops.kernel_dsl.softmax(x0, _rank_dim(dim, x0.dim() - 1)), 0


def _softmax_bwd(info: Any, in_dims: tuple[Any, ...], dy: torch.Tensor, y: torch.Tensor,
                 dim: int) -> tuple[Any, Any]:
    n = info.batch_size
    dy0, y0 = _front(dy, in_dims[0], n), _front(y, in_dims[1], n)
    return torch.ops.kernel_dsl.softmax_backward(dy0, y0, _rank_dim(dim, y0.dim() - 1)), 0


def _norm(name: str, n_params: int) -> Rule:
    """rms_norm(x, w, eps) / layer_norm(x, w, b, eps): rows fold unless a parameter is batched."""
    op = getattr(torch.ops.kernel_dsl, name)
    loop = _loop(op)

    def rule(info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, *rest: Any) -> tuple[Any, Any]:
        if any(d is not None for d in in_dims[1:1 + n_params]):
            return loop(info, in_dims, x, *rest)
        return _at_front(op(_front(x, in_dims[0], info.batch_size), *rest))
    return rule


def _matmul(info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, y: torch.Tensor,
            bias: Any, activation: str, out_dtype: Any) -> tuple[Any, Any]:
    if in_dims[1] is not None or in_dims[2] is not None:
        return _loop(torch.ops.kernel_dsl.matmul)(info, in_dims, x, y, bias, activation, out_dtype)
    return torch.ops.kernel_dsl.matmul(_front(x, in_dims[0], info.batch_size), y, bias,
                                       activation, out_dtype), 0


def _fold(t: torch.Tensor) -> torch.Tensor:
    """[vmap, b, ...] -> [vmap * b, ...]: the vmapped dim joins attention's batch dim."""
    return t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])


def _unfold(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.reshape(n, -1, *t.shape[1:])


def _attention(info: Any, in_dims: tuple[Any, ...], q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor, *flags: Any) -> tuple[Any, Any]:
    n = info.batch_size
    q0, k0, v0 = (_front(t, d, n) for t, d in zip((q, k, v), in_dims))
    out, lse = torch.ops.kernel_dsl.flash_attention(_fold(q0), _fold(k0), _fold(v0), *flags)
    return _at_front((_unfold(out, n), _unfold(lse, n)))


def _attention_bwd(info: Any, in_dims: tuple[Any, ...], *args: Any) -> tuple[Any, Any]:
    n = info.batch_size
    tensors = [_front(t, d, n) for t, d in zip(args[:6], in_dims[:6])]
    grads = torch.ops.kernel_dsl.flash_attention_backward(*(_fold(t) for t in tensors), *args[6:])
    return _at_front(tuple(_unfold(g, n) for g in grads))


def register() -> None:
    lib = torch.ops.kernel_dsl
    rules: dict[str, Rule] = {
        "softmax": _softmax, "softmax_backward": _softmax_bwd,
        "rms_norm": _norm("rms_norm", 1), "layer_norm": _norm("layer_norm", 2),
        "matmul": _matmul, "flash_attention": _attention,
        "flash_attention_backward": _attention_bwd,
        # weight and bias grads are sums over rows: per element, never folded
        "rms_norm_backward": _loop(lib.rms_norm_backward),
        "layer_norm_backward": _loop(lib.layer_norm_backward),
        "matmul_backward": _loop(lib.matmul_backward),
    }
    for name, rule in rules.items():
        torch.library.register_vmap(f"kernel_dsl::{name}", rule)


register()
