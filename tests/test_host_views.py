"""Host-side views and layout ops on kernel arguments and outputs (issue 14 item 6): `x.view(-1)`,
`x.reshape(-1, k)`, `w.T`, `return out.view_as(x)`, writes through `out.view(-1)`. The IR sees
ordinary input params of the viewed shapes; the call applies the same torch ops around the
kernel, on every backend and through the custom op, torch.compile and opcheck."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import kernel_dsl as kd
from kernel_dsl.errors import KernelError, KernelSyntaxError

BACKENDS = ("pallas", "triton", "nki")


def _run(kernel: Any, backend: str, *args: Any) -> Any:
    with kd.backend(backend):
        return kernel(*args)


def _same_layout(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype, (
        got.shape, got.stride(), want.shape, want.stride())


# -- views of inputs, one kernel per view op -----------------------------------------------------

@kd.kernel
def flat_add(x: torch.Tensor, y: torch.Tensor):
    """x.view(-1), y.flatten(), views of views (x.view(-1).view(...)), several views of one input."""
    xf = x.view(-1)
    yf = y.flatten()
    x2 = xf.view(x.numel(), 1).reshape(-1)  # a view of a view of the same input
    out = torch.empty_like(xf)
    for t in kd.tile(xf.shape[0]):
        out[t] = xf[t] * 2.0 + yf[t] - x2[t]
    return out.view_as(x)


@kd.kernel
def rows_t(x: torch.Tensor):
    """`x.T`, `x.transpose(0, 1)`, `x.permute(1, 0)`, `x.mT`, `x.t()` all index as [n, m]."""
    a, b, c, d, e = x.T, x.transpose(0, 1), x.permute(1, 0), x.mT, x.t()
    n, m = a.shape
    out = torch.empty([n, m], dtype=torch.float32)
    for tn, tm in kd.tile([n, m]):
        out[tn, tm] = a[tn, tm] + 2.0 * b[tn, tm] + 3.0 * c[tn, tm] + 4.0 * d[tn, tm] + 5.0 * e[tn, tm]
    return out


@kd.kernel
def bias_expand(x: torch.Tensor, b: torch.Tensor):
    """`b.unsqueeze(0).expand(m, n)` (a broadcast, materialized) and `x.contiguous()`."""
    m, n = x.shape
    bb = b.unsqueeze(0).expand(m, n)
    xc = x.contiguous()
    out = torch.empty([m, n], dtype=torch.float32)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = xc[tm, tn] + bb[tm, tn]
    return out


@kd.kernel
def last_dim_sum(x: torch.Tensor):
    """`x.reshape(-1, k)` of a 3-D input, returned as `out.view(b, s)`; `torch.reshape` too."""
    b, s, k = x.shape
    x2 = x.reshape(-1, k)
    x3 = torch.reshape(x, (b * s, k))
    m = x2.shape[0]
    out = torch.empty([m], dtype=torch.float32)
    for tm in kd.tile(m):
        out[tm] = (x2[tm, :] + x3[tm, :]).sum(-1)
    return out.view(b, s)


@kd.kernel
def squeeze_movedim(x: torch.Tensor):
    """`x.squeeze(1)` of [a, 1, b], then `movedim` and `swapaxes` of the view."""
    y = x.squeeze(1)
    z = y.movedim(0, 1)
    w = y.swapaxes(0, 1)
    n, m = z.shape
    out = torch.empty([n, m], dtype=torch.float32)
    for tn, tm in kd.tile([n, m]):
        out[tn, tm] = z[tn, tm] - w[tn, tm] * 0.5
    return out


SIZES = [(1, 1), (1, 7), (13, 1), (5, 7), (31, 37), (64, 130)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_flatten_views_of_views(backend: str) -> None:
    for m, n in SIZES:
        x, y = torch.randn(m, n), torch.randn(n, m)
        got = _run(flat_add, backend, x, y)
        want = x * 2.0 + y.flatten().view_as(x) - x
        torch.testing.assert_close(got, want)
        _same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposes(backend: str) -> None:
    for m, n in SIZES:
        x = torch.randn(m, n)
        got = _run(rows_t, backend, x)
        torch.testing.assert_close(got, 15.0 * x.T, rtol=1e-5, atol=1e-5)
        _same_layout(got, torch.empty(n, m))


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_unsqueeze_contiguous(backend: str) -> None:
    for m, n in SIZES:
        x, b = torch.randn(m, n), torch.randn(n)
        torch.testing.assert_close(_run(bias_expand, backend, x, b), x + b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_3d(backend: str) -> None:
    for shape in [(1, 1, 1), (2, 3, 5), (3, 7, 130), (1, 13, 8)]:
        x = torch.randn(shape)
        got = _run(last_dim_sum, backend, x)
        want = 2.0 * x.sum(-1)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        _same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeeze_movedim_swapaxes(backend: str) -> None:
    for a, b in [(1, 1), (3, 5), (17, 9)]:
        x = torch.randn(a, 1, b)
        torch.testing.assert_close(_run(squeeze_movedim, backend, x), 0.5 * x.squeeze(1).T)


def test_non_contiguous_arguments() -> None:
    """Strided and transposed arguments: the kernel sees them contiguous, views apply to that
    (so `x.view(-1)` of a transposed argument is `x.contiguous().view(-1)`)."""
    base = torch.randn(12, 20)
    x, y = base[::2, 1:15:2], torch.randn(7, 6).T  # [6, 7] each, neither contiguous
    for backend in BACKENDS:
        got = _run(flat_add, backend, x, y)
        torch.testing.assert_close(got, x * 2.0 + y.flatten().view_as(x) - x)
        _same_layout(got, torch.empty(6, 7))
        torch.testing.assert_close(_run(rows_t, backend, y), 15.0 * y.T, rtol=1e-5, atol=1e-5)


def test_dtypes_and_bit_views() -> None:
    """Every dtype through a flatten, and `x.view(torch.int16)` of bf16 data (a host bitcast)."""
    @kd.kernel
    def copy_flat(x: torch.Tensor):
        xf = x.reshape(-1)
        out = torch.empty_like(xf)
        for t in kd.tile(xf.shape[0]):
            out[t] = xf[t]
        return out.view_as(x)

    @kd.kernel
    def bits(x: torch.Tensor):
        xi = x.view(torch.int16)
        out = torch.empty(xi.shape, dtype=torch.int16)
        for tm, tn in kd.tile(list(xi.shape)):
            out[tm, tn] = xi[tm, tn]
        return out

    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16, torch.int8,
               torch.uint8, torch.bool):
        x = (torch.randn(5, 3) * 50).to(dt)
        for backend in BACKENDS:
            got = _run(copy_flat, backend, x)
            assert got.dtype == dt and torch.equal(got, x), (dt, backend)
    x = torch.randn(7, 9).to(torch.bfloat16)
    for backend in BACKENDS:
        assert torch.equal(_run(bits, backend, x), x.view(torch.int16))


def test_ir_sees_the_viewed_shapes() -> None:
    """The IR gets ordinary input params of the view's shape, named by the user's variable; an
    argument read only through views is not passed to the kernel."""
    ir = flat_add.ir(torch.randn(5, 7), torch.randn(7, 5))
    assert [(p.name, p.shape) for p in ir.inputs] == [("xf", (35,)), ("yf", (35,)), ("x2", (35,))]
    assert ir.outputs[0].shape == (35,) and ir.host is not None
    ir = rows_t.ir(torch.randn(5, 7))
    assert {p.shape for p in ir.inputs} == {(7, 5)} and len(ir.inputs) == 5
    assert bias_expand.ir(torch.randn(3, 4), torch.randn(4)).inputs[0].name == "x"  # read directly


# -- views of outputs --------------------------------------------------------------------------------

@kd.kernel
def mm_wt(x: torch.Tensor, w: torch.Tensor):
    """x @ w.T with `w.T` a host view as the matmul operand; returns the result transposed."""
    wt = w.T
    m, k = x.shape
    n = wt.shape[1]
    out = torch.empty([m, n], dtype=torch.float32)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc = acc + x[tm, tk] @ wt[tk, tn]
        out[tm, tn] = acc
    return out.T


@kd.kernel
def two_outputs(x: torch.Tensor):
    """Two returned views: `out.view(m * n)` and `rows.unsqueeze(1)`; a zeros output."""
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.float32)
    rows = torch.zeros([m], dtype=torch.float32)
    for tm in kd.tile(m):
        v = x[tm, :]
        out[tm, :] = v * 3.0
        rows[tm] = v.sum(-1)
    return out.view(m * n), rows.unsqueeze(1)


@kd.kernel
def write_through(x: torch.Tensor):
    """Writes a [m, n] view of a flat output; returns the flat allocation and the view's `.T`."""
    m, n = x.shape
    out = torch.empty(m * n)
    o2 = out.view(m, n)
    for tm, tn in kd.tile([m, n]):
        o2[tm, tn] = x[tm, tn] + 1.0
    return out, o2.T


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_views(backend: str) -> None:
    for m, n in SIZES:
        x, w = torch.randn(m, 37), torch.randn(n, 37)
        got = _run(mm_wt, backend, x, w)
        want = (x @ w.T).T
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        _same_layout(got, torch.empty(m, n).T)
        x = torch.randn(m, n)
        a, r = _run(two_outputs, backend, x)
        torch.testing.assert_close(a, (x * 3.0).reshape(-1))
        torch.testing.assert_close(r, x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)
        _same_layout(a, torch.empty(m * n))
        _same_layout(r, torch.zeros(m).unsqueeze(1))
        flat, t = _run(write_through, backend, x)
        torch.testing.assert_close(flat, (x + 1.0).reshape(-1))
        torch.testing.assert_close(t, (x + 1.0).T)
        _same_layout(t, torch.empty(m * n).view(m, n).T)
        # two views of one buffer come back as separate tensors: a custom op's outputs never alias
        assert t.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr()


