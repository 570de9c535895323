"""RMS norm and layer norm over the trailing dims, as torch ops with autograd and JAX entries.

    y = rms_norm(x, weight, eps)            # x * rsqrt(mean(x^2) + eps) * weight
    y = layer_norm(x, weight, bias, eps)    # (x - mean) * rsqrt(var + eps) * weight + bias

The normalized shape is `weight.shape` (the last dim when weight is None); rows [M, N] are
normalized whole in on-chip memory, statistics in f32. The forward ops also return the per-row
statistics (rstd, and mean for layer norm; f32 [M, 1]), which autograd saves and marks
non-differentiable. Backward: one kernel per row block for dx, and one per column block that
loops over all rows for the weight (and bias) gradients, summed in f32.
"""
from __future__ import annotations

from typing import Any

import torch

import kernel_dsl as kd
from kernel_dsl import amp
from kernel_dsl.buckets import bucket, cut, padded

from .base import call, check_float, library_kernel, library_op, placeholder, register_autograd

F32 = torch.float32


@library_kernel
def rms_norm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float, has_weight: bool):
    m, n = x.shape
    out = torch.empty_like(x)
    rstd = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        row = x[tm, :].to(F32)
        r = torch.rsqrt((row * row).mean(dim=-1, keepdim=True) + eps)
        y = row * r
        if has_weight:
            y = y * w[:, :].to(F32)
        out[tm, :] = y.to(out.dtype)
        rstd[tm, :] = r
    return out, rstd


@library_kernel
def rms_norm_bwd_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor,
                    has_weight: bool):
    m, n = x.shape
    dx = torch.empty_like(x)
    for tm in kd.tile(m):
        r = rstd[tm, :]
        xhat = x[tm, :].to(F32) * r
        g = dy[tm, :].to(F32)
        if has_weight:
            g = g * w[:, :].to(F32)
        dx[tm, :] = (r * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True))).to(dx.dtype)
    return dx


@library_kernel
def rms_norm_bwd_dw(x: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor):
    m, n = x.shape
    dw = torch.empty([n, 1], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        acc = kd.zeros([tn, 1], dtype=F32)
        for tm in kd.tile(m):
            v = dy[tm, tn].to(F32) * x[tm, tn].to(F32) * rstd[tm, :]
            acc = acc + v.T.sum(dim=-1, keepdim=True)  # a column: see matmul.column_sum
        dw[tn, :] = acc
    return dw


@library_kernel
def layer_norm_fwd(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float,
                   has_weight: bool, has_bias: bool):
    m, n = x.shape
    out = torch.empty_like(x)
    mean = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    rstd = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        row = x[tm, :].to(F32)
        mu = row.mean(dim=-1, keepdim=True)
        c = row - mu
        r = torch.rsqrt((c * c).mean(dim=-1, keepdim=True) + eps)
        y = c * r
        if has_weight:
            y = y * w[:, :].to(F32)
        if has_bias:
            y = y + b[:, :].to(F32)
        out[tm, :] = y.to(out.dtype)
        mean[tm, :] = mu
        rstd[tm, :] = r
    return out, mean, rstd


@library_kernel
def layer_norm_bwd_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, mean: torch.Tensor,
                      rstd: torch.Tensor, has_weight: bool):
    m, n = x.shape
    dx = torch.empty_like(x)
    for tm in kd.tile(m):
        r = rstd[tm, :]
        xhat = (x[tm, :].to(F32) - mean[tm, :]) * r
        g = dy[tm, :].to(F32)
        if has_weight:
            g = g * w[:, :].to(F32)
        gm = g.mean(dim=-1, keepdim=True)
        gx = (g * xhat).mean(dim=-1, keepdim=True)
        dx[tm, :] = (r * (g - gm - xhat * gx)).to(dx.dtype)
    return dx


