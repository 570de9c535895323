"""What the compiler's own schedule says about Tokamax's causal diagonal blocks (issue 17).

    pip install tokamax==0.0.12      # benchmark-only; not a dependency of kernel_dsl
    python benchmarks/tokamax_schedule.py [--chip v7x] [--json benchmarks/results/tokamax_schedule.json]
    python benchmarks/tokamax_schedule.py --rescore   # the model's ratios only, after a model change

The published Tokamax flash-attention points where every visited block is diagonal (one kv block
per q block) measure causal / non-causal at 1.04-1.32 on real chips, where the analytical model
says 1.00-1.13 (REPORT.md §8). Is the mask's arithmetic the cost? This compiles Tokamax's *own*
splash forward (the kernel behind that table), causal and not, each with its published config,
for libtpu's compile-only target with the bundle dump on, and reads the VLIW schedule with
kernel_dsl's parser (autotune/schedule.py, docs/schedule_evaluator.md):

- the causal kernel has two branch regions per grid step, `pl.when(should_not_mask)` and its
  masked twin; their bundle counts give the mask's own static cost;
- a diagonal step runs the masked region (plus the init / finalize regions, which run on every
  step when there is one kv block per q block); the non-causal kernel with one kv block compiles
  with no branch at all. Their ratio is the schedule's causal / non-causal.

Ratios only: the TPU7x and v6e clocks are not known (docs/schedule_evaluator.md), and a ratio
of the same chip's bundles does not need one. The schedule is static: it cannot see stalls.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TOPOLOGY = {"v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "v7x": "tpu7x:2x2x1"}
KERNEL = "splash_mha_fwd_no_residuals"  # the Pallas program's name in libtpu's dump


def _compile(job: dict[str, Any]) -> None:
    """In a fresh process (LIBTPU_INIT_ARGS is read once, when libtpu loads): compile Tokamax's
    splash forward for one (shape, config, causal) on the compile-only target."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_kernel as sk
    from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_mask as ml

    c, s = job["config"], job["seq"]
    layout = sk.QKVLayout
    cfg = sk.SplashConfig(block_q=c["block_q"], block_kv=c["block_kv"],
                          block_kv_compute=c["block_kv_compute"], q_layout=layout(c["q_layout"]),
                          k_layout=layout(c["k_layout"]), v_layout=layout(c["v_layout"]),
                          use_experimental_scheduler=c["use_experimental_scheduler"],
                          use_base2_exp=c["use_base2_exp"])
    mask = ml.CausalMask((s, s)) if job["causal"] else ml.FullMask((s, s))
    kernel = sk.make_splash_mha(mask, config=cfg, q_seq_shards=1)  # mask info: host arrays
    dev = topologies.get_topology_desc(platform="tpu", topology_name=job["topology"]).devices[0]
    spec = jax.ShapeDtypeStruct((job["heads"], s, job["head_dim"]), jnp.bfloat16,
                                sharding=SingleDeviceSharding(dev))
    with jax.default_device(dev):
        jax.jit(lambda q, k, v: kernel(q, k, v)).lower(spec, spec, spec).compile()


def _schedule(job: dict[str, Any]) -> dict[str, Any]:
    """Compile `job` with the dump on and read the grid step's bundles and branch regions."""
    from kernel_dsl.autotune.schedule import read_dump

    with tempfile.TemporaryDirectory(prefix="kd_tokamax_") as dump:
        env = {**os.environ, "LIBTPU_INIT_ARGS": f"--xla_jf_dump_to={dump}",
               "TPU_SKIP_MDS_QUERY": "1"}
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, __file__, "--compile", json.dumps(job)], env=env,
                             capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            raise RuntimeError(f"compile failed: {res.stderr[-2000:]}")
        sched, _ = read_dump(dump, kernel=KERNEL)
    grid = min(sched.loops, key=lambda lp: lp.depth)
    inside = [b for b in sched.branches if grid.start <= b.at <= grid.end
              and b.bundles <= grid.bundles / 2]  # not the pipeline-stage guard
    regions = [b for b in inside if not any(o is not b and o.at < b.at and b.target <= o.target
                                            for o in inside)]  # outermost only
    return {"loop_bundles": grid.bundles, "regions": [r.bundles for r in regions],
            "compile_s": round(time.perf_counter() - t0, 1)}


def _pairs(chips: set[str]) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, int]]]:
    """Published causal records whose every visited block is diagonal (block_kv >= S, MHA),
    each with the non-causal record of the same shape."""
    with open(os.path.join(HERE, "tpu_published.json")) as f:
        records = {r["id"]: r for r in json.load(f)["records"]}
    pat = re.compile(r"/(v\w+)/pallas_mosaic_tpu_flash_attention/(\d+)x(\d+)x(\d+)x(\d+)-kv(\d+)"
                     r"-causal$")
    out = []
    for rid, rec in records.items():
        m = pat.search(rid)
        if not m or m.group(1) not in chips:
            continue
        _, seq, heads, head_dim, kv = map(int, m.groups()[1:])
        plain = records.get(rid[: -len("-causal")])
        if heads == kv and rec["config"]["block_kv"] >= seq and plain is not None:
            out.append((rec, plain, {"seq": seq, "heads": heads, "head_dim": head_dim}))
    return out


