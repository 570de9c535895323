"""The `neuron` op of a kernel: a small adapter over TorchNeuron's `nki_op`.

On a Trainium host, tensors live on TorchNeuron's PrivateUse1 device `neuron`. TorchNeuron
registers a custom op whose body calls NKI kernels with `wrap_nki(kernel)[lnc](*tensors)`
(notes/torch.md): `torch_neuronx.nki_op("ns::op", fn, mutates_args=())` infers the op's schema
from `fn`'s annotations. The body here renders the kernel for the host's target once per
specialization, loads the generated source (with the real `nki`), and calls it; the op's fake is
the kernel's own SymInt-safe one. TorchNeuron is touched here and nowhere else.

`KernelOps.route` (kernel_dsl/torch_ops.py) reaches this through a `neuron_op()` method, as it
reaches the TPU adapter through `tpu_op()`.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from typing import TYPE_CHECKING, Any, Callable

import torch

from kernel_dsl import host_views
from kernel_dsl.bounded import Bounded
from kernel_dsl.errors import BackendError
from kernel_dsl.runtime_scalars import kernel_inputs
from kernel_dsl.tracing import user_loc

from .render import render
from .runner import load_source
from .space import default_config

if TYPE_CHECKING:
    from kernel_dsl.torch_ops import KernelOps

MODULE = "torch_neuronx"
DEFAULT_TARGET = "trn2"
_SCALARS: dict[str, Any] = {"int": int, "float": float, "bool": bool, "int[]": list[int]}


def torch_neuronx_available() -> bool:
    try:
        return importlib.util.find_spec(MODULE) is not None
    except (ImportError, ValueError):
        return False


def host_target() -> str:
    """The Trainium generation to render for: NEURON_PLATFORM_TARGET_OVERRIDE, else trn2."""
    raw = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", DEFAULT_TARGET).strip().lower()
    return {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}.get(raw, raw)


def _load(ops: KernelOps) -> tuple[Callable[..., Any], Callable[..., Any]]:
    name = ops.kernel.name
    if not torch_neuronx_available():
        raise BackendError(f"kernel `{name}` got tensors on device `neuron`, but TorchNeuron "
                           f"(`{MODULE}`) is not installed", user_loc(),
                           "install torch-neuronx from AWS's Neuron repository on the Trainium "
                           "host, or call the kernel on cpu tensors")
    try:
        tnx = importlib.import_module(MODULE)
    except ImportError as e:
        raise BackendError(f"kernel `{name}`: importing `{MODULE}` failed: {e}", user_loc(),
                           "check that torch-neuronx matches the installed torch") from e
    nki_op = getattr(tnx, "nki_op", None)
    wrap_nki = getattr(tnx, "wrap_nki", None)
    if wrap_nki is None:
        wrap_nki = getattr(importlib.import_module(f"{MODULE}.nki_hop"), "wrap_nki", None)
    if nki_op is None or wrap_nki is None:
        raise BackendError(f"kernel `{name}`: this torch-neuronx has no `nki_op`/`wrap_nki`",
                           user_loc(), "upgrade torch-neuronx (Neuron 2.33+)")
    return nki_op, wrap_nki


def make_neuron_op(ops: KernelOps) -> Any:
    """`kernel_dsl::<base>_neuron`: the kernel's NKI rendering as a TorchNeuron op."""
    nki_op, wrap_nki = _load(ops)
    kernel = ops.kernel
    callers: dict[tuple[Any, ...], Any] = Bounded()  # oldest build out past the limit

    def run(*args: Any) -> list[torch.Tensor]:
        key = kernel.arg_key(args)
        caller = callers.get(key)
        if caller is None:
            ir = kernel.ir(*args)
            target = host_target()
            config = kernel.config if kernel.config is not None else default_config(ir, target)
            gen = render(ir, config, target)
            caller = callers[key] = host_views.wrap(  # host views around the kernel
                ir.host, wrap_nki(load_source(gen.source, gen.entry))[1])
        out = caller(*kernel_inputs(args, scalars=kernel.runtime_scalars))  # floats: [1, 1] f32
        return list(out) if isinstance(out, (tuple, list)) else [out]

    # nki_op infers the op's schema from this signature: it must give `ops.schema`
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=torch.Tensor if kind == "Tensor" else _SCALARS[kind])
         for p, kind in zip(kernel.params, kernel.kinds)],
        return_annotation=list[torch.Tensor])
    run.__name__ = run.__qualname__ = f"{ops.base}_neuron"
    op = nki_op(f"kernel_dsl::{ops.base}_neuron", run, mutates_args=())
    op.register_fake(ops.device_fake)  # int32 where the host code allocates int64 (wide_ints.py)
    return op
