"""The library for JAX users: each op as a JAX function (`kernel_dsl.kernels.matmul.jax`, ...).

Same DSL kernels, same layouts and semantics as the torch ops, called through `kernel.jax`
(Pallas; interpret mode on CPU hosts, Mosaic on TPU), and differentiable with `jax.grad`
through `jax.custom_vjp` rules that call the library's backward kernels. Works under
`jax.jit`. Imported on first use only: JAX claims the TPU when it is imported.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from .attention import _causal_offset
from .attention_bwd import (
    dkv_skips,
    flash_attention_bwd_dkv,
    flash_attention_bwd_dq,
)
from .attention_fwd import flash_attention_fwd
from .matmul import _ACT, column_sum, matmul_kernel
from .norms import (
    layer_norm_bwd_dwb,
    layer_norm_bwd_dx,
    layer_norm_fwd,
    rms_norm_bwd_dw,
    rms_norm_bwd_dx,
    rms_norm_fwd,
)
from .softmax import RESIDENT_MAX, softmax_bwd, softmax_bwd_streamed, softmax_fwd, softmax_fwd_streamed

_DUMMY = ((1, 1), jnp.float32)
_OUT = {None: 0, jnp.dtype(jnp.float32): 1, jnp.dtype(jnp.bfloat16): 2, jnp.dtype(jnp.float16): 3}


def _dummy() -> Any:
    return jnp.zeros(*_DUMMY)


# -- matmul ----------------------------------------------------------------------------------------
def _mm3(x: Any, y: Any) -> tuple[Any, Any, tuple[int, ...]]:
    if y.ndim == 2:
        return x.reshape(1, -1, x.shape[-1]), y[None], tuple(x.shape[:-2])
    batch = tuple(jnp.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    x3 = jnp.broadcast_to(x, batch + x.shape[-2:]).reshape(-1, *x.shape[-2:])
    y3 = jnp.broadcast_to(y, batch + y.shape[-2:]).reshape(-1, *y.shape[-2:])
    return x3, y3, batch


def _out_shape(x: Any, y: Any) -> tuple[int, ...]:
    if y.ndim == 2:
        return (*x.shape[:-1], y.shape[-1])
    return (*jnp.broadcast_shapes(x.shape[:-2], y.shape[:-2]), x.shape[-2], y.shape[-1])


@functools.lru_cache(maxsize=None)
def _matmul_fn(act: int, code: int, has_bias: bool) -> Any:
    @jax.custom_vjp
    def f(x: Any, y: Any, bias: Any) -> Any:
        x3, y3, _ = _mm3(x, y)
        b2 = bias.reshape(1, -1) if has_bias else _dummy()
        out = matmul_kernel.jax(x3, y3, b2, _dummy(), act, False, False, False, has_bias, code)
        return out.reshape(_out_shape(x, y))

    def fwd(x: Any, y: Any, bias: Any) -> Any:
        return f(x, y, bias), (x, y, bias)

    def bwd(res: Any, g: Any) -> Any:
        x, y, bias = res
        x3, y3, batch = _mm3(x, y)
        g3 = g.reshape(x3.shape[0], x3.shape[1], y3.shape[2])
        xc = _OUT[jnp.dtype(x.dtype)]
        if act:
            b2 = bias.reshape(1, -1) if has_bias else _dummy()
            dz = matmul_kernel.jax(x3, y3, b2, g3, act, True, False, False, has_bias, xc)
        else:
            dz = g3.astype(x.dtype)
        dx = matmul_kernel.jax(dz, y3, _dummy(), _dummy(), 0, False, False, True, False, xc)
        dy = matmul_kernel.jax(x3, dz, _dummy(), _dummy(), 0, False, True, False, False,
                                  _OUT[jnp.dtype(y.dtype)])
        if y.ndim == 2:
            dx, dy = dx.reshape(x.shape), dy.reshape(y.shape)
        else:
            dx = _sum_to(dx.reshape(*batch, *x.shape[-2:]), x.shape)
            dy = _sum_to(dy.reshape(*batch, *y.shape[-2:]), y.shape)
        db = None
        if has_bias:
            db = column_sum.jax(dz.reshape(-1, dz.shape[-1])).reshape(bias.shape).astype(bias.dtype)
        return dx, dy, db

    f.defvjp(fwd, bwd)
    return f


def _sum_to(t: Any, shape: tuple[int, ...]) -> Any:
    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and t.shape[i + lead] != 1)
    return t.sum(axis=axes, keepdims=False).reshape(shape) if axes else t


def matmul(x: Any, y: Any, *, bias: Any = None, activation: str | None = None,
           out_dtype: Any = None) -> Any:
    """JAX `activation(x @ y + bias)`: see `kernel_dsl.kernels.matmul`."""
    code = _OUT[None if out_dtype is None else jnp.dtype(out_dtype)]
    return _matmul_fn(_ACT[activation], code, bias is not None)(x, y, bias)


# -- flash attention -------------------------------------------------------------------------------
def _fold(t: Any, hkv: int) -> Any:
    b, h, s, d = t.shape
    return t.reshape(b * hkv, (h // hkv) * s, d)


def _qpos(g: int, sq: int, causal: bool) -> Any:
    if not causal:
        return jnp.zeros((1, 1), jnp.int32)
    return jnp.tile(jnp.arange(sq, dtype=jnp.int32), g).reshape(g * sq, 1)


@functools.lru_cache(maxsize=None)
def _attention_fn(causal: bool, scale: float, offset: int) -> Any:
    def forward(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        b, h, sq, _ = q.shape
        hkv = k.shape[1]
        out, lse = flash_attention_fwd.jax(_fold(q, hkv), _fold(k, hkv), _fold(v, hkv),
                                           _qpos(h // hkv, sq, causal), scale, causal, offset,
                                           sq, causal)  # causal: skip blocks above the diagonal
        return out.reshape(b, h, sq, v.shape[3]), lse.reshape(b, h, sq)

    @jax.custom_vjp
    def f(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        return forward(q, k, v)

    def fwd(q: Any, k: Any, v: Any) -> Any:
        out, lse = forward(q, k, v)
        return (out, lse), (q, k, v, out, lse)

    def bwd(res: Any, grads: Any) -> Any:
        q, k, v, out, lse = res
        dout = grads[0].astype(q.dtype)  # lse is not differentiated (as in the torch op)
        b, h, sq, d = q.shape
        hkv = k.shape[1]
        q3, k3, v3, do3 = _fold(q, hkv), _fold(k, hkv), _fold(v, hkv), _fold(dout, hkv)
        lse3 = lse.reshape(b * hkv, (h // hkv) * sq, 1)
        qpos = _qpos(h // hkv, sq, causal)
        scalars = (scale, causal, offset, sq, causal)
        dq, delta = flash_attention_bwd_dq.jax(q3, k3, v3, do3, _fold(out, hkv), lse3, qpos,
                                               *scalars)  # delta = rowsum(dO * O), for dK/dV
        dkv_skip = causal and dkv_skips(q3.shape[1], d, q.dtype.itemsize, "tpu")
        dk, dv = flash_attention_bwd_dkv.jax(q3, k3, v3, do3, lse3, delta, qpos, *scalars[:4],
                                             dkv_skip)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)

    f.defvjp(fwd, bwd)
    return f


def flash_attention(q: Any, k: Any, v: Any, *, causal: bool | str = False,
                    sm_scale: float | None = None, return_lse: bool = False) -> Any:
    """JAX flash attention, [B, H, S, D]: see `kernel_dsl.kernels.flash_attention`."""
    flag, offset = _causal_offset(causal, q.shape[2], k.shape[2])
    scale = float(sm_scale) if sm_scale is not None else q.shape[3] ** -0.5
    out, lse = _attention_fn(flag, scale, offset)(q, k, v)
    return (out, lse) if return_lse else out


# -- softmax and norms -----------------------------------------------------------------------------
def _rows(x: Any, axis: int) -> Any:
    return jnp.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])


def _unrows(r: Any, like: Any, axis: int) -> Any:
    return jnp.moveaxis(r.reshape(jnp.moveaxis(like, axis, -1).shape), -1, axis)


@functools.lru_cache(maxsize=None)
def _softmax_fn(axis: int) -> Any:
    @jax.custom_vjp
    def f(x: Any) -> Any:
        r = _rows(x, axis)
        kernel = softmax_fwd if r.shape[1] <= RESIDENT_MAX else softmax_fwd_streamed
        return _unrows(kernel.jax(r), x, axis)

    def fwd(x: Any) -> Any:
        y = f(x)
        return y, y

    def bwd(y: Any, g: Any) -> Any:
        yr, gr = _rows(y, axis), _rows(g.astype(y.dtype), axis)
        kernel = softmax_bwd if yr.shape[1] <= RESIDENT_MAX else softmax_bwd_streamed
        return (_unrows(kernel.jax(yr, gr), y, axis),)

    f.defvjp(fwd, bwd)
    return f


def softmax(x: Any, axis: int = -1) -> Any:
    """JAX softmax along `axis`: see `kernel_dsl.kernels.softmax`."""
    return _softmax_fn(axis % x.ndim)(x)


def _norm_n(x: Any, w: Any) -> int:
    n = 1
    for d in (w.shape if w is not None else x.shape[-1:]):
        n *= d
    return n


@functools.lru_cache(maxsize=None)
def _rms_fn(eps: float, has_weight: bool) -> Any:
    def forward(x: Any, w: Any) -> tuple[Any, Any]:
        x2 = x.reshape(-1, _norm_n(x, w))
        y, rstd = rms_norm_fwd.jax(x2, w.reshape(1, -1) if has_weight else _dummy(), eps, has_weight)
        return y.reshape(x.shape), rstd

    @jax.custom_vjp
    def f(x: Any, w: Any) -> Any:
        return forward(x, w)[0]

    def fwd(x: Any, w: Any) -> Any:
        y, rstd = forward(x, w)
        return y, (x, w, rstd)

    def bwd(res: Any, g: Any) -> Any:
        x, w, rstd = res
        n = _norm_n(x, w)
        x2, g2 = x.reshape(-1, n), g.astype(x.dtype).reshape(-1, n)
        w2 = w.reshape(1, -1) if has_weight else _dummy()
        dx = rms_norm_bwd_dx.jax(x2, w2, g2, rstd, has_weight).reshape(x.shape)
        dw = rms_norm_bwd_dw.jax(x2, g2, rstd).reshape(w.shape).astype(w.dtype) if has_weight else None
        return dx, dw

    f.defvjp(fwd, bwd)
    return f


def rms_norm(x: Any, weight: Any = None, eps: float | None = None) -> Any:
    """JAX RMS norm over `weight.shape` trailing dims: see `kernel_dsl.kernels.rms_norm`."""
    eps = float(jnp.finfo(x.dtype).eps) if eps is None else float(eps)
    return _rms_fn(eps, weight is not None)(x, weight)


@functools.lru_cache(maxsize=None)
def _ln_fn(eps: float, has_weight: bool, has_bias: bool) -> Any:
    def forward(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
        x2 = x.reshape(-1, _norm_n(x, w if has_weight else b))
        y, mean, rstd = layer_norm_fwd.jax(x2, w.reshape(1, -1) if has_weight else _dummy(),
                                           b.reshape(1, -1) if has_bias else _dummy(), eps,
                                           has_weight, has_bias)
        return y.reshape(x.shape), mean, rstd

    @jax.custom_vjp
    def f(x: Any, w: Any, b: Any) -> Any:
        return forward(x, w, b)[0]

    def fwd(x: Any, w: Any, b: Any) -> Any:
        y, mean, rstd = forward(x, w, b)
        return y, (x, w, b, mean, rstd)

    def bwd(res: Any, g: Any) -> Any:
        x, w, b, mean, rstd = res
        n = _norm_n(x, w if has_weight else b)
        x2, g2 = x.reshape(-1, n), g.astype(x.dtype).reshape(-1, n)
        w2 = w.reshape(1, -1) if has_weight else _dummy()
        dx = layer_norm_bwd_dx.jax(x2, w2, g2, mean, rstd, has_weight).reshape(x.shape)
        dw = db = None
        if has_weight or has_bias:
            dw2, db2 = layer_norm_bwd_dwb.jax(x2, g2, mean, rstd)
            dw = dw2.reshape(w.shape).astype(w.dtype) if has_weight else None
            db = db2.reshape(b.shape).astype(b.dtype) if has_bias else None
        return dx, dw, db

    f.defvjp(fwd, bwd)
    return f


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
    """JAX layer norm over `weight.shape` trailing dims: see `kernel_dsl.kernels.layer_norm`."""
    return _ln_fn(float(eps), weight is not None, bias is not None)(x, weight, bias)