def _model_times() -> dict[str, float]:
    """The analytical model's time per published point, as benchmarks/published_compare.py last
    wrote them (Tokamax's XLA layout transposes included, as in the measured times)."""
    try:
        with open(os.path.join(HERE, "results", "published_compare.json")) as f:
            return {r["id"]: r["model_s"] for r in json.load(f)["rows"]}
    except (OSError, ValueError, KeyError):
        return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", action="append", choices=sorted(TOPOLOGY))
    ap.add_argument("--json", default=os.path.join(HERE, "results", "tokamax_schedule.json"))
    ap.add_argument("--compile", help=argparse.SUPPRESS)  # the worker mode (one compile)
    ap.add_argument("--rescore", action="store_true",
                    help="keep the saved schedules, refresh the model's ratios (after a model "
                         "change; no Tokamax, no compiles)")
    args = ap.parse_args()
    if args.compile:
        return _compile(json.loads(args.compile))
    model = _model_times()
    if args.rescore:
        with open(args.json) as f:
            saved = json.load(f)
        for row in saved["rows"]:
            plain = row["id"][: -len("-causal")]
            row["model_ratio"] = (model[row["id"]] / model[plain]
                                  if row["id"] in model and plain in model else None)
        return _save(args.json, saved["rows"], saved["tokamax"])
    rows = []
    print(f"{'point':58} {'measured':>8} {'model':>6} {'schedule':>8} {'mask region':>12}")
    for causal, plain, shape in _pairs(set(args.chip or TOPOLOGY)):
        topo = TOPOLOGY[causal["chip"]]
        c = _schedule({**shape, "config": causal["config"], "causal": True, "topology": topo})
        p = _schedule({**shape, "config": plain["config"], "causal": False, "topology": topo})
        if len(c["regions"]) < 2 or p["regions"]:
            raise RuntimeError(f"{causal['id']}: unexpected branch structure {c} / {p}")
        # in program order: init, pl.when(should_not_mask), the masked twin, finalize
        big = sorted(sorted(range(len(c["regions"])), key=lambda i: -c["regions"][i])[:2])
        unmasked, masked = (c["regions"][i] for i in big)
        diagonal_step = c["loop_bundles"] - unmasked
        row = {"id": causal["id"], "chip": causal["chip"], **shape,
               "causal_config": causal["config"], "plain_config": plain["config"],
               "measured_ratio": causal["measured"]["time_s"] / plain["measured"]["time_s"],
               "model_ratio": (model[causal["id"]] / model[plain["id"]]
                               if causal["id"] in model and plain["id"] in model else None),
               "schedule_ratio": diagonal_step / p["loop_bundles"],
               "diagonal_step_bundles": diagonal_step, "plain_step_bundles": p["loop_bundles"],
               "masked_region": masked, "unmasked_region": unmasked,
               "mask_region_excess": masked / unmasked - 1,
               "compile_s": c["compile_s"] + p["compile_s"]}
        rows.append(row)
        mr = "-" if row["model_ratio"] is None else f"{row['model_ratio']:.2f}"
        print(f"{causal['id'].split('/', 1)[1]:58} {row['measured_ratio']:8.2f} {mr:>6} "
              f"{row['schedule_ratio']:8.2f} {100 * row['mask_region_excess']:+11.1f}%", flush=True)
    _save(args.json, rows, _version())


def _save(path: str, rows: list[dict[str, Any]], tokamax: str) -> None:
    sys.path.insert(0, HERE)
    from published_compare import spearman

    by_chip = {chip: {key: spearman([r["measured_ratio"] for r in rows if r["chip"] == chip],
                                    [r[key] for r in rows if r["chip"] == chip])
                      for key in ("schedule_ratio", "model_ratio")}
               for chip in sorted({r["chip"] for r in rows})}
    for key in ("schedule_ratio", "model_ratio"):
        print(f"Spearman, measured vs {key}: " + ", ".join(
            f"{c} {'-' if v[key] is None else f'{v[key]:.2f}'}" for c, v in by_chip.items()))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"command": "python benchmarks/tokamax_schedule.py", "tokamax": tokamax,
                   "spearman_by_chip": by_chip, "rows": rows}, f, indent=1)
    print(f"wrote {path}")


def _version() -> str:
    import importlib.metadata

    return importlib.metadata.version("tokamax")


if __name__ == "__main__":
    main()
