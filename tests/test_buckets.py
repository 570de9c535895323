"""Shape buckets: a new size inside a bucket builds nothing new, and the answers do not change.

The suite runs with buckets off (conftest.py); each test here turns the default policy on.
"""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import bucket_plan, buckets
from kernel_dsl import kernels as lib
from kernel_dsl.kernels import KERNELS


@pytest.fixture(autouse=True)
def _pow2():  # type: ignore[no-untyped-def]
    with kd.shape_buckets("pow2"):
        yield


def _library_compiles() -> int:
    return sum(k.stats["compiles"] for k in KERNELS.values())


# -- the policy --------------------------------------------------------------------------------
def test_policies() -> None:
    assert [buckets.bucket(n) for n in (1, 16, 17, 100, 128, 129)] == [16, 16, 32, 128, 128, 256]
    with kd.shape_buckets([64, 256]):
        assert [buckets.bucket(n) for n in (1, 64, 65, 256, 300)] == [64, 64, 256, 256, 300]
    with kd.shape_buckets(lambda n: -(-n // 10) * 10):
        assert buckets.bucket(31) == 40
    with kd.shape_buckets("off"):
        assert buckets.bucket(31) == 31 and not buckets.enabled()
    with kd.shape_buckets(lambda n: n - 1), pytest.raises(ValueError, match=">= n"):
        buckets.bucket(5)
    for bad in ("pow3", [0, 8], [], 3.5):
        with pytest.raises(ValueError, match="shape buckets"):
            kd.shape_buckets(bad)


def test_env_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_SHAPE_BUCKETS", "128,32")
    assert buckets._from_env() == (32, 128)
    monkeypatch.setenv("KD_SHAPE_BUCKETS", "eight")
    with pytest.raises(ValueError, match="KD_SHAPE_BUCKETS"):
        buckets._from_env()


# -- library ops ---------------------------------------------------------------------------------
def _block(s: int, causal: object, hkv: int = 2) -> list[torch.Tensor]:
    """Attention, norms, matmul with bias and activation, softmax: outputs and every gradient."""
    g = torch.Generator().manual_seed(s)
    q = torch.randn(1, 4, s, 16, generator=g, requires_grad=True)
    k = torch.randn(1, hkv, s + 2, 16, generator=g, requires_grad=True)
    v = torch.randn(1, hkv, s + 2, 16, generator=g, requires_grad=True)
    x = torch.randn(s, 24, generator=g, requires_grad=True)
    w = torch.randn(24, 20, generator=g, requires_grad=True)
    b = torch.randn(20, generator=g, requires_grad=True)
    nw = torch.randn(24, generator=g, requires_grad=True)
    o = lib.flash_attention(q, k, v, causal=causal)
    y = lib.matmul(lib.rms_norm(x, nw, 1e-6), w, bias=b, activation="gelu")
    z = lib.softmax(y, 1) + lib.layer_norm(y, None, None)
    (o.square().sum() + (z * torch.randn(z.shape, generator=g)).sum()).backward()
    return [o, z] + [t.grad for t in (q, k, v, x, w, b, nw)]


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_library_ops_same_answers_and_no_new_builds(causal: object) -> None:
    _block(9, causal)  # builds the kernels of bucket 16 (queries, keys and rows: all <= 16)
    for s in (1, 12, 14):
        before = _library_compiles()
        got = _block(s, causal)
        assert _library_compiles() == before, f"length {s} built a kernel inside its bucket"
        with kd.shape_buckets("off"):
            want = _block(s, causal)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


def test_attention_rows_past_the_keys_and_gqa() -> None:
    """Top-left causal with more queries than keys: padded keys must stay invisible."""
    q = torch.randn(2, 6, 11, 8, requires_grad=True)
    k = torch.randn(2, 3, 5, 8, requires_grad=True)
    v = torch.randn(2, 3, 5, 8, requires_grad=True)
    for causal in (True, "bottom_right", False):
        out = lib.flash_attention(q, k, v, causal=causal)
        with kd.shape_buckets("off"):
            ref = lib.flash_attention(q, k, v, causal=causal)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        assert out.is_contiguous() and list(out.shape) == [2, 6, 11, 8]


def test_library_under_torch_compile_dynamic() -> None:
    x0 = torch.randn(40, 24)
    w = torch.randn(24, 20)
    nw = torch.randn(24)

    def f(x: torch.Tensor) -> torch.Tensor:
        return lib.matmul(lib.rms_norm(x, nw, 1e-6), w, activation="silu")

    cf = torch.compile(f, backend="aot_eager", dynamic=True, fullgraph=True)
    cf(x0)
    for m in (33, 47, 64):  # bucket 64, as 40
        x = torch.randn(m, 24)
        before = _library_compiles()
        got = cf(x)
        assert _library_compiles() == before, f"{m} rows built a kernel inside its bucket"
        with kd.shape_buckets("off"):
            torch.testing.assert_close(got, f(x), atol=1e-5, rtol=1e-5)


# -- user kernels ----------------------------------------------------------------------------------
@kd.tpu_kernel
def add_rows(x: torch.Tensor, y: torch.Tensor):
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = torch.sigmoid(x[tm, tn]) + y[tm, tn]
    return out


@kd.tpu_kernel
def mm(x: torch.Tensor, w: torch.Tensor):
    m, k = x.shape
    out = torch.empty([m, w.shape[1]], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, w.shape[1]]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ w[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


@kd.tpu_kernel
def row_stats(x: torch.Tensor):
    """Sums over a loop dim (padding adds zeros) and a max over it (padding would change it)."""
    m, n = x.shape
    s = torch.empty([m], dtype=torch.float32, device=x.device)
    mx = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        big = kd.full([tm], float("-inf"), dtype=torch.float32)
        for tn in kd.tile(n):
            v = x[tm, tn].to(torch.float32)
            acc += (v * v).sum(-1)
            big = torch.maximum(big, v.amax(-1))
        s[tm] = acc
        mx[tm] = big
    return s, mx


@kd.tpu_kernel
def col_mean(x: torch.Tensor):
    """Divides by the row count: padding rows would change the answer."""
    m, n = x.shape
    out = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        acc = kd.zeros([tn], dtype=torch.float32)
        for tm in kd.tile(m):
            acc += x[tm, tn].to(torch.float32).sum(0)
        out[tn] = acc / m
    return out


@kd.tpu_kernel
def scale_by_rows(x: torch.Tensor):
    """A parallel dim whose size the body reads as a number: not paddable."""
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = x[tm, tn] * (1.0 / x.shape[0])
    return out


@kd.tpu_kernel
def block_centered(x: torch.Tensor):
    """The mean of each block: a reduction over the grid dim, divided by its in-range lanes."""
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] - x[t].mean()
    return out


def test_what_the_ir_proves() -> None:
    x = torch.randn(20, 12)
    assert sorted(bucket_plan.safe_tiles(add_rows.ir(x, x))) == ["tm", "tn"]
    assert sorted(bucket_plan.safe_tiles(mm.ir(x, x.T.contiguous()))) == ["tk", "tm", "tn"]
    assert sorted(bucket_plan.safe_tiles(row_stats.ir(x))) == ["tm"]  # not tn: the max
    assert sorted(bucket_plan.safe_tiles(col_mean.ir(x))) == ["tm", "tn"]  # tm: caught later
    assert sorted(bucket_plan.safe_tiles(scale_by_rows.ir(x))) == ["tm", "tn"]
    assert bucket_plan.safe_tiles(block_centered.ir(x[:, 0].contiguous())) == {}


def _compiles(k: kd.Kernel) -> int:
    return k.stats["compiles"]


@pytest.mark.parametrize("kernel, make", [
    (add_rows, lambda m: (torch.randn(m, 33), torch.randn(m, 33))),
    (mm, lambda m: (torch.randn(m, 40), torch.randn(40, 24))),
    (mm, lambda m: (torch.randn(20, m), torch.randn(m, 24))),  # the contraction dim changes
    (row_stats, lambda m: (torch.randn(m, 9),)),
])
def test_user_kernels_pad_dims_that_change(kernel: kd.Kernel, make) -> None:  # type: ignore[no-untyped-def]
    kernel(*make(18))
    kernel(*make(19))  # a second size: the dim is dynamic, bucket 32 is built
    before = _compiles(kernel)
    for m in (17, 23, 31, 32):
        args = make(m)
        got = kernel(*args)
        assert _compiles(kernel) == before, f"size {m} built a kernel"
        with kd.shape_buckets("off"):
            want = kernel(*args)
        before = _compiles(kernel)
        as_list = lambda t: list(t) if isinstance(t, tuple) else [t]  # noqa: E731
        for a, b in zip(as_list(got), as_list(want)):
            assert a.shape == b.shape and a.is_contiguous()
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", [col_mean, scale_by_rows, block_centered])
def test_unsafe_kernels_build_exactly(kernel: kd.Kernel) -> None:
    shape = (lambda m: (m,)) if kernel is block_centered else (lambda m: (m, 6))
    for m in (18, 19, 21):
        x = torch.randn(*shape(m))
        before = _compiles(kernel)
        got = kernel(x)
        assert _compiles(kernel) == before + 1  # its own build at the exact size
        with kd.shape_buckets("off"):
            torch.testing.assert_close(got, kernel(x))


def test_static_shapes_and_mark_dynamic() -> None:
    @kd.tpu_kernel(static_shapes=True)
    def exact(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * 2.0
        return out

    @kd.tpu_kernel
    def marked(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * 2.0
        return out

    for m in (17, 18, 19):
        exact(torch.randn(m))
    assert _compiles(exact) == 3
    x = torch.randn(17)
    torch._dynamo.mark_dynamic(x, 0)
    marked(x)  # dynamic from its first call: bucket 32 at once
    marked(torch.randn(30))
    assert _compiles(marked) == 1
    with pytest.raises(kd.ConfigError, match="static_shapes"):
        kd.tpu_kernel(static_shapes="yes")(lambda x: x)


def test_user_kernel_under_torch_compile_dynamic() -> None:
    @kd.tpu_kernel
    def twice(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * 2.0
        return out

    cf = torch.compile(lambda x: twice(x) + 1.0, backend="aot_eager", dynamic=True, fullgraph=True)
    for m in (17, 20, 25, 32):
        torch.testing.assert_close(cf(torch.arange(m, dtype=torch.float32)),
                                   torch.arange(m, dtype=torch.float32) * 2 + 1)
    assert _compiles(twice) == 1  # the fake saw a symbolic size: bucketed from the first run


def test_autotuned_exact_shape_wins(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))

    @kd.tpu_kernel
    def tuned(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] + 1.0
        return out

    tuned(torch.randn(18))
    x = torch.randn(19)
    tuned.autotune(x, budget=10)
    key = tuned.arg_key((x,))
    tuned(x)
    assert tuned._plans[key + (buckets.policy(),)] is None  # ran at its tuned, exact size


# -- kernels padding must not change (a review found each of these wrong once) ------------------
@kd.tpu_kernel
def running_max_of_block_sums(x: torch.Tensor):
    """Padding adds whole iterations of zero blocks: a carried max would see their zero sums."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        big = kd.full([tm], float("-inf"), dtype=torch.float32)
        for tk in kd.tile(k, block_size=4):
            big = torch.maximum(big, x[tm, tk].sum(-1))
        out[tm] = big
    return out


@kd.tpu_kernel
def mean_of_block_sums(x: torch.Tensor):
    """A carried counter counts the padded iterations too."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        n = kd.zeros([tm], dtype=torch.float32)
        for tk in kd.tile(k, block_size=4):
            acc = acc + x[tm, tk].sum(-1)
            n = n + 1.0
        out[tm] = acc / n
    return out


@kd.tpu_kernel
def plus_block_size(x: torch.Tensor):
    """A one-block tile's size is its extent, which padding changes."""
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] + t.size.to(torch.float32)
    return out


@kd.tpu_kernel
def scaled_by_n(x: torch.Tensor, n: int):
    """The tile's extent is a scalar argument: the padded trace cannot be built."""
    out = torch.empty_like(x)
    for t in kd.tile(n):
        out[t] = x[t] * 2.0
    return out


@kd.tpu_kernel
def column_sums_of_products(x: torch.Tensor, w: torch.Tensor):
    """The loop dim is a row of the product, not its contraction: 0 * inf in padded rows."""
    k, d = x.shape
    out = torch.empty([1, w.shape[1]], dtype=torch.float32, device=x.device)
    for tn in kd.tile(w.shape[1]):
        acc = kd.zeros([1, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc = acc + (x[tk, :] @ w[:, tn]).sum(0, keepdim=True)
        out[:, tn] = acc
    return out


@pytest.mark.parametrize("kernel, make", [
    (running_max_of_block_sums, lambda m: (-torch.rand(3, m) - 1,)),
    (mean_of_block_sums, lambda m: (-torch.rand(3, m) - 1,)),
    (plus_block_size, lambda m: (torch.zeros(m),)),
    (scaled_by_n, lambda m: (torch.randn(m), m)),
    (column_sums_of_products, lambda m: (torch.rand(m, 5) + 0.1,
                                         torch.tensor([[float("inf"), 1.0, 2.0]] * 5))),
])
def test_padding_changes_no_answer(kernel: kd.Kernel, make) -> None:  # type: ignore[no-untyped-def]
    kernel(*make(10))  # a first size: the next one makes the dim dynamic
    for m in (11, 12, 13):
        args = make(m)
        got = kernel(*args)
        with kd.shape_buckets("off"):
            torch.testing.assert_close(got, kernel(*args))
