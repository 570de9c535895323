"""`kd.load` / `kd.store` with `extra_mask` (kernel_dsl/device_load.py): Helion's `hl.load` /
`hl.store`, with Helion's masked concatenation (examples/concatenate.py) written as a Helion user
writes it, checked against torch.cat at ragged sizes (incl. 1 and primes) on every backend that
lowers it, and a typed error on the others."""
from __future__ import annotations

import itertools

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import DTypeError, KernelSyntaxError, ShapeError, UnsupportedOpError
from kernel_dsl.testing import fuzz

BACKENDS = ("pallas", "triton", "nki")
# small blocks, so that tiles have ragged last blocks and straddle the x / y boundary
SMALL = {"pallas": kd.Config([8, 128]), "triton": kd.Config([4, 8]), "nki": None}
SIZES = [1, 5, 17]


@kd.kernel
def concat2d_dim1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Helion's examples/concatenate.py `concat2d_dim1`, `hl.` -> `kd.`."""
    assert x.size(0) == y.size(0)
    out = torch.empty(
        [x.size(0), x.size(1) + y.size(1)], dtype=x.dtype, device=x.device
    )
    for tile0, tile1 in kd.tile(out.size()):
        # Most masking is automatic in helion, but tile1 spans both x and y we need to do some manual masking
        x_part = kd.load(
            x, [tile0, tile1], extra_mask=(tile1.index < x.size(1))[None, :]
        )
        y_part = kd.load(
            y,
            [tile0, tile1.index - x.size(1)],
            extra_mask=(tile1.index >= x.size(1))[None, :],
        )
        out[tile0, tile1] = torch.where(
            (tile1.index < x.size(1))[None, :], x_part, y_part
        )
    return out


