"""`kd.arange` / `torch.arange` in device code (Helion's `hl.arange`; kernel_dsl/device_arange.py):
int bounds known while tracing, or a tile's `block_size` for the tile's own lane positions."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import KernelSyntaxError

BACKENDS = ("pallas", "triton", "nki")
SMALL = {"pallas": kd.Config([8, 128]), "triton": kd.Config([4, 8]), "nki": None}


@kd.kernel
def picked(logits: torch.Tensor, labels: torch.Tensor):
    """A cross-entropy's target-logit pick as a one-hot over the whole vocabulary dim."""
    n, v = logits.shape
    out = torch.empty([n], dtype=torch.float32)
    for tn in kd.tile(n):
        hit = torch.arange(v)[None, :] == labels[tn][:, None]
        out[tn] = torch.where(hit, logits[tn, :].float(), 0.0).sum(dim=1)
    return out


@kd.kernel
def positions(x: torch.Tensor):
    """Helion's flex_attention form: `tile.begin + hl.arange(tile.block_size)`."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        rows = (tm.begin + kd.arange(tm.block_size))[:, None]
        cols = (tn.begin + kd.arange(tn.block_size))[None, :]
        out[tm, tn] = x[tm, tn] + (rows * 1000 + cols).float()
    return out


@kd.kernel
def stepped(x: torch.Tensor):
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        ramp = kd.arange(5, 5 + 3 * n, 3, dtype=torch.float32)  # 5, 8, 11, ...
        out[tm, :] = x[tm, :] * ramp[None, :]
    return out


@pytest.mark.parametrize("nv", [(1, 1), (6, 11), (13, 130)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_dim_arange_makes_a_one_hot(backend: str, nv: tuple[int, int]) -> None:
    n, v = nv
    logits, labels = torch.randn(n, v), torch.randint(0, v, (n,), dtype=torch.int32)
    with kd.backend(backend):
        out = picked(logits, labels)
    torch.testing.assert_close(out, logits.gather(1, labels.long()[:, None])[:, 0])


@pytest.mark.parametrize("shape", [(1, 1), (9, 13), (17, 130)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_block_size_aranges_are_the_tiles_positions(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    ref = x + (torch.arange(shape[0])[:, None] * 1000 + torch.arange(shape[1])[None, :]).float()
    with kd.backend(backend):
        torch.testing.assert_close(positions(x), ref)
    if SMALL[backend] is not None:  # ragged last blocks in both dims
        torch.testing.assert_close(positions.run_cpu(backend, (x,), SMALL[backend])[0], ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_begin_step_and_dtype(backend: str) -> None:
    x = torch.randn(4, 7)
    with kd.backend(backend):
        out = stepped(x)
    torch.testing.assert_close(out, x * torch.arange(5, 5 + 21, 3, dtype=torch.float32)[None, :])


def test_bounds_known_only_on_the_device_are_refused_with_a_hint() -> None:
    @kd.kernel
    def dynamic(x: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] + torch.arange(t.begin, t.end).float()
        return out

    with pytest.raises(KernelSyntaxError, match="int bounds known while tracing") as e:
        dynamic(torch.randn(8))
    assert "t.index" in e.value.hint and "test_arange.py" in str(e.value)


def test_arange_in_host_code_is_still_host_computation() -> None:
    @kd.kernel
    def host(x: torch.Tensor):
        r = torch.arange(x.shape[0])  # outside any kd.tile loop: not device code
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] + r[t]
        return out

    with pytest.raises(KernelSyntaxError, match="computes on tensor data in host code"):
        host(torch.randn(8))
