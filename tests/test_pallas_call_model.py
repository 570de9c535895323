"""benchmarks/pallas_call_model.py prices any captured pallas_call (JAX's own kernels) with the
calibrated model's own formula (cost_model.pipeline_time), so library_tpu.py compares like with
like: the JAX guide's matmul and kernel_dsl's matmul at the same blocks, grid and work must
model alike, and JAX's causal flash attention skips the blocks above the diagonal."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))
sys.path.insert(0, HERE)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

pytest.importorskip("jax")
import torch  # noqa: E402
from dsl_kernels import matmul  # noqa: E402
from jax_tpu_kernels import their_attention, their_matmul  # noqa: E402
from pallas_call_model import Call, Work, call_time  # noqa: E402

from kernel_dsl import Config  # noqa: E402
from kernel_dsl.autotune import cost_model  # noqa: E402
from kernel_dsl.lowering.pallas.targets import TARGETS  # noqa: E402


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"])
def test_guide_matmul_models_like_ours_at_the_same_blocks(target: str) -> None:
    n = 4096
    x = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    ours = cost_model.estimate(matmul.ir(x, x), Config([512, 1024, 1024], loop_mode="grid"),
                               TARGETS[target]).seconds
    theirs = their_matmul(n, n, n, TARGETS[target])["seconds"]
    assert theirs == pytest.approx(ours, rel=0.03)


def test_a_call_is_priced_by_the_cost_models_formula() -> None:
    tgt = TARGETS["tpu-v6e"]
    call = Call((4, 8), [((256, 128), lambda i, j: (i, j), (1024, 1024), 2, False),
                         ((256, 128), lambda i, j: (i, j), (1024, 1024), 2, True)], (True, True))
    # every block moves once: 32 steps x 2 operands, 1024 x 1024 bf16 each way; v6e: one core
    kw = dict(padded=1e9, eup=2e6, vpu=3e7, hbm=2 * 1024 * 1024 * 2, dmas=64,
              first_in=256 * 128 * 2, last_out=256 * 128 * 2, core_steps=32, cores=1)
    for live in (1.0, 0.5):  # half the steps skipped: the work runs on 16, the rest pay step_s
        got = call_time(call, Work(1e9, 2e6, 3e7, live_fraction=live), tgt)["seconds"]
        want = cost_model.pipeline_time(tgt, live_steps=32 * live, **kw)[0]  # type: ignore[arg-type]
        assert got == pytest.approx(want, rel=1e-12)
    # a megacore chip splits the parallel axes over its two TensorCores
    v5p = TARGETS["tpu-v5p"]
    got = call_time(call, Work(1e9, 2e6, 3e7), v5p)["seconds"]
    assert got == pytest.approx(cost_model.pipeline_time(
        v5p, live_steps=16, **{**kw, "core_steps": 16, "cores": 2})[0], rel=1e-12)  # type: ignore[arg-type]


def test_their_causal_attention_skips_the_blocks_above_the_diagonal() -> None:
    tgt = TARGETS["tpu-v5e"]
    full = their_attention(2, 4, 2048, False, "maxtext", tgt, False)["seconds"]
    causal = their_attention(2, 4, 2048, True, "maxtext", tgt, False)["seconds"]
    # 512 blocks over 2048: 10 of 16 block pairs run (plus the mask's extra vector work)
    assert 0.6 < causal / full < 0.8


def test_library_benchmark_runs_the_kernels_the_library_runs() -> None:
    """benchmarks/library_tpu.py prices (and compiles) the DSL kernels with the arguments the
    library passes: causal dK/dV skips query blocks only where its resident rows fit the chip
    (`dkv_skips`), so not on v4 at S=8192, where the skipping form needs ~30 of 16 MiB."""
    from library_tpu import our_attention_args

    for target, dkv in (("tpu-v4", False), ("tpu-v6e", True)):
        args = our_attention_args(2, 32, 8192, True, target)
        assert args["flash_attention_fwd"][-1] is True
        assert args["flash_attention_bwd_dq"][-1] is True
        assert args["flash_attention_bwd_dkv"][-1] is dkv
    assert our_attention_args(2, 32, 8192, False, "tpu-v4")["flash_attention_bwd_dkv"][-1] is False
