"""kernel_dsl and Helion side by side: one kernel source, both projects, Pallas interpret on CPU.

    pip install helion          # benchmark-only; not a dependency of kernel_dsl
    python benchmarks/helion_side_by_side.py [--json benchmarks/results/helion_side_by_side.json]
                                             [--autotune-budget 120] [--skip-autotune]

Every kernel below is written once, in Helion's own style (its examples' idioms), with the
language module named `lang`; the script writes it out twice, with `lang` bound to
`helion.language` under `@helion.kernel`, and to `kernel_dsl` under `@kd.kernel`. The source
is byte-for-byte the same in both, which is the porting claim: rename `hl.` to `kd.`.

Each project runs in fresh processes (HELION_BACKEND=pallas, HELION_PALLAS_INTERPRET=1; ours
runs its Pallas CPU path, which is interpret mode too). Figures per kernel and project:
- first call: the first call's wall time in a fresh process (trace, lower, compile and run),
  after imports; `import s` is the import of the project and JAX.
- cached call: the median wall time of later calls with the same shapes.
- autotune: wall time of each project's autotuner to a result on CPU under the same budget
  (ours: `kernel.autotune(target="cpu", budget=B)`, timing configs in the interpreter; Helion:
  `autotune_effort="quick"`, `autotune_budget_seconds=B`), and the configs it tried.
- lines: the kernel's non-blank source lines (the same by construction; listed to show it).
Every result is checked against torch before it counts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import version
from typing import Any

KERNELS = '''
@kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in lang.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in lang.tile(n):
        values = x[tile_n, :]
        amax = torch.amax(values, dim=1, keepdim=True)
        exp = torch.exp(values - amax)
        out[tile_n, :] = exp / torch.sum(exp, dim=1, keepdim=True)
    return out


@kernel
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in lang.tile(m):
        acc = x[tile_m, :].to(torch.float32)
        mean = torch.mean(acc, dim=-1, keepdim=True)
        centered = acc - mean
        var = torch.mean(centered * centered, dim=-1, keepdim=True)
        normed = centered * torch.rsqrt(var + 1e-5)
        out[tile_m, :] = (normed * weight[:].to(torch.float32)
                          + bias[:].to(torch.float32)).to(x.dtype)
    return out


@kernel
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _k, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in lang.tile([m, n]):
        acc = lang.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in lang.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(x.dtype)
    return out


@kernel
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    bh, m, d = q.size()
    n = k.size(1)
    out = torch.empty_like(q)
    for tile_b, tile_m in lang.tile([bh, m]):
        m_i = lang.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = lang.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = lang.zeros([tile_b, tile_m, d], dtype=torch.float32)
        qb = q[tile_b, tile_m, :]
        for tile_n in lang.tile(n):
            qk = torch.matmul(qb, k[tile_b, tile_n, :].transpose(1, 2)) * 0.125
            m_ij = torch.maximum(m_i, torch.amax(qk, -1))
            p = torch.exp(qk - m_ij[:, :, None])
            alpha = torch.exp(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = acc * alpha[:, :, None] + torch.matmul(p.to(v.dtype), v[tile_b, tile_n, :])
            m_i = m_ij
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out
'''

HEADERS = {
    "kernel_dsl": "import torch\nimport kernel_dsl as lang\nkernel = lang.kernel\n",
    "helion": ("import torch\nimport helion\nimport helion.language as lang\n"
               "kernel = helion.kernel(autotune_effort='none')\n"),
}

# One process per (project, kernel): imports, inputs, first call, cached calls, a torch check.
RUN = r'''
import json, os, statistics, sys, time
t0 = time.perf_counter()
import torch
import {module} as mod
import_s = time.perf_counter() - t0
torch.manual_seed(0)
name = {kernel!r}
q, k, v = (torch.randn(4, 128, 64) for _ in range(3))
x, y, w, b = torch.randn(256, 512), torch.randn(256, 512), torch.randn(512), torch.randn(512)
cases = {{
    "add": ((x, y), lambda: x + y),
    "softmax": ((x,), lambda: torch.softmax(x, 1)),
    "layer_norm": ((x, w, b), lambda: torch.nn.functional.layer_norm(x, (512,), w, b)),
    "matmul": ((x, y.T.contiguous()), lambda: x @ y.T),
    "attention": ((q, k, v), lambda: torch.softmax(q @ k.transpose(1, 2) * 0.125, -1) @ v),
}}
args, ref = cases[name]
fn = getattr(mod, name)
t = time.perf_counter(); out = fn(*args); first = time.perf_counter() - t
torch.testing.assert_close(out, ref(), rtol=1e-4, atol=1e-4)
calls = int(os.environ["SBS_CALLS"])
ts = []
for _ in range(calls):
    t = time.perf_counter(); fn(*args); ts.append(time.perf_counter() - t)
print("RESULT " + json.dumps({{"import_s": import_s, "first_s": first,
                              "cached_ms": statistics.median(ts) * 1e3, "calls": calls}}))
'''

# Autotuning to a result under one budget, then the winner checked against torch.
TUNE = r'''
import json, os, sys, time
import torch
budget = int(os.environ["SBS_BUDGET"])
x, y = torch.randn(256, 512), torch.randn(512, 384)
if {project!r} == "helion":
    import helion, helion.language as hl
    sys.path.insert(0, os.environ["SBS_DIR"])
    import helion_kernels as src
    fn = helion.kernel(src.{kernel}.fn, autotune_effort="quick", autotune_budget_seconds=budget)
    t = time.perf_counter(); out = fn(x, y) if {kernel!r} == "matmul" else fn(x, x)
    seconds = time.perf_counter() - t
    tried = None
else:
    import kernel_dsl_kernels as src
    k = src.{kernel}
    a = (x, y) if {kernel!r} == "matmul" else (x, x)
    t = time.perf_counter(); res = k.autotune(*a, target="cpu", budget=budget, use_cache=False)
    seconds = time.perf_counter() - t
    tried = len(res.candidates)
    out = k(*a)
ref = x @ y if {kernel!r} == "matmul" else x + x
torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
print("RESULT " + json.dumps({{"seconds": seconds, "configs_tried": tried}}))
'''


def _env(directory: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "HELION_BACKEND": "pallas", "HELION_PALLAS_INTERPRET": "1",
           "JAX_PLATFORMS": "cpu",  # else Helion's autotuner starts libtpu's profiler plugin: SIGSEGV
           "PYTHONPATH": directory + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "KD_CACHE_DIR": os.path.join(directory, "kd_cache"), "KD_JAX_CACHE": "0",
           "PYTHONWARNINGS": "ignore", **extra}
    return env


def _run(code: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout:.0f} s"}
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    lines = res.stderr.strip().splitlines() or ["(no output)"]
    errors = [ln for ln in lines if "Error" in ln.split(":")[0] or "SIGSEGV" in ln]
    return {"error": (errors or lines)[-1][:300], "returncode": res.returncode}


def _lines(name: str) -> int:
    block = KERNELS.split("@kernel\n")
    src = next(b for b in block if b.startswith(f"def {name}("))
    return sum(1 for line in src.splitlines() if line.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--autotune-budget", type=int, default=120)
    ap.add_argument("--skip-autotune", action="store_true")
    ns = ap.parse_args()
    import helion  # noqa: F401  (fail early, with pip's message, if it is not installed)

    directory = tempfile.mkdtemp(prefix="kd_sbs_")
    for project, header in HEADERS.items():
        with open(os.path.join(directory, f"{project}_kernels.py"), "w") as f:
            f.write(header + KERNELS)
    out: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "versions": {p: version(p) for p in ("torch", "jax", "helion")},
        "kernels": {}, "autotune": {}}
    calls = {"kernel_dsl": "50", "helion": "3"}  # Helion's CPU path takes ~1 s a call (see README)
    for name in ("add", "softmax", "layer_norm", "matmul", "attention"):
        row: dict[str, Any] = {"lines": _lines(name)}
        for project in HEADERS:
            code = RUN.format(module=f"{project}_kernels", kernel=name)
            row[project] = _run(code, _env(directory, SBS_CALLS=calls[project]), 900)
            print(name, project, row[project], flush=True)
        out["kernels"][name] = row
    if not ns.skip_autotune:
        for name in ("add", "matmul"):
            out["autotune"][name] = {}
            for project in HEADERS:
                code = TUNE.format(project=project, kernel=name)
                env = _env(directory, SBS_BUDGET=str(ns.autotune_budget), SBS_DIR=directory)
                res = _run(code, env, ns.autotune_budget * 3 + 300)
                out["autotune"][name][project] = res
                print("autotune", name, project, res, flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
