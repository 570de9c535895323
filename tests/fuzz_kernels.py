"""PyTorch references of the DSL test kernels, and copies of those kernels with planted bugs.

Each planted bug is written in the DSL itself, the way a kernel author could get it wrong, and
is wrong only on some inputs or configs, so the fuzzer has to search for it:

- attention_causal_off_by_one: causal mask `>` instead of `>=` (a query misses its own key);
  wrong only with causal=True.
- attention_missing_rescale: the accumulator and denominator are not reset to the new running
  max's scale (a missing reset of the carried state); wrong only with two or more key blocks
  where a later block raises the max.
- softmax_max_over_block: the max is reduced over the block's rows too (a reduction over the
  wrong axis); wrong only with two or more rows in a block whose values lie far apart
  (exp underflows to 0/0).
- matmul_dropped_edge_tile: the ragged last row tile is stored as zeros; wrong only when m is
  larger than, and not a multiple of, the row block.
- matmul_bf16_acc: the accumulator has the input dtype (bf16 accumulation); wrong only in
  bf16/f16, and only beyond the tolerance with several k blocks.
- layer_norm_missing_reset: a streaming layer norm reuses the sum accumulator for the
  variance (a missing accumulator reset); wrong whenever a row's mean is not zero.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import kernel_dsl as kd

# -- references: the same arguments as the kernels, any dtype (float64 gives the exact answer) --


def ref_add_where(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(x > y, x - y, 0.5 * y)


def ref_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x @ y


def ref_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def ref_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """SDPA; causal is bottom-right aligned (query i sees keys j <= i + skv - sq, as flash
    attention), and a query that sees no key gets zeros."""
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    sq, skv = q.shape[2], k.shape[2]
    mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.where(mask.any(-1)[:, None], out, torch.zeros((), dtype=out.dtype))


# -- planted bugs -------------------------------------------------------------------------------


@kd.tpu_kernel
def attention_causal_off_by_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                causal: bool = False) -> torch.Tensor:
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = d ** -0.5
    out = torch.empty_like(q)
    for tb, th, tq in kd.tile([b, h, sq], block_size=[1, 1, None]):
        qb = q[tb, th, tq, :]
        m_i = kd.full([tb, th, tq], float("-inf"), dtype=torch.float32)
        l_i = kd.zeros([tb, th, tq], dtype=torch.float32)
        acc = kd.zeros([tb, th, tq, d], dtype=torch.float32)
        for tk in kd.tile(skv):
            s = (qb @ k[tb, th, tk, :].transpose(-2, -1)).to(torch.float32) * scale
            if causal:
                visible = tq.index[:, None] + (skv - sq) > tk.index[None, :]  # BUG: >= ; misses the diagonal
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
    return out


@kd.tpu_kernel
def attention_missing_rescale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              causal: bool = False) -> torch.Tensor:
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = d ** -0.5
    out = torch.empty_like(q)
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
            l_i = l_i + p.sum(dim=-1)  # BUG: l_i * alpha; the old sums stay at the old max's scale
            acc = acc + p.to(v.dtype) @ v[tb, th, tk, :]  # BUG: acc * alpha[..., None]
            m_i = m_new
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        out[tb, th, tq, :] = (acc / l_safe[..., None]).to(out.dtype)
    return out


@kd.tpu_kernel
def softmax_max_over_block(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        row = x[tm, :].to(torch.float32)
        # BUG: the max is reduced over the block's rows too (dim 0), not per row. Softmax does
        # not care which constant is subtracted, until a row far below the block's max underflows.
        mx = row.amax(dim=-1, keepdim=True).amax(dim=0, keepdim=True)
        e = torch.exp(row - mx)
        out[tm, :] = (e / e.sum(dim=-1, keepdim=True)).to(out.dtype)
    return out


@kd.tpu_kernel
def matmul_dropped_edge_tile(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        full_tile = tm.begin + tm.size <= m  # BUG: only full row tiles are stored; the ragged one is zeros
        out[tm, tn] = torch.where(full_tile, acc, 0.0).to(out.dtype)
    return out


@kd.tpu_kernel
def matmul_bf16_acc(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=x.dtype)  # BUG: accumulates in the input dtype, not f32
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


@kd.tpu_kernel
def layer_norm_missing_reset(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                             eps: float = 1e-5) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n):
            acc = acc + x[tm, tn].to(torch.float32).sum(dim=-1)
        mean = acc / n
        # BUG: `acc = kd.zeros([tm], dtype=torch.float32)` missing: the variance sum starts
        # from the sum of the row
        for tn in kd.tile(n):
            c = x[tm, tn].to(torch.float32) - mean[:, None]
            acc = acc + (c * c).sum(dim=-1)
        rstd = torch.rsqrt(acc / n + eps)
        for tn in kd.tile(n):
            c = x[tm, tn].to(torch.float32) - mean[:, None]
            y = c * rstd[:, None] * w[tn].to(torch.float32) + b[tn].to(torch.float32)
            out[tm, tn] = y.to(out.dtype)
    return out


# -- a precision fix, for comparison ------------------------------------------------------------


@kd.tpu_kernel
def attention_f32_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         causal: bool = False) -> torch.Tensor:
    """`dsl_kernels.attention` with the scores Q K^T kept in f32 (`kd.dot` into an f32
    accumulator) instead of rounded to the input dtype: as accurate as PyTorch's SDPA in bf16
    and f16, also for large logits, where the original loses the softmax (fuzzing found it)."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = d ** -0.5
    out = torch.empty_like(q)
    for tb, th, tq in kd.tile([b, h, sq], block_size=[1, 1, None]):
        qb = q[tb, th, tq, :]
        m_i = kd.full([tb, th, tq], float("-inf"), dtype=torch.float32)
        l_i = kd.zeros([tb, th, tq], dtype=torch.float32)
        acc = kd.zeros([tb, th, tq, d], dtype=torch.float32)
        for tk in kd.tile(skv):
            s = kd.dot(qb, k[tb, th, tk, :].transpose(-2, -1),
                       acc=kd.zeros([tb, th, tq, tk], dtype=torch.float32)) * scale
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
    return out