# -- errors --------------------------------------------------------------------------------------------

def test_errors_name_the_line() -> None:
    @kd.kernel
    def view_in_loop(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x.view(-1)[t]
        return out

    @kd.kernel
    def write_transposed(x: torch.Tensor):
        m, n = x.shape
        out = torch.empty([n, m])
        ot = out.T
        for tm, tn in kd.tile([m, n]):
            ot[tm, tn] = x[tm, tn]
        return out

    @kd.kernel
    def two_shapes(x: torch.Tensor):
        m, n = x.shape
        out = torch.empty(m * n)
        o2 = out.view(m, n)
        for tm in kd.tile(m):
            o2[tm, :] = x[tm, :]
            out[tm] = 0.0
        return out

    @kd.kernel
    def returns_input_view(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t]
        return x.view(-1)

    @kd.kernel
    def host_math(x: torch.Tensor):
        y = x + 1.0
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = y[t]
        return out

    x = torch.randn(4, 6)
    cases = [(view_in_loop, "inside a `kd.tile` loop", "out[t] = x.view(-1)[t]"),
             (write_transposed, "not a plain reshape", "ot[tm, tn] = x[tm, tn]"),
             (two_shapes, "written through a view of shape", "out[tm] = 0.0"),
             (returns_input_view, "must return the tensors its host code allocated", None),
             (host_math, "computes on tensor data in host code", "y = x + 1.0")]
    for kernel, msg, line in cases:
        with pytest.raises(KernelError) as e:
            kernel.ir(x)
        assert msg in str(e.value), str(e.value)
        assert e.value.hint
        if line is not None:
            assert "test_host_views.py" in str(e.value) and line in str(e.value), str(e.value)
    assert isinstance(e.value, KernelSyntaxError)


def test_jax_route_says_no() -> None:
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from kernel_dsl.errors import BackendError
    from kernel_dsl.lowering.pallas.jax_entry import JaxKernel

    with pytest.raises(BackendError, match="JAX/TorchTPU route"):
        JaxKernel(flat_add, interpret=True)(jnp.ones((3, 4)), jnp.ones((4, 3)))


# -- Helion examples, ported literally -------------------------------------------------------------

@kd.kernel
def low_mem_dropout(p: float, x: torch.Tensor, seed: int) -> torch.Tensor:
    """Helion's examples/low_mem_dropout.py, with `hl.rand` replaced by plain arithmetic (a keep
    mask from the element's own value): the `x.view(-1)` / `empty_like` / `view_as` shape."""
    scale = 1.0 / (1.0 - p)
    # flatten to 1D so we can use tile
    n = x.numel()
    x_flat = x.view(-1)
    out_flat = torch.empty_like(x_flat)
    for tidx in kd.tile(n):
        xi = x_flat[tidx].to(torch.float32)
        r = torch.sigmoid(xi * float(seed))  # stands in for hl.rand([tidx], seed=seed)
        keep = r > p
        yscaled = xi * scale
        yi = torch.where(keep, yscaled, 0.0)
        out_flat[tidx] = yi.to(x.dtype)
    return out_flat.view_as(x)


@kd.kernel
def swiglu_fwd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Helion's examples/swiglu.py `_swiglu_fwd`: writes through `out.view(-1)`, returns `out`."""
    assert a.shape == b.shape, f"Input tensors must have same shape, got {a.shape} != {b.shape}"
    out = torch.empty_like(a, dtype=torch.promote_types(a.dtype, b.dtype))
    total_elements = a.numel()
    a_flat = a.view(-1)
    b_flat = b.view(-1)
    out_flat = out.view(-1)
    for tile_idx in kd.tile(total_elements):
        a_vals = a_flat[tile_idx].to(torch.float32)
        b_vals = b_flat[tile_idx]
        sigmoid_a = torch.sigmoid(a_vals)
        silu_a = a_vals * sigmoid_a
        result = silu_a.to(b_vals.dtype) * b_vals
        out_flat[tile_idx] = result
    return out


@kd.kernel
def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5):
    """Helion's examples/rms_norm.py `rms_norm_fwd` over a 3-D input (its wrapper's
    `x.reshape(-1, x.size(-1))` moved into the host code): returns `inv_rms.reshape(-1, 1)`."""
    x = x.reshape(-1, x.size(-1))
    m, n = x.size()
    assert weight.size(0) == n, f"weight size mismatch {weight.size(0)} != {n}"
    out = torch.empty_like(x)
    inv_rms = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in kd.tile(m):
        x_tile = x[tile_m, :].to(torch.float32)
        x_squared = x_tile * x_tile
        mean_x_squared = torch.mean(x_squared, dim=-1)
        inv_rms_tile = torch.rsqrt(mean_x_squared + eps)
        normalized = x_tile * inv_rms_tile[:, None]
        out[tile_m, :] = (normalized * weight[:].to(torch.float32)).to(out.dtype)
        inv_rms[tile_m] = inv_rms_tile
    return out, inv_rms.reshape(-1, 1)


