"""Causal block skipping in the flash attention backward (issue 13 item 7): for each key block
dK/dV visits only the query rows at or after the diagonal, the diagonal rows masked and the rows
below unmasked; dQ visits only the key blocks at or below the diagonal. The three kernels (run
at configs whose small blocks split heads, cross the diagonal and leave ragged edges) against
the gradients of torch's `scaled_dot_product_attention` (float64, its boolean mask: the
alignments top-left, bottom-right, Sq > Skv with rows that see no key, decoding, non-causal),
every dtype, every backend; the cost model's count of the blocks dK/dV visits; the Pallas
rendering's aligned row slices; and, slow, the real TPU compiler over the five targets."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from library_tolerance import assert_close_to_exact

import kernel_dsl as kd
from kernel_dsl import tile_bounds
from kernel_dsl.config import block_values
from kernel_dsl.kernels.attention_bwd import flash_attention_bwd_dkv, flash_attention_bwd_dq
from kernel_dsl.kernels.attention_fwd import flash_attention_fwd

BACKENDS = ("pallas", "triton", "nki")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALE = 0.3
# (G query heads per kv head, Sq, Skv, offset or None for non-causal)
CASES = [(1, 1, 1, 0), (1, 37, 37, 0), (2, 13, 21, 8), (1, 29, 17, -12), (3, 9, 9, 0),
         (2, 1, 23, 22), (1, 31, 23, None)]
# [grid batch, grid block, loop block]: dK/dV's key block and query loop block, dQ's query block
# and key loop block (NKI takes a leading block of 1 only)
BLOCKS = ([1, 8, 8], [1, 8, 16], [1, 16, 8], [2, 16, 16])


def _inputs(g: int, sq: int, skv: int, dtype: torch.dtype, d: int = 16):
    torch.manual_seed(sq * 131 + skv * 7 + g)
    q, do = torch.randn(2, g * sq, d), torch.randn(2, g * sq, d)
    k, v = torch.randn(2, skv, d), torch.randn(2, skv, d)
    return [t.to(dtype) for t in (q, k, v, do)]


def _sdpa_grads(q, k, v, do, g: int, sq: int, off: int | None, dtype: torch.dtype):  # noqa: ANN001, ANN202
    """(dq, dk, dv) of torch's SDPA in `dtype` over the folded rows: head h of kv head b is
    rows [h*sq, (h+1)*sq) of q; the mask keeps key j for query position p iff j <= p + off."""
    b, skv, d = k.shape
    mask = None
    if off is not None:
        mask = torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + off
    qs, ks, vs = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qs.reshape(b, g, sq, d), ks[:, None], vs[:, None],
                                         attn_mask=mask, scale=SCALE)
    return torch.autograd.grad(out, (qs, ks, vs), do.to(dtype).reshape(b, g, sq, d))


def _kernel_grads(backend: str, q, k, v, do, g: int, sq: int, off: int | None, blocks):  # noqa: ANN001, ANN202
    causal = off is not None
    if causal:
        qpos = torch.arange(sq, dtype=torch.int32).repeat(g).reshape(g * sq, 1)
    else:
        qpos = torch.zeros(1, 1, dtype=torch.int32)
    scalars = (SCALE, causal, off or 0, sq, causal)
    cfg = kd.Config(blocks)
    out, lse = flash_attention_fwd.run_cpu(backend, (q, k, v, qpos, *scalars), cfg)
    dq, delta = flash_attention_bwd_dq.run_cpu(backend, (q, k, v, do, out, lse, qpos, *scalars), cfg)
    torch.testing.assert_close(delta, (out.float() * do.float()).sum(-1, keepdim=True),
                               rtol=1e-5, atol=1e-5)
    dk, dv = flash_attention_bwd_dkv.run_cpu(backend, (q, k, v, do, lse, delta, qpos, *scalars), cfg)
    return dq, dk, dv


# fast: each case once on the interpreters, two on Pallas (its interpret mode builds slowly);
# slow: a third of every case x dtype x config on every backend (all of them: ~25 min of CI)
ROTATED = [(c, DTYPES[i % 3], BLOCKS[i % 4]) for i, c in enumerate(CASES)]
FAST = [(b, *p) for b in ("triton", "nki") for p in ROTATED] + \
    [("pallas", *ROTATED[i]) for i in (2, 5)]
ALL = [(be, c, dt, b) for be in BACKENDS for c in CASES for dt in DTYPES for b in BLOCKS]
SLOW = [pytest.param(*p, marks=pytest.mark.slow) for i, p in enumerate(ALL) if p not in FAST and i % 3 == 0]


@pytest.mark.parametrize("backend, case, dtype, blocks", FAST + SLOW, ids=str)
def test_backward_matches_torch_sdpa(backend: str, case, dtype: torch.dtype, blocks) -> None:  # noqa: ANN001
    if backend == "nki":
        blocks = [1, *blocks[1:]]
    g, sq, skv, off = case
    q, k, v, do = _inputs(g, sq, skv, dtype)
    got = _kernel_grads(backend, q, k, v, do, g, sq, off, blocks)
    exact = _sdpa_grads(q, k, v, do, g, sq, off, torch.float64)
    lowp = _sdpa_grads(q, k, v, do, g, sq, off, dtype) if dtype != torch.float32 else (None,) * 3
    for name, a, e, lp in zip(("dq", "dk", "dv"), got, exact, lowp):
        assert a.dtype == dtype, name
        assert_close_to_exact(a, e.reshape(a.shape), None if lp is None else lp.reshape(a.shape),
                              f32_rel=5e-5, lowp_rel=4e-3, finite=True)


def _dkv_ir(sq: int, off: int = 0, g: int = 1):
    q = torch.empty(1, g * sq, 16, device="meta")
    k = torch.empty(1, sq, 16, device="meta")
    lse = torch.empty(1, g * sq, 1, device="meta")
    qpos = torch.empty(g * sq, 1, dtype=torch.int32, device="meta")
    return flash_attention_bwd_dkv.ir(q, k, k, q, lse, lse, qpos, SCALE, True, off, sq, True)


def test_dkv_visits_the_diagonal_masked_and_the_rows_below_unmasked() -> None:
    ir = _dkv_ir(64)
    loops = [op for op in ir.body.walk() if op.kind == "loop"]
    diag, below = (op.attrs["tile"] for op in loops)
    assert diag.dynamic and below.dynamic
    blocks = block_values(ir, kd.Config([1, 16, 16]))
    # key blocks at 0, 16, 32, 48: one diagonal query block each, then 3, 2, 1, 0 below it
    assert tile_bounds.mean_trips(diag, ir.grid, blocks) == 1.0
    assert tile_bounds.mean_trips(below, ir.grid, blocks) == 1.5
    masks = [any(o.kind == "le" for o in op.body.walk()) for op in loops]
    assert masks == [True, False]  # the mask's compare only on the diagonal
    blocks = block_values(ir, kd.Config([1, 32, 16]))
    # 32-key blocks at 0 and 32 span two query blocks of 16 each: 2 + 2 masked, then 2 + 0
    assert tile_bounds.mean_trips(diag, ir.grid, blocks) == 2.0
    assert tile_bounds.mean_trips(below, ir.grid, blocks) == 1.0
    # bottom-right (offset 16): key block [0, 16) is seen whole by every row, [16, 32) from
    # row 0: the diagonal shifts up by a block
    ir = _dkv_ir(64, off=16)
    loops = [op.attrs["tile"] for op in ir.body.walk() if op.kind == "loop"]
    blocks = block_values(ir, kd.Config([1, 16, 16]))
    # key block 0: 0 masked, 4 below; 16: 1 + 3; 32: 1 + 2; 48: 1 + 1
    assert tile_bounds.mean_trips(loops[0], ir.grid, blocks) == 0.75
    assert tile_bounds.mean_trips(loops[1], ir.grid, blocks) == 2.5


def test_cost_model_counts_only_the_visited_dkv_blocks() -> None:
    """At S=4096 with 512-row blocks dK/dV visits 36 of 64 (key, query) block pairs: the
    modelled MXU FLOPs fall to 36/64 of the unskipped causal kernel's."""
    from kernel_dsl.autotune import cost_model
    from kernel_dsl.lowering.pallas.targets import tpu_target

    s, bh = 4096, 8
    bf = torch.bfloat16
    q = torch.empty(bh, s, 128, dtype=bf, device="meta")
    lse = torch.empty(bh, s, 1, device="meta")
    qpos = torch.empty(s, 1, dtype=torch.int32, device="meta")
    cfg = kd.Config([1, 512, 512], loop_mode="inner")
    est = {}
    for skip in (False, True):
        ir = flash_attention_bwd_dkv.ir(q, q, q, q, lse, lse, qpos, 128 ** -0.5, True, 0, s, skip)
        est[skip] = cost_model.estimate(ir, cfg, tpu_target("tpu-v6e"))
    assert est[True].flops == pytest.approx(est[False].flops * 36 / 64, rel=1e-6)
    assert est[True].seconds < 0.65 * est[False].seconds


