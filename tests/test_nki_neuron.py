"""Kernels on `neuron` tensors go through TorchNeuron's `nki_op` (lowering/nki/neuron.py), tested
without Trainium and without torch-neuronx, on two stand-ins:

- a stand-in `torch_neuronx` whose `nki_op(name, fn, mutates_args)` keeps the contract of
  torch-neuronx's own (torch_neuronx/nki_hop.py): the schema inferred from `fn`'s annotations,
  `fn` registered as the op's body and as its default fake; and whose `wrap_nki(kernel)[lnc]`
  reads the kernel's `.sign`/`.func` and runs it on CPU through `nki.simulate` (here: kernel_dsl's
  NKI interpreter) on CPU copies of the tensors;
- a Python-only PrivateUse1 device renamed `neuron` (tests/simulated_device.py, which
  tests/test_tpu_route.py renames `tpu`). A process renames PrivateUse1 once, so the device
  checks run in a child process (this file as a script).
"""
from __future__ import annotations

import importlib.machinery
import inspect
import os
import sys
import types
from typing import Any, Callable

import pytest
import torch
from simulated_device import SimulatedDevice, assert_check, run_checks, run_child
from torch.utils._pytree import tree_map

import kernel_dsl as kd
from kernel_dsl.errors import BackendError
from kernel_dsl.lowering.nki.interp import namespace
from kernel_dsl.lowering.nki.neuron import make_neuron_op, torch_neuronx_available

_MARKER = "NEURON-ROUTE-RESULTS "


# -- a stand-in for torch-neuronx ---------------------------------------------------------------
class FakeCaller:
    """`wrap_nki(kernel)[lnc]`: runs the kernel on CPU copies, results on the inputs' device."""

    def __init__(self, kernel: Any, grid: int | None, log: list[str]):
        self.kernel, self.grid, self.log = kernel, grid, log
        self.arg_names = list(kernel.sign.parameters)  # what the real wrap_nki reads

    def __getitem__(self, grid: int) -> FakeCaller:
        return FakeCaller(self.kernel, int(grid), self.log)

    def __call__(self, *args: torch.Tensor) -> Any:
        device = args[0].device
        self.log.append(self.kernel.func.__name__)
        nki = namespace()["nki"]
        launch = self.kernel[self.grid or 1]
        outs = nki.simulate(launch)(*[a.cpu() for a in args])
        return tree_map(lambda o: o.to(device), outs)


def fake_torch_neuronx_modules() -> dict[str, types.ModuleType]:
    mods = {}
    for name in ("torch_neuronx", "torch_neuronx.nki_hop"):
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        mod.__path__ = []
        mods[name] = mod
    made: dict[str, Any] = {}
    calls: list[str] = []

    def wrap_nki(kernel: Any, **kwargs: Any) -> FakeCaller:
        return FakeCaller(kernel, None, calls)

    def nki_op(name: str, fn: Callable[..., Any] | None = None, mutates_args: Any = {}) -> Any:
        def dec(f: Callable[..., Any]) -> Any:
            schema = torch.library.infer_schema(f, mutates_args=mutates_args)
            op = torch.library.custom_op(name, f, mutates_args=mutates_args, schema=schema)
            op.register_fake(f)  # the body doubles as the fake, as in torch-neuronx
            made[name] = op
            return op

        return dec if fn is None else dec(fn)

    vars(mods["torch_neuronx"]).update(nki_op=nki_op, wrap_nki=wrap_nki, made=made, calls=calls)
    vars(mods["torch_neuronx.nki_hop"]).update(wrap_nki=wrap_nki)
    return mods


@pytest.fixture
def fake_torch_neuronx(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    for name, mod in fake_torch_neuronx_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    return sys.modules["torch_neuronx"]


def _fresh(kernel: kd.Kernel) -> kd.Kernel:
    return kd.tpu_kernel(kernel.fn)


# -- in this process: the adapter, called on CPU tensors --------------------------------------
def test_without_torch_neuronx_the_neuron_op_raises_backend_error() -> None:
    if torch_neuronx_available():
        pytest.skip("torch-neuronx is installed")
    import dsl_kernels

    with pytest.raises(BackendError, match="TorchNeuron") as info:
        make_neuron_op(_fresh(dsl_kernels.add_where)._ops)
    assert "torch-neuronx" in (info.value.hint or "") and "cpu" in (info.value.hint or "")


@pytest.mark.parametrize("name", ["add_where", "matmul", "layer_norm"])
def test_adapter_op_contract(fake_torch_neuronx: types.ModuleType, name: str) -> None:
    """Op name, schema inferred by nki_op from the body's signature, and the kernel's fake."""
    import dsl_kernels

    k = _fresh(getattr(dsl_kernels, name))
    op = make_neuron_op(k._ops)
    qualname = f"kernel_dsl::{k._ops.base}_neuron"
    assert op._qualname == qualname and fake_torch_neuronx.made[qualname] is op
    assert str(op._opoverload._schema) == qualname + k._ops.schema
    sig = inspect.signature(op._init_fn if hasattr(op, "_init_fn") else k.fn)
    assert [p.name for p in sig.parameters.values()] == [p.name for p in k.params]


def test_adapter_runs_the_generated_nki_once_per_shape(fake_torch_neuronx: types.ModuleType) -> None:
    import dsl_kernels

    k = _fresh(dsl_kernels.attention)
    op = make_neuron_op(k._ops)
    q, kk, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 24, 16), torch.randn(1, 2, 24, 16)
    for _ in range(2):
        (out,) = op(q, kk, v, True)
        mask = torch.ones(20, 24, dtype=torch.bool).tril(diagonal=4)
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(
            q, kk, v, attn_mask=mask), atol=2e-5, rtol=2e-5)
    assert fake_torch_neuronx.calls == ["attention", "attention"]
    assert k.stats["traces"] == 1


