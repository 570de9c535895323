"""Static slices `a:b` of tensor axes in loads and stores (issue 13, item 5): Helion's
concatenate (`concat2d_dim1`) as static slice stores, partial slices on both dims of a 2-D tensor, on
every backend at every block size the config may pick, ragged, size-1 and prime sizes; clear
errors for slices the IR cannot express."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ShapeError, UnsupportedOpError

BACKENDS = ("pallas", "triton", "nki")
CONFIGS = ([8, 8], [16, 32], [1, 1], [64, 128], [4, 3])


@kd.kernel
def concat_slices(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """cat([x, y], dim=1) with static slice stores: `out[tm, :n1]`, `out[tm, n1:]`."""
    m, n1 = x.shape
    n2 = y.shape[1]
    out = torch.empty([m, n1 + n2], dtype=x.dtype)
    for tm in kd.tile(m):
        out[tm, :n1] = x[tm, :]
        out[tm, n1:] = y[tm, :]
    return out


@kd.kernel
def window(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Partial slices on the rows (a loop over a static slice of them) and the columns."""
    m, n = x.shape
    out = torch.zeros([m, n], dtype=torch.float32)
    for tn in kd.tile(n):
        acc = kd.zeros([tn], dtype=torch.float32)
        acc = acc + x[lo:hi, tn].float().sum(0)
        out[lo:hi, tn] = x[lo:hi, tn].float() * 2
        out[0, tn] = acc
    return out


