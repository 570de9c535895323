"""The CUDA route: a kernel as a `torch.library.triton_op` that launches its generated Triton
kernel through `wrap_triton`.

A plain custom op is one opaque node to torch.compile. A `triton_op` body is traced instead, and
`wrap_triton(kernel)[grid](...)` becomes `triton_kernel_wrapper_functional`, which Inductor
launches itself (fused scheduling, CUDA graphs, AOTInductor). The op must never receive CPU
tensors (notes/torch.md): under aot_eager/Inductor the body is traced for any device. So it is a
separate op from the kernel's CPU ops, and the router sends it CUDA tensors only.

Kernels are specialized per shape, so the body reads concrete sizes (`int(...)`): under
`torch.compile(dynamic=True)` that guards on the sizes and recompiles per shape, as notes/torch.md
describes; the kernel for each shape is rendered and loaded once and cached here.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor

from kernel_dsl import dtypes
from kernel_dsl.bounded import Bounded
from kernel_dsl.host_views import kernel_tensors
from kernel_dsl.runtime_scalars import kernel_inputs

from .. import Generated
from .runner import interpreting, kernel_function

if TYPE_CHECKING:
    from kernel_dsl.torch_ops import KernelOps

TARGET = "cuda"
_SCALARS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "int[]": list[int]}


def _concrete(a: Any) -> Any:
    """A size-only stand-in for an argument (meta tensor, Python scalar): what the IR needs."""
    if isinstance(a, torch.Tensor):
        return torch.empty([int(d) for d in a.shape], dtype=a.dtype, device="meta")
    return int(a) if isinstance(a, torch.SymInt) else a


class CudaLauncher:
    """Renders, loads and caches one kernel per specialization; launches it on tensors."""

    def __init__(self, ops: KernelOps, interpret: bool = False):
        self.kernel = ops.kernel
        self.interpret = interpret  # CPU tests of the op's body through Triton's interpreter
        self._cache: dict[tuple[Any, ...], tuple[Generated, Any, Any]] = Bounded()  # + HostViews

    def entry(self, args: tuple[Any, ...]) -> tuple[Generated, Any]:
        stand_ins = tuple(_concrete(a) for a in args)
        key = self.kernel.arg_key(stand_ins)
        hit = self._cache.get(key)
        if hit is None:
            gen = self.kernel.generated(*stand_ins, backend="triton",
                                        target="cpu" if self.interpret else TARGET)
            hit = (gen, kernel_function(gen, self.interpret), self.kernel.ir(*stand_ins).host)
            self._cache[key] = hit
        return hit

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        gen, fn, host = self.entry(args)
        meta = gen.meta
        inputs = kernel_inputs(args, scalars=self.kernel.runtime_scalars)  # floats: [1, 1] f32
        tensors = kernel_tensors(host, inputs)  # host views of the arguments (host_views.py)
        device = tensors[0].device
        outs = [torch.empty(shape, dtype=dtypes.IR_TO_TORCH[dt], device=device) if init is None
                else torch.full(shape, init, dtype=dtypes.IR_TO_TORCH[dt], device=device)
                for _, shape, dt, init in meta["outputs"]]
        launch = torch.library.wrap_triton(fn)[meta["grid"]]
        if self.interpret:
            with interpreting():
                launch(*tensors, *outs, num_warps=meta["num_warps"], num_stages=meta["num_stages"])
        else:
            launch(*tensors, *outs, num_warps=meta["num_warps"], num_stages=meta["num_stages"])
        returned = [outs[i] for i in meta["returns"]]
        # host views of the outputs, host code after the kernel (host_epilogue.py)
        return returned if host is None else host.epilogue(returned, inputs)


def _typed_body(ops: KernelOps, launcher: CudaLauncher) -> Callable[..., list[torch.Tensor]]:
    """The op's body with a real signature: `triton_op` infers the schema from its annotations,
    which must give `ops.schema`."""
    kernel = ops.kernel

    def body(*args: Any) -> list[torch.Tensor]:
        if any(isinstance(a, FakeTensor) for a in args):  # the op's fake: what the router widens
            ops.wide_outputs.note(args, ops.fake(*args))  # (its outputs are int32 buffers here)
        return launcher(*args)

    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=torch.Tensor if kind == "Tensor" else _SCALARS[kind])
         for p, kind in zip(kernel.params, kernel.kinds)],
        return_annotation=list[torch.Tensor])
    body.__name__ = body.__qualname__ = f"{ops.base}_triton"
    return body


def make_cuda_op(ops: KernelOps, *, interpret: bool = False, name: str | None = None) -> Any:
    """`kernel_dsl::<base>_triton`: the kernel's Triton rendering as a `triton_op` (CustomOpDef).

    `interpret=True` (with another `name`) builds the same op over interpreted kernels, so that
    its body can be run eagerly on CPU tensors in tests; never route CPU tensors to the real one.
    """
    launcher = CudaLauncher(ops, interpret)
    op = torch.library.triton_op(f"kernel_dsl::{name or ops.base + '_triton'}",
                                 _typed_body(ops, launcher), mutates_args=())
    op.launcher = launcher  # type: ignore[attr-defined]
    return op
