"""The flash attention backward's delta = rowsum(dO * O) (f32), computed by the dQ kernel from the
O and dO blocks it reads and written as its second output, which dK/dV then reads: the backward
launches two kernels, dQ then dK/dV (there is no delta kernel of its own)."""
from __future__ import annotations

from typing import Any

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.kernels import KERNELS, base, flash_attention
from kernel_dsl.kernels.attention_bwd import flash_attention_bwd_dq

# (G query heads per kv head, Sq, Skv, causal offset or None); head dims d=16, dv=24
CASES = [(1, 1, 1, None), (2, 13, 23, 0), (1, 37, 17, None), (3, 7, 29, 22)]
BLOCKS = ([1, 8, 8], [2, 16, 8])  # NKI takes a leading block of 1 only
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_dq_writes_delta_as_rowsum_of_do_times_o(backend: str) -> None:
    # each case once, dtypes and configs rotated (Pallas' interpret mode builds slowly)
    for i, (g, sq, skv, off) in enumerate(CASES):
        dtype, blocks = DTYPES[i % 3], BLOCKS[i % 2]
        if backend == "nki":
            blocks = [1, *blocks[1:]]
        torch.manual_seed(i)
        rows = g * sq
        q, do, o = torch.randn(2, rows, 16), torch.randn(2, rows, 24), torch.randn(2, rows, 24)
        k, v = torch.randn(2, skv, 16), torch.randn(2, skv, 24)
        q, k, v, do, o = (t.to(dtype) for t in (q, k, v, do, o))
        lse = torch.randn(2, rows, 1)
        causal = off is not None
        qpos = (torch.arange(sq, dtype=torch.int32).repeat(g).reshape(rows, 1) if causal
                else torch.zeros(1, 1, dtype=torch.int32))
        args = (q, k, v, do, o, lse, qpos, 0.3, causal, off or 0, sq, causal)
        dq, delta = flash_attention_bwd_dq.run_cpu(backend, args, kd.Config(blocks))
        assert dq.shape == q.shape and dq.dtype == dtype
        assert delta.shape == (2, rows, 1) and delta.dtype == torch.float32
        want = (do.float() * o.float()).sum(-1, keepdim=True)  # bf16/f16 products are exact in f32
        torch.testing.assert_close(delta, want, rtol=1e-5, atol=1e-5)


def test_backward_launches_dq_then_dkv_with_dqs_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    launches: list[tuple[str, tuple[Any, ...], Any]] = []
    launch = base.LibraryKernel.__call__

    def record(self: Any, *args: Any) -> Any:
        out = launch(self, *args)
        launches.append((self.name, args, out))
        return out

    monkeypatch.setattr(base.LibraryKernel, "__call__", record)
    q, k, v = (torch.randn(1, 2, 19, 16, requires_grad=True) for _ in range(3))
    with kd.backend("nki"):
        out = flash_attention(q, k, v, causal=True)
        del launches[:]
        out.sum().backward()
    assert [name for name, _, _ in launches] == ["flash_attention_bwd_dq", "flash_attention_bwd_dkv"]
    (_, dq_args, (_, delta)), (_, dkv_args, _) = launches
    assert dkv_args[5] is delta  # dK/dV reads the delta dQ wrote
    assert "flash_attention_bwd_delta" not in KERNELS
