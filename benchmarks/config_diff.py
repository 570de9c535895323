"""Shipped configs against an earlier revision's, both priced by the current cost model.

    python benchmarks/config_diff.py REV [--kernel NAME ...]

For every entry of kernels/configs/<target>.json that differs from the same entry (kernel,
shapes, scalars) at git revision REV, prints the old and new config, both configs' modelled
microseconds under today's `autotune.cost_model` (at the entry's own arguments,
kernels/tuned.py `entry_args`), new / old, and the VMEM each one's tuning measured; then the
geometric mean and range of new / old per target. The entries' stored `model_s` came from
whichever calibration tuned them, so they are not comparable with each other; this is.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess

from kernel_dsl.autotune import cost_model
from kernel_dsl.config import Config
from kernel_dsl.kernels import KERNELS
from kernel_dsl.kernels.tune import SHIPPED_TARGETS
from kernel_dsl.kernels.tuned import entry_args
from kernel_dsl.lowering.pallas.targets import TARGETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _key(e: dict) -> tuple[str, str, str]:
    return e["kernel"], json.dumps(e["shapes"]), json.dumps(e["scalars"])


def _mib(e: dict | None) -> str:
    return "-" if e is None or e.get("vmem_used") is None else f"{e['vmem_used'] / 2**20:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("rev", help="the git revision to compare with")
    ap.add_argument("--kernel", action="append", help="only these kernels (repeatable)")
    ns = ap.parse_args()
    for target in SHIPPED_TARGETS:
        rel = f"kernels/configs/{target}.json"
        old = json.loads(subprocess.run(["git", "show", f"{ns.rev}:{rel}"], cwd=ROOT, check=True,
                                        capture_output=True, text=True).stdout)
        with open(os.path.join(ROOT, rel)) as f:
            new = json.load(f)
        before = {_key(e): e for e in old["entries"]}
        ratios = []
        for e in new["entries"]:
            was = before.get(_key(e))
            if e == was or (ns.kernel and e["kernel"] not in ns.kernel):
                continue
            kernel = KERNELS[e["kernel"]]
            ir = kernel.ir(*entry_args(kernel, e))

            def us(entry: dict) -> float:
                cfg = Config.from_json(json.dumps(entry["config"]))
                return cost_model.estimate(ir, cfg, TARGETS[target]).seconds * 1e6

            t_new = us(e)
            t_old = us(was) if was else None
            if t_old:
                ratios.append(t_new / t_old)
            print(f"{target} {e['kernel']} {e['shapes'][0]} "
                  f"{was['config']['block_sizes'] if was else '-'} -> {e['config']['block_sizes']}: "
                  f"{'-' if t_old is None else f'{t_old:.1f}'} -> {t_new:.1f} us"
                  f"{'' if t_old is None else f' ({t_new / t_old:.3f})'}, "
                  f"VMEM {_mib(was)} -> {_mib(e)} MiB")
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{target}: {len(ratios)} changed, new / old geomean {geo:.3f} "
                  f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
