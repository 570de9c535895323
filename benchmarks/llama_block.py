"""A Llama decoder block's training step, built from the library ops, against the same block in torch.

    python benchmarks/llama_block.py [--json benchmarks/results/llama_block.json] [--quick]

The block: RMS norm, q/k/v/o projections, RoPE (torch), causal grouped-query flash attention,
RMS norm, a SiLU-gated MLP (gate with the matmul's silu epilogue, the product in torch). One
step is forward, a loss, backward and an SGD update. Everything runs on this machine's CPU, the
library's kernels on the Pallas CPU path (interpret mode), so the step-time ratios say what the
CPU path costs against torch's own kernels, not what a TPU does.

Measured:
1. Step time, eager and under `torch.compile(dynamic=True)` (aot_eager: Inductor would compile
   torch's side into C++ while ours stays interpreted), ours / torch, at one sequence length.
2. Kernel builds per new sequence length, with shape buckets ("pow2", the default) and without
   ("off"), eagerly and compiled: the sum of `stats["compiles"]` over the library's kernels.
3. The first training step of a fresh process with an empty cache directory, then of a second
   fresh process that finds the first one's cache (JAX's persistent compilation cache).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

import kernel_dsl as kd
from kernel_dsl import kernels as lib
from kernel_dsl.kernels import KERNELS

DIMS = {"hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 32, "mlp": 344, "batch": 1}


def params(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, d, hq, hkv, f = (DIMS[k] for k in ("hidden", "head_dim", "heads", "kv_heads", "mlp"))

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).requires_grad_()

    return {"n1": torch.ones(h, requires_grad=True), "n2": torch.ones(h, requires_grad=True),
            "wq": w(h, hq * d), "wk": w(h, hkv * d), "wv": w(h, hkv * d), "wo": w(hq * d, h),
            "wg": w(h, f), "wu": w(h, f), "wd": w(f, h)}


def _rope(x: torch.Tensor) -> torch.Tensor:
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.arange(s, dtype=torch.float32)[:, None] * inv[None]
    cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def block(x: torch.Tensor, p: dict[str, torch.Tensor], ours: bool) -> torch.Tensor:
    b, s, h = x.shape
    hq, hkv, d = DIMS["heads"], DIMS["kv_heads"], DIMS["head_dim"]
    if ours:
        norm = lambda t, w: lib.rms_norm(t, w, 1e-6)  # noqa: E731
        mm = lambda t, w, act=None: lib.matmul(t, w, activation=act)  # noqa: E731
    else:
        norm = lambda t, w: F.rms_norm(t, (h,), w, 1e-6)  # noqa: E731
        mm = lambda t, w, act=None: F.silu(t @ w) if act else t @ w  # noqa: E731
    a = norm(x, p["n1"])
    q = _rope(mm(a, p["wq"]).view(b, s, hq, d).transpose(1, 2))
    k = _rope(mm(a, p["wk"]).view(b, s, hkv, d).transpose(1, 2))
    v = mm(a, p["wv"]).view(b, s, hkv, d).transpose(1, 2)
    if ours:
        o = lib.flash_attention(q, k, v, causal=True)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + mm(o.transpose(1, 2).reshape(b, s, hq * d), p["wo"])
    m = norm(x, p["n2"])
    return x + mm(mm(m, p["wg"], "silu") * mm(m, p["wu"]), p["wd"])


def step_fn(p: dict[str, torch.Tensor], ours: bool, compiled: bool) -> Callable[[torch.Tensor], float]:
    fwd: Callable[..., torch.Tensor] = lambda x: block(x, p, ours).square().mean()  # noqa: E731
    if compiled:
        fwd = torch.compile(fwd, backend="aot_eager", dynamic=True)

    def step(x: torch.Tensor) -> float:
        loss = fwd(x)
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= 1e-3 * t.grad
                t.grad = None
        return float(loss.detach())

    return step


def _x(s: int) -> torch.Tensor:
    return torch.randn(DIMS["batch"], s, DIMS["hidden"], generator=torch.Generator().manual_seed(s))


def builds() -> int:
    return sum(k.stats["compiles"] for k in KERNELS.values())


def step_times(seq: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": seq}
    for mode in ("eager", "compiled"):
        times = {}
        for ours in (True, False):
            step = step_fn(params(), ours, mode == "compiled")
            step(_x(seq))
            step(_x(seq))  # warm: builds, compiles
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                step(_x(seq))
                ts.append(time.perf_counter() - t0)
            times["ours" if ours else "torch"] = statistics.median(ts)
        out[mode] = {"ours_s": times["ours"], "torch_s": times["torch"],
                     "ratio": times["ours"] / times["torch"]}
    return out


def _forget_builds() -> None:
    for k in KERNELS.values():
        k._compiled.clear()


def builds_per_length(lengths: list[int]) -> dict[str, Any]:
    """Each configuration starts with no kernel built in this process."""
    out: dict[str, Any] = {"lengths": lengths}
    for policy in ("pow2", "off"):
        for mode in ("eager", "compiled"):
            _forget_builds()
            with kd.shape_buckets(policy):
                step = step_fn(params(), True, mode == "compiled")
                counts, secs = [], []
                for s in lengths:
                    b0, t0 = builds(), time.perf_counter()
                    step(_x(s))
                    counts.append(builds() - b0)
                    secs.append(round(time.perf_counter() - t0, 2))
            out[f"{policy}_{mode}"] = {"builds": counts, "step_s": secs}
    return out


_CHILD = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {here!r})
import llama_block as lb
t1 = time.perf_counter()
lb.step_fn(lb.params(), True, False)(lb._x({seq}))
t2 = time.perf_counter()
print(round(t1 - t0, 2), round(t2 - t1, 2), lb.builds())
"""


def fresh_processes(seq: int, runs: int) -> list[dict[str, Any]]:
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KD_CACHE_DIR": cache, "PYTHONWARNINGS": "ignore"}
        env.pop("KD_JAX_CACHE", None)
        for i in range(runs):
            res = subprocess.run([sys.executable, "-c", _CHILD.format(here=here, seq=seq)],
                                 env=env, capture_output=True, text=True, check=True)
            imp, first, n = res.stdout.split()[-3:]
            rows.append({"run": i + 1, "cache": "empty" if i == 0 else "warm",
                         "import_s": float(imp), "first_step_s": float(first),
                         "kernel_builds": int(n)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer lengths and repeats")
    ap.add_argument("--seq", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    lengths = [100, 110, 127] if a.quick else [100, 110, 120, 127, 128, 129, 200]
    res = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                      f"{platform.python_version()}, torch {torch.__version__}",
           "dims": DIMS,
           "fresh_process": fresh_processes(a.seq, 2 if a.quick else 3),
           "step": step_times(a.seq, 2 if a.quick else a.repeats),
           "builds": builds_per_length(lengths)}
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
