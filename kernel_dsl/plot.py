"""`kdsl autotune --plot`: a picture of an autotuning search (needs matplotlib)."""
from __future__ import annotations

import json
import math
from typing import Any


def plot_search(res: Any, path: str) -> None:
    """Left: each evaluated config's time in evaluation order, with the best so far. Right: the
    space over the first two block sizes, coloured by time (failures marked x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = res.candidates
    secs = [c.seconds if c.seconds is not None and c.status in ("ok", "unverified") else math.nan
            for c in cands]
    unit = "modelled seconds" if res.evaluator == "model" else "CPU interpreter seconds"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    best, best_so_far = math.inf, []
    for s in secs:
        best = min(best, s) if not math.isnan(s) else best
        best_so_far.append(best if best < math.inf else math.nan)
    ax1.scatter(range(len(secs)), secs, s=10, label="evaluated")
    ax1.plot(range(len(secs)), best_so_far, color="C3", label="best so far")
    ax1.set_yscale("log")
    ax1.set_xlabel("evaluation")
    ax1.set_ylabel(unit)
    ax1.legend()
    pts = [json.loads(c.config).get("block_sizes", []) for c in cands]
    xy = [(p[0], p[1] if len(p) > 1 else 0) for p in pts if p]
    if xy:
        ok = [(x, y, s) for (x, y), s in zip(xy, secs) if not math.isnan(s)]
        bad = [(x, y) for (x, y), s in zip(xy, secs) if math.isnan(s)]
        if ok:
            sc = ax2.scatter([p[0] for p in ok], [p[1] for p in ok], c=[p[2] for p in ok],
                             cmap="viridis_r", s=40)
            fig.colorbar(sc, ax=ax2, label=unit)
        if bad:
            ax2.scatter([p[0] for p in bad], [p[1] for p in bad], marker="x", color="C3",
                        label="pruned / failed")
            ax2.legend()
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log", base=2)
        ax2.set_xlabel("block_sizes[0]")
        ax2.set_ylabel("block_sizes[1]")
    fig.suptitle(f"autotune {res.kernel} for {res.target} ({res.evaluator}); best {res.best!r}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