def _ref_dropout(p: float, x: torch.Tensor, seed: int) -> torch.Tensor:
    xi = x.float()
    return torch.where(torch.sigmoid(xi * float(seed)) > p, xi / (1.0 - p), 0.0).to(x.dtype)


def _ref_rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x2 = x.reshape(-1, x.shape[-1]).float()
    inv = torch.rsqrt((x2 * x2).mean(-1) + eps)
    return (x2 * inv[:, None] * w.float()).to(x.dtype), inv.reshape(-1, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_low_mem_dropout(backend: str) -> None:
    for shape in [(1,), (3, 5, 7), (64, 33)]:
        x = torch.randn(shape)
        got = _run(low_mem_dropout, backend, 0.25, x, 3)
        want = _ref_dropout(0.25, x, 3)
        torch.testing.assert_close(got, want)
        _same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_swiglu(backend: str) -> None:
    for shape in [(1, 1), (5, 7, 3), (13, 130)]:
        a, b = torch.randn(shape), torch.randn(shape)
        got = _run(swiglu_fwd, backend, a, b)
        want = torch.nn.functional.silu(a) * b
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        _same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_rms_norm_3d(backend: str) -> None:
    for shape in [(1, 1, 8), (2, 7, 33), (3, 5, 128)]:
        x, w = torch.randn(shape), torch.randn(shape[-1])
        out, inv = _run(rms_norm_fwd, backend, x, w, 1e-5)
        want_out, want_inv = _ref_rms(x, w, 1e-5)
        torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(inv, want_inv, rtol=1e-5, atol=1e-5)
        _same_layout(out, want_out)
        _same_layout(inv, want_inv)


# -- the custom op, torch.compile, opcheck -----------------------------------------------------------

@pytest.fixture
def dynamo_reset() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


OP_CASES: list[tuple[Any, Callable[[], tuple[Any, ...]]]] = [
    (flat_add, lambda: (torch.randn(5, 7), torch.randn(7, 5))),
    (mm_wt, lambda: (torch.randn(13, 37), torch.randn(11, 37))),
    (two_outputs, lambda: (torch.randn(6, 9),)),
    (write_through, lambda: (torch.randn(6, 9),)),
    (rms_norm_fwd, lambda: (torch.randn(2, 7, 33), torch.randn(33), 1e-5)),
    (swiglu_fwd, lambda: (torch.randn(5, 7, 3), torch.randn(5, 7, 3))),
]


def _check_op(kernel: Any, make: Callable[[], tuple[Any, ...]]) -> None:
    """The op's fake gives the outputs' shapes and strides the real run gives, opcheck passes,
    and column-major arguments give the same results."""
    args = make()
    op = kernel._ops.op
    real = op(*args)
    eager = kernel(*args)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    for r, e, f in zip(real, eager, fake):
        torch.testing.assert_close(r, e)
        _same_layout(r, e)
        assert f.shape == r.shape and f.stride() == r.stride() and f.dtype == r.dtype
    result = torch.library.opcheck(op, args)
    assert all(v == "SUCCESS" for v in result.values()), result
    strided = tuple(a.T.contiguous().T if isinstance(a, torch.Tensor) and a.dim() == 2 else a
                    for a in args)  # same values, column-major layout
    for r, s in zip(real, op(*strided)):
        torch.testing.assert_close(r, s)
        _same_layout(r, s)


@pytest.mark.parametrize("case", range(len(OP_CASES)))
def test_custom_op_fake_matches_and_opcheck(case: int) -> None:
    """The op's fake gives the outputs' shapes and strides the real run gives, and opcheck
    (schema, fake, aot dispatch) passes; also for transposed (non-contiguous) arguments."""
    _check_op(*OP_CASES[case])


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamo_reset: None, dynamic: bool) -> None:
    """Kernels with host views between torch ops in one fullgraph compiled graph (static and
    symbolic sizes: the fake runs the views on SymInt shapes)."""
    def fn(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        h = mm_wt(x * 2.0, w)  # [n, m], transposed strides
        out, inv = rms_norm_fwd(h.unsqueeze(0), torch.ones(h.shape[-1]), 1e-5)
        return swiglu_fwd(out, a) + inv.sum()

    def ref(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        h = ((x * 2.0) @ w.T).T
        out, inv = _ref_rms(h.unsqueeze(0), torch.ones(h.shape[-1]), 1e-5)
        return torch.nn.functional.silu(out) * a + inv.sum()

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=counter)
    for m, n in [(13, 5), (8, 16), (21, 9)]:
        args = (torch.randn(m, 37), torch.randn(n, 37), torch.randn(n, m))
        got = compiled(*args)
        torch.testing.assert_close(got, fn(*args), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, ref(*args), rtol=1e-4, atol=1e-4)
    assert counter.frame_count >= 1


def test_vmap_with_output_views() -> None:
    """torch.vmap over kernels with host views runs them per element (a view moves the batch
    dim, so the batch does not join the grid), with torch's results."""
    @kd.kernel
    def twice_t(x: torch.Tensor):
        m, n = x.shape
        out = torch.empty([m, n], dtype=torch.float32)
        for tm in kd.tile(m):
            out[tm, :] = x[tm, :] * 2.0
        return out.T

    x, y = torch.randn(3, 5, 7), torch.randn(3, 7, 5)
    with pytest.warns(UserWarning, match="once per batch element"):
        got = torch.vmap(twice_t)(x)
    torch.testing.assert_close(got, 2.0 * x.transpose(1, 2))
    with pytest.warns(UserWarning, match="once per batch element"):
        got = torch.vmap(flat_add)(x, y)
    torch.testing.assert_close(got, x * 2.0 + y.reshape(3, 5, 7) - x)


def test_triton_cuda_op_body_applies_the_views() -> None:
    """The Triton `triton_op` (the CUDA route), run through Triton's interpreter on CPU."""
    from kernel_dsl.lowering.triton.cuda import make_cuda_op

    op = make_cuda_op(mm_wt._ops, interpret=True, name="mm_wt_host_views_interp")
    x, w = torch.randn(13, 37), torch.randn(11, 37)
    (got,) = op(x, w)
    torch.testing.assert_close(got, (x @ w.T).T, rtol=1e-4, atol=1e-4)
    _same_layout(got, torch.empty(13, 11).T)


# -- the real TPU compiler ----------------------------------------------------------------------------

def test_pallas_view_inputs_compile_for_tpu() -> None:
    x, w = torch.randn(256, 384), torch.randn(128, 384)
    rep = mm_wt.check(x, w, targets=["tpu-v5e"])
    assert [e.status for e in rep.entries] == ["ok"], (rep, mm_wt.source(x, w, backend="pallas"))
    x3 = torch.randn(4, 16, 256)
    rep = rms_norm_fwd.check(x3, torch.randn(256), 1e-5, targets=["tpu-v5e"])
    assert [e.status for e in rep.entries] == ["ok"], rep


# -- host slices: `x[:, :-1]` (Helion's grpo_loss) -------------------------------------------------

@kd.kernel
def shifted_logits(logits: torch.Tensor):
    """grpo_loss's `logits = logits[:, :-1, :]`, an int index and a negative start in host code."""
    logits = logits[:, :-1, :]
    first = logits[0]
    B, L, V = logits.shape
    out = torch.empty([B, L, V], dtype=torch.float32)
    for tb, tl, tv in kd.tile([B, L, V]):
        out[tb, tl, tv] = logits[tb, tl, tv] * 2 + first[tl, tv]
    return out[:, -2:, :]


@pytest.mark.parametrize("shape", [(1, 2, 1), (3, 7, 33)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_host_slices_are_views(backend: str, shape: tuple[int, int, int]) -> None:
    x = torch.randn(*shape)
    v = x[:, :-1, :]
    want = (v * 2 + v[0])[:, -2:, :]
    got = _run(shifted_logits, backend, x)
    torch.testing.assert_close(got, want)
    _same_layout(got, torch.empty(v.shape)[:, -2:, :])


def test_a_write_through_a_host_slice_of_an_output_is_refused() -> None:
    @kd.kernel
    def half(x: torch.Tensor):
        out = torch.zeros([x.shape[0] * 2], dtype=x.dtype)
        o = out[: x.shape[0]]
        for t in kd.tile(x.shape[0]):
            o[t] = x[t]
        return out

    with pytest.raises(KernelSyntaxError, match="not a plain reshape"):
        half(torch.randn(5))


# -- broadcasts and dtype conversions in host code (Helion's add.py, gather_gemv.py) ------------------

@kd.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Helion's examples/add.py, literally: `torch.broadcast_tensors` of the arguments, an output
    of `torch.promote_types` dtype, one multi-dim tile over `out.size()`."""
    # match pytorch broadcasting rules
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(
        x.shape,
        # match type promotion of torch.add
        dtype=torch.promote_types(x.dtype, y.dtype),
        device=x.device,
    )
    # tile will be a tuple of blocks
    for tile in kd.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


ADD_SIZES = [(1, 7), (7, 33), (33, 1), (33, 7)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_add_broadcasts(backend: str) -> None:
    bf = torch.bfloat16
    for m, n in ADD_SIZES:
        cases = [(torch.randn(m, 1), torch.randn(1, n)),  # both broadcast
                 (torch.randn(n), torch.randn(m, n)),  # a rank change: x gets a leading axis
                 (torch.randn(m, 1).to(bf), torch.randn(n)),  # bf16 + f32: f32 (promote_types)
                 (torch.randn(m, n), torch.randn(1, n).to(bf)),
                 (torch.randn(m, 1).to(bf), torch.randn(1, n).to(bf))]  # bf16 out
        for x, y in cases:
            got = _run(add, backend, x, y)
            want = x + y
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            _same_layout(got, want)


def test_broadcast_inputs_in_the_ir() -> None:
    """Each broadcast result is an input of the broadcast shape named after the user's variable
    (`x2`: the argument keeps `x`); a tensor already of that shape is the argument itself."""
    ir = add.ir(torch.randn(7, 1), torch.randn(1, 5))
    assert [(p.name, p.shape) for p in ir.inputs] == [("x2", (7, 5)), ("y2", (7, 5))]
    assert ir.host is not None and ir.host.keep == ()  # the arguments themselves are not passed
    ir = add.ir(torch.randn(7, 5), torch.randn(5))
    assert [(p.name, p.shape) for p in ir.inputs] == [("x", (7, 5)), ("y2", (7, 5))]
    assert ir.host.keep == (0,) and len(ir.host.inputs) == 1  # x is read directly


@kd.kernel
def bias_rows(x: torch.Tensor, b: torch.Tensor, s: torch.Tensor):
    """`torch.broadcast_to(b, x.shape)` and `s.broadcast_to(...)` (a [1] scale to [m, n])."""
    bb = torch.broadcast_to(b, x.shape)
    ss = s.broadcast_to([x.shape[0], x.shape[1]])
    out = torch.empty_like(x)
    for tm, tn in kd.tile(list(x.shape)):
        out[tm, tn] = x[tm, tn] * ss[tm, tn] + bb[tm, tn]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_to(backend: str) -> None:
    for m, n in ADD_SIZES:
        x, b, s = torch.randn(m, n), torch.randn(n), torch.randn(1)
        torch.testing.assert_close(_run(bias_rows, backend, x, b, s), x * s + b)


@kd.kernel
def converted(x: torch.Tensor, like: torch.Tensor):
    """`x.to(like.dtype)` in host code: the kernel reads the converted tensor."""
    xc = x.to(like.dtype)
    out = torch.empty_like(xc)
    for t in kd.tile(xc.size()):
        out[t] = xc[t] * 2
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_dtype_conversions(backend: str) -> None:
    for src, dst in [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                     (torch.int32, torch.float32), (torch.float32, torch.float16),
                     (torch.float32, torch.int32), (torch.float32, torch.float32)]:
        for shape in [(1,), (7, 33), (33, 7)]:
            x = (torch.randn(shape) * 100).to(src)
            got = _run(converted, backend, x, torch.zeros(1, dtype=dst))
            want = x.to(dst) * 2  # the host conversion rounds as torch does
            assert got.dtype == dst, (src, dst)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            _same_layout(got, want)


@kd.kernel
def many_conversions(x: torch.Tensor, y: torch.Tensor):
    """The shorthands and forms of `.to`: each is the torch conversion of the argument."""
    a = x.float()
    b = x.half()
    c = x.bfloat16()
    d = x.type_as(y)
    e = x.to(y)  # y's dtype and device
    f = x.to(dtype=torch.bfloat16, copy=True)
    g = x.to(x.device, torch.float16, non_blocking=True)
    h = x.to(x.device)  # keeps the dtype and the device: `x` itself
    i = x.to(torch.float32).view(-1).to(torch.bfloat16).view(x.shape)  # chains with views
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.float32)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = (a[tm, tn] + b[tm, tn] + c[tm, tn] + d[tm, tn] + e[tm, tn] + f[tm, tn]
                       + g[tm, tn] + h[tm, tn] + i[tm, tn])
    return out


def _many_conversions_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    parts = [x.float(), x.half(), x.bfloat16(), x.type_as(y), x.to(y), x.bfloat16(), x.half(), x,
             x.float().bfloat16()]
    return sum(p.float() for p in parts)


@pytest.mark.parametrize("backend", BACKENDS)
def test_conversion_forms(backend: str) -> None:
    for m, n in [(1, 1), (7, 33)]:
        for dt in (torch.float32, torch.bfloat16):
            x, y = torch.randn(m, n).to(dt), torch.zeros(1, dtype=torch.float16)
            got = _run(many_conversions, backend, x, y)
            torch.testing.assert_close(got, _many_conversions_ref(x, y), rtol=1e-5, atol=1e-5)
    ir = many_conversions.ir(torch.randn(3, 4), torch.zeros(1, dtype=torch.float16))
    dts = {p.name: p.dtype for p in ir.inputs}
    assert dts["x"] == "f32" and dts["b"] == "f16" and dts["c"] == "bf16" and "a" not in dts
    assert dts["i"] == "bf16"


@kd.kernel
def int_conversions(x: torch.Tensor, ids: torch.Tensor):
    """`ids.long()` (int64: narrowed as an int64 argument is), `x.to(torch.promote_types(...))`,
    `x.int()` (truncates on host, as torch does)."""
    wide = ids.long()
    xp = x.to(torch.promote_types(x.dtype, torch.float32))
    xi = x.int()
    n = x.shape[0]
    out = torch.empty([n], dtype=torch.int64)
    outf = torch.empty([n], dtype=xp.dtype)
    for t in kd.tile(n):
        out[t] = wide[t] * 2 + xi[t]
        outf[t] = xp[t] + 1.0
    return out, outf


@pytest.mark.parametrize("backend", BACKENDS)
def test_conversions_and_int64(backend: str) -> None:
    for n in (1, 7, 33):
        x = (torch.randn(n) * 50).to(torch.bfloat16)
        ids = torch.randint(-1000, 1000, (n,), dtype=torch.int32)
        out, outf = _run(int_conversions, backend, x, ids)
        assert out.dtype == torch.int64 and outf.dtype == torch.float32
        assert torch.equal(out, ids.long() * 2 + x.int())
        torch.testing.assert_close(outf, x.float() + 1.0, rtol=0, atol=0)
    ir = int_conversions.ir(x, ids)
    assert next(p for p in ir.inputs if p.name == "wide").host_dtype == "i64"


@kd.kernel
def narrow_ids(ids: torch.Tensor):
    """`.to(torch.int32)` of an int64 argument runs on host (wrapping, as torch's does); a plain
    view of it (`ids.view(-1)`) is narrowed exactly, on every backend."""
    i32 = ids.to(torch.int32)
    flat = ids.view(-1)
    n = flat.shape[0]
    out = torch.empty([n], dtype=torch.int32)
    for t in kd.tile(n):
        out[t] = i32[t] + flat[t]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_conversion_and_view(backend: str) -> None:
    ids = torch.randint(-2**20, 2**20, (13,))
    got = _run(narrow_ids, backend, ids)
    assert torch.equal(got, ids.int() * 2)
    ir = narrow_ids.ir(ids)
    assert [(p.name, p.dtype, p.host_dtype) for p in ir.inputs] == [("i32", "i32", None),
                                                                     ("flat", "i32", "i64")]


@kd.kernel
def gather_gemv(w: torch.Tensor, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Helion's examples/gather_gemv.py (the tritonbench form), literally."""
    B, S1, S2 = w.size()
    N = idx.size(0)
    S = x.size(0)
    assert S1 == S2
    assert S == S1

    w_view = w.contiguous().view(B * S, S).to(x.dtype)  # [B*S, S]
    x = x.view(S, 1)  # [S, 1]
    out = torch.empty([N * S, 1], dtype=x.dtype, device=x.device)

    for tile_n_s in kd.tile(N * S):
        acc = kd.zeros([tile_n_s, 1], dtype=torch.float32)
        n_idx = tile_n_s.index
        which_idx = (n_idx / S).to(torch.int32)
        idx_gather = idx[which_idx]  # [tile_n_s]
        row_offset = idx_gather * S + (n_idx % S)  # [tile_n_s]
        for tile_k in kd.tile(S):
            gathered = w_view[row_offset, tile_k]  # [tile_n_s, tile_k]
            x_val = x[tile_k, :]  # [tile_k, 1]
            acc += (gathered.to(torch.float32) * x_val.to(torch.float32).T).sum(dim=1, keepdim=True)
        out[tile_n_s, :] = acc.to(x.dtype)

    return out.contiguous().view(N, S)


@kd.kernel
def batched_gemv(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """gather_gemv's host code without the gather (NKI has none): every matrix of w times x."""
    B, S1, S2 = w.size()
    S = x.size(0)
    w_view = w.contiguous().view(B * S, S).to(x.dtype)  # [B*S, S]
    x = x.view(S, 1)  # [S, 1]
    out = torch.empty([B * S, 1], dtype=x.dtype, device=x.device)
    for tile_n_s in kd.tile(B * S):
        acc = kd.zeros([tile_n_s, 1], dtype=torch.float32)
        for tile_k in kd.tile(S):
            gathered = w_view[tile_n_s, tile_k]
            x_val = x[tile_k, :]
            acc += (gathered.to(torch.float32) * x_val.to(torch.float32).T).sum(dim=1, keepdim=True)
        out[tile_n_s, :] = acc.to(x.dtype)
    return out.contiguous().view(B, S)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_gemv_host_code(backend: str) -> None:
    for B, S in [(1, 1), (3, 7), (2, 33)]:
        for wdt in (torch.bfloat16, torch.float32):
            w, x = torch.randn(B, S, S).to(wdt), torch.randn(S)
            got = _run(batched_gemv, backend, w, x)
            torch.testing.assert_close(got, w.to(x.dtype) @ x, rtol=1e-5, atol=1e-5)
            _same_layout(got, torch.empty(B, S))
    ir = batched_gemv.ir(torch.randn(3, 7, 7).bfloat16(), torch.randn(7))
    assert [(p.name, p.shape, p.dtype) for p in ir.inputs] == [("w_view", (21, 7), "f32"),
                                                               ("x2", (7, 1), "f32")]
    if backend == "triton":  # the literal example: a gather by `tile.index / S` (Triton only)
        B, S, N = 3, 7, 5
        w, x = torch.randn(B, S, S).bfloat16(), torch.randn(S)
        idx = torch.randint(0, B, (N,), dtype=torch.int32)
        torch.testing.assert_close(_run(gather_gemv, backend, w, idx, x),
                                   w[idx].to(x.dtype) @ x, rtol=1e-5, atol=1e-5)


def test_conversion_and_broadcast_errors_name_the_line() -> None:
    @kd.kernel
    def to_output(x: torch.Tensor):  # before the grid loop: the kernel writes the allocation
        out = torch.empty_like(x)
        o = out.to(torch.bfloat16)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t]
        return o

    @kd.kernel
    def half_output(x: torch.Tensor):
        out = torch.empty_like(x)
        o = out.view(-1).half()
        for t in kd.tile(x.shape[0]):
            o[t] = x[t]
        return out

    @kd.kernel
    def to_device(x: torch.Tensor):
        xc = x.to("cpu")
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = xc[t]
        return out

    @kd.kernel
    def to_device_kw(x: torch.Tensor):
        xc = x.to(device="cuda", dtype=torch.float16)
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = xc[t]
        return out

    @kd.kernel
    def convert_in_loop(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x.to(torch.float16)[t]
        return out

    @kd.kernel
    def bad_broadcast(x: torch.Tensor, y: torch.Tensor):
        x, y = torch.broadcast_tensors(x, y)
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] + y[t]
        return out

    @kd.kernel
    def f64(x: torch.Tensor):
        xd = x.double()
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = xd[t]
        return out

    x = torch.randn(6)
    cases = [(to_output, "converts output `out` to torch.bfloat16", "o = out.to(torch.bfloat16)"),
             (half_output, "converts output `out` to torch.float16", "o = out.view(-1).half()"),
             (to_device, "moves a kernel argument or output to device 'cpu'", 'xc = x.to("cpu")'),
             (to_device_kw, "to device 'cuda'", 'xc = x.to(device="cuda"'),
             (convert_in_loop, "inside a `kd.tile` loop", "out[t] = x.to(torch.float16)[t]"),
             (bad_broadcast, "do not broadcast", "x, y = torch.broadcast_tensors(x, y)"),
             (f64, "has dtype torch.float64", "out[t] = xd[t]")]
    for kernel, msg, line in cases:
        with pytest.raises(KernelError) as e:
            kernel.ir(*([x, torch.randn(4)] if kernel is bad_broadcast else [x]))
        assert msg in str(e.value), str(e.value)
        assert e.value.hint
        assert "test_host_views.py" in str(e.value) and line in str(e.value), str(e.value)
    with pytest.raises(KernelSyntaxError, match="converts output") as e:
        to_output.ir(x)
    assert "dtype=torch.bfloat16" in e.value.hint


NEW_OP_CASES: list[tuple[Any, Callable[[], tuple[Any, ...]]]] = [
    (add, lambda: (torch.randn(7, 1), torch.randn(1, 33))),
    (add, lambda: (torch.randn(33).bfloat16(), torch.randn(7, 33))),
    (converted, lambda: (torch.randn(7, 33), torch.zeros(1, dtype=torch.bfloat16))),
    (int_conversions, lambda: (torch.randn(7).bfloat16(), torch.arange(7, dtype=torch.int32))),
    (batched_gemv, lambda: (torch.randn(3, 7, 7).bfloat16(), torch.randn(7))),
]


@pytest.mark.parametrize("case", range(len(NEW_OP_CASES)))
def test_custom_op_with_broadcasts_and_conversions(case: int) -> None:
    """As test_custom_op_fake_matches_and_opcheck: the fake matches the run, opcheck passes."""
    _check_op(*NEW_OP_CASES[case])


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_broadcasts_and_conversions(dynamo_reset: None, dynamic: bool) -> None:
    def fn(x: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = add(x * 2.0, b.bfloat16())  # [m, n] f32
        g = batched_gemv(w, h[0, : w.shape[-1]])  # bf16 w converted to f32 in host code
        return converted(h, torch.zeros(1, dtype=torch.bfloat16)).float().sum() + g.sum()

    def ref(x: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x * 2.0 + b.bfloat16()
        g = w.float() @ h[0, : w.shape[-1]]
        return (h.bfloat16() * 2).float().sum() + g.sum()

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=counter)
    for m, n in [(7, 33), (8, 16), (13, 9)]:
        args = (torch.randn(m, 1), torch.randn(n), torch.randn(2, 5, 5).bfloat16())
        got = compiled(*args)
        torch.testing.assert_close(got, fn(*args), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got, ref(*args), rtol=1e-3, atol=1e-2)
    assert counter.frame_count >= 1


# -- host code after the kernel on its outputs (Helion's cross_entropy, kl_div) --------------------

@kd.kernel
def mean_row_sums(x: torch.Tensor):
    """cross_entropy's `return losses.mean()`."""
    n, v = x.shape
    losses = torch.zeros([n], dtype=x.dtype, device=x.device)
    for tn in kd.tile(n):
        losses[tn] = x[tn, :].sum(-1)
    return losses.mean()


@kd.kernel
def batchmean(x: torch.Tensor):
    """kl_div's `torch.sum(loss) / BT`, next to a view of the same output times 2."""
    n, v = x.shape
    loss = torch.zeros([n], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        loss[tn] = x[tn, :].float().sum(-1)
    return torch.sum(loss) / n, loss.view(1, n) * 2


@pytest.mark.parametrize("shape", [(1, 1), (7, 33)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_host_code_after_the_kernel_runs_on_its_outputs(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    torch.testing.assert_close(_run(mean_row_sums, backend, x), x.sum(-1).mean())
    a, b = _run(batchmean, backend, x)
    torch.testing.assert_close(a, x.sum(-1).sum() / shape[0])
    torch.testing.assert_close(b, x.sum(-1).view(1, -1) * 2)


def test_an_epilogue_through_the_op_and_torch_compile(dynamo_reset: Any) -> None:
    x = torch.randn(9, 20)
    op = batchmean._ops.op
    result = torch.library.opcheck(op, (x,))
    assert all(v == "SUCCESS" for v in result.values()), result
    f = torch.compile(lambda t: mean_row_sums(t) * 3, fullgraph=True)
    torch.testing.assert_close(f(x), x.sum(-1).mean() * 3)


@pytest.mark.parametrize("body, words", [
    ("x.add_(1)\n    return out", "writes into a kernel argument"),
    ("return out.sum().item()", r"`\.item\(\)` reads tensor values"),
    ("return out if out.sum() > 0 else out2", "`if`/`and`/`or`/`bool\\(\\)` on a tensor"),
], ids=["in-place-argument", "item", "if"])
def test_epilogues_that_read_data_or_write_arguments_are_refused(tmp_path: Any, body: str,
                                                                 words: str) -> None:
    """Host code after the kernel (kernel_dsl/host_epilogue.py) is traced once, without data."""
    import importlib.util

    src = (
        "import torch\nimport kernel_dsl as kd\n\n@kd.kernel\ndef k(x: torch.Tensor):\n"
        "    out = torch.empty_like(x)\n    out2 = torch.empty_like(x)\n"
        "    for t in kd.tile(x.shape[0]):\n        out[t] = x[t]\n        out2[t] = x[t]\n"
        f"    {body}\n")
    path = tmp_path / "epi_mod.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("epi_mod", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    with pytest.raises(KernelSyntaxError, match=words) as e:
        mod.k(torch.randn(5))
    assert "epi_mod.py:11:" in str(e.value) and e.value.hint, str(e.value)  # the user's line
