"""Each kernel as `torch.library` custom ops: one per backend family, one shared fake.

The schema is fixed at decoration (tensor and scalar parameters in, `Tensor[]` out), so the ops
exist before any call and `torch.compile` sees them without a graph break. A plain Python branch
on the input device picks the op (notes/torch.md).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import lowering
from .errors import ArgumentError
from .tpu_adapter import make_tpu_op, torch_tpu_loaded
from .tracing import user_loc

_SCHEMA_TYPES = {"Tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool"}
_used_names: set[str] = set()


def _unique(name: str) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    out, i = base, 1
    while out in _used_names:
        i += 1
        out = f"{base}_{i}"
    _used_names.add(out)
    return out


class KernelOps:
    """The custom ops of one kernel and the router between them."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.base = _unique(kernel.name)
        params = ", ".join(f"{_SCHEMA_TYPES[k]} {p.name}" for p, k in zip(kernel.params, kernel.kinds))
        self.schema = f"({params}) -> Tensor[]"
        self.first_tensor = next((i for i, k in enumerate(kernel.kinds) if k == "Tensor"), None)
        if self.first_tensor is None:
            raise ArgumentError(f"kernel `{kernel.name}` has no tensor parameter", user_loc(),
                                "annotate tensor parameters with `torch.Tensor`")
        self.cpu = {name: self._cpu_op(name) for name in lowering.names()}
        self.tpu: Any = None
        self.cuda: Any = None
        self.neuron: Any = None
        if torch_tpu_loaded():  # made now: a first call inside torch.compile cannot make it
            self.tpu_op()

    def fake(self, *args: Any) -> list[torch.Tensor]:
        return self.kernel.shapes_only(args)

    def _cpu_op(self, backend_name: str) -> Any:
        kernel = self.kernel

        def impl(*args: Any) -> list[torch.Tensor]:
            return kernel.run_cpu(backend_name, args)

        op = torch.library.custom_op(f"kernel_dsl::{self.base}_{backend_name}", impl,
                                     mutates_args=(), device_types="cpu", schema=self.schema)
        op.register_fake(self.fake)
        return op

    def route(self, args: tuple[Any, ...]) -> Callable[..., list[torch.Tensor]]:
        device = args[self.first_tensor].device
        for a in args:
            if isinstance(a, torch.Tensor) and a.device != device:
                raise ArgumentError(f"kernel `{self.kernel.name}` got tensors on {device} and "
                                    f"{a.device}", user_loc(), "move all tensor arguments to one device")
        dev = device.type
        if dev == "cpu":
            return self.cpu[self.kernel.backend_name()]
        if dev == "tpu":
            op = self.tpu_op()
            if not torch.compiler.is_compiling():  # inside the op, JAX would see only arrays
                self.kernel._validate(args)
            return op
        if dev == "neuron":
            return self.neuron_op()
        if dev == "cuda":
            if self.cuda is None:
                from .lowering.triton.cuda import make_cuda_op  # imports triton: GPU hosts only

                self.cuda = make_cuda_op(self)
            return self.cuda
        raise ArgumentError(f"kernel `{self.kernel.name}` got tensors on device `{dev}`",
                            user_loc(), "supported devices: cpu, cuda (Triton), tpu through "
                            "TorchTPU, neuron through TorchNeuron")

    def neuron_op(self) -> Any:
        if self.neuron is None:
            from .lowering.nki.neuron import make_neuron_op  # TorchNeuron hosts only

            self.neuron = make_neuron_op(self)
        return self.neuron

    def tpu_op(self) -> Any:
        if self.tpu is None:
            self.tpu = make_tpu_op(self)  # imports TorchTPU and JAX: only on first use
        return self.tpu


def make_ops(kernel: Any) -> KernelOps:
    return KernelOps(kernel)
