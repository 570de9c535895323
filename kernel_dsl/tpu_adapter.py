"""The TPU op of a kernel: a small adapter over TorchTPU's `jax_op`, and the chip it renders for.

On a TPU host, tensors live on TorchTPU's PrivateUse1 device (renamed `tpu`). TorchTPU runs a
JAX function on those buffers through `torch_tpu._internal.pallas.jax_op`, which exports the
function for TPU (`jax.export`, platforms=["tpu"]) once per input shape and hands the module to
its runtime. That module is `_internal` and has changed before (`custom_jax_kernel` became
`jax_op`), so TorchTPU is touched here and nowhere else.

What the op hands TorchTPU is always TPU Pallas (a Mosaic custom call), never interpret mode,
rendered for one TPU generation (`route_target`): `KD_TPU_TARGET` when set, else the chip that
TorchTPU's own hardware query finds (a PCI scan that starts no runtime), else the chip JAX sees,
else `DEFAULT_TPU_TARGET` with a warning (an export on a host without a TPU).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable

from .errors import BackendError, ConfigError
from .lowering.pallas.targets import TPU_TARGETS, attached_tpu_target
from .tracing import user_loc

if TYPE_CHECKING:
    from .torch_ops import KernelOps

_MODULE = "torch_tpu._internal.pallas"
_SCALARS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "int[]": list[int]}
ENV_TARGET = "KD_TPU_TARGET"
DEFAULT_TPU_TARGET = "tpu-v6e"
# TorchTPU's chip names (torch_tpu/_internal/utils/hardware.py, `TpuVersion`) -> ours. They are
# not JAX's `device_kind` strings ("TPU v5 lite", "TPU7x").
_TORCH_TPU_NAMES = {"TPU v4": "tpu-v4", "TPU v5e": "tpu-v5e", "TPU v5p": "tpu-v5p",
                    "TPU v6e": "tpu-v6e", "TPU v7": "tpu-v7x"}


def torch_tpu_available() -> bool:
    """Google's TorchTPU is installed (another, unrelated package is also called torch_tpu)."""
    try:
        return importlib.util.find_spec(_MODULE) is not None
    except ModuleNotFoundError:
        return False


def torch_tpu_loaded() -> bool:
    """TorchTPU is installed and was imported (torch's device-backend autoload does that on
    `import torch`, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0): only then can tensors be on `tpu`
    through it, so only then are kernels' TPU ops made up front."""
    return "torch_tpu" in sys.modules and torch_tpu_available()


def torch_tpu_chip() -> str | None:
    """The TPU generation TorchTPU reports for this host, as a target name (None without one)."""
    if not torch_tpu_available():
        return None
    from torch_tpu._internal.utils import hardware  # a PCI scan: starts no TPU runtime

    return _TORCH_TPU_NAMES.get(hardware.get_tpu_device_name())


@functools.lru_cache(maxsize=None)
def route_target() -> str:
    """The TPU generation the TPU route renders for (module docstring: the order)."""
    explicit = os.environ.get(ENV_TARGET)
    if explicit:
        if explicit not in TPU_TARGETS:
            raise ConfigError(f"{ENV_TARGET}={explicit!r} is not a TPU target", user_loc(),
                              f"set it to one of {', '.join(TPU_TARGETS)}")
        return explicit
    found = torch_tpu_chip() or attached_tpu_target()
    if found is not None:
        return found
    warnings.warn(f"kernel_dsl: no TPU found on this host; TPU kernels are rendered for "
                  f"{DEFAULT_TPU_TARGET}. Set {ENV_TARGET} (one of {', '.join(TPU_TARGETS)}) to "
                  "the chip the exported program will run on.", stacklevel=2)
    return DEFAULT_TPU_TARGET


def make_tpu_op(ops: KernelOps) -> Any:
    """`kernel_dsl::<base>_tpu`: the kernel's Pallas rendering as a TorchTPU op (a CustomOpDef)."""
    jax_op = _load_jax_op(ops.kernel.name)
    op = jax_op(f"kernel_dsl::{ops.base}_tpu", _jax_fn(ops))
    # jax_op's default fake exports the JAX function on placeholders and refuses SymInt dims;
    # the kernel's own fake runs the host code, so torch.compile(dynamic=True) works. JAX computes
    # without int64 (x64 off): the op takes and gives int32 there (kernel_dsl/wide_ints.py).
    op.register_fake(ops.device_fake)
    return op


def _load_jax_op(name: str) -> Callable[..., Any]:
    if not torch_tpu_available():
        raise BackendError(
            f"kernel `{name}` got tensors on device `tpu`, but Google's TorchTPU "
            f"(`{_MODULE}`) is not installed", user_loc(),
            "install it with `pip install kernel-dsl[tpu]` on the TPU host (an unrelated "
            "package is also called torch_tpu; see https://github.com/google-pytorch/torch_tpu), "
            "or call the kernel on cpu tensors")
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
    """The kernel as TPU Pallas for `route_target()`, returning a list (the ops' schema returns
    `Tensor[]`), with a signature jax_op can read."""
    from .lowering.pallas.jax_entry import JaxKernel, jax  # JAX: only where TorchTPU runs

    kernel = ops.kernel
    made: list[JaxKernel] = []  # the chip is resolved at the first export, not at decoration

    def run(*args: Any) -> list[Any]:
        if not made:
            made.append(JaxKernel(kernel, interpret=False, target=route_target(),
                                  config=kernel.config))
        out = made[0](*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    # jax_op reads this signature (inspect.signature(inspect.unwrap(fn), eval_str=True)): each
    # parameter needs a type it knows. jax.Array parameters become tensors, the rest static
    # arguments of jax.jit, and the op's schema is inferred from it, so it must give `ops.schema`.
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=jax.Array if kind == "Tensor" else _SCALARS[kind])
         for p, kind in zip(kernel.params, kernel.kinds)],
        return_annotation=list[jax.Array])
    run.__name__ = run.__qualname__ = f"{ops.base}_tpu"
    run.made = made  # type: ignore[attr-defined]  # for tests: what was rendered, and for what
    return run
