"""Compile-only checks for real NVIDIA GPUs, on a machine without one (notes/triton.md).

Triton ships its own LLVM and ptxas, so a generated kernel compiles to PTX and a cubin for any
named architecture here. That proves the kernel is valid Triton for the GPU compiler (which is
stricter than the interpreter: power-of-two shapes, `tl.dot` operand sizes, loop-carried types)
and reports the shared memory it takes against the architecture's limit.
"""
from __future__ import annotations

import time
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from .. import Generated
from .runner import kernel_function, triton

# usable shared memory per block (KiB) by compute capability
SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024}


def compile_for_gpu(gen: Generated, arch: int = 90) -> dict[str, Any]:
    """Compiles for `sm_<arch>`. The report: ok, shared memory and its limit, whether the dots
    use tensor-core instructions (`mma`; `wgmma` on Hopper), seconds, and the error on failure."""
    fn = kernel_function(gen, interpret=False)
    sig = dict(gen.meta["signature"])
    # what a launch specializes on: torch's allocations are 16-byte aligned
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(sig))}
    t0 = time.perf_counter()
    try:
        compiled = triton.compile(
            ASTSource(fn=fn, signature=sig, constexprs={}, attrs=aligned),
            target=GPUTarget("cuda", arch, 32),
            options={"num_warps": gen.meta["num_warps"], "num_stages": gen.meta["num_stages"]})
    except Exception as e:  # the report carries the compiler's message
        return {"ok": False, "arch": arch, "error": f"{type(e).__name__}: {e}",
                "seconds": time.perf_counter() - t0}
    ptx = compiled.asm["ptx"]
    shared = int(compiled.metadata.shared)
    limit = SMEM_LIMIT.get(arch, 99 * 1024)
    return {"ok": shared <= limit, "arch": arch, "shared": shared, "shared_limit": limit,
            "mma": "mma" in ptx, "wgmma": "wgmma" in ptx, "seconds": time.perf_counter() - t0,
            "error": None if shared <= limit else f"shared memory {shared} B > {limit} B",
            "compiled": compiled}


def check_entries(gens: list[Generated], arch: int = 90) -> list[Any]:
    """`kernel.check(..., backend="triton")`: one CheckEntry per rendered target. Compiles run
    in this process (a Triton compile takes about a second; no timeout is enforced)."""
    from kernel_dsl.check import ERROR, CheckEntry  # the front end's report types

    out = []
    for gen in gens:
        r = compile_for_gpu(gen, arch)
        extra = {k: r[k] for k in ("arch", "shared", "shared_limit", "mma", "wgmma") if k in r}
        out.append(CheckEntry(target=gen.target, status="ok" if r["ok"] else "failed",
                              config=gen.config.to_json(), error_class=None if r["ok"] else ERROR,
                              message=r["error"] or "", compile_s=r["seconds"], stage="compile",
                              extra=extra))
    return out