def test_pallas_dkv_row_slices_start_at_block_multiples() -> None:
    """Both query loops begin at a multiple of the query block, marked for Mosaic."""
    bf = torch.bfloat16
    q = torch.empty(2, 1000, 128, dtype=bf)
    k = torch.empty(2, 1100, 128, dtype=bf)
    lse = torch.empty(2, 1000, 1)
    qpos = torch.empty(1000, 1, dtype=torch.int32)
    src = flash_attention_bwd_dkv.source(q, k, k, q, lse, lse, qpos, SCALE, True, 100, 1000, True,
                                         backend="pallas", config=kd.Config([1, 256, 128]))
    assert src.count("jax.lax.fori_loop(") == 2
    assert src.count("q_ref[:, pl.ds(pl.multiple_of(") == 2, src


@pytest.mark.slow
@pytest.mark.parametrize("seq_q", [1024, 1000])
def test_causal_backward_compiles_for_every_tpu(seq_q: int) -> None:
    """dK/dV's diagonal and below-diagonal query loops (both starting at device block
    multiples) and dQ's split key loops, under each target's default config: folded GQA rows
    (2 heads of `seq_q`; at 1000 the second head's loops begin off a block multiple, unmarked),
    a ragged key length, bottom-right alignment, bf16."""
    targets = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]
    bf = torch.bfloat16
    q = torch.empty(4, 2 * seq_q, 128, dtype=bf)
    k = torch.empty(4, 1100, 128, dtype=bf)
    lse = torch.empty(4, 2 * seq_q, 1)
    qpos = torch.empty(2 * seq_q, 1, dtype=torch.int32)
    scalars = (128 ** -0.5, True, 1100 - seq_q, seq_q, True)
    for kernel, rows in ((flash_attention_bwd_dkv, (lse, lse)), (flash_attention_bwd_dq, (q, lse))):
        r = kernel.check(q, k, k, q, *rows, qpos, *scalars, targets=targets, measure_vmem=False)
        assert r.ok, r.table()


