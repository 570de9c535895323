"""The one-off forms of Helion's examples (docs/helion_ports.md), as the examples write them, on
every backend against torch at ragged sizes and a spread of the configs the autotuner may pick:
- moe_matmul_ogs: `idx.squeeze(0)` of a [tile] index keeps the tile dim (torch leaves a dim of
  a size not known to be 1, which is how Helion traces a block size), then gathers with it;
- gdn_fwd_h: the builtin `min`/`max` of device scalars (`min(t.begin + chunk, n) - 1`);
- grpo_loss: `if beta != 0.0 and ref is not None:` in device code, `beta` a float argument: a
  device `if` (a new value reuses the build);
- xsa: `torch.bmm(a, b, torch.float32)`: torch's out_dtype argument."""
from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import kernel_dsl as kd
from kernel_dsl.errors import BackendError, ControlFlowError, UnsupportedOpError

BACKENDS = ("pallas", "triton", "nki")
TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


def _spread(k: Any, args: tuple[Any, ...], backend: str, n: int = 3) -> list[Any]:
    """The default config and up to `n` others spread over the kernel's config space."""
    space = list(k.configs(*args, backend=backend))
    return [None] + space[:: max(1, len(space) // n)][:n]


def _run(k: Any, backend: str, args: tuple[Any, ...], cfg: Any) -> Any:
    if cfg is None:
        with kd.backend(backend):
            return k(*args)
    out = k.run_cpu(backend, args, cfg)
    return out[0] if len(out) == 1 else out


# -- moe_matmul_ogs: squeeze(0) of a tile index, a gather, a device `if` on a loaded count ----------
@kd.kernel
def moe_fragment(A: torch.Tensor, W: torch.Tensor, counts: torch.Tensor, offsets: torch.Tensor,
                 order: torch.Tensor, max_t: int) -> torch.Tensor:
    T, K = A.shape
    E, _, N = W.shape
    out = torch.zeros([E, max_t, N], dtype=torch.float32, device=A.device)
    for e_idx in kd.grid(E):
        start = offsets[e_idx]
        num_tokens = counts[e_idx]
        if num_tokens != 0:
            for tile_t, tile_n in kd.tile([max_t, N]):
                local = tile_t.index
                valid = local < num_tokens
                sorted_idx = start + torch.where(valid, local, 0)
                orig_idx = order[sorted_idx.squeeze(0)]  # as moe_matmul_ogs writes it
                acc = kd.zeros([tile_t, tile_n], dtype=torch.float32)
                for tile_k in kd.tile(K):
                    acc = torch.addmm(acc, A[orig_idx, tile_k], W[e_idx, tile_k, tile_n])
                out[e_idx, tile_t, tile_n] = torch.where(valid[:, None], acc, 0.0)
    return out


def _moe_args(T: int, K: int, N: int, E: int) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(T * 131 + E)
    A, W = torch.randn(T, K, generator=g), torch.randn(E, K, N, generator=g)
    top = torch.randint(E, (T,), generator=g)
    top[top == E // 2] = 0  # an expert with no tokens
    order = torch.argsort(top, stable=True).to(torch.int32)
    counts = torch.bincount(top, minlength=E).to(torch.int32)
    offsets = torch.zeros(E + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts, 0)
    return A, W, counts, offsets, order, int(counts.max())


def _moe_ref(A, W, counts, offsets, order, max_t):  # type: ignore[no-untyped-def]
    out = torch.zeros(W.shape[0], max_t, W.shape[2])
    for e in range(W.shape[0]):
        rows = order[offsets[e]:offsets[e + 1]].long()
        out[e, :len(rows)] = A[rows].double().matmul(W[e].double()).float()
    return out


@pytest.mark.parametrize("size", [(37, 19, 23, 5), (1, 1, 1, 3), (70, 130, 9, 4)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_squeeze_of_a_tile_index(backend: str, size: tuple[int, int, int, int]) -> None:
    args = _moe_args(*size)
    ref = _moe_ref(*args)
    for cfg in _spread(moe_fragment, args, backend, n=2):
        torch.testing.assert_close(_run(moe_fragment, backend, args, cfg), ref, atol=1e-4,
                                   rtol=1e-4, msg=lambda m, c=cfg: f"{c}: {m}")


@kd.kernel
def squeezes(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape, block_size=[1, None]):
        v = x[tm, tn].squeeze(0).squeeze(1)  # tile dims stay, even at block size 1
        out[tm, tn] = v + x[tm, tn].sum(1, keepdim=True).squeeze()[:, None]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeeze_keeps_tile_dims_for_every_block_size(backend: str) -> None:
    x = torch.randn(7, 37)
    with kd.backend(backend):
        torch.testing.assert_close(squeezes(x), x + x.sum(1, keepdim=True), atol=1e-5, rtol=1e-5)


# -- gdn_fwd_h: builtin min/max of device scalars -------------------------------------------------
@kd.kernel
def last_of_chunk(g: torch.Tensor, chunk: int) -> torch.Tensor:
    n, m = g.shape
    chunk = kd.specialize(chunk)
    out = torch.empty([(n + chunk - 1) // chunk, m], dtype=g.dtype, device=g.device)
    for tm in kd.tile(m):
        for t_i in kd.tile(n, block_size=chunk):
            t_i_last = min(t_i.begin + chunk, n) - 1  # as gdn_fwd_h writes it
            lo = max(t_i.begin - 1, 0, t_i.id)  # three arguments, an int among them
            v = g[t_i_last, tm] * 2 + g[lo, tm]
            if min(t_i.begin, 1) > 0 and max(t_i.id, 0) < 2:  # in an `if` test, in an `and`
                v = v + 1
            out[t_i.id, tm] = v
    return out


def _last_ref(g: torch.Tensor, chunk: int) -> torch.Tensor:
    begins = torch.arange(0, g.shape[0], chunk)
    last = torch.clamp(begins + chunk, max=g.shape[0]) - 1
    lo = torch.maximum(torch.clamp(begins - 1, min=0), begins // chunk)
    ids = torch.arange(len(begins))
    return g[last] * 2 + g[lo] + ((begins > 0) & (ids < 2)).to(g.dtype)[:, None]


@pytest.mark.parametrize("shape,chunk", [((37, 19), 8), ((1, 3), 4), ((64, 130), 16)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_min_max_of_device_scalars(backend: str, dtype: torch.dtype,
                                           shape: tuple[int, int], chunk: int) -> None:
    g = torch.randn(*shape).to(dtype)
    for cfg in _spread(last_of_chunk, (g, chunk), backend, n=2):
        torch.testing.assert_close(_run(last_of_chunk, backend, (g, chunk), cfg),
                                   _last_ref(g, chunk), msg=lambda m, c=cfg: f"{c}: {m}")


def test_builtin_min_of_a_tile_names_the_line() -> None:
    @kd.kernel
    def tile_min(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = min(x[t], 0.0)
        return out

    line = inspect.getsourcelines(tile_min.fn)[1] + 4
    with pytest.raises(UnsupportedOpError, match=r"torch\.minimum") as e:
        tile_min.ir(torch.randn(8))
    assert e.value.loc is not None and e.value.loc.line == line and e.value.loc.file == __file__


def test_builtin_min_of_host_values_is_python_min() -> None:
    @kd.kernel
    def host_min(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * min(3, x.shape[0]) + max([1.0, 2.0])
        return out

    x = torch.randn(5)
    torch.testing.assert_close(host_min(x), x * 3 + 2.0)


# -- grpo_loss: `and` of a float argument's comparison and a host test -----------------------------
@kd.kernel
def kl_term(logp: torch.Tensor, ref_logp: torch.Tensor | None, mask: torch.Tensor | None,
            beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    B, L = logp.shape
    loss = torch.zeros([B, L], dtype=torch.float32, device=logp.device)
    kl_loss = torch.zeros([B, L], dtype=torch.float32, device=logp.device)
    for tile_b, tile_l in kd.tile([B, L]):
        lp = logp[tile_b, tile_l]
        per_token = -lp
        if beta != 0.0 and ref_logp is not None:  # as grpo_loss writes it
            ref = ref_logp[tile_b, tile_l]
            kl = torch.exp(ref - lp) - (ref - lp) - 1
            if mask is not None:
                kl *= mask[tile_b, tile_l]
            per_token += beta * kl
            kl_loss[tile_b, tile_l] = kl
        if not beta > 0.5 or mask is None:
            per_token = per_token * 2
        loss[tile_b, tile_l] = per_token
    return loss, kl_loss


def _kl_ref(logp, ref_logp, mask, beta):  # type: ignore[no-untyped-def]
    loss, kl_loss = -logp, torch.zeros_like(logp)
    if beta != 0.0 and ref_logp is not None:
        kl_loss = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        if mask is not None:
            kl_loss = kl_loss * mask
        loss = loss + beta * kl_loss
    if not beta > 0.5 or mask is None:
        loss = loss * 2
    return loss, kl_loss


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_float_argument_in_device_code(backend: str) -> None:
    logp, ref_logp = torch.randn(13, 29) * 0.5, torch.randn(13, 29) * 0.5
    mask = (torch.rand(13, 29) > 0.3).float()
    for ref_arg, mask_arg in ((ref_logp, mask), (ref_logp, None), (None, mask)):
        traces = kl_term.stats["traces"]
        for beta in (0.0, 0.1, 0.9):  # a new value of beta: no new trace
            args = (logp, ref_arg, mask_arg, beta)
            for cfg in _spread(kl_term, args, backend, n=1) if beta == 0.1 else [None]:
                got = _run(kl_term, backend, args, cfg)
                for g, r in zip(got, _kl_ref(*args)):
                    torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5,
                                               msg=lambda m, c=cfg, b=beta: f"{b} {c}: {m}")
        assert kl_term.stats["traces"] <= traces + 1


def test_if_on_a_float_in_host_code_still_says_kd_specialize() -> None:
    @kd.kernel
    def host_if(x: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        if eps > 0 and x.shape[0] > 1:
            out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t]
        return out

    with pytest.raises(ControlFlowError, match=r"kd\.specialize\(eps\)"):
        host_if.ir(torch.randn(8), 0.5)


# -- xsa: torch.bmm(a, b, out_dtype) --------------------------------------------------------------
@kd.kernel
def bmm_out_dtype(q: torch.Tensor, k: torch.Tensor, acc0: torch.Tensor) -> torch.Tensor:
    B, M, D = q.shape
    out = torch.empty([B, M, k.shape[1]], dtype=torch.float32, device=q.device)
    for tb, tm in kd.tile([B, M], block_size=[1, None]):
        kk = k[tb, :, :]
        s = torch.bmm(q[tb, tm, :], kk.transpose(1, 2), torch.float32)  # as xsa writes it
        s2 = torch.baddbmm(acc0[tb, tm, :], q[tb, tm, :], kk.transpose(1, 2),
                           out_dtype=torch.float32, alpha=0.5)
        out[tb, tm, :] = s + s2
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bmm_out_dtype(backend: str, dtype: torch.dtype) -> None:
    q, k = torch.randn(3, 37, 16).to(dtype), torch.randn(3, 19, 16).to(dtype)
    acc0 = torch.randn(3, 37, 19)
    prod = torch.bmm(q.float(), k.float().transpose(1, 2))
    ir = bmm_out_dtype.ir(q, k, acc0)
    assert {op.result.dtype for op in ir.body.walk() if op.kind == "dot"} == {"f32"}
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for cfg in _spread(bmm_out_dtype, (q, k, acc0), backend, n=2):
        torch.testing.assert_close(_run(bmm_out_dtype, backend, (q, k, acc0), cfg),
                                   prod * 1.5 + acc0, atol=tol, rtol=tol,
                                   msg=lambda m, c=cfg: f"{c}: {m}")


# -- the real TPU compiler ------------------------------------------------------------------------
def _tpu_cases() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    bf16 = torch.bfloat16  # (float16 has no vector type on TPU: a typed error, tested elsewhere)
    return {"moe": (moe_fragment, _moe_args(37, 19, 23, 5)),
            "min_max": (last_of_chunk, (torch.randn(37, 19), 8)),
            "float_if": (kl_term, (torch.randn(13, 29), torch.randn(13, 29), torch.rand(13, 29),
                                   0.1)),
            "bmm_out_dtype": (bmm_out_dtype, (torch.randn(3, 37, 16).to(bf16),
                                              torch.randn(3, 19, 16).to(bf16),
                                              torch.randn(3, 37, 19))),
            "rank3_transpose": (heads_first, (torch.randn(37, 2, 16), torch.randn(19, 2, 16)))}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["moe", "min_max", "float_if", "bmm_out_dtype", "rank3_transpose"])
def test_the_tpu_compiler_accepts_them(case: str) -> None:
    """Mosaic (libtpu, compile-only) on the five TPU targets."""
    k, args = _tpu_cases()[case]
    report = k.check(*args, targets=TARGETS, measure_vmem=False)
    assert [e.status for e in report.entries] == ["ok"] * len(TARGETS), report


# -- jagged_hstu_attn_2: rank-3 transpose(0, 1), bmm, F.silu (torch passes inplace=False) ----------
@kd.kernel
def heads_first(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    L, H, D = q.shape
    out = torch.empty([L, H, k.shape[0]], dtype=torch.float32, device=q.device)
    for tile_q in kd.tile(L):
        q_blk = q[tile_q, :, :].transpose(0, 1)  # [H, tile_q, D], as the example writes it
        k_blk = k[:, :, :].transpose(0, 1)
        s = F.silu(torch.bmm(q_blk, k_blk.transpose(-2, -1)))
        out[tile_q, :, :] = s.transpose(0, 1)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank3_transpose_and_silu(backend: str) -> None:
    q, k = torch.randn(37, 2, 16), torch.randn(19, 2, 16)
    ref = F.silu(torch.einsum("qhd,khd->qhk", q, k))
    if backend == "nki":  # the NKI layout puts a value's last two dims on (partitions, free)
        with pytest.raises(BackendError, match="must be 1") as e, kd.backend(backend):
            heads_first(q, k)
        assert e.value.loc is not None and e.value.loc.file == __file__
        return
    with kd.backend(backend):
        torch.testing.assert_close(heads_first(q, k), ref, atol=1e-4, rtol=1e-4)


def test_silu_inplace_is_refused_at_the_line() -> None:
    @kd.kernel
    def silu_inplace(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = F.silu(x[t], inplace=True)
        return out

    with pytest.raises(UnsupportedOpError, match="inplace") as e:
        silu_inplace.ir(torch.randn(8))
    assert e.value.loc is not None and e.value.loc.file == __file__
