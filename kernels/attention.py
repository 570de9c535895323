"""Flash attention as torch ops with autograd, the SDPA drop-in, and the JAX entry.

    out = flash_attention(q, k, v, causal=True)                 # [B, H, Sq, D] each
    out, lse = flash_attention(q, k, v, return_lse=True)        # lse: [B, H, Sq] f32

Ops: `torch.ops.kernel_dsl.flash_attention(q, k, v, causal, sm_scale, causal_offset)` returns
(out, lse) and `torch.ops.kernel_dsl.flash_attention_backward(...)` returns (dq, dk, dv); the
forward's autograd (`register_autograd`) saves q, k, v, out and lse, marks lse
non-differentiable and calls the backward op. Both bodies are plain torch reshapes around the
DSL kernels of `attention_fwd.py` / `attention_bwd.py`, which run on the selected backend
(`with kd.backend("nki"):` etc.).
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from kernel_dsl import amp
from kernel_dsl.buckets import bucket, cut, enabled, pad

from .attention_bwd import (
    dkv_skips,
    flash_attention_bwd_dkv,
    flash_attention_bwd_dq,
)
from .attention_fwd import flash_attention_fwd
from .base import call, check_float, library_op, placeholder, register_autograd

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


class FallbackWarning(UserWarning):
    """`scaled_dot_product_attention` ran PyTorch's own implementation instead of ours.
    `warnings.simplefilter("error", FallbackWarning)` turns every fallback into an error."""


def _causal_offset(causal: Any, sq: int, skv: int) -> tuple[bool, int]:
    if causal is False or causal is None:
        return False, 0
    if causal is True or causal == "top_left":
        return True, 0
    if causal == "bottom_right":
        return True, skv - sq
    raise ValueError(f"causal={causal!r}: use False, True (= 'top_left', as "
                     "scaled_dot_product_attention) or 'bottom_right' (KV-cache alignment)")


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(name, t)
        if t.dim() != 4:
            raise ValueError(f"flash_attention: {name} has shape {list(t.shape)}; the layout is "
                             "[batch, heads, seq, head_dim]")
    amp.check_same_dtype("flash_attention", q=q, k=k, v=v)
    b, h, _, d = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"flash_attention: shapes q {list(q.shape)}, k {list(k.shape)}, "
                         f"v {list(v.shape)} do not fit [B, H, Sq, D], [B, Hkv, Skv, D], "
                         "[B, Hkv, Skv, Dv]")
    if k.shape[3] != d:
        raise ValueError(f"flash_attention: q head dim {d} != k head dim {k.shape[3]}")
    if h % k.shape[1] != 0:
        raise ValueError(f"flash_attention: {h} query heads is not a multiple of {k.shape[1]} "
                         "key/value heads")
    if min(q.shape) == 0 or min(k.shape) == 0 or min(v.shape) == 0:
        raise ValueError("flash_attention: empty tensors are not supported")


def _qpos(g: int, sq: int, causal: bool, device: torch.device) -> torch.Tensor:
    """Each folded row's query position (only read when causal)."""
    if not causal:
        return placeholder(device, torch.int32)
    return torch.arange(sq, dtype=torch.int32, device=device).repeat(g).reshape(g * sq, 1)


