"""`kd.barrier()` (kernel_dsl/grid_phases.py, lowering/phases.py) and Helion's
examples/split_k_barrier.py, ported by renaming (`hl.` -> `kd.`, `helion.` -> `kd.`,
`helion.autotuner` -> `kernel_dsl.autotuner`): two grid loops, the second after every program of
the first finished; every split_k the fragment allows and the configs of each backend's space."""
from __future__ import annotations

import random

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.autotune.candidate_worker import run_job
from kernel_dsl.autotune.isolated import pack, unpack
from kernel_dsl.autotuner import PowerOfTwoFragment
from kernel_dsl.errors import BackendError, KernelSyntaxError
from kernel_dsl.lowering import phases

BACKENDS = ["pallas", "triton", "nki"]
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- Helion's examples/split_k_barrier.py, the kernel as it is there (renamed) ------------------
@kd.kernel
def split_k_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    _, n = b.shape
    split_k = kd.register_tunable("split_k", PowerOfTwoFragment(16, 512, 64))
    block_k = kd.next_power_of_2(kd.cdiv(k, split_k))
    tmp = torch.zeros((m, n, split_k), device=a.device, dtype=a.dtype)
    out = torch.empty((m, n), device=a.device, dtype=a.dtype)

    for tile_m, tile_n, tile_k_outer in kd.tile(
        [m, n, k], block_size=[None, None, block_k]
    ):
        acc = kd.zeros([tile_m, tile_n], device=a.device, dtype=a.dtype)
        for tile_k_inner in kd.tile(tile_k_outer.begin, tile_k_outer.end):
            acc = torch.addmm(acc, a[tile_m, tile_k_inner], b[tile_k_inner, tile_n])
        # this could be a kd.atomic_add to avoid the barrier, but that would be non-determinstic
        tmp[tile_m, tile_n, tile_k_outer.id] = acc

    kd.barrier()

    for tile_m, tile_n in kd.tile([m, n]):
        out[tile_m, tile_n] = torch.sum(tmp[tile_m, tile_n, :], dim=-1)

    return out


SPLITS = PowerOfTwoFragment(16, 512, 64).choices()


def _args(m: int, k: int, n: int, dtype: torch.dtype = torch.float32) -> tuple:
    torch.manual_seed(0)
    return torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype).T.contiguous()


def _run(backend: str, args: tuple, config: kd.Config) -> torch.Tensor:
    return split_k_matmul.compiled(backend, args, config)(*args)[0]


def _want(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double() @ b.double()


# ragged: primes, 1, sizes under and over a block; (9, 97, 9): the driver's shrunk check(16, 4096, 16)
SHAPES = [(13, 301, 11), (1, 1, 1), (9, 97, 9), (37, 1000, 130)]
# the default tier: the smallest and the largest split at two shapes; the slow one: every split
# at the first three
CASES = [pytest.param(shape, splits, marks=() if fast else pytest.mark.slow)
         for shape in SHAPES for splits, fast in (((16, 512), shape in SHAPES[:2]),
                                                  (SPLITS, False)) if fast or shape in SHAPES[:3]]


@pytest.mark.parametrize("shape,splits", CASES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_split_k_values_match_torch(backend: str, shape: tuple, splits: tuple) -> None:
    args = _args(*shape)
    want = _want(*args)
    for s in splits:
        cfg = split_k_matmul.default_config(*args, backend=backend).replace(split_k=s)
        got = _run(backend, args, cfg)
        assert got.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-3, msg=f"{cfg}")


def _configs(backend: str, args: tuple, every: bool) -> list[kd.Config]:
    """A seeded sample of the backend's space (3 configs; slow tier: 12 of Pallas' 72, NKI's 24
    and Triton's 960: every config took 37 min of CI's slow tier)."""
    space = list(split_k_matmul.configs(*args, backend=backend))
    k = 12 if every else 3
    return random.Random(0).sample(space, min(k, len(space)))


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_configs_of_the_space_match_torch(backend: str, every: bool) -> None:
    args = _args(13, 301, 11)
    want = _want(*args)
    configs = _configs(backend, args, every)
    assert len(configs) >= 3
    for cfg in configs:
        torch.testing.assert_close(_run(backend, args, cfg).double(), want, rtol=1e-4, atol=1e-3,
                                   msg=f"{cfg}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_half_inputs_at_helions_tolerance(backend: str, dtype: torch.dtype) -> None:
    """Helion's check(): atol 0.5 (partials are stored in the input's dtype, then summed)."""
    a, b = _args(16, 257, 16, dtype)
    with kd.backend(backend):
        got = split_k_matmul(a, b)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), _want(a, b), rtol=1e-2, atol=5e-1)