@kd.kernel
def concat2d_dim0(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The same pattern along dim 0: the gathers run along a leading axis (Pallas takes it)."""
    out = torch.empty([x.size(0) + y.size(0), x.size(1)], dtype=x.dtype)
    for tile0, tile1 in kd.tile(out.size()):
        top = (tile0.index < x.size(0))[:, None]
        x_part = kd.load(x, [tile0, tile1], extra_mask=top)
        y_part = kd.load(y, [tile0.index - x.size(0), tile1], extra_mask=~top)
        out[tile0, tile1] = torch.where(top, x_part, y_part)
    return out


@kd.kernel
def split_dim0(x: torch.Tensor, m1: int):
    """The inverse, with masked stores: rows [0, m1) to `a`, the rest to `b`."""
    m, n = x.shape
    a = torch.zeros([m1, n], dtype=x.dtype)
    b = torch.zeros([m - m1, n], dtype=x.dtype)
    for tile0, tile1 in kd.tile([m, n]):
        v = kd.load(x, [tile0, tile1])
        top = (tile0.index < m1)[:, None]
        kd.store(a, [tile0, tile1], v, extra_mask=top)
        kd.store(b, [tile0.index - m1, tile1], v, extra_mask=~top)
    return a, b


@kd.kernel
def plain(x: torch.Tensor):
    m, n = x.shape
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = kd.load(x, [tm, tn], eviction_policy="evict_first")
        out2[tm, tn] = x[tm, tn]
    return out, out2


@kd.kernel
def masked_in_range(x: torch.Tensor):
    """Masks on tiles that stay inside their axes: no gather (so NKI takes them too)."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = kd.load(x, [tm, tn], extra_mask=kd.load(x, [tm, tn]) > 0) + 1.0
    return out


@kd.kernel
def masked_store_zeros(x: torch.Tensor):
    m, n = x.shape
    out = torch.zeros([m, n], dtype=torch.float32)
    for tm, tn in kd.tile([m, n]):
        v = x[tm, tn]
        kd.store(out, [tm, tn], v * 2.0, extra_mask=v > 0)
    return out


@kd.kernel
def masked_store_full(x: torch.Tensor):
    m, n = x.shape
    out = torch.full([m, n], -7.0, dtype=torch.float32)
    for tm, tn in kd.tile([m, n]):
        kd.store(out, [tm, tn], x[tm, tn], extra_mask=(tn.index % 2 == 0)[None, :])
    return out


def _run(kernel, backend, args, small=False):
    if small:
        return kernel.run_cpu(backend, args, SMALL[backend])
    with kd.backend(backend):
        return kernel(*args)


# -- the masked concatenation ---------------------------------------------------------------------
@pytest.mark.parametrize("m,n1,n2", list(itertools.product([1, 7, 33], SIZES, SIZES)), ids=str)
def test_concat_masked_matches_torch_cat_on_triton(m: int, n1: int, n2: int) -> None:
    x, y = torch.randn(m, n1), torch.randn(m, n2)
    ref = torch.cat([x, y], dim=1)
    assert torch.equal(_run(concat2d_dim1, "triton", (x, y)), ref)
    assert torch.equal(_run(concat2d_dim1, "triton", (x, y), small=True)[0], ref)


@pytest.mark.parametrize("m,n1,n2", [(1, 1, 1), (7, 5, 17), (33, 17, 5)], ids=str)
def test_concat_masked_matches_torch_cat_on_nki(m: int, n1: int, n2: int) -> None:
    """NKI renders `tile1.index - N1` as the tile's block shifted by -N1 (lowering/nki/shifted.py)."""
    x, y = torch.randn(m, n1), torch.randn(m, n2)
    assert torch.equal(_run(concat2d_dim1, "nki", (x, y)), torch.cat([x, y], dim=1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("m,n1,n2", [(1, 1, 1), (7, 5, 17), (33, 17, 5), (17, 1, 130)], ids=str)
def test_concat_masked_dim1_on_pallas(m: int, n1: int, n2: int, dtype: torch.dtype) -> None:
    """`y[tile0, tile1.index - N1]` gathers along y's minor (lane) axis: Pallas renders a
    one-hot select per row (lowering/pallas/onehot.py), exact for inf, NaN and -0.0."""
    x, y = (torch.randn(m, n1) * 100).to(dtype), (torch.randn(m, n2) * 100).to(dtype)
    if dtype != torch.int32:
        x[0, 0], y[-1, -1], y[0, 0] = float("nan"), float("-inf"), -0.0
    ref = torch.cat([x, y], dim=1)
    for small in (False, True):
        got = _run(concat2d_dim1, "pallas", (x, y), small=small)
        got = got[0] if small else got
        assert torch.equal(got.nan_to_num(), ref.nan_to_num()), small
        assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.signbit(), ref.signbit())
    src = concat2d_dim1.source(x, y, backend="pallas")
    assert "gather along the minor (lane) axis: TPU has no lane gather" in src


@pytest.mark.slow  # the real TPU compiler, five targets: about 2 minutes
def test_concat_masked_dim1_compiles_for_every_tpu() -> None:
    """The minor-axis one-hot select (f32: one dynamic row per step; bf16: its aligned 16-row
    group, or the whole block when its rows are not whole groups) on libtpu's compilers."""
    for m, n1, n2 in ((97, 26, 38), (1500, 400, 600)):
        for dtype in (torch.float32, torch.bfloat16):
            x, y = torch.empty(m, n1, dtype=dtype), torch.empty(m, n2, dtype=dtype)
            rep = concat2d_dim1.check(x, y, targets=["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
                                                     "tpu-v7x"], measure_vmem=False)
            assert [e.status for e in rep.entries] == ["ok"] * 5, rep.table()


def test_concat_masked_dim1_every_pallas_config() -> None:
    x, y = torch.randn(37, 5), torch.randn(37, 130)
    cfgs = list(concat2d_dim1.configs(x, y, backend="pallas"))
    assert len(cfgs) >= 2
    for cfg in cfgs:
        assert torch.equal(concat2d_dim1.run_cpu("pallas", (x, y), cfg)[0], torch.cat([x, y], 1)), cfg


@pytest.mark.parametrize("m1,m2,n", [(1, 1, 1), (7, 5, 17), (5, 17, 1), (17, 1, 33), (33, 7, 5)],
                         ids=str)
@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_concat_masked_along_dim0(backend: str, m1: int, m2: int, n: int) -> None:
    x, y = torch.randn(m1, n), torch.randn(m2, n)
    ref = torch.cat([x, y], dim=0)
    assert torch.equal(_run(concat2d_dim0, backend, (x, y)), ref)
    assert torch.equal(_run(concat2d_dim0, backend, (x, y), small=True)[0], ref)


@pytest.mark.parametrize("m1,m2,n", [(1, 1, 1), (7, 5, 17), (17, 1, 33)], ids=str)
def test_concat_and_split_dim0_on_nki(m1: int, m2: int, n: int) -> None:
    x, y = torch.randn(m1, n), torch.randn(m2, n)
    assert torch.equal(_run(concat2d_dim0, "nki", (x, y)), torch.cat([x, y], dim=0))
    a, b = _run(split_dim0, "nki", (torch.cat([x, y], dim=0), m1))
    assert torch.equal(a, x) and torch.equal(b, y)


@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_masked_stores_past_the_axis_split(backend: str) -> None:
    x = torch.randn(12, 5)
    for m1 in (1, 7, 11):
        a, b = _run(split_dim0, backend, (x, m1))
        assert torch.equal(a, x[:m1]) and torch.equal(b, x[m1:])


# -- no mask, masks in range, masked stores ----------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_load_is_the_subscript(backend: str) -> None:
    x = torch.randn(7, 33)
    out, out2 = _run(plain, backend, (x,))
    assert torch.equal(out, x) and torch.equal(out2, x)
    loads = [op for op in plain.ir(x).body.walk() if op.kind == "load"]
    assert len(loads) == 2 and loads[0].attrs == loads[1].attrs  # the same IR op for both


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_lanes_read_zero(backend: str) -> None:
    x = torch.randn(9, 17)
    assert torch.equal(_run(masked_in_range, backend, (x,)), torch.where(x > 0, x, 0.0) + 1.0)


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (17, 33)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_store_keeps_what_the_output_held(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    assert torch.equal(_run(masked_store_zeros, backend, (x,)), torch.where(x > 0, x * 2, 0.0))
    even = (torch.arange(shape[1]) % 2 == 0)[None, :]
    assert torch.equal(_run(masked_store_full, backend, (x,)), torch.where(even, x, -7.0))
    if SMALL[backend] is not None:
        assert torch.equal(_run(masked_store_full, backend, (x,), small=True)[0],
                           torch.where(even, x, -7.0))


@kd.kernel
def flagged_rows(x: torch.Tensor, flags: torch.Tensor):
    """A masked store inside a device `if`: both predicates hold where it writes."""
    m, n = x.shape
    out = torch.full([m, n], 5.0, dtype=torch.float32)
    for g in kd.grid(m):
        for tn in kd.tile(n):
            if flags[g] > 0:
                kd.store(out, [g, tn], x[g, tn], extra_mask=tn.index % 3 == 0)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_store_inside_a_device_if(backend: str) -> None:
    x, flags = torch.randn(6, 10), torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.int32)
    keep = (flags > 0)[:, None] & (torch.arange(10) % 3 == 0)[None, :]
    assert torch.equal(_run(flagged_rows, backend, (x, flags)), torch.where(keep, x, 5.0))


@kd.kernel
def concat_f8(x: torch.Tensor, y: torch.Tensor):
    """float8 tiles are storage only: the masked lanes' zero is selected on their bits."""
    out = torch.empty([x.size(0) + y.size(0), x.size(1)], dtype=torch.float32)
    for tile0, tile1 in kd.tile(out.size()):
        top = (tile0.index < x.size(0))[:, None]
        xs = kd.load(x, [tile0, tile1], extra_mask=top).to(torch.float32)
        ys = kd.load(y, [tile0.index - x.size(0), tile1], extra_mask=~top).to(torch.float32)
        out[tile0, tile1] = xs + ys
    return out


@pytest.mark.parametrize("backend", ["pallas", "triton"])
def test_masked_float8_loads_read_zero(backend: str) -> None:
    x = torch.randn(5, 7).to(torch.float8_e5m2)
    y = torch.randn(3, 7).to(torch.float8_e5m2)
    assert torch.equal(_run(concat_f8, backend, (x, y)), torch.cat([x, y]).float())


# -- errors ---------------------------------------------------------------------------------------
def _kernel(body):
    @kd.kernel
    def k(x: torch.Tensor):
        m, n = x.shape
        out = torch.empty([m, n + 3], dtype=torch.float32)
        for tm, tn in kd.tile([m, n + 3]):
            body(x, out, tm, tn)
        return out
    return k


@pytest.mark.parametrize("body,error,match,hint", [
    (lambda x, o, tm, tn: kd.load(x, [tm, tn], extra_mask=tn.index[None, :]),
     DTypeError, "not bool", "bool tile"),
    (lambda x, o, tm, tn: kd.load(x, [tm, tn], extra_mask=True),
     KernelSyntaxError, "takes a bool tile", "bool tile"),
    (lambda x, o, tm, tn: kd.load(x, [tm, tn], extra_mask=(tm.index < 1)[None, :]),
     ShapeError, "does not broadcast", "[None, :]"),
    (lambda x, o, tm, tn: kd.load(x, [tm, tn, 0], extra_mask=(tn.index < 1)[None, :]),
     ShapeError, "3 indices", None),
    (lambda x, o, tm, tn: kd.load(x, tm),
     KernelSyntaxError, "as a list", "kd.load(x, [tm, tn])"),
    (lambda x, o, tm, tn: kd.load(x, [tm, tn]),  # no mask: the subscript's own error
     ShapeError, "indexes axis 1", "kd.tile"),
    (lambda x, o, tm, tn: kd.load(x, [tm.index, tn], extra_mask=(tn.index < 1)[None, :]),
     UnsupportedOpError, "more than one", "tile the other axes"),
    (lambda x, o, tm, tn: kd.store(o, [tm, tn], 1.0, extra_mask=tn.index[None, :] + 1.5),
     DTypeError, "not bool", "bool tile"),
    (lambda x, o, tm, tn: kd.store(o, [tm, tn], 1.0, extra_mask=(tm.index < 1)[None, :]),
     ShapeError, "does not broadcast", "[None, :]"),
    (lambda x, o, tm, tn: kd.store(x, [tm, tn], 1.0, extra_mask=(tn.index < 1)[None, :]),
     kd.ArgumentError, "writes into its argument", "allocate an output"),
], ids=["load-int-mask", "load-python-mask", "load-mask-shape", "load-index-count",
        "load-index-not-list", "load-no-mask-out-of-axis", "load-two-gathers",
        "store-float-mask", "store-mask-shape", "store-into-argument"])
def test_errors_name_the_users_line_with_a_hint(body, error, match, hint) -> None:
    with pytest.raises(error, match=match) as e:
        _kernel(body)(torch.randn(4, 5))
    assert isinstance(e.value, kd.KernelError)
    assert "test_load_store.py" in str(e.value)
    if hint is not None:
        assert hint in e.value.hint


def test_load_outside_a_loop_is_device_code() -> None:
    @kd.kernel
    def host(x: torch.Tensor):
        v = kd.load(x, [0])
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = v
        return out

    with pytest.raises(KernelSyntaxError, match="device code"):
        host(torch.randn(4))


# -- fuzz -----------------------------------------------------------------------------------------
def test_fuzz_concat_masked_dim1() -> None:
    result = fuzz(concat2d_dim1, lambda x, y: torch.cat([x, y], dim=1), "x[m,n1], y[m,n2]",
                  dims={"m": (1, 40), "n1": (1, 140), "n2": (1, 140)}, dtypes=("f32", "bf16"),
                  backends=("pallas", "triton"), configs=2, max_examples=6)
    assert result.examples >= 6 and result.failures == 0


def test_fuzz_concat_masked_dim0() -> None:
    result = fuzz(concat2d_dim0, lambda x, y: torch.cat([x, y], dim=0), "x[m1,n], y[m2,n]",
                  dims={"m1": (1, 40), "m2": (1, 40), "n": (1, 140)}, dtypes=("f32", "bf16"),
                  backends=("pallas", "triton"), configs=2, max_examples=6)
    assert result.examples >= 6 and result.failures == 0
