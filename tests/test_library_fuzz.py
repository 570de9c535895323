"""Fuzzing the library's DSL kernels with `kernel_dsl.testing.fuzz`: random shapes (1, primes,
non-multiples of every block), dtypes, layouts, value classes, configs from each backend's
config space, and every backend, against PyTorch references (float64 exact, and PyTorch in the
kernel's dtype for the tolerance; kernel_dsl/testing/tolerance.py).

The references below take the kernels' own arguments (the folded attention layout, flags), so
a failure's reproduction snippet imports them from this module. The fast tier runs a short
smoke on the NKI interpreter; the slow tier the real runs.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_dsl.kernels import KERNELS
from kernel_dsl.testing import fuzz

# -- references (the kernels' arguments; float64 in, float64 out; or PyTorch in the dtype) ---------


def _stat(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64 if like.dtype == torch.float64 else torch.float32)


def _visible(qpos: torch.Tensor, skv: int, rows: int, causal: bool, offset: int) -> torch.Tensor:
    if not causal:
        return torch.ones(rows, skv, dtype=torch.bool)
    return torch.arange(skv)[None, :] <= qpos.reshape(-1, 1).long() + offset


def ref_flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qpos: torch.Tensor,
                  scale: float, causal: bool, offset: int, seq_q: int = 0,
                  skip: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`skip` (causal block skipping) changes which blocks run, not the result; fuzzed qpos is
    arbitrary, so the fuzz keeps it off (tests/test_causal_skipping.py covers it)."""
    s = (q @ k.transpose(-2, -1)) * scale
    vis = _visible(qpos, k.shape[1], q.shape[1], causal, offset)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s.to(_stat(s, q).dtype), dim=-1, keepdim=True)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ v, lse


def _p(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, qpos: torch.Tensor, scale: float,
       causal: bool, offset: int) -> torch.Tensor:
    s = (q @ k.transpose(-2, -1)).to(lse.dtype) * scale
    lse = torch.where(lse == float("-inf"), 0.0, lse)
    p = torch.exp(s - lse)
    return torch.where(_visible(qpos, k.shape[1], q.shape[1], causal, offset), p, 0.0)


