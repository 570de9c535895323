"""JAX's own Pallas TPU kernels, modelled (used by library_tpu.py): their flash attention and the
JAX guide's matmul, captured while tracing and costed by pallas_call_model.py.

- `jax.experimental.pallas.ops.tpu.flash_attention`, forward and backward, at two block
  configurations (`BLOCKS`): its defaults (all 128) and MaxText's (512; block_b=2,
  block_q_dq=1024, block_k_dq=256), each size clipped to the problem.
- the Pallas matmul of the JAX TPU guide at its best bf16 block choice `GUIDE_MM`.

Work is counted from their grids and loops (pallas_call_model.Work): a (q, k) block pair runs
iff their `below_or_on_diag` says so, and the share of grid steps that run is the call's
live_fraction (a skipped step pays only the step overhead; their index maps re-point its DMAs,
which the DMA simulation sees). Vector element-ops per (q, k) score element and per row, read
off their kernels (jax.experimental.pallas.ops.tpu.flash_attention, jax 0.10.2), with the same
rules as cost_model's IR count (every elementwise op and reduce input counts its elements,
exp / reciprocal on the EUP): forward scale, row max, subtract, row sum, cast = 5 VPU + 1 EUP,
causal adds row/column offsets, compare, where, add = 5 VPU; per q row, the (block_q, 128)
m / l rescale (~6 VPU + 2 EUP over 128 lanes) and 3 ops on the (block_q, D) accumulator. dkv:
scale, subtract m, times 1/l, two casts, two transposes, (dp - di) * p, scale = 10 VPU + 1 EUP
(+5 causal), plus the dk / dv accumulations; dq: 7 VPU + 1 EUP (+5 causal), plus dq's. Their
backward also materializes di = sum(o * do) and 128-lane broadcasts of l, m and di in XLA before
the kernels: those bytes are added ("glue").
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from pallas_call_model import Work, capture_once, dot_flops, model

from kernel_dsl.lowering.pallas.targets import TpuTarget

D = 128  # the head dim of every attention shape compared
LANES = 128  # their m / l / di scratch: broadcast over 128 lanes
BLOCKS = {
    "default": dict(block_q=128, block_k_major=128, block_k=128, block_b=1, block_q_major_dkv=128,
                    block_k_major_dkv=128, block_k_dkv=128, block_q_dkv=128,
                    block_k_major_dq=128, block_k_dq=128, block_q_dq=128),
    "maxtext": dict(block_q=512, block_k_major=512, block_k=512, block_b=2, block_q_major_dkv=512,
                    block_k_major_dkv=512, block_k_dkv=512, block_q_dkv=512,
                    block_k_major_dq=512, block_k_dq=256, block_q_dq=1024),
}
GUIDE_MM = (512, 1024, 1024)  # (bm, bk, bn): the JAX Pallas TPU matmul guide's best bf16 choice


# -- JAX's flash attention: captured calls + counted FLOPs -----------------------------------------
def _below(r: np.ndarray, rb: int, c: np.ndarray, cb: int) -> np.ndarray:
    return ((r + 1) * rb - 1) > (c * cb)  # their below_or_on_diag


def _pairs(nr: int, rb: int, nc: int, cb: int, causal: bool) -> int:
    r, c = np.indices((nr, nc))
    return int(_below(r, rb, c, cb).sum()) if causal else nr * nc


def blocks_for(name: str, b: int, s: int) -> dict[str, int]:
    """A named block configuration, each size clipped to the problem (as MaxText does)."""
    return {k: min(v, b if k == "block_b" else s) for k, v in BLOCKS[name].items()}


def their_bwd(causal: bool, sizes: Any) -> Callable[..., Any]:
    """Their backward pass alone (the custom_vjp rule of their flash_attention), from the
    forward's residuals: di, the dkv kernel and the dq kernel."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    def bwd(q: Any, k: Any, v: Any, o: Any, l: Any, m: Any, do: Any) -> Any:  # noqa: E741
        return fa._flash_attention_bwd(False, causal, D ** -0.5, sizes, False,
                                       (q, k, v, None, None, o, l, m), do)[:3]
    return bwd


