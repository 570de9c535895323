"""Scans in device code (IR op `scan`): torch.cumsum/cumprod (functions and methods, torch's dtype
rules), Helion's kd.cumsum/cumprod/associative_scan (reverse=, user combine functions), on every
backend against torch: f32/bf16/int32/int8/uint8/bool, int32 overflow wrapping, ragged blocks
(primes, size 1) under every config, any dim of 1-D to 3-D tiles; general combine functions of
tuples of tiles (Helion's examples/segment_reduction.py port) on pallas, triton and nki."""
from __future__ import annotations

import pytest
import torch
from dsl_kernels import combine_fn_helion, segmented_reduction_helion

import kernel_dsl as kd
from kernel_dsl.errors import KernelError

BACKENDS = ("pallas", "triton", "nki")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
I32 = torch.int32
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


def _out_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.dtype.is_floating_point else I32  # torch's int64, held as int32


@kd.kernel
def torch_scans(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Along the full last dim."""
    m, n = x.shape
    dt = x.dtype if x.dtype.is_floating_point else torch.int32
    outs = [torch.empty([m, n], dtype=dt, device=x.device) for _ in range(2)]
    for tm in kd.tile(m):
        r = x[tm, :]
        outs[0][tm, :] = torch.cumsum(r, dim=1)
        outs[1][tm, :] = r.cumprod(-1)
    return tuple(outs)


@kd.kernel
def torch_col_scans(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Along the first dim: a `:` dim that is not the last."""
    m, n = x.shape
    dt = x.dtype if x.dtype.is_floating_point else torch.int32
    outs = [torch.empty([m, n], dtype=dt, device=x.device) for _ in range(2)]
    for tn in kd.tile(n):
        c = x[:, tn]
        outs[0][:, tn] = c.cumsum(0)
        outs[1][:, tn] = torch.cumprod(c, 0)
    return tuple(outs)


def _values(dtype: torch.dtype, m: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(m * 1000 + n)
    if dtype == torch.bool:
        return torch.rand(m, n, generator=g) > 0.5
    if dtype.is_floating_point:  # near 1 so that products stay finite
        return (1 + 0.1 * torch.randn(m, n, generator=g)).to(dtype)
    lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    return torch.randint(lo, hi, (m, n), generator=g).to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    if want.dtype.is_floating_point:
        tol = dict(atol=1e-4, rtol=1e-4) if want.dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(got.float(), want.float(), **tol)
    else:
        assert torch.equal(got, want.to(got.dtype)), (got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.uint8,
                                   torch.bool], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_cumsum_cumprod_match_torch(backend: str, dtype: torch.dtype) -> None:
    for m, n in ((37, 13), (1, 5), (6, 1)):
        x = _values(dtype, m, n)
        with kd.backend(backend):
            got = torch_scans(x) + torch_col_scans(x)
        xf = x.float() if dtype == torch.bfloat16 else x  # torch's opmath: f32, rounded once
        want = [xf.cumsum(1), xf.cumprod(1), xf.cumsum(0), xf.cumprod(0)]
        for g, w in zip(got, want):
            _close(g, w.to(dtype) if dtype == torch.bfloat16 else w)


@kd.kernel
def int32_sums(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = torch.cumsum(x[tm, :], 1, dtype=torch.int32) + x[tm, :].cumprod(1)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_int32_overflow_wraps_as_torch(backend: str) -> None:
    x = torch.randint(-2**30, 2**30, (5, 29), dtype=I32)
    with kd.backend(backend):
        got = int32_sums(x)
    want = (x.long().cumsum(1) + torch.cumprod(x, 1)).to(I32)  # int32 products wrap in torch too
    assert torch.equal(got, want)


@kd.kernel
def narrow_scans(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Helion's kd.cumsum keeps the dtype (int8 wraps); torch's dtype= casts first."""
    a, b = torch.empty_like(x), torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        r = x[tm, :]
        a[tm, :] = kd.cumsum(r, 1)
        b[tm, :] = torch.cumsum(r, -1, dtype=x.dtype) + kd.cumprod(r, 1, reverse=True)
    return a, b


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_narrow_integers_wrap(backend: str, dtype: torch.dtype) -> None:
    x = torch.randint(0 if dtype == torch.uint8 else -100, 100, (7, 31)).to(dtype)
    with kd.backend(backend):
        a, b = narrow_scans(x)
    s = x.long().cumsum(1)
    p = x.long().flip(1).cumprod(1).flip(1)
    # wrapping each step or once at the end is the same modulo 2**8
    assert torch.equal(a, (s % 256).to(torch.uint8).to(dtype))
    assert torch.equal(b, ((s + p) % 256).to(torch.uint8).to(dtype))


@kd.kernel
def block_scans(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Scans along a tile dim: each block scans its own lanes (Helion's meaning)."""
    outs = [torch.empty_like(x) for _ in range(4)]
    for t in kd.tile(x.shape[0]):
        v = x[t]
        outs[0][t] = kd.cumsum(v, 0)
        outs[1][t] = kd.cumsum(v, 0, reverse=True)
        outs[2][t] = kd.associative_scan(torch.maximum, v, 0, reverse=True)
        outs[3][t] = kd.cumprod(v, 0, reverse=True)
    return tuple(outs)


def _per_block(x: torch.Tensor, b: int, fn) -> torch.Tensor:  # noqa: ANN001
    return torch.cat([fn(x[i:i + b]) for i in range(0, len(x), b)])


def _rev(f):  # noqa: ANN001, ANN202
    return lambda v: f(v.flip(0)).flip(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_config_ragged_reverse(backend: str, dtype: torch.dtype) -> None:
    """Lanes past a ragged block's end never reach valid lanes, reverse scans included."""
    for n in (53, 1):
        x = _values(dtype, 1, n)[0]
        space = list(block_scans.configs(x, backend=backend))
        assert space
        for cfg in space:
            b = min(cfg.block_sizes[0], n)
            got = block_scans.run_cpu(backend, (x,), cfg)
            want = [_per_block(x, b, lambda v: v.cumsum(0)),
                    _per_block(x, b, _rev(lambda v: v.cumsum(0))),
                    _per_block(x, b, _rev(lambda v: v.cummax(0).values)),
                    _per_block(x, b, _rev(lambda v: v.cumprod(0)))]
            for g, w in zip(got, want):
                _close(g, w.to(dtype))


@kd.kernel
def combines(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = [torch.empty_like(x) for _ in range(5)]
    for tm in kd.tile(x.shape[0]):
        r = x[tm, :]
        outs[0][tm, :] = kd.associative_scan(lambda a, b: a + b, r, 1)
        outs[1][tm, :] = kd.associative_scan(lambda a, b: b * a, r, 1, reverse=True)
        outs[2][tm, :] = kd.associative_scan(torch.maximum, r, 1)
        (outs[3][tm, :],) = kd.associative_scan(lambda a, b: (torch.minimum(a, b),), (r,), 1)
        outs[4][tm, :] = kd.associative_scan(lambda a, b: a.max(b), r, -1, reverse=True)
    return tuple(outs)


@kd.kernel
def int_combines(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = [torch.empty_like(x) for _ in range(3)]
    for tm in kd.tile(x.shape[0]):
        r = x[tm, :]
        outs[0][tm, :] = kd.associative_scan(lambda a, b: a | b, r, 1)
        outs[1][tm, :] = kd.associative_scan(lambda a, b: a ^ b, r, 1, reverse=True)
        outs[2][tm, :] = kd.associative_scan(torch.bitwise_and, r, 1)
    return tuple(outs)


def _scan_ref(x: torch.Tensor, f, reverse: bool = False) -> torch.Tensor:  # noqa: ANN001
    x = x.flip(1) if reverse else x
    cols = [x[:, 0]]
    for j in range(1, x.shape[1]):
        cols.append(f(cols[-1], x[:, j]))
    out = torch.stack(cols, 1)
    return out.flip(1) if reverse else out


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_combine_functions(backend: str) -> None:
    x = _values(torch.float32, 11, 23)
    x[3, 5] = float("nan")  # a NaN wins max and min from its lane on, as torch's do
    xi = torch.randint(0, 2**20, (11, 23), dtype=I32)
    with kd.backend(backend):
        got = combines(x)
        goti = int_combines(xi)
    want = [x.cumsum(1), _scan_ref(x, torch.mul, True), _scan_ref(x, torch.maximum),
            _scan_ref(x, torch.minimum), _scan_ref(x, torch.maximum, True)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4, equal_nan=True)
    wanti = [_scan_ref(xi, torch.bitwise_or), _scan_ref(xi, torch.bitwise_xor, True),
             _scan_ref(xi, torch.bitwise_and)]
    for g, w in zip(goti, wanti):
        assert torch.equal(g, w)


@kd.kernel
def scans_3d(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = [torch.empty_like(x) for _ in range(3)]
    for tb in kd.tile(x.shape[0], block_size=1):
        v = x[tb, :, :]
        outs[0][tb, :, :] = v.cumsum(1)
        outs[1][tb, :, :] = kd.cumsum(v, 2, reverse=True)
        outs[2][tb, :, :] = kd.cumsum(v, 0)  # over one lane: the values themselves
    return tuple(outs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_3d_tiles(backend: str) -> None:
    x = torch.randint(-50, 50, (3, 7, 19), dtype=I32)
    with kd.backend(backend):
        got = scans_3d(x)
    want = [x.cumsum(1), x.flip(2).cumsum(2).flip(2), x]
    for g, w in zip(got, want):
        assert torch.equal(g, w.to(I32))


# -- general combine functions (IR scan op="combine"): every backend (the Helion port: dsl_kernels)
def segmented_reduction_pytorch(indices: torch.Tensor, input_data: torch.Tensor,
                                num_nodes: int) -> torch.Tensor:
    out = torch.zeros(num_nodes, input_data.size(1), dtype=input_data.dtype)
    return out.scatter_add_(0, indices.long().unsqueeze(1).expand(-1, input_data.size(1)), input_data)


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_helion_segment_reduction_port(backend: str) -> None:
    """Runs on every backend: Pallas passes `indices` twice (a vector load and the atomic's
    scatter index, SMEM lane by lane), NKI's atomic through the index tile is a read-modify-write
    per lane (more: tests/test_segment_atomics.py)."""
    indices = torch.randint(0, 10, (53,)).sort()[0].to(I32)
    x = torch.randn(53, 7)
    want = segmented_reduction_pytorch(indices, x, 10)
    with kd.backend(backend):
        torch.testing.assert_close(segmented_reduction_helion(indices, x, 10), want,
                                   atol=1e-4, rtol=1e-4)
    for cfg in list(segmented_reduction_helion.configs(indices, x, 10, backend=backend))[:6]:
        got = segmented_reduction_helion.run_cpu(backend, (indices, x, 10), cfg)[0]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@kd.kernel
def segment_scans(x: torch.Tensor, seg: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Both of Helion's tuple forms, reverse (the scan of the reversed order), a ragged tile dim."""
    outs = [torch.empty_like(x) for _ in range(3)]
    for t in kd.tile(x.shape[0]):
        v, s = x[t], seg[t]
        outs[0][t], _ = kd.associative_scan(combine_fn_helion, (v, s), 0)
        outs[1][t], _ = kd.associative_scan(combine_fn_helion, (v, s), 0, reverse=True)
        outs[2][t], _ = kd.associative_scan(
            lambda a, b: combine_fn_helion(a[0], a[1], b[0], b[1]), (v, s), 0, reverse=True)
    return tuple(outs)


def _segment_ref(v: torch.Tensor, s: torch.Tensor, reverse: bool) -> torch.Tensor:
    """Helion's reference: acc = combine(acc, current), in reversed order for reverse."""
    order = range(len(v) - 1, -1, -1) if reverse else range(len(v))
    out, acc = torch.empty_like(v), None
    for k in order:
        acc = (v[k], s[k]) if acc is None else combine_fn_helion(acc[0], acc[1], v[k], s[k])
        out[k] = acc[0]
    return out


@kd.kernel
def segment_reduction_scan(
    indices: torch.Tensor, input_data: torch.Tensor
) -> torch.Tensor:
    """Helion's segmented_reduction_helion up to its atomic: the same loop, loads, scan along the
    tile's first dim and mask; `segment_vals` is stored densely (a pallas or nki scatter through
    an index tile is refused: test_helion_segment_reduction_port) and scattered in torch."""
    num_elements, num_features = input_data.shape
    out = torch.empty_like(input_data)
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
        out[tile_e, tile_f] = torch.where(mask.unsqueeze(1), out_vals, 0.0)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_segment_reduction_scan_every_backend(backend: str) -> None:
    for n, f in ((53, 7), (1, 3), (130, 1)):
        indices = torch.randint(0, 10, (n,)).sort()[0].to(I32)
        x = torch.randn(n, f)
        want = segmented_reduction_pytorch(indices, x, 10)
        space = list(segment_reduction_scan.configs(indices, x, backend=backend))
        for cfg in space[:: max(1, len(space) // 4)]:
            dense = segment_reduction_scan.run_cpu(backend, (indices, x), cfg)[0]
            got = torch.zeros(10, f).index_add_(0, indices.long(), dense)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuple_combines_every_config(backend: str) -> None:
    for n in (37, 1):
        x = torch.randn(n)
        seg = torch.randint(0, 4, (n,)).sort()[0].float()
        for cfg in segment_scans.configs(x, seg, backend=backend):
            b = min(cfg.block_sizes[0], n)
            got = segment_scans.run_cpu(backend, (x, seg), cfg)
            fwd = _per_block_2(x, seg, b, False)
            rev = _per_block_2(x, seg, b, True)
            for g, w in zip(got, (fwd, rev, rev)):
                torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def _per_block_2(x: torch.Tensor, s: torch.Tensor, b: int, reverse: bool) -> torch.Tensor:
    return torch.cat([_segment_ref(x[i:i + b], s[i:i + b], reverse) for i in range(0, len(x), b)])


@kd.kernel
def int_segment_scans(x: torch.Tensor, seg: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Integer and bool region values (an i32 compare, where, `|` of the reverse flag), 2-D tiles
    scanned along their first dim (partitions on NKI: transposed first) and their second."""
    outs = [torch.empty_like(x) for _ in range(2)]
    for tm, tn in kd.tile(x.shape):
        v, s = x[tm, tn], seg[tm, tn]
        outs[0][tm, tn], _ = kd.associative_scan(combine_fn_helion, (v, s), 0, reverse=True)
        outs[1][tm, tn], _ = kd.associative_scan(combine_fn_helion, (v, s), 1)
    return tuple(outs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bfloat16], ids=str)
def test_tuple_combines_dtypes(backend: str, dtype: torch.dtype) -> None:
    x = torch.randint(-100, 100, (13, 21)).to(dtype)
    seg = torch.randint(0, 3, (13, 21)).sort(0)[0].sort(1)[0].to(dtype)
    space = list(int_segment_scans.configs(x, seg, backend=backend))
    for cfg in space[:: max(1, len(space) // 3)]:
        bm, bn = (min(b, s) for b, s in zip(cfg.block_sizes, x.shape))
        got = int_segment_scans.run_cpu(backend, (x, seg), cfg)
        xw, sw = x.float(), seg.float()
        want0 = torch.stack([torch.cat([_segment_ref(xw[i:i + bm, j], sw[i:i + bm, j], True)
                                        for i in range(0, 13, bm)]) for j in range(21)], 1)
        want1 = torch.stack([torch.cat([_segment_ref(xw[i, j:j + bn], sw[i, j:j + bn], False)
                                        for j in range(0, 21, bn)]) for i in range(13)])
        for g, w in zip(got, (want0, want1)):  # int8 sums wrap as they would step by step
            want = w.to(torch.int32).to(dtype) if not dtype.is_floating_point else w.to(dtype)
            assert torch.equal(g, want), (cfg, g, want)


@kd.kernel
def mod_combine(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = kd.associative_scan(lambda a, b: (a + b) % 1000, x[t], 0)
    return out


def test_nki_refuses_combine_ops_without_a_slice_form() -> None:
    x = torch.arange(16, dtype=I32) * 300
    with kd.backend("triton"):
        assert torch.equal(mod_combine(x), x.cumsum(0).remainder(1000).to(I32))
    with kd.backend("nki"), pytest.raises(kd.BackendError, match="(?s)`mod` in a scan's combine.*NKI"):
        mod_combine(x)


@kd.kernel
def product_combine(x: torch.Tensor) -> torch.Tensor:
    """Several ops, one value: a + b + ab is associative ((1 + a)(1 + b) - 1)."""
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = kd.associative_scan(lambda a, b: a + b + a * b, x[tm, :], 1, reverse=True)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_value_general_combine(backend: str) -> None:
    x = 0.1 * torch.randn(9, 29)
    with kd.backend(backend):
        got = product_combine(x)
    torch.testing.assert_close(got, (1 + x).flip(1).cumprod(1).flip(1) - 1, atol=1e-5, rtol=1e-5)


@kd.kernel
def outer_value(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        r = x[tm, :]
        out[tm, :] = kd.associative_scan(lambda a, b: a + b * r.sum(), r, 1)
    return out


@kd.kernel
def float_xor(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = kd.associative_scan(lambda a, b: a ^ b, x[tm, :].float(), 1)
    return out


def test_unsupported_scans_say_why() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(KernelError, match="outside its arguments"):
        outer_value(x)
    with pytest.raises(kd.DTypeError, match="needs integer or bool"):
        float_xor(x.int())


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_scans() -> None:
    """Mosaic (libtpu 0.0.52, compile-only) on every target: pltpu.roll along lanes, sublanes
    and a leading dim, f32 and int32 (int8 and bf16 scan in 32 bits), reverse scans, 1-D tiles
    (scanned as one row: Mosaic rotates no 1-D vector)."""
    cases = ((torch_scans, (_values(torch.float32, 37, 13),)),
             (torch_scans, (_values(torch.int8, 64, 256),)),
             (torch_col_scans, (_values(torch.float32, 37, 300),)),
             (block_scans, (torch.randn(1000),)),
             (combines, (torch.randn(64, 256).bfloat16().float(),)),
             (segment_scans, (torch.randn(1024), torch.randn(1024))),
             (scans_3d, (torch.randint(0, 5, (4, 16, 128), dtype=I32),)))
    for k, args in cases:
        report = k.check(*args, targets=TPU_TARGETS, measure_vmem=False)
        assert all(e.status == "ok" for e in report.entries), report.table()


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_combine_ports() -> None:
    """The segment reduction's scan along a 2-D tile's first dim (sublanes), integer tuple
    combines with compares and where along both dims, and a several-op one-value combine."""
    idx = torch.randint(0, 10, (256,)).sort()[0].to(I32)
    cases = ((segment_reduction_scan, (idx, torch.randn(256, 128))),
             (int_segment_scans, (torch.randint(0, 9, (64, 256), dtype=I32),) * 2),
             (product_combine, (torch.randn(64, 256),)))
    for k, args in cases:
        report = k.check(*args, targets=TPU_TARGETS, measure_vmem=False)
        assert all(e.status == "ok" for e in report.entries), report.table()
