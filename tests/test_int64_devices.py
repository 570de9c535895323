"""int64 tensors on the device routes (kernel_dsl/wide_ints.py): `torch.long` ids, labels and
argmax outputs on `tpu` (TorchTPU's `jax_op`), `neuron` (TorchNeuron's `nki_op`) and `cuda` (the
Triton op), narrowed to int32 on the device and widened back there, as on cpu.

The tpu and neuron routes run on the project's stand-ins (tests/test_tpu_route.py,
tests/test_nki_neuron.py: a simulated PrivateUse1 device, in a child process per device name).
The CUDA route needs a GPU; here its op body runs on Triton's interpreter on cpu tensors, through
the same narrowing and widening as the portable op's cuda implementation.
"""
from __future__ import annotations

import os
import sys
import traceback
import types
from typing import Any, Callable

import pytest
import torch
from simulated_device import SimulatedDevice, assert_check, run_checks, run_child

import kernel_dsl as kd
from kernel_dsl import wide_ints
from kernel_dsl.errors import DTypeError
from kernel_dsl.tpu_adapter import torch_tpu_available

_MARKER = "INT64-DEVICE-RESULTS "
_CHECKS: dict[str, Callable[[], None]] = {}
_DEV = {"name": "cpu"}  # the child's device
_children: dict[tuple[str, str], dict[str, str]] = {}  # (device, group) -> a child's results


# checks that run in the slow tier on tpu (each new shape there is a JAX export and a Pallas
# interpreter build, seconds on this machine); on neuron all run by default
_SLOW_ON_TPU = {"int64_in_and_out", "long_labels", "opcheck", "vmap", "autograd_with_long_ids"}


def _check(fn: Callable[[], None]) -> Callable[[], None]:
    _CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


# 2-D blocks: on a host without a TPU, exporting a kernel with 1-D blocks for TPU fails
# ("Unsupported TPU device kind: cpu", notes/torch.md), so the tpu route is tested on these
@kd.kernel
def shifted2d(x: torch.Tensor, y: torch.Tensor):
    out = torch.empty_like(x)  # int64 for int64 arguments, as in torch
    for tm, tn in kd.tile(x.shape):
        out[tm, tn] = x[tm, tn] * 3 - y[tm, tn]
    return out


@kd.kernel
def argmax_keepdim(x: torch.Tensor):
    m = x.shape[0]
    idx = torch.empty([m, 1], dtype=torch.long)
    for tm in kd.tile(m):
        idx[tm, :] = x[tm, :].argmax(dim=1, keepdim=True)
    return idx


@kd.kernel
def picked_logit2d(logits: torch.Tensor, labels: torch.Tensor):
    n, v = logits.shape
    out = torch.empty([n, 1], dtype=torch.float32)
    for tn in kd.tile(n):
        lab = labels[tn, :].to(torch.int64)
        acc = kd.zeros([tn, 1], dtype=torch.float32)
        for tv in kd.tile(v):
            hit = tv.index[None, :] == lab
            acc = acc + torch.where(hit, logits[tn, tv].float(), 0.0).sum(dim=1, keepdim=True)
        out[tn, :] = acc
    return out


@kd.kernel
def embed(ids: torch.Tensor, weight: torch.Tensor):
    out = torch.empty([ids.shape[0], weight.shape[1]], dtype=weight.dtype, device=weight.device)
    for tb, td in kd.tile(out.shape):
        out[tb, td] = weight[ids[tb], td]
    return out


def _embed_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ids, weight = inputs
    assert ids.dtype == torch.int64, ids.dtype  # as the user passed them
    ctx.save_for_backward(ids)
    ctx.rows = weight.shape[0]


def _embed_backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
    (ids,) = ctx.saved_tensors
    zeros = torch.zeros(ctx.rows, grad.shape[1], dtype=grad.dtype, device=grad.device)
    return None, zeros.index_add(0, ids, grad)


embed.register_autograd(_embed_backward, setup_context=_embed_setup)


def _kernels() -> Any:
    import test_int64

    return types.SimpleNamespace(embedding=test_int64.embedding, shifted=shifted2d,
                                 row_argmax=argmax_keepdim, picked_logit=picked_logit2d)


def _on(t: torch.Tensor) -> torch.Tensor:
    return t.to(_DEV["name"])


