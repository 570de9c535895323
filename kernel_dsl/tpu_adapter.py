"""The TPU op of a kernel: a small adapter over TorchTPU's `jax_op`.

On a TPU host, tensors live on TorchTPU's PrivateUse1 device (renamed `tpu`). TorchTPU runs a
JAX function on those buffers through `torch_tpu._internal.pallas.jax_op`, which exports the
function for TPU (`jax.export`, platforms=["tpu"]) once per input shape and hands the module to
its runtime. That module is `_internal` and has changed before (`custom_jax_kernel` became
`jax_op`), so it is touched here and nowhere else.
"""
from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any, Callable

from .errors import BackendError
from .torch_ops import torch_tpu_available
from .tracing import user_loc

if TYPE_CHECKING:
    from .torch_ops import KernelOps

_MODULE = "torch_tpu._internal.pallas"
_SCALARS: dict[str, type] = {"int": int, "float": float, "bool": bool}


def make_tpu_op(ops: KernelOps) -> Any:
    """`kernel_dsl::<base>_tpu`: the kernel's Pallas rendering as a TorchTPU op (a CustomOpDef)."""
    jax_op = _load_jax_op(ops)
    op = jax_op(f"kernel_dsl::{ops.base}_tpu", _jax_fn(ops))
    # jax_op's default fake exports the JAX function on placeholders and refuses SymInt dims;
    # the kernel's own fake runs the host code, so torch.compile(dynamic=True) works.
    op.register_fake(ops._fake)
    return op


def _load_jax_op(ops: KernelOps) -> Callable[..., Any]:
    name = ops.kernel.name
    if not torch_tpu_available():
        raise BackendError(
            f"kernel `{name}` got tensors on device `tpu`, but Google's TorchTPU "
            f"(`{_MODULE}`) is not installed", user_loc(),
            "install TorchTPU (https://github.com/google-pytorch/torch_tpu) on the TPU host; an "
            "unrelated package is also called torch_tpu. Or call the kernel on cpu tensors")
    try:
        pallas = importlib.import_module(_MODULE)  # imports JAX and TorchTPU's runtime: only here
    except ImportError as e:
        raise BackendError(f"kernel `{name}`: importing `{_MODULE}` failed: {e}", user_loc(),
                           "check that TorchTPU, jax and libtpu are installed together") from e
    jax_op = getattr(pallas, "jax_op", None)
    if jax_op is None:
        raise BackendError(f"kernel `{name}`: this TorchTPU has no `{_MODULE}.jax_op`", user_loc(),
                           "upgrade TorchTPU (older releases only have the deprecated "
                           "`custom_jax_kernel`)")
    return jax_op


def _jax_fn(ops: KernelOps) -> Callable[..., list[Any]]:
    """`kernel.jax` returning a list (the ops' schema returns `Tensor[]`), with a real signature."""
    kernel = ops.kernel
    kernel_jax = kernel.jax  # imports JAX the way the CPU path does (quiet on hosts without TPU)
    import jax  # already imported by `kernel.jax`; kept out of module scope for CPU-only users

    def run(*args: Any) -> list[Any]:
        out = kernel_jax(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    # jax_op reads this signature (not through __wrapped__): each parameter needs a real type,
    # since string annotations are rejected. jax.Array parameters become tensors, the rest static
    # arguments of jax.jit, and the op's schema is inferred from it, so it must give `ops.schema`.
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=jax.Array if kind == "Tensor" else _SCALARS[kind])
         for p, kind in zip(kernel.params, kernel.kinds)],
        return_annotation=list[jax.Array])
    run.__name__ = run.__qualname__ = f"{ops.base}_tpu"
    return run