def test_each_grid_loop_is_a_phase_reading_what_the_one_before_wrote() -> None:
    args = _args(13, 301, 11)
    ir = split_k_matmul.ir(*args)
    assert [ph.name for ph in ir.phases] == ["split_k_matmul_phase0", "split_k_matmul_phase1"]
    first, second = ir.phases
    assert [p.name for p in first.inputs] == ["a", "b"] and [p.name for p in first.returns] == ["tmp"]
    assert [p.name for p in second.inputs] == ["tmp"] and [p.name for p in second.returns] == ["out"]
    tmp_out = first.returns[0]
    assert tmp_out.is_output and tmp_out.init == 0.0
    assert second.inputs[0].readback_of is tmp_out and not second.inputs[0].is_output
    assert not ir.body.ops and [p.name for p in ir.returns] == ["out"]
    # the printed IR (and so the tune cache's fingerprint) holds both phases
    printed = kd.print_ir(ir)
    assert "phase 0(a, b) -> (tmp)" in printed and "barrier; phase 1(tmp) -> (out)" in printed
    assert "reduce sum axis=2" in printed
    # one config for the kernel: the free block sizes of both loops, in source order
    assert len(split_k_matmul.default_config(*args).block_sizes) == 5
    split = phases.split(lowering.get("pallas"), ir, split_k_matmul.default_config(*args), "cpu")
    assert [len(c.block_sizes) for _, c in split] == [3, 2]
    src = split_k_matmul.source(*args, backend="pallas")
    assert src.count("pl.pallas_call(") == 2 and src.count("#@kd-phase ") == 2
    assert split_k_matmul.source(*args, backend="triton").count("@triton.jit") == 2


def test_triton_num_stages_of_the_loopless_phase_falls_back_to_its_default() -> None:
    """Triton's num_stages is [2, 3, 4] in the phase with a loop, [1] in the other."""
    args = _args(13, 301, 11)
    ir = split_k_matmul.ir(*args)
    cfg = split_k_matmul.default_config(*args, backend="triton").replace(num_stages=4)
    split = phases.split(lowering.get("triton"), ir, cfg, "cpu")
    assert [c.knobs["num_stages"] for _, c in split] == [4, 1]
    torch.testing.assert_close(_run("triton", args, cfg).double(), _want(*args), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_source_alone_builds_the_kernel(backend: str) -> None:
    """An autotuning worker gets only the source and entry (autotune/candidate_worker.py)."""
    args = _args(13, 301, 11)
    cfg = split_k_matmul.default_config(*args, backend=backend).replace(split_k=32)
    gen = split_k_matmul.generated(*args, backend=backend, config=cfg)
    specs, data = pack(list(args))
    ans, payload = run_job({"source": gen.source, "entry": gen.entry, "backend": backend,
                            "target": gen.target, "out_dtypes": ["f32"], "inputs": specs,
                            "repeats": 1}, data)
    assert ans["status"] == "ok"
    got = unpack(ans["outputs"], payload)[0]
    torch.testing.assert_close(got.double(), _want(*args), rtol=1e-4, atol=1e-3)


def test_cost_model_counts_both_launches() -> None:
    args = _args(16, 4096, 16)
    cfg = split_k_matmul.default_config(*args).replace(split_k=16)
    total = split_k_matmul.estimate(*args, target="tpu-v5e", config=cfg)
    from kernel_dsl.autotune.cost_model import estimate
    from kernel_dsl.lowering.pallas.targets import tpu_target

    ir = split_k_matmul.ir(*args)
    parts = [estimate(ph, c, tpu_target("tpu-v5e")).seconds
             for ph, c in phases.split(lowering.get("pallas"), ir, cfg, "tpu-v5e")]
    assert len(parts) == 2 and all(p > 0 for p in parts)
    assert total == pytest.approx(sum(parts))


def test_jax_entry_runs_the_phases_in_order() -> None:
    import jax.numpy as jnp

    a, b = _args(13, 301, 11)
    got = split_k_matmul.jax(jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    torch.testing.assert_close(torch.tensor(__import__("numpy").array(got)).double(),
                               _want(a, b), rtol=1e-4, atol=1e-3)


# -- errors --------------------------------------------------------------------------------------
def _trace_error(fn, *args) -> KernelSyntaxError:
    with pytest.raises(KernelSyntaxError) as e:
        kd.kernel(fn).ir(*args)
    return e.value


def test_barrier_errors_name_the_line() -> None:
    x = torch.randn(8, 8)

    def inside(x):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            kd.barrier()  # the line named
            out[t, :] = x[t, :]
        return out

    def before(x):
        out = torch.empty_like(x)
        kd.barrier()  # the line named
        for t in kd.tile(x.shape[0]):
            out[t, :] = x[t, :]
        return out

    def last(x):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t, :] = x[t, :]
        kd.barrier()
        return out

    def rewrite(x):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t, :] = x[t, :]
        kd.barrier()
        for t in kd.tile(x.shape[0]):
            out[t, :] = out[t, :] * 2  # the line named
        return out

    def no_barrier(x):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t, :] = x[t, :]
        for t in kd.tile(x.shape[0]):  # the line named
            out[t, :] = x[t, :]
        return out

    e = _trace_error(inside, x)
    assert "inside a `kd.tile` loop" in e.message and "kd.barrier()  # the line named" in str(e)
    e = _trace_error(before, x)
    assert "does not follow a grid loop" in e.message and "# the line named" in str(e)
    assert "not followed by a grid loop" in _trace_error(last, x).message
    e = _trace_error(rewrite, x)
    assert "written before kd.barrier()" in e.message and "# the line named" in str(e)
    e = _trace_error(no_barrier, x)
    assert "kd.barrier()" in e.hint and "# the line named" in str(e)
    with pytest.raises(KernelSyntaxError, match="outside a kernel"):
        kd.barrier()