@library_kernel
def layer_norm_bwd_dwb(x: torch.Tensor, dy: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor):
    m, n = x.shape
    dw = torch.empty([n, 1], dtype=torch.float32, device=x.device)
    db = torch.empty([n, 1], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        acc_w = kd.zeros([tn, 1], dtype=F32)
        acc_b = kd.zeros([tn, 1], dtype=F32)
        for tm in kd.tile(m):
            g = dy[tm, tn].to(F32)
            xhat = (x[tm, tn].to(F32) - mean[tm, :]) * rstd[tm, :]
            acc_w = acc_w + (g * xhat).T.sum(dim=-1, keepdim=True)
            acc_b = acc_b + g.T.sum(dim=-1, keepdim=True)
        dw[tn, :] = acc_w
        db[tn, :] = acc_b
    return dw, db


# -- host side -------------------------------------------------------------------------------------
def _dummy(x: torch.Tensor) -> torch.Tensor:
    return placeholder(x.device)


def _row2(w: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return w.reshape(1, -1) if w is not None else _dummy(x)


def _n(x: torch.Tensor, w: torch.Tensor | None) -> int:
    n = 1
    for d in (w.shape if w is not None else x.shape[-1:]):
        n *= d
    return n


def _stat_shape(x: torch.Tensor, w: torch.Tensor | None) -> list[Any]:
    nd = w.dim() if w is not None else 1
    return [*x.shape[:x.dim() - nd], *([1] * nd)]


@library_op("kernel_dsl::rms_norm")
def _rms_op(x: torch.Tensor, weight: torch.Tensor | None, eps: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = x.reshape(-1, _n(x, weight))
    m = x2.shape[0]  # rows are independent: pad them to their shape bucket (kernel_dsl.buckets)
    (x2,) = padded([x2], 0, bucket(m))
    y, rstd = rms_norm_fwd(x2, _row2(weight, x), float(eps), weight is not None)
    return cut(y, 0, m).reshape(x.shape), cut(rstd, 0, m).reshape(_stat_shape(x, weight))


@_rms_op.register_fake
def _rms_fake(x: torch.Tensor, weight: torch.Tensor | None, eps: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), x.new_empty(_stat_shape(x, weight), dtype=torch.float32)


@library_op("kernel_dsl::rms_norm_backward")
def _rms_bwd_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                rstd: torch.Tensor) -> list[torch.Tensor]:
    n = _n(x, weight)
    x2, g2, r2 = x.reshape(-1, n), dy.to(x.dtype).reshape(-1, n), rstd.reshape(-1, 1)
    m = x2.shape[0]  # zero rows pad to the bucket: they add nothing to dw
    x2, g2, r2 = padded([x2, g2, r2], 0, bucket(m))
    dx = cut(rms_norm_bwd_dx(x2, _row2(weight, x), g2, r2, weight is not None), 0, m)
    dx = dx.reshape(x.shape)
    if weight is None:
        return [dx]
    dw = rms_norm_bwd_dw(x2, g2, r2).reshape(weight.shape).to(weight.dtype)
    return [dx, dw]


@_rms_bwd_op.register_fake
def _rms_bwd_fake(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                  rstd: torch.Tensor) -> list[torch.Tensor]:
    return [x.new_empty(x.shape)] + ([weight.new_empty(weight.shape)] if weight is not None else [])


def _rms_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _rms_backward(ctx: Any, dy: torch.Tensor, _drstd: Any) -> tuple[Any, ...]:
    x, weight, rstd = ctx.saved_tensors
    grads = call(_rms_bwd_op, dy, x, weight, rstd)
    return grads[0], grads[1] if weight is not None else None, None


register_autograd(_rms_op, _rms_backward, _rms_setup)


@library_op("kernel_dsl::layer_norm")
def _ln_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    shape_src = weight if weight is not None else bias
    x2 = x.reshape(-1, _n(x, shape_src))
    m = x2.shape[0]
    (x2,) = padded([x2], 0, bucket(m))
    y, mean, rstd = layer_norm_fwd(x2, _row2(weight, x), _row2(bias, x), float(eps),
                                   weight is not None, bias is not None)
    st = _stat_shape(x, shape_src)
    return (cut(y, 0, m).reshape(x.shape), cut(mean, 0, m).reshape(st),
            cut(rstd, 0, m).reshape(st))


@_ln_op.register_fake
def _ln_fake(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    st = _stat_shape(x, weight if weight is not None else bias)
    return (x.new_empty(x.shape), x.new_empty(st, dtype=torch.float32),
            x.new_empty(st, dtype=torch.float32))


@library_op("kernel_dsl::layer_norm_backward")
def _ln_bwd_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
               bias: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor
               ) -> list[torch.Tensor]:
    shape_src = weight if weight is not None else bias
    n = _n(x, shape_src)
    x2, g2 = x.reshape(-1, n), dy.to(x.dtype).reshape(-1, n)
    m2, r2 = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    m = x2.shape[0]  # zero rows pad to the bucket: they add nothing to dw and db
    x2, g2, m2, r2 = padded([x2, g2, m2, r2], 0, bucket(m))
    dx = cut(layer_norm_bwd_dx(x2, _row2(weight, x), g2, m2, r2, weight is not None), 0, m)
    out = [dx.reshape(x.shape)]
    if weight is not None or bias is not None:
        dw, db = layer_norm_bwd_dwb(x2, g2, m2, r2)
        if weight is not None:
            out.append(dw.reshape(weight.shape).to(weight.dtype))
        if bias is not None:
            out.append(db.reshape(bias.shape).to(bias.dtype))
    return out


@_ln_bwd_op.register_fake
def _ln_bwd_fake(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                 bias: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor
                 ) -> list[torch.Tensor]:
    return [x.new_empty(x.shape)] + [t.new_empty(t.shape) for t in (weight, bias) if t is not None]


def _ln_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, weight, bias, _ = inputs
    ctx.save_for_backward(x, weight, bias, output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])


def _ln_backward(ctx: Any, dy: torch.Tensor, _dmean: Any, _drstd: Any) -> tuple[Any, ...]:
    x, weight, bias, mean, rstd = ctx.saved_tensors
    grads = iter(call(_ln_bwd_op, dy, x, weight, bias, mean, rstd))
    dx = next(grads)
    dw = next(grads) if weight is not None else None
    db = next(grads) if bias is not None else None
    return dx, dw, db, None


register_autograd(_ln_op, _ln_backward, _ln_setup)
# layer_norm and rms_norm under autocast: float32 on CUDA (autocast's fp32 list), the input's
# dtype on CPU (in none of CPU autocast's lists), so only CUDA gets a rule
amp.register("kernel_dsl::rms_norm", "fp32", ("cuda",))
amp.register("kernel_dsl::layer_norm", "fp32", ("cuda",))


def _check(name: str, x: torch.Tensor, params: dict[str, torch.Tensor | None]) -> None:
    check_float("x", x)
    shape = None
    for pname, p in params.items():
        if p is None:
            continue
        check_float(pname, p)
        if p.dim() == 0 or p.dim() > x.dim() or tuple(x.shape[x.dim() - p.dim():]) != tuple(p.shape):
            raise ValueError(f"{name}: {pname} {list(p.shape)} does not match the trailing dims "
                             f"of x {list(x.shape)}")
        if shape is not None and tuple(p.shape) != shape:
            raise ValueError(f"{name}: weight and bias shapes differ")
        shape = tuple(p.shape)
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(f"{name}: x has shape {list(x.shape)}; it needs at least one element")


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None
             ) -> torch.Tensor:
    """`torch.nn.functional.rms_norm(x, weight.shape, weight, eps)`: x * rsqrt(mean(x^2) + eps)
    * weight over the trailing `weight.shape` dims (the last dim when weight is None). eps
    defaults to `torch.finfo(x.dtype).eps` as in torch. f32 statistics; the output has x's
    dtype (float32 under CUDA autocast, as torch's). Differentiable in x and weight."""
    _check("rms_norm", x, {"weight": weight})
    # under CUDA autocast the op runs in f32 (amp.register above), and torch takes f32's eps
    cast = x.device.type == "cuda" and torch.is_autocast_enabled("cuda")
    eps = torch.finfo(torch.float32 if cast else x.dtype).eps if eps is None else eps
    return call(_rms_op, x, weight, float(eps))[0]


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """`torch.nn.functional.layer_norm(x, weight.shape, weight, bias, eps)` over the trailing
    `weight.shape` dims (the last dim when both are None). f32 statistics; the output has x's
    dtype (float32 under CUDA autocast, as torch's). Differentiable in x, weight and bias."""
    _check("layer_norm", x, {"weight": weight, "bias": bias})
    return call(_ln_op, x, weight, bias, float(eps))[0]
