"""The shipped TPU configs: `kernels/configs/<target>.json`, written by `kernels/tune.py`.

Each file holds the offline autotuner's winners for one TPU generation, one entry per
(kernel, input shapes, input dtypes); `scalars` records the scalar arguments it was tuned with:

    {"target": "tpu-v6e", "command": "python -m kernel_dsl.kernels.tune --target tpu-v6e",
     "entries": [{"kernel": "flash_attention_fwd", "shapes": [[8, 2048, 128], ...],
                  "dtypes": ["bf16", ...], "scalars": [0.088, false, 0],
                  "config": {"block_sizes": [512, 512], ...},
                  "model_s": 4.9e-05, "vmem_used": 4411392}, ...]}

Lookup: the entry with exactly these shapes and dtypes (and `dynamic_loops`: a causal kernel that
skips blocks is tuned apart from the same shapes without skipping); otherwise the nearest entry of the same
kernel and dtypes (distance: sum over dims of |log2 ratio|) whose config still fits the target's
VMEM at the new shapes. That figure is the entry's measured `vmem_used` plus what the analytical
estimate (lowering/pallas/vmem.py) adds from the entry's shapes to these: the same config keeps
the same intermediates the estimate leaves out (it runs 10-50% under the compiler for attention),
so only the shape-dependent part moves; scaling the whole estimate by its headroom instead let a
forward config measured at 60 of 64 MiB at S=2048 be used at S=4096, where it needs 68. Every
candidate is rendered first, so a config the kernel no longer accepts (an edited kernel, a stale
file) is skipped, never used.
None when nothing fits: the caller then uses the backend's default config, which is valid for
any shape.
"""
from __future__ import annotations

import functools
import json
import math
import os
from typing import Any

from kernel_dsl.config import Config
from kernel_dsl.errors import KernelError
from kernel_dsl.ir import KernelIR
from kernel_dsl.lowering.pallas.targets import TpuTarget

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")


@functools.lru_cache(maxsize=None)
def entries(target: str) -> tuple[dict[str, Any], ...]:
    """The shipped entries for one target ('tpu-v6e'); empty if none ship for it."""
    path = os.path.join(CONFIG_DIR, f"{target}.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ()
    return tuple(e for e in data.get("entries", []) if isinstance(e, dict) and "config" in e)


def dynamic_loops(ir: KernelIR) -> bool:
    """The kernel skips work (`kd.tile(begin, end)` bounds that are device values, as causal
    attention's): its configs are tuned apart from the same shapes without skipping."""
    return any(t.dynamic for t in ir.tiles)


def _shapes(ir: KernelIR) -> list[list[int]]:
    return [list(p.shape) for p in ir.inputs]


def _distance(a: list[list[int]], b: list[list[int]]) -> float:
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return math.inf
    return sum(abs(math.log2(p) - math.log2(q)) for x, y in zip(a, b) for p, q in zip(x, y))


def entry_args(kernel: Any, entry: dict[str, Any]) -> tuple[Any, ...]:
    """Shape-only arguments that reproduce an entry's specialization (meta tensors + scalars)."""
    import torch

    from kernel_dsl.dtypes import IR_TO_TORCH

    shapes, dts, scalars = iter(entry["shapes"]), iter(entry["dtypes"]), iter(entry["scalars"])
    args: list[Any] = []
    for kind in kernel.kinds:
        if kind == "Tensor":
            args.append(torch.empty(next(shapes), dtype=IR_TO_TORCH[next(dts)], device="meta"))
            continue
        s = next(scalars, entry_args)  # an entry older than a defaulted scalar: its default
        if s is entry_args:
            break
        args.append(s)
    return tuple(args)


def _estimate(ir: KernelIR, cfg: Config, target: TpuTarget) -> int | None:
    """The analytical VMEM estimate of `cfg` on `ir`; None if the kernel refuses the config."""
    from kernel_dsl.lowering.pallas import BACKEND  # the renderer: pure Python, no JAX

    try:
        return BACKEND.estimate_vmem(BACKEND.render(ir, cfg, target.name))
    except KernelError:
        return None


def _fits(name: str, ir: KernelIR, cfg: Config, target: TpuTarget, entry: dict[str, Any]) -> bool:
    """Whether the entry's config fits `target`'s VMEM at `ir`'s shapes (module docstring)."""
    from kernel_dsl.lowering.pallas.vmem import fits_vmem

    here = _estimate(ir, cfg, target)
    if here is None:
        return False
    measured = entry.get("vmem_used")
    if entry.get("shapes") == _shapes(ir):  # compiled at exactly these shapes when tuned
        return (measured if measured is not None else here) <= target.vmem_bytes
    if measured is None:  # nothing measured to anchor on: the autotuner's own pruning rule
        return fits_vmem(here, target)
    from . import KERNELS

    there = _estimate(KERNELS[name].ir(*entry_args(KERNELS[name], entry)), cfg, target)
    return there is not None and measured + here - there <= target.vmem_bytes


_memo: dict[tuple[str, str, str, bool], Config | None] = {}


def lookup(name: str, ir: KernelIR, target: TpuTarget) -> Config | None:
    """The shipped config of kernel `name` for this IR's shapes on `target`, or None."""
    shapes = _shapes(ir)
    dts = [p.dtype for p in ir.inputs]
    dynamic = dynamic_loops(ir)  # causal block skipping has configs of its own, same shapes
    memo_key = (name, json.dumps([shapes, dts]), target.name, dynamic)
    if memo_key in _memo:
        return _memo[memo_key]
    same = [e for e in entries(target.name) if e.get("kernel") == name and e.get("dtypes") == dts
            and bool(e.get("dynamic_loops", False)) == dynamic]
    exact = [e for e in same if e.get("shapes") == shapes]
    found: Config | None = None
    for e in exact + sorted(same, key=lambda e: _distance(shapes, e.get("shapes", []))):
        if _distance(shapes, e.get("shapes", [])) == math.inf:
            break
        cfg = Config.from_json(json.dumps(e["config"]))
        if _fits(name, ir, cfg, target, e):  # also refuses a config the kernel no longer accepts
            found = cfg
            break
    _memo[memo_key] = found
    return found
