"""With the loops as grid phases (loop_mode "grid"), the code before the first loop runs at every
step of the phase axis (lowering/pallas/grid_steps.py), and the cost model counts it per step
(autotune/cost_model.py `_op_cost`); a fori_loop ("inner") runs it once per grid point."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import Config
from kernel_dsl.autotune import cost_model
from kernel_dsl.lowering.pallas.targets import TARGETS


@kd.tpu_kernel
def exp_then_loop(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    s = y.shape[0]
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tm in kd.tile(m):
        e = torch.exp(x[tm, :])  # before the loop: EUP work on [tm, n]
        acc = kd.zeros([tm, n], dtype=torch.float32)
        for ts in kd.tile(s):
            acc = acc + e * y[ts, :].sum(dim=0)
        out[tm, :] = acc
    return out


M, N, S = 512, 256, 1024
X = torch.empty(M, N, device="meta")
Y = torch.empty(S, N, device="meta")


def test_code_before_the_loop_is_rendered_outside_every_branch_in_grid_mode() -> None:
    src = exp_then_loop.source(X, Y, config=Config([128, 256], loop_mode="grid"), target="tpu-v6e")
    body = src[src.index("_kernel("):src.index("def exp_then_loop(")]
    assert body.index("jnp.exp(") < body.index("@pl.when(")  # recomputed at each of 4 steps


def test_grid_phases_count_the_code_before_the_loop_once_per_step() -> None:
    ir, tgt = exp_then_loop.ir(X, Y), TARGETS["tpu-v6e"]  # one TensorCore: no megacore split
    grid = cost_model.estimate(ir, Config([128, 256], loop_mode="grid"), tgt)
    inner = cost_model.estimate(ir, Config([128, 256], loop_mode="inner"), tgt)
    steps = S // 256
    extra = M * N * (steps - 1) * cost_model.CALIBRATION["tpu-v6e"].eup_s  # exp, EUP elements
    assert grid.vector_seconds - inner.vector_seconds == pytest.approx(extra, rel=1e-9)
    # one phase step: the same count in both forms
    one_grid = cost_model.estimate(ir, Config([128, S], loop_mode="grid"), tgt)
    one_inner = cost_model.estimate(ir, Config([128, S], loop_mode="inner"), tgt)
    assert one_grid.vector_seconds == pytest.approx(one_inner.vector_seconds, rel=1e-12)
