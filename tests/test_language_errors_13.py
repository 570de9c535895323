"""Issue 13, item 8: the reported failures, each pinned.

1. Indexing a tensor with a tensor or a tile value (a gather or scatter) is a typed
   UnsupportedOpError at the user's line, not "ellipsis value cannot be used" from `==`.
2./3. NKI's default config of kernels whose tile is a leading dim of one value and in the core
   of another (Helion's batch_softmax, 3-D attention, grpo_loss) was invalid ("dim 0 ... must be
   1"); every NKI config point now pins such tiles to 1.
4. `x[tb][:, None] @ w[:, te]` with a size-1 `tb` died in NKI's layout pass ("no layout of %0
   holds %1"): a (1, 1) tile holds the same data in both orientations.
"""
from __future__ import annotations

import math
import os
import re

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import UnsupportedOpError

THIS_FILE = os.path.abspath(__file__)
BASENAME = os.path.basename(THIS_FILE)
_MARKER = re.compile(r"#\s*E:(\w+)\s*$")
with open(THIS_FILE) as _f:
    MARKERS = {m.group(1): n for n, line in enumerate(_f, start=1) if (m := _MARKER.search(line))}
BACKENDS = ("pallas", "triton", "nki")


def expect_error(marker: str, words: tuple[str, ...], fn, *args) -> None:  # noqa: ANN001
    with pytest.raises(Exception) as info:
        fn(*args)
    msg = str(info.value)
    assert type(info.value) is UnsupportedOpError, f"{type(info.value).__name__}: {msg}"
    assert f"{BASENAME}:{MARKERS[marker]}" in msg, msg
    assert "hint:" in msg and "ellipsis" not in msg, msg
    for w in words:
        assert w in msg, f"{w!r} not in:\n{msg}"


# -- 1. gather and scatter through index tensors ---------------------------------------------------

