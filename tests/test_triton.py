"""The Triton backend: every DSL test kernel through Triton's interpreter against PyTorch (ragged
shapes, several configs), the config space, the generated source, compile-only checks for a real
GPU (sm_90), the CUDA `triton_op` route, and the GPU benchmark's CPU dry mode."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dsl_kernels import add_where, attention, layer_norm, matmul, softmax_rows, softmax_two_pass
from test_dsl_kernels import _sdpa

import kernel_dsl as kd
from kernel_dsl.lowering import get
from kernel_dsl.lowering.triton.layout import MIN_DOT, dot_dims

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRITON = get("triton")
# a process that imported Triton with TRITON_INTERPRET=1 can only interpret (runner.py)
gpu_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                  reason="TRITON_INTERPRET=1: no GPU compiler in this process")


def run(kernel: Any, args: tuple[Any, ...], cfg: kd.Config | None = None) -> torch.Tensor:
    (out,) = kernel.run_cpu("triton", args, cfg)
    return out


def close(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-5) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


# -- every DSL test kernel through the interpreter ------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (37, 300)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 32]), kd.Config([5, 100], num_warps=8)])
def test_add_where(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    """[5, 100]: blocks that are not powers of two run in 8 x 128 lanes, masked."""
    x, y = torch.randn(shape), torch.randn(shape)
    close(run(add_where, (x, y), cfg), torch.where(x > y, x - y, 0.5 * y))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (29, 61, 130), (131, 17, 257)])
@pytest.mark.parametrize("cfg", [None, kd.Config([16, 16, 16], num_stages=2),
                                 kd.Config([32, 64, 16], group_m=8),
                                 kd.Config([8, 32, 8], group_m=4)])
def test_matmul_f32(mkn: tuple[int, int, int], cfg: kd.Config | None) -> None:
    """[8, 32, 8]: dot dims below tl.dot's 16 are padded to 16 lanes and masked."""
    m, k, n = mkn
    x, y = torch.randn(m, k), torch.randn(k, n)
    close(run(matmul, (x, y), cfg), x @ y, tol=1e-4)


def test_matmul_bf16_accumulates_in_f32() -> None:
    """bf16 in, f32 accumulation: the error is one bf16 rounding of the exact result."""
    x = torch.randn(33, 300).to(torch.bfloat16)
    y = torch.randn(300, 70).to(torch.bfloat16)
    out = run(matmul, (x, y), kd.Config([16, 32, 64]))
    exact = x.double() @ y.double()
    assert out.dtype == torch.bfloat16
    err = (out.double() - exact).abs() / (exact.abs() + 1e-2)
    assert err.max() < 2 ** -7, err.max()


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 1000)])
@pytest.mark.parametrize("cfg", [None, kd.Config([4]), kd.Config([32])])
def test_softmax_rows(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    """A whole row of 1000 (`x[tm, :]`) lives in 1024 lanes; the padding never reaches a sum."""
    x = torch.randn(shape) * 5
    close(run(softmax_rows, (x,), cfg), torch.softmax(x, -1))


@pytest.mark.parametrize("shape", [(1, 1), (3, 127), (37, 200)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8, 32, 64], num_stages=4),
                                 kd.Config([16, 128, 16])])
def test_softmax_two_pass(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    x = torch.randn(shape) * 5
    close(run(softmax_two_pass, (x,), cfg), torch.softmax(x, -1))


def test_softmax_bf16() -> None:
    x = (torch.randn(19, 260) * 4).to(torch.bfloat16)
    out = run(softmax_two_pass, (x,), kd.Config([16, 128, 128]))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), atol=4e-3, rtol=1e-2)


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (64, 256)])
@pytest.mark.parametrize("cfg", [None, kd.Config([8]), kd.Config([32])])
def test_layer_norm(shape: tuple[int, int], cfg: kd.Config | None) -> None:
    x = torch.randn(shape) * 3 + 1
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    close(run(layer_norm, (x, w, b, 1e-5), cfg), F.layer_norm(x, (shape[1],), w, b, 1e-5), tol=1e-4)


@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 8), (2, 3, 37, 50, 64), (1, 2, 64, 17, 32),
                                  (1, 1, 130, 130, 16)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cfg", [None, kd.Config([16, 16], num_warps=8), kd.Config([32, 8])])
