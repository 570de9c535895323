"""A loop of one static block runs inline (no `pl.when`, no fori_loop: lowering/pallas/plan.py
`runs_once`), and the cost model prices such a straight-line grid step's bookkeeping at
STRAIGHT_LINE_STEP of the fitted step cost (autotune/cost_model.py `_straight_line`)."""
from __future__ import annotations

import pytest
import torch
from dsl_kernels import attention

from kernel_dsl import Config
from kernel_dsl.autotune import cost_model
from kernel_dsl.lowering.pallas import BACKEND
from kernel_dsl.lowering.pallas.plan import plan_for
from kernel_dsl.lowering.pallas.targets import TARGETS

Q = torch.empty(2, 4, 512, 128, dtype=torch.bfloat16, device="meta")


@pytest.mark.parametrize("mode", ["grid", "inner"])
def test_one_block_loop_renders_inline_and_matches_torch(mode: str) -> None:
    ir = attention.ir(Q, Q, Q)
    src = BACKEND.render(ir, Config(block_sizes=[128, 512], loop_mode=mode), "tpu-v6e").source
    body = src[src.index("_kernel("):src.index("def attention(")]
    assert "one block: the loop body once, inline" in body
    assert "pl.when" not in body and "fori_loop" not in body and "scratch" not in body
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))  # 40 keys: one ragged 64-block
    got = attention.run_cpu("pallas", (q, k, v), Config(block_sizes=[16, 64], loop_mode=mode))[0]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("blocks", "mode", "straight"), [
    ([128, 512], "grid", True),  # the key loop has one block
    ([128, 256], "grid", False),  # two: grid phases under pl.when
    ([128, 256], "inner", False),  # two: a fori_loop region
])
def test_straight_line_steps_are_recognized(blocks: list[int], mode: str, straight: bool) -> None:
    ir = attention.ir(Q, Q, Q)
    assert cost_model._straight_line(ir, plan_for(ir, Config(blocks, loop_mode=mode))) is straight


def test_a_straight_line_step_pays_its_share_of_the_step_cost() -> None:
    ir, tgt = attention.ir(Q, Q, Q), TARGETS["tpu-v6e"]
    step_s = cost_model.CALIBRATION["tpu-v6e"].step_s
    cut = step_s * (1 - cost_model.STRAIGHT_LINE_STEP)  # what overlapping saves per step
    cfg = Config([256, 512])  # (batch, heads, q blocks) = 16 steps, no megacore on v6e
    fast = cost_model.estimate(ir, cfg, tgt)
    assert fast.seconds == cost_model.estimate(ir, cfg, tgt, straight_line=True).seconds
    slow = cost_model.estimate(ir, cfg, tgt, straight_line=False)  # e.g. a kernel with branches
    assert slow.seconds - fast.seconds == pytest.approx(16 * cut, rel=1e-6)
    # 128-row q blocks: less compute per step than the bookkeeping it could hide, which then
    # takes its own time (step_s), so the step saves less
    small = Config([128, 512])
    saved = (cost_model.estimate(ir, small, tgt, straight_line=False).seconds
             - cost_model.estimate(ir, small, tgt).seconds)
    assert 0 < saved < 32 * cut
