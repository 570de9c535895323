"""argmax/argmin, max/min over a dim with indices, and cumsum on tiles (more: test_scans.py),
on every backend, against torch: ties (the first wins), NaN (counts as the max and the min),
-inf rows, integer and bool inputs, ragged tiles, and positions along a tiled dim (the tile's own)."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import KernelError

BACKENDS = ("pallas", "triton", "nki")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@kd.kernel
def row_args(x: torch.Tensor):
    m = x.shape[0]
    idx = [torch.empty([m], dtype=torch.int32, device=x.device) for _ in range(4)]
    vals = [torch.empty([m], dtype=x.dtype, device=x.device) for _ in range(2)]
    for tm in kd.tile(m):
        r = x[tm, :]
        v, i = torch.max(r, dim=1)
        lo = r.min(1, keepdim=True)
        idx[0][tm] = torch.argmax(r, dim=-1)
        idx[1][tm] = r.argmin(dim=1)
        idx[2][tm] = i
        idx[3][tm] = lo.indices.squeeze(1)
        vals[0][tm] = v
        vals[1][tm] = lo.values.squeeze(1)
    return (*idx, *vals)


def _rows(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        x = torch.rand(37, 11) > 0.5
        x[4] = False
        return x
    if not dtype.is_floating_point:
        return torch.randint(-5, 5, (37, 11), dtype=dtype)  # many ties: the first must win
    x = torch.randn(37, 130).to(dtype)
    x[2, 5] = x[2, 9] = 50.0  # a tie at the max
    x[3] = -float("inf")
    x[6, 7] = x[6, 100] = float("nan")  # the first NaN is both the max and the min
    x[8, 3] = float("inf")
    return x


def _ref(x: torch.Tensor) -> torch.Tensor:
    xi = x.to(torch.int32) if x.dtype == torch.bool else x
    cols = [torch.argmax(xi, 1), torch.argmin(xi, 1), torch.max(xi, 1).indices,
            torch.min(xi, 1).indices]
    return torch.stack(cols, 1).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8,
                                   torch.bool], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_arg_reductions_match_torch(backend: str, dtype: torch.dtype) -> None:
    x = _rows(dtype)
    with kd.backend(backend):
        *idx, vmax, vmin = row_args(x)
    torch.testing.assert_close(torch.stack(idx, 1), _ref(x), rtol=0, atol=0)
    torch.testing.assert_close(vmax, torch.max(x, 1).values, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(vmin, torch.min(x, 1).values, rtol=0, atol=0, equal_nan=True)


@kd.kernel
def tiled_argmax(x: torch.Tensor) -> torch.Tensor:
    """Positions along a tiled dim are the block's own (0 .. block size)."""
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.int32, device=x.device)
    for tm, tn in kd.tile([m, n], block_size=[8, 128]):
        out[tm, tn] = torch.argmax(x[tm, tn], dim=1, keepdim=True).expand(tm, tn)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_positions_along_a_tiled_dim_are_the_blocks_own(backend: str) -> None:
    x = torch.randn(19, 300)  # ragged in both dims: pad lanes must never win
    x[:, 290:] -= 100
    with kd.backend(backend):
        got = tiled_argmax(x)
    for j0 in range(0, 300, 128):
        block = x[:, j0:j0 + 128]
        torch.testing.assert_close(got[:, j0:j0 + 128],
                                   block.argmax(1, keepdim=True).to(torch.int32).expand_as(block))


@kd.kernel
def scans(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in kd.tile(x.shape[0], block_size=x.shape[0]):  # one block: the scan over dim 0 is whole
        r = x[tm, :]
        out[tm, :] = torch.cumsum(r, dim=1) + r.cumsum(0) * 0.5
    return out


@kd.kernel
def scan_1d(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0], block_size=x.shape[0]):
        out[t] = x[t].cumsum(0)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_matches_torch(backend: str, dtype: torch.dtype) -> None:
    x = torch.randn(21, 37).to(dtype)
    v = torch.randn(45)
    with kd.backend(backend):
        got, got1 = scans(x), scan_1d(v)
    ref = (torch.cumsum(x.float(), 1) + x.float().cumsum(0) * 0.5).to(dtype)  # f32, rounded once
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=2e-2)
    torch.testing.assert_close(got, ref, **tol)
    torch.testing.assert_close(got1, v.cumsum(0), atol=1e-4, rtol=1e-4)


def test_unsupported_forms_say_what_to_write() -> None:
    @kd.kernel
    def whole(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.shape[0]], dtype=torch.int32, device=x.device)
        for tm in kd.tile(x.shape[0]):
            out[tm] = x[tm, :].argmax()
        return out

    with pytest.raises(KernelError, match="give the dim"):
        whole(torch.randn(4, 8))


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_them() -> None:
    """Mosaic (libtpu, compile-only): lane positions (1-D iota), the f32 first-hit search and
    the log-step scan (pltpu.roll) all lower for a real TPU target."""
    for k, args in ((row_args, (_rows(torch.bfloat16),)), (tiled_argmax, (torch.randn(19, 300),)),
                    (scans, (torch.randn(21, 37),))):
        report = k.check(*args, targets=["tpu-v6e"], measure_vmem=False)
        assert [e.status for e in report.entries] == ["ok"], report
