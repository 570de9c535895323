"""Arithmetic on a block size (issue 13 item 5; kernel_dsl/block_arith.py): in device code
`bk = kd.register_block_size(n)` is an int32 scalar, min(config's block, n), usable in
`x // bk * bk`, `(n + bk - 1) // bk`, `2 * bk`, `bk // 2` and as loop bounds split at a block
multiple; in host code it is a KernelSyntaxError (an output sized by a block count)."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.config import block_values
from kernel_dsl.errors import KernelSyntaxError
from kernel_dsl.tile_bounds import value_range

BACKENDS = ("pallas", "triton", "nki")


@kd.kernel
def split_rows(x: torch.Tensor) -> torch.Tensor:
    """Columns [0, full_end) doubled, the rest shifted by a block-size expression; full_end is
    a block multiple that depends on the row block."""
    m, n = x.shape
    out = torch.empty([m, n], dtype=x.dtype)
    bn = kd.register_block_size(n)
    for tm in kd.tile(m):
        full_end = (n - tm.begin) // bn * bn
        for tn in kd.tile(0, full_end, block_size=bn):
            out[tm, tn] = x[tm, tn] * 2
        for tn in kd.tile(full_end, n, block_size=bn):
            out[tm, tn] = x[tm, tn] + (2 * bn + bn // 2 - (n + bn - 1) // bn + bn % 3)
    return out


def _reference(x: torch.Tensor, cfg: kd.Config) -> torch.Tensor:
    m, n = x.shape
    b = block_values(split_rows.ir(x), cfg)
    bm, bn = min(b[0], m), min(b[1], n)
    out = x.clone()
    for r0 in range(0, m, bm):
        full_end = (n - r0) // bn * bn
        rows = slice(r0, min(r0 + bm, m))
        out[rows, :full_end] = x[rows, :full_end] * 2
        out[rows, full_end:] += 2 * bn + bn // 2 - (n + bn - 1) // bn + bn % 3
    return out


SHAPES = [(1, 1), (37, 301), (5, 7), (16, 256)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_split_at_a_block_multiple_every_config(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    ir = split_rows.ir(x)
    space = list({tuple(block_values(ir, c).values()): c  # other knobs do not change the values
                  for c in split_rows.configs(x, backend=backend)}.values())
    if shape != (37, 301):  # every config on one ragged shape, a spread on the others
        space = space[::max(1, len(space) // 4)]
    for cfg in space:
        y = split_rows.run_cpu(backend, (x,), cfg)[0]
        torch.testing.assert_close(y, _reference(x, cfg), msg=lambda m, c=cfg: f"{c}: {m}")


def test_rounded_down_keeps_a_tight_range() -> None:
    """`x // bk * bk` is at most x: the loop it bounds is no longer than the axis (interval
    arithmetic alone would give n * n)."""
    ir = split_rows.ir(torch.randn(37, 301))
    loops = [op for op in ir.body.ops if op.kind == "loop"]
    hi = loops[0].attrs["tile"].hi
    assert value_range(hi) == (0, 301)
    assert [op.attrs["tile"].extent for op in loops] == [301, 301]


def test_block_count_in_host_code_is_an_error() -> None:
    @kd.kernel
    def partial_sums(x: torch.Tensor):
        m, n = x.shape
        bm = kd.register_block_size(m)
        partial = torch.empty([(m + bm - 1) // bm, n], dtype=x.dtype)
        for tm in kd.tile(m, block_size=bm):
            partial[tm.id, :] = x[tm, :].sum(0)
        return partial

    with pytest.raises(KernelSyntaxError, match="host code") as e:
        partial_sums(torch.randn(8, 4))
    assert e.value.loc is not None and "partial = torch.empty" in (e.value.loc.text or "")


@pytest.mark.slow
def test_split_loops_compile_for_every_tpu() -> None:
    targets = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]
    r = split_rows.check(torch.empty(256, 1000), targets=targets, measure_vmem=False)
    assert r.ok, r.table()
