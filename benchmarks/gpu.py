"""The Triton backend on one NVIDIA GPU (sized for an H200), and its CPU dry run for CI.

    python benchmarks/gpu.py [--json gpu_bench.json] [--budget 20]     # on a GPU
    python benchmarks/gpu.py --dry [--json gpu_bench.json]             # on CPU, correctness only

Measured, bf16 throughout:
- matmul at 4096^3 and 8192^3: the DSL matmul of tests/dsl_kernels.py against `torch.matmul`
  (cuBLAS);
- flash attention forward, B 4, H 32, S 4096, D 128, causal and not: the DSL kernel below against
  `F.scaled_dot_product_attention` (its flash backend);
- flash attention backward, same shapes: the library's `kernel_dsl.kernels.flash_attention`
  (autograd: its delta, dK/dV and dQ DSL kernels at their default Triton configs, untuned)
  against SDPA's backward; gradients checked against an f32 reference on a slice.

Each kernel is checked before it is timed: its error against an f32 reference must be at most twice
PyTorch's own bf16 error plus a small atol. Autotuning is a short measured search over a few
candidate configs within `--budget` seconds per kernel; a candidate must match PyTorch's output
before it can win. Timing: CUDA events around every call, warm-up first, the median of the
repeats, inputs rotated among fresh random sets (never zeros) whose total exceeds twice the L2
cache, so no call finds its operands cached. Results: a table on stdout and a JSON file.
`--dry` runs the same checks on tiny shapes through Triton's interpreter on CPU (no timing): it
proves the script, the kernels and the CUDA op's body work before a GPU is lent.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from dsl_kernels import matmul  # noqa: E402  (the test kernels, as offline_tpu.py imports them)

import kernel_dsl as kd  # noqa: E402
from kernel_dsl.lowering.triton.cuda import make_cuda_op  # noqa: E402
from kernel_dsl.lowering.triton.runner import compile_for_torch  # noqa: E402

LOG2E = 1.4426950408889634


# The one kernel of its own here: dsl_kernels.attention is the plain form (exp, scale applied
# separately); this is the form a GPU flash kernel takes (kd.dot into f32, exp2, folded scale).
@kd.kernel
def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Online-softmax attention forward (FlashAttention-2's loop): scores stay in f32 (kd.dot
    with an f32 accumulator), softmax in base 2 with the scale folded into one multiply."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    qk_scale = d ** -0.5 * LOG2E
    out = torch.empty_like(q)
    for tb, th, tq in kd.tile([b, h, sq], block_size=[1, 1, None]):
        qb = q[tb, th, tq, :]
        m_i = kd.full([tb, th, tq], float("-inf"), dtype=torch.float32)
        l_i = kd.zeros([tb, th, tq], dtype=torch.float32)
        acc = kd.zeros([tb, th, tq, d], dtype=torch.float32)
        for tk in kd.tile(skv):
            s0 = kd.zeros([tb, th, tq, tk], dtype=torch.float32)
            s = kd.dot(qb, k[tb, th, tk, :].transpose(-2, -1), acc=s0) * qk_scale
            if causal:  # bottom-right aligned, as flash-attention
                visible = tq.index[:, None] + (skv - sq) >= tk.index[None, :]
                s = torch.where(visible, s, float("-inf"))
            m_new = torch.maximum(m_i, s.amax(dim=-1))
            m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)
            p = torch.exp2(s - m_safe[..., None])
            alpha = torch.exp2(m_i - m_safe)
            l_i = l_i * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p.to(v.dtype) @ v[tb, th, tk, :]
            m_i = m_new
        l_safe = torch.where(l_i == 0.0, 1.0, l_i)
        out[tb, th, tq, :] = (acc / l_safe[..., None]).to(out.dtype)
    return out


MATMUL_CONFIGS = [  # block_sizes = [tm, tn, tk]
    kd.Config([128, 128, 64], num_warps=8, num_stages=3, group_m=8),
    kd.Config([128, 256, 64], num_warps=8, num_stages=3, group_m=8),
    kd.Config([256, 128, 64], num_warps=8, num_stages=3, group_m=8),
    kd.Config([128, 128, 64], num_warps=4, num_stages=4, group_m=8),
    kd.Config([128, 128, 32], num_warps=4, num_stages=5, group_m=8),
    kd.Config([64, 128, 64], num_warps=4, num_stages=4, group_m=8),
]
FLASH_CONFIGS = [  # block_sizes = [tq, tk]
    kd.Config([128, 64], num_warps=8, num_stages=2),
    kd.Config([128, 128], num_warps=8, num_stages=2),
    kd.Config([64, 64], num_warps=4, num_stages=3),
    kd.Config([128, 64], num_warps=4, num_stages=3),
    kd.Config([64, 128], num_warps=4, num_stages=2),
]
DRY_MATMUL_CONFIGS = [kd.Config([16, 32, 32], group_m=2), kd.Config([32, 16, 16], num_stages=2)]
DRY_FLASH_CONFIGS = [kd.Config([16, 32]), kd.Config([32, 16], num_warps=8)]


class Bench:
    """Shared state: device, mode, timing settings and the rows of the report."""

    def __init__(self, dry: bool, budget: float):
        self.dry = dry
        self.device = "cpu" if dry else "cuda"
        self.budget = budget
        self.rows: list[dict[str, Any]] = []
        self.l2 = 0 if dry else torch.cuda.get_device_properties(0).L2_cache_size

    # -- inputs and timing ------------------------------------------------------------------------
    def input_sets(self, make: Callable[[], tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Fresh random inputs: enough sets that rotating through them defeats the L2 cache."""
        first = make()
        nbytes = sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor))
        n = 1 if self.dry else max(2, math.ceil(2 * self.l2 / max(nbytes, 1)))
        return [first] + [make() for _ in range(n - 1)]

    def time_ms(self, fn: Callable[..., Any], sets: list[tuple[Any, ...]], reps: int,
                warmup: int = 3) -> float | None:
        """Median milliseconds of `fn(*inputs)` over `reps` calls, by CUDA events."""
        if self.dry:
            return None
        for i in range(warmup):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for i, (start, end) in enumerate(events):
            args = sets[i % len(sets)]
            start.record()
            fn(*args)
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)

    # -- our kernels for one config -----------------------------------------------------------------
    def build(self, kernel: Any, args: tuple[Any, ...], cfg: kd.Config) -> Callable[..., Any]:
        """The generated launcher for `cfg`: a GPU kernel, or interpreted on CPU in dry mode."""
        metas = tuple(torch.empty(a.shape, dtype=a.dtype, device="meta")
                      if isinstance(a, torch.Tensor) else a for a in args)
        gen = kernel.generated(*metas, backend="triton", config=cfg,
                               target="cpu" if self.dry else "cuda")
        run = compile_for_torch(gen, interpret=self.dry)
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

        def call(*a: Any) -> torch.Tensor:
            return run(*[a[i] for i in tensors])[0]
        return call

    def tune(self, kernel: Any, sets: list[tuple[Any, ...]], configs: list[kd.Config],
             want: torch.Tensor, tol: float) -> tuple[kd.Config | None, Callable[..., Any] | None,
                                                      list[dict[str, Any]]]:
        """Measures candidates within the budget; a candidate must match `want` to win."""
        t0 = time.perf_counter()
        best: tuple[float, kd.Config, Callable[..., Any]] | None = None
        tried: list[dict[str, Any]] = []
        for cfg in configs:
            if tried and time.perf_counter() - t0 > self.budget:
                break
            try:
                fn = self.build(kernel, sets[0], cfg)
                got = fn(*sets[0])
                err = float((got.float() - want.float()).abs().max())
                ok = err <= tol
                ms = self.time_ms(fn, sets, reps=10) if ok else None
            except Exception as e:  # a config that fails to compile or run is recorded, skipped
                tried.append({"config": cfg.to_json(), "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            tried.append({"config": cfg.to_json(), "ok": ok, "err_vs_torch": err, "ms": ms})
            if ok and (best is None or (ms or 0.0) < best[0]):
                best = (ms or 0.0, cfg, fn)
        if best is None:
            return None, None, tried
        return best[1], best[2], tried

    def row(self, **fields: Any) -> None:
        self.rows.append(fields)
        tf, ref_tf = fields.get("tflops"), fields.get("torch_tflops")
        ratio = f"{tf / ref_tf:.2f}" if tf and ref_tf else "-"
        fields["ratio"] = tf / ref_tf if tf and ref_tf else None
        print(f"{fields['name']:<26} {fields['shape']:<22} {_fmt(fields.get('ms')):>9} "
              f"{_fmt(fields.get('torch_ms')):>9} {_fmt(tf):>8} {_fmt(ref_tf):>8} {ratio:>6}  "
              f"{_ok(fields.get('correct')):<5} {fields.get('note', '')}", flush=True)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _ok(c: bool | None) -> str:
    return "-" if c is None else "ok" if c else "FAIL"


def _rand(*shape: int, device: str) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=torch.bfloat16)


# -- the benchmarks --------------------------------------------------------------------------------

def bench_matmul(b: Bench, n: int, m: int | None = None, k: int | None = None) -> None:
    m, k = m or n, k or n
    sets = b.input_sets(lambda: (_rand(m, k, device=b.device), _rand(k, n, device=b.device)))
    x, y = sets[0]
    ref = x.float() @ y.float()
    theirs = torch.matmul(x, y)
    err_torch = float((theirs.float() - ref).abs().max())
    tol = 2 * err_torch + 1e-2
    configs = DRY_MATMUL_CONFIGS if b.dry else MATMUL_CONFIGS
    cfg, fn, tried = b.tune(matmul, sets, configs, theirs, tol=2 * tol)
    flops = 2.0 * m * n * k
    shape = f"{m}x{k}x{n}"
    if fn is None:
        b.row(name="matmul bf16", shape=shape, correct=False, tried=tried, note="no config ran")
        return
    err = float((fn(x, y).float() - ref).abs().max())
    ms = b.time_ms(fn, sets, reps=30)
    torch_ms = b.time_ms(torch.matmul, sets, reps=30)
    b.row(name="matmul bf16", shape=shape, correct=err <= tol, err=err, err_torch=err_torch,
          ms=ms, torch_ms=torch_ms, tflops=ms and flops / ms / 1e9,
          torch_tflops=torch_ms and flops / torch_ms / 1e9, config=cfg.to_json() if cfg else None,
          tried=tried, note=f"config {cfg.to_json() if cfg else '-'}")


def _sdpa_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def bench_flash_fwd(b: Bench, bsz: int, h: int, s: int, d: int, causal: bool) -> None:
    sets = b.input_sets(lambda: tuple(_rand(bsz, h, s, d, device=b.device) for _ in range(3)))
    q, k, v = sets[0]
    hs = min(h, 4)  # the f32 reference on a slice: 4 heads of the first batch entry
    sl = (slice(0, 1), slice(0, hs))
    ref = _sdpa_ref(q[sl].float(), k[sl].float(), v[sl].float(), causal)
    theirs = _sdpa_ref(q, k, v, causal)
    err_torch = float((theirs[sl].float() - ref).abs().max())
    tol = 2 * err_torch + 1e-3
    configs = DRY_FLASH_CONFIGS if b.dry else FLASH_CONFIGS
    tuning_sets = [(qq, kk, vv, causal) for qq, kk, vv in sets]
    cfg, fn, tried = b.tune(flash_fwd, tuning_sets, configs, theirs, tol=2 * tol)
    flops = 4.0 * bsz * h * s * s * d * (0.5 if causal else 1.0)
    name = f"flash fwd {'causal' if causal else 'full'}"
    shape = f"B{bsz} H{h} S{s} D{d}"
    if fn is None:
        b.row(name=name, shape=shape, correct=False, tried=tried, note="no config ran")
        return
    err = float((fn(q, k, v, causal)[sl].float() - ref).abs().max())
    ms = b.time_ms(fn, tuning_sets, reps=20)
    torch_ms = b.time_ms(lambda qq, kk, vv, c: _sdpa_ref(qq, kk, vv, c), tuning_sets, reps=20)
    note = f"config {cfg.to_json() if cfg else '-'}"
    if causal:
        note += "; ours visits every key block (no early exit), flops count the visible half"
    b.row(name=name, shape=shape, correct=err <= tol, err=err, err_torch=err_torch, ms=ms,
          torch_ms=torch_ms, tflops=ms and flops / ms / 1e9,
          torch_tflops=torch_ms and flops / torch_ms / 1e9, config=cfg.to_json() if cfg else None,
          tried=tried, note=note)


def bench_flash_bwd(b: Bench, bsz: int, h: int, s: int, d: int, causal: bool) -> None:
    """The library's flash attention backward (what a training step runs) against SDPA's."""
    from kernel_dsl import kernels as lib

    sets = b.input_sets(lambda: tuple(_rand(bsz, h, s, d, device=b.device).requires_grad_()
                                      for _ in range(3)) + (_rand(bsz, h, s, d, device=b.device),))

    def backward(o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 do: torch.Tensor) -> Any:
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    q, k, v, do = sets[0]
    sl = (slice(0, 1), slice(0, min(h, 4)))  # the f32 reference on 4 heads of the first batch
    qf, kf, vf = (t[sl].detach().float().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(_sdpa_ref(qf, kf, vf, causal), (qf, kf, vf), do[sl].float())

    def error(grads: Any) -> float:
        return max(float((g[sl].float() - r).abs().max()) for g, r in zip(grads, ref))

    theirs = [(_sdpa_ref(q, k, v, causal), q, k, v, do) for q, k, v, do in sets]
    err_torch = error(backward(*theirs[0]))
    tol = 2 * err_torch + 1e-2
    torch_ms = b.time_ms(backward, theirs, reps=20)
    flops = 2.5 * 4.0 * bsz * h * s * s * d * (0.5 if causal else 1.0)
    name, shape = f"flash bwd {'causal' if causal else 'full'}", f"B{bsz} H{h} S{s} D{d}"
    try:
        ours = [(lib.flash_attention(q, k, v, causal=causal), q, k, v, do) for q, k, v, do in sets]
        err = error(backward(*ours[0]))
        ms = b.time_ms(backward, ours, reps=20)
    except Exception as e:  # recorded, not fatal: the other rows still stand
        b.row(name=name, shape=shape, correct=False, torch_ms=torch_ms,
              torch_tflops=torch_ms and flops / torch_ms / 1e9,
              note=f"ours failed: {type(e).__name__}: {str(e)[:200]}")
        return
    b.row(name=name, shape=shape, correct=err <= tol, err=err, err_torch=err_torch, ms=ms,
          torch_ms=torch_ms, tflops=ms and flops / ms / 1e9,
          torch_tflops=torch_ms and flops / torch_ms / 1e9,
          note="library flash_attention backward, default Triton configs (not tuned)")


def check_cuda_op(b: Bench) -> None:
    """The `triton_op` route: eagerly, and (on a GPU) under torch.compile with Inductor."""
    x, y = _rand(300, 200, device=b.device), _rand(200, 170, device=b.device)
    op = make_cuda_op(matmul._ops, interpret=b.dry, name="bench_matmul_triton" + ("_interp" if b.dry else ""))
    want = (x.float() @ y.float())
    err = float((op(x, y)[0].float() - want).abs().max())
    ok = err < 0.5
    note = "triton_op eager"
    if not b.dry:
        try:
            t0 = time.perf_counter()
            f = torch.compile(lambda a, c: op(a, c)[0] * 2, fullgraph=True)
            err_c = float((f(x, y).float() / 2 - want).abs().max())
            ok = ok and err_c < 0.5
            note += f"; torch.compile(fullgraph) with Inductor ok ({time.perf_counter() - t0:.0f} s)"
        except Exception as e:  # reported, not fatal: the timings above still stand
            ok = False
            note += f"; torch.compile failed: {type(e).__name__}: {str(e)[:200]}"
    b.row(name="cuda op route", shape="300x200x170", correct=ok, err=err, note=note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="CPU, tiny shapes, interpreter, no timing")
    ap.add_argument("--json", default="gpu_bench.json", help="where to write the results")
    ap.add_argument("--budget", type=float, default=20.0, help="autotuning seconds per kernel")
    ns = ap.parse_args(argv)
    if not ns.dry and not torch.cuda.is_available():
        print("gpu.py: no CUDA device; run with --dry for the CPU correctness check", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    b = Bench(ns.dry, ns.budget)
    t0 = time.perf_counter()
    device = "cpu (Triton interpreter, correctness only)" if ns.dry else torch.cuda.get_device_name(0)
    print(f"kernel_dsl Triton backend benchmark on {device}; bf16")
    print(f"{'kernel':<26} {'shape':<22} {'ours ms':>9} {'torch ms':>9} {'ours TF':>8} "
          f"{'torch TF':>8} {'ratio':>6}  check note")
    if ns.dry:
        bench_matmul(b, 80, m=67, k=96)
        for causal in (False, True):
            bench_flash_fwd(b, 1, 2, 80, 32, causal)
        with kd.backend("triton"):  # the library's kernels through Triton's interpreter
            for causal in (False, True):
                bench_flash_bwd(b, 1, 2, 80, 32, causal)
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        for n in (4096, 8192):
            bench_matmul(b, n)
        for causal in (False, True):
            bench_flash_fwd(b, 4, 32, 4096, 128, causal)
        for causal in (False, True):
            bench_flash_bwd(b, 4, 32, 4096, 128, causal)
    check_cuda_op(b)
    total = time.perf_counter() - t0
    print(f"total {total:.1f} s. TF = TFLOP/s; ratio = ours / torch.")
    result = {"mode": "dry" if ns.dry else "gpu", "device": device, "seconds": total,
              "torch": torch.__version__, "python": platform.python_version(), "rows": b.rows}
    with open(ns.json, "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    bad = [r["name"] for r in b.rows if r.get("correct") is False]
    if bad:
        print(f"FAILED checks: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
