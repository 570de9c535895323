"""Shape ops on tiles (issue 14 item 7): `reshape`/`view(shape)`, `torch.cat`/`torch.stack`,
`kd.split`/`kd.join` (Helion's `hl.split`/`hl.join`) and rank-3 `transpose`/`permute`, on every
backend against torch, at ragged and size-1 sizes, in f32/bf16/int32, under every config of the
kernels' config spaces; the backends' limits as errors; and a port of Helion's examples/rope.py.
"""
from __future__ import annotations

import os

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import BackendError, DTypeError, KernelSyntaxError, ShapeError

BACKENDS = ("pallas", "triton", "nki")
DTYPES = (torch.float32, torch.bfloat16, torch.int32)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _data(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-1000, 1000, shape, dtype=dtype)


def _every_config(kernel: kd.Kernel, backend: str, args: tuple, ref: tuple, every: bool = True) -> int:
    """Runs `kernel` under each config of its space on `backend` (or only the default one);
    outputs must equal `ref`."""
    n = 0
    configs = kernel.configs(*args, backend=backend) if every else \
        [kernel.default_config(*args, backend=backend)]
    for cfg in configs:
        outs = kernel.run_cpu(backend, args, cfg)
        for o, r in zip(outs, ref):
            assert torch.equal(o, r), (backend, cfg)
        n += 1
    return n


