"""The analytical VMEM estimate against the VMEM the real TPU compiler needs.

    python benchmarks/vmem_estimate.py [--target tpu-v6e] [--out benchmarks/vmem_estimate.md]

For each (kernel, shape, config) the kernel is compiled with libtpu's compile-only target and
its VMEM need measured: the smallest `vmem_limit_bytes` the compiler accepts, to within 3% or
24 KiB (lowering/pallas/vmem_search.py: overflow messages guide the search, but a message can
report less or more than the kernel needs). The estimate is
`lowering/pallas/vmem.py`. Writes a markdown table and prints the summary.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from dsl_kernels import attention, layer_norm, matmul, softmax_rows, softmax_two_pass  # noqa: E402

import kernel_dsl as kd  # noqa: E402

E, BF = torch.empty, torch.bfloat16
CASES = [
    *[("matmul bf16 2048^3", matmul, (E(2048, 2048, dtype=BF), E(2048, 2048, dtype=BF)),
       kd.Config(list(b), loop_mode="grid"))
      for b in [(128, 128, 128), (256, 256, 256), (512, 256, 512), (256, 512, 1024),
                (512, 512, 512), (1024, 1024, 512), (512, 1024, 1024), (1024, 1024, 1024)]],
    *[("matmul f32 1024^3", matmul, (E(1024, 1024), E(1024, 1024)), kd.Config(list(b), loop_mode=m))
      for b, m in [((128, 128, 128), "grid"), ((256, 512, 256), "grid"), ((128, 256, 256), "inner"),
                   ((256, 256, 512), "inner")]],
    *[("softmax_rows f32 1024x4096", softmax_rows, (E(1024, 4096),), kd.Config([b])) for b in (8, 64, 256)],
    *[("softmax_two_pass bf16 1024x8192", softmax_two_pass, (E(1024, 8192, dtype=BF),),
       kd.Config([bm, bn, bn], loop_mode=m))
      for bm, bn, m in [(16, 512, "grid"), (64, 1024, "grid"), (128, 2048, "grid"), (64, 512, "inner")]],
    *[("layer_norm f32 2048x2048", layer_norm, (E(2048, 2048), E(2048), E(2048), 1e-5), kd.Config([b]))
      for b in (8, 128, 512)],
    *[("attention bf16 1x8x2048x128", attention, (E(1, 8, 2048, 128, dtype=BF),) * 3 + (True,),
       kd.Config([bq, bk], loop_mode=m))
      for bq, bk, m in [(128, 128, "grid"), (256, 512, "grid"), (512, 512, "grid"), (128, 256, "inner")]],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target", default="tpu-v6e")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "vmem_estimate.md"))
    ns = ap.parse_args()
    rows, errs = [], []
    t0 = time.time()
    for name, kernel, args, cfg in CASES:
        r = kernel.check(*args, targets=[ns.target], config=cfg)
        e = r.entries[0]
        if not e.ok:
            rows.append(f"| {name} | `{cfg!r}` | {e.vmem_estimate / 2**20:.2f} | {e.status}: "
                        f"{e.error_class} ({' '.join(e.message.split())[:80]}) | |")
            continue
        if e.vmem_used is None:  # the compiler accepts any limit: nothing to compare with
            rows.append(f"| {name} | `{cfg!r}` | {e.vmem_estimate / 2**20:.2f} | any limit | |")
            continue
        err = (e.vmem_estimate - e.vmem_used) / e.vmem_used
        errs.append(err)
        rows.append(f"| {name} | `{cfg!r}` | {e.vmem_estimate / 2**20:.2f} | "
                    f"{e.vmem_used / 2**20:.2f} | {err:+.0%} |")
        print(rows[-1], flush=True)
    if not errs:
        raise SystemExit("no config compiled with a VMEM figure: " + "; ".join(rows))
    abs_errs = sorted(abs(x) for x in errs)
    summary = (f"{len(errs)} configs measured on {ns.target} in {time.time() - t0:.0f} s; "
               f"|error| median {statistics.median(abs_errs):.0%}, max {abs_errs[-1]:.0%}; "
               f"estimate >= compiler in {sum(x >= 0 for x in errs)} of {len(errs)}")
    text = "\n".join([
        "# VMEM: analytical estimate vs the TPU compiler",
        "",
        f"Command: `python benchmarks/vmem_estimate.py --target {ns.target}` (libtpu compile-only "
        "target on a CPU-only 2-core x86 machine). Compiler figure: the smallest vmem_limit_bytes "
        "libtpu accepts, to within 3% or 24 KiB; it does not vary between runs.",
        "",
        summary,
        "",
        "| kernel | config | estimate MiB | compiler MiB | error |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])
    with open(ns.out, "w") as f:
        f.write(text)
    print(summary)


if __name__ == "__main__":
    main()
