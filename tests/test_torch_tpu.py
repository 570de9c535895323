"""The TPU route against Google's real TorchTPU (`pip install kernel-dsl[tpu]`), on a host
without a TPU: CI's second environment (.ci/run) installs torch-tpu and runs this file.

What a TPU-less host can check of the real package: a kernel's `tpu` op is TorchTPU's own
`jax_op` op; every library op (forward and backward) and a user kernel, traced on `tpu` fake
tensors, hand TorchTPU a JAX function whose TPU export (TorchTPU's own `JaxCallable.exported`,
what its first eager call registers with the runtime) holds a Mosaic custom call, rendered for
the chip named by KD_TPU_TARGET and never in interpret mode; `torch.export` and
`torch.compile(fullgraph=True, dynamic=True)` trace them. Running a kernel needs a TPU: that is
where this stops (autograd on fake tpu tensors also needs the runtime).

The checks run in a child process with torch's device-backend autoload on, as a user's process
is: TorchTPU takes the PrivateUse1 slot there, which the simulated-device tests must keep.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Callable

import pytest
import torch
from simulated_device import assert_check, run_checks, run_child

from kernel_dsl.tpu_adapter import torch_tpu_available

_MARKER = "TORCH-TPU-RESULTS "
_CHIP = "tpu-v5e"
_CHECKS: dict[str, Callable[[], None]] = {}

pytestmark = pytest.mark.skipif(
    not torch_tpu_available(),
    reason="Google's TorchTPU is not installed here; CI's torch-tpu environment runs this file")


def _check(fn: Callable[[], None]) -> Callable[[], None]:
    _CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


# -- in the child --------------------------------------------------------------------------------
def _tpu(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, device="tpu", dtype=dtype)  # a fake tensor: no TPU is touched


def _routes(body: Callable[[], Any]) -> list[tuple[Any, tuple[Any, ...]]]:
    """Runs `body` on fake tpu tensors; returns each (kernel ops, args) the router sent to TPU."""
    from kernel_dsl import torch_ops

    seen: list[tuple[Any, tuple[Any, ...]]] = []
    route = torch_ops.KernelOps.route

    def recording(self: Any, args: tuple[Any, ...]) -> Any:
        seen.append((self, args))
        return route(self, args)

    torch_ops.KernelOps.route = recording  # type: ignore[method-assign]
    try:
        body()
    finally:
        torch_ops.KernelOps.route = route  # type: ignore[method-assign]
    return seen


def _assert_mosaic(routes: list[tuple[Any, tuple[Any, ...]]], kernels: set[str]) -> None:
    """Each routed call's TorchTPU export is a Mosaic kernel for `_CHIP`, not interpret mode."""
    assert {ops.kernel.name for ops, _ in routes} == kernels, [o.kernel.name for o, _ in routes]
    for ops, args in routes:
        op = ops.tpu
        assert type(op).__module__.startswith("torch_tpu."), type(op)  # the real jax_op's op
        callable_ = op._init_fn  # TorchTPU's JaxCallable: what its eager call runs
        norm_args, norm_kwargs = callable_._normalize_invocation_args(args, {})
        placeholders, kw = callable_._get_jax_placeholders(norm_args, norm_kwargs)
        module = callable_.exported(*placeholders, **kw).mlir_module()
        assert "tpu_custom_call" in module, f"{ops.kernel.name}: no Mosaic kernel in the export"
        (made,) = inspect.unwrap(callable_.jit_fn).made  # the kernel_dsl function it jitted
        assert (made.interpret, made.target) == (False, _CHIP), (made.interpret, made.target)


def _library_bodies() -> dict[str, tuple[Callable[[], Any], set[str] | None]]:
    """Each library op's body (the custom op's own function, run on fake tensors so that the
    DSL kernels inside it are routed) and the DSL kernels it must call."""
    import kernel_dsl.kernels  # noqa: F401  # the library's modules, by name below

    mods = {m: sys.modules[f"kernel_dsl.kernels.{m}"] for m in ("matmul", "attention", "softmax",
                                                                 "norms")}
    mm, at, sm, nm = mods["matmul"], mods["attention"], mods["softmax"], mods["norms"]
    q, k, v = _tpu(1, 2, 256, 128), _tpu(1, 2, 256, 128), _tpu(1, 2, 256, 128)
    x, w = _tpu(64, 1024), _tpu(1024)
    lse, stat = _tpu(1, 2, 256, dtype=torch.float32), _tpu(64, 1, dtype=torch.float32)
    return {
        "matmul": (lambda: mm._fwd_op.body(_tpu(256, 384), _tpu(384, 512), _tpu(512), "gelu",
                                               None), {"matmul_kernel"}),
        "matmul_backward": (lambda: mm._bwd_op.body(_tpu(256, 512), _tpu(256, 384),
                                                        _tpu(384, 512), _tpu(512), "gelu"),
                            {"matmul_kernel", "column_sum"}),
        "flash_attention": (lambda: at._fwd_op.body(q, k, v, True, 0.088, 0),
                            {"flash_attention_fwd"}),
        "flash_attention_backward": (lambda: at._bwd_op.body(q, q, k, v, q, lse, True, 0.088, 0),
                                     {"flash_attention_bwd_dkv", "flash_attention_bwd_dq"}),
        "softmax": (lambda: sm._fwd_op.body(_tpu(64, 1000), -1), None),
        "softmax_backward": (lambda: sm._bwd_op.body(_tpu(64, 1000), _tpu(64, 1000), -1), None),
        "rms_norm": (lambda: nm._rms_op.body(x, w, 1e-6), {"rms_norm_fwd"}),
        "rms_norm_backward": (lambda: nm._rms_bwd_op.body(x, x, w, stat),
                              {"rms_norm_bwd_dx", "rms_norm_bwd_dw"}),
        "layer_norm": (lambda: nm._ln_op.body(x, w, w, 1e-5), {"layer_norm_fwd"}),
        "layer_norm_backward": (lambda: nm._ln_bwd_op.body(x, x, w, w, stat, stat),
                                {"layer_norm_bwd_dx", "layer_norm_bwd_dwb"}),
    }