def test_three_phases_and_an_output_of_the_first_returned() -> None:
    """A phase reads what any earlier phase wrote; an output of the first phase is returned."""
    @kd.kernel
    def three(x: torch.Tensor):
        n, d = x.shape
        a = torch.empty_like(x)
        b = torch.empty_like(x)
        c = torch.empty_like(x)
        for t in kd.tile(n):
            a[t, :] = x[t, :] + 1
        kd.barrier()
        for t in kd.tile(n):  # reverses the rows: reads rows other programs wrote
            b[t, :] = a[n - 1 - t.index, :] * 2
        kd.barrier()
        for t in kd.tile(n):
            c[t, :] = b[t, :] + a[t, :]
        return a, c

    x = torch.randn(37, 5)
    a_want = x + 1
    c_want = (a_want.flip(0) * 2) + a_want
    for backend in BACKENDS:
        with kd.backend(backend):
            a, c = three(x)
        torch.testing.assert_close(a, a_want)
        torch.testing.assert_close(c, c_want)


# -- the real TPU compiler -----------------------------------------------------------------------
@pytest.mark.slow
def test_split_k_barrier_compiles_for_every_tpu_target() -> None:
    """Helion's check size (16, 4096, 16): split_k 16 and 32 give 256- and 128-wide k splits;
    the partials go into tmp's lane axis at `tile_k_outer.id` (lowering/pallas/dyn_lane.py).
    tpu-v4 refuses the second phase's `tmp[tm, tn, :].sum(-1)` (below)."""
    args = _args(16, 4096, 16)
    for s in (16, 32):
        cfg = split_k_matmul.default_config(*args).replace(split_k=s)
        rep = split_k_matmul.check(*args, targets=TPU_TARGETS[1:], config=cfg)
        assert rep.ok, rep.table()


def test_tpu_v4_refuses_the_minor_axis_sum_of_the_second_phase() -> None:
    """libtpu 0.0.52 on tpu-v4: "failed to legalize operation 'xir.dynamic_gather'" for
    `jnp.sum(tmp_block, axis=2)` of a [16, 16, 16] block (the result's lanes are sublanes)."""
    args = _args(16, 4096, 16)
    cfg = split_k_matmul.default_config(*args).replace(split_k=16)
    with pytest.raises(BackendError, match="tpu-v4 cannot reduce the minor axis") as e:
        split_k_matmul.source(*args, config=cfg, target="tpu-v4")
    assert "torch.sum(tmp[tile_m, tile_n, :], dim=-1)" in str(e.value)
    assert split_k_matmul.source(*args, config=cfg, target="tpu-v5e").count("pl.pallas_call(") == 2


def test_split_k_64_is_refused_for_tpu_by_the_lane_offset_rule() -> None:
    """64-wide k splits start at lane offsets Mosaic cannot prove aligned (E2003)."""
    args = _args(16, 4096, 16)
    cfg = split_k_matmul.default_config(*args).replace(split_k=64)
    with pytest.raises(BackendError, match="multiple of 128"):
        split_k_matmul.source(*args, config=cfg, target="tpu-v5e")
