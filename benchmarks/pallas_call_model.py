"""The same cost model for any `pallas_call`, ours or JAX's (used by library_tpu.py).

    time = max(MXU time, HBM time) + grid steps x 0.35 us     (autotune/cost_model.py)

- MXU time: padded bf16 FLOPs of every dot the kernel executes (m padded to 8, k and n to the
  MXU size: 128 on v4/v5e/v5p, 256 on v6e/v7x) over the peak one kernel reaches (TPU7x: one of
  two TensorCores; megacore chips: half unless a parallel grid axis has 2+ blocks). The callers
  count the FLOPs (`dot_flops` per dot).
- HBM time: bytes actually moved at the chip's bandwidth (TPU7x: per TensorCore). The
  `pallas_call`s are captured while tracing (`capture`, nothing is compiled) and every
  BlockSpec's index map is evaluated over the whole grid in execution order; a block is moved
  when its index differs from the previous step's (the pipeline's DMA skip), in-range part only
  (`hbm_bytes`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kernel_dsl.autotune.cost_model import F32_MXU_PASSES, STEP_OVERHEAD_S
from kernel_dsl.lowering.pallas.targets import TpuTarget


@dataclass
class Call:
    """One captured pallas_call: its grid and, per operand, (block shape, index map, shape, bytes)."""

    grid: tuple[int, ...]
    operands: list[tuple[tuple[int, ...], Callable[..., Any], tuple[int, ...], int]]


_captured: dict[Any, list[Call]] = {}


def capture_once(key: Any, fn: Callable[..., Any], *specs: Any) -> list[Call]:
    """`capture`, once per key: JAX caches traces, so a second trace of the same function and
    shapes may never reach pallas_call again."""
    if key not in _captured:
        _captured[key] = capture(fn, *specs)
    return _captured[key]


def capture(fn: Callable[..., Any], *specs: Any) -> list[Call]:
    """Traces `fn` abstractly and returns every pallas_call it makes (nothing is compiled)."""
    import jax
    from jax.experimental import pallas as pl

    calls: list[Call] = []
    orig = pl.pallas_call

    def recording(kernel: Any, *a: Any, **kw: Any) -> Any:
        inner = orig(kernel, *a, **kw)
        gs = kw.get("grid_spec")
        grid = tuple(gs.grid if gs is not None else kw["grid"])
        in_specs = list(gs.in_specs if gs is not None else kw["in_specs"])
        out_specs = gs.out_specs if gs is not None else kw["out_specs"]
        out_specs = list(out_specs) if isinstance(out_specs, (list, tuple)) else [out_specs]
        outs = kw["out_shape"]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]

        def run(*args: Any) -> Any:
            ops = []
            for spec, arr in [*zip(in_specs, args), *zip(out_specs, outs)]:
                if arr is None or spec is None:
                    continue
                shape = tuple(d if isinstance(d, int) else 1 for d in spec.block_shape)
                ops.append((shape, spec.index_map, tuple(arr.shape), np.dtype(arr.dtype).itemsize))
            calls.append(Call(grid, ops))
            return inner(*args)
        return run

    pl.pallas_call = recording
    try:
        jax.eval_shape(fn, *specs)
    finally:
        pl.pallas_call = orig
    return calls


def hbm_bytes(call: Call) -> float:
    """Bytes moved: a block is fetched (or written back) when its index changes between
    consecutive grid steps in execution (lexicographic) order; in-range part only."""
    import jax
    import jax.numpy as jnp

    coords = [jnp.asarray(c.ravel(), jnp.int32) for c in np.indices(call.grid)]
    total = 0.0
    for block, index_map, shape, itemsize in call.operands:
        idx = [np.broadcast_to(np.asarray(v), coords[0].shape)
               for v in jax.vmap(index_map)(*coords)]
        ids = np.stack(idx, 1)
        moved = np.ones(len(ids), bool)
        moved[1:] = (ids[1:] != ids[:-1]).any(1)
        extent = np.ones(len(ids))
        for ax, (b, n) in enumerate(zip(block, shape)):
            extent = extent * np.clip(n - ids[:, ax] * b, 0, b)
        total += float((extent * moved).sum()) * itemsize
    return total


def peak(target: TpuTarget, grid_parallel_blocks: int) -> float:
    p = target.peak_bf16_flops / (2 if target.name == "tpu-v7x" else 1)
    return p / 2 if target.megacore and grid_parallel_blocks < 2 else p


def bandwidth(target: TpuTarget) -> float:
    return target.hbm_bytes_per_s / (2 if target.name == "tpu-v7x" else 1)


def dot_flops(m: int, k: int, n: int, target: TpuTarget, f32: bool = False) -> float:
    def pad(x: int, to: int) -> int:
        return -(-x // to) * to
    mx = target.mxu_size
    return 2.0 * pad(m, 8) * pad(k, mx) * pad(n, mx) * (F32_MXU_PASSES if f32 else 1)


def model(calls: list[Call], flops: list[float], target: TpuTarget, glue_bytes: float = 0.0,
          parallel_blocks: int = 2) -> dict[str, float]:
    t = hbm = steps = 0.0
    for call, fl in zip(calls, flops):
        b = hbm_bytes(call)
        n = math.prod(call.grid)
        t += max(fl / peak(target, parallel_blocks), b / bandwidth(target)) + n * STEP_OVERHEAD_S
        hbm += b
        steps += n
    t += glue_bytes / bandwidth(target)
    return {"seconds": t, "hbm_bytes": hbm + glue_bytes, "steps": steps, "glue_bytes": glue_bytes}
