"""`kd.tile(begin, end)` (Helion's `hl.tile(begin, end)`): loops over part of an axis, bounded
by ints or by an outer tile's `.begin`/`.end`, on every backend and at every block size the
config may pick; `.end`, `.count`, `.id` and `.block_size`; masked stores; clear errors."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import tile_bounds
from kernel_dsl.errors import KernelSyntaxError

BACKENDS = ("pallas", "triton", "nki")
CONFIGS = ([8, 4], [16, 16], [64, 8], [1, 1], [8, 128])


@kd.kernel
def causal_prefix(y: torch.Tensor):
    """Row block [b, e) of the output is the sum of rows 0 .. e-1: a causal loop."""
    m, n = y.shape
    out = torch.empty([m, n], dtype=torch.float32)
    for tm in kd.tile(m):
        acc = kd.zeros([tm, n], dtype=torch.float32)
        for tk in kd.tile(0, tm.end):
            acc = acc + y[tk, :].float().sum(0)
        out[tm, :] = acc
    return out


def causal_prefix_ref(y: torch.Tensor, bm: int) -> torch.Tensor:
    out = torch.empty_like(y, dtype=torch.float32)
    for b in range(0, y.shape[0], bm):
        e = min(b + bm, y.shape[0])
        out[b:e] = y[:e].float().sum(0)
    return out


@kd.kernel
def window_sum(x: torch.Tensor):
    """Static bounds that start past 0 and end before the axis does."""
    m, n = x.shape
    out = torch.empty([m], dtype=torch.float32)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(3, n - 2):
            acc = acc + x[tm, tn].sum(-1)
        out[tm] = acc
    return out


@kd.kernel
def block_sums(x: torch.Tensor):
    """Helion's `for mb in hl.tile(mb_cta.begin, mb_cta.end)`: an inner loop over the rows of
    the outer block, in blocks of its own."""
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.float32)
    for tm in kd.tile(m):
        acc = kd.zeros([n], dtype=torch.float32)
        for tr in kd.tile(tm.begin, tm.end):
            acc = acc + x[tr, :].sum(0)
        out[tm, :] = acc[None, :].expand(tm, n)
    return out


def block_sums_ref(x: torch.Tensor, bm: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for b in range(0, x.shape[0], bm):
        out[b:b + bm] = x[b:b + bm].sum(0)
    return out


@kd.kernel
def scale_middle(x: torch.Tensor):
    """Stores through a bounded tile leave the lanes outside its bounds as they were."""
    m, n = x.shape
    out = torch.zeros([m, n], dtype=torch.float32)
    for tm in kd.tile(m):
        for tn in kd.tile(2, n - 3):
            out[tm, tn] = x[tm, tn] * 2
    return out


@kd.kernel
def loop_facts(x: torch.Tensor):
    """Per row block: the blocks a loop from the block's begin to the end takes, counted by the
    body and by `.count`; and the inner tile's last `.end`, `.id` and `.block_size`."""
    m = x.shape[0]
    out = torch.empty([m, 5], dtype=torch.int32)
    for tm in kd.tile(m):
        trips = kd.zeros([tm], dtype=torch.int32)
        count = kd.zeros([tm], dtype=torch.int32)
        end = kd.zeros([tm], dtype=torch.int32)
        id_ = kd.zeros([tm], dtype=torch.int32)
        bs = kd.zeros([tm], dtype=torch.int32)
        for tk in kd.tile(tm.begin + 1, m):
            trips = trips + 1
            count = count * 0 + tk.count
            end = end * 0 + tk.end
            id_ = id_ * 0 + tk.id
            bs = bs * 0 + tk.block_size
        out[tm, 0] = trips
        out[tm, 1] = count
        out[tm, 2] = end
        out[tm, 3] = id_
        out[tm, 4] = bs
    return out


