"""`kd.register_tunable` (kernel_dsl/tunables.py) and Helion's examples/matmul_split_k.py, ported
by renaming (`hl.` -> `kd.`, `helion.autotuner` -> `kernel_dsl.autotuner`, `helion.cdiv` /
`helion.next_power_of_2` -> `kd.`): every split_k the fragment allows, on every backend."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.autotuner import BooleanFragment, EnumFragment, IntegerFragment, PowerOfTwoFragment
from kernel_dsl.errors import ConfigError, KernelSyntaxError

if TYPE_CHECKING:
    from collections.abc import Callable

BACKENDS = ["pallas", "triton", "nki"]
TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- Helion's examples/matmul_split_k.py, the kernel as it is there (renamed) -------------------
@kd.kernel
def matmul_split_k(
    x: torch.Tensor,
    y: torch.Tensor,
    epilogue: Callable[
        [torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor
    ] = lambda acc, tile: acc,
) -> torch.Tensor:
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.zeros(
        [m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device
    )
    split_k = kd.register_tunable("split_k", PowerOfTwoFragment(1, 256))
    k_block = kd.next_power_of_2(kd.cdiv(k, split_k))
    for tile_m, tile_n, outer_k in kd.tile([m, n, k], block_size=[None, None, k_block]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
        for inner_k in kd.tile(outer_k.begin, outer_k.end):
            acc = torch.addmm(acc, x[tile_m, inner_k], y[inner_k, tile_n])
        # Apply epilogue only on the first k-split iteration
        if outer_k.begin == 0:
            acc = epilogue(acc, (tile_m, tile_n))
        kd.atomic_add(out, [tile_m, tile_n], acc)
    return out


SPLITS = PowerOfTwoFragment(1, 256).choices()
TOL = {torch.float32: 1e-4, torch.float16: 5e-2, torch.bfloat16: 3e-1}


def _cfg(args: tuple, backend: str, **changes: object) -> kd.Config:
    return matmul_split_k.default_config(*args, backend=backend).replace(**changes)


def _run(backend: str, args: tuple, config: kd.Config) -> torch.Tensor:
    return matmul_split_k.compiled(backend, args, config)(*args[:2])[0]


HALF = [torch.float16, torch.bfloat16]
EVERY = [pytest.param(d, s, marks=pytest.mark.slow if d != torch.float32 and s not in (1, 8, 256)
                      else ()) for d in [torch.float32, *HALF] for s in ("all", *SPLITS)
         if (s == "all") == (d == torch.float32)]


@pytest.mark.parametrize("dtype,split", EVERY, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_split_k_every_value_matches_torch(backend: str, dtype: torch.dtype, split) -> None:
    """Every split_k on float32 (and the k blocks each gives); 16-bit inputs (a 16-bit output,
    16-bit atomic adds) at 1, 8 and 256, the other values in the slow tier."""
    torch.manual_seed(0)
    x, y = torch.randn(13, 37).to(dtype), torch.randn(37, 11).to(dtype)
    want = x.float() @ y.float()
    k_blocks = set()
    for s in SPLITS if split == "all" else [split]:
        got = _run(backend, (x, y), _cfg((x, y), backend, split_k=s))
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want, rtol=TOL[dtype], atol=TOL[dtype] * 2,
                                   msg=f"split_k={s}")
        k_blocks.add(matmul_split_k.ir(x, y).retrace({"split_k": s}).grid[2].block.pinned)
    if split == "all":
        assert k_blocks == {64, 32, 16, 8, 4, 2, 1}  # next_power_of_2(cdiv(37, s))


SHAPES = [(1, 1, 1), (29, 131, 7), pytest.param((8, 300, 130), marks=pytest.mark.slow)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_split_k_ragged_shapes_and_free_block_sizes(backend: str, shape) -> None:
    small = {"pallas": [8, 128, 128], "triton": [16, 16, 16], "nki": [16, 128, 16]}[backend]
    m, k, n = shape
    x, y = torch.randn(m, k), torch.randn(k, n)
    for s, bs in ((1, None), (4, small), (256, None), (256, small)):
        cfg = _cfg((x, y), backend, split_k=s)
        cfg = cfg if bs is None else cfg.replace(block_sizes=bs)
        torch.testing.assert_close(_run(backend, (x, y), cfg), x @ y, rtol=1e-4, atol=1e-4,
                                   msg=f"{shape} split_k={s} {cfg}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_k_with_the_bias_epilogue(backend: str) -> None:
    """Helion's check(): the epilogue runs on the first k split only (`outer_k.begin == 0`)."""
    x, y, bias = torch.randn(13, 37), torch.randn(37, 11), torch.randn(11)
    with kd.backend(backend):
        got = matmul_split_k(x, y, epilogue=lambda acc, tile: acc + bias[tile[1]])
    torch.testing.assert_close(got, torch.nn.functional.linear(x, y.T, bias), rtol=1e-4, atol=1e-4)
    for s in (2, 8):
        args = (x, y, lambda acc, tile: acc + bias[tile[1]])
        cfg = matmul_split_k.default_config(*args, backend=backend).replace(split_k=s)
        got = matmul_split_k.compiled(backend, args, cfg)(x, y, bias)[0]
        torch.testing.assert_close(got, torch.nn.functional.linear(x, y.T, bias), rtol=1e-4,
                                   atol=1e-4)


