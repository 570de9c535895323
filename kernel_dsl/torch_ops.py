"""Each kernel as a `torch.library` custom op: one device-portable op per kernel.

`kernel_dsl::<name>` has one schema (tensor and scalar parameters in, `Tensor[]` out), fixed at
decoration so the op exists before any call, one SymInt-safe fake (the host code with `kd.tile`
loops skipped), and one implementation per device type, registered the torch.library way:

- cpu: the kernel through the CPU backend in force when it runs (`with kd.backend(...)`,
  `KD_BACKEND`, else Pallas interpret mode);
- privateuseone: TorchTPU's `jax_op` when the device is `tpu`, TorchNeuron's `nki_op` when it is
  `neuron`;
- cuda: the Triton kernel's `triton_op`.

So a graph that `torch.export` traces on one device names the same op as on any other, and runs
wherever the op has an implementation. Under `torch.compile` (not export) on tpu, neuron and
cuda, the router hands the graph that device's own op instead: Inductor launches a `triton_op`
itself (CUDA graphs, AOTInductor), and TorchTPU's and TorchNeuron's compilers see their own ops.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from . import amp, arguments, wide_ints
from .batching import per_element
from .bounded import Bounded
from .errors import ArgumentError
from .names import identifier
from .tpu_adapter import make_tpu_op, torch_tpu_loaded
from .tracing import user_loc
from .user_autograd import autograd_fns

# kernel_dsl/arguments.py; an enum goes by its member's name, a callable by an int handle
_SCHEMA_TYPES = {"Tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool",
                 "int[]": "SymInt[]", "Tensor?": "Tensor?", "str": "str", "enum": "str",
                 "callable": "int"}
_CPU_ONLY = ("Tensor?", "str", "enum", "callable")  # the device ops' signatures lack these yet
# The kernel library's own ops (kernels/*.py) share the namespace: a user kernel of one of these
# names gets a suffix, whichever is imported first (tests/test_library_configs.py keeps it true).
LIBRARY_OPS = frozenset(f"{op}{suffix}" for op in ("matmul", "flash_attention", "softmax",
                                                   "rms_norm", "layer_norm")
                        for suffix in ("", "_backward"))
_used_names: set[str] = set(LIBRARY_OPS)
_DEVICES = "supported devices: cpu, cuda (Triton), tpu through TorchTPU, neuron through TorchNeuron"


def _unique(name: str) -> str:
    base = identifier(name)  # torch's schema parser takes ASCII identifiers only
    out, i = base, 1
    while out in _used_names:
        i += 1
        out = f"{base}_{i}"
    _used_names.add(out)
    return out


class KernelOps:
    """The portable op of one kernel, its per-device ops, and the router between them."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.base = _unique(kernel.name)
        params = ", ".join(f"{_SCHEMA_TYPES[k]} {p.name}" for p, k in zip(kernel.params, kernel.kinds))
        self.schema = f"({params}) -> Tensor[]"
        self.first_tensor = next((i for i, k in enumerate(kernel.kinds) if k == "Tensor"), None)
        # (argument, kind, enum class) of the arguments the op takes in another form
        scope = getattr(kernel.fn, "__globals__", None)
        self.codecs = [(i, k, arguments.enum_class(p, scope)) for i, (p, k) in
                       enumerate(zip(kernel.params, kernel.kinds)) if k in arguments.ENCODED]
        self.has_callable = any(k == arguments.CALLABLE for k in kernel.kinds)
        if self.first_tensor is None:
            raise ArgumentError(f"kernel `{kernel.name}` has no tensor parameter", user_loc(),
                                "annotate tensor parameters with `torch.Tensor`")
        self.autograd = autograd_fns(kernel, None, None)  # until the user registers one
        self.qualname = f"kernel_dsl::{self.base}"
        self.op = self._portable_op()
        self.tpu: Any = None
        self.cuda: Any = None
        self.neuron: Any = None
        self.names = [p.name for p in kernel.params]
        self._host_dtypes: dict[tuple[Any, ...], tuple[torch.dtype, ...]] = Bounded()  # by arg_key
        self.wide_outputs = wide_ints.WideOutputs()
        # made now: a first call inside torch.compile cannot make it
        if torch_tpu_loaded() and not any(k in _CPU_ONLY for k in kernel.kinds):
            self.tpu_op()

    def register_autograd(self, backward: Callable[..., Any],
                          setup_context: Callable[..., Any] | None) -> None:
        self.autograd = autograd_fns(self.kernel, backward, setup_context)  # the portable op's too
        for op in (self.tpu, self.cuda, self.neuron):
            if op is not None:
                self._add_autograd(op)

    def _add_autograd(self, op: Any) -> None:
        if hasattr(op, "register_autograd"):  # a CustomOpDef (custom_op, jax_op, triton_op)
            backward, setup_context = self.autograd
            op.register_autograd(backward, setup_context=setup_context)

    def _dressed(self, op: Any) -> Any:
        """The kernel's autograd, vmap and autocast rules on one of its ops: the device ops run in
        place of the portable one under torch.compile, so they need the same rules."""
        self._add_autograd(op)
        if hasattr(op, "register_vmap"):
            op.register_vmap(per_element(self.kernel, op))
        if self.kernel.autocast is not None and hasattr(op, "_qualname"):
            amp.register(op._qualname, self.kernel.autocast)
        return op

    def decoded(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The kernel's arguments from the op's (`arguments.decode`)."""
        if not self.codecs:
            return args
        out = list(args)
        for i, kind, cls in self.codecs:
            out[i] = arguments.decode(kind, cls, out[i])
        return tuple(out)

    def encoded(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(args)
        for i, kind, _ in self.codecs:
            out[i] = arguments.encode(kind, out[i])
        return tuple(out)

    def fake(self, *args: Any) -> list[torch.Tensor]:
        args = self.decoded(args)
        self.kernel.note_dynamic(args)  # symbolic sizes under torch.compile: shape buckets
        outs = self.kernel.shapes_only(args)
        # the kernel's outputs live where its arguments do, also when the host code allocated
        # them without `device=` (torch.empty(n) is a cpu tensor there)
        dev = args[self.first_tensor].device
        return [o if o.device == dev else
                torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=dev) for o in outs]

    def device_fake(self, *args: Any) -> list[torch.Tensor]:
        """The device ops' fake: they return int32 where the host code allocates int64
        (wide_ints.py); which ones is noted for the router's widening under torch.compile."""
        outs = self.fake(*args)
        self.wide_outputs.note(args, outs)
        return wide_ints.int32_outputs(outs)

    def _portable_op(self) -> Any:
        """Defined with `torch.library.Library` rather than `custom_op`: the same schema, fake,
        autograd and vmap rules, without custom_op's Python layers around the body (its aliasing
        check among them). Measured on CPU: a bare custom_op call costs ~11 us against ~3 us, and
        a JAX kernel waited for inside a custom_op's body ~60 us more than outside it (cause not
        pinned down; not so under a Library op). Outputs never alias inputs, as custom_op checks:
        host code allocates every tensor a kernel returns (tracing.py `finish`)."""
        lib = self._lib = torch.library.Library("kernel_dsl", "FRAGMENT")
        lib.define(self.base + self.schema)
        name = self.qualname
        for device_type, impl in (("cpu", self._on_cpu), ("privateuseone", self._on_privateuse1),
                                  ("cuda", self._on_cuda)):
            torch.library.register_kernel(name, device_type, impl, lib=lib)  # runs outside Dynamo
        torch.library.register_fake(name, self.fake, lib=lib)
        # the rules are looked up per call: `register_autograd` may come after the op exists
        torch.library.register_autograd(name, self._backward, setup_context=self._setup_context,
                                        lib=lib)
        op = getattr(torch.ops.kernel_dsl, self.base).default
        torch.library.register_vmap(name, per_element(self.kernel, op), lib=lib)
        if self.kernel.autocast is not None:
            amp.register(name, self.kernel.autocast)
        return op

    def _setup_context(self, ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        self.autograd[1](ctx, self.decoded(tuple(inputs)), output)

    def _backward(self, ctx: Any, *grads: Any) -> Any:
        return self.autograd[0](ctx, *grads)

    # -- the portable op's implementations, one per device type ---------------------------------
    def _on_cpu(self, *args: Any) -> list[torch.Tensor]:
        return self.kernel.run_cpu(self.kernel.backend_name(), self.decoded(args))

    def _on_privateuse1(self, *args: Any) -> list[torch.Tensor]:
        return self._on_device(self._device_op(torch._C._get_privateuse1_backend_name()), args)

    def _on_cuda(self, *args: Any) -> list[torch.Tensor]:
        return self._on_device(self.cuda_op(), args)

    def _on_device(self, op: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
        """A device op (int32 in, the IR's dtypes out) as the portable op: int64 arguments
        narrowed and int64 outputs widened on the device (wide_ints.py)."""
        key = self.kernel.arg_key(args)
        want = self._host_dtypes.get(key)
        if want is None:
            want = self._host_dtypes[key] = wide_ints.host_dtypes(self.kernel, args)
        if torch.int64 not in want and not wide_ints.has_int64(args):
            return list(op(*args))
        return wide_ints.call(op, args, self.names, want)

    # -- the router (Kernel.__call__; Dynamo traces it) -----------------------------------------
    def route(self, args: tuple[Any, ...]) -> Callable[..., list[torch.Tensor]]:
        if not all(isinstance(a, (torch.Tensor, int, float, bool)) or (
                k != "Tensor" and arguments.check(k, a) is None)  # Dynamo cannot run user_loc
                for a, k in zip(args, self.kernel.kinds)):
            self.kernel._validate(args)  # a list or None for a tensor: named at the user's line
        device = args[self.first_tensor].device
        for a in args:
            if isinstance(a, torch.Tensor) and a.device != device:
                raise ArgumentError(f"kernel `{self.kernel.name}` got tensors on {device} and "
                                    f"{a.device}", user_loc(), "move all tensor arguments to one device")
        dev = device.type
        if dev == "cpu":
            if not self.codecs:
                return self.op
            if self.has_callable and torch.compiler.is_compiling():
                # the handle table changes from Python, which Dynamo cannot replay before the op
                # runs in its graph: the call runs outside the graph (a graph break)
                return torch._dynamo.disable(lambda *a: self.op(*self.encoded(a)))
            return lambda *a: self.op(*self.encoded(a))
        device_op = self._device_op(dev)  # made (or its error raised) at the user's call
        if not torch.compiler.is_compiling():
            if dev == "tpu":  # inside jax_op, a bad argument would fail deep in JAX's export
                self.kernel._validate(args)
            return self.op
        if torch.compiler.is_exporting() or wide_ints.has_int64(args):
            return self.op  # int64 arguments: the op whose body checks their range (wide_ints.py)
        return self._widening(device_op)

    def _widening(self, device_op: Any) -> Callable[..., list[torch.Tensor]]:
        """`device_op` with the outputs the host code makes int64 widened after it (traced by
        Dynamo: the graph holds the device op and an aten `to`)."""
        def call(*args: Any) -> list[torch.Tensor]:
            outs = list(device_op(*args))
            wide = self.wide_outputs.of(wide_ints.WideOutputs.key(args))  # noted by its fake
            return [o.to(torch.int64) if i in wide else o for i, o in enumerate(outs)]
        return call

    def _device_op(self, dev: str) -> Any:
        cpu_only = [p.name for p, k in zip(self.kernel.params, self.kernel.kinds) if k in _CPU_ONLY]
        if cpu_only:
            raise ArgumentError(f"kernel `{self.kernel.name}` takes {', '.join(cpu_only)} (None-able, "
                                f"str, enum or callable parameters), which run on cpu tensors only "
                                f"for now, not on `{dev}`", user_loc(),
                                "call it on cpu tensors, or make those parameters ints or tensors")
        if dev == "tpu":
            return self.tpu_op()
        if dev == "neuron":
            return self.neuron_op()
        if dev == "cuda":
            return self.cuda_op()
        raise ArgumentError(f"kernel `{self.kernel.name}` got tensors on device `{dev}`",
                            user_loc(), _DEVICES)

    def tpu_op(self) -> Any:
        if self.tpu is None:
            self.tpu = self._dressed(make_tpu_op(self))  # imports TorchTPU, JAX: on first use
        return self.tpu

    def neuron_op(self) -> Any:
        if self.neuron is None:
            from .lowering.nki.neuron import make_neuron_op  # TorchNeuron hosts only

            self.neuron = self._dressed(make_neuron_op(self))
        return self.neuron

    def cuda_op(self) -> Any:
        if self.cuda is None:
            from .lowering.triton.cuda import make_cuda_op  # imports triton: GPU hosts only

            self.cuda = self._dressed(make_cuda_op(self))
        return self.cuda


def make_ops(kernel: Any) -> KernelOps:
    return KernelOps(kernel)
