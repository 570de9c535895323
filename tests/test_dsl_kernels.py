"""DSL kernels against PyTorch on CPU (Pallas interpret mode): ragged shapes, several configs,
both renderings of sequential loops."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from dsl_kernels import add_where, attention, layer_norm, matmul, softmax_rows, softmax_two_pass

import kernel_dsl as kd

MODES = ("grid", "inner")


def close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (16, 128), (37, 300)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128]), kd.Config([16, 256])])
def test_add_where(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    x, y = torch.randn(shape), torch.randn(shape)
    (out,) = add_where.run_cpu("pallas", (x, y), cfg)
    close(out, torch.where(x > y, x - y, 0.5 * y))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (29, 61, 130), (64, 256, 128), (131, 17, 257)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128, 8], loop_mode="grid"),
                                 kd.Config([16, 128, 32], loop_mode="inner"),
                                 kd.Config([32, 256, 128], loop_mode="grid")])
def test_matmul_f32(mkn: tuple[int, int, int], cfg: kd.Config | None) -> None:
    m, k, n = mkn
    x, y = torch.randn(m, k), torch.randn(k, n)
    (out,) = matmul.run_cpu("pallas", (x, y), cfg)
    close(out, x @ y, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_matmul_bf16_accumulates_in_f32(mode: str) -> None:
    """bf16 in, f32 accumulation: the error is one bf16 rounding of the exact result."""
    m, k, n = 33, 300, 70
    x = torch.randn(m, k).to(torch.bfloat16)
    y = torch.randn(k, n).to(torch.bfloat16)
    (out,) = matmul.run_cpu("pallas", (x, y), kd.Config([16, 128, 16], loop_mode=mode))
    exact = x.double() @ y.double()
    assert out.dtype == torch.bfloat16
    # one rounding to bf16 (rel 2^-8) of each output; bf16 accumulation over 19 k-blocks is far worse
    err = (out.double() - exact).abs() / (exact.abs() + 1e-2)
    assert err.max() < 2 ** -7, err.max()


def test_matmul_ir_keeps_f32_product_in_accumulator() -> None:
    x, y = torch.randn(8, 16).to(torch.bfloat16), torch.randn(16, 8).to(torch.bfloat16)
    text = kd.print_ir(matmul.ir(x, y))
    assert "dot acc" in text and ": f32[tm, tn]" in text
    assert " dot %" not in text  # no separate bf16 product left behind


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 200), (64, 1000)])
def test_softmax_rows(shape: tuple[int, int]) -> None:
    x = torch.randn(shape) * 5
    (out,) = softmax_rows.run_cpu("pallas", (x,))
    close(out, torch.softmax(x, -1))


@pytest.mark.parametrize("shape", [(1, 1), (3, 127), (37, 200), (16, 1024)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 128, 128], loop_mode="grid"),
                                 kd.Config([16, 256, 128], loop_mode="inner"),
                                 kd.Config([8, 128, 256], loop_mode="grid")])
def test_softmax_two_pass(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    x = torch.randn(shape) * 5
    (out,) = softmax_two_pass.run_cpu("pallas", (x,), cfg)
    close(out, torch.softmax(x, -1))


def test_softmax_bf16() -> None:
    x = (torch.randn(19, 260) * 4).to(torch.bfloat16)
    (out,) = softmax_two_pass.run_cpu("pallas", (x,), kd.Config([16, 128, 128], loop_mode="grid"))
    ref = torch.softmax(x.float(), -1)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=4e-3, rtol=1e-2)


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (64, 256)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8]), kd.Config([32])])
def test_layer_norm(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    x = torch.randn(shape) * 3 + 1
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    (out,) = layer_norm.run_cpu("pallas", (x, w, b, 1e-5), cfg)
    close(out, F.layer_norm(x, (shape[1],), w, b, 1e-5), atol=1e-4, rtol=1e-4)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    sq, skv = q.shape[2], k.shape[2]
    # bottom-right aligned causal mask (query i sees keys j <= i + skv - sq), as flash-attention
    mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.where(mask.any(-1)[:, None], out, torch.zeros(()))  # rows with no key: zeros


@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 8), (2, 3, 37, 50, 64), (1, 2, 64, 17, 32),
                                  (1, 1, 130, 130, 16)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cfg", [None, kd.Config([16, 16], loop_mode="grid"),
                                 kd.Config([8, 32], loop_mode="inner"),
                                 kd.Config([32, 8], loop_mode="grid")])
def test_attention(dims: tuple[int, ...], causal: bool, cfg: kd.Config | None) -> None:
    b, h, sq, skv, d = dims
    q, k, v = torch.randn(b, h, sq, d), torch.randn(b, h, skv, d), torch.randn(b, h, skv, d)
    (out,) = attention.run_cpu("pallas", (q, k, v, causal), cfg)
    close(out, _sdpa(q, k, v, causal), atol=2e-5, rtol=2e-5)


def test_attention_rows_without_keys_are_zero_not_nan() -> None:
    """Causal with Sq > Skv: the first Sq - Skv queries see no key."""
    q, k, v = torch.randn(1, 1, 20, 16), torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    (out,) = attention.run_cpu("pallas", (q, k, v, True), kd.Config([8, 8], loop_mode="grid"))
    assert torch.isfinite(out).all()
    assert (out[0, 0, :15] == 0).all()
    close(out, _sdpa(q, k, v, True), atol=2e-5, rtol=2e-5)


def test_loop_carried_plain_assignment_and_swap() -> None:
    """`acc = acc + v` and tuple swaps carry values exactly as Python reads them."""

    @kd.tpu_kernel
    def carry(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
        for tm in kd.tile(m):
            a = kd.zeros([tm], dtype=torch.float32)
            b = kd.full([tm], 1.0, dtype=torch.float32)
            for tn in kd.tile(n, block_size=128):
                a = a + x[tm, tn].sum(dim=-1)
                a, b = b, a  # swap every iteration
            out[tm, 0] = a
            out[tm, 1] = b
        return out

    for n in (128, 256, 384, 300):  # odd and even trip counts, a ragged last block
        x = torch.randn(9, n)
        want_a, want_b = torch.zeros(9), torch.ones(9)
        for j in range(0, n, 128):
            want_a = want_a + x[:, j:j + 128].sum(-1)
            want_a, want_b = want_b, want_a
        for mode in MODES:
            (out,) = carry.run_cpu("pallas", (x,), kd.Config([8], loop_mode=mode))
            close(out, torch.stack([want_a, want_b], 1), atol=1e-4, rtol=1e-4)


def test_tile_index_begin_and_zero_init_output() -> None:
    """`tile.index`/`tile.begin` and an output made with torch.zeros (only some rows written)."""

    @kd.tpu_kernel
    def iota(x: torch.Tensor) -> torch.Tensor:
        (n,) = x.shape
        out = torch.zeros([n, 2], dtype=torch.int32, device=x.device)
        for t in kd.tile(n):
            out[t, 0] = t.index
            out[t, 1] = t.index * 0 + t.begin
        return out

    (out,) = iota.run_cpu("pallas", (torch.randn(300),), kd.Config([128]))
    idx = torch.arange(300, dtype=torch.int32)
    assert torch.equal(out[:, 0], idx)
    assert torch.equal(out[:, 1], idx // 128 * 128)
