"""Device-side `if`/`elif`/`else` and `continue` (kernel_dsl/device_if.py): Python `if` on
grid indices and loaded scalars, as a Helion user writes it, traced as predicated branches and
checked against torch on every backend at ragged sizes (incl. 1 and primes)."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ControlFlowError

BACKENDS = ("pallas", "triton", "nki")


@kd.kernel
def parity_rows(x: torch.Tensor):
    """Even rows doubled, odd rows minus one: an `if` on a grid index doing different stores."""
    n, m = x.shape
    out = torch.empty([n, m], dtype=torch.float32)
    for b in kd.grid(n):
        for tm in kd.tile(m):
            if b % 2 == 0:
                out[b, tm] = x[b, tm] * 2.0
            else:
                out[b, tm] = x[b, tm] - 1.0
    return out


@kd.kernel
def row_modes(x: torch.Tensor, mode: torch.Tensor):
    """Per-row mode flags read from memory: `if/elif/else` on a loaded scalar; a value that
    flows out of the branches (`scale`) and a store only one branch makes (`hits`)."""
    n, m = x.shape
    out = torch.empty([n, m], dtype=torch.float32)
    hits = torch.zeros([n, m], dtype=torch.float32)
    for b in kd.grid(n):
        f = mode[b]
        row = x[b, :]
        if f == 0:
            scale = 2.0
            hits[b, :] = row
        elif f == 1:
            scale = -1.0
        else:
            scale = 0.5
        out[b, :] = row * scale
    return out, hits


def _row_modes_ref(x, mode):
    scale = torch.where(mode == 0, 2.0, torch.where(mode == 1, -1.0, 0.5))
    return x * scale[:, None], torch.where((mode == 0)[:, None], x, 0.0)


@kd.kernel
def masked_rowsum(x: torch.Tensor, flags: torch.Tensor):
    """A branch assigning a loop-carried accumulator: flagged rows sum over k, others -1."""
    n, k, d = x.shape
    out = torch.empty([n, d], dtype=torch.float32)
    for b in kd.grid(n):
        for td in kd.tile(d):
            acc = kd.zeros([td], dtype=torch.float32)
            if flags[b] > 0:
                for r in kd.grid(k):
                    acc = acc + x[b, r, td]
            else:
                acc = acc - 1.0
            out[b, td] = acc
    return out


@kd.kernel
def jagged_mean(x: torch.Tensor, offsets: torch.Tensor):
    """Helion's jagged mean: segment b is rows offsets[b]:offsets[b+1]; empty segments are
    skipped with `continue` (their output keeps torch.zeros' value)."""
    total, d = x.shape
    nb = offsets.shape[0] - 1
    out = torch.zeros([nb, d], dtype=torch.float32)
    for b in kd.grid(nb):
        start = offsets[b]
        end = offsets[b + 1]
        if end <= start:
            continue
        acc = kd.zeros([d], dtype=torch.float32)
        for tr in kd.tile(start, end):
            acc = acc + x[tr, :].sum(0)
        out[b, :] = acc / (end - start).to(torch.float32)
    return out


@kd.kernel
def jagged_guarded(x: torch.Tensor, offsets: torch.Tensor):
    """The same with the work inside `if end > start:`, an atomic in the branch."""
    total, d = x.shape
    nb = offsets.shape[0] - 1
    out = torch.zeros([nb, d], dtype=torch.float32)
    count = torch.zeros([1], dtype=torch.float32)
    for b in kd.grid(nb):
        start = offsets[b]
        end = offsets[b + 1]
        if end > start:
            acc = kd.zeros([d], dtype=torch.float32)
            for tr in kd.tile(start, end):
                acc = acc + x[tr, :].sum(0)
            out[b, :] = acc
            kd.atomic_add(count, [0], 1.0)
    return out, count


def _jagged_ref(x, offsets):
    rows = []
    for s, e in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        rows.append(x[s:e].sum(0) / max(e - s, 1))
    return torch.stack(rows)


def _offsets(lengths):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,m", [(1, 1), (5, 7), (8, 130)])
def test_if_on_grid_index(backend, n, m):
    x = torch.randn(n, m)
    ref = torch.where((torch.arange(n) % 2 == 0)[:, None], x * 2, x - 1)
    with kd.backend(backend):
        torch.testing.assert_close(parity_rows(x), ref)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,m", [(1, 1), (7, 13)])
def test_if_elif_else_on_loaded_flag(backend, n, m):
    x = torch.randn(n, m)
    mode = torch.arange(n, dtype=torch.int32) % 3
    with kd.backend(backend):
        out, hits = row_modes(x, mode)
    ref_out, ref_hits = _row_modes_ref(x, mode)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(hits, ref_hits)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,k,d", [(1, 1, 1), (5, 3, 11)])
def test_branch_assigns_loop_carried_acc(backend, n, k, d):
    x = torch.randn(n, k, d)
    flags = torch.tensor([1, 0, 1, 1, 0][:n], dtype=torch.int32)
    ref = torch.where((flags > 0)[:, None], x.sum(1), -1.0)
    with kd.backend(backend):
        torch.testing.assert_close(masked_rowsum(x, flags), ref)


@pytest.mark.parametrize("backend", ("pallas", "triton", "nki"))
@pytest.mark.parametrize("lengths,d", [([3], 1), ([2, 0, 5, 1, 0, 7], 13), ([0], 4)])
def test_jagged_mean_continue(backend, lengths, d):
    offsets = _offsets(lengths)
    x = torch.randn(max(int(offsets[-1]), 1), d)
    with kd.backend(backend):
        torch.testing.assert_close(jagged_mean(x, offsets), _jagged_ref(x, offsets))


@pytest.mark.parametrize("backend", ("pallas", "triton", "nki"))
def test_jagged_if_end_gt_start_with_atomic(backend):
    lengths = [2, 0, 5, 1, 0, 7, 3]
    offsets = _offsets(lengths)
    x = torch.randn(int(offsets[-1]), 6)
    with kd.backend(backend):
        out, count = jagged_guarded(x, offsets)
    ref = _jagged_ref(x, offsets) * torch.tensor(lengths).clamp(min=1)[:, None].float()
    torch.testing.assert_close(out, ref)
    assert count.item() == sum(1 for n in lengths if n > 0)


def test_host_if_inside_grid_runs_one_branch():
    """A Python-valued test (a shape) keeps Python's own `if`: only the taken branch is traced."""
    @kd.kernel
    def k(x: torch.Tensor):
        n, m = x.shape
        out = torch.empty([n, m], dtype=torch.float32)
        for b in kd.grid(n):
            if m > 4:
                out[b, :] = x[b, :] + 1.0
            else:
                out[b, :] = x[b, :] - 1.0
        return out
    x = torch.randn(3, 5)
    torch.testing.assert_close(k(x), x + 1)
    torch.testing.assert_close(k(x[:, :2].contiguous()), x[:, :2] - 1)


def test_vector_condition_says_use_where():
    @kd.kernel
    def k(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            if x[t] > 0:
                out[t] = x[t]
        return out
    with pytest.raises(ControlFlowError, match="torch.where") as e:
        k(torch.randn(8))
    assert "if x[t] > 0" in str(e.value)


def test_name_bound_in_one_branch_only():
    @kd.kernel
    def k(x: torch.Tensor, flags: torch.Tensor):
        n, m = x.shape
        out = torch.empty([n, m], dtype=torch.float32)
        for b in kd.grid(n):
            if flags[b] > 0:
                y = x[b, :]
            out[b, :] = y * 2.0
        return out
    with pytest.raises(ControlFlowError, match="only one branch") as e:
        k(torch.randn(3, 4), torch.ones(3, dtype=torch.int32))
    assert "out[b, :] = y * 2.0" in str(e.value)


def test_break_in_device_if():
    @kd.kernel
    def k(x: torch.Tensor, flags: torch.Tensor):
        n, m = x.shape
        out = torch.empty([n, m], dtype=torch.float32)
        for b in kd.grid(n):
            acc = kd.zeros([m], dtype=torch.float32)
            for r in kd.grid(n):
                if flags[r] > 0:
                    break
                acc = acc + x[r, :]
            out[b, :] = acc
        return out
    with pytest.raises(ControlFlowError, match="break") as e:
        k(torch.randn(3, 4), torch.ones(3, dtype=torch.int32))
    assert "if flags[r] > 0:" in str(e.value)


@kd.kernel
def loops_in_both_branches(x: torch.Tensor, flags: torch.Tensor):
    """A loop in each branch (their loop variables stay inside), a nested device `if`."""
    n, k, d = x.shape
    out = torch.empty([n, d], dtype=torch.float32)
    for b in kd.grid(n):
        acc = kd.zeros([d], dtype=torch.float32)
        f = flags[b]
        if f > 0:
            for r in kd.grid(k):
                acc = acc + x[b, r, :]
            if f > 1:
                acc = acc * 2.0
        else:
            for r in kd.grid(k):
                acc = acc + x[b, r, :] * x[b, r, :]
        out[b, :] = acc
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,k,d", [(1, 1, 1), (6, 3, 5)])
def test_loops_in_both_branches_nested_if(backend, n, k, d):
    x = torch.randn(n, k, d)
    flags = torch.tensor([2, 0, 1, 0, 2, 1][:n], dtype=torch.int32)
    s = x.sum(1)
    ref = torch.where((flags > 1)[:, None], 2 * s,
                      torch.where((flags > 0)[:, None], s, (x * x).sum(1)))
    with kd.backend(backend):
        torch.testing.assert_close(loops_in_both_branches(x, flags), ref)


def test_loop_variable_of_a_branch_is_not_visible_after():
    @kd.kernel
    def k(x: torch.Tensor, flags: torch.Tensor):
        n, m = x.shape
        out = torch.empty([n, m], dtype=torch.float32)
        for b in kd.grid(n):
            if flags[b] > 0:
                for r in kd.grid(n):
                    t = x[r, :]
            else:
                t = x[b, :]
            out[b, :] = t + 1.0
        return out
    with pytest.raises(ControlFlowError, match="no value common to both branches"):
        k(torch.randn(3, 4), torch.ones(3, dtype=torch.int32))


@kd.kernel
def by_sign_of_float_arg(x: torch.Tensor, eps: float):
    """A float argument is a runtime scalar (kernel_dsl/runtime_scalars.py): in device code an
    `if` on it is a device `if`, and a new value does not rebuild the kernel."""
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        if eps > 0:
            out[t] = x[t] + eps
        else:
            out[t] = x[t] * 2.0
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_float_argument(backend):
    x = torch.randn(37)
    with kd.backend(backend):
        torch.testing.assert_close(by_sign_of_float_arg(x, 0.5), x + 0.5)
        torch.testing.assert_close(by_sign_of_float_arg(x, -0.5), x * 2.0)
