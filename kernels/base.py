"""What every library kernel shares: the kernel class that knows the shipped TPU configs.

A library kernel is an ordinary DSL kernel (`kd.Kernel`) with one difference: when no config
is given, it looks up the winner of the offline autotuner for the TPU generation it renders for
(`kernels/configs/<target>.json`, see `tuned.py`) before falling back to the backend's default.
Order: explicit `config=` -> the user's own autotuning cache -> shipped config -> default.
On CPU (every interpreter) the default config is used: shipped configs are TPU configs.

On a TPU host, the kernel object renders for the attached chip's generation (the backend resolves
"tpu"), so the shipped config and the VMEM limit of that generation apply.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from kernel_dsl.autotune.tuner import tuned_config
from kernel_dsl.config import Config
from kernel_dsl.fast_path import eager_route
from kernel_dsl.ir import KernelIR
from kernel_dsl.kernel_object import Kernel
from kernel_dsl.lowering.pallas.targets import tpu_target

from . import tuned

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class LibraryKernel(Kernel):
    """A DSL kernel of the library: it knows the shipped TPU configs."""

    static_shapes = True  # the library's ops pad their dynamic dims to shape buckets themselves
    # floats (softmax scale, eps) stay constants: the shipped configs are keyed by the IR's inputs
    runtime_scalars = False

    def _config_for(self, ir: KernelIR, backend_name: str, target: str,
                    config: Config | None) -> Config:
        if config is not None or self.config is not None or backend_name != "pallas":
            return super()._config_for(ir, backend_name, target, config)
        cached = tuned_config(self, ir, backend_name, target)
        if cached is not None:
            return cached
        tgt = tpu_target(target)
        if tgt is not None:
            shipped = tuned.lookup(self.name, ir, tgt)
            if shipped is not None:
                return shipped
        return super()._config_for(ir, backend_name, target, None)


def library_kernel(fn: Callable[..., Any]) -> LibraryKernel:
    """Decorator for the library's DSL kernels (`@kd.tpu_kernel` with shipped configs)."""
    return LibraryKernel(fn)


class LibraryOp:
    """A library op, defined with `torch.library.Library` as the user kernels' ops are
    (kernel_dsl/torch_ops.py `_portable_op`): custom_op's schema (inferred from the body's
    annotations), fake and autograd, without custom_op's Python layers around every call (~8 us
    on CPU; an output never aliases an input, which custom_op would check: every body returns
    tensors its kernels allocate). The body stays at hand for `call`."""

    def __init__(self, qualname: str, body: Callable[..., Any]):
        ns, base = qualname.split("::")
        self.qualname, self.body = qualname, body
        self._lib = torch.library.Library(ns, "FRAGMENT")
        self._lib.define(base + torch.library.infer_schema(body, mutates_args=()))
        self._lib.impl(base, body, "CompositeExplicitAutograd")  # every device: the body routes
        self.op = getattr(getattr(torch.ops, ns), base).default

    def __call__(self, *args: Any) -> Any:
        return self.op(*args)

    def register_fake(self, fake: Callable[..., Any]) -> Callable[..., Any]:
        torch.library.register_fake(self.qualname, fake, lib=self._lib)
        return fake

    def register_autograd(self, backward: Callable[..., Any], *,
                          setup_context: Callable[..., Any]) -> None:
        torch.library.register_autograd(self.qualname, backward, setup_context=setup_context,
                                        lib=self._lib)


def library_op(name: str) -> Callable[[Callable[..., Any]], LibraryOp]:
    """Decorator: the body as the library op `name` (a `LibraryOp`)."""
    return lambda fn: LibraryOp(name, fn)


def register_autograd(op: LibraryOp, backward: Callable[..., Any],
                      setup_context: Callable[..., Any]) -> None:
    """`op.register_autograd(...)`, and the same autograd as an `autograd.Function` around the
    op's body, so that `call` can run it without the dispatcher."""
    op.register_autograd(backward, setup_context=setup_context)
    op.eager_autograd = _eager_autograd(op, backward, setup_context)  # type: ignore[attr-defined]


def _eager_autograd(op: Any, backward: Callable[..., Any], setup_context: Callable[..., Any]) -> Any:
    """What torch.library's autograd does for a custom op (torch/_library/autograd.py), minus
    the dispatcher below it, whose first call also imports torch._dynamo (about 1 s in a fresh
    process). One class per op, so that `ctx.needs_input_grad` lines up with the op's inputs."""

    def forward(ctx: Any, *args: Any) -> Any:  # grad mode is off in here
        out = op.body(*args)
        setup_context(ctx, args, out)
        return out

    def grads(ctx: Any, *g: Any) -> Any:
        out = backward(ctx, *g)
        return out if isinstance(out, tuple) else tuple(out) if isinstance(out, list) else (out,)

    return type(f"{op.body.__name__}_eager", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(grads)})


def call(op: Any, *args: Any) -> Any:
    """`op(*args)`; a plain eager CPU call runs the op's body without the dispatcher, which
    costs more than a small kernel (kernel_dsl/fast_path.py says when that is safe), and one
    that needs gradients runs the op's autograd around the body the same way."""
    route = eager_route(args)
    if route == "body":
        return op.body(*args)
    if route == "autograd" and hasattr(op, "eager_autograd"):
        return op.eager_autograd.apply(*args)
    return op(*args)


_placeholders: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def placeholder(device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A [1, 1] zero tensor for a kernel input that this call does not read (no bias, no
    weight). Made once per device and dtype: a fresh one costs an allocation, and a new array
    for the runner, on every call. Kernels only read their inputs, so sharing it is safe. Under
    a dispatch mode (FakeTensorMode tracing a body, say) a tensor made now would belong to the
    mode, so one is made for the call instead."""
    if torch._C._len_torch_dispatch_stack():
        return torch.zeros(1, 1, dtype=dtype, device=device)
    key = (device, dtype)
    t = _placeholders.get(key)
    if t is None:
        with torch.inference_mode(False), torch.no_grad():  # usable in and out of either
            t = _placeholders[key] = torch.zeros(1, 1, dtype=dtype, device=device)
    return t


def check_float(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; the kernel library takes float32, bfloat16 "
                        "or float16 (float64 has no TPU/Trainium units: compute in float32)")
