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
from host_helpers import BACKENDS, check_op, run, same_layout

import kernel_dsl as kd
from kernel_dsl.errors import KernelError, KernelSyntaxError

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
        got = run(flat_add, backend, x, y)
        want = x * 2.0 + y.flatten().view_as(x) - x
        torch.testing.assert_close(got, want)
        same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposes(backend: str) -> None:
    for m, n in SIZES:
        x = torch.randn(m, n)
        got = run(rows_t, backend, x)
        torch.testing.assert_close(got, 15.0 * x.T, rtol=1e-5, atol=1e-5)
        same_layout(got, torch.empty(n, m))


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_unsqueeze_contiguous(backend: str) -> None:
    for m, n in SIZES:
        x, b = torch.randn(m, n), torch.randn(n)
        torch.testing.assert_close(run(bias_expand, backend, x, b), x + b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_3d(backend: str) -> None:
    for shape in [(1, 1, 1), (2, 3, 5), (3, 7, 130), (1, 13, 8)]:
        x = torch.randn(shape)
        got = run(last_dim_sum, backend, x)
        want = 2.0 * x.sum(-1)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeeze_movedim_swapaxes(backend: str) -> None:
    for a, b in [(1, 1), (3, 5), (17, 9)]:
        x = torch.randn(a, 1, b)
        torch.testing.assert_close(run(squeeze_movedim, backend, x), 0.5 * x.squeeze(1).T)


def test_non_contiguous_arguments() -> None:
    """Strided and transposed arguments: the kernel sees them contiguous, views apply to that
    (so `x.view(-1)` of a transposed argument is `x.contiguous().view(-1)`)."""
    base = torch.randn(12, 20)
    x, y = base[::2, 1:15:2], torch.randn(7, 6).T  # [6, 7] each, neither contiguous
    for backend in BACKENDS:
        got = run(flat_add, backend, x, y)
        torch.testing.assert_close(got, x * 2.0 + y.flatten().view_as(x) - x)
        same_layout(got, torch.empty(6, 7))
        torch.testing.assert_close(run(rows_t, backend, y), 15.0 * y.T, rtol=1e-5, atol=1e-5)


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
            got = run(copy_flat, backend, x)
            assert got.dtype == dt and torch.equal(got, x), (dt, backend)
    x = torch.randn(7, 9).to(torch.bfloat16)
    for backend in BACKENDS:
        assert torch.equal(run(bits, backend, x), x.view(torch.int16))


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
        got = run(mm_wt, backend, x, w)
        want = (x @ w.T).T
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        same_layout(got, torch.empty(m, n).T)
        x = torch.randn(m, n)
        a, r = run(two_outputs, backend, x)
        torch.testing.assert_close(a, (x * 3.0).reshape(-1))
        torch.testing.assert_close(r, x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)
        same_layout(a, torch.empty(m * n))
        same_layout(r, torch.zeros(m).unsqueeze(1))
        flat, t = run(write_through, backend, x)
        torch.testing.assert_close(flat, (x + 1.0).reshape(-1))
        torch.testing.assert_close(t, (x + 1.0).T)
        same_layout(t, torch.empty(m * n).view(m, n).T)
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
        got = run(low_mem_dropout, backend, 0.25, x, 3)
        want = _ref_dropout(0.25, x, 3)
        torch.testing.assert_close(got, want)
        same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_swiglu(backend: str) -> None:
    for shape in [(1, 1), (5, 7, 3), (13, 130)]:
        a, b = torch.randn(shape), torch.randn(shape)
        got = run(swiglu_fwd, backend, a, b)
        want = torch.nn.functional.silu(a) * b
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        same_layout(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helion_rms_norm_3d(backend: str) -> None:
    for shape in [(1, 1, 8), (2, 7, 33), (3, 5, 128)]:
        x, w = torch.randn(shape), torch.randn(shape[-1])
        out, inv = run(rms_norm_fwd, backend, x, w, 1e-5)
        want_out, want_inv = _ref_rms(x, w, 1e-5)
        torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(inv, want_inv, rtol=1e-5, atol=1e-5)
        same_layout(out, want_out)
        same_layout(inv, want_inv)


# -- the custom op, torch.compile, opcheck -----------------------------------------------------------

OP_CASES: list[tuple[Any, Callable[[], tuple[Any, ...]]]] = [
    (flat_add, lambda: (torch.randn(5, 7), torch.randn(7, 5))),
    (mm_wt, lambda: (torch.randn(13, 37), torch.randn(11, 37))),
    (two_outputs, lambda: (torch.randn(6, 9),)),
    (write_through, lambda: (torch.randn(6, 9),)),
    (rms_norm_fwd, lambda: (torch.randn(2, 7, 33), torch.randn(33), 1e-5)),
    (swiglu_fwd, lambda: (torch.randn(5, 7, 3), torch.randn(5, 7, 3))),
]


@pytest.mark.parametrize("case", range(len(OP_CASES)))
def test_custom_op_fake_matches_and_opcheck(case: int) -> None:
    """The op's fake gives the outputs' shapes and strides the real run gives, and opcheck
    (schema, fake, aot dispatch) passes; also for transposed (non-contiguous) arguments."""
    check_op(*OP_CASES[case])


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
    same_layout(got, torch.empty(13, 11).T)


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
    got = run(shifted_logits, backend, x)
    torch.testing.assert_close(got, want)
    same_layout(got, torch.empty(v.shape)[:, -2:, :])


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
