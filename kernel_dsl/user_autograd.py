"""`kernel.register_autograd(backward, setup_context=...)`: torch.library's contract, user's view.

The kernel's ops return `Tensor[]`, so torch hands `setup_context` the outputs as a list and
`backward` one list of gradients. The user sees what a call returns instead: one tensor for a
kernel with one output, a tuple otherwise; `backward(ctx, *grads)` gets one gradient per output
and returns one per input (None for scalars), as with `torch.library.register_autograd`.
Without a registration, backward raises an error that names the kernel.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import ArgumentError, KernelError


def _as_called(outs: Any) -> Any:
    """The outputs as `Kernel.__call__` returns them."""
    outs = list(outs)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _grads_in(grads: tuple[Any, ...]) -> tuple[Any, ...]:
    # a `Tensor[]` op gets one list; an op returning a tuple of tensors gets them spread
    return tuple(grads[0]) if len(grads) == 1 and isinstance(grads[0], (list, tuple)) else grads


def autograd_fns(kernel: Any, backward: Callable[..., Any] | None,
                 setup_context: Callable[..., Any] | None) -> tuple[Any, Any]:
    """(backward, setup_context) for `CustomOpDef.register_autograd` of the kernel's ops."""
    n_inputs = len(kernel.params)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        if setup_context is not None:
            setup_context(ctx, inputs, _as_called(output))

    def bwd(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        if backward is None:
            raise KernelError(f"kernel `{kernel.name}` has no backward, and an input of this call "
                              "requires grad", None,
                              f"register one: `{kernel.name}.register_autograd(backward, "
                              "setup_context=...)`, or pass tensors that do not require grad")
        out = backward(ctx, *_grads_in(grads))
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(out) != n_inputs:
            raise ArgumentError(f"the backward of kernel `{kernel.name}` returned {len(out)} "
                                f"gradients for {n_inputs} inputs", None,
                                "return one per input, in order (None for scalars and for "
                                "tensors without a gradient)")
        return out

    return bwd, setup