# -- the tunable in configs, spaces, traces and caches ------------------------------------------
def test_space_default_and_one_trace_per_value() -> None:
    k = kd.Kernel(matmul_split_k.fn)
    x, y = torch.randn(13, 37), torch.randn(37, 11)
    for be in BACKENDS:
        space = k.configs(x, y, backend=be)
        assert space.knobs["split_k"] == SPLITS, be
        assert {c.knobs["split_k"] for c in space} == set(SPLITS)
        assert k.default_config(x, y, backend=be).knobs["split_k"] == 1  # the fragment's default
    assert k.stats["traces"] == 1
    cfg = k.default_config(x, y, backend="triton")
    src1 = k.source(x, y, backend="triton", config=cfg.replace(split_k=1))
    src8 = k.source(x, y, backend="triton", config=cfg.replace(split_k=8))
    assert k.stats["traces"] == 2  # split_k=1 is the first trace's value
    # next_power_of_2(cdiv(37, 8)) = 8: 5 k blocks, 5 programs
    assert "_kernel[(1,)]" in src1 and "_kernel[(5,)]" in src8
    k.source(x, y, backend="pallas", config=k.default_config(x, y).replace(split_k=8))
    assert k.stats["traces"] == 2  # each value is traced once
    text = cfg.replace(split_k=8).to_json()
    assert json.loads(text)["split_k"] == 8 and kd.Config.from_json(text) == cfg.replace(split_k=8)


def test_decorator_config_gives_the_value() -> None:
    x, y = torch.randn(9, 40), torch.randn(40, 5)
    k = kd.kernel(config=kd.Config(block_sizes=[16, 16, 16], split_k=4), backend="triton")(
        matmul_split_k.fn)
    torch.testing.assert_close(k(x, y), x @ y, rtol=1e-4, atol=1e-4)
    assert "_kernel[(3,)]" in k.source(x, y)  # next_power_of_2(cdiv(40, 4)) = 16: 3 blocks


def test_tune_cache_key_names_the_fragments() -> None:
    from kernel_dsl.autotune.tuner import cache_key

    x, y = torch.randn(13, 37), torch.randn(37, 11)
    key = cache_key(matmul_split_k, matmul_split_k.ir(x, y), "pallas", "cpu")
    assert key["tunables"] == ["split_k=PowerOfTwoFragment(1, 256, 1)"]


@kd.kernel(backend="triton")
def doubled(x: torch.Tensor):
    """Tunables that pick how, not what: a block size and one of two equal forms."""
    bs = kd.register_tunable("bs", EnumFragment(choices=(16, 64)))
    add = kd.register_tunable("add", BooleanFragment())
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0], block_size=bs):
        out[t] = x[t] + x[t] if add else x[t] * 2
    return out


def test_enum_and_boolean_fragments_and_interpret_autotune(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))
    x = torch.randn(37)
    base = doubled.default_config(x)
    assert base.knobs["bs"] == 16 and base.knobs["add"] is False
    for bs in (16, 64):
        for add in (False, True):
            cfg = base.replace(bs=bs, add=add)
            torch.testing.assert_close(doubled.compiled("triton", (x,), cfg)(x)[0], x * 2)
            src = doubled.source(x, config=cfg)
            assert f"tl.arange(0, {bs})" in src and (" + v" in src) == add, src
    res = doubled.autotune(x, target="cpu", budget=60, strategy="exhaustive")
    assert res.best is not None and res.evaluations == len(doubled.configs(x))
    assert {json.loads(c.config)["bs"] for c in res.candidates} == {16, 64}
    assert all(c.status == "ok" for c in res.candidates), res.table()
    assert doubled.autotune(x, target="cpu", budget=60).from_cache