def their_attention(b: int, h: int, s: int, causal: bool, blocks: str, target: TpuTarget,
                    backward: bool) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    bs = blocks_for(blocks, b, s)
    sizes = fa.BlockSizes(**bs)
    x = jax.ShapeDtypeStruct((b, h, s, D), jnp.bfloat16)

    def fwd(q: Any, k: Any, v: Any) -> Any:
        return fa.flash_attention(q, k, v, causal=causal, sm_scale=D ** -0.5, block_sizes=sizes)

    if not backward:
        calls = capture_once(("fa", b, h, s, causal, blocks, "fwd"), fwd, x, x, x)
        assert len(calls) == 1, f"expected one forward kernel, captured {len(calls)}"
        nq, nk = s // bs["block_q"], s // bs["block_k_major"]
        live = _pairs(nq, bs["block_q"], nk, bs["block_k_major"], causal)
        n = live * b * h * (bs["block_k_major"] // bs["block_k"])
        bq, bk = bs["block_q"], bs["block_k"]
        fl = n * (dot_flops(bq, D, bk, target) + dot_flops(bq, bk, D, target))
        vpu = n * ((5 + 5 * causal) * bq * bk + 6 * bq * LANES + 3 * bq * D)
        eup = n * (bq * bk + 2 * bq * LANES)
        return model(calls, [Work(fl, eup, vpu, live / (nq * nk))], target)

    st = jax.ShapeDtypeStruct((b, h, s), jnp.float32)
    calls = capture_once(("fa", b, h, s, causal, blocks, "bwd"), their_bwd(causal, sizes),
                         x, x, x, x, st, st, x)
    assert len(calls) == 2, f"expected the dkv and dq kernels, captured {len(calls)} calls"
    qM, kM, q_, k_ = (bs["block_q_major_dkv"], bs["block_k_major_dkv"], bs["block_q_dkv"],
                      bs["block_k_dkv"])
    live = _pairs(s // qM, qM, s // kM, kM, causal)
    n = live * b * h * (qM // q_) * (kM // k_)
    dkv = Work(n * (2 * dot_flops(q_, D, k_, target) + 2 * dot_flops(k_, q_, D, target)),
               n * (q_ * k_ + q_ * LANES), n * ((10 + 5 * causal) * q_ * k_ + 2 * k_ * D),
               live / ((s // qM) * (s // kM)))
    qM, kM, k_ = bs["block_q_dq"], bs["block_k_major_dq"], bs["block_k_dq"]
    live = _pairs(s // qM, qM, s // kM, kM, causal)
    n = live * b * h * (kM // k_)
    dq = Work(n * (2 * dot_flops(qM, D, k_, target) + dot_flops(qM, k_, D, target)),
              n * (qM * k_ + qM * LANES), n * ((7 + 5 * causal) * qM * k_ + qM * D),
              live / ((s // qM) * (s // kM)))
    rows = b * h * s
    glue = rows * D * 2 * 2 + rows * 4 + 3 * rows * 128 * 4  # di from o, do; l, m, di x 128 lanes
    return model(calls, [dkv, dq], target, glue_bytes=glue)


# -- the JAX guide's matmul ------------------------------------------------------------------------
def guide_matmul(x: Any, y: Any, bm: int, bk: int, bn: int) -> Any:
    """The Pallas TPU matmul of the JAX guide (docs/pallas/tpu/matmul), transcribed."""
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref: Any, y_ref: Any, z_ref: Any, acc_ref: Any, *, nsteps: int) -> None:
        @pl.when(pl.program_id(2) == 0)
        def _() -> None:
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == nsteps - 1)
        def _() -> None:
            z_ref[...] = acc_ref[...].astype(z_ref.dtype)

    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        functools.partial(kernel, nsteps=k // bk),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            grid=(m // bm, n // bn, k // bk)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def their_matmul(m: int, k: int, n: int, target: TpuTarget) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    bm, bk, bn = GUIDE_MM
    calls = capture_once(("mm", m, k, n), lambda x, y: guide_matmul(x, y, bm, bk, bn),
                    jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16))
    steps = (m // bm) * (n // bn) * (k // bk)
    fl = steps * dot_flops(bm, bk, bn, target)
    # acc += dot every step; zero at the first k step, cast and store at the last
    vpu = steps * bm * bn * (1 + 2 / (k // bk))
    return model(calls, [Work(fl, 0.0, vpu)], target)
