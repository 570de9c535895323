"""The published kernels' facts that benchmarks/published_compare.py applies when comparing the
model with their measurements (its docstring, "Published-kernel facts"; not model fudge): Tokamax's
residuals kernel and epilogue, the share of blocks its causal skipping computes, and the bytes of
the XLA transposes around its flash-attention op."""
from __future__ import annotations

from typing import Any

import torch

import kernel_dsl as kd

LANES = 128  # TPU vector lanes


@kd.tpu_kernel
def attention_res(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """tests/dsl_kernels.py attention that also returns the softmax max and sum (residuals),
    stored as Tokamax's splash kernel stores them: f32 broadcast over 128 lanes per q row."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = d ** -0.5
    out = torch.empty_like(q)
    m_out = torch.empty([b, h, sq, LANES], dtype=torch.float32, device=q.device)
    l_out = torch.empty([b, h, sq, LANES], dtype=torch.float32, device=q.device)
    for tb, th, tq in kd.tile([b, h, sq], block_size=[1, 1, None]):
        qb = q[tb, th, tq, :]
        m_i = kd.full([tb, th, tq], float("-inf"), dtype=torch.float32)
        l_i = kd.zeros([tb, th, tq], dtype=torch.float32)
        acc = kd.zeros([tb, th, tq, d], dtype=torch.float32)
        for tk in kd.tile(skv):
            s = (qb @ k[tb, th, tk, :].transpose(-2, -1)).to(torch.float32) * scale
            if causal:
                visible = tq.index[:, None] + (skv - sq) >= tk.index[None, :]
                s = torch.where(visible, s, float("-inf"))
            m_new = torch.maximum(m_i, s.amax(dim=-1))
            m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p.to(v.dtype) @ v[tb, th, tk, :]
            m_i = m_new
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        out[tb, th, tq, :] = (acc / l_safe[..., None]).to(out.dtype)
        lanes = kd.zeros([tb, th, tq, LANES], dtype=torch.float32)
        m_out[tb, th, tq, :] = lanes + m_i[..., None]
        l_out[tb, th, tq, :] = lanes + l_i[..., None]
    return out, m_out, l_out


@kd.tpu_kernel
def residual_epilogue(m: torch.Tensor, lsum: torch.Tensor) -> torch.Tensor:
    """The XLA ops after Tokamax's kernel: lane 0 of the lane-broadcast residuals, and
    logsumexp = max + log(sum) (modelled as a row reduction over the 128 lanes)."""
    rows, lanes = m.shape
    out = torch.empty([rows], dtype=torch.float32, device=m.device)
    for tr in kd.tile(rows):
        mx = m[tr, :].amax(dim=-1)
        out[tr] = mx + torch.log(lsum[tr, :].amax(dim=-1))
    return out


def _causal_blocks(sq: int, skv: int, bq: int, bkv: int) -> tuple[int, int, int]:
    """(block pairs at least partly visible, partly masked among them, all block pairs) of a
    causal mask, bottom-right aligned as kernel_dsl and Tokamax align it."""
    nq, nk = -(-sq // bq), -(-skv // bkv)
    live = full = 0
    shift = skv - sq
    for i in range(nq):
        last_row = min((i + 1) * bq, sq) - 1 + shift  # the block's last row sees keys <= this
        first_row = i * bq + shift  # ... and its first row keys <= this
        live += min(nk, max(0, last_row // bkv + 1))
        full += min(nk, max(0, (first_row + 1) // bkv))  # kv blocks every row sees whole
    return live, live - full, nq * nk


def causal_live_fraction(sq: int, skv: int, bq: int, bkv: int) -> float:
    """Share of (q block, kv block) grid steps a causal mask leaves at least partly visible:
    the steps Tokamax computes."""
    live, _, total = _causal_blocks(sq, skv, bq, bkv)
    return live / total


def causal_masked_share(sq: int, skv: int, bq: int, bkv: int) -> float:
    """Share of the visited block pairs that the causal mask cuts (the diagonal ones): the only
    ones Tokamax's splash kernel masks (`should_not_mask` skips the mask on whole blocks)."""
    live, masked, _ = _causal_blocks(sq, skv, bq, bkv)
    return masked / live if live else 0.0


def tokamax_transpose_bytes(rec: dict[str, Any]) -> float:
    """HBM bytes of the XLA transposes around Tokamax's flash-attention kernel (module
    docstring): each of q, k, v and the output read and written once."""
    if not (rec["table"].startswith("tokamax_autotune_cache")
            and rec["kernel"] == "flash_attention_fwd"):
        return 0.0
    s = rec["shape"]
    elem = 2  # bf16
    q = s["batch"] * s["seq_q"] * s["heads_q"] * s["head_dim_qk"]
    k = s["batch"] * s["seq_kv"] * s["heads_kv"] * s["head_dim_qk"]
    v = s["batch"] * s["seq_kv"] * s["heads_kv"] * s["head_dim_v"]
    o = s["batch"] * s["seq_q"] * s["heads_q"] * s["head_dim_v"]
    return 2.0 * elem * (q + k + v + o)
