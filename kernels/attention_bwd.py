"""Flash attention backward, in the DSL: two kernels in the forward's folded layout, run in order.

1. `flash_attention_bwd_dq`: one grid point per query block; it first computes the block's
   delta = rowsum(dO * O) in f32 from the O and dO blocks it reads, then a loop over key blocks
   accumulates dQ += dS K, with dS = P * (dO V^T - delta). It writes dQ and delta
   [B*Hkv, G*Sq, 1] (a separate delta kernel would read dO once more and cost a launch).
2. `flash_attention_bwd_dkv`: one grid point per key block; a loop over all query rows (all G
   heads of the group, so grouped-query gradients are summed in f32 inside the kernel)
   recomputes P = exp(S - lse) and accumulates dV += P^T dO and dK += dS^T Q, reading the
   delta that dQ wrote.
With `skip` (causal, the bound known at build time) the dK/dV loops visit only the query rows
that can see the key block, in two loops per folded head: the diagonal rows, masked, then the
rows below them, which see the whole key block, unmasked; the dQ loops visit only the key blocks
at or below the diagonal, split as the forward's into unmasked blocks and masked diagonal blocks.
The forward's lse is -inf for rows that see no key: such rows get P = 0 (never NaN), so all
their gradients are zero. Masked entries are zeroed after the exponential, for the same reason.
"""
from __future__ import annotations

from typing import Any

import torch

import kernel_dsl as kd

from .attention_fwd import key_split, positions_for_check
from .base import library_kernel

F32 = torch.float32
NEG_INF = float("-inf")


