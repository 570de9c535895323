"""The DSL kernels the tests (and the fuzzing, TPU-check and backend issues) exercise."""
from __future__ import annotations

import torch

import kernel_dsl as kd


@kd.tpu_kernel
def add_where(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        a = x[tm, tn]
        b = y[tm, tn]
        out[tm, tn] = torch.where(a > b, a - b, 0.5 * b)
    return out


@kd.tpu_kernel
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


@kd.tpu_kernel
def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        row = x[tm, :].to(torch.float32)
        e = torch.exp(row - row.amax(dim=-1, keepdim=True))
        out[tm, :] = (e / e.sum(dim=-1, keepdim=True)).to(out.dtype)
    return out


@kd.tpu_kernel
def softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        mx = kd.full([tm], float("-inf"), dtype=torch.float32)
        den = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n):
            v = x[tm, tn].to(torch.float32)
            new_mx = torch.maximum(mx, v.amax(dim=-1))
            safe = torch.where(new_mx == float("-inf"), 0.0, new_mx)  # no -inf - -inf
            den = den * torch.exp(mx - safe) + torch.exp(v - safe[:, None]).sum(dim=-1)
            mx = new_mx
        for tn in kd.tile(n):
            v = x[tm, tn].to(torch.float32)
            out[tm, tn] = (torch.exp(v - mx[:, None]) / den[:, None]).to(out.dtype)
    return out


@kd.tpu_kernel
def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        row = x[tm, :].to(torch.float32)
        mean = row.mean(dim=-1, keepdim=True)
        centered = row - mean
        var = (centered * centered).mean(dim=-1, keepdim=True)
        y = centered * torch.rsqrt(var + eps) * w[:].to(torch.float32) + b[:].to(torch.float32)
        out[tm, :] = y.to(out.dtype)
    return out


@kd.tpu_kernel
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
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
            alpha = torch.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p.to(v.dtype) @ v[tb, th, tk, :]
            m_i = m_new
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        out[tb, th, tq, :] = (acc / l_safe[..., None]).to(out.dtype)
    return out


# -- Helion's examples/segment_reduction.py, renamed only (hl. -> kd.); tests/test_scans.py and
# tests/test_segment_atomics.py both run it
def combine_fn_helion(
    left_values: torch.Tensor,
    left_indices: torch.Tensor,
    right_values: torch.Tensor,
    right_indices: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Helion's combine function (not commutative)."""
    combined_values = torch.where(
        left_indices == right_indices, left_values + right_values, right_values
    )
    return combined_values, right_indices


@kd.kernel
def segmented_reduction_helion(
    indices: torch.Tensor, input_data: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    """Helion's examples/segment_reduction.py, renamed (hl. -> kd.)."""
    num_elements, num_features = input_data.shape
    output = torch.zeros(
        (num_nodes, num_features), dtype=input_data.dtype, device=input_data.device
    )
    for tile_e, tile_f in kd.tile([num_elements, num_features]):
        vals = input_data[tile_e, tile_f]
        idxs = indices[tile_e]
        idxs_next = kd.load(
            indices, [tile_e.index + 1], extra_mask=tile_e.index < num_elements - 1
        )
        tuple_in = (vals, idxs.float().unsqueeze(1).expand_as(vals))
        out_vals, _ = kd.associative_scan(combine_fn_helion, tuple_in, dim=0)
        mask = (idxs != idxs_next) | (
            tile_e.index % tile_e.block_size == tile_e.block_size - 1
        )
        segment_vals = torch.where(mask.unsqueeze(1), out_vals, 0.0)
        kd.atomic_add(output, [idxs, tile_f], segment_vals)
    return output


@kd.tpu_kernel
def row_dot(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """rowsum(o * do) in f32 as a [B, S, 1] column (flash attention's delta)."""
    bh, rows, _ = o.shape
    out = torch.empty([bh, rows, 1], dtype=torch.float32, device=o.device)
    for tb, tq in kd.tile([bh, rows]):
        out[tb, tq, :] = (o[tb, tq, :].to(torch.float32) * do[tb, tq, :].to(torch.float32)).sum(
            dim=-1, keepdim=True)
    return out