@kd.kernel
def k_embedding(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    (n,) = ids.shape
    _, d = w.shape
    out = torch.empty([n, d], dtype=w.dtype, device=w.device)
    for tb, td in kd.tile([n, d]):
        out[tb, td] = w[ids[tb], td]  # E:embedding
    return out


@kd.kernel
def k_offset(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[t] = x[t.index + 1]  # E:offset
    return out


@kd.kernel
def k_whole_tensor(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[t] = x[ids]  # E:whole
    return out


@kd.kernel
def k_scatter(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[ids[t]] = x[t]  # E:scatter
    return out


@kd.kernel
def k_mask(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[t] = x[x[t] > 0]  # E:mask
    return out


@kd.kernel
def k_tile_subscript(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[t] = x[t][ids[t]]  # E:tile_subscript
    return out


IDS = torch.tensor([3, 0, 4, 1, 1, 2, 0, 4], dtype=torch.int32)


# gathers and scatters through 1-D integer tiles are supported now (tests/test_gather_scatter.py)
def test_embedding_gather_now_runs() -> None:
    w = torch.randn(5, 4)
    with kd.backend("triton"):
        assert torch.equal(k_embedding(IDS, w), w[IDS.long()])


def test_offset_index_now_runs() -> None:
    x = torch.randn(8)
    with kd.backend("triton"):
        assert torch.equal(k_offset(x)[:-1], x[1:])  # the last lane's index 8 is clamped


def test_whole_tensor_index_is_a_clear_error() -> None:
    expect_error("whole", ("whole tensor", "gather"), k_whole_tensor, torch.randn(8), IDS)


def test_scatter_store_now_runs() -> None:
    x, perm = torch.randn(8), torch.tensor([3, 0, 4, 1, 7, 2, 6, 5], dtype=torch.int32)
    want = torch.empty_like(x)
    want[perm.long()] = x
    with kd.backend("triton"):
        assert torch.equal(k_scatter(x, perm), want)


def test_bool_mask_index_is_a_clear_error() -> None:
    expect_error("mask", ("bool", "torch.where"), k_mask, torch.randn(8))


def test_subscript_of_a_tile_value_with_a_tile_is_a_clear_error() -> None:
    expect_error("tile_subscript", ("gather",), k_tile_subscript, torch.randn(8), IDS)


@kd.kernel
def k_bmm_out_dtype(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b, m, _ = q.shape
    out = torch.empty([b, m, m], dtype=torch.float32, device=q.device)
    for tb, tm in kd.tile([b, m]):
        out[tb, tm, :] = torch.bmm(q[tb, tm, :], k[tb, :, :].transpose(1, 2), torch.float32)  # E:bmm
    return out


def test_matmul_out_dtype_argument_is_torchs_out_dtype() -> None:
    # Helion's attention.py and xsa.py write torch.bmm(q, k, torch.float32): torch's out_dtype
    # (it said "dtype value cannot be used in device code", then was a clear error; now it runs)
    q, k = torch.randn(2, 8, 4), torch.randn(2, 8, 4)
    got = k_bmm_out_dtype(q, k)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.bmm(q, k.transpose(1, 2)), rtol=1e-5, atol=1e-5)


# -- 2./3. tiles that are a leading dim of one value and in the core of another --------------------

@kd.kernel
def batch_softmax(x: torch.Tensor) -> torch.Tensor:  # Helion's examples/batch_softmax.py
    b, m, n = x.size()
    out = torch.empty_like(x)
    for tile_b, tile_m in kd.tile([b, m]):
        values = x[tile_b, tile_m, :]
        x_max = torch.amax(values, dim=2)
        exp_vals = torch.exp(values - x_max[:, :, None])
        sum_exp = torch.sum(exp_vals, dim=2)
        out[tile_b, tile_m, :] = exp_vals / sum_exp[:, :, None]
    return out


@kd.kernel
def attention3(q_view: torch.Tensor, k_view: torch.Tensor, v_view: torch.Tensor) -> torch.Tensor:
    # Helion's examples/attention.py (attention_output) on [batch, seq, head_dim] inputs
    m_dim = q_view.size(-2)
    head_dim = kd.specialize(q_view.size(-1))
    out = torch.empty_like(q_view)
    qk_scale = 1.0 / math.sqrt(head_dim) * 1.44269504
    for tile_b, tile_m in kd.tile([q_view.size(0), m_dim]):
        m_i = kd.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = torch.full_like(m_i, 1.0)
        acc = kd.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        q = q_view[tile_b, tile_m, :]
        for tile_n in kd.tile(v_view.size(1)):
            k = k_view[tile_b, tile_n, :]
            qk = torch.bmm(q * qk_scale, k.transpose(1, 2))
            m_ij = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp2(qk - m_ij[:, :, None])
            alpha = torch.exp2(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = torch.baddbmm(acc * alpha[:, :, None], p, v_view[tile_b, tile_n, :])
            m_i = m_ij
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3, 37, 130), (1, 1, 1), (5, 1, 3)])
def test_batch_softmax_default_config_runs(backend: str, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    with kd.backend(backend):
        y = batch_softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-5, rtol=1e-5)


def test_nki_config_space_pins_leading_tiles_to_one() -> None:
    x = torch.randn(3, 37, 130)
    space = list(batch_softmax.configs(x, backend="nki"))
    assert space and all(c.block_sizes[0] == 1 for c in space), space
    for c in space:  # every point renders and runs
        torch.testing.assert_close(batch_softmax.run_cpu("nki", (x,), c)[0], torch.softmax(x, -1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_attention_default_config_runs(backend: str) -> None:
    q, k, v = (torch.randn(2, 37, 16) for _ in range(3))
    with kd.backend(backend):
        out = attention3(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


# -- 4. size-1 outer products ---------------------------------------------------------------------

@kd.kernel
def outer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    (b,) = x.shape
    _, e = w.shape
    out = torch.empty([b, e], dtype=x.dtype, device=x.device)
    for tb, te in kd.tile([b, e]):
        out[tb, te] = x[tb][:, None] @ w[:, te]
    return out


@kd.kernel
def outer_t(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    (b,) = x.shape
    _, e = w.shape
    out = torch.empty([e, b], dtype=x.dtype, device=x.device)
    for te, tb in kd.tile([e, b]):
        out[te, tb] = w[:, te].T @ x[tb][None, :]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("b,e", [(1, 1), (1, 5), (5, 1), (7, 130)])
def test_outer_product_with_unit_dims(backend: str, b: int, e: int) -> None:
    x, w = torch.randn(b), torch.randn(1, e)
    with kd.backend(backend):
        torch.testing.assert_close(outer(x, w), x[:, None] @ w)
        torch.testing.assert_close(outer_t(x, w), w.T @ x[None, :])


@pytest.mark.parametrize("blocks", [[1, 1], [1, 16], [16, 1]])
def test_outer_product_with_unit_blocks_on_nki(blocks: list[int]) -> None:
    x, w = torch.randn(3), torch.randn(1, 5)
    y = outer.run_cpu("nki", (x, w), kd.Config(block_sizes=blocks))[0]
    torch.testing.assert_close(y, x[:, None] @ w)
