"""int64 tensors at the kernel boundary: narrowed to int32 on the way in, widened on the way out.

PyTorch's default integer dtype is int64 (`torch.randint`, `argmax`, `torch.long` labels and
token ids), but no backend computes in it: Mosaic has no 64-bit vector type, Trainium's engines
none either. So an int64 argument (or a host view of one) reaches the kernel as int32, an output
the host code allocates as int64 is an int32 buffer in the IR (`TensorParam.host_dtype == "i64"`)
widened after the kernel, and device code's `torch.int64` is int32 (docs/ir.md "Integer ops").
A value that int32 cannot hold raises rather than wrapping: narrowing is exact or refused.

On every route, where the tensors are:
- cpu: `wrap` around the CPU build (kernel_object.compiled).
- tpu, neuron, cuda: the device ops (`kernel_dsl::<name>_tpu` / `_neuron` / `_triton`) are int32
  ops: they take the kernel's int32 buffers and return the IR's dtypes, and their fake says so
  (`device_fake`: int32 where the host code allocates int64). The portable op's device
  implementation (torch_ops.KernelOps) narrows the arguments on the device (`narrowed`: one
  `aminmax` reduction and a `to(int32)` there; one bool crosses to the host, never the data),
  calls the device op and widens the outputs on the device (`call`). Its fake is the host
  code's, so int64 where the host code allocates int64.

The range check needs that bool on the host: a sync. What each mode does:
- eager (and `torch.export`, whose graphs hold the portable op): the portable op syncs and raises
  a DTypeError naming the argument, as on cpu.
- torch.compile with int64 arguments: the router puts the portable op in the graph, not the
  device op, so the check runs (and raises) when the graph runs. A compiled graph that must sync
  at the check has nothing to gain from Inductor launching the Triton kernel itself.
- torch.compile without int64 arguments (an argmax into a `torch.long` output): the device op
  stays in the graph and an aten `to(torch.int64)` follows it, which the compiler fuses; no check
  and no sync are needed. Which outputs to widen is recorded by the device op's fake when Dynamo
  runs it (`WideOutputs`) and read back as a constant.
- opcheck, autograd, vmap: the portable op's rules apply unchanged. Its fake is the host code's
  (int64 outputs), so opcheck's fake-vs-real comparison holds; a registered backward sees the
  int64 arguments as the user passed them (they take no gradient); vmap runs the portable op per
  element, each element narrowed as above. The device ops, int32 ops, pass opcheck on int32.
- inside a CUDA graph capture (`torch.cuda.graph`, Inductor's `mode="reduce-overhead"`) no sync
  is allowed: the check becomes `torch._assert_async`. A value outside int32 then still never
  wraps, but it fails as a CUDA device-side assert when the graph replays (which poisons the CUDA
  context), not as a DTypeError.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .errors import DTypeError
from .ir import KernelIR
from .tracing import user_loc

I32_MIN, I32_MAX = -2**31, 2**31 - 1


def narrowed(t: torch.Tensor, name: str) -> torch.Tensor:
    """`t` as int32, exactly, on its own device: a value outside int32 raises (an int64 index that
    big would be wrong silently after wrapping). One reduction runs where `t` is; only its
    out-of-range flag is read on the host (module docstring: the sync, and CUDA graphs)."""
    if t.numel() == 0:
        return t.to(torch.int32)
    lo, hi = torch.aminmax(t)
    bad = (lo < I32_MIN) | (hi > I32_MAX)
    if t.is_cuda and torch.cuda.is_current_stream_capturing():  # no sync allowed while capturing
        torch._assert_async(~bad, f"int64 argument `{name}` holds a value outside int32")
    elif bad:
        value = int(hi) if hi > I32_MAX else int(lo)
        raise DTypeError(f"int64 argument `{name}` holds {value}, outside int32", user_loc(),
                         "kernels compute in 32-bit integers and take int64 tensors whose "
                         "values fit int32 (indices, labels, offsets); split larger values on "
                         "host (e.g. into high and low int32 words)")
    return t.to(torch.int32)


def int32_outputs(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """A device op's fake from the host code's: its int64 outputs are int32 buffers."""
    return [torch.empty_like(o, dtype=torch.int32) if o.dtype == torch.int64 else o for o in outs]


def call(op: Callable[..., Any], args: tuple[Any, ...], names: list[str],
         want: tuple[torch.dtype, ...]) -> list[torch.Tensor]:
    """`op` (a device op) on `args` with their int64 tensors narrowed on the device, and its int32
    outputs widened, on the device, where the host code's dtype (`want`) is int64."""
    ts = [narrowed(a, n) if isinstance(a, torch.Tensor) and a.dtype == torch.int64 else a
          for a, n in zip(args, names)]
    outs = list(op(*ts))
    return [o.to(torch.int64) if w == torch.int64 and o.dtype == torch.int32 else o
            for o, w in zip(outs, want)]


def host_dtypes(kernel: Any, args: tuple[Any, ...]) -> tuple[torch.dtype, ...]:
    """The dtypes of the tensors the host code returns for `args`: its fake on fake stand-ins, so
    nothing is allocated and no device is touched."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    with unset_fake_temporarily(), FakeTensorMode() as mode:
        stand_ins = tuple(mode.from_tensor(torch.empty([int(d) for d in a.shape], dtype=a.dtype,
                                                       device="meta"))
                          if isinstance(a, torch.Tensor) else a for a in args)
        return tuple(o.dtype for o in kernel.shapes_only(stand_ins))


class WideOutputs:
    """Which outputs of a kernel's device op the host code makes int64, by argument dtypes.

    Under torch.compile the router widens a device op's outputs after it (module docstring). The
    device op's fake, which Dynamo runs as it records the call, notes them here; the router then
    reads them as a constant (`of`). Output dtypes are taken to depend on the arguments' dtypes
    and bool values only, not on sizes."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[Any, ...], tuple[int, ...]] = {}

    @staticmethod
    def key(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(a.dtype if isinstance(a, torch.Tensor) else a if isinstance(a, bool) else None
                     for a in args)

    def note(self, args: tuple[Any, ...], host_outs: list[torch.Tensor]) -> None:
        self._by_key[self.key(args)] = tuple(i for i, o in enumerate(host_outs)
                                             if o.dtype == torch.int64)

    def of(self, key: tuple[Any, ...]) -> tuple[int, ...]:
        return self._by_key.get(key, ())

    # what torch.compiler.assume_constant_result sets, without importing Dynamo (seconds) here:
    # Dynamo calls `of` while tracing and keeps its answer as a constant, with no guard
    of._dynamo_marked_constant = True  # type: ignore[attr-defined]


def wrap(ir: KernelIR, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a backend's compiled kernel: the IR's inputs in, its returned outputs out) taking
    int64 inputs and giving int64 outputs where the host code made them int64."""
    wide_in = [i for i, p in enumerate(ir.inputs) if p.host_dtype == "i64"]
    wide_out = [i for i, p in enumerate(ir.returns) if p.host_dtype == "i64"]
    if not wide_in and not wide_out:
        return fn
    names = [p.name for p in ir.inputs]

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        ts = list(tensors)
        for i in wide_in:
            if ts[i].dtype == torch.int64:
                ts[i] = narrowed(ts[i], names[i])
        outs = fn(*ts)
        outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
        for i in wide_out:
            outs[i] = outs[i].to(torch.int64)
        return outs

    run.inner = fn  # type: ignore[attr-defined]
    return run


def has_int64(args: tuple[Any, ...]) -> bool:
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.int64 for a in args)
