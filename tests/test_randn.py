"""`kd.randn` / `torch.randn_like` (kernel_dsl/device_randn.py): Box-Muller on the two Threefry
words of `kd.rand`'s counters, its log and cosine written as f32 polynomials so that every backend
that rounds each add and mul gives the bits of `kernel_dsl.testing.reference_randn`: triton and
nki (their CPU paths) exactly; pallas's CPU path (XLA CPU always contracts `a * b + c` into an fma)
within a few ulps. The transform itself is checked against float64 Box-Muller of the same words,
and the samples against the normal distribution's moments."""
from __future__ import annotations

import math

import pytest
import random_helpers as rh
import torch
from random_helpers import BACKENDS, SEEDS, TPU_TARGETS, like_seeds

import kernel_dsl as kd
from kernel_dsl.testing import reference_randn
from kernel_dsl.testing.random import threefry2x32

EXACT = ("triton", "nki")


def _agree(backend: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if backend in EXACT:
        assert torch.equal(got, want), (got != want).sum()
    else:  # fma contraction: a few ulps of the (at most ~6) result
        assert got.shape == want.shape and got.dtype == want.dtype
        err = (got.float() - want.float()).abs()
        tol = 4 * torch.finfo(got.dtype).eps * want.float().abs().clamp(min=1.0)
        assert bool((err <= tol).all()), float(err.max())


randn_1d = rh.draw_1d(kd.randn, "randn_1d")
randn_2d_seed_t = rh.draw_2d_seed_t(kd.randn, "randn_2d_seed_t")
randn_tile_and_int = rh.draw_tile_and_int(kd.randn, "randn_tile_and_int")


def test_reference_is_box_muller() -> None:
    """Against float64 sqrt(-2 ln u1) cos(2 pi u2) of the same two words: a wrong constant,
    quadrant sign or exponent step would be off by far more than 1e-6."""
    n = 1 << 16
    ctr = torch.arange(n, dtype=torch.int64) + 7
    for seed in (5, -3):
        x0, x1 = threefry2x32((seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF), ctr, torch.zeros_like(ctr))
        u1 = ((x0 >> 8) + 1).double() * 2.0 ** -24
        exact = torch.sqrt(-2 * torch.log(u1)) * torch.cos(x1.double() * (2 * math.pi / 2**32))
        got = reference_randn([n], seed, offset=7).double()
        assert float((got - exact).abs().max()) < 1e-6
    assert torch.equal(reference_randn([6, 7], 9).view(-1), reference_randn([42], 9))
    assert torch.equal(reference_randn([5], 9, offset=3), reference_randn([8], 9)[3:])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 37, 131], ids=str)
def test_1d_every_seed(backend: str, n: int) -> None:
    x = torch.empty(n)
    with kd.backend(backend):
        for seed in (SEEDS[1::2] if n == 37 else SEEDS[:1]):  # an int seed builds per value
            _agree(backend, randn_1d(x, seed), reference_randn([n], seed))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(13, 29), (1, 7), (5, 1)], ids=str)
def test_2d_seed_from_tensor(backend: str, shape: tuple[int, int]) -> None:
    x = torch.empty(shape)
    with kd.backend(backend):
        for seed in (-7 * 10**8, 3):
            got = randn_2d_seed_t(x, torch.tensor([seed], dtype=torch.int32))
            _agree(backend, got, reference_randn(shape, seed, offset=5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_dim_and_carrying_offset(backend: str) -> None:
    with kd.backend(backend):
        got = randn_tile_and_int(torch.empty(9, 6), 77)
    _agree(backend, got, reference_randn([9, 6], 77, offset=2**32 - 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_block_size_same_values(backend: str) -> None:
    x, seed_t = torch.empty(19, 37), torch.tensor([11], dtype=torch.int32)
    want = reference_randn([19, 37], 11, offset=5)
    space = list(randn_2d_seed_t.configs(x, seed_t, backend=backend))
    assert space
    by_blocks = {tuple(c.block_sizes): c for c in space}  # the values depend on nothing else
    for cfg in by_blocks.values():
        _agree(backend, randn_2d_seed_t.run_cpu(backend, (x, seed_t), cfg)[0], want)


def test_statistics() -> None:
    """Moments of a standard normal: a wrong scale, a missing sign flip (a half-normal) or a
    wrong quadrant would move the mean, variance, kurtosis or the mass within one sigma."""
    with kd.backend("triton"):
        z = randn_2d_seed_t(torch.empty(256, 256), torch.tensor([2024], dtype=torch.int32))
    z = z.double().view(-1)  # 65536 draws
    assert abs(float(z.mean())) < 0.015  # sd of the mean: 0.0039
    assert abs(float(z.var()) - 1) < 0.025  # sd: 0.0055
    assert abs(float((z ** 3).mean())) < 0.06
    assert abs(float((z ** 4).mean()) - 3) < 0.15  # sd ~0.04
    assert abs(float((z.abs() < 1).double().mean()) - 0.682689) < 0.01
    assert abs(float((z < -1.959964).double().mean()) - 0.025) < 0.003
    assert float(z.abs().max()) < 6.0  # u1 >= 2**-24 bounds |z| by 5.77
    a, b = z[:-1], z[1:]
    assert abs(float((a * b).mean())) < 0.02  # neighbours uncorrelated


# -- torch.randn_like ------------------------------------------------------------------------------
randn_like_kernel = rh.like_1d(torch.randn_like, "randn_like_kernel")


@kd.kernel
def noise_two_sites(x: torch.Tensor):
    """Two call sites (independent seeds), a 2-D ragged tile, `dtype=` and a rand_like between."""
    out, u = torch.empty_like(x), torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tm, tn in kd.tile(x.shape):
        v = x[tm, tn]
        out[tm, tn] = v + torch.randn_like(v) * 0.5
        u[tm, tn] = torch.randn_like(v, dtype=torch.float32) + torch.rand_like(v, dtype=torch.float32)
    return out, u


@pytest.mark.parametrize("backend", BACKENDS)
def test_randn_like_seed_per_call(backend: str) -> None:
    for n in (37, 1):
        x = torch.empty(n)
        with kd.backend(backend):
            a, b, c, s = rh.three_like_calls(randn_like_kernel, x)
        _agree(backend, a, reference_randn([n], s))
        assert torch.equal(a, c) and not torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_randn_like_sites_and_dtypes(backend: str, dtype: torch.dtype) -> None:
    from kernel_dsl.testing import reference_rand
    x = torch.randn(5, 37).to(dtype)
    s0, s1, s2 = like_seeds(3, 3)
    torch.manual_seed(3)
    with kd.backend(backend):
        out, u = noise_two_sites(x)
    assert out.dtype == dtype
    noise = reference_randn([5, 37], s0).to(dtype)
    _agree(backend, out, x + noise * 0.5)
    want_u = reference_randn([5, 37], s1) + reference_rand([5, 37], s2)
    _agree(backend, u, want_u)


def test_errors() -> None:
    with kd.backend("triton"):
        with pytest.raises(kd.DTypeError, match="randn_like.*i32") as e:
            randn_like_kernel(torch.zeros(8, dtype=torch.int32))
    assert "random_helpers.py" in str(e.value) and "dtype=torch.float32" in str(e.value)


@pytest.mark.slow
def test_compiles_for_every_tpu_target() -> None:
    r = randn_2d_seed_t.check(torch.empty(256, 384), torch.zeros(1, dtype=torch.int32),
                              targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r
    r = noise_two_sites.check(torch.empty(64, 300).bfloat16(), targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r
