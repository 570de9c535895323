"""The calibrated cost model for any `pallas_call`, ours or JAX's (used by library_tpu.py).

The time formula is autotune/cost_model.py's `pipeline_time` (the same code and constants the
autotuner uses for kernel_dsl's IR: per TensorCore, steps x max(step overhead + compute, DMA)
+ fill and drain, compute = MXU and vector work partly overlapped). What this file supplies for
a captured call is what `cost_model.estimate` reads from the IR for ours:

- HBM bytes and block DMAs: the `pallas_call`s are captured while tracing (`capture`, nothing is
  compiled) and every BlockSpec's index map is evaluated over the whole grid in execution order;
  a block is moved when its index differs from the previous step's (the pipeline's DMA skip),
  in-range part only (`transfers`). A kernel that re-points a skipped step's index map to the
  previous block (JAX's causal flash attention) thereby moves nothing on that step.
- Cores: a megacore chip (v4, v5p) splits the call's "parallel" grid axes over two TensorCores
  when one of them has two or more blocks (`dimension_semantics` of its compiler params).
- Work: the callers count it (`Work`: MXU-padded FLOPs via `cost_model.mxu_flops`, EUP and
  VPU elements) for the steps that run it, and the share of grid steps that run it
  (`live_fraction`: JAX's causal kernels skip the key blocks above the diagonal with
  `pl.when`; a skipped step pays only the step overhead, as in `cost_model.estimate`).
- XLA glue around the kernels (e.g. their backward's di and lane broadcasts): bytes at the
  achievable HBM bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kernel_dsl.autotune.cost_model import device, mxu_flops, pipeline_time
from kernel_dsl.lowering.pallas.targets import TpuTarget


@dataclass
class Call:
    """One captured pallas_call: its grid, which grid axes are parallel, and per operand
    (block shape, index map, shape, bytes per element, is an output)."""

    grid: tuple[int, ...]
    operands: list[tuple[tuple[int, ...], Callable[..., Any], tuple[int, ...], int, bool]]
    parallel: tuple[bool, ...] = ()


@dataclass
class Work:
    """What a call's live grid steps execute, summed over them."""

    padded_flops: float  # MXU bf16-pass FLOPs (cost_model.mxu_flops per dot)
    eup: float = 0.0  # transcendental elements (exp, ...)
    vpu: float = 0.0  # other vector element-ops
    live_fraction: float = 1.0  # share of the grid steps that run (the rest are skipped)


_captured: dict[Any, list[Call]] = {}


def capture_once(key: Any, fn: Callable[..., Any], *specs: Any) -> list[Call]:
    """`capture`, once per key: JAX caches traces, so a second trace of the same function and
    shapes may never reach pallas_call again."""
    if key not in _captured:
        _captured[key] = capture(fn, *specs)
    return _captured[key]


def _parallel(kw: dict[str, Any], ndim: int) -> tuple[bool, ...]:
    """Which grid axes the call marks "parallel" (no compiler params: all but the last)."""
    cp = kw.get("compiler_params")
    sem = None
    if isinstance(cp, dict):
        sem = cp.get("mosaic", cp).get("dimension_semantics")
    elif cp is not None:
        sem = getattr(cp, "dimension_semantics", None)
    if not sem:
        return tuple(i < ndim - 1 for i in range(ndim))
    return tuple("parallel" in str(s).lower() for s in sem)


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
            for i, (spec, arr) in enumerate([*zip(in_specs, args), *zip(out_specs, outs)]):
                if arr is None or spec is None:
                    continue
                shape = tuple(d if isinstance(d, int) else 1 for d in spec.block_shape)
                ops.append((shape, spec.index_map, tuple(arr.shape), np.dtype(arr.dtype).itemsize,
                            i >= len(in_specs)))
            calls.append(Call(grid, ops, _parallel(kw, len(grid))))
            return inner(*args)
        return run

    pl.pallas_call = recording
    try:
        jax.eval_shape(fn, *specs)
    finally:
        pl.pallas_call = orig
    return calls


def transfers(call: Call) -> tuple[float, int, float, float]:
    """(HBM bytes, block DMAs, bytes of the first step's input blocks, of the last step's
    output blocks): a block is fetched (or written back) when its index changes between
    consecutive grid steps in execution (lexicographic) order; in-range part only."""
    import jax
    import jax.numpy as jnp

    coords = [jnp.asarray(c.ravel(), jnp.int32) for c in np.indices(call.grid)]
    total = first_in = last_out = 0.0
    dmas = 0
    for block, index_map, shape, itemsize, is_out in call.operands:
        idx = [np.broadcast_to(np.asarray(v), coords[0].shape)
               for v in jax.vmap(index_map)(*coords)]
        ids = np.stack(idx, 1)
        moved = np.ones(len(ids), bool)
        moved[1:] = (ids[1:] != ids[:-1]).any(1)
        extent = np.ones(len(ids))
        for ax, (b, n) in enumerate(zip(block, shape)):
            extent = extent * np.clip(n - ids[:, ax] * b, 0, b)
        total += float((extent * moved).sum()) * itemsize
        dmas += int(moved.sum())
        if is_out:
            last_out += float(extent[-1]) * itemsize
        else:
            first_in += float(extent[0]) * itemsize
    return total, dmas, first_in, last_out


def hbm_bytes(call: Call) -> float:
    return transfers(call)[0]


def dot_flops(m: int, k: int, n: int, target: TpuTarget, f32: bool = False) -> float:
    """MXU-padded FLOPs of one (m, k) @ (k, n) dot: cost_model.mxu_flops."""
    return mxu_flops(m, k, n, target, f32)


def call_time(call: Call, work: Work, target: TpuTarget) -> dict[str, float]:
    hbm, dmas, first_in, last_out = transfers(call)
    steps = math.prod(call.grid)
    par = [n for n, p in zip(call.grid, call.parallel) if p]
    cores = 2 if device(target).megacore and par and max(par) >= 2 else 1
    core_steps = steps / cores
    # the simulated DMAs already skip what the skipped steps do not move
    seconds, mxu, vec, dma, over = pipeline_time(
        target, padded=work.padded_flops, eup=work.eup, vpu=work.vpu, hbm=hbm, dmas=dmas,
        first_in=first_in, last_out=last_out, core_steps=core_steps,
        live_steps=core_steps * work.live_fraction, cores=cores)
    return {"seconds": seconds, "hbm_bytes": hbm, "steps": steps, "mxu_s": mxu, "vector_s": vec,
            "dma_s": dma, "overhead_s": over}


def model(calls: list[Call], work: list[Work], target: TpuTarget,
          glue_bytes: float = 0.0) -> dict[str, float]:
    t = hbm = steps = 0.0
    for call, w in zip(calls, work, strict=True):
        r = call_time(call, w, target)
        t += r["seconds"]
        hbm += r["hbm_bytes"]
        steps += r["steps"]
    t += glue_bytes / device(target).hbm_bw
    return {"seconds": t, "hbm_bytes": hbm + glue_bytes, "steps": steps, "glue_bytes": glue_bytes}