LIBRARY_OPS = ["matmul", "matmul_backward", "flash_attention", "flash_attention_backward",
               "softmax", "softmax_backward", "rms_norm", "rms_norm_backward", "layer_norm",
               "layer_norm_backward"]


def _library_check(name: str) -> Callable[[], None]:
    def check() -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            body, kernels = _library_bodies()[name]
            routes = _routes(body)
            # softmax picks one of its kernels by row length: whichever it routed must be Mosaic
            _assert_mosaic(routes, kernels or {ops.kernel.name for ops, _ in routes})
            assert routes, f"{name} routed no kernel to TPU"
    check.__name__ = f"check_mosaic_{name}"
    return check


for _name in LIBRARY_OPS:
    _check(_library_check(_name))


@_check
def check_mosaic_user_kernel() -> None:
    import dsl_kernels
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        routes = _routes(lambda: dsl_kernels.matmul(_tpu(96, 130, dtype=torch.float32),
                                                    _tpu(130, 257, dtype=torch.float32)))
        _assert_mosaic(routes, {"matmul"})


@_check
def check_export_names_the_ops() -> None:
    """torch.export on tpu fake tensors: library ops and a user kernel in one graph."""
    import dsl_kernels
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernel_dsl.kernels import flash_attention, matmul, rms_norm

    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            h = rms_norm(x, g)
            q = matmul(h, w).reshape(1, 1, 128, 128)
            o = flash_attention(q, q, q, causal=True).reshape(128, 128)
            return dsl_kernels.add_where(o.float(), o.float())

    with FakeTensorMode():
        ep = torch.export.export(Block(), (_tpu(128, 256), _tpu(256, 128), _tpu(256)))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    base = dsl_kernels.add_where._ops.base
    for want in ("kernel_dsl.rms_norm.default", "kernel_dsl.matmul.default",
                 "kernel_dsl.flash_attention.default", f"kernel_dsl.{base}.default"):
        assert want in targets, (want, sorted(targets))
    assert not any(t.endswith("_tpu.default") for t in targets), sorted(targets)  # portable


@_check
def check_compiled_graph_holds_torch_tpus_own_op() -> None:
    """Under torch.compile (not export) the graph holds the jax_op's op, which TorchTPU's own
    compiler knows, instead of the portable op."""
    import dsl_kernels
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._dynamo.reset()
    seen: list[set[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    f = torch.compile(dsl_kernels.add_where, fullgraph=True, backend=backend)
    with FakeTensorMode(allow_non_fake_inputs=True):
        f(_tpu(64, 128, dtype=torch.float32), _tpu(64, 128, dtype=torch.float32))
    assert f"kernel_dsl.{dsl_kernels.add_where._ops.base}_tpu.default" in seen[0], seen


@_check
def check_compile_fullgraph_dynamic() -> None:
    """torch.compile(fullgraph=True, dynamic=True) traces library ops and a user kernel on tpu."""
    import dsl_kernels
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernel_dsl.kernels import matmul, rms_norm

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda a, b, g: dsl_kernels.add_where(rms_norm(matmul(a, b), g).float(),
                                                           a.float() @ b.float()),
                      fullgraph=True, dynamic=True, backend=counter)
    with FakeTensorMode(allow_non_fake_inputs=True):
        for m in (64, 96, 160):
            out = f(_tpu(m, 128), _tpu(128, 256), _tpu(256))
            assert out.shape == (m, 256) and out.device.type == "tpu"
    assert counter.frame_count == 1, counter.frame_count


def _child_main() -> None:
    import torch_tpu._loader

    torch_tpu._loader._init_device("tpu")  # what autoload does on a TPU host; no runtime starts
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    run_checks(_CHECKS, _MARKER)


# -- in the parent ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def child() -> dict[str, str]:
    env = dict(os.environ, KD_TPU_TARGET=_CHIP, TPU_SKIP_MDS_QUERY="1")
    return run_child(os.path.abspath(__file__), [], env, _MARKER, "the TorchTPU child",
                     autoload=True)


@pytest.mark.parametrize("name", [f"mosaic_{n}" for n in LIBRARY_OPS] + [
    "mosaic_user_kernel", "export_names_the_ops", "compiled_graph_holds_torch_tpus_own_op",
    "compile_fullgraph_dynamic"])
def test_real_torch_tpu(child: dict[str, str], name: str) -> None:
    assert_check(child, name, "with the real TorchTPU")


if __name__ == "__main__":
    _child_main()