# -- the rope pattern: split/join of halves through reshape + swap ------------------------------
@kd.kernel
def rotate_halves(x: torch.Tensor) -> torch.Tensor:
    m, d = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        pair = x[tm, :].reshape([tm, 2, d // 2]).permute(0, 2, 1)
        first, second = kd.split(pair)
        out[tm, :] = kd.join(-second, first).permute(0, 2, 1).reshape([tm, d])
    return out


def _rotate_halves(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[1] // 2
    return torch.cat([-x[:, h:], x[:, :h]], 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_rope_halves_match_torch_under_every_config(backend: str, dtype: torch.dtype) -> None:
    for i, shape in enumerate(((37, 130), (1, 2), (5, 256))):
        x = _data(shape, dtype)
        every = i == 0 and dtype == torch.float32
        assert _every_config(rotate_halves, backend, (x,), (_rotate_halves(x),), every) >= 1


def test_the_rope_chain_is_traced_as_slices_and_a_concatenation() -> None:
    """A size-2 minor dim is a poor TPU layout (one lane in 128 used): reshape + swap + split is
    the two halves of the row, join + swap + reshape their concatenation."""
    kinds = [op.kind for op in rotate_halves.ir(torch.empty(8, 256)).body.walk()]
    assert "reshape" not in kinds and "transpose" not in kinds
    assert kinds.count("slice") == 2 and kinds.count("concat") == 1


# -- interleaved pairs: a real size-2 minor dim -------------------------------------------------
@kd.kernel
def swap_pairs(x: torch.Tensor) -> torch.Tensor:
    m, d = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        even, odd = kd.split(x[tm, :].reshape(tm, d // 2, 2))
        out[tm, :] = kd.join(odd, even).view([tm, -1])
    return out


def _swap_pairs(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.shape[0], -1, 2).flip(-1).reshape(x.shape)


@pytest.mark.parametrize("backend", ("pallas", "triton"))
def test_interleaved_pairs_match_torch(backend: str) -> None:
    for dtype in DTYPES:
        x = _data((37, 64), dtype)
        every = dtype == torch.float32
        assert _every_config(swap_pairs, backend, (x,), (_swap_pairs(x),), every) >= 1
    x = _data((1, 2), torch.float32)
    (got,) = swap_pairs.run_cpu(backend, (x,), swap_pairs.default_config(x, backend=backend))
    assert torch.equal(got, _swap_pairs(x))


def test_pallas_regroups_any_int_dims() -> None:
    x = torch.randn(7, 6)
    (got,) = swap_pairs.run_cpu("pallas", (x,), swap_pairs.default_config(x, backend="pallas"))
    assert torch.equal(got, _swap_pairs(x))


def test_triton_refuses_to_regroup_padded_dims() -> None:
    """Triton blocks have power-of-two dims: 6 elements in 8 lanes cannot become [3, 2]."""
    with kd.backend("triton"), pytest.raises(BackendError, match=r"power-of-two dims.*\[3, 6\]"):
        swap_pairs(torch.randn(7, 6))


def test_tpu_v4_refuses_to_split_a_wide_minor_dim() -> None:
    """libtpu's tpu-v4 compiler rejects `[m, 256] -> [m, 128, 2]` ("unsupported shape cast");
    tpu-v5e and newer compile it (the slow test below)."""
    x = torch.empty(64, 256)
    with pytest.raises(BackendError, match=r"tpu-v4 cannot reshape.*minor dim of 256 lanes"):
        swap_pairs.source(x, target="tpu-v4")
    assert "reshape" in swap_pairs.source(x, target="tpu-v5e")
    assert "slice_in_dim" in rotate_halves.source(x, target="tpu-v4")  # the rope form


def test_nki_refuses_to_regroup_the_on_chip_tile() -> None:
    with kd.backend("nki"), pytest.raises(BackendError, match="between partitions"):
        swap_pairs(torch.randn(7, 64))


# -- torch.cat / torch.stack ----------------------------------------------------------------------
@kd.kernel
def cat_rows(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n1 = x.shape
    n2 = y.shape[1]
    out = torch.empty([m, n1 + n2], dtype=x.dtype, device=x.device)
    wide = torch.empty([m, 2 * n1 + n2], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        a, b = x[tm, :], y[tm, :]
        out[tm, :] = torch.cat([a, b], dim=1)
        wide[tm, :] = torch.cat((b, a, a), -1)
    return out, wide


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_matches_torch_under_every_config(backend: str, dtype: torch.dtype) -> None:
    for i, (m, n1, n2) in enumerate(((37, 130, 5), (1, 1, 1), (9, 128, 128))):
        x, y = _data((m, n1), dtype), _data((m, n2), dtype)
        ref = (torch.cat([x, y], 1), torch.cat([y, x, x], 1))
        every = i == 0 and dtype == torch.float32
        assert _every_config(cat_rows, backend, (x, y), ref, every) >= 1


@kd.kernel
def stacks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.shape
    s0 = torch.empty([m, n], dtype=x.dtype, device=x.device)
    s1 = torch.empty([m, 2 * n], dtype=x.dtype, device=x.device)
    s2 = torch.empty([m, 2 * n], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        v = x[tm, :]
        s0[tm, :] = torch.stack([v, v + 1], 0).amax(0)
        s1[tm, :] = torch.stack([v, v * 2], dim=1).reshape([tm, 2 * n])
        s2[tm, :] = torch.stack([v, v * 3], dim=-1).view(tm, -1)
    return s0, s1, s2


def _stacks(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    m = x.shape[0]
    return (torch.stack([x, x + 1], 0).amax(0), torch.stack([x, x * 2], 1).reshape(m, -1),
            torch.stack([x, x * 3], -1).reshape(m, -1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", ("pallas", "triton"))
def test_stack_matches_torch_under_every_config(backend: str, dtype: torch.dtype) -> None:
    for i, shape in enumerate(((37, 64), (1, 1), (8, 4))):
        x = _data(shape, dtype)
        every = i == 0 and dtype == torch.float32
        assert _every_config(stacks, backend, (x,), _stacks(x), every) >= 1


def test_nki_stacks_only_along_the_free_axis() -> None:
    with kd.backend("nki"), pytest.raises(BackendError, match="must be 1"):
        stacks(torch.randn(5, 8))


# -- split(join(a, b)), unit dims, bit views -----------------------------------------------------
@kd.kernel
def unit_dims(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    out = torch.empty_like(x)
    bits = torch.empty([m, n], dtype=torch.int32, device=x.device)
    for tm in kd.tile(m):
        v = x[tm, :].reshape([tm, 1, n]) * w[:].view(1, 1, n)
        a, b = kd.split(kd.join(v, v + 1.0))
        out[tm, :] = (b - a + v).reshape(tm.block_size, n)
        bits[tm, :] = x[tm, :].float().view(torch.int32)
    return out, bits


@pytest.mark.parametrize("backend", BACKENDS)
def test_unit_dims_and_split_of_join(backend: str) -> None:
    for i, (m, n) in enumerate(((37, 130), (1, 1))):
        x, w = torch.randn(m, n), torch.randn(n)
        v = x * w
        ref = ((v + 1) - v + v, x.view(torch.int32))
        assert _every_config(unit_dims, backend, (x, w), ref, i == 0) >= 1


# -- blackwell_attention's subtiling: split/join of a loop-carried accumulator ----------------
@kd.kernel
def scaled_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    dv = w.shape[1]
    out = torch.empty([m, dv], dtype=torch.float32, device=x.device)
    for tile_m in kd.tile(m):
        acc = kd.zeros([tile_m, dv])
        for tile_n in kd.tile(n):
            alpha = torch.sigmoid(x[tile_m, tile_n].sum(-1))
            acc0, acc1 = kd.split(acc.reshape([tile_m, 2, dv // 2]).permute(0, 2, 1))
            acc0 = acc0 * alpha[:, None]
            acc1 = acc1 * alpha[:, None]
            acc = kd.join(acc0, acc1).permute(0, 2, 1).reshape(acc.size(0), acc.size(1))
            acc = kd.dot(x[tile_m, tile_n], w[tile_n, :], acc=acc)
        out[tile_m, :] = acc
    return out


def _scaled_rows(x: torch.Tensor, w: torch.Tensor, bn: int) -> torch.Tensor:
    acc = torch.zeros(x.shape[0], w.shape[1])
    for j in range(0, x.shape[1], bn):
        xs = x[:, j:j + bn]
        acc = acc * torch.sigmoid(xs.sum(-1))[:, None] + xs @ w[j:j + bn]
    return acc


@pytest.mark.parametrize("backend", BACKENDS)
def test_blackwell_attention_subtiling_pattern(backend: str) -> None:
    x, w = torch.randn(37, 48), torch.randn(48, 128)
    for cfg in scaled_rows.configs(x, w, backend=backend):
        (got,) = scaled_rows.run_cpu(backend, (x, w), cfg)
        bn = min(cfg.block_sizes[1], 48)
        torch.testing.assert_close(got, _scaled_rows(x, w, bn), atol=1e-4, rtol=1e-4)


# -- rank-3 transpose / permute -------------------------------------------------------------------
@kd.kernel
def swap_leading(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, t, d = x.shape
    out = torch.empty([t, b, d], dtype=x.dtype, device=x.device)
    last = torch.empty([d, t, b], dtype=x.dtype, device=x.device)
    for tb, tt in kd.tile([b, t]):
        v = x[tb, tt, :]
        out[tt, tb, :] = v.transpose(0, 1)
        last[:, tt, tb] = v.permute(2, 1, 0)
    return out, last


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", ("pallas", "triton"))
def test_rank3_permutes_match_torch_under_every_config(backend: str, dtype: torch.dtype) -> None:
    for i, shape in enumerate(((3, 37, 16), (1, 1, 1))):
        x = _data(shape, dtype)
        ref = (x.transpose(0, 1).contiguous(), x.permute(2, 1, 0).contiguous())
        every = i == 0 and dtype == torch.float32
        assert _every_config(swap_leading, backend, (x,), ref, every) >= 1


def test_nki_rank3_permute_is_a_backend_error() -> None:
    with kd.backend("nki"), pytest.raises(BackendError, match="must be 1"):
        swap_leading(torch.randn(3, 8, 16))


# -- errors --------------------------------------------------------------------------------------
def _one(body):  # noqa: ANN001, ANN202
    @kd.kernel
    def k(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm in kd.tile(x.shape[0]):
            out[tm, :] = body(x[tm, :], tm, x.shape[1])
        return out
    return k


@pytest.mark.parametrize("body, error, match", [
    (lambda v, tm, d: v.reshape([d, tm]), ShapeError, "tile dims must stay"),
    (lambda v, tm, d: v.reshape([-1]), ShapeError, "tile dims must stay"),
    (lambda v, tm, d: v.reshape([tm, 3, -1]).reshape([tm, d]), ShapeError, "cannot be inferred"),
    (lambda v, tm, d: v.reshape([tm, d + 1]), ShapeError, "different numbers of elements"),
    (lambda v, tm, d: v.reshape([tm, tm.block_size * 2]), ShapeError,  # a merge: widened.py
     "merges a `tm` dim with the int dim 2 right after it"),
    (lambda v, tm, d: v.reshape([tm, tm.block_size + 2]), KernelSyntaxError,
     "only `c \\* tile.block_size`"),
    (lambda v, tm, d: torch.cat([v, v], 0), ShapeError, "a tile dim"),
    (lambda v, tm, d: torch.cat([v, v.sum(1)], 1), ShapeError, "same rank"),
    (lambda v, tm, d: torch.stack([v, v.sum(1, keepdim=True)], 1), ShapeError, "equal shapes"),
    (lambda v, tm, d: kd.split(v)[0], ShapeError, "last dim must be 2"),
    (lambda v, tm, d: kd.join(v, v.int()).sum(-1), DTypeError, "one dtype"),
    (lambda v, tm, d: v.permute(0, 0), ShapeError, "give each dim once"),
    (lambda v, tm, d: v.permute(0, 3), ShapeError, "give each dim once"),
    (lambda v, tm, d: v.transpose(0, 2), ShapeError, "out of range"),
])
def test_shape_errors_name_the_line(body, error, match) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match) as info:
        _one(body)(torch.randn(8, 4))
    assert "test_tile_shapes.py" in str(info.value)


# -- Helion's examples/rope.py, ported (hl. -> kd.) ----------------------------------------------
@kd.kernel
def rope_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply rotary embeddings to query and key tensors."""
    batch, q_heads, seq_len, head_dim = q.size()
    _, k_heads, _, _ = k.size()
    half_dim = head_dim // 2
    q_out = torch.empty_like(q)
    k_out = torch.empty_like(k)

    for tile_b, tile_t in kd.tile([batch, seq_len]):
        cos_pair = (
            cos[tile_b, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, tile_t, 2, half_dim])
            .permute(0, 1, 3, 2)
        )
        sin_pair = (
            sin[tile_b, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, tile_t, 2, half_dim])
            .permute(0, 1, 3, 2)
        )
        cos_first, cos_second = kd.split(cos_pair)
        sin_first, sin_second = kd.split(sin_pair)

        q_pair = (
            q[tile_b, :, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, q_heads, tile_t, 2, half_dim])
            .permute(0, 1, 2, 4, 3)
        )
        q_first, q_second = kd.split(q_pair)
        q_first_out = (
            q_first * cos_first[:, None, :, :] - q_second * sin_first[:, None, :, :]
        )
        q_second_out = (
            q_second * cos_second[:, None, :, :] + q_first * sin_second[:, None, :, :]
        )
        q_out[tile_b, :, tile_t, :] = (
            kd.join(q_first_out, q_second_out)
            .permute(0, 1, 2, 4, 3)
            .reshape([tile_b, q_heads, tile_t, head_dim])
            .to(q_out.dtype)
        )

        k_pair = (
            k[tile_b, :, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, k_heads, tile_t, 2, half_dim])
            .permute(0, 1, 2, 4, 3)
        )
        k_first, k_second = kd.split(k_pair)
        k_first_out = (
            k_first * cos_first[:, None, :, :] - k_second * sin_first[:, None, :, :]
        )
        k_second_out = (
            k_second * cos_second[:, None, :, :] + k_first * sin_second[:, None, :, :]
        )
        k_out[tile_b, :, tile_t, :] = (
            kd.join(k_first_out, k_second_out)
            .permute(0, 1, 2, 4, 3)
            .reshape([tile_b, k_heads, tile_t, head_dim])
            .to(k_out.dtype)
        )

    return q_out, k_out


@kd.kernel
def rope_bwd(
    grad_q_out: torch.Tensor,
    grad_k_out: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute gradients for the RoPE inputs q and k."""
    batch, q_heads, seq_len, head_dim = grad_q_out.size()
    _, k_heads, _, _ = grad_k_out.size()
    half_dim = head_dim // 2
    grad_q = torch.empty_like(grad_q_out)
    grad_k = torch.empty_like(grad_k_out)

    for tile_b, tile_t in kd.tile([batch, seq_len]):
        cos_pair = (
            cos[tile_b, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, tile_t, 2, half_dim])
            .permute(0, 1, 3, 2)
        )
        sin_pair = (
            sin[tile_b, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, tile_t, 2, half_dim])
            .permute(0, 1, 3, 2)
        )
        cos_first, cos_second = kd.split(cos_pair)
        sin_first, sin_second = kd.split(sin_pair)

        q_grad_pair = (
            grad_q_out[tile_b, :, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, q_heads, tile_t, 2, half_dim])
            .permute(0, 1, 2, 4, 3)
        )
        q_grad_first_out, q_grad_second_out = kd.split(q_grad_pair)
        q_grad_first = (
            q_grad_first_out * cos_first[:, None, :, :]
            + q_grad_second_out * sin_second[:, None, :, :]
        )
        q_grad_second = (
            q_grad_second_out * cos_second[:, None, :, :]
            - q_grad_first_out * sin_first[:, None, :, :]
        )
        grad_q[tile_b, :, tile_t, :] = (
            kd.join(q_grad_first, q_grad_second)
            .permute(0, 1, 2, 4, 3)
            .reshape([tile_b, q_heads, tile_t, head_dim])
            .to(grad_q.dtype)
        )

        k_grad_pair = (
            grad_k_out[tile_b, :, tile_t, :]
            .to(torch.float32)
            .reshape([tile_b, k_heads, tile_t, 2, half_dim])
            .permute(0, 1, 2, 4, 3)
        )
        k_grad_first_out, k_grad_second_out = kd.split(k_grad_pair)
        k_grad_first = (
            k_grad_first_out * cos_first[:, None, :, :]
            + k_grad_second_out * sin_second[:, None, :, :]
        )
        k_grad_second = (
            k_grad_second_out * cos_second[:, None, :, :]
            - k_grad_first_out * sin_first[:, None, :, :]
        )
        grad_k[tile_b, :, tile_t, :] = (
            kd.join(k_grad_first, k_grad_second)
            .permute(0, 1, 2, 4, 3)
            .reshape([tile_b, k_heads, tile_t, head_dim])
            .to(grad_k.dtype)
        )

    return grad_q, grad_k


def rope_pytorch(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):  # noqa: ANN201
    """Helion's reference (transformers' LLaMA convention), in float32."""
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half_dim = x.shape[-1] // 2
        return torch.cat((-x[..., half_dim:], x[..., :half_dim]), dim=-1)

    q, k, cos, sin = (t.float() for t in (q, k, cos, sin))
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _rope_inputs(b: int, hq: int, hk: int, t: int, d: int, dtype: torch.dtype):  # noqa: ANN202
    q = torch.randn(b, hq, t, d).to(dtype)
    k = torch.randn(b, hk, t, d).to(dtype)
    angles = torch.randn(b, t, d).to(dtype)
    return q, k, torch.cos(angles), torch.sin(angles)


def _rope_close(got: tuple, want: tuple, dtype: torch.dtype) -> None:
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.to(g.dtype).float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
@pytest.mark.parametrize("backend", ("pallas", "triton"))
def test_helion_rope_port_matches_torch(backend: str, dtype: torch.dtype) -> None:
    args = _rope_inputs(2, 4, 2, 37, 64, dtype)
    q, k, cos, sin = args
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    qq, kk = q.float().requires_grad_(), k.float().requires_grad_()
    want_grads = torch.autograd.grad(rope_pytorch(qq, kk, cos, sin), (qq, kk), (gq.float(), gk.float()))
    with kd.backend(backend):
        _rope_close(rope_fwd(*args), rope_pytorch(*args), dtype)
        _rope_close(rope_bwd(gq, gk, cos, sin), want_grads, dtype)
        small = _rope_inputs(1, 1, 1, 1, 2, dtype)
        _rope_close(rope_fwd(*small), rope_pytorch(*small), dtype)


@pytest.mark.slow
def test_helion_rope_port_every_config() -> None:
    args = _rope_inputs(2, 2, 1, 19, 16, torch.float32)
    want = rope_pytorch(*args)
    for backend in ("pallas", "triton"):
        for cfg in rope_fwd.configs(*args, backend=backend):
            _rope_close(rope_fwd.run_cpu(backend, args, cfg), want, torch.float32)


def test_helion_rope_port_on_nki() -> None:
    """NKI lays a tile's last two dims onto (partitions, free): one head and one batch row per
    block run; more heads are the layout's BackendError."""
    args = _rope_inputs(2, 1, 1, 37, 64, torch.float32)
    got = rope_fwd.run_cpu("nki", args, kd.Config([1, 16]))
    _rope_close(got, rope_pytorch(*args), torch.float32)
    with kd.backend("nki"), pytest.raises(BackendError, match="must be 1"):
        rope_fwd(*_rope_inputs(2, 4, 2, 37, 64, torch.float32))


# -- the real TPU compiler -----------------------------------------------------------------------
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


@pytest.mark.slow
def test_shape_ops_compile_for_every_tpu_target() -> None:
    """libtpu's compile-only targets accept the shape ops: halves (slices and a lane
    concatenation), interleaved pairs (a size-2 minor dim; not tpu-v4, whose compiler rejects
    the split of a 256-lane dim: a BackendError there), cat/stack, unit dims, rank-3 permutes,
    and the rope port."""
    E = torch.empty
    cases = [(rotate_halves, (E(64, 256),)), (swap_pairs, (E(64, 256),)),
             (cat_rows, (E(64, 128), E(64, 128))), (stacks, (E(64, 128),)),
             (unit_dims, (E(64, 128), E(128))), (swap_leading, (E(8, 64, 128),)),
             (rope_fwd, _rope_inputs(2, 4, 2, 64, 128, torch.bfloat16))]
    for kernel, args in cases:
        targets = TPU_TARGETS[1:] if kernel is swap_pairs else TPU_TARGETS
        r = kernel.check(*args, targets=targets, measure_vmem=False)
        assert r.ok, r.table()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                    reason="TRITON_INTERPRET=1: no GPU compiler in this process")
def test_shape_ops_compile_for_a_real_gpu() -> None:
    """Triton's own compiler (sm_90, no GPU needed) takes tl.reshape, tl.permute and the
    tl.gather forms of slice and concat."""
    E = torch.empty
    cases = [(rotate_halves, (E(37, 130),)), (swap_pairs, (E(37, 64),)),
             (cat_rows, (E(37, 130), E(37, 5))), (stacks, (E(37, 64),)),
             (unit_dims, (E(37, 130), E(130))), (swap_leading, (E(3, 37, 16),)),
             (rope_fwd, _rope_inputs(2, 4, 2, 37, 64, torch.bfloat16))]
    for kernel, args in cases:
        r = kernel.check(*args, backend="triton")
        assert r.ok, r.table()


def test_fuzz_cat_at_ragged_sizes_every_config() -> None:
    from kernel_dsl.testing import fuzz

    def ref(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([x, y], 1), torch.cat([y, x, x], 1)

    fuzz(cat_rows, ref, "x[m,a], y[m,b]", dtypes=[torch.float32],
         dims={"m": (1, 40), "a": (1, 300), "b": (1, 40)}, configs="all",
         backends=list(BACKENDS), max_examples=3, seed=0)