def _fold(t: torch.Tensor, hkv: int) -> torch.Tensor:
    """[B, H, S, D] -> [B*Hkv, (H/Hkv)*S, D]: a view of a contiguous tensor."""
    b, h, s, d = t.shape
    return t.contiguous().reshape(b * hkv, (h // hkv) * s, d)


@functools.lru_cache(maxsize=64)  # a few tensors per model, made once: not on every call
def _row_limits(g: int, sq: int, skv: int, sqb: int, causal: bool, offset: int,
                device: torch.device) -> torch.Tensor:
    """[G*Sqb, 1] int32: the last key each folded row sees (-1 for padded rows)."""
    pos = torch.arange(sqb, dtype=torch.int32, device=device)
    limit = (pos + offset).clamp(max=skv - 1) if causal else torch.full_like(pos, skv - 1)
    return torch.where(pos < sq, limit, -1).repeat(g).reshape(g * sqb, 1)


# -- the ops ---------------------------------------------------------------------------------------
class _Plan:
    """How one call runs: the sequence lengths it is built for and the causal inputs.

    Without shape buckets: the true lengths, `qpos` and the caller's causal flag and offset.
    With them (kernel_dsl.buckets): Sq and Skv padded to their buckets, and masking always on,
    through per-row limits that the kernel reads as `qpos` with offset 0: row r sees key j iff
    j <= limit[r], where limit = min(qpos + offset, Skv - 1) causally, Skv - 1 otherwise, and -1
    for padded rows. The true lengths are then data, so every length in a bucket shares a build.
    """

    def __init__(self, h: int, hkv: int, sq: int, skv: int, causal: bool, offset: int,
                 device: torch.device):
        g = h // hkv
        self.sq, self.skv = sq, skv
        if not enabled():
            self.sqb, self.skvb = sq, skv
            self.qpos, self.causal, self.offset = _qpos(g, sq, causal, device), causal, offset
            self.skip = causal
            return
        self.sqb, self.skvb = bucket(sq), bucket(skv)
        self.qpos = _row_limits(g, sq, skv, self.sqb, causal, offset, device)
        self.causal, self.offset = True, 0
        # causal block skipping needs the diagonal in the build: bucketed, only the top-left
        # one (offset 0) is the same for every length in the bucket, and only while every real
        # row's limit is its position: with Sq > Skv the limits stop at Skv - 1, and the
        # unmasked blocks below the diagonal would take the padded keys
        self.skip = causal and offset == 0 and sq <= skv

    def scalars(self, sm_scale: float) -> tuple[float, bool, int, int, bool]:
        return float(sm_scale), bool(self.causal), int(self.offset), self.sqb, bool(self.skip)


@library_op("kernel_dsl::flash_attention")
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
            causal_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, sq, _ = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    plan = _Plan(h, hkv, sq, k.shape[2], bool(causal), int(causal_offset), q.device)
    q, k, v = pad(q, 2, plan.sqb), pad(k, 2, plan.skvb), pad(v, 2, plan.skvb)
    out, lse = flash_attention_fwd(_fold(q, hkv), _fold(k, hkv), _fold(v, hkv), plan.qpos,
                                   *plan.scalars(sm_scale))
    return (cut(out.reshape(b, h, plan.sqb, dv), 2, sq),
            cut(lse.reshape(b, h, plan.sqb), 2, sq))


@_fwd_op.register_fake
def _fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
              causal_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, sq, _ = q.shape
    out = q.new_empty((b, h, sq, v.shape[3]))
    return out, q.new_empty((b, h, sq), dtype=torch.float32)


@library_op("kernel_dsl::flash_attention_backward")
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            out: torch.Tensor, lse: torch.Tensor, causal: bool, sm_scale: float,
            causal_offset: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, h, sq, d = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    plan = _Plan(h, hkv, sq, skv, bool(causal), int(causal_offset), q.device)
    # padded rows and keys are zeros and see nothing (limit -1): their gradients are zero
    q, dout, out, lse = (pad(t, 2, plan.sqb) for t in (q, dout.to(q.dtype), out, lse))
    k, v = pad(k, 2, plan.skvb), pad(v, 2, plan.skvb)
    q3, k3, v3 = _fold(q, hkv), _fold(k, hkv), _fold(v, hkv)
    do3, o3 = _fold(dout, hkv), _fold(out, hkv)
    lse3 = lse.contiguous().reshape(b * hkv, (h // hkv) * plan.sqb, 1)
    scalars = plan.scalars(sm_scale)
    dq, delta = flash_attention_bwd_dq(q3, k3, v3, do3, o3, lse3, plan.qpos, *scalars)
    device = q.device.type if q.device.type in ("cpu", "cuda", "meta") else "tpu"
    dkv_skip = plan.skip and dkv_skips(q3.shape[1], d, q.element_size(), device)
    dk, dv_ = flash_attention_bwd_dkv(q3, k3, v3, do3, lse3, delta, plan.qpos, *scalars[:4],
                                      dkv_skip)
    return (cut(dq.reshape(b, h, plan.sqb, d), 2, sq),
            cut(dk.reshape(b, hkv, plan.skvb, d), 2, skv),
            cut(dv_.reshape(b, hkv, plan.skvb, dv), 2, skv))


@_bwd_op.register_fake
def _bwd_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              out: torch.Tensor, lse: torch.Tensor, causal: bool, sm_scale: float,
              causal_offset: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    q, k, v, causal, sm_scale, causal_offset = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scalars = (causal, sm_scale, causal_offset)
    ctx.mark_non_differentiable(lse)


def _backward(ctx: Any, dout: torch.Tensor, _dlse: Any) -> tuple[Any, ...]:
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = call(_bwd_op, dout, q, k, v, out, lse, *ctx.scalars)
    return dq, dk, dv, None, None, None


register_autograd(_fwd_op, _backward, _setup_context)
# as scaled_dot_product_attention, CPU and CUDA: q, k, v in the autocast dtype; lse stays f32
amp.register("kernel_dsl::flash_attention", "lower_precision_fp")


# -- public API ------------------------------------------------------------------------------------
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool | str = False,
                    sm_scale: float | None = None, return_lse: bool = False) -> Any:
    """Flash attention, `scaled_dot_product_attention` semantics, in the layout [B, H, S, D].

    q: [B, H, Sq, D]; k: [B, Hkv, Skv, D]; v: [B, Hkv, Skv, Dv]; H a multiple of Hkv (grouped
    and multi-query attention: query head h uses key/value head h // (H // Hkv)). float32,
    bfloat16 or float16 (all three the same, except under `torch.autocast`, where they run in
    the autocast dtype as in scaled_dot_product_attention); any Sq, Skv >= 1; any head dim (64, 80, 96, 128,
    256 tested). Returns out [B, H, Sq, Dv] in q's dtype, and with `return_lse=True` also the
    log-sum-exp of the scaled logits per row, [B, H, Sq] float32 (-inf for a row that sees no key;
    not differentiable).

    causal: False; True or "top_left" (as SDPA's `is_causal`: query i sees keys j <= i, even when
    Sq != Skv); "bottom_right" (query i sees keys j <= i + Skv - Sq: the KV-cache alignment of
    flash-attn; the first Sq - Skv rows then see no key and are zeros, never NaN).
    sm_scale: logit scale, default 1/sqrt(D).

    Differentiable in q, k, v (flash attention backward kernels, f32 accumulation).
    """
    _check(q, k, v)
    flag, offset = _causal_offset(causal, q.shape[2], k.shape[2])
    scale = float(sm_scale) if sm_scale is not None else q.shape[3] ** -0.5
    out, lse = call(_fwd_op, q, k, v, flag, scale, offset)
    return (out, lse) if return_lse else out


def _fallback_reason(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float,
                     enable_gqa: bool) -> str:
    if attn_mask is not None:
        return "attn_mask is not supported (use is_causal=True for causal masks)"
    if dropout_p:
        return "dropout_p > 0 is not supported"
    ts = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in ts):
        return "query, key and value must be tensors"
    if any(t.dtype not in (torch.float32, torch.bfloat16, torch.float16) for t in ts):
        return f"dtype {query.dtype} is not supported (float32, bfloat16, float16)"
    if not (query.dtype == key.dtype == value.dtype) \
            and not torch.is_autocast_enabled(query.device.type):  # autocast casts them
        return "query, key and value dtypes differ"
    if query.dim() < 3 or not (query.dim() == key.dim() == value.dim()):
        return "inputs must have the same rank >= 3"
    if query.dim() >= 4 and query.shape[:-3] != key.shape[:-3]:
        return "broadcast batch dims are not supported"
    if any(t.numel() == 0 for t in ts):
        return "empty inputs are not supported"
    if query.dim() >= 4:
        hq, hkv = query.shape[-3], key.shape[-3]
        if hq != hkv and not enable_gqa:
            return "different query and key/value head counts need enable_gqa=True (as in torch)"
        if hq % hkv:
            return "query heads are not a multiple of key/value heads"
    elif query.shape[0] != key.shape[0]:
        return "3-D inputs need equal batch sizes"
    if key.shape[:-2] != value.shape[:-2] or key.shape[-2] != value.shape[-2] \
            or query.shape[-1] != key.shape[-1]:
        return "query, key and value shapes do not fit"
    return ""


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for `torch.nn.functional.scaled_dot_product_attention` on our flash attention.

    Supported: attn_mask=None, dropout_p=0, is_causal (top-left aligned, as torch), scale,
    enable_gqa, inputs [..., H, S, D] of rank >= 3 (leading dims are folded into the batch) in
    float32, bfloat16 or float16. Anything else falls back to PyTorch's own implementation and
    warns with `FallbackWarning` naming the reason; `warnings.simplefilter("error",
    FallbackWarning)` makes it an error instead. Differentiable like the original.
    """
    why = _fallback_reason(query, key, value, attn_mask, dropout_p, enable_gqa)
    if why:
        warnings.warn(f"kernel_dsl.kernels.scaled_dot_product_attention falls back to PyTorch: "
                      f"{why}", FallbackWarning, stacklevel=2)
        kw = {"enable_gqa": enable_gqa} if enable_gqa else {}
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
            scale=scale, **kw)

    def to4(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3:
            return t.unsqueeze(0)  # [N, S, D] -> [1, N, S, D]: the batch rows are independent
        return t.reshape(-1, *t.shape[-3:])

    out = flash_attention(to4(query), to4(key), to4(value), causal=bool(is_causal),
                          sm_scale=scale)
    return out.reshape(*query.shape[:-1], value.shape[-1])
