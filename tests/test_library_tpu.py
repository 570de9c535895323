"""Every library op compiles with the real TPU compiler (libtpu compile-only targets) for all
five TPU generations, at typical shapes, forward and backward, with the configs the library
picks there (the shipped ones).

The DSL kernels each op runs are recorded by calling the public functions and backward ops on
uninitialized CPU tensors with the kernel launches replaced by a recorder (shapes only, no
work), so exactly the specializations the library makes are compiled. One batched check: one
compile worker per target for all kernels.
"""
from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from kernel_dsl.kernels import base, flash_attention, layer_norm, matmul, rms_norm, softmax
from kernel_dsl.lowering.pallas.targets import TPU_TARGETS

pytestmark = pytest.mark.slow
BF = torch.bfloat16


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, tuple[Any, ...]]]:
    calls: list[tuple[Any, tuple[Any, ...]]] = []

    def launch(self: Any, *args: Any) -> Any:
        calls.append((self, tuple(torch.empty(a.shape, dtype=a.dtype, device="meta")
                                  if isinstance(a, torch.Tensor) else a for a in args)))
        outs = [torch.empty(o.shape, dtype=o.dtype) for o in self.shapes_only(args)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def runner(self: Any, args: tuple[Any, ...]) -> Any:  # launches prepared once per signature
        out = launch(self, *args)  # (kernels/matmul.py) take the kernel's runner directly
        return lambda *tensors: out if isinstance(out, tuple) else (out,)

    monkeypatch.setattr(base.LibraryKernel, "__call__", launch)
    monkeypatch.setattr(base.LibraryKernel, "cpu_runner", runner)
    mm = importlib.import_module("kernel_dsl.kernels.matmul")
    monkeypatch.setattr(mm, "_launches", {})  # nothing prepared before the recorder is in place
    monkeypatch.setattr(mm, "_checked", {})
    return calls


def _typical_calls() -> None:
    e = torch.empty
    # attention (B, H, Hkv, S, D=128): MHA and GQA, causal and not, forward and backward
    for b, h, hkv, s, causal in [(1, 8, 8, 512, False), (2, 16, 16, 2048, True),
                                 (8, 32, 8, 8192, True), (4, 32, 32, 4096, False)]:
        q, k = e(b, h, s, 128, dtype=BF), e(b, hkv, s, 128, dtype=BF)
        out, lse = flash_attention(q, k, k, causal=causal, return_lse=True)
        torch.ops.kernel_dsl.flash_attention_backward(out, q, k, k, out, lse, causal, 128 ** -0.5, 0)
    # matmul: a linear layer with bias and GELU, forward and backward
    x, w, bias = e(4, 2048, 4096, dtype=BF), e(4096, 4096, dtype=BF), e(4096, dtype=BF)
    y = matmul(x, w, bias=bias, activation="gelu")
    torch.ops.kernel_dsl.matmul_backward(y, x, w, bias, "gelu")
    # rows of 4096 hidden units (B*S = 8192)
    h, wn = e(8192, 4096, dtype=BF), e(4096, dtype=BF)
    for fn, args, bwd in [
        (lambda: torch.ops.kernel_dsl.rms_norm(h, wn, 1e-6), None, "rms"),
        (lambda: torch.ops.kernel_dsl.layer_norm(h, wn, wn, 1e-5), None, "ln"),
        (lambda: softmax(h, -1), None, "sm"),
    ]:
        out = fn()
        if bwd == "rms":
            torch.ops.kernel_dsl.rms_norm_backward(h, h, wn, out[1])
        elif bwd == "ln":
            torch.ops.kernel_dsl.layer_norm_backward(h, h, wn, wn, out[1], out[2])
        else:
            torch.ops.kernel_dsl.softmax_backward(h, h, 1)
    rms_norm(h, wn)
    layer_norm(h, wn, wn)


def test_every_op_compiles_for_every_tpu_target(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_dsl.lowering.pallas.check import Job, check

    calls = _record(monkeypatch)
    with torch.no_grad():
        _typical_calls()
    seen: dict[Any, tuple[Any, tuple[Any, ...]]] = {}
    for kernel, args in calls:
        seen.setdefault((kernel.name, kernel.arg_key(args)), (kernel, args))
    names = {k.name for k, _ in seen.values()}
    assert {"flash_attention_fwd", "flash_attention_bwd_dkv", "flash_attention_bwd_dq",
            "matmul_kernel", "column_sum", "rms_norm_fwd",
            "rms_norm_bwd_dx", "rms_norm_bwd_dw", "layer_norm_fwd", "layer_norm_bwd_dx",
            "layer_norm_bwd_dwb", "softmax_fwd", "softmax_bwd"} <= names
    jobs, labels = [], []
    for kernel, args in seen.values():
        ir = kernel.ir(*args)
        for target in TPU_TARGETS:
            gen = kernel.generated(*args, backend="pallas", target=target)
            jobs.append(Job(gen, [(p.shape, p.dtype) for p in ir.inputs], ir.loc))
            labels.append(f"{kernel.name} {[list(p.shape) for p in ir.inputs]} {target} {gen.config!r}")
    entries = check(jobs, timeout=600.0, measure_vmem=False)
    failed = [f"{lab}: {e.error_class}: {e.message.splitlines()[0][:200] if e.message else ''}"
              for lab, e in zip(labels, entries) if not e.ok]
    assert not failed, "\n".join(failed)
    assert len(entries) == len(seen) * len(TPU_TARGETS) >= 5 * 20
