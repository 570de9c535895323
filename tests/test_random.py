"""`kd.rand` (kernel_dsl/device_random.py): Threefry-2x32-20 built from int32 IR ops gives the same
bits on pallas, triton and nki as the torch reproduction `kernel_dsl.testing.reference_rand`,
for int seeds and seeds read from a tensor, at ragged / prime / size-1 shapes, 1-D and 2-D tiles,
and whatever block sizes the config picks. Helion's low_mem_dropout ports literally.
`torch.rand_like(tile)` draws its seed from torch's generator at every call."""
from __future__ import annotations

import pytest
import random_helpers as rh
import torch
from random_helpers import BACKENDS, SEEDS, TPU_TARGETS, like_seeds

import kernel_dsl as kd
from kernel_dsl.testing import reference_rand, reference_randint, reference_random_bits
from kernel_dsl.testing.random import threefry2x32

rand_1d = rh.draw_1d(kd.rand, "rand_1d")
rand_2d_seed_t = rh.draw_2d_seed_t(kd.rand, "rand_2d_seed_t")
rand_tile_and_int = rh.draw_tile_and_int(kd.rand, "rand_tile_and_int")


@kd.kernel
def rand_1d_seed_t(x: torch.Tensor, seed_t: torch.Tensor):
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.rand([t], seed_t[0])
    return out


@kd.kernel
def rand_offset_tile(x: torch.Tensor, seed: int):
    """Helion's spaced streams: an explicit per-lane offset (here 3 * index - 1, negatives too)."""
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.rand([t], seed, offset=t.index * 3 - 1)
    return out


@kd.kernel
def spaced_rand_kernel(x: torch.Tensor) -> torch.Tensor:
    """Helion's `hl.rand` docstring example: explicit counters spaced by 3 (int32 here)."""
    output = torch.zeros_like(x)
    (m,) = x.shape
    for tile_m in kd.tile(m):
        base = tile_m.index * 3
        output[tile_m] = kd.rand([], seed=42, offsets=base)
    return output


@kd.kernel
def rand_rows_from(x: torch.Tensor, start_t: torch.Tensor, seed_t: torch.Tensor):
    """A `kd.tile(begin, end)` tile as the first dim, begin read from a tensor."""
    out = torch.zeros_like(x)
    for tn in kd.tile(x.shape[1]):
        for tm in kd.tile(start_t[0], x.shape[0]):
            out[tm, tn] = kd.rand([tm, tn], seed_t[0])
    return out


@kd.kernel
def rand_offset_t(x: torch.Tensor, seed_t: torch.Tensor, off_t: torch.Tensor):
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = kd.rand([tm, tn], seed_t[0], offset=off_t[0])
    return out


@kd.kernel
def randint_2d(x: torch.Tensor, seed_t: torch.Tensor):
    """Helion's `hl.randint` example, 2-D: a ragged range, a negative one and a power of two."""
    a, b, c = (torch.zeros(x.shape, dtype=torch.int32) for _ in range(3))
    for tm, tn in kd.tile(x.shape):
        a[tm, tn] = kd.randint([tm, tn], low=0, high=10, seed=seed_t[0])
        b[tm, tn] = kd.randint([tm, tn], -(2**31), -1, seed_t[0], offset=1000)
        c[tm, tn] = kd.randint([tm, tn], -3, 61, seed_t[0])
    return a, b, c


def test_reference_matches_threefry_known_answers() -> None:
    """Random123's known-answer vectors for Threefry-2x32-20 (as JAX uses them)."""
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for key, (c0, c1), want in cases:
        a, b = threefry2x32(key, torch.tensor([c0]), torch.tensor([c1]))
        assert (int(a), int(b)) == want


def test_reference_layout() -> None:
    """The counter is the row-major index plus the offset; values are top-24-bit multiples."""
    full = reference_rand([6, 7], 9)
    assert torch.equal(full.view(-1), reference_rand([42], 9))
    assert torch.equal(reference_rand([5], 9, offset=3), reference_rand([8], 9)[3:])
    bits = reference_random_bits([100], 9)
    assert torch.equal(reference_rand([100], 9), (bits >> 8).float() / 2**24)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 37, 131], ids=str)
