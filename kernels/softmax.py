"""Softmax along any dim, as a torch op with autograd and a JAX entry.

The op moves `dim` last and flattens to rows [M, N]. Rows up to `RESIDENT_MAX` elements are
computed with the whole row in on-chip memory (one read, one write); longer rows stream in
blocks: a first pass keeps the running max and the rescaled sum (online softmax), a second
writes the output. Statistics are f32; the max is subtracted first, so large logits never
overflow. Backward: dx = y * (dy - sum(dy * y)), with the same two layouts.
"""
from __future__ import annotations

from typing import Any

import torch

import kernel_dsl as kd
from kernel_dsl import amp
from kernel_dsl.buckets import bucket, cut, padded

from .base import call, check_float, library_kernel, library_op, register_autograd

F32 = torch.float32
RESIDENT_MAX = 16384  # longest row kept whole in VMEM (x + out, double-buffered, 8+ rows)


@library_kernel
def softmax_fwd(x: torch.Tensor):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        row = x[tm, :].to(F32)
        e = torch.exp(row - row.amax(dim=-1, keepdim=True))
        out[tm, :] = (e / e.sum(dim=-1, keepdim=True)).to(out.dtype)
    return out


@library_kernel
def softmax_fwd_streamed(x: torch.Tensor):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        mx = kd.full([tm, 1], float("-inf"), dtype=F32)
        den = kd.zeros([tm, 1], dtype=F32)
        for tn in kd.tile(n):
            v = x[tm, tn].to(F32)
            new_mx = torch.maximum(mx, v.amax(dim=-1, keepdim=True))
            safe = torch.where(new_mx == float("-inf"), 0.0, new_mx)
            den = den * torch.exp(mx - safe) + torch.exp(v - safe).sum(dim=-1, keepdim=True)
            mx = new_mx
        for tn in kd.tile(n):
            v = x[tm, tn].to(F32)
            out[tm, tn] = (torch.exp(v - mx) / den).to(out.dtype)
    return out


@library_kernel
def softmax_bwd(y: torch.Tensor, dy: torch.Tensor):
    m, n = y.shape
    dx = torch.empty_like(y)
    for tm in kd.tile(m):
        yr = y[tm, :].to(F32)
        g = dy[tm, :].to(F32)
        dx[tm, :] = (yr * (g - (g * yr).sum(dim=-1, keepdim=True))).to(dx.dtype)
    return dx


@library_kernel
def softmax_bwd_streamed(y: torch.Tensor, dy: torch.Tensor):
    m, n = y.shape
    dx = torch.empty_like(y)
    for tm in kd.tile(m):
        dot = kd.zeros([tm, 1], dtype=F32)
        for tn in kd.tile(n):
            dot = dot + (y[tm, tn].to(F32) * dy[tm, tn].to(F32)).sum(dim=-1, keepdim=True)
        for tn in kd.tile(n):
            yr = y[tm, tn].to(F32)
            dx[tm, tn] = (yr * (dy[tm, tn].to(F32) - dot)).to(dx.dtype)
    return dx


def _rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.movedim(dim, -1).reshape(-1, x.shape[dim])


def _unrows(r: torch.Tensor, like: torch.Tensor, dim: int) -> torch.Tensor:
    moved = list(like.movedim(dim, -1).shape)
    return r.reshape(moved).movedim(-1, dim).contiguous()


@library_op("kernel_dsl::softmax")
def _fwd_op(x: torch.Tensor, dim: int) -> torch.Tensor:
    r = _rows(x, dim)
    m = r.shape[0]  # rows are independent: pad them to their shape bucket (kernel_dsl.buckets)
    kernel = softmax_fwd if r.shape[1] <= RESIDENT_MAX else softmax_fwd_streamed
    return _unrows(cut(kernel(*padded([r], 0, bucket(m))), 0, m), x, dim)


@_fwd_op.register_fake
def _fwd_fake(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.new_empty(x.shape)


@library_op("kernel_dsl::softmax_backward")
def _bwd_op(dy: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    yr, gr = _rows(y, dim), _rows(dy.to(y.dtype), dim)
    m = yr.shape[0]
    kernel = softmax_bwd if yr.shape[1] <= RESIDENT_MAX else softmax_bwd_streamed
    return _unrows(cut(kernel(*padded([yr, gr], 0, bucket(m))), 0, m), y, dim)


@_bwd_op.register_fake
def _bwd_fake(dy: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    return y.new_empty(y.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    (y,) = ctx.saved_tensors
    return call(_bwd_op, dy, y, ctx.dim), None


register_autograd(_fwd_op, _backward, _setup_context)
# torch.softmax under autocast: float32 on CUDA (fp32_set_opt_dtype), the input's dtype on CPU
# (not in CPU autocast's lists), so only CUDA gets a rule
amp.register("kernel_dsl::softmax", "fp32", ("cuda",))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`torch.softmax(x, dim)` for float32, bfloat16 and float16 (f32 statistics; the output
    has x's dtype; float32 under CUDA autocast, as torch's). Any rank and dim; differentiable."""
    check_float("x", x)
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(f"softmax: x has shape {list(x.shape)}; it needs at least one element")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor")
    return call(_fwd_op, x, dim % x.dim())
