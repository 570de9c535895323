"""Distributed training with the library's ops, on CPU: FSDP2 (`fully_shard`) and DTensor inputs
in 2-process gloo groups, and the storage property FSDP2 relies on, in one process.

FSDP2 frees each all-gathered parameter after use with `storage.resize_(0)`; a kernel call must
leave its inputs' storage resizable (lowering/numpy_views.py). DTensor inputs run shard-local
through the sharding rules of kernels/sharding.py; placements no rule lists are redistributed.

The multi-process tests spawn WORLD workers (torch.multiprocessing.spawn): an exception in any
worker fails the test with that worker's traceback. The DTensor tests run the kernels on the NKI
interpreter, which compiles nothing (~10 s less here than Pallas): the sharding rules do not
depend on the backend. FSDP2 runs on Pallas, the default CPU backend.
"""
from __future__ import annotations

import faulthandler
import os
import sys
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import kernel_dsl as kd
from kernel_dsl.kernels import flash_attention, layer_norm, matmul, rms_norm, softmax
from kernel_dsl.lowering.numpy_views import numpy_view

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")
WORLD = 2
TOL = {"rtol": 1e-5, "atol": 1e-5}


# -- one process: kernel calls leave their inputs' storage resizable -------------------------------
@pytest.mark.parametrize("backend,dtype", [("pallas", torch.float32), ("pallas", torch.bfloat16),
                                           ("nki", torch.float32), ("triton", torch.float32)])
def test_kernel_call_leaves_input_storage_resizable(backend: str, dtype: torch.dtype) -> None:
    x, w = torch.randn(8, 16, dtype=dtype), torch.randn(16, 12, dtype=dtype)
    with kd.backend(backend):
        out = matmul(x, w)
    assert out.untyped_storage().data_ptr() not in (x.untyped_storage().data_ptr(),
                                                    w.untyped_storage().data_ptr())
    for t in (x, w):
        t.untyped_storage().resize_(0)  # what FSDP2 does to an all-gathered parameter
        assert t.untyped_storage().nbytes() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int8, torch.uint8, torch.bool])
def test_numpy_view_is_a_zero_copy_view(dtype: torch.dtype) -> None:
    t = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    a = numpy_view(t)
    assert a.shape == (3, 4) and a.ctypes.data == t.data_ptr()
    assert torch.equal(torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
                       if dtype == torch.bfloat16 else torch.from_numpy(a), t)
    t[0, 0] = 1
    assert a[0, 0] == 1  # the same memory
    assert t.untyped_storage().resizable()


def test_numpy_view_keeps_the_tensor_alive_and_takes_any_strides() -> None:
    a = numpy_view(torch.arange(6, dtype=torch.float32))
    assert a.tolist() == [0, 1, 2, 3, 4, 5]  # the tensor is gone, the array still reads it
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).T  # not contiguous: via DLPack
    assert np.array_equal(numpy_view(t), t.contiguous().numpy())
    assert t.untyped_storage().resizable()


# -- multi-process helpers -------------------------------------------------------------------------
def _entry(rank: int, fn: Callable[..., None], init_method: str, backend: str,
           args: tuple[Any, ...]) -> None:
    # A C++ abort in a worker leaves no Python traceback; this prints every thread's stack.
    faulthandler.enable(all_threads=True)
    torch.set_num_threads(1)  # WORLD processes share the cores
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=120))
    try:
        torch.manual_seed(0)  # every rank makes the same full tensors
        with kd.backend(backend):
            fn(rank, *args)
        dist.barrier()  # no rank tears down while another still talks to it
    finally:
        dist.destroy_process_group()
    # Everything was checked. Skip the interpreter's teardown: a loaded CI machine once saw a
    # worker abort there ("terminate called without an active exception", SIGABRT, no Python
    # frame), the known way C++ threads (gloo's, torch's pools) die when finalization stops them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(tmp_path: Any, fn: Callable[..., None], *args: Any, backend: str = "pallas") -> None:
    """Runs `fn(rank, *args)` on WORLD processes in one gloo group, kernels on `backend`."""
    mp.spawn(_entry, args=(fn, f"file://{tmp_path}/pg", backend, args), nprocs=WORLD, join=True)


def _mesh() -> Any:
    from torch.distributed.tensor import init_device_mesh

    return init_device_mesh("cpu", (WORLD,))


def _check_dtensor(fn: Callable[..., Any], inputs: list[torch.Tensor | None], placements: list[Any],
                   expect: Any, grads: bool = True) -> None:
    """`fn` on DTensors (placed as given) equals `fn` on the full tensors: output values and
    placements (`expect`, one per output; None: any), and the inputs' gradients."""
    from torch.distributed.tensor import distribute_tensor

    mesh = _mesh()
    full = [t.clone().requires_grad_(grads) if t is not None else None for t in inputs]
    dts = [distribute_tensor(t.detach(), mesh, [p]).requires_grad_(grads) if t is not None else None
           for t, p in zip(inputs, placements)]
    ref, out = fn(*full), fn(*dts)
    ref, out = (ref, out) if isinstance(ref, tuple) else ((ref,), (out,))
    for r, o, e in zip(ref, out, expect):
        if e is not None:
            assert o.placements == (e,), f"{o.placements} != {(e,)}"
        torch.testing.assert_close(o.full_tensor(), r, **TOL)
    if not grads:
        return
    cots = [torch.randn_like(r) for r in ref]  # the same on every rank (same seed)
    sum((r * c).sum() for r, c in zip(ref, cots)).backward()
    sum((o.full_tensor() * c).sum() for o, c in zip(out, cots)).backward()
    for t, d in zip(full, dts):
        if t is not None:
            torch.testing.assert_close(d.grad.full_tensor(), t.grad, **TOL)