def test_1d_equals_reference_every_seed(backend: str, n: int) -> None:
    x = torch.empty(n)
    with kd.backend(backend):
        for seed in (SEEDS if n == 37 else SEEDS[:2]):
            assert torch.equal(rand_1d(x, seed), reference_rand([n], seed)), seed


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(13, 29), (1, 7), (5, 1)], ids=str)
def test_2d_seed_from_tensor(backend: str, shape: tuple[int, int]) -> None:
    """A seed read in the kernel (`seed_t[0]`) is a runtime value: one build for every seed, and
    the same stream as the int seed of that value."""
    x = torch.empty(shape)
    builds = []
    with kd.backend(backend):
        for seed in (-7 * 10**8, 2**31 - 1, 3):
            got = rand_2d_seed_t(x, torch.tensor([seed], dtype=torch.int32))
            assert torch.equal(got, reference_rand(shape, seed, offset=5)), seed
            builds.append(len(rand_2d_seed_t._compiled))
    assert builds[0] == builds[-1]  # a new seed value did not build again


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_tensor_equals_int_seed_1d(backend: str) -> None:
    x = torch.empty(50)
    with kd.backend(backend):
        for seed in (-5, 123456789):
            got = rand_1d_seed_t(x, torch.tensor([seed], dtype=torch.int32))
            assert torch.equal(got, rand_1d(x, seed))
            assert torch.equal(got, reference_rand([50], seed))


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_dim_and_carrying_offset(backend: str) -> None:
    x = torch.empty(9, 6)
    with kd.backend(backend):
        assert torch.equal(rand_tile_and_int(x, 77), reference_rand([9, 6], 77, offset=2**32 - 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_offset_from_tensor_wraps_and_carries(backend: str) -> None:
    """Offsets at the int32 edges: the 64-bit counter goes negative, or carries into the high word."""
    x = torch.empty(7, 40)
    seed_t = torch.tensor([99], dtype=torch.int32)
    with kd.backend(backend):
        for off in (-1, -150, 2**31 - 100, -(2**31), 12345):
            got = rand_offset_t(x, seed_t, torch.tensor([off], dtype=torch.int32))
            assert torch.equal(got, reference_rand([7, 40], 99, offset=off)), off


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_lane_offset_tile(backend: str) -> None:
    x = torch.empty(41)
    want = reference_rand([41], 4, offset=torch.arange(41) * 3 - 1)
    with kd.backend(backend):
        assert torch.equal(rand_offset_tile(x, 4), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_offsets(backend: str) -> None:
    x = torch.empty(45)
    want = reference_rand([], 42, offsets=torch.arange(45) * 3)
    with kd.backend(backend):
        assert torch.equal(spaced_rand_kernel(x), want)


@pytest.mark.parametrize("backend", ["pallas", "triton"])  # nki: no tensor-bounded loops
def test_bounded_tile_first(backend: str) -> None:
    x = torch.empty(23, 10)
    want = reference_rand([23, 10], -3)
    want[:6] = 0
    with kd.backend(backend):
        got = rand_rows_from(x, torch.tensor([6], dtype=torch.int32), torch.tensor([-3], dtype=torch.int32))
    assert torch.equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_do_not_depend_on_block_sizes(backend: str) -> None:
    x1, x2 = torch.empty(131), torch.empty(19, 37)
    ref1, ref2 = reference_rand([131], 11), reference_rand([19, 37], 11, offset=5)
    seed_t = torch.tensor([11], dtype=torch.int32)
    for b in (8, 32, 128):
        assert torch.equal(rand_1d.run_cpu(backend, (x1, 11), kd.Config([b]))[0], ref1), b
    for bm, bn in ((8, 128), (16, 32), (32, 64)):
        got = rand_2d_seed_t.run_cpu(backend, (x2, seed_t), kd.Config([bm, bn]))[0]
        assert torch.equal(got, ref2), (bm, bn)


@pytest.mark.parametrize("backend", BACKENDS)
def test_randint_equals_reference(backend: str) -> None:
    x = torch.empty(11, 37)
    with kd.backend(backend):
        a, b, c = randint_2d(x, torch.tensor([31337], dtype=torch.int32))
    assert torch.equal(a, reference_randint([11, 37], 0, 10, 31337))
    assert torch.equal(b, reference_randint([11, 37], -(2**31), -1, 31337, offset=1000))
    assert torch.equal(c, reference_randint([11, 37], -3, 61, 31337))
    assert int(a.min()) == 0 and int(a.max()) == 9 and int(c.min()) >= -3 and int(c.max()) < 61


def test_statistics() -> None:
    with kd.backend("pallas"):
        u = rand_2d_seed_t(torch.empty(256, 256), torch.tensor([2024], dtype=torch.int32))
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.005  # 65536 draws: sd of the mean is 0.0011
    assert abs(float(u.var()) - 1 / 12) < 0.002
    hist = torch.histc(u, bins=16, min=0.0, max=1.0)
    assert float(hist.min()) > 3700 and float(hist.max()) < 4500  # 4096 each expected
    # neighbours are uncorrelated (counters differ by 1 in the lowest bit)
    a, b = u.view(-1)[:-1] - 0.5, u.view(-1)[1:] - 0.5
    assert abs(float((a * b).mean()) / (1 / 12)) < 0.02
    # different seeds give different streams
    assert not torch.equal(reference_rand([64], 1), reference_rand([64], 2))


# -- Helion's examples/low_mem_dropout.py, as written there (hl -> kd) ---------------------------
@kd.kernel
def low_mem_dropout(p: float, x: torch.Tensor, seed: int) -> torch.Tensor:
    scale = 1.0 / (1.0 - p)
    # flatten to 1D so we can use tile
    n = x.numel()
    x_flat = x.view(-1)
    out_flat = torch.empty_like(x_flat)
    for tidx in kd.tile(n):
        xi = x_flat[tidx].to(torch.float32)
        r = kd.rand([tidx], seed=seed)
        keep = r > p
        yscaled = xi * scale
        yi = torch.where(keep, yscaled, 0.0)
        out_flat[tidx] = yi.to(x.dtype)
    return out_flat.view_as(x)


@kd.kernel
def low_mem_dropout_bwd(p: float, grad_y: torch.Tensor, seed: int) -> torch.Tensor:
    scale = 1.0 / (1.0 - p)
    n = grad_y.numel()
    grad_y_flat = grad_y.view(-1)
    out_flat = torch.empty_like(grad_y_flat)
    for tidx in kd.tile(n):
        gi = grad_y_flat[tidx].to(torch.float32)
        r = kd.rand([tidx], seed=seed)
        keep = r > p
        g_scaled = gi * scale
        gxi = torch.where(keep, g_scaled, 0.0)
        out_flat[tidx] = gxi.to(grad_y.dtype)
    return out_flat.view_as(grad_y)


def torch_dropout(p: float, x: torch.Tensor, seed: int) -> torch.Tensor:
    keep = reference_rand([x.numel()], seed).view_as(x) > p
    return torch.where(keep, x.float() * (1.0 / (1.0 - p)), 0.0).to(x.dtype)


@pytest.mark.parametrize("shape", [(7, 11), (1,), (3, 1, 17)], ids=str)
def test_low_mem_dropout_port(shape: tuple[int, ...]) -> None:
    """The mask is bit-identical on every backend and to the torch reproduction; the backward
    (same seed) drops the same elements."""
    x = torch.randn(shape) + 3.0  # no zeros in x: a zero output is a dropped element
    masks = []
    for backend in BACKENDS:
        with kd.backend(backend):
            for p, seed in ((0.25, 123), (0.5, -9)):
                out = low_mem_dropout(p, x, seed)
                ref = torch_dropout(p, x, seed)
                assert out.shape == x.shape
                assert torch.equal(out != 0, ref != 0), (backend, p, seed)
                torch.testing.assert_close(out, ref, rtol=1e-6, atol=0)
                grad = low_mem_dropout_bwd(p, torch.ones_like(x), seed)
                assert torch.equal(grad != 0, out != 0)
                masks.append(out != 0)
    for m in masks[2::2]:
        assert torch.equal(m, masks[0])


@kd.kernel
def dropout_2d(p: float, x: torch.Tensor, seed_t: torch.Tensor) -> torch.Tensor:
    """Dropout of a 2-D input on 2-D tiles, the seed a runtime value (a new one each step)."""
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape):
        keep = kd.rand([tm, tn], seed_t[0]) > p
        out[tm, tn] = torch.where(keep, x[tm, tn] / (1.0 - p), 0.0)
    return out


@pytest.mark.parametrize("shape", [(37, 53), (1, 130), (129, 1)], ids=str)
def test_dropout_mask_identical_across_backends(shape: tuple[int, int]) -> None:
    x = torch.rand(shape) + 1.0
    for seed in (0, 7, -123456, 2**31 - 1):
        keep = reference_rand(shape, seed) > 0.3
        for backend in BACKENDS:
            with kd.backend(backend):
                out = dropout_2d(0.3, x, torch.tensor([seed], dtype=torch.int32))
            assert torch.equal(out != 0, keep), (backend, seed)


def test_dropout_bf16() -> None:
    x = torch.randn(300).to(torch.bfloat16) + 2
    for backend in BACKENDS:
        with kd.backend(backend):
            out = low_mem_dropout(0.1, x, 5)
        assert out.dtype == torch.bfloat16
        assert torch.equal(out != 0, torch_dropout(0.1, x, 5) != 0), backend


# -- torch.rand_like: a fresh seed from torch's generator per call and call site ---------------
rand_like_kernel = rh.like_1d(torch.rand_like, "rand_like_kernel")


@kd.kernel
def dropout_like(x: torch.Tensor, p: float):
    """Two call sites (independent seeds), a 2-D ragged tile and `dtype=`."""
    out, u = torch.empty_like(x), torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tm, tn in kd.tile(x.shape):
        v = x[tm, tn]
        out[tm, tn] = torch.where(torch.rand_like(v) > p, v / (1 - p), 0.0)
        u[tm, tn] = torch.rand_like(v, dtype=torch.float32)
    return out, u


@pytest.mark.parametrize("backend", BACKENDS)
def test_rand_like_draws_a_seed_from_torch_per_call(backend: str) -> None:
    for n in (37, 1):
        x = torch.empty(n)
        with kd.backend(backend):
            a, b, c, s = rh.three_like_calls(rand_like_kernel, x)
        assert torch.equal(a, reference_rand([n], s)) and torch.equal(a, c)
        assert n == 1 or not torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rand_like_two_sites_every_config(backend: str) -> None:
    x = torch.randn(5, 37).bfloat16()
    s0, s1 = like_seeds(2, 3)
    keep = reference_rand([5, 37], s0).bfloat16() > 0.25
    want_out = torch.where(keep, x / 0.75, torch.zeros(()).bfloat16())
    space = list(dropout_like.configs(x, 0.25, backend=backend))
    assert space
    for cfg in space:
        torch.manual_seed(3)
        out, u = dropout_like.run_cpu(backend, (x, 0.25), cfg)
        assert torch.equal(u, reference_rand([5, 37], s1)), cfg
        assert torch.equal(out, want_out), cfg


# -- errors -----------------------------------------------------------------------------------


@kd.kernel
def float_seed(x: torch.Tensor, s: torch.Tensor):
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.rand([t], s[0])
    return out


@kd.kernel
def tile_seed(x: torch.Tensor, s: torch.Tensor):
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.rand([t], s[t])
    return out


@kd.kernel
def bad_shape(x: torch.Tensor):
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.rand(t.index, 1)
    return out


@kd.kernel
def bounded_second(x: torch.Tensor, start_t: torch.Tensor):
    out = torch.zeros_like(x)
    for tn in kd.tile(x.shape[1]):
        for tm in kd.tile(start_t[0], x.shape[0]):
            out[tm, tn] = kd.rand([tn, tm], 1).T
    return out


@kd.kernel
def bad_randint(x: torch.Tensor):
    out = torch.zeros(x.shape, dtype=torch.int32)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.randint([t], 5, 5, 1)
    return out


def test_errors_name_the_line() -> None:
    x = torch.empty(8)
    with kd.backend("pallas"):
        with pytest.raises(kd.DTypeError, match="rand_like.*i32") as e:
            rand_like_kernel(x.int())
        assert "random_helpers.py" in str(e.value) and "dtype=torch.float32" in str(e.value)
        with pytest.raises(kd.DTypeError, match="seed.*f32.*integer"):
            float_seed(x, torch.zeros(1))
        with pytest.raises(kd.ShapeError, match="(?s)one value.*seed_t\\[0\\]"):
            tile_seed(x, torch.zeros(8, dtype=torch.int32))
        with pytest.raises(kd.KernelSyntaxError, match="list of tiles and ints"):
            bad_shape(x)
        with pytest.raises(kd.KernelSyntaxError, match="not a non-empty int32 range"):
            bad_randint(x)
        with pytest.raises(kd.ShapeError, match="may only be the first dim"):
            bounded_second(torch.empty(8, 8), torch.zeros(1, dtype=torch.int32))


def test_compiles_for_every_tpu_target() -> None:
    """The real TPU compiler accepts the generator's int32 ops on all five targets."""
    r = rand_2d_seed_t.check(torch.empty(256, 384), torch.zeros(1, dtype=torch.int32),
                             targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r


@pytest.mark.slow
def test_dropout_compiles_for_every_tpu_target() -> None:
    r = low_mem_dropout.check(0.25, torch.empty(4096), 7, targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r


@pytest.mark.slow
def test_rand_like_compiles_for_every_tpu_target() -> None:
    """The hidden seed inputs (int32[1] each, read as scalars) and two streams in one kernel."""
    r = dropout_like.check(torch.empty(64, 300), 0.25, targets=TPU_TARGETS)
    assert [e.status for e in r.entries] == ["ok"] * len(TPU_TARGETS), r