def test_adapter_fake_takes_symbolic_shapes(fake_torch_neuronx: types.ModuleType) -> None:
    import dsl_kernels
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    k = _fresh(dsl_kernels.matmul)
    op = make_neuron_op(k._ops)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2)
    x, y = (mode.from_tensor(torch.randn(s), symbolic_context=dynamic) for s in [(64, 32), (32, 48)])
    with mode:
        (out,) = op(x, y)
    assert [str(d) for d in out.shape] == [str(x.shape[0]), str(y.shape[1])]


# -- checks on a simulated `neuron` device (child process) ------------------------------------
_CHECKS: dict[str, Callable[[], None]] = {}


def _check(fn: Callable[[], None]) -> Callable[[], None]:
    _CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


def _neuron(*shapes: tuple[int, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    cpu = [torch.randn(s) for s in shapes]
    return cpu, [c.to("neuron") for c in cpu]


@_check
def check_route_picks_the_neuron_op() -> None:
    """Eager calls take the portable op (its PrivateUse1 implementation calls the neuron op);
    the neuron op is made once, at the first neuron call."""
    import dsl_kernels

    ops = dsl_kernels.add_where._ops
    (x, y), (xn, yn) = _neuron((16, 32), (16, 32))
    assert ops.route((xn, yn)) is ops.op and ops.route((x, y)) is ops.op
    assert ops.neuron._qualname == f"kernel_dsl::{ops.base}_neuron"
    assert ops.neuron is ops.neuron_op(), "the neuron op is made once"


@_check
def check_eager_calls_match_torch() -> None:
    import dsl_kernels

    (x, y), (xn, yn) = _neuron((37, 50), (37, 50))
    out = dsl_kernels.add_where(xn, yn)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), torch.where(x > y, x - y, 0.5 * y))
    (a, b), (an, bn) = _neuron((70, 130), (130, 40))
    out = dsl_kernels.matmul(an, bn)
    assert out.device.type == "neuron" and out.shape == (70, 40)
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-4, atol=1e-4)
    (q, k, v), (qn, kn, vn) = _neuron((1, 2, 30, 16), (1, 2, 30, 16), (1, 2, 30, 16))
    out = dsl_kernels.attention(qn, kn, vn, True)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), want, atol=2e-5, rtol=2e-5)


@_check
def check_compile_fullgraph_dynamic() -> None:
    import dsl_kernels
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda p, q: dsl_kernels.add_where(p, q) * 2.0, fullgraph=True, dynamic=True,
                      backend=counter)
    for shape in [(16, 32), (8, 24)]:
        (x, y), (xn, yn) = _neuron(shape, shape)
        out = f(xn, yn)
        assert out.device.type == "neuron"
        torch.testing.assert_close(out.cpu(), torch.where(x > y, x - y, 0.5 * y) * 2.0)
    assert counter.frame_count == 1, counter.frame_count


@_check
def check_opcheck() -> None:
    import dsl_kernels

    op = dsl_kernels.add_where._ops.neuron_op()._opoverload
    result = torch.library.opcheck(op, tuple(_neuron((16, 32), (16, 32))[1]))
    assert set(result.values()) == {"SUCCESS"}, result


def _child_main() -> None:
    SimulatedDevice("neuron")
    sys.modules.update(fake_torch_neuronx_modules())
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn2"
    run_checks(_CHECKS, _MARKER)


@pytest.fixture(scope="module")
def child() -> dict[str, str]:
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return run_child(os.path.abspath(__file__), [], env, _MARKER, "the simulated-neuron child")


@pytest.mark.parametrize("check", list(_CHECKS))
def test_simulated_neuron_device(child: dict[str, str], check: str) -> None:
    assert_check(child, check, "on the simulated neuron device")


if __name__ == "__main__":
    _child_main()
