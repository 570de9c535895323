"""`kernel.jax`: the same kernel as a JAX callable, for JAX users (and TorchTPU's `jax_op`)."""
from __future__ import annotations

from typing import Any, Callable

import torch

from kernel_dsl.config import Config
from kernel_dsl.dtypes import TORCH_TO_IR
from kernel_dsl.errors import BackendError
from kernel_dsl.lowering import phases
from kernel_dsl.runtime_scalars import HIDDEN_SHAPE, is_runtime

from .runner import jax, jax_function  # JAX comes through .runner, kept off libtpu without a TPU

_JAX_TO_TORCH = {jax.numpy.dtype(str(t).replace("torch.", "")) if t is not torch.bool else
                 jax.numpy.dtype("bool"): t for t in TORCH_TO_IR}


def _meta(a: Any) -> Any:
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        dt = _JAX_TO_TORCH.get(jax.numpy.dtype(a.dtype))
        if dt is None:
            raise TypeError(f"JAX dtype {a.dtype} is not supported by kernel_dsl kernels")
        return torch.empty(tuple(a.shape), dtype=dt, device="meta")
    return a


class JaxKernel:
    """Call with JAX arrays (or inside `jax.jit`); specializes on their shapes and dtypes.

    `kernel.jax` (for JAX users) interprets where JAX's arrays live on CPU and otherwise renders
    for the TPU JAX sees. The TorchTPU route passes `interpret=False` and its chip as `target`:
    under TorchTPU, JAX may see no TPU, and interpret mode must never reach a TPU."""

    def __init__(self, kernel: Any, interpret: bool | None = None, config: Config | None = None,
                 target: str = "tpu"):
        self.kernel = kernel
        self.interpret = jax.default_backend() == "cpu" if interpret is None else interpret
        self.target = None if self.interpret else target
        self.config = config
        self._fns: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *arrays: Any) -> Any:
        metas = tuple(_meta(a) for a in arrays)
        key = self.kernel.arg_key(metas)
        fn = self._fns.get(key)
        if fn is None:
            gen = self.kernel.generated(*metas, backend="pallas", config=self.config,
                                        target=self.target)
            ir = self.kernel.ir(*metas)
            if ir.host is not None:  # torch views of arguments and outputs are not made for JAX
                raise BackendError(
                    f"kernel `{self.kernel.name}` makes views of its arguments or outputs in host "
                    "code (`x.view(...)`, `w.T`, `return out.view(...)`) or computes on its "
                    "outputs after the loop (`return out.sum()`), which the JAX/TorchTPU route "
                    "does not run yet", ir.loc,
                    "apply those views and that host code to the arrays before and after the "
                    "call, and index and return the kernel's own arguments and outputs")
            if gen.entry == phases.ENTRY:  # kd.barrier(): the phases' functions in order
                fn = phases.compile(lambda g, _ir: jax_function(g, self.interpret), gen)
            else:
                fn = jax_function(gen, self.interpret)
            self._fns[key] = fn
        # a float argument is a runtime scalar: one more [1, 1] f32 input (runtime_scalars.py)
        outs = fn(*[a if hasattr(a, "shape") else jax.numpy.full(HIDDEN_SHAPE, a, jax.numpy.float32)
                    for a in arrays if hasattr(a, "shape") or (
                        self.kernel.runtime_scalars and is_runtime(a))])
        return outs[0] if len(outs) == 1 else tuple(outs)
