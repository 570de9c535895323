"""First-call latency of the library's DSL kernels, per backend: trace, render, build, first run.

    python benchmarks/first_call.py [--repeats 3] [--json benchmarks/results/first_call.json]

The library ops (matmul, flash attention forward and backward, softmax, RMS norm, layer norm) are
called once at small shapes, forward and backward, and every DSL kernel they launch is recorded
with its arguments. Then, per (kernel, backend CPU path), a fresh kernel object is traced,
rendered, built by the backend and run once, each stage timed; a second run of the built kernel
shows what is one-time and what is the (interpreted) kernel itself. `--repeats` fresh objects
give the spread (min-max of the total). For Pallas, the real TPU compile of the same kernel at
the same shape is timed too, with the config a tpu-v6e host would use (the shipped one where
there is one, else the default): libtpu's compile-only tpu-v6e target in the check worker
process (`kernel.check`, compile time only, not the VMEM measurement).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import torch

# cold builds: no kernel lowered or compiled by an earlier process (fresh_process.py and
# llama_block.py measure what the caches on disk save), at the exact, ragged shapes
os.environ["KD_JAX_CACHE"] = "0"
os.environ["KD_SHAPE_BUCKETS"] = "off"

import kernel_dsl as kd  # noqa: E402
from kernel_dsl import kernels as lib  # noqa: E402
from kernel_dsl.kernel_object import Kernel  # noqa: E402

BACKENDS = ("pallas", "nki", "triton")
TPU_TARGET = "tpu-v6e"


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def library_calls() -> dict[str, Any]:
    """Each library op at a small, ragged-where-it-matters shape: a function running fwd + bwd."""
    def attention() -> None:
        q, k, v = _r(1, 2, 200, 64), _r(1, 2, 200, 64), _r(1, 2, 200, 64)
        lib.flash_attention(q, k, v, causal=True).sum().backward()

    def matmul() -> None:
        lib.matmul(_r(256, 384), _r(384, 520)).sum().backward()

    def softmax() -> None:
        (lib.softmax(_r(64, 1000), -1) * torch.randn(64, 1000)).sum().backward()

    def rms_norm() -> None:
        (lib.rms_norm(_r(130, 768), _r(768), 1e-6) * torch.randn(130, 768)).sum().backward()

    def layer_norm() -> None:
        (lib.layer_norm(_r(130, 768), _r(768), _r(768), 1e-5) * torch.randn(130, 768)).sum().backward()

    return {"matmul 256x384x520": matmul, "flash attention 1x2x200x64 causal": attention,
            "softmax 64x1000": softmax, "rms_norm 130x768": rms_norm,
            "layer_norm 130x768": layer_norm}


def record_launches() -> list[tuple[str, Kernel, tuple[Any, ...]]]:
    """(op, kernel, args) of every distinct DSL kernel launch the library calls make."""
    seen: dict[tuple[Any, ...], tuple[str, Kernel, tuple[Any, ...]]] = {}
    real = Kernel.run_cpu
    current = [""]

    def recording(self: Kernel, backend_name: str, args: tuple[Any, ...], config: Any = None) -> Any:
        key = (current[0], self.name) + self.arg_key(args)  # matmul's backward: other shapes
        if key not in seen:
            seen[key] = (current[0], self, tuple(a.detach().clone() if isinstance(a, torch.Tensor)
                                                 else a for a in args))
        return real(self, backend_name, args, config)

    Kernel.run_cpu = recording  # type: ignore[method-assign]
    try:
        for op, run in library_calls().items():
            current[0] = op
            run()
    finally:
        Kernel.run_cpu = real  # type: ignore[method-assign]
    return list(seen.values())


def stages(kernel: Kernel, args: tuple[Any, ...], backend: str) -> dict[str, float]:
    """One first call of a fresh copy of `kernel`, split by stage (seconds)."""
    fresh = type(kernel)(kernel.fn)
    be = kd.lowering.get(backend)
    tensors = [a.contiguous() for a in args if isinstance(a, torch.Tensor)]
    t0 = time.perf_counter()
    ir = fresh.ir(*args)
    t1 = time.perf_counter()
    gen = fresh.generated(*args, backend=backend)
    t2 = time.perf_counter()
    fn = be.compile(gen, ir)
    t3 = time.perf_counter()
    fn(*tensors)
    t4 = time.perf_counter()
    fn(*tensors)
    t5 = time.perf_counter()
    return {"trace_s": t1 - t0, "render_s": t2 - t1, "build_s": t3 - t2, "first_run_s": t4 - t3,
            "second_run_s": t5 - t4, "total_s": t4 - t0}


def tpu_compile_s(kernel: Kernel, args: tuple[Any, ...]) -> float | None:
    report = type(kernel)(kernel.fn).check(*args, targets=[TPU_TARGET], measure_vmem=False)
    entry = report[TPU_TARGET]
    return entry.compile_s if entry.ok else None


def measure(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for op, kernel, args in record_launches():
        shapes = ", ".join("x".join(map(str, a.shape)) for a in args if isinstance(a, torch.Tensor))
        for backend in BACKENDS:
            runs = [stages(kernel, args, backend) for _ in range(repeats)]
            row = {"op": op, "kernel": kernel.name, "args": shapes, "backend": backend}
            for key in runs[0]:
                row[key] = round(statistics.median(r[key] for r in runs), 4)
            row["total_min_s"] = round(min(r["total_s"] for r in runs), 4)
            row["total_max_s"] = round(max(r["total_s"] for r in runs), 4)
            if backend == "pallas":
                row[f"{TPU_TARGET}_compile_s"] = tpu_compile_s(kernel, args)
            rows.append(row)
            print(f"{op:<36} {kernel.name:<28} {backend:<7} total {row['total_s']:.3f} s "
                  f"[{row['total_min_s']:.3f} - {row['total_max_s']:.3f}]", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ns = ap.parse_args()
    torch.manual_seed(0)
    res = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
                      f"torch {torch.__version__}, jax {__import__('jax').__version__}",
           "repeats": ns.repeats, "tpu_target": TPU_TARGET, "rows": measure(ns.repeats)}
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
