"""The library flash attention as a Hugging Face transformers attention implementation.

    import kernel_dsl.integrations.transformers  # registers "kernel_dsl"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="kernel_dsl")

Importing registers `attention_forward` with `transformers.AttentionInterface` and transformers'
SDPA mask builder with `AttentionMaskInterface` under the name "kernel_dsl" (`register(name)`
adds more names). The calling convention is transformers' `sdpa_attention_forward`: query
[B, H, Sq, D], key/value [B, Hkv, Skv, D] (grouped-query attention runs on the Hkv heads, no
`repeat_kv`), a 4-D boolean or additive mask or None, and the output [B, Sq, H, D].

- No mask: `kernel_dsl.kernels.flash_attention`, causal exactly as transformers' SDPA path
  (top-left, and none for a single query token).
- A mask that is a causal (bottom-right, the KV-cache alignment) or full pattern combined with
  key padding, the masks transformers builds for left or right padding: the same flash attention,
  with the padding folded into the logits through one extra head-dim channel (see `_masked`).
- Anything else: other mask patterns (sliding windows, packed sequences), per-head masks, any
  mask under torch.compile (telling padding apart reads the mask's values; transformers 5 with
  no `attention_mask` passes none there), dropout > 0 in training, softcap, attention sinks,
  position bias, dtypes other than float32/bfloat16/float16: transformers' own SDPA attention for
  that call, with a one-time `kernel_dsl.kernels.FallbackWarning` naming the reason (none inside
  a torch.compile graph, where a warning would break the graph).
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from kernel_dsl.kernels import FallbackWarning, flash_attention

__all__ = ["attention_forward", "register"]

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
# A padded key's extra channel (see `_masked`). Finite, so that float16 holds it and a row that
# sees only padding stays finite; times any scale >= 0.01 it is < -300: exp() gives 0 in f32.
_PAD_LOGIT = -3.0e4
_warned: set[str] = set()


def _fallback_reason(query: torch.Tensor, key_len: int, mask: torch.Tensor | None, dropout: float,
                     kwargs: dict[str, Any]) -> str:
    if dropout:
        return "dropout > 0 (the flash attention kernels have no dropout)"
    for name in ("softcap", "s_aux", "position_bias"):
        if kwargs.get(name) is not None:
            return f"{name} (not supported by the flash attention kernels)"
    if query.dtype not in _FLOATS:
        return f"dtype {query.dtype} (float32, bfloat16 and float16 are supported)"
    if mask is not None:
        if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2:] != (query.shape[2], key_len):
            return f"an attention mask of shape {list(mask.shape)} (one [B, 1, Sq, Skv] is supported)"
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            return f"an attention mask of dtype {mask.dtype} (boolean or additive float)"
    return ""


def _key_padding(mask: torch.Tensor, q_len: int,
                 kv_len: int) -> tuple[Any, torch.Tensor, torch.Tensor] | None:
    """(causal, key_valid [B, Skv], query_sees_a_key [B, Sq]) when `mask` [B, 1, Sq, Skv] is exactly
    a causal or full pattern and key padding; else None. Reads the mask's values (so not under
    torch.compile)."""
    if mask.dtype != torch.bool:  # additive: 0 where attended, a very negative number elsewhere
        allowed = mask == 0
        if not bool(torch.all(allowed | (mask <= torch.finfo(mask.dtype).min / 2))):
            return None
        mask = allowed
    mask = mask[:, 0]
    key_valid = mask.any(dim=1)  # the keys that some query sees
    qpos = torch.arange(q_len, device=mask.device) + (kv_len - q_len)
    causal = torch.arange(kv_len, device=mask.device)[None, :] <= qpos[:, None]  # bottom-right
    if torch.equal(mask, key_valid[:, None, :] & causal):
        return "bottom_right", key_valid, mask.any(dim=2)
    if torch.equal(mask, key_valid[:, None, :].expand_as(mask)):
        return False, key_valid, mask.any(dim=2)
    return None


def _masked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
            scale: float) -> torch.Tensor | None:
    """Flash attention under a causal-or-full plus key-padding mask, or None for other masks."""
    found = _key_padding(mask, query.shape[2], key.shape[2])
    if found is None:
        return None
    causal, key_valid, sees = found
    # The kernels take no mask, so carry the padding in the logits: with q' = [q, 1] and
    # k' = [k, 0 or _PAD_LOGIT], scale * q'.k' = scale * q.k + (0 or scale * _PAD_LOGIT).
    b, hkv, skv, _ = key.shape
    pad = torch.where(key_valid, 0.0, _PAD_LOGIT).to(key.dtype)
    q1 = torch.cat([query, query.new_ones(*query.shape[:3], 1)], dim=-1)
    k1 = torch.cat([key, pad[:, None, :, None].expand(b, hkv, skv, 1)], dim=-1)
    out = flash_attention(q1, k1, value, causal=causal, sm_scale=scale)
    # A query that sees no key (a left-padding row) gets zeros, as torch's SDPA gives it.
    return out * sees[:, None, :, None].to(out.dtype)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
                      scaling: float | None = None, is_causal: bool | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature on `kernel_dsl.kernels.flash_attention`;
    returns (out [B, Sq, H, Dv], None), as `sdpa_attention_forward` (no attention weights)."""
    why = _fallback_reason(query, key.shape[2], attention_mask, dropout, kwargs)
    out = None
    if not why:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        if attention_mask is None:
            # As transformers' SDPA path: top-left causal, and none for one query token (decoding).
            causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
            out = flash_attention(query, key, value, causal=bool(causal and query.shape[2] > 1),
                                  sm_scale=scale)
        elif torch.compiler.is_compiling():
            why = "a mask under torch.compile (telling padding from other masks reads its values)"
        else:
            out = _masked(query, key, value, attention_mask, scale)
            why = "" if out is not None else "this attention mask (only causal or full plus padding)"
    if out is None:
        # warnings.warn would break a torch.compile graph: there the fallback is silent (docs).
        if why not in _warned and not torch.compiler.is_compiling():
            _warned.add(why)
            warnings.warn(f"kernel_dsl attention falls back to transformers' sdpa for {why}",
                          FallbackWarning, stacklevel=2)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    return out.transpose(1, 2).contiguous(), None


def register(name: str = "kernel_dsl") -> None:
    """Make `attn_implementation=name` use `attention_forward`. The mask builder is SDPA's:
    transformers passes no mask at all to an implementation it has no mask builder for."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)


register()