def test_config_values_outside_the_fragment_are_config_errors() -> None:
    x, y = torch.randn(13, 37), torch.randn(37, 11)
    cfg = matmul_split_k.default_config(x, y)
    for bad in (3, 512, True, "4"):
        with pytest.raises(ConfigError) as e:
            matmul_split_k.source(x, y, config=cfg.replace(split_k=bad))
        assert "split_k" in str(e.value) and "PowerOfTwoFragment(1, 256, 1)" in str(e.value)
    x = torch.randn(5)
    with pytest.raises(ConfigError, match="tunable `bs`=32"):
        doubled.source(x, config=doubled.default_config(x).replace(bs=32))
    with pytest.raises(ConfigError, match="tunable `add`=1"):  # an int is not a bool here
        doubled.source(x, config=doubled.default_config(x).replace(add=1))


def test_register_tunable_errors_name_the_line() -> None:
    @kd.kernel
    def twice(x: torch.Tensor):
        a = kd.register_tunable("b", IntegerFragment(1, 4))
        b = kd.register_tunable("b", IntegerFragment(1, 8))  # the line named
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * (a + b)
        return out

    @kd.kernel
    def same_twice(x: torch.Tensor):
        a = kd.register_tunable("b", IntegerFragment(1, 4))
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * (a + kd.register_tunable("b", IntegerFragment(1, 4)))
        return out

    @kd.kernel
    def reserved(x: torch.Tensor):
        w = kd.register_tunable("num_warps", IntegerFragment(1, 4))
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * w
        return out

    @kd.kernel
    def not_a_fragment(x: torch.Tensor):
        w = kd.register_tunable("w", [1, 2])
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * w
        return out

    x = torch.randn(6)
    with pytest.raises(KernelSyntaxError) as e:
        twice(x)
    assert "registered again with IntegerFragment(1, 8, 1)" in str(e.value)
    assert 'kd.register_tunable("b", IntegerFragment(1, 8))' in str(e.value)
    torch.testing.assert_close(same_twice(x), x * 2)  # equal fragments: one tunable, default 1
    with pytest.raises(KernelSyntaxError, match="name of a config key"):
        reserved(x)
    with pytest.raises(KernelSyntaxError, match="not a config fragment") as e:
        not_a_fragment(x)
    assert 'kd.register_tunable("w", [1, 2])' in str(e.value)
    with pytest.raises(KernelSyntaxError, match="outside a kernel"):
        kd.register_tunable("w", IntegerFragment(1, 2))
    with pytest.raises(ConfigError, match="not a power of two"):
        PowerOfTwoFragment(1, 6)


# -- the TPU compiler ----------------------------------------------------------------------------
@pytest.mark.slow
def test_split_k_compiles_for_every_tpu() -> None:
    x, y = torch.randn(128, 512), torch.randn(512, 256)
    for s in (1, 4):
        cfg = matmul_split_k.default_config(x, y).replace(split_k=s)
        rep = matmul_split_k.check(x, y, targets=TPU_TARGETS, config=cfg)
        assert rep.ok, rep
    x, y = x.to(torch.bfloat16), y.to(torch.bfloat16)
    cfg = matmul_split_k.default_config(x, y).replace(split_k=2)
    rep = matmul_split_k.check(x, y, targets=TPU_TARGETS, config=cfg)
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_split_k_compiles_for_sm90(dtype: torch.dtype) -> None:
    """16-bit `tl.atomic_add` into the half output, for a real GPU (sm_90)."""
    x, y = torch.randn(64, 256).to(dtype), torch.randn(256, 64).to(dtype)
    cfg = matmul_split_k.default_config(x, y, backend="triton").replace(split_k=4)
    rep = matmul_split_k.check(x, y, backend="triton", config=cfg)
    assert rep.ok, rep
    assert "tl.atomic_add" in matmul_split_k.source(x, y, backend="triton", target="cuda",
                                                     config=cfg)