def ref_flash_bwd_dkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                      lse: torch.Tensor, delta: torch.Tensor, qpos: torch.Tensor, scale: float,
                      causal: bool, offset: int, seq_q: int = 0,
                      skip: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's formulas for any given lse/delta (the forward's in real use)."""
    p = _p(q, k, lse, qpos, scale, causal, offset)
    dv = p.to(do.dtype).transpose(-2, -1) @ do
    ds = p * ((do @ v.transpose(-2, -1)).to(p.dtype) - delta)
    dk = (ds.to(q.dtype).transpose(-2, -1) @ q) * scale
    return dk.to(k.dtype), dv.to(v.dtype)


def ref_flash_bwd_dq(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                     o: torch.Tensor, lse: torch.Tensor, qpos: torch.Tensor, scale: float,
                     causal: bool, offset: int, seq_q: int = 0,
                     skip: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """dQ, and delta = rowsum(dO * O) in f32, which dQ computes for dK/dV."""
    delta = (do.float() * o.float()).sum(-1, keepdim=True)
    p = _p(q, k, lse, qpos, scale, causal, offset)
    ds = p * ((do @ v.transpose(-2, -1)).to(p.dtype) - delta.to(p.dtype))
    return ((ds.to(k.dtype) @ k) * scale).to(q.dtype), delta


def _act(z: torch.Tensor, act: int, grad: torch.Tensor | None) -> torch.Tensor:
    if grad is None:
        return [lambda t: t, F.relu, F.gelu, F.silu][act](z)
    if act == 0:
        return grad * torch.ones_like(z)
    zz = z.detach().requires_grad_()
    with torch.enable_grad():
        y = [None, F.relu, F.gelu, F.silu][act](zz)  # type: ignore[misc]
        (d,) = torch.autograd.grad(y, zz, grad)
    return d


def ref_matmul(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, grad: torch.Tensor, act: int,
               act_grad: bool, trans_x: bool, trans_y: bool, has_bias: bool,
               out_code: int) -> torch.Tensor:
    a = x.transpose(-2, -1) if trans_x else x
    b = y.transpose(-2, -1) if trans_y else y
    z = a @ b
    if has_bias:
        z = z + bias
    return _act(z, act, grad if act_grad else None)


def ref_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def ref_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, has_weight: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    xs = x.to(_stat(x, x).dtype)
    rstd = torch.rsqrt((xs * xs).mean(-1, keepdim=True) + eps)
    y = F.rms_norm(x, (x.shape[-1],), w[0] if has_weight else None, eps)
    return y, rstd


def ref_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float,
                   has_weight: bool, has_bias: bool) -> tuple[torch.Tensor, ...]:
    xs = x.to(_stat(x, x).dtype)
    mean = xs.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((xs - mean) ** 2).mean(-1, keepdim=True) + eps)
    y = F.layer_norm(x, (x.shape[-1],), w[0] if has_weight else None, b[0] if has_bias else None, eps)
    return y, mean, rstd


# -- the fuzz targets ------------------------------------------------------------------------------
ATTN = "q[bh,r,d], k[bh,s,d], v[bh,s,e], qpos[r,1]:i32, scale=0.125|0.3, causal=False|True, offset=0|7|-5"
ATTN_BWD = ("q[bh,r,d], k[bh,s,d], v[bh,s,e], do[bh,r,e], lse[bh,r,1]:f32, delta[bh,r,1]:f32, "
            "qpos[r,1]:i32, scale=0.125, causal=False|True, offset=0|40")
ATTN_BWD_DQ = ("q[bh,r,d], k[bh,s,d], v[bh,s,e], do[bh,r,e], o[bh,r,e], lse[bh,r,1]:f32, "
               "qpos[r,1]:i32, scale=0.125, causal=False|True, offset=0|40")
ATTN_DIMS = {"bh": (1, 3), "r": (1, 160), "s": (1, 160), "d": [16, 64, 80, 96, 128], "e": [16, 64]}
MM = ("x[b,m,k], y[b,k,n], bias[1,n], grad[b,m,n], act=0|1|2|3, act_grad=False|True, "
      "trans_x=False, trans_y=False, has_bias=False|True, out_code=0")
MM_T = ("x[b,k,m], y[b,n,k], bias[1,1], grad[1,1], act=0|3, act_grad=False, trans_x=True, "
        "trans_y=True, has_bias=False, out_code=0")
MM_DIMS = {"b": (1, 2), "m": (1, 200), "k": (1, 300), "n": (1, 200)}
ROWS = {"m": (1, 100), "n": (1, 600)}

TARGETS = {
    "flash_attention_fwd": (ref_flash_fwd, ATTN, ATTN_DIMS, ("normal", "large")),
    "flash_attention_bwd_dkv": (ref_flash_bwd_dkv, ATTN_BWD, ATTN_DIMS, ("normal",)),
    "flash_attention_bwd_dq": (ref_flash_bwd_dq, ATTN_BWD_DQ, ATTN_DIMS, ("normal",)),
    "matmul_kernel": (ref_matmul, MM, MM_DIMS, ("normal",)),
    "matmul_kernel:transposed": (ref_matmul, MM_T, MM_DIMS, ("normal",)),
    "softmax_fwd": (ref_softmax, "x[m,n]", ROWS, ("normal", "large", "special")),
    "rms_norm_fwd": (ref_rms_norm, "x[m,n], w[1,n], eps=1e-5|0.1, has_weight=False|True", ROWS,
                     ("normal", "large")),
    "layer_norm_fwd": (ref_layer_norm, "x[m,n], w[1,n], b[1,n], eps=1e-5, has_weight=False|True, "
                       "has_bias=False|True", ROWS, ("normal",)),
}


def _run(name: str, **kw: object) -> None:
    ref, sig, dims, values = TARGETS[name]
    kernel = KERNELS[name.split(":")[0]]
    res = fuzz(kernel, ref, sig, dims=dims, values=values, seed=0, **kw)
    print(res.table())
    assert res.failures == 0 and res.examples > 0


@pytest.mark.parametrize("name", ["flash_attention_fwd", "matmul_kernel", "layer_norm_fwd"])
def test_fuzz_smoke(name: str) -> None:
    _run(name, backends=["nki"], max_examples=6, configs=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TARGETS))
def test_fuzz(name: str) -> None:
    """Every backend, dtype and layout; configs from the whole space (CI: fixed seed)."""
    _run(name, max_examples=30, time_budget=300.0)