def _raises_at_call_line(fn: Callable[..., Any], *args: Any) -> DTypeError:
    try:
        fn(*args)
    except DTypeError as e:
        call = traceback.extract_tb(e.__traceback__)[0]
        assert e.loc is not None and (e.loc.file, e.loc.line) == (call.filename, call.lineno), \
            f"the error names {e.loc}, not the call at {call.filename}:{call.lineno}"
        return e
    raise AssertionError(f"{fn} did not raise DTypeError")


# -- checks on a simulated device (child process) ------------------------------------------
@_check
def check_embedding_takes_int64_ids() -> None:
    k = _kernels()
    for n in (1, 37):
        ids, w = torch.randint(0, 11, (n,)), torch.randn(11, 5)
        dev_ids = _on(ids)
        out = k.embedding(dev_ids, _on(w))
        assert out.device.type == _DEV["name"] and out.dtype == torch.float32
        torch.testing.assert_close(out.cpu(), w[ids], rtol=0, atol=0)
        assert dev_ids.dtype == torch.int64 and torch.equal(dev_ids.cpu(), ids)  # left as it was


@_check
def check_int64_in_and_out() -> None:
    k = _kernels()
    for shape in [(1, 1), (7, 9), (29, 3)]:
        x, y = torch.randint(-2**29, 2**29, shape), torch.randint(-1000, 1000, shape)
        out = k.shifted(_on(x), _on(y))
        assert out.device.type == _DEV["name"] and out.dtype == torch.int64
        assert torch.equal(out.cpu(), x * 3 - y)


@_check
def check_argmax_into_a_long_output() -> None:
    k = _kernels()
    for shape in [(1, 1), (9, 130)]:
        x = torch.randn(*shape)
        idx = k.row_argmax(_on(x))
        assert idx.device.type == _DEV["name"] and idx.dtype == torch.long
        assert torch.equal(idx.cpu(), x.argmax(dim=1, keepdim=True))


@_check
def check_long_labels() -> None:
    k = _kernels()
    logits, labels = torch.randn(7, 19), torch.randint(0, 19, (7, 1))
    out = k.picked_logit(_on(logits), _on(labels))
    torch.testing.assert_close(out.cpu(), logits.gather(1, labels))


@_check
def check_values_outside_int32_raise_naming_the_argument() -> None:
    k = _kernels()
    for bad in (2**31, -2**31 - 1, 2**40):
        x = _on(torch.tensor([[1, bad, 2]]))
        e = _raises_at_call_line(k.shifted, x, _on(torch.zeros(1, 3, dtype=torch.long)))
        assert f"`x` holds {bad}, outside int32" in e.message, e.message
    e = _raises_at_call_line(k.embedding, _on(torch.tensor([0, 2**33])), _on(torch.randn(4, 2)))
    assert "`ids` holds 8589934592" in e.message, e.message
    edge = torch.tensor([[0, 2**31 - 1, -2**31]])  # the ends of int32 go through
    assert torch.equal(k.shifted(_on(edge), _on(edge)).cpu(), (edge.int() * 3 - edge.int()).long())


@_check
def check_narrowing_stays_on_the_device() -> None:
    """The range check reads one flag on the host; the data is never copied off the device."""
    sim = _DEV["sim"]
    copies: list[tuple[str, str]] = []
    orig = sim._copy_from

    def counted(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        copies.append((src.device.type, dst.device.type))
        return orig(src, dst, non_blocking)

    t = _on(torch.randint(-5, 5, (1000,)))
    sim._copy_from = counted
    try:
        n = wide_ints.narrowed(t, "t")
    finally:
        sim._copy_from = orig
    assert copies == [], copies
    assert n.device.type == _DEV["name"] and n.dtype == torch.int32
    assert torch.equal(n.cpu(), t.cpu().int())


@_check
def check_compile_fullgraph_int64_arguments() -> None:
    """int64 arguments under torch.compile(fullgraph=True): the graph holds the portable op, whose
    body checks the range when the graph runs; results int64 and right, one graph for all sizes."""
    from torch._dynamo.testing import CompileCounterWithBackend

    k = _kernels()
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda a, b: k.shifted(a, b) + 1, fullgraph=True, dynamic=True,
                      backend=counter)
    for shape in [(10, 4), (17, 9), (5, 3)]:
        x, y = torch.randint(-50, 50, shape), torch.randint(-50, 50, shape)
        out = f(_on(x), _on(y))
        assert out.device.type == _DEV["name"] and out.dtype == torch.int64
        assert torch.equal(out.cpu(), x * 3 - y + 1)
    assert counter.frame_count == 1, counter.frame_count
    try:
        f(_on(torch.tensor([[1, 2**35, 3]])), _on(torch.zeros(1, 3, dtype=torch.long)))
    except DTypeError as e:
        assert "`x` holds 34359738368, outside int32" in e.message, e.message
    else:
        raise AssertionError("an int64 value outside int32 went through a compiled graph")
    g = torch.compile(lambda i, w: k.embedding(i, w) * 2.0, fullgraph=True, backend="aot_eager")
    ids, w = torch.randint(0, 11, (13,)), torch.randn(11, 5)
    torch.testing.assert_close(g(_on(ids), _on(w)).cpu(), w[ids] * 2.0, rtol=0, atol=0)