def test_attention(dims: tuple[int, ...], causal: bool, cfg: kd.Config | None) -> None:
    """[1, 1, bq, d] @ [1, 1, d, bk] batched dots, d = 8 padded to 16 lanes, a causal mask."""
    b, h, sq, skv, d = dims
    q, k, v = torch.randn(b, h, sq, d), torch.randn(b, h, skv, d), torch.randn(b, h, skv, d)
    close(run(attention, (q, k, v, causal), cfg), _sdpa(q, k, v, causal), tol=2e-5)


def test_attention_rows_without_keys_are_zero_not_nan() -> None:
    q, k, v = torch.randn(1, 1, 20, 16), torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    out = run(attention, (q, k, v, True), kd.Config([8, 8]))
    assert torch.isfinite(out).all() and (out[0, 0, :15] == 0).all()
    close(out, _sdpa(q, k, v, True), tol=2e-5)


# -- language features the test kernels do not cover ----------------------------------------------

@kd.kernel
def carry_swap(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        a = kd.zeros([tm], dtype=torch.float32)
        b = kd.full([tm], 1.0, dtype=torch.float32)
        for tn in kd.tile(n, block_size=128):
            a = a + x[tm, tn].sum(dim=-1)
            a, b = b, a  # swapped every iteration
        out[tm, 0] = a
        out[tm, 1] = b
    return out


def test_loop_carried_plain_assignment_and_swap() -> None:
    for n in (128, 256, 300):
        x = torch.randn(9, n)
        want_a, want_b = torch.zeros(9), torch.ones(9)
        for j in range(0, n, 128):
            want_a = want_a + x[:, j:j + 128].sum(-1)
            want_a, want_b = want_b, want_a
        close(run(carry_swap, (x,), kd.Config([8])), torch.stack([want_a, want_b], 1), tol=1e-4)


@kd.kernel
def index_and_zeros(x: torch.Tensor) -> torch.Tensor:
    (n,) = x.shape
    out = torch.zeros([n, 3], dtype=torch.int32, device=x.device)
    for t in kd.tile(n):
        out[t, 0] = t.index
        out[t, 1] = t.index * 0 + t.begin + t.id * 1000 + t.size
    return out


def test_tile_attributes_and_zero_init_output() -> None:
    """`t.index/begin/id/size`, an int index, and an output made with torch.zeros (column 2 is
    never stored: it must come back zero)."""
    out = run(index_and_zeros, (torch.randn(300),), kd.Config([128]))
    i = torch.arange(300, dtype=torch.int32)
    assert torch.equal(out[:, 0], i)
    assert torch.equal(out[:, 1], i // 128 * 128 + i // 128 * 1000 + 128)
    assert torch.equal(out[:, 2], torch.zeros(300, dtype=torch.int32))


@kd.kernel
def many_ops(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    ew = torch.empty_like(x)
    red = torch.empty([m, 3], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        a, b = x[tm, :], y[tm, :]
        ew[tm, :] = (torch.tanh(a) + torch.sigmoid(b) * torch.erf(a) + torch.abs(b) ** 2
                     + torch.sqrt(torch.abs(a)) - torch.relu(b) + torch.maximum(a, b)
                     + torch.minimum(a, b) * torch.exp2(a) + torch.log(torch.abs(b) + 1)
                     + torch.sin(a) * torch.cos(b) + torch.rsqrt(torch.abs(a) + 1))
        red[tm, 0] = a.amax(dim=-1).float()
        red[tm, 1] = b.amin(dim=-1).float()
        red[tm, 2] = (a.float() * b.float()).mean(dim=-1)
    return ew, red


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy, on the NaN and -inf inputs
def test_elementwise_ops_reductions_and_nan() -> None:
    """Every unary op against torch; max/min reductions propagate NaN as torch.amax does."""
    x, y = torch.randn(11, 37) * 2, torch.randn(11, 37) * 2
    x[3, 5] = float("nan")
    y[4, 36] = float("nan")
    y[5, 0] = float("-inf")
    ew, red = many_ops.run_cpu("triton", (x, y), kd.Config([4]))
    want_ew, want_red = many_ops.run_cpu("pallas", (x, y), kd.Config([8]))
    torch.testing.assert_close(ew, want_ew, atol=1e-5, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(red, want_red, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert red[3, 0].isnan() and red[4, 1].isnan() and red[5, 1] == float("-inf")


def _many_ops_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (torch.tanh(a) + torch.sigmoid(b) * torch.erf(a) + torch.abs(b) ** 2
            + torch.sqrt(torch.abs(a)) - torch.relu(b) + torch.maximum(a, b)
            + torch.minimum(a, b) * torch.exp2(a) + torch.log(torch.abs(b) + 1)
            + torch.sin(a) * torch.cos(b) + torch.rsqrt(torch.abs(a) + 1))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype,rtol", [(torch.bfloat16, 2 ** -7), (torch.float16, 2 ** -10)])
def test_16_bit_math_rounds_like_torch(dtype: torch.dtype, rtol: float) -> None:
    """16-bit floats: each op computed in f32 and rounded once, as torch does (the interpreter
    cannot do bf16 arithmetic, and truncates f32 -> bf16 unless told otherwise)."""
    x, y = (torch.randn(11, 37) * 2).to(dtype), (torch.randn(11, 37) * 2).to(dtype)
    ew, _ = many_ops.run_cpu("triton", (x, y), kd.Config([16]))
    assert ew.dtype == dtype
    torch.testing.assert_close(ew, _many_ops_ref(x, y), atol=rtol, rtol=rtol)


# -- routes: kd.backend, the CPU op, the CUDA triton_op --------------------------------------------

def test_backend_context_runs_the_interpreter() -> None:
    x, y = torch.randn(20, 30), torch.randn(30, 40)
    with kd.backend("triton"):
        close(matmul(x, y), x @ y, tol=1e-4)
        (out,) = matmul._ops.op(x, y)  # the portable op runs the backend in force
    close(out, x @ y, tol=1e-4)


def test_cpu_op_opcheck_and_compile() -> None:
    """The kernel's CPU op for this backend passes opcheck and compiles without graph breaks."""
    x, w, b = torch.randn(13, 37), torch.randn(37), torch.randn(37)
    with kd.backend("triton"):
        result = torch.library.opcheck(layer_norm._ops.op, (x, w, b, 1e-5))
    assert all(v == "SUCCESS" for v in result.values()), result
    torch._dynamo.reset()
    with kd.backend("triton"):
        f = torch.compile(lambda a, c: matmul(a, c) * 2, backend="aot_eager", fullgraph=True)
        x, y = torch.randn(20, 30), torch.randn(30, 40)
        close(f(x, y), x @ y * 2, tol=1e-4)
    torch._dynamo.reset()


def test_cuda_op_body_through_the_interpreter() -> None:
    """The CUDA op's body (output allocation, init fill, grid, launch) on CPU tensors, with the
    kernel interpreted; its schema is the kernel's."""
    from kernel_dsl.lowering.triton.cuda import make_cuda_op

    op = make_cuda_op(layer_norm._ops, interpret=True, name="layer_norm_triton_interp_test")
    assert str(op._opoverload._schema).endswith("(Tensor x, Tensor w, Tensor b, float eps) -> Tensor[]")
    x, w, b = torch.randn(7, 33), torch.randn(33), torch.randn(33)
    (out,) = op(x, w, b, 1e-5)
    close(out, F.layer_norm(x, (33,), w, b, 1e-5), tol=1e-4)
    zop = make_cuda_op(index_and_zeros._ops, interpret=True, name="index_and_zeros_interp_test")
    (out,) = zop(torch.randn(300))
    assert torch.equal(out[:, 2], torch.zeros(300, dtype=torch.int32))


@gpu_compiler
def test_cuda_op_is_traced_into_a_triton_kernel_node() -> None:
    """Under torch.compile the triton_op decomposes into `triton_kernel_wrapper_functional`, the
    node Inductor launches itself. Captured here with fake CPU tensors; nothing runs."""
    from torch._dynamo.backends.common import aot_autograd

    from kernel_dsl.lowering.triton.cuda import make_cuda_op

    op = make_cuda_op(matmul._ops, name="matmul_triton_trace_test")
    graphs: list[Any] = []

    def capture(gm: Any, example: Any) -> Any:
        graphs.append(gm)

        def not_run(*args: Any) -> Any:
            raise RuntimeError("captured")
        return not_run

    torch._dynamo.reset()
    f = torch.compile(lambda a, b: op(a, b)[0] * 2, backend=aot_autograd(fw_compiler=capture),
                      fullgraph=True)
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="captured"):
        warnings.simplefilter("ignore")
        f(torch.randn(29, 61), torch.randn(61, 130))
    torch._dynamo.reset()
    code = graphs[0].code
    assert "triton_kernel_wrapper_functional" in code and "grid = [(3, 1, 1)]" in code


# -- config space, source, errors ---------------------------------------------------------------

def test_config_space_is_powers_of_two_with_16_on_dot_dims() -> None:
    for kernel, args in [(matmul, (torch.randn(300, 200), torch.randn(200, 500))),
                         (attention, (torch.randn(1, 2, 300, 64),) * 3 + (True,)),
                         (softmax_two_pass, (torch.randn(300, 1000),))]:
        ir = kernel.ir(*args)
        space = TRITON.config_space(ir, "cuda")
        dtiles, _ = dot_dims(ir)
        pos = [s for s in ir.free_syms if s.name is None]
        on_dot = [any(t.block is s and t.id in dtiles for t in ir.tiles) for s in pos]
        for c, dot in zip(space.positional, on_dot):
            assert all(b & (b - 1) == 0 for b in c)
            assert not dot or min(c) >= MIN_DOT
        assert set(space.knobs) >= {"num_warps", "num_stages"}
        default = TRITON.default_config(ir, "cuda")
        TRITON.render(ir, default, "cuda")  # the default always renders


def test_space_configs_run() -> None:
    """A sample of the space (first, last, and one with group_m) is correct, not just valid."""
    x, y = torch.randn(40, 70), torch.randn(70, 50)
    configs = list(matmul.configs(x, y, backend="triton"))
    assert len(configs) > 8
    for cfg in (configs[0], configs[-1], configs[len(configs) // 2]):
        close(run(matmul, (x, y), cfg), x @ y, tol=1e-4)


def test_source_is_readable_standalone_and_deterministic() -> None:
    x, y = torch.randn(29, 61), torch.randn(61, 130)
    src = matmul.source(x, y, backend="triton")
    assert src == matmul.source(x, y, backend="triton")
    for piece in ("import triton\n", "import triton.language as tl\n", "import torch\n",
                  "@triton.jit\n", "def matmul(x, y):", "tl.dot(", "mask=", "for i_tk in range(",
                  "# src: dsl_kernels.py:28", 'input_precision="ieee"'):
        assert piece in src, piece


def test_unknown_and_bad_knobs_are_refused() -> None:
    x, y = torch.randn(8, 16), torch.randn(16, 8)
    with pytest.raises(kd.ConfigError, match="unknown config knobs") as e:
        matmul.source(x, y, backend="triton", config=kd.Config([16, 16, 16], loop_mode="grid"))
    assert "num_warps" in str(e.value)
    with pytest.raises(kd.ConfigError, match="num_warps"):
        matmul.source(x, y, backend="triton", config=kd.Config([16, 16, 16], num_warps=3))


def test_too_large_values_are_refused_with_a_hint() -> None:
    x = torch.empty(64, 1 << 18, device="meta")
    with pytest.raises(kd.ConfigError, match="Triton holds at most") as e:
        softmax_rows.source(x, backend="triton", config=kd.Config([64]))
    assert "dsl_kernels.py" in str(e.value)


def test_cli_show_backend_triton() -> None:
    path = os.path.join(ROOT, "tests", "dsl_kernels.py")
    r = subprocess.run([sys.executable, "-m", "kernel_dsl", "show", f"{path}:attention",
                        "--shapes", "2x3x37x64:bf16", "2x3x50x64:bf16", "2x3x50x64:bf16",
                        "--arg", "causal=true", "--backend", "triton", "--what", "source"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "def attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr):" in r.stdout
    assert "tl.reshape(" in r.stdout and "# src: dsl_kernels.py:" in r.stdout


def test_standalone_source_runs_without_kernel_dsl(tmp_path: Any) -> None:
    """The generated file, on its own, with TRITON_INTERPRET=1 in a fresh process."""
    x, y = torch.randn(29, 61), torch.randn(61, 130)
    (tmp_path / "gen_matmul.py").write_text(matmul.source(x, y, backend="triton"))
    torch.save((x, y), tmp_path / "xy.pt")
    code = ("import torch, gen_matmul\n"
            "x, y = torch.load('xy.pt')\n"
            "(out,) = gen_matmul.matmul(x, y)\n"
            "print(float((out - x @ y).abs().max()))\n")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.strip().splitlines()[-1]) < 1e-4


# -- compile-only checks for a real GPU (Hopper, sm_90) ---------------------------------------------

GPU_CASES = [
    ("add_where", add_where, (torch.randn(37, 300), torch.randn(37, 300)), None),
    ("matmul_f32", matmul, (torch.randn(29, 61), torch.randn(61, 130)), None),
    ("softmax_rows", softmax_rows, (torch.randn(37, 1000),), None),
    ("softmax_two_pass", softmax_two_pass, (torch.randn(37, 1000),), None),
    ("layer_norm", layer_norm, (torch.randn(37, 1000), torch.randn(1000), torch.randn(1000), 1e-5),
     None),
    ("attention_tiny", attention, (torch.randn(1, 1, 1, 8),) * 3 + (True,), None),
    ("many_ops_bf16", many_ops, (torch.randn(11, 37).to(torch.bfloat16),) * 2, None),
    ("carry_swap", carry_swap, (torch.randn(9, 300),), None),
    ("index_and_zeros", index_and_zeros, (torch.randn(300),), None),
]


@gpu_compiler
@pytest.mark.parametrize("name,kernel,args,cfg", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_compiles_for_sm90(name: str, kernel: Any, args: tuple[Any, ...], cfg: Any) -> None:
    """Triton's real GPU compiler accepts every test kernel (after interpreted runs in this same
    process: the interpreter must leave triton.language as it found it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kernel.run_cpu("triton", args, cfg)
    report = TRITON.verify(kernel.generated(*args, backend="triton", config=cfg, target="cuda"))
    assert report["ok"], report["error"]


@gpu_compiler
def test_bf16_matmul_and_attention_use_hopper_tensor_cores() -> None:
    """bf16 dots become wgmma; loads are pipelined (cp.async) num_stages deep. On every Triton
    in our range: 3.7.1 and 3.8.0 (what CUDA torch 2.13 and 2.14 pin) once asserted on the
    4-D attention kernel's reshaped dot results."""
    a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    gen = matmul.generated(a, a, backend="triton", target="cuda",
                           config=kd.Config([128, 128, 64], num_warps=8, num_stages=4, group_m=8))
    report = TRITON.verify(gen)
    assert report["ok"] and report["wgmma"], report
    assert report["shared"] >= 3 * (128 * 64 * 2) * 2  # several stages of both operands
    q = torch.empty(4, 32, 4096, 128, dtype=torch.bfloat16, device="meta")
    gen = attention.generated(q, q, q, True, backend="triton", target="cuda",
                              config=kd.Config([128, 64], num_warps=8, num_stages=2))
    report = TRITON.verify(gen)
    assert report["ok"] and report["wgmma"], report


@gpu_compiler
def test_kernel_check_reports_shared_memory_for_cuda() -> None:
    """`kernel.check(..., backend="triton")`, where the front end offers it."""
    pytest.importorskip("kernel_dsl.check")
    if not hasattr(matmul, "check"):
        pytest.skip("this front end has no kernel.check")
    x, y = torch.randn(300, 200).to(torch.bfloat16), torch.randn(200, 100).to(torch.bfloat16)
    report = matmul.check(x, y, backend="triton")
    assert report.ok and report["cuda"].extra["wgmma"], report.table()
    assert 0 < report["cuda"].extra["shared"] <= report["cuda"].extra["shared_limit"]


# -- the GPU benchmark's dry mode (CI) --------------------------------------------------------------

def test_gpu_benchmark_dry_mode(tmp_path: Any) -> None:
    out = tmp_path / "gpu.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--dry",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    import json

    data = json.loads(out.read_text())
    assert data["mode"] == "dry"
    names = [row["name"] for row in data["rows"]]
    for want in ("matmul bf16", "flash fwd full", "flash fwd causal", "flash bwd full",
                 "flash bwd causal", "cuda op route"):
        assert want in names, names
    assert all(row["correct"] is True for row in data["rows"]), data["rows"]
