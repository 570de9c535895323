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

Causal block skipping (`skip`, with `seq_q` the per-head length of the folded rows): the keys
run over [0, last query position of the row block + offset + 1) only, so blocks above the
diagonal are never visited, in two loops split at `full_end`, the first row's visible keys
rounded down to the key block (`x // block_k * block_k`, a registered block size): every row
sees every key of the first loop's blocks, which apply no mask; the second loop (at most one
row block's worth of diagonal blocks, starting at a block multiple) masks. attention.py turns
it on whenever that bound is known when the kernel is built.

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


def first_position(tq: Any, rows: int, seq_q: int) -> Any:
    """The smallest query position in row block `tq`: its first row's, or 0 when the block
    spans two heads (the second head's first row)."""
    if rows == seq_q:
        return tq.begin
    first_head, last_head = tq.begin // seq_q, (tq.end - 1) // seq_q
    return torch.where(first_head == last_head, tq.begin - first_head * seq_q, 0)


def key_split(tq: Any, rows: int, seq_q: int, offset: int, skv: int, block_k: Any) -> tuple[Any, Any]:
    """(full_end, kv_end) of a causal row block: keys [0, full_end) are seen by every row;
    [full_end, kv_end) are the diagonal blocks, where the mask cuts. full_end stays a block
    multiple (capped at skv's last whole block, not skv): the TPU compiler must prove the
    second loop's loads aligned."""
    kv_end = (last_position(tq, rows, seq_q) + offset + 1).clamp(max=skv)
    full_end = (first_position(tq, rows, seq_q) + offset + 1) // block_k * block_k
    return full_end.clamp(min=0).clamp(max=skv // block_k * block_k), kv_end


def _online_step(qb: Any, kb: Any, vb: Any, m_i: Any, l_i: Any, acc: Any, scale: float,
                 visible: Any = None) -> tuple[Any, Any, Any]:
    """One key block of the online softmax; `visible` masks the diagonal blocks."""
    s = (qb @ kb.transpose(-2, -1)).to(F32)
    s = s * scale
    if visible is not None:
        s = torch.where(visible, s, NEG_INF)
    m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))
    m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # all masked so far: no shift
    p = torch.exp(s - m_safe)
    alpha = torch.exp(m_i - m_safe)
    l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
    acc = acc * alpha + p.to(vb.dtype) @ vb
    return m_new, l_i, acc


@library_kernel
def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: torch.Tensor,
                        scale: float, causal: bool, offset: int, seq_q: int = 0,
                        skip: bool = False):
    bh, rows, d = q.shape
    skv = k.shape[1]
    dv = v.shape[2]
    out = torch.empty([bh, rows, dv], dtype=q.dtype, device=q.device)
    lse = torch.empty([bh, rows, 1], dtype=torch.float32, device=q.device)
    block_k = kd.register_block_size(skv)  # one knob for every key loop
    for tb, tq in kd.tile([bh, rows]):  # several heads per grid step: a config knob
        qb = q[tb, tq, :]
        m_i = kd.full([tb, tq, 1], NEG_INF, dtype=F32)  # row statistics as columns
        l_i = kd.zeros([tb, tq, 1], dtype=F32)
        acc = kd.zeros([tb, tq, dv], dtype=F32)
        if causal:
            limit = qpos[tq, :][None] + offset  # [1, tq, 1]: the last key each row sees
        if causal and skip:  # below the diagonal unmasked, the diagonal masked, above skipped
            full_end, kv_end = key_split(tq, rows, seq_q, offset, skv, block_k)
            for tk in kd.tile(0, full_end, block_size=block_k):
                m_i, l_i, acc = _online_step(qb, k[tb, tk, :], v[tb, tk, :], m_i, l_i, acc, scale)
            for tk in kd.tile(full_end, kv_end, block_size=block_k):
                m_i, l_i, acc = _online_step(qb, k[tb, tk, :], v[tb, tk, :], m_i, l_i, acc, scale,
                                             tk.index[None, None, :] <= limit)
        else:
            for tk in kd.tile(skv, block_size=block_k):
                m_i, l_i, acc = _online_step(qb, k[tb, tk, :], v[tb, tk, :], m_i, l_i, acc, scale,
                                             tk.index[None, None, :] <= limit if causal else None)
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        # one reciprocal per row, then a multiply: the EUP divides [tq, 1], not [tq, dv]
        out[tb, tq, :] = (acc * (1.0 / l_safe)).to(out.dtype)
        # log of l_safe (>= 1 where a key is seen): no log(0), which Trainium's ScalarE
        # does not define; a row that sees no key gets lse = -inf
        lse[tb, tq, :] = torch.where(l_i == 0.0, NEG_INF, m_i + torch.log(l_safe))
    return out, lse


def positions_for_check(qpos_at: int) -> Any:
    """`cpu_check_inputs` for the autotuner's CPU check (autotune/tuner.py): its random inputs
    put random integers in `qpos`, but causal block skipping assumes each folded row's query
    position (r % seq_q, as `attention.py` passes); with random ones two configs that skip
    different blocks disagree, and a correct config is rejected as wrong."""
    def fix(args: tuple[Any, ...]) -> tuple[Any, ...]:
        qpos = args[qpos_at]
        rows = qpos.shape[0]
        if len(args) <= qpos_at + 2 or not args[qpos_at + 2] or rows == 1:
            return args  # not causal: qpos is never read
        seq_q = args[qpos_at + 4] if len(args) > qpos_at + 4 else 0  # seq_q defaults to 0
        pos = torch.arange(rows, dtype=torch.int32) % (seq_q or rows)
        return (*args[:qpos_at], pos.reshape(rows, 1), *args[qpos_at + 1:])
    return fix


flash_attention_fwd.cpu_check_inputs = positions_for_check(3)