@pytest.mark.parametrize("backend", ["triton", "nki", pytest.param("pallas", marks=pytest.mark.slow)])
def test_library_with_shape_buckets_and_more_queries_than_keys(backend: str) -> None:
    """With shape buckets the rows' limits stop at the true Skv - 1 and the keys past it are
    padding: causal calls with Sq > Skv then mask every block (skipping would take the padded
    keys into the unmasked blocks below the diagonal); Sq <= Skv skips. Forward and backward
    against torch."""
    from kernel_dsl.kernels import flash_attention

    for sq, skv in ((150, 20), (20, 37)):
        torch.manual_seed(sq)
        q = torch.randn(1, 2, sq, 16, requires_grad=True)
        k, v = (torch.randn(1, 2, skv, 16, requires_grad=True) for _ in range(2))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        gref = torch.autograd.grad(ref.sum(), (q, k, v))
        with kd.shape_buckets("pow2"), kd.backend(backend):
            out = flash_attention(q, k, v, causal=True)
            grads = torch.autograd.grad(out.sum(), (q, k, v))
        torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)
        for a, b in zip(grads, gref):
            torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4)


@pytest.mark.slow
def test_modelled_causal_backward_against_non_causal() -> None:
    """benchmarks/REPORT.md §9's backward row for tpu-v6e at S=4096, B*H=64: dQ + dK/dV, each
    at the cost model's best config, causal (skipping) over non-causal within issue 13's 0.6
    (dK/dV skips there: its resident query rows fit v6e's VMEM)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import causal_skipping as cs

    from kernel_dsl.kernels.attention_bwd import dkv_skips

    assert dkv_skips(4096, 128, 2, "tpu", target="tpu-v6e")
    assert not dkv_skips(4096, 128, 2, "tpu", target="tpu-v4")
    full = causal = 0.0
    for kernel in (flash_attention_bwd_dq, flash_attention_bwd_dkv):
        full += cs._best(cs._bwd_args(kernel, 64, 4096, False, False), "tpu-v6e", kernel)[0]
        causal += cs._best(cs._bwd_args(kernel, 64, 4096, True, True), "tpu-v6e", kernel)[0]
    assert 0.5 < causal / full <= 0.6, causal / full