# -- FSDP2 -----------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(16, 32) * 0.2)
        self.g = nn.Parameter(torch.rand(32) + 0.5)
        self.w2 = nn.Parameter(torch.randn(32, 8) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return matmul(rms_norm(matmul(x, self.w1, activation="gelu"), self.g), self.w2)


def _fsdp2_step(rank: int) -> None:
    from torch.distributed.fsdp import fully_shard

    ref, model = MLP(), MLP()
    model.load_state_dict(ref.state_dict())
    x, target = torch.randn(8, 16), torch.randn(8, 8)
    ref_loss = ((ref(x) - target) ** 2).mean()
    ref_loss.backward()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()

    fully_shard(model)  # parameters sharded on dim 0; each rank trains on its half of the batch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = ((model(x.chunk(WORLD)[rank]) - target.chunk(WORLD)[rank]) ** 2).mean()
    loss.backward()  # gradients reduce-scattered as the mean over ranks
    opt.step()
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(mean_loss, ref_loss.detach(), **TOL)
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.placements[0].is_shard(0), name
        torch.testing.assert_close(p.full_tensor(), p_ref.detach(), **TOL, msg=name)


def test_fsdp2_trains_one_step_like_the_unsharded_model(tmp_path: Any) -> None:
    spawn(tmp_path, _fsdp2_step)


# -- DTensor inputs --------------------------------------------------------------------------------
def _dtensor_matmul_rms_norm(rank: int) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard

    R = Replicate()
    x, w, b = torch.randn(8, 16), torch.randn(16, 12), torch.randn(12)

    def mm(x: Any, w: Any, b: Any) -> Any:
        return matmul(x, w, bias=b, activation="gelu")

    _check_dtensor(mm, [x, w, b], [Shard(0), R, R], [Shard(0)])  # rows of x
    _check_dtensor(mm, [x, w, b], [R, Shard(1), Shard(0)], [Shard(1)])  # columns of w
    _check_dtensor(mm, [x, w, b], [R, R, R], [R])
    # split on the contraction dim: partial sums, when there is no epilogue ...
    _check_dtensor(matmul, [x, w], [Shard(1), Shard(0)], [Partial()])
    # ... and no rule with one: redistributed first, still the right result
    _check_dtensor(mm, [x, w, b], [Shard(1), R, R], [None])
    xb, wb = torch.randn(2, 8, 16), torch.randn(2, 16, 12)  # batched: batch or M split
    _check_dtensor(matmul, [xb, wb], [Shard(0), Shard(0)], [Shard(0)])
    _check_dtensor(matmul, [xb, wb], [Shard(1), R], [Shard(1)])

    x3, g = torch.randn(4, 6, 16), torch.rand(16) + 0.5
    for d in (0, 1):
        _check_dtensor(rms_norm, [x3, g], [Shard(d), R], [Shard(d)])
    _check_dtensor(rms_norm, [x3, None], [Shard(0), None], [Shard(0)])
    _check_dtensor(rms_norm, [x3, g], [Shard(2), R], [None])  # the normalized dim: redistributed


def test_dtensor_matmul_and_rms_norm_run_shard_local(tmp_path: Any) -> None:
    spawn(tmp_path, _dtensor_matmul_rms_norm, backend="nki")


def _dtensor_attention_softmax_layer_norm(rank: int) -> None:
    from torch.distributed.tensor import Replicate, Shard

    R = Replicate()
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    for d in (0, 1):  # batch, heads (grouped: 4 query heads on 2 key/value heads)
        _check_dtensor(lambda q, k, v: flash_attention(q, k, v, causal=True), [q, k, v],
                       [Shard(d)] * 3, [Shard(d)])
    _check_dtensor(flash_attention, [q, k, v], [Shard(2)] * 3, [None])  # sequence: redistributed

    x = torch.randn(4, 6, 16)
    _check_dtensor(lambda x: softmax(x, -1), [x], [Shard(1)], [Shard(1)])
    _check_dtensor(lambda x: softmax(x, 0), [x], [Shard(2)], [Shard(2)])
    _check_dtensor(lambda x: softmax(x, -1), [x], [Shard(2)], [None])
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    _check_dtensor(layer_norm, [x, w, b], [Shard(0), R, R], [Shard(0)])


def test_dtensor_attention_softmax_and_layer_norm_run_shard_local(tmp_path: Any) -> None:
    spawn(tmp_path, _dtensor_attention_softmax_layer_norm, backend="nki")
