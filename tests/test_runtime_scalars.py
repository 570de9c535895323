"""Float arguments are runtime scalars: a new value neither traces nor compiles the kernel again,
on every run path; `kd.specialize` makes one a compile-time constant; lists of ints are
constants (kernel_dsl/runtime_scalars.py, kernel_dsl/arguments.py)."""
from __future__ import annotations

import inspect

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ArgumentError, ControlFlowError, KernelSyntaxError
from kernel_dsl.lowering.triton.cuda import make_cuda_op

BACKENDS = ("pallas", "triton", "nki")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _kernel_axpb():  # type: ignore[no-untyped-def]
    """A fresh kernel (own caches and counters): x * s + 1 / s, with host-side arithmetic."""
    @kd.kernel
    def axpb(x: torch.Tensor, s: float) -> torch.Tensor:
        out = torch.empty_like(x)
        inv = 1.0 / s  # host code: deferred, computed in device code
        for t in kd.tile(x.shape):
            out[t] = x[t] * s + inv
        return out
    return axpb


def _ref(x: torch.Tensor, s: float) -> torch.Tensor:
    return (x.double() * s + 1.0 / s).to(x.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_value_neither_traces_nor_compiles(backend: str) -> None:
    k = _kernel_axpb()
    x = torch.randn(37, 20)
    with kd.backend(backend):
        for s in (0.5, -1.25, 3.0, 0.5):
            torch.testing.assert_close(k(x, s), _ref(x, s))
    assert k.stats["traces"] == 1 and k.stats["compiles"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_input_with_a_float_scale_stays_bf16(backend: str) -> None:
    k = _kernel_axpb()
    x = torch.randn(19, 33).bfloat16()
    with kd.backend(backend):
        for s in (0.3, 1.7):
            y = k(x, s)
            assert y.dtype == torch.bfloat16
            # as with a Python float constant, the scalar is rounded to bf16 (device_ops `const`)
            sb = float(torch.tensor(s).bfloat16())
            want = (x * sb + torch.tensor(1.0 / s).bfloat16()).float()
            torch.testing.assert_close(y.float(), want, atol=2e-2, rtol=2e-2)
    # torch's weak-scalar promotion: `x_bf16 * s` is a bf16 product, not an f32 one
    muls = [op for op in k.ir(x, 0.3).body.walk() if op.kind == "mul"]
    assert muls and all(op.result.dtype == "bf16" for op in muls)


def test_the_float_is_a_hidden_f32_input() -> None:
    k = _kernel_axpb()
    ir = k.ir(torch.randn(8, 8), 2.0)
    hidden = [p for p in ir.inputs if p.name == "s"]
    assert len(hidden) == 1 and hidden[0].shape == (1, 1) and hidden[0].dtype == "f32"
    assert hidden[0].arg_index == 1
    assert k.arg_key((torch.randn(8, 8), 2.0)) == k.arg_key((torch.randn(8, 8), 9.0))


@kd.kernel
def two_scalars(x: torch.Tensor, a: float, b: float) -> torch.Tensor:
    out = torch.empty_like(x)
    ab = -(a * b) + abs(b) ** 2  # deferred arithmetic of two runtime scalars
    for t in kd.tile(x.shape):
        v = x[t]
        lo = torch.where(v > a, v, a)  # torch functions: the scalar promotes weakly
        out[t] = torch.maximum(lo, -b) + ab + torch.clamp(v, min=a) * 0.0
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_expressions_and_torch_functions(backend: str) -> None:
    x = torch.randn(64)
    before = two_scalars.stats["traces"]
    with kd.backend(backend):
        for a, b in ((0.25, 2.0), (-0.5, 0.75)):
            want = torch.maximum(torch.where(x > a, x, torch.tensor(a)), torch.tensor(-b)) \
                + (-(a * b) + abs(b) ** 2)
            torch.testing.assert_close(two_scalars(x, a, b), want)
    assert two_scalars.stats["traces"] <= before + 1
    xb = x.bfloat16()
    ir = two_scalars.ir(xb, 0.25, 2.0)
    assert {op.result.dtype for op in ir.body.walk() if op.kind in ("where", "max")} == {"bf16"}


def test_python_control_flow_on_a_float_names_the_line_and_kd_specialize() -> None:
    @kd.kernel
    def branchy(x: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        if eps > 0:  # host code: Python needs the value (in device code it is a device `if`)
            out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] + eps
        return out

    line = inspect.getsourcelines(branchy.fn)[1] + 3  # the `if eps > 0:` line
    with pytest.raises(ControlFlowError) as e:
        branchy(torch.randn(8), 0.1)
    assert e.value.loc is not None and e.value.loc.line == line
    assert e.value.loc.file == __file__
    assert "kd.specialize(eps)" in str(e.value)


def test_float_and_math_functions_are_refused_with_the_same_hint() -> None:
    @kd.kernel
    def sized(x: torch.Tensor, ratio: float) -> torch.Tensor:
        out = torch.empty([int(x.shape[0] * ratio)], dtype=x.dtype, device=x.device)
        for t in kd.tile(out.shape[0]):
            out[t] = x[t]
        return out

    with pytest.raises(ControlFlowError, match=r"kd\.specialize\(ratio\)"):
        sized.ir(torch.randn(8), 0.5)


def test_torch_function_of_a_float_in_host_code_is_refused() -> None:
    @kd.kernel
    def host_exp(x: torch.Tensor, s: float) -> torch.Tensor:
        out = torch.empty_like(x)
        e = torch.exp(s)
        for t in kd.tile(x.shape):
            out[t] = x[t] * e
        return out

    with pytest.raises(KernelSyntaxError, match="host code"):
        host_exp.ir(torch.randn(8), 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kd_specialize_makes_a_constant_and_builds_per_value(backend: str) -> None:
    @kd.kernel
    def spec(x: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        eps = kd.specialize(eps)
        for t in kd.tile(x.shape):
            if eps > 0:  # a Python float now
                out[t] = x[t] + eps
            else:
                out[t] = x[t] - 1.0
        return out

    x = torch.randn(16)
    with kd.backend(backend):
        torch.testing.assert_close(spec(x, 0.5), x + 0.5)
        torch.testing.assert_close(spec(x, -0.5), x - 1.0)
        torch.testing.assert_close(spec(x, 0.5), x + 0.5)  # built before: reused
        torch.testing.assert_close(spec(x, 0.25), x + 0.25)
    assert spec.stats["traces"] == 3 and spec.stats["compiles"] == 3
    assert spec.arg_key((x, 0.5)) != spec.arg_key((x, 0.25))


def test_ints_and_bools_stay_specialized() -> None:
    @kd.kernel
    def by_int(x: torch.Tensor, n: int, flag: bool) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] * n if flag else x[t]
        return out

    x = torch.randn(8)
    torch.testing.assert_close(by_int(x, 2, True), x * 2)
    torch.testing.assert_close(by_int(x, 3, True), x * 3)
    torch.testing.assert_close(by_int(x, 3, False), x)
    assert by_int.stats["traces"] == 3


def test_lists_and_tuples_of_ints_are_constants() -> None:
    @kd.kernel
    def pick(x: torch.Tensor, factors: list[int], shift: tuple[int, ...]) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] * factors[0] + shift[-1]
        return out

    x = torch.randn(8)
    torch.testing.assert_close(pick(x, [2, 5], (1, 3)), x * 2 + 3)
    torch.testing.assert_close(pick(x, [2, 5], (1, 3)), x * 2 + 3)
    torch.testing.assert_close(pick(x, [4], (0,)), x * 4)
    assert pick.stats["traces"] == 2
    assert "SymInt[] factors" in pick._ops.schema
    torch.testing.assert_close(torch.ops.kernel_dsl.pick.default(x, [3], [2])[0], x * 3 + 2)
    with pytest.raises(ArgumentError, match="list or tuple of ints"):
        pick(x, [1.5], (1,))


def test_a_list_for_a_tensor_parameter_says_how_to_annotate() -> None:
    @kd.kernel
    def plain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t]
        return out

    with pytest.raises(ArgumentError, match=r"list\[int\]"):
        plain(torch.randn(8), [1, 2])
    with pytest.raises(ArgumentError, match=r"list\[int\]"):
        plain.ir(torch.randn(8), [1, 2])  # not `unhashable type: 'list'`


def test_torch_compile_two_values_one_kernel_build() -> None:
    """Dynamo (torch 2.13) guards a float passed to a custom op on its value (`s == 0.5`), so
    the graph is recompiled per new value; the kernel itself is traced and built once."""
    k = _kernel_axpb()
    x = torch.randn(8, 16)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(x: torch.Tensor, s: float) -> torch.Tensor:
        return k(x, s) * 2

    for s in (0.5, 1.5, 0.5):
        torch.testing.assert_close(f(x, s), _ref(x, s) * 2)
    assert k.stats["traces"] == 1 and k.stats["compiles"] == 1


def test_opcheck_with_a_float_argument() -> None:
    k = _kernel_axpb()
    torch.library.opcheck(k._ops.op, (torch.randn(8, 8), 0.75))
    torch.library.opcheck(k._ops.op, (torch.randn(8, 8), -2.0))
    assert k.stats["traces"] == 1


def test_kernel_jax_reuses_its_build() -> None:
    import jax.numpy as jnp

    k = _kernel_axpb()
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    for s in (2.0, 4.0):
        got = torch.from_dlpack(k.jax(x, s))
        torch.testing.assert_close(got, _ref(torch.from_dlpack(x), s))
    assert len(k.jax._fns) == 1 and k.stats["traces"] == 1


def test_cuda_op_body_passes_the_hidden_scalar() -> None:
    k = _kernel_axpb()
    op = make_cuda_op(k._ops, interpret=True, name="axpb_runtime_scalar_interp")
    x = torch.randn(5, 7)
    for s in (0.25, 8.0):
        torch.testing.assert_close(op(x, s)[0], _ref(x, s))
    assert len(op.launcher._cache) == 1 and k.stats["traces"] == 1


def test_shape_buckets_with_new_values() -> None:
    k = _kernel_axpb()
    with kd.shape_buckets("pow2"):
        for n, s in ((40, 0.5), (50, 1.5), (60, 2.5)):
            x = torch.randn(n, 4)
            torch.testing.assert_close(k(x, s), _ref(x, s))
    assert k.stats["compiles"] <= 2  # the exact build of 40, then the bucket of 64


def test_check_estimate_source_and_autotune_take_floats() -> None:
    k = _kernel_axpb()
    x = torch.randn(64, 128)
    assert "s_ref" in k.source(x, 0.5)
    assert k.estimate(x, 0.5, target="tpu-v5e") > 0
    report = k.check(x, 0.5, targets=["tpu-v5e"], measure_vmem=False)
    assert report.ok, report.table()
    res = k.autotune(x, 0.5, budget=30, strategy="exhaustive")  # candidates run in workers
    assert res.best is not None
    torch.testing.assert_close(k(x, 3.0), _ref(x, 3.0))


def test_library_kernels_keep_floats_constant() -> None:
    from kernel_dsl.kernels.norms import rms_norm_fwd

    assert rms_norm_fwd.runtime_scalars is False  # shipped configs key on the IR's inputs
    ir = rms_norm_fwd.ir(torch.randn(8, 16), torch.randn(1, 16), 1e-5, True)
    assert [p.name for p in ir.inputs] == ["x", "w"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tile_methods_promote_the_float_weakly(backend: str) -> None:
    @kd.kernel
    def methods(x: torch.Tensor, lo: float, fill: float) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            v = x[t].clamp(min=lo).maximum(-x[t])
            out[t] = v.masked_fill(v > 1.0, fill) + lo
        return out

    xb = torch.randn(40).bfloat16()
    ir = methods.ir(xb, 0.25, 7.0)
    assert {op.result.dtype for op in ir.body.walk() if op.kind in ("max", "where", "add")} == {"bf16"}
    with kd.backend(backend):
        for lo, fill in ((0.25, 7.0), (-0.5, 3.0)):
            v = xb.clamp(min=lo).maximum(-xb)
            want = v.masked_fill(v > 1.0, fill) + lo
            torch.testing.assert_close(methods(xb, lo, fill).float(), want.float(), atol=2e-2, rtol=2e-2)
    assert methods.stats["traces"] == 1


@kd.kernel
def scaled_rowsum(x: torch.Tensor, s: float) -> torch.Tensor:
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        top = s * 1.0  # a runtime scalar carried through the loop like a tile (not `top = s`:
        # two names of one value, one of them rebound in the loop, is TileLoop's alias bug)
        for tk in kd.tile(k):
            acc += (x[tm, tk] * s).sum(dim=-1)
            top = torch.maximum(top, x[tm, tk].amax())
        out[tm] = acc + s + top
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_used_in_and_after_a_nested_loop_and_carried(backend: str) -> None:
    x = torch.randn(8, 300)  # one grid block of rows on every backend's default config
    with kd.backend(backend):
        for s in (0.5, 9.0):
            want = (x * s).sum(-1) + s + max(s, float(x.max()))
            torch.testing.assert_close(scaled_rowsum(x, s), want, atol=1e-4, rtol=1e-4)
    loads = [op for op in scaled_rowsum.ir(x, 0.5).body.ops if op.kind == "load"]
    assert loads and loads[0].attrs["tensor"].name == "s"  # at the top of the grid body


@pytest.mark.parametrize("loop_mode", ["grid", "inner"])
def test_pallas_loop_modes(loop_mode: str) -> None:
    x = torch.randn(8, 300)
    cfg = kd.Config([8, 128], loop_mode=loop_mode)
    fn = scaled_rowsum.compiled("pallas", (x, 2.0), cfg)
    for s in (2.0, -3.0):
        got = scaled_rowsum.run_cpu("pallas", (x, s), cfg)[0]
        want = (x * s).sum(-1) + s + max(s, float(x.max()))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert scaled_rowsum.compiled("pallas", (x, 7.0), cfg) is fn