def loop_facts_ref(m: int, bm: int, bk: int) -> torch.Tensor:
    rows = []
    bk_eff = min(bk, max(m - 1, 1))  # the inner loop spans at most m - 1 rows
    for i in range(m):
        lo = (i // bm) * bm + 1
        k = max(0, -(-(m - lo) // bk_eff))
        last_begin = lo + (k - 1) * bk_eff
        facts = [min(last_begin + bk_eff, m), last_begin // bk_eff, bk_eff] if k else [0, 0, 0]
        rows.append([k, k if k else 0, *facts])
    return torch.tensor(rows, dtype=torch.int32)


def _run(kernel, backend: str, args, blocks):  # noqa: ANN001, ANN202
    return kernel.run_cpu(backend, args, kd.Config(blocks))[0]


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_loop_matches_torch(backend: str, blocks: list[int]) -> None:
    y = torch.randn(37, 8)
    got = _run(causal_prefix, backend, (y,), blocks)
    torch.testing.assert_close(got, causal_prefix_ref(y, min(blocks[0], 37)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_static_bounds_past_zero(backend: str, blocks: list[int]) -> None:
    x = torch.randn(13, 29)
    got = _run(window_sum, backend, (x,), blocks)
    torch.testing.assert_close(got, x[:, 3:27].sum(-1), rtol=1e-5, atol=1e-5)
    out = _run(scale_middle, backend, (x,), blocks)
    want = torch.zeros_like(x)
    want[:, 2:26] = x[:, 2:26] * 2
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_over_an_outer_tiles_range(backend: str, blocks: list[int]) -> None:
    x = torch.randn(41, 6)
    got = _run(block_sums, backend, (x,), blocks)
    torch.testing.assert_close(got, block_sums_ref(x, min(blocks[0], 41)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", [[8, 4], [16, 64], [1, 1], [4, 3]], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_trip_count_end_id_and_block_size(backend: str, blocks: list[int]) -> None:
    m = 23
    got = _run(loop_facts, backend, (torch.zeros(m, 1),), blocks)
    want = loop_facts_ref(m, min(blocks[0], m), blocks[1])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_size_one_and_empty_loops(backend: str) -> None:
    y = torch.randn(1, 1)
    torch.testing.assert_close(_run(causal_prefix, backend, (y,), [1, 1]), y)
    x = torch.randn(5, 5)  # 3 .. n - 2 = 3: the loop never runs, the carried zeros remain
    torch.testing.assert_close(_run(window_sum, backend, (x,), [4, 4]), torch.zeros(5))


def test_ir_records_the_bounds_and_their_static_reach() -> None:
    ir = causal_prefix.ir(torch.randn(37, 8))
    tk = next(t for t in ir.tiles if t.kind == "loop")
    assert tk.bounded and tk.dynamic and tk.lo == 0
    assert (tk.extent, tk.limit) == (37, 37)  # tm.end <= 37
    assert tile_bounds.value_range(tk.hi) == (1, 37)
    w = next(t for t in window_sum.ir(torch.randn(13, 29)).tiles if t.kind == "loop")
    assert (w.lo, w.hi, w.extent, w.dynamic) == (3, 27, 24, False)


def test_cost_model_counts_only_visited_blocks() -> None:
    from kernel_dsl.config import block_values

    ir = causal_prefix.ir(torch.randn(64, 8))
    tk = next(t for t in ir.tiles if t.kind == "loop")
    blocks = block_values(ir, kd.Config([16, 16]))
    # row blocks end at 16, 32, 48, 64: 1 + 2 + 3 + 4 key blocks of 16
    assert tile_bounds.mean_trips(tk, ir.grid, blocks) == 2.5



def _loop_tile(ir):  # noqa: ANN001, ANN202
    return next(t for t in ir.tiles if t.kind == "loop")


@pytest.mark.parametrize(("m", "blocks", "ragged"), [
    (64, [16, 16], False),  # every row block ends at a multiple of 16: whole key blocks
    (64, [32, 16], False),
    (64, [16, 32], True),  # tm.end = 16: half a key block of 32
    (60, [16, 16], True),  # the last row block ends at 60
    (64, [1, 1], False),
])
def test_a_loop_of_whole_blocks_is_not_ragged(m: int, blocks: list[int], ragged: bool) -> None:
    """`hi - lo` a multiple of the block at every grid point (tile_bounds.residue) renders no
    edge mask; the loop then still matches torch on every backend."""
    from kernel_dsl.config import block_values
    from kernel_dsl.tile_bounds import is_ragged

    y = torch.randn(m, 8)
    ir = causal_prefix.ir(y)
    assert is_ragged(_loop_tile(ir), block_values(ir, kd.Config(blocks))) is ragged
    src = causal_prefix.source(y, config=kd.Config(blocks))
    assert ("broadcasted_iota" in src) is ragged, src
    for backend in BACKENDS:
        torch.testing.assert_close(_run(causal_prefix, backend, (y,), blocks),
                                   causal_prefix_ref(y, blocks[0]), rtol=1e-5, atol=1e-5)


def test_residue_follows_add_sub_mul_min_max_where() -> None:
    """A causal row block's key end `min(begin + size, n) - 1 + 1` (the library's key_split)
    is a multiple of the key block when the row block and n are; a loaded value is unknown."""
    from kernel_dsl.config import block_values

    ir = causal_prefix.ir(torch.randn(64, 8))
    hi = _loop_tile(ir).hi
    for blocks, want in (([16, 16], 0), ([16, 32], None), ([48, 16], 0), ([24, 16], None)):
        assert tile_bounds.residue(hi, blocks[1], block_values(ir, kd.Config(blocks))) == want
    assert tile_bounds.residue(hi, 32, block_values(ir, kd.Config([48, 32]))) is None  # 48, 64
    for m, want in ((64, 0), (60, None)):
        ir = causal_prefix.ir(torch.randn(m, 8))
        assert tile_bounds.residue(_loop_tile(ir).hi, 8, block_values(ir, kd.Config([8, 8]))) == want


def test_cost_model_counts_edge_masks_only_where_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ragged loop's mask before the sum costs PAD_FILL_OPS VPU element-ops per masked
    element; a loop of whole blocks renders none and is charged none."""
    from kernel_dsl.autotune import cost_model
    from kernel_dsl.lowering.pallas.plan import plan_for
    from kernel_dsl.lowering.pallas.targets import TARGETS

    ir = causal_prefix.ir(torch.randn(64, 8))

    def masks(blocks: list[int]) -> float:
        plan = plan_for(ir, kd.Config(blocks))
        with_masks = cost_model._op_cost(ir, plan, TARGETS["tpu-v6e"])[3]
        monkeypatch.setattr(cost_model, "PAD_FILL_OPS", 0)
        without = cost_model._op_cost(ir, plan, TARGETS["tpu-v6e"])[3]
        monkeypatch.undo()
        return with_masks - without

    assert masks([16, 16]) == 0
    # [16, 32]: row blocks end at 16, 32, 48, 64: 1 + 1 + 2 + 2 key blocks of 32 x 8, masked
    assert masks([16, 32]) == cost_model.PAD_FILL_OPS * (1 + 1 + 2 + 2) * 32 * 8


@kd.kernel
def nested_causal_prefix(y: torch.Tensor):
    """causal_prefix one level down: a grid over columns, a loop over row blocks, and inside it
    a loop bounded by that loop's own tile (`kd.tile(0, tm.end)`)."""
    m, n = y.shape
    out = torch.empty([m, n], dtype=torch.float32)
    for tn in kd.tile(n):
        for tm in kd.tile(m):
            acc = kd.zeros([tm, tn], dtype=torch.float32)
            for tk in kd.tile(0, tm.end):
                acc = acc + y[tk, tn].float().sum(0)
            out[tm, tn] = acc
    return out


@pytest.mark.parametrize("blocks", [[8, 16, 16], [4, 8, 16], [8, 1, 1], [8, 64, 8]], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_bounded_by_an_enclosing_loop(backend: str, blocks: list[int]) -> None:
    y = torch.randn(37, 8)
    got = _run(nested_causal_prefix, backend, (y,), blocks)
    torch.testing.assert_close(got, causal_prefix_ref(y, min(blocks[1], 37)), rtol=1e-5,
                               atol=1e-5)


def test_cost_model_counts_nested_loops_by_their_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inner loop bounded by an enclosing loop's index: 1 + 2 + 3 + 4 key blocks of 16 for
    the four row blocks, not 4 x 4 (each at its static most)."""
    from kernel_dsl.autotune import cost_model
    from kernel_dsl.config import block_values
    from kernel_dsl.lowering.pallas.plan import plan_for
    from kernel_dsl.lowering.pallas.targets import TARGETS

    ir = nested_causal_prefix.ir(torch.randn(64, 8))
    tm, tk = [t for t in ir.tiles if t.kind == "loop"]
    for blocks, runs in (([8, 16, 16], 10), ([8, 16, 8], 20), ([8, 64, 16], 4)):
        bv = block_values(ir, kd.Config(blocks))
        assert tile_bounds.mean_body_runs([tm, tk], ir.grid, bv) == runs
        assert tile_bounds.mean_body_runs([tm], ir.grid, bv) == 64 // blocks[1]
    # the cost model's walk: the inner body's VPU work counts 10 runs, not 16
    plan = plan_for(ir, kd.Config([8, 16, 16]))
    real = cost_model._op_cost(ir, plan, TARGETS["tpu-v5e"])[3]
    counted = tile_bounds.mean_body_runs

    def vpu_with_inner_runs(n: float) -> float:
        def fake(chain, grid, blocks):  # noqa: ANN001, ANN202
            return n if len(chain) == 2 else counted(chain, grid, blocks)
        monkeypatch.setattr(tile_bounds, "mean_body_runs", fake)
        return cost_model._op_cost(ir, plan, TARGETS["tpu-v5e"])[3]

    outer, static_most = vpu_with_inner_runs(0), vpu_with_inner_runs(16)
    assert (real - outer) / (static_most - outer) == pytest.approx(10 / 16)


def test_real_tpu_compiler_accepts_a_causal_loop() -> None:
    rep = causal_prefix.check(torch.randn(512, 256), targets=["tpu-v5e", "tpu-v6e"],
                              config=kd.Config([128, 128]))
    assert [e.status for e in rep.entries] == ["ok", "ok"], rep


@kd.kernel
def _grid_from_three(x: torch.Tensor):
    out = torch.empty_like(x)
    for tm in kd.tile(3, x.shape[0]):
        out[tm] = x[tm]
    return out


@kd.kernel
def _loaded_bound(x: torch.Tensor, n: torch.Tensor):
    out = torch.zeros_like(x)
    for tm in kd.tile(x.shape[0]):
        for tk in kd.tile(0, n[0]):
            out[tm] = x[tm]
    return out


@kd.kernel
def _negative_begin(x: torch.Tensor):
    out = torch.zeros([x.shape[0]], dtype=torch.float32)
    for tm in kd.tile(x.shape[0]):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tk in kd.tile(tm.begin - 4, tm.end):
            acc = acc + x[tm, tk].sum(-1)
        out[tm] = acc
    return out


@kd.kernel
def _past_the_axis(x: torch.Tensor, y: torch.Tensor):
    out = torch.zeros([x.shape[0], 1], dtype=torch.float32)
    for tm in kd.tile(x.shape[0]):
        acc = kd.zeros([1], dtype=torch.float32)
        for tk in kd.tile(0, tm.end):
            acc = acc + y[tk, :].sum(0)
        out[tm, :] = acc[None, :].expand(tm, 1)
    return out


@pytest.mark.parametrize("kernel, args, message", [
    (_grid_from_three, (torch.randn(8),), "launch grid's `kd.tile(3, 8)` does not start at 0"),
    (_loaded_bound, (torch.randn(8), torch.tensor([3], dtype=torch.int32)),
     "bounded by values read from memory but indexes no tensor"),
    (_negative_begin, (torch.randn(8, 8),), "can be negative (-4)"),
    (_past_the_axis, (torch.randn(16, 2), torch.randn(8, 1)), "can reach index 15 but axis"),
], ids=["grid", "loaded", "negative", "past-axis"])
def test_bounds_outside_the_subset_name_the_users_line(kernel, args, message: str) -> None:  # noqa: ANN001
    with pytest.raises(KernelSyntaxError) as e:
        kernel.ir(*args)
    assert message in str(e.value)
    assert "test_tile_bounds.py" in str(e.value)  # the user's line
