"""The library tests' accuracy check: a result against the float64 reference of the same inputs."""
from __future__ import annotations

import torch


def assert_close_to_exact(got: torch.Tensor, exact: torch.Tensor, lowp: torch.Tensor | None = None,
                          *, f32_rel: float, lowp_rel: float, finite: bool = False) -> None:
    """float32 (`lowp` None): within f32_rel of the largest exact value (+1). Low precision:
    within twice PyTorch's own error in that dtype (`lowp`: PyTorch's result) + lowp_rel."""
    assert got.shape == exact.shape, (got.shape, exact.shape)
    if finite:
        assert torch.isfinite(got).all()
    err = (got.double() - exact).abs().max().item()
    scale = exact.abs().max().item() + 1.0
    if lowp is None:
        assert err <= f32_rel * scale, err
    else:
        ref_err = (lowp.double() - exact).abs().max().item()
        assert err <= 2 * ref_err + lowp_rel * scale, (err, ref_err)
