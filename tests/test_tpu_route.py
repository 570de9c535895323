"""Kernels on `tpu` tensors go through TorchTPU's `jax_op` (kernel_dsl/tpu_adapter.py), tested
without a TPU and without TorchTPU, on two stand-ins:

- a stand-in `torch_tpu._internal.pallas` whose `jax_op` keeps the contract of TorchTPU 0.2.0's
  own (torch_tpu/_internal/pallas/pallas.py): name and function positional, keyword-only
  donate_argnums / mesh / input_partition_specs / output_partition_specs; the signature read as
  `inspect.signature(inspect.unwrap(fn), eval_str=True)`, so string annotations work; every
  parameter annotated (jax.Array, int, float, bool, str); non-array parameters static; the torch
  schema inferred from the signature; an op registered for every device (no device_types); the
  function exported for TPU (`jax.export`, platforms=["tpu"], custom-call checks disabled) once
  per input shape; a default fake that refuses SymInt dims. Where it differs: its op runs the
  exported Mosaic kernel on Pallas' TPU interpreter on CPU (the real one hands the module to the
  TPU runtime), and it takes only the annotation types kernel_dsl uses (the real one also takes
  enums, sequences and Optional). tests/test_torch_tpu.py runs the same route on the real one;
- a Python-only PrivateUse1 device renamed `tpu` (tests/simulated_device.py) whose tensors own
  CPU memory, so views, copies, opcheck and torch.compile work on it. A process can rename
  PrivateUse1 only once, so the device tests run in child processes (this file run as a script)
  that report back as JSON.

`dsl_kernels` is imported inside functions: a child installs its stand-ins before the kernels
(and their ops) are created.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.machinery
import inspect
import os
import sys
import traceback
import types
import typing
from typing import Any, Callable

import pytest
import torch
from simulated_device import SimulatedDevice, assert_check, run_checks, run_child

import kernel_dsl as kd
from kernel_dsl.errors import ArgumentError, BackendError, DTypeError, KernelError
from kernel_dsl.tpu_adapter import torch_tpu_available

_PALLAS = "torch_tpu._internal.pallas"
_UTILS = "torch_tpu._internal.utils"
_MARKER = "TPU-ROUTE-RESULTS "


# -- a stand-in for TorchTPU's `torch_tpu._internal.pallas` -----------------------------------
@dataclasses.dataclass
class FakeJaxOp:
    """What the stand-in `jax_op` made for one op name."""

    fn: Callable[..., Any]
    static_argnums: tuple[int, ...]
    export: Callable[..., Any]  # placeholders -> jax.export.Exported, for platforms=["tpu"]
    default_fake: Callable[..., Any] | None = None
    exports: dict[tuple[Any, ...], Any] = dataclasses.field(default_factory=dict)
    calls: int = 0


def fake_torch_tpu_modules() -> dict[str, types.ModuleType]:
    """`torch_tpu`, `torch_tpu._internal` and `torch_tpu._internal.pallas`, for sys.modules.

    They carry module specs, so `importlib.util.find_spec` (what kernel_dsl checks) finds them.
    `pallas.made` maps op names to `FakeJaxOp`s.
    """
    mods = {}
    for name in ("torch_tpu", "torch_tpu._internal", _PALLAS, _UTILS, _UTILS + ".hardware"):
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        mod.__path__ = []
        mods[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)
    made: dict[str, FakeJaxOp] = {}
    vars(mods[_PALLAS]).update(made=made, jax_op=functools.partial(_fake_jax_op, made))
    # TorchTPU's PCI scan on a host without a TPU (tests set the chip with KD_TPU_TARGET)
    mods[_UTILS + ".hardware"].get_tpu_device_name = lambda: "TPU"  # type: ignore[attr-defined]
    return mods


def _fake_jax_op(made: dict[str, FakeJaxOp], name: str, fn: Callable[..., Any], /, *,
                 donate_argnums: Any = None, mesh: Any = None, input_partition_specs: Any = None,
                 output_partition_specs: Any = None) -> Any:
    """TorchTPU's `jax_op(name, fn, /, *, donate_argnums, mesh, input_partition_specs,
    output_partition_specs)`, whose op runs `fn` on CPU copies of the inputs and puts the results
    on the inputs' device."""
    import jax  # after kernel_dsl chose JAX's platform, as TorchTPU imports it on first use

    if "::" not in name:
        raise ValueError(f"Op name {name} does not contain a namespace.")
    if name.count("::") != 1:
        raise ValueError(f"Op name {name} must have exactly one '::' separator.")
    sig = inspect.signature(inspect.unwrap(fn), eval_str=True)
    to_torch: dict[Any, Any] = {jax.Array: torch.Tensor, int: int, float: float, bool: bool, str: str}
    ret = sig.return_annotation
    ret_args = typing.get_args(ret)
    if ret is jax.Array:
        torch_ret: Any = torch.Tensor
    elif typing.get_origin(ret) in (list, tuple) and ret_args and set(ret_args) <= {jax.Array, ...}:
        torch_ret = typing.get_origin(ret)[tuple(to_torch.get(a, a) for a in ret_args)]
    else:
        torch_ret = None
    if torch_ret is None or any(p.annotation not in to_torch for p in sig.parameters.values()):
        raise ValueError(f"Invalid signature for JAX function: {sig}. Only jax.Arrays and POD "
                         "types are supported.")
    params = list(sig.parameters.values())
    static = tuple(i for i, p in enumerate(params) if p.annotation is not jax.Array)
    jitted = jax.jit(fn, static_argnums=static, donate_argnums=donate_argnums, keep_unused=True)
    exporter = jax.export.export(jitted, platforms=["tpu"],
                                 disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("ALL")])

    def export(args: tuple[Any, ...]) -> Any:
        return exporter(*[jax.ShapeDtypeStruct(tuple(a.shape), getattr(jax.numpy, str(a.dtype)[6:]))
                          if isinstance(a, torch.Tensor) else a for a in args])

    rec = made[name] = FakeJaxOp(fn, static, export)

    def impl(*args: Any) -> Any:
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        if key not in rec.exports:  # TorchTPU exports and registers one module per input shapes
            rec.exports[key] = export(args)
        rec.calls += 1
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        from jax.experimental.pallas import tpu as pltpu

        # the exported kernel is Mosaic; on CPU it runs on Pallas' TPU interpreter instead
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
            outs = jitted(*[jax.dlpack.from_dlpack(a.cpu().contiguous())
                            if isinstance(a, torch.Tensor) else a for a in args])
        return jax.tree_util.tree_map(lambda o: torch.from_dlpack(o).to(device), outs)

    def default_fake(*args: Any) -> Any:
        if any(isinstance(d, torch.SymInt) for a in args if isinstance(a, torch.Tensor)
               for d in a.shape):
            raise RuntimeError("Symbolic dimensions are not supported in the default fake kernel. "
                               "Either remove symbolic dimensions or override this default "
                               "implementation.")
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        out = export(args)
        return out.out_tree.unflatten([torch.empty(a.shape, dtype=getattr(torch, str(a.dtype)),
                                                   device=device) for a in out.out_avals])

    def proto(*args: Any) -> Any: ...

    proto.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(annotation=to_torch[p.annotation]) for p in params], return_annotation=torch_ret)
    schema = torch.library.infer_schema(proto, mutates_args=())
    op = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)  # every device
    op.register_fake(default_fake)
    rec.default_fake = default_fake
    return op


@pytest.fixture
def fake_torch_tpu(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The stand-in TorchTPU, installed in sys.modules for one test."""
    for name, mod in fake_torch_tpu_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    return sys.modules[_PALLAS]


# -- child processes ---------------------------------------------------------------------------
_CHECKS: dict[str, dict[str, Callable[[], None]]] = {"without-torch-tpu": {}, "with-torch-tpu": {}}


def _check(mode: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Registers a check for a child; checks run in the order they are defined."""
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        _CHECKS[mode][fn.__name__.removeprefix("check_")] = fn
        return fn
    return register


def _raises_at_call_line(expected: type[KernelError], fn: Callable[..., Any], *args: Any) -> KernelError:
    """Calls `fn(*args)`; it must raise `expected` naming this call's line (the user's line)."""
    try:
        fn(*args)
    except expected as e:
        call = traceback.extract_tb(e.__traceback__)[0]
        assert e.loc is not None and (e.loc.file, e.loc.line) == (call.filename, call.lineno), \
            f"the error names {e.loc}, not the call at {call.filename}:{call.lineno}"
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {expected.__name__}")


def _tpu(*shapes: tuple[int, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    cpu = [torch.randn(s) for s in shapes]
    return cpu, [c.to("tpu") for c in cpu]


def _ref_add_where(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(x > y, x - y, 0.5 * y)


@_check("without-torch-tpu")
def check_route_without_torch_tpu_names_call_line() -> None:
    """tpu tensors without TorchTPU: a BackendError at the user's call, and nothing cached."""
    import dsl_kernels

    _, (x, y) = _tpu((16, 32), (16, 32))
    err = _raises_at_call_line(BackendError, dsl_kernels.add_where, x, y)
    assert "TorchTPU" in err.message and err.hint and "cpu" in err.hint, str(err)
    assert dsl_kernels.add_where._ops.tpu is None


@_check("with-torch-tpu")
def check_compile_first_call() -> None:
    """torch.compile(fullgraph=True) when the kernel's first tpu call is the compiled one."""
    import dsl_kernels

    torch._dynamo.reset()
    (a, b), (at, bt) = _tpu((64, 32), (32, 48))
    f = torch.compile(lambda p, q: dsl_kernels.matmul(p, q), fullgraph=True, dynamic=True,
                      backend="aot_eager")
    torch.testing.assert_close(f(at, bt).cpu(), a @ b, rtol=1e-4, atol=1e-4)


@_check("with-torch-tpu")
def check_route_picks_tpu_op() -> None:
    """Eager calls on cpu and tpu take the portable op `kernel_dsl::<base>`, whose PrivateUse1
    implementation calls `kernel_dsl::<base>_tpu` (made once); compiled graphs hold the tpu op."""
    import dsl_kernels

    ops = dsl_kernels.add_where._ops
    (x, y), (xt, yt) = _tpu((16, 32), (16, 32))
    assert ops.route((xt, yt)) is ops.op and ops.route((x, y)) is ops.op
    assert ops.op.name() == f"kernel_dsl::{ops.base}"
    assert ops.tpu._qualname == f"kernel_dsl::{ops.base}_tpu"
    assert ops.tpu is ops.tpu_op(), "the tpu op is made once"
    torch._dynamo.reset()
    seen: list[set[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    out = torch.compile(dsl_kernels.add_where, fullgraph=True, backend=backend)(xt, yt)
    torch.testing.assert_close(out.cpu(), _ref_add_where(x, y))
    assert f"kernel_dsl.{ops.base}_tpu.default" in seen[0], seen


@_check("with-torch-tpu")
def check_export_is_portable() -> None:
    """A program exported on tpu names the same op as one exported on cpu, and runs on cpu."""
    import dsl_kernels

    class M(torch.nn.Module):
        def forward(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
            return dsl_kernels.add_where(p, q) * 2.0

    (x, y), (xt, yt) = _tpu((16, 32), (16, 32))
    programs = {dev: torch.export.export(M(), args) for dev, args in [("tpu", (xt, yt)),
                                                                      ("cpu", (x, y))]}
    names = {dev: [str(n.target) for n in ep.graph.nodes if "kernel_dsl" in str(n.target)]
             for dev, ep in programs.items()}
    base = dsl_kernels.add_where._ops.base
    assert names["tpu"] == names["cpu"] == [f"kernel_dsl.{base}.default"], names
    want = _ref_add_where(x, y) * 2.0
    torch.testing.assert_close(programs["tpu"].module()(x, y), want)  # traced on tpu, run on cpu
    torch.testing.assert_close(programs["cpu"].module()(xt, yt).cpu(), want)  # and the reverse


@_check("with-torch-tpu")
def check_eager_matches_torch() -> None:
    """Eager calls run the tpu op (exported for TPU once per shape); results match torch."""
    import dsl_kernels

    rec = sys.modules[_PALLAS].made[f"kernel_dsl::{dsl_kernels.add_where._ops.base}_tpu"]
    calls, exports = rec.calls, set(rec.exports)  # earlier checks called it too
    for shape in [(16, 32), (16, 32), (8, 24), (8, 24), (9, 23)]:
        (x, y), (xt, yt) = _tpu(shape, shape)
        out = dsl_kernels.add_where(xt, yt)
        assert out.device.type == "tpu"
        torch.testing.assert_close(out.cpu(), _ref_add_where(x, y))
    assert rec.calls - calls == 5, rec.calls - calls
    # one export per input shape (TorchTPU keys its registered modules by shape)
    assert set(rec.exports) == exports | {((s, torch.float32),) * 2 for s in
                                          [(16, 32), (8, 24), (9, 23)]}, list(rec.exports)
    (a, b), (at, bt) = _tpu((64, 32), (32, 48))
    out = dsl_kernels.matmul(at, bt)
    assert out.device.type == "tpu" and out.shape == (64, 48)
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-4, atol=1e-4)


@_check("with-torch-tpu")
def check_schema_matches_kernel_ops() -> None:
    """TorchTPU infers the op's schema from the JAX function; it is the kernel's schema."""
    import dsl_kernels

    for k in (dsl_kernels.add_where, dsl_kernels.matmul):
        ops = k._ops
        schema = getattr(torch.ops.kernel_dsl, f"{ops.base}_tpu").default._schema
        assert str(schema) == f"kernel_dsl::{ops.base}_tpu{ops.schema}", (str(schema), ops.schema)


@_check("with-torch-tpu")
def check_opcheck() -> None:
    """torch.library.opcheck (schema, autograd registration, fake, aot dispatch with dynamic
    shapes) on the tpu ops, with tpu tensors."""
    import dsl_kernels

    for k, shapes in [(dsl_kernels.add_where, [(16, 32), (16, 32)]),
                      (dsl_kernels.matmul, [(64, 32), (32, 48)])]:
        for name in (k._ops.base, f"{k._ops.base}_tpu"):  # the portable op and the tpu op
            op = getattr(torch.ops.kernel_dsl, name).default
            result = torch.library.opcheck(op, tuple(_tpu(*shapes)[1]))
            assert set(result.values()) == {"SUCCESS"}, (name, result)


@_check("with-torch-tpu")
def check_compile_dynamic_fullgraph() -> None:
    """torch.compile(fullgraph=True, dynamic=True): one graph for all shapes, right results."""
    import dsl_kernels
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda p, q: dsl_kernels.add_where(p, q) * 2.0, fullgraph=True, dynamic=True,
                      backend=counter)
    for shape in [(16, 32), (8, 24), (24, 40)]:
        (x, y), (xt, yt) = _tpu(shape, shape)
        out = f(xt, yt)
        assert out.device.type == "tpu"
        torch.testing.assert_close(out.cpu(), _ref_add_where(x, y) * 2.0)
    assert counter.frame_count == 1, counter.frame_count


@_check("with-torch-tpu")
def check_tpu_call_validates_like_cpu() -> None:
    """Arguments the CPU path refuses at the user's call are refused there on tpu too."""
    import dsl_kernels

    x64 = torch.randn(16, 32, dtype=torch.float64)
    _raises_at_call_line(DTypeError, dsl_kernels.add_where, x64, x64)  # CPU path, for comparison
    _raises_at_call_line(DTypeError, dsl_kernels.add_where, x64.to("tpu"), x64.to("tpu"))
    empty = torch.randn(0, 32).to("tpu")
    _raises_at_call_line(ArgumentError, dsl_kernels.add_where, empty, empty)


def _child_main(mode: str) -> None:
    SimulatedDevice("tpu")
    if mode == "with-torch-tpu":
        sys.modules.update(fake_torch_tpu_modules())
    run_checks(_CHECKS[mode], _MARKER)


def _run_child(mode: str) -> dict[str, str]:
    # the stand-in op runs its kernel on CPU; the chip it renders for is set, as on a TPU-less host
    env = dict(os.environ, JAX_PLATFORMS="cpu", KD_TPU_TARGET="tpu-v5e")
    return run_child(os.path.abspath(__file__), [mode], env, _MARKER, f"the {mode} child")


@pytest.fixture(scope="module")
def child_without_torch_tpu() -> dict[str, str]:
    return _run_child("without-torch-tpu")


@pytest.fixture(scope="module")
def child_with_torch_tpu() -> dict[str, str]:
    return _run_child("with-torch-tpu")


def _assert_check(results: dict[str, str], name: str) -> None:
    assert_check(results, name, "in the simulated-tpu child")


# -- tests: simulated device (child processes) --------------------------------------------------
def test_route_without_torch_tpu_names_call_line(child_without_torch_tpu: dict[str, str]) -> None:
    _assert_check(child_without_torch_tpu, "route_without_torch_tpu_names_call_line")


@pytest.mark.parametrize("check", [
    "compile_first_call",
    "route_picks_tpu_op",
    "export_is_portable",
    "eager_matches_torch",
    "schema_matches_kernel_ops",
    "opcheck",
    "compile_dynamic_fullgraph",
    "tpu_call_validates_like_cpu",
])
def test_simulated_tpu(child_with_torch_tpu: dict[str, str], check: str) -> None:
    _assert_check(child_with_torch_tpu, check)


# -- tests: the adapter in this process (no device) ---------------------------------------------
def _fresh(kernel: kd.Kernel) -> kd.Kernel:
    """The same kernel with ops of its own, so this process's shared kernels keep no tpu op."""
    return kd.tpu_kernel(kernel.fn)


def test_tpu_op_without_torch_tpu_raises_backend_error() -> None:
    if torch_tpu_available():
        pytest.skip("TorchTPU is installed")
    import dsl_kernels

    ops = dsl_kernels.add_where._ops
    err = _raises_at_call_line(BackendError, ops.tpu_op)
    assert "TorchTPU" in err.message and "google-pytorch/torch_tpu" in (err.hint or "")
    assert ops.tpu is None


@pytest.mark.parametrize("name, static", [("add_where", ()), ("matmul", ()), ("layer_norm", (3,))])
def test_adapter_op_contract(fake_torch_tpu: types.ModuleType, name: str,
                             static: tuple[int, ...]) -> None:
    """Op name, schema, and the JAX function's signature as TorchTPU's jax_op reads it."""
    import dsl_kernels
    import jax

    k = _fresh(getattr(dsl_kernels, name))
    op = k._ops.tpu_op()
    qualname = f"kernel_dsl::{k._ops.base}_tpu"
    assert op._qualname == qualname and k._ops.tpu_op() is op
    assert str(op._opoverload._schema) == qualname + k._ops.schema
    rec = fake_torch_tpu.made[qualname]
    assert rec.static_argnums == static
    sig = inspect.signature(rec.fn, follow_wrapped=False)
    assert [p.name for p in sig.parameters.values()] == [p.name for p in k.params]
    assert sig.return_annotation == list[jax.Array]


@pytest.mark.parametrize("name", ["add_where", "matmul"])
def test_adapter_fake_takes_symbolic_shapes(fake_torch_tpu: types.ModuleType, name: str) -> None:
    """The op's fake is the kernel's (SymInt-safe); jax_op's default one refuses SymInt dims."""
    import dsl_kernels
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    k = _fresh(getattr(dsl_kernels, name))
    op = k._ops.tpu_op()
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2)
    shapes = [(16, 32), (16, 32)] if name == "add_where" else [(64, 32), (32, 48)]
    x, y = (mode.from_tensor(torch.randn(s), symbolic_context=dynamic) for s in shapes)
    with mode:
        (out,) = op(x, y)
        with pytest.raises(RuntimeError, match="Symbolic dimensions"):
            fake_torch_tpu.made[op._qualname].default_fake(x, y)
    assert all(isinstance(d, torch.SymInt) for d in out.shape)
    want = x.shape if name == "add_where" else (x.shape[0], y.shape[1])
    assert [str(d) for d in out.shape] == [str(d) for d in want]
    assert out.dtype == x.dtype


@pytest.fixture
def route_target_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Resolves the TPU route's chip afresh with the given KD_TPU_TARGET, TorchTPU and JAX
    answers (`route_target` caches its answer for the process)."""
    from kernel_dsl import tpu_adapter

    def resolve(env: str | None = None, torch_tpu: str | None = None, jax: str | None = None) -> str:
        if env is None:
            monkeypatch.delenv(tpu_adapter.ENV_TARGET, raising=False)
        else:
            monkeypatch.setenv(tpu_adapter.ENV_TARGET, env)
        monkeypatch.setattr(tpu_adapter, "torch_tpu_chip", lambda: torch_tpu)
        monkeypatch.setattr(tpu_adapter, "attached_tpu_target", lambda: jax)
        tpu_adapter.route_target.cache_clear()
        return tpu_adapter.route_target()

    yield resolve
    tpu_adapter.route_target.cache_clear()


def test_route_target_order(route_target_env: Callable[..., str]) -> None:
    """KD_TPU_TARGET, then TorchTPU's chip, then JAX's, then the stated default with a warning."""
    from kernel_dsl import tpu_adapter

    assert route_target_env(env="tpu-v5p", torch_tpu="tpu-v6e", jax="tpu-v4") == "tpu-v5p"
    assert route_target_env(torch_tpu="tpu-v7x", jax="tpu-v4") == "tpu-v7x"
    assert route_target_env(jax="tpu-v4") == "tpu-v4"
    with pytest.warns(UserWarning, match="KD_TPU_TARGET"):
        assert route_target_env() == tpu_adapter.DEFAULT_TPU_TARGET
    with pytest.raises(KernelError, match="not a TPU target"):
        route_target_env(env="v5e")


def test_torch_tpu_chip_names_map_to_targets(fake_torch_tpu: types.ModuleType,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchTPU's names (a PCI scan: "TPU v5e", "TPU v7", "TPU" for none) -> our targets."""
    from kernel_dsl import tpu_adapter

    hardware = sys.modules[_UTILS + ".hardware"]
    for reported, want in [("TPU v4", "tpu-v4"), ("TPU v5e", "tpu-v5e"), ("TPU v5p", "tpu-v5p"),
                           ("TPU v6e", "tpu-v6e"), ("TPU v7", "tpu-v7x"), ("TPU", None)]:
        monkeypatch.setattr(hardware, "get_tpu_device_name", lambda r=reported: r)
        assert tpu_adapter.torch_tpu_chip() == want, reported


@pytest.mark.parametrize("name", ["add_where", "matmul"])
def test_adapter_exports_mosaic_for_the_route_target(fake_torch_tpu: types.ModuleType,
                                                     route_target_env: Callable[..., str],
                                                     name: str) -> None:
    """What TorchTPU exports is a Mosaic kernel for the route's chip, never interpret mode, also
    on this host where JAX's default backend is cpu."""
    import dsl_kernels
    import jax

    assert jax.default_backend() == "cpu"
    assert route_target_env(env="tpu-v5e") == "tpu-v5e"
    k = _fresh(getattr(dsl_kernels, name))  # with TorchTPU present, its tpu op is made right here
    op = k._ops.tpu_op()
    rec = fake_torch_tpu.made[op._qualname]
    shapes = [(256, 128), (256, 128)] if name == "add_where" else [(256, 128), (128, 512)]
    exported = rec.export(tuple(torch.empty(s, device="meta") for s in shapes))
    assert "tpu_custom_call" in exported.mlir_module()
    (made,) = rec.fn.made
    assert (made.interpret, made.target) == (False, "tpu-v5e")
    gen = k.generated(*[torch.empty(s) for s in shapes], backend="pallas", target="tpu-v5e")
    assert "for target tpu-v5e" in gen.source


def test_a_dsl_kernel_renders_for_the_attached_tpu_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a TPU host "tpu" means the attached chip: its VMEM limit applies to every kernel."""
    from dsl_kernels import matmul

    from kernel_dsl.lowering.pallas import targets

    monkeypatch.setattr(targets, "attached_tpu_target", lambda: "tpu-v5e")
    src = matmul.source(torch.randn(256, 256), torch.randn(256, 256), backend="pallas", target="tpu")
    assert "for target tpu-v5e" in src


if __name__ == "__main__":
    _child_main(sys.argv[1])
