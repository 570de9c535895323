"""Flash attention forward, in the DSL: online softmax over key blocks, f32 statistics.

Layout (made by `attention.py` from [B, H, S, D] without copying): the query heads of one
key/value head are folded into the rows, q: [B*Hkv, G*Sq, D] with G = H // Hkv, so grouped and
multi-query attention read each key/value block once for all G heads and give the matrix unit
G*Sq rows even when Sq is 1 (decoding). k, v: [B*Hkv, Skv, D].

Causal masking needs each row's query position, which is `row - g*Sq` in the folded layout; the
DSL has no integer division, so the position comes in as a small int32 input `qpos` [G*Sq, 1]
(unused, and then [1, 1], without masking). Row r sees key j iff `j <= qpos[r] + offset`:
offset 0 is `torch.nn.functional.scaled_dot_product_attention`'s top-left alignment, offset
Skv - Sq the bottom-right (KV-cache) alignment.

Causal block skipping (`skip`, with `seq_q` the per-head length of the folded rows): the key
loop runs over [0, last query position of the row block + offset + 1) only, so blocks above the
diagonal are never visited; the mask still cuts the diagonal blocks. attention.py turns it on
whenever that bound is known when the kernel is built.

Numerics: logits, max, sum and the output accumulator are f32 (`(a @ b).to(float32)` keeps the
f32 product, unrounded); logits are shifted by the running max, so large logits never overflow; a row that
sees no key keeps max -inf and sum 0 and writes zeros (never NaN) with lse = -inf.
Outputs: o [B*Hkv, G*Sq, Dv] in q's dtype, lse [B*Hkv, G*Sq, 1] f32 (natural log).
"""
from __future__ import annotations

from typing import Any

import torch

import kernel_dsl as kd

from .base import library_kernel

F32 = torch.float32
NEG_INF = float("-inf")


def last_position(tq: Any, rows: int, seq_q: int) -> Any:
    """The largest query position in row block `tq` of the folded layout (row r is position
    r % seq_q): the block's last row's, or seq_q - 1 when the block spans two heads."""
    if rows == seq_q:
        return tq.end - 1
    first_head, last_head = tq.begin // seq_q, (tq.end - 1) // seq_q
    return torch.where(first_head == last_head, tq.end - 1 - last_head * seq_q, seq_q - 1)


@library_kernel
def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: torch.Tensor,
                        scale: float, causal: bool, offset: int, seq_q: int = 0,
                        skip: bool = False):
    bh, rows, d = q.shape
    skv = k.shape[1]
    dv = v.shape[2]
    out = torch.empty([bh, rows, dv], dtype=q.dtype, device=q.device)
    lse = torch.empty([bh, rows, 1], dtype=torch.float32, device=q.device)
    for tb, tq in kd.tile([bh, rows]):  # several heads per grid step: a config knob
        qb = q[tb, tq, :]
        m_i = kd.full([tb, tq, 1], NEG_INF, dtype=F32)  # row statistics as columns
        l_i = kd.zeros([tb, tq, 1], dtype=F32)
        acc = kd.zeros([tb, tq, dv], dtype=F32)
        if causal:
            limit = qpos[tq, :][None] + offset  # [1, tq, 1]: the last key each row sees
        # skip: visit only the key blocks at or below the diagonal (kd.tile(begin, end))
        kv_end = (last_position(tq, rows, seq_q) + offset + 1).clamp(max=skv) if skip else skv
        for tk in kd.tile(0, kv_end):
            s = (qb @ k[tb, tk, :].transpose(-2, -1)).to(F32)
            s = s * scale
            if causal:
                s = torch.where(tk.index[None, None, :] <= limit, s, NEG_INF)
            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # all masked so far: no shift
            p = torch.exp(s - m_safe)
            alpha = torch.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p.to(v.dtype) @ v[tb, tk, :]
            m_i = m_new
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        out[tb, tq, :] = (acc / l_safe).to(out.dtype)
        # log of l_safe (>= 1 where a key is seen): no log(0), which Trainium's ScalarE
        # does not define; a row that sees no key gets lse = -inf
        lse[tb, tq, :] = torch.where(l_i == 0.0, NEG_INF, m_i + torch.log(l_safe))
    return out, lse
