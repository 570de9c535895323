"""First calls in a fresh process, with an empty cache and then with the one an earlier process
left: the exported kernels under $KD_CACHE_DIR/jax_export (lowering/pallas/export_cache.py) and
JAX's persistent compilation cache under $KD_CACHE_DIR/jax (lowering/pallas/jax_cache.py).

    python benchmarks/fresh_process.py [--runs 3] [--json benchmarks/results/fresh_process.json]

Each run is a new Python process that imports torch and kernel_dsl (timed apart), then calls
library ops forward and backward once at small shapes on the Pallas CPU path (matmul, causal
flash attention, RMS norm): that is the "first calls" time. Run 1 starts from an empty cache
directory; runs 2.. reuse it. What stays after a warm start is work no cache holds: importing
JAX, kernel_dsl's tracing and rendering, and loading each kernel from the caches.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap

_CHILD = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import torch
    import kernel_dsl as kd
    from kernel_dsl import kernels as lib
    t1 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 128, 64, generator=g, requires_grad=True)
    x = torch.randn(64, 96, generator=g, requires_grad=True)
    w = torch.randn(96, 80, generator=g, requires_grad=True)
    lib.matmul(x, w).sum().backward()
    lib.flash_attention(q, q, q, causal=True).sum().backward()
    lib.rms_norm(x, torch.ones(96)).sum().backward()
    t2 = time.perf_counter()
    print(round(t1 - t0, 2), round(t2 - t1, 2))
""")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ns = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "KD_CACHE_DIR": d}
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.pop("KD_JAX_CACHE", None)
        for i in range(ns.runs):
            out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                                 text=True, check=True)
            imp, first = (float(v) for v in out.stdout.split())
            rows.append({"run": i + 1, "cache": "empty" if i == 0 else "warm", "import_s": imp,
                         "first_calls_s": first})
            print(rows[-1], flush=True)
    warm = sorted(r["first_calls_s"] for r in rows[1:])
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "runs": rows,
              "speedup": round(rows[0]["first_calls_s"] / warm[len(warm) // 2], 2) if warm else None}
    print(f"first calls: {rows[0]['first_calls_s']} s with an empty cache, "
          f"{warm} s warm: {result['speedup']}x")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
