"""Broadcasts and dtype conversions in host code (issue 14 item 6; Helion's add.py and
gather_gemv.py): `torch.broadcast_tensors`, `expand`, `.to(dtype)` and friends on kernel
arguments run around the kernel, on every backend and through the custom op and torch.compile."""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from host_helpers import BACKENDS, check_op, run, same_layout

import kernel_dsl as kd
from kernel_dsl.errors import KernelError, KernelSyntaxError


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
            got = run(add, backend, x, y)
            want = x + y
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            same_layout(got, want)


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
        torch.testing.assert_close(run(bias_rows, backend, x, b, s), x * s + b)


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
            got = run(converted, backend, x, torch.zeros(1, dtype=dst))
            want = x.to(dst) * 2  # the host conversion rounds as torch does
            assert got.dtype == dst, (src, dst)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            same_layout(got, want)


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
            got = run(many_conversions, backend, x, y)
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
        out, outf = run(int_conversions, backend, x, ids)
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
    got = run(narrow_ids, backend, ids)
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
            got = run(batched_gemv, backend, w, x)
            torch.testing.assert_close(got, w.to(x.dtype) @ x, rtol=1e-5, atol=1e-5)
            same_layout(got, torch.empty(B, S))
    ir = batched_gemv.ir(torch.randn(3, 7, 7).bfloat16(), torch.randn(7))
    assert [(p.name, p.shape, p.dtype) for p in ir.inputs] == [("w_view", (21, 7), "f32"),
                                                               ("x2", (7, 1), "f32")]
    if backend == "triton":  # the literal example: a gather by `tile.index / S` (Triton only)
        B, S, N = 3, 7, 5
        w, x = torch.randn(B, S, S).bfloat16(), torch.randn(S)
        idx = torch.randint(0, B, (N,), dtype=torch.int32)
        torch.testing.assert_close(run(gather_gemv, backend, w, idx, x),
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
        assert "test_host_conversions.py" in str(e.value) and line in str(e.value), str(e.value)
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
    check_op(*NEW_OP_CASES[case])


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
