"""A registered block size as a tile dim (issue 13 item 5; kernel_dsl/block_dims.py):
`bs = kd.register_block_size(n)`, `kd.zeros([tm, bs])`, then `kd.tile(n, block_size=bs)`,
as Helion's long_sum and kl_div write it. The accumulator's lanes past a ragged block's end
keep the sums of the blocks before it, on every backend and every config."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import KernelSyntaxError, ShapeError

BACKENDS = ("pallas", "triton", "nki")
SHAPES = [(1, 1), (7, 130), (33, 1000), (5, 129)]


@kd.kernel
def longsum_manual(x: torch.Tensor) -> torch.Tensor:
    """Helion's examples/long_sum.py `longsum_manual`, `hl.` -> `kd.`."""
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)

    # Call register_block_size to know block_size_n outside of the reduction loop.
    block_size_n = kd.register_block_size(n)

    for tile_m in kd.tile(m):
        acc = kd.zeros([tile_m, block_size_n], dtype=x.dtype)
        for tile_n in kd.tile(n, block_size=block_size_n):  # Reduction loop
            acc += x[tile_m, tile_n]
        out[tile_m] = acc.sum(-1)
    return out


@kd.kernel
def rowmax(x: torch.Tensor) -> torch.Tensor:
    """A max accumulator starting at -inf: lanes no block reached keep it."""
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    bn = kd.register_block_size(n)
    for tm in kd.tile(m):
        acc = kd.full([tm, bn], float("-inf"), dtype=x.dtype)
        for tn in kd.tile(n, block_size=bn):
            acc = torch.maximum(acc, x[tm, tn])
        out[tm] = acc.amax(-1)
    return out


@kd.kernel
def kl_div_rows(y_pred: torch.Tensor, y_true: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """The device part of Helion's examples/kl_div.py (reduction="sum" per row): both block
    sizes are dims, `kd.zeros([block_size_m, block_size_n])` inside both loops."""
    BT, V = y_pred.shape
    loss = torch.zeros((BT,), dtype=torch.float32, device=y_pred.device)
    block_size_n = kd.register_block_size(V)
    block_size_m = kd.register_block_size(BT)
    for tile_bt in kd.tile(BT, block_size=block_size_m):
        loss_sum = kd.zeros([tile_bt, block_size_n], dtype=torch.float32)
        for tile_v in kd.tile(V, block_size=block_size_n):
            kl_loss = kd.zeros([block_size_m, block_size_n], dtype=torch.float32)
            y_pred_val = y_pred[tile_bt, tile_v]
            y_true_val = y_true[tile_bt, tile_v]
            log_true = torch.log(torch.clamp(y_true_val, min=eps))
            kl_loss += y_true_val * (log_true - y_pred_val)
            loss_sum += kl_loss
        loss[tile_bt] = loss_sum.sum(dim=-1)
    return loss


def _kl_rows(y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
    return (y_true * (torch.log(y_true.clamp(min=1e-10)) - y_pred)).sum(-1)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_long_sum_manual_matches_torch(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    with kd.backend(backend):
        torch.testing.assert_close(longsum_manual(x), x.sum(-1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_lanes_past_the_end_keep_the_accumulators_value(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape) - 10  # all negative: a zero in a lane past the end would win
    with kd.backend(backend):
        torch.testing.assert_close(rowmax(x), x.amax(-1))


@pytest.mark.parametrize("shape", [(1, 1), (9, 300), (20, 77)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_kl_div_with_two_block_size_dims(backend: str, shape: tuple[int, int]) -> None:
    y_pred = torch.randn(*shape).log_softmax(-1)
    y_true = torch.randn(*shape).softmax(-1)
    with kd.backend(backend):
        torch.testing.assert_close(kl_div_rows(y_pred, y_true), _kl_rows(y_pred, y_true),
                                   rtol=1e-4, atol=1e-5)


def test_the_dim_is_the_loops_tile() -> None:
    ir = longsum_manual.ir(torch.randn(7, 130))
    full = next(op for op in ir.body.ops if op.kind == "full")
    loop = next(op for op in ir.body.ops if op.kind == "loop")
    assert full.result.shape[1] is loop.attrs["tile"]
    assert [t.name for t in ir.tiles] == ["tile_m", "tile_n"]


def test_fuzz_every_config() -> None:
    from kernel_dsl.testing import fuzz

    fuzz(longsum_manual, lambda x: x.sum(-1), "x[m,n]", dtypes=[torch.float32, torch.bfloat16],
         dims={"m": (1, 20), "n": (1, 700)}, configs="all", backends=list(BACKENDS),
         max_examples=4, seed=0)


def test_a_block_size_dim_no_loop_takes_is_an_error() -> None:
    @kd.kernel
    def orphan(x: torch.Tensor):
        out = torch.empty([x.shape[0]], dtype=x.dtype)
        bn = kd.register_block_size(x.shape[1])
        for tm in kd.tile(x.shape[0]):
            out[tm] = kd.zeros([tm, bn], dtype=x.dtype).sum(-1) + x[tm, 0]
        return out

    with pytest.raises(KernelSyntaxError, match="no `kd.tile` loop takes it"):
        orphan(torch.randn(4, 8))


def test_a_loop_over_another_size_cannot_take_the_dim() -> None:
    @kd.kernel
    def other_size(x: torch.Tensor):
        m, n = x.shape
        out = torch.empty([m], dtype=x.dtype)
        bn = kd.register_block_size(n)
        for tm in kd.tile(m):
            acc = kd.zeros([tm, bn], dtype=x.dtype)
            for tn in kd.tile(n - 1, block_size=bn):
                acc += x[tm, tn]
            out[tm] = acc.sum(-1)
        return out

    with pytest.raises(ShapeError, match=r"register_block_size\(8\)`\) is taken by a loop over 7"):
        other_size(torch.randn(4, 8))


@pytest.mark.slow
def test_block_size_dims_compile_for_tpu_v5e_to_v7x() -> None:
    """tpu-v4's Mosaic cannot relayout a row sum into a 1-D output: the plain
    `out[tm] = x[tm, :].sum(-1)` fails there the same way, so v4 is left out."""
    targets = ["tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]
    r = longsum_manual.check(torch.empty(64, 4000), targets=targets, measure_vmem=False)
    assert r.ok, r.table()
    r = kl_div_rows.check(torch.empty(64, 1000), torch.empty(64, 1000), targets=targets,
                          measure_vmem=False)
    assert r.ok, r.table()