def query_spans(tk: Any, rows: int, seq_q: int, offset: int, block_q: Any,
                skip: bool) -> list[tuple[Any, Any, bool]]:
    """(begin, end, masked) query row ranges of key block `tk`. Without `skip`, all rows,
    masked (if causal). With it, per folded head, position p sees some key of the block from
    p = tk.begin - offset and every key from p = tk.end - 1 - offset: the diagonal rows
    [first, mid) masked, the rows below [mid, seq_q) unmasked, the rows above never visited.
    first and mid are rounded out to query blocks (down and up), so every loop starts at a
    block multiple (the TPU compiler must prove its row slices aligned); they are capped at
    seq_q rounded up to a block, which keeps that, and a begin at or past the end is an empty
    loop."""
    if not skip:
        return [(0, rows, True)]
    cap = (seq_q + block_q - 1) // block_q * block_q
    first = ((tk.begin - offset).clamp(min=0) // block_q * block_q).clamp(max=cap)
    mid = (((tk.end - 1 - offset).clamp(min=0) + block_q - 1) // block_q * block_q).clamp(max=cap)
    spans = []
    for g in range(rows // seq_q):
        base = g * seq_q
        spans += [(base + first, base + mid.clamp(max=seq_q), True), (base + mid, base + seq_q, False)]
    return spans


def dkv_skips(rows: int, d: int, itemsize: int, device: str, target: str | None = None) -> bool:
    """Whether dK/dV may skip query blocks. Its query loop then starts at a row known only
    where the kernel runs, so Pallas keeps the query side resident in VMEM: q and dO rows, plus
    lse, delta and qpos columns padded to 128 lanes, all double-buffered. Where that takes more
    than half the chip's VMEM (v4's 16 MiB at 8192 rows of d=128), no config fits. dK/dV then
    visits every query block, masked, as before block skipping; the forward and dQ still skip.
    `device`: "cuda" (Triton: no such limit), "tpu" (the TPU route's chip), or anything else
    (CPU, meta: the call may be exported or checked for any TPU, so the smallest VMEM);
    `target` (a TPU generation, e.g. "tpu-v6e") sizes for that chip instead."""
    if device == "cuda":
        return True
    from kernel_dsl.lowering.pallas.targets import TARGETS

    vmem = min(t.vmem_bytes for t in TARGETS.values())
    if target is not None:
        vmem = TARGETS[target].vmem_bytes
    elif device == "tpu":
        from kernel_dsl.tpu_adapter import route_target

        vmem = TARGETS[route_target()].vmem_bytes
    return 2 * rows * (2 * d * itemsize + 3 * 128 * 4) <= vmem // 2


@library_kernel
def flash_attention_bwd_dkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                            lse: torch.Tensor, delta: torch.Tensor, qpos: torch.Tensor,
                            scale: float, causal: bool, offset: int, seq_q: int = 0,
                            skip: bool = False):
    bh, rows, d = q.shape
    skv = k.shape[1]
    dv = v.shape[2]
    dk = torch.empty_like(k)
    dvo = torch.empty_like(v)
    block_q = kd.register_block_size(rows)  # one knob for the query loop of every span
    for tb, tk in kd.tile([bh, skv]):
        kb = k[tb, tk, :]
        vb = v[tb, tk, :]
        kt = kb.transpose(-2, -1)  # once per key block, not per query block
        vt = vb.transpose(-2, -1)
        dk_acc = kd.zeros([tb, tk, d], dtype=F32)
        dv_acc = kd.zeros([tb, tk, dv], dtype=F32)
        for q_begin, q_end, masked in query_spans(tk, rows, seq_q, offset, block_q, skip):
            for tq in kd.tile(q_begin, q_end, block_size=block_q):  # one loop per span
                qb = q[tb, tq, :]
                dob = do[tb, tq, :]
                lse_b = lse[tb, tq, :]
                lse_b = torch.where(lse_b == NEG_INF, 0.0, lse_b)
                s = (qb @ kt).to(F32)
                p = torch.exp(s * scale - lse_b)
                if causal and masked:
                    visible = tk.index[None, None, :] <= qpos[tq, :][None] + offset
                    p = torch.where(visible, p, 0.0)
                dv_acc = dv_acc + p.to(do.dtype).transpose(-2, -1) @ dob
                dp = (dob @ vt).to(F32)
                ds = p * (dp - delta[tb, tq, :])
                dk_acc = dk_acc + ds.to(q.dtype).transpose(-2, -1) @ qb
        dk[tb, tk, :] = (dk_acc * scale).to(dk.dtype)
        dvo[tb, tk, :] = dv_acc.to(dvo.dtype)
    return dk, dvo


def _dq_step(qb: Any, kb: Any, vb: Any, dob: Any, lse_b: Any, delta_b: Any, dq_acc: Any,
             scale: float, visible: Any = None) -> Any:
    """dQ += dS K for one key block; `visible` masks the diagonal blocks."""
    s = (qb @ kb.transpose(-2, -1)).to(F32)
    p = torch.exp(s * scale - lse_b)
    if visible is not None:
        p = torch.where(visible, p, 0.0)
    dp = (dob @ vb.transpose(-2, -1)).to(F32)
    ds = p * (dp - delta_b)
    return dq_acc + ds.to(kb.dtype) @ kb


@library_kernel
def flash_attention_bwd_dq(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                           o: torch.Tensor, lse: torch.Tensor, qpos: torch.Tensor,
                           scale: float, causal: bool, offset: int, seq_q: int = 0,
                           skip: bool = False):
    bh, rows, d = q.shape
    skv = k.shape[1]
    dq = torch.empty_like(q)
    delta = torch.empty([bh, rows, 1], dtype=F32, device=q.device)
    block_k = kd.register_block_size(skv)
    for tb, tq in kd.tile([bh, rows]):
        qb = q[tb, tq, :]
        dob = do[tb, tq, :]
        lse_b = lse[tb, tq, :]
        lse_b = torch.where(lse_b == NEG_INF, 0.0, lse_b)
        delta_b = (dob.to(F32) * o[tb, tq, :].to(F32)).sum(dim=-1, keepdim=True)
        delta[tb, tq, :] = delta_b  # for dK/dV, which runs next
        dq_acc = kd.zeros([tb, tq, d], dtype=F32)
        if causal:
            limit = qpos[tq, :][None] + offset
        if causal and skip:  # as the forward: unmasked below the diagonal, masked on it
            full_end, kv_end = key_split(tq, rows, seq_q, offset, skv, block_k)
            for tk in kd.tile(0, full_end, block_size=block_k):
                dq_acc = _dq_step(qb, k[tb, tk, :], v[tb, tk, :], dob, lse_b, delta_b, dq_acc, scale)
            for tk in kd.tile(full_end, kv_end, block_size=block_k):
                dq_acc = _dq_step(qb, k[tb, tk, :], v[tb, tk, :], dob, lse_b, delta_b, dq_acc, scale,
                                  tk.index[None, None, :] <= limit)
        else:
            for tk in kd.tile(skv, block_size=block_k):
                dq_acc = _dq_step(qb, k[tb, tk, :], v[tb, tk, :], dob, lse_b, delta_b, dq_acc, scale,
                                  tk.index[None, None, :] <= limit if causal else None)
        dq[tb, tq, :] = (dq_acc * scale).to(dq.dtype)
    return dq, delta


flash_attention_bwd_dkv.cpu_check_inputs = positions_for_check(6)
flash_attention_bwd_dq.cpu_check_inputs = positions_for_check(6)