@kd.kernel
def col_window(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    m, n = x.shape
    out = torch.zeros([m, min(b, n) - a], dtype=torch.float32)
    for tm in kd.tile(m):
        out[tm, :] = x[tm, a:b] + 1
    return out


@kd.kernel
def sliced_matmul(x: torch.Tensor, w: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """A dot contracting over a static slice of both operands: `x[:, a:b] @ w[a:b, :]`."""
    m, n = x.shape[0], w.shape[1]
    out = torch.empty([m, n], dtype=torch.float32)
    for tm in kd.tile(m):
        out[tm, :] = torch.matmul(x[tm, a:b], w[a:b, :])
    return out


@kd.kernel
def shifted_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Slices on both trailing dims of a 3-D tensor, loads and a store, with offsets that differ."""
    b, m, n = x.shape
    out = torch.zeros([b, m, n], dtype=torch.float32)
    for tb in kd.tile(b):
        out[tb, 1:m - 1, 2:] = x[tb, 1:m - 1, 2:] + y[tb, 0:m - 2, :n - 2]
    return out


def _run(kernel, backend: str, args, blocks):  # noqa: ANN001, ANN202
    return kernel.run_cpu(backend, args, kd.Config(blocks))[0]


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_concat_by_slice_stores(backend: str, blocks: list[int]) -> None:
    for m, n1, n2 in ((13, 5, 7), (1, 1, 1), (31, 2, 17)):
        x, y = torch.randn(m, n1), torch.randn(m, n2)
        got = _run(concat_slices, backend, (x, y), blocks[:1])
        torch.testing.assert_close(got, torch.cat([x, y], dim=1), rtol=0, atol=0)


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_row_slice_loads_and_stores(backend: str, blocks: list[int]) -> None:
    for (m, n), (lo, hi) in (((11, 7), (2, 9)), ((13, 1), (12, 13)), ((5, 3), (0, 1))):
        x = torch.randn(m, n)
        got = _run(window, backend, (x, lo, hi), blocks[:1])
        want = torch.zeros(m, n)
        want[lo:hi] = x[lo:hi] * 2
        want[0] = x[lo:hi].sum(0)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_column_slice_loads(backend: str, blocks: list[int]) -> None:
    for (m, n), (a, b) in (((17, 11), (3, 10)), ((1, 5), (4, 5)), ((7, 6), (1, 99))):
        x = torch.randn(m, n)
        got = _run(col_window, backend, (x, a, b), blocks[:1])
        torch.testing.assert_close(got, x[:, a:b] + 1, rtol=0, atol=0)  # a stop past n clips


@pytest.mark.parametrize("blocks", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dot_over_a_slice(backend: str, blocks: list[int]) -> None:
    for (m, k, n), (a, b) in (((13, 9, 6), (2, 7)), ((1, 3, 1), (2, 3)), ((29, 17, 5), (0, 11))):
        x, w = torch.randn(m, k), torch.randn(k, n)
        got = _run(sliced_matmul, backend, (x, w, a, b), blocks[:1])
        torch.testing.assert_close(got, x[:, a:b] @ w[a:b], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks", [[1], [2], [8]], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_slices_on_two_dims_of_a_3d_tensor(backend: str, blocks: list[int]) -> None:
    if backend == "nki" and blocks != [1]:
        blocks = [1]  # NKI lays the last two dims on (partitions, free): a leading block is 1
    for b, m, n in ((3, 7, 5), (1, 3, 3), (5, 11, 13)):
        x, y = torch.randn(b, m, n), torch.randn(b, m, n)
        want = torch.zeros(b, m, n)
        want[:, 1:m - 1, 2:] = x[:, 1:m - 1, 2:] + y[:, 0:m - 2, :n - 2]
        torch.testing.assert_close(_run(shifted_sum, backend, (x, y), blocks), want,
                                   rtol=0, atol=0)


def test_ir_records_static_slices() -> None:
    ir = concat_slices.ir(torch.randn(13, 5), torch.randn(13, 7))
    stores = [op for op in ir.body.walk() if op.kind == "store"]
    assert [repr(op.attrs["index"][1]) for op in stores] == ["0:5", "5:12"]
    assert [op.operands[0].shape[1] for op in stores] == [5, 7]


@kd.kernel
def _stepped(x: torch.Tensor):
    out = torch.empty([x.shape[0], 3])
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = x[tm, 0:6:2]
    return out


@kd.kernel
def _negative(x: torch.Tensor):
    out = torch.empty([x.shape[0], 2])
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = x[tm, -2:]
    return out


@kd.kernel
def _data_dependent(x: torch.Tensor):
    out = torch.zeros_like(x)
    for tm in kd.tile(x.shape[0]):
        out[tm.begin:tm.end, :] = x[tm, :]
    return out


@kd.kernel
def _empty(x: torch.Tensor):
    out = torch.empty([x.shape[0], 1])
    for tm in kd.tile(x.shape[0]):
        out[tm, :] = x[tm, 4:4].sum(-1, keepdim=True)
    return out


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_negative_slice_bounds_count_from_the_end(backend: str) -> None:
    """As in torch: `x[tm, -2:]` is the last two columns."""
    x = torch.randn(9, 6)
    with kd.backend(backend):
        torch.testing.assert_close(_negative(x), x[:, -2:])


@pytest.mark.parametrize("kernel, error, words", [
    (_stepped, UnsupportedOpError, "step 2"),
    (_data_dependent, UnsupportedOpError, "not a Python int"),
    (_empty, ShapeError, "is empty"),
], ids=["step", "data-dependent", "empty"])
def test_unsupported_slices_name_the_users_line(kernel, error, words: str) -> None:  # noqa: ANN001
    with pytest.raises(error, match=words) as info:
        kernel.ir(torch.randn(8, 6))
    loc = info.value.loc
    assert loc is not None and loc.file.endswith("test_block_values.py") and ":" in loc.text
    assert info.value.hint


@pytest.mark.slow
def test_real_tpu_compiler_accepts_slice_loads_and_stores() -> None:
    rep = concat_slices.check(torch.randn(256, 128), torch.randn(256, 256),
                              targets=["tpu-v5e"], config=kd.Config([128]))
    assert [e.status for e in rep.entries] == ["ok"], rep
    rep = col_window.check(torch.randn(256, 384), 128, 256, targets=["tpu-v5e"],
                           config=kd.Config([128]))
    assert [e.status for e in rep.entries] == ["ok"], rep