@_check
def check_compile_fullgraph_long_output() -> None:
    """No int64 argument, an int64 output: the graph holds the device op (int32 out, as its
    fake says) and an aten `to(int64)` after it."""
    from torch._dynamo.testing import CompileCounterWithBackend

    k = _kernels()
    ops = k.row_argmax._ops
    torch._dynamo.reset()
    seen: list[set[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    counter = CompileCounterWithBackend(backend)
    f = torch.compile(lambda a: k.row_argmax(a) + 1, fullgraph=True, dynamic=True, backend=counter)
    for shape in [(9, 13), (4, 20), (17, 3)]:
        x = torch.randn(*shape)
        out = f(_on(x))
        assert out.device.type == _DEV["name"] and out.dtype == torch.int64
        assert torch.equal(out.cpu(), x.argmax(dim=1, keepdim=True) + 1)
    assert counter.frame_count == 1, counter.frame_count
    device_op = f"kernel_dsl.{ops.base}_{_DEV['name']}.default"
    assert device_op in seen[0], seen


@_check
def check_opcheck() -> None:
    """opcheck on the portable op with int64 device tensors (fake: int64 outputs), and on the
    device op with int32 ones (fake: int32 where the host code allocates int64, as it returns)."""
    k = _kernels()
    cases = [(k.shifted, (torch.randint(-9, 9, (7, 5)), torch.randint(-9, 9, (7, 5)))),
             (k.embedding, (torch.randint(0, 11, (13,)), torch.randn(11, 5))),
             (k.row_argmax, (torch.randn(9, 13),))]
    for kern, args in cases:
        dev_args = tuple(_on(a) for a in args)
        result = torch.library.opcheck(kern._ops.op, dev_args)
        assert set(result.values()) == {"SUCCESS"}, (kern.name, result)
        device_op = getattr(torch.ops.kernel_dsl, f"{kern._ops.base}_{_DEV['name']}").default
        narrow = tuple(a.int() if a.dtype == torch.int64 else a for a in dev_args)
        result = torch.library.opcheck(device_op, narrow)
        assert set(result.values()) == {"SUCCESS"}, (kern.name, "device op", result)
    (out,) = torch.ops.kernel_dsl.__getattr__(k.row_argmax._ops.base).default(_on(torch.randn(3, 4)))
    assert out.dtype == torch.int64


@_check
def check_vmap() -> None:
    """vmap runs the portable op per batch element; each element is narrowed and widened."""
    k = _kernels()
    x, y = torch.randint(-99, 99, (3, 11, 4)), torch.randint(-99, 99, (3, 11, 4))
    out = torch.vmap(k.shifted)(_on(x), _on(y))
    assert out.dtype == torch.int64 and torch.equal(out.cpu(), x * 3 - y)


@_check
def check_autograd_with_long_ids() -> None:
    """A kernel's registered backward sees the int64 ids as the user passed them (the portable
    op's autograd); eager and compiled gradients match torch's."""
    ids, w = torch.randint(0, 11, (13,)), torch.randn(11, 5)
    want = torch.zeros_like(w).index_add_(0, ids, torch.ones(13, 5) * 3.0)
    compiled = torch.compile(lambda i, v: embed(i, v) * 3.0, fullgraph=True, backend="aot_eager")
    for f in (lambda i, v: embed(i, v) * 3.0, compiled):
        wd = _on(w).requires_grad_()
        out = f(_on(ids), wd)
        torch.testing.assert_close(out.detach().cpu(), w[ids] * 3.0, rtol=0, atol=0)
        out.sum().backward()
        torch.testing.assert_close(wd.grad.cpu(), want)


# -- with Google's real TorchTPU (CI's torch-tpu environment), on fake tpu tensors ------------
_REAL: dict[str, Callable[[], None]] = {}


def _real(fn: Callable[[], None]) -> Callable[[], None]:
    _REAL[fn.__name__.removeprefix("real_")] = fn
    return fn


@_real
def real_compiled_graphs_and_dtypes() -> None:
    """TorchTPU's jax_op takes the kernel's fake as its own (int32 where the host code allocates
    int64): an argmax kernel's compiled graph holds the jax_op's op and widens after it; int64
    arguments put the portable op in the graph; both give int64 as the host code says."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    k = _kernels()
    base = k.row_argmax._ops.base
    assert type(k.row_argmax._ops.tpu).__module__.startswith("torch_tpu."), type(k.row_argmax._ops.tpu)
    torch._dynamo.reset()
    seen: list[set[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(64, 256, device="tpu")
        idx = torch.compile(lambda a: k.row_argmax(a), fullgraph=True, backend=backend)(x)
        assert (idx.dtype, idx.device.type, tuple(idx.shape)) == (torch.int64, "tpu", (64, 1))
        (raw,) = getattr(torch.ops.kernel_dsl, f"{base}_tpu").default(x)
        assert raw.dtype == torch.int32  # what the exported JAX function returns
        assert f"kernel_dsl.{base}_tpu.default" in seen[0], seen
        ids, w = torch.empty(64, dtype=torch.long, device="tpu"), torch.empty(50, 128, device="tpu")
        out = torch.compile(lambda i, v: k.embedding(i, v), fullgraph=True, backend=backend)(ids, w)
        assert (out.dtype, out.device.type, tuple(out.shape)) == (torch.float32, "tpu", (64, 128))
        assert f"kernel_dsl.{k.embedding._ops.base}.default" in seen[1], seen
        y = torch.empty(64, 128, dtype=torch.long, device="tpu")
        ep = torch.export.export(_Shifted(), (y, y))
        (node,) = [n for n in ep.graph.nodes if "kernel_dsl" in str(n.target)]
        assert str(node.target) == f"kernel_dsl.{k.shifted._ops.base}.default", node.target
        assert node.meta["val"][0].dtype == torch.int64


class _Shifted(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _kernels().shifted(a, b)


def _real_child_main() -> None:
    import torch_tpu._loader

    torch_tpu._loader._init_device("tpu")  # what autoload does on a TPU host; no runtime starts
    run_checks(_REAL, _MARKER)


@pytest.mark.parametrize("check", list(_REAL))
def test_real_torch_tpu(check: str) -> None:
    # asked here, not at import: finding the module imports TorchTPU, which would take the
    # PrivateUse1 slot in the simulated-device children that run this file
    if not torch_tpu_available():
        pytest.skip("Google's TorchTPU is not installed here; CI's torch-tpu environment runs it")
    if ("tpu", "real") not in _children:
        env = dict(os.environ, KD_TPU_TARGET="tpu-v5e", TPU_SKIP_MDS_QUERY="1")
        _children["tpu", "real"] = run_child(os.path.abspath(__file__), ["tpu", "real"], env,
                                             _MARKER, "the TorchTPU child", autoload=True)
    assert_check(_children["tpu", "real"], check, "with the real TorchTPU")


def _child_main(device: str, group: str) -> None:
    if group == "real":
        return _real_child_main()
    sim = SimulatedDevice(device)
    _DEV.update(name=device, sim=sim)
    if device == "tpu":
        from test_tpu_route import fake_torch_tpu_modules

        sys.modules.update(fake_torch_tpu_modules())
    else:
        from test_nki_neuron import fake_torch_neuronx_modules

        sys.modules.update(fake_torch_neuronx_modules())
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn2"
    run_checks({n: c for n, c in _CHECKS.items() if (group == "all" or
                                                     (n in _SLOW_ON_TPU) == (group == "slow"))},
               _MARKER)


def _child(device: str, group: str) -> dict[str, str]:
    if (device, group) not in _children:
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, JAX_PLATFORMS="cpu", KD_TPU_TARGET="tpu-v5e",
                   PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
        _children[device, group] = run_child(os.path.abspath(__file__), [device, group], env,
                                             _MARKER, f"the simulated-{device} child")
    return _children[device, group]


@pytest.mark.parametrize("check", list(_CHECKS))
def test_simulated_neuron(check: str) -> None:
    assert_check(_child("neuron", "all"), check, "on the simulated neuron device")


@pytest.mark.parametrize("check", [c if c not in _SLOW_ON_TPU else
                                   pytest.param(c, marks=pytest.mark.slow) for c in _CHECKS])
def test_simulated_tpu(check: str) -> None:
    assert_check(_child("tpu", "slow" if check in _SLOW_ON_TPU else "fast"), check,
                 "on the simulated tpu device")


# -- the CUDA route's op body, on Triton's interpreter (this process, cpu tensors) ----------
def _interp_op(kernel: Any, name: str) -> Any:
    from kernel_dsl.lowering.triton.cuda import make_cuda_op

    return make_cuda_op(kernel._ops, interpret=True, name=f"{kernel._ops.base}_{name}_interp")


def test_cuda_op_body_with_int64_in_and_out() -> None:
    """What the portable op's cuda implementation does (`KernelOps._on_device`) around the Triton
    op: int64 narrowed before, int32 outputs widened after, on the tensors' device."""
    k = _kernels()
    op = _interp_op(k.shifted, "i64")
    x, y = torch.randint(-2**29, 2**29, (29, 3)), torch.randint(-1000, 1000, (29, 3))
    (raw,) = op(x.int(), y.int())
    assert raw.dtype == torch.int32  # the device op itself is an int32 op
    (out,) = k.shifted._ops._on_device(op, (x, y))
    assert out.dtype == torch.int64 and torch.equal(out, x * 3 - y)
    (idx,) = k.row_argmax._ops._on_device(_interp_op(k.row_argmax, "i64"), (xs := torch.randn(9, 13),))
    assert idx.dtype == torch.int64 and torch.equal(idx, xs.argmax(dim=1, keepdim=True))
    ids, w = torch.randint(0, 11, (13,)), torch.randn(11, 5)
    (emb,) = k.embedding._ops._on_device(_interp_op(k.embedding, "i64"), (ids, w))
    torch.testing.assert_close(emb, w[ids], rtol=0, atol=0)
    with pytest.raises(DTypeError, match=r"`ids` holds -2147483649, outside int32"):
        k.embedding._ops._on_device(_interp_op(k.embedding, "i64b"),
                                    (torch.tensor([0, -2**31 - 1]), w))


def test_cuda_op_fake_notes_the_outputs_to_widen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torch.compile the Triton op's fake (its body on fake tensors) notes which outputs the
    router widens; its own outputs stay int32 there, as the kernel writes them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernel_dsl.lowering.triton.cuda import CudaLauncher

    k = _kernels()
    ops = k.row_argmax._ops
    op = _interp_op(k.row_argmax, "fake")
    # Triton's interpreter runs the kernel even on fake tensors; with a GPU it is a no-op there
    monkeypatch.setattr(CudaLauncher, "__call__",
                        lambda self, x: [torch.empty(x.shape[0], 1, dtype=torch.int32)])
    mode = FakeTensorMode()
    x = mode.from_tensor(torch.randn(9, 13))
    with mode:
        (out,) = op(x)
    assert out.dtype == torch.int32
    assert ops.wide_outputs.of(wide_ints.WideOutputs.key((x,))) == (0,)


def test_narrowed_checks_in_one_sync_and_names_the_argument() -> None:
    t = torch.tensor([3, -2**31, 2**31 - 1])
    assert wide_ints.narrowed(t, "t").dtype == torch.int32
    assert wide_ints.narrowed(torch.empty(0, dtype=torch.long), "e").shape == (0,)
    with pytest.raises(DTypeError, match=r"`labels` holds 2147483648, outside int32"):
        wide_ints.narrowed(torch.tensor([2**31]), "labels")


def test_device_fake_gives_int32_where_the_host_code_allocates_int64() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    k = _kernels()
    mode = FakeTensorMode()
    x = mode.from_tensor(torch.randn(5, 7))
    with mode:
        (host,) = k.row_argmax._ops.fake(x)
        (dev,) = k.row_argmax._ops.device_fake(x)
    assert (host.dtype, dev.dtype) == (torch.int64, torch.int32) and dev.shape == host.shape


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_the_int32_kernels() -> None:
    """What the tpu route hands TorchTPU for int64 arguments and outputs (the kernels at int32,
    as the IR has them) compiles with libtpu's compile-only targets, all five."""
    from kernel_dsl.lowering.pallas.targets import TARGETS

    k = _kernels()
    for kern, args in ((k.embedding, (torch.randint(0, 50, (64,)), torch.randn(50, 256))),
                       (k.row_argmax, (torch.randn(64, 256),)),
                       (k.shifted, (torch.randint(-9, 9, (64, 256)), torch.randint(-9, 9, (64, 256)))),
                       (k.picked_logit, (torch.randn(64, 256), torch.randint(0, 256, (64, 1))))):
        report = kern.check(*args, targets=list(TARGETS), measure_vmem=False)
        assert report.ok, report.table()


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
