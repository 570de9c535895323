"""Host code after the kernel (kernel_dsl/host_epilogue.py): Helion's kl_div, cross_entropy and
jsd end in plain torch on their outputs (`torch.sum(loss) / BT`, `losses.mean()`,
`final_loss = torch.sum(loss)`). The three kernels below are Helion's examples ported by
renaming only (`hl.` -> `kd.`, `@helion.kernel(...)` -> `@kd.kernel`); they must match torch on
every backend at ragged sizes (size 1 included) and over the configs the autotuner may pick,
through the custom op (opcheck), torch.compile and a user autograd rule."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from host_helpers import BACKENDS, run
from torch import Tensor

import kernel_dsl as kd
from kernel_dsl.errors import KernelSyntaxError

TPU_TARGETS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"]


# -- Helion's examples/kl_div.py, examples/cross_entropy.py, examples/jsd.py (kernels only) ------

@kd.kernel
def kl_div_forward(
    y_pred: Tensor,  # input predictions in log-space, shape (BT, V)
    y_true: Tensor,  # target values, shape (BT, V)
    log_target: bool = False,
    reduction: str = "batchmean",
    eps: float = 1e-10,
) -> Tensor:
    BT, V = y_pred.shape
    assert y_true.shape == y_pred.shape, (
        f"Shape mismatch: {y_true.shape} != {y_pred.shape}"
    )

    # Initialize loss accumulator
    if reduction == "none":
        loss = torch.zeros_like(y_pred)
    else:
        loss = torch.zeros((BT,), dtype=torch.float32, device=y_pred.device)

    # Call register_block_size to know block_size_n outside of the reduction loop.
    block_size_n = kd.register_block_size(V)
    block_size_m = kd.register_block_size(BT)

    for tile_bt in kd.tile(BT, block_size=block_size_m):
        loss_sum = kd.zeros([tile_bt, block_size_n], dtype=torch.float32)

        for tile_v in kd.tile(V, block_size=block_size_n):
            kl_loss = kd.zeros([block_size_m, block_size_n], dtype=torch.float32)

            y_pred_val = y_pred[tile_bt, tile_v]
            y_true_val = y_true[tile_bt, tile_v]

            if log_target:
                # KL(P || Q) = exp(y_true) * (y_true - y_pred) when both in log-space
                prob_true = torch.exp(y_true_val)
                kl_loss += prob_true * (y_true_val - y_pred_val)

            else:
                # KL(P || Q) = y_true * (log(y_true) - y_pred) when y_pred in log-space
                log_true = torch.log(torch.clamp(y_true_val, min=eps))
                kl_loss += y_true_val * (log_true - y_pred_val)

            if reduction == "none":
                loss[tile_bt, tile_v] = kl_loss
            else:
                # Sum over vocabulary dimension
                loss_sum += kl_loss

        if reduction != "none":
            loss[tile_bt] = loss_sum.sum(dim=-1)

    # Apply final reduction
    if reduction == "batchmean":
        final_loss = torch.sum(loss) / BT
    elif reduction == "sum":
        final_loss = torch.sum(loss, dim=0)
    elif reduction == "mean":
        final_loss = torch.sum(loss) / (BT * V)
    else:  # reduction == "none"
        final_loss = loss

    return final_loss


@kd.kernel
def cross_entropy(
    logits: torch.Tensor,  # [N, V] input logits
    labels: torch.Tensor,  # [N] target labels
) -> torch.Tensor:
    n, v = logits.shape
    losses = torch.zeros([n], dtype=logits.dtype, device=logits.device)

    # Flatten logits once at the beginning
    logits_flat = logits.view(-1)

    for tile_n in kd.tile(n):
        # Get data for this tile
        labels_tile = labels[tile_n]  # [tile_size]
        base_indices_tile = tile_n.index * v  # [tile_size]

        # Compute the actual flat indices by adding the label offset
        flat_indices = base_indices_tile + labels_tile

        # Load the logits at the target indices
        logits_at_target = kd.load(logits_flat, [flat_indices])

        # Compute log_softmax for numerical stability
        # Load the full rows for this tile
        logits_rows = logits[tile_n, :]  # [tile_size, V]

        # Compute log-sum-exp
        max_logits = torch.amax(logits_rows, dim=-1, keepdim=True)
        shifted = logits_rows - max_logits
        exp_shifted = torch.exp(shifted)
        sum_exp = torch.sum(exp_shifted, dim=-1, keepdim=True)
        log_sum_exp = max_logits.squeeze(-1) + torch.log(sum_exp.squeeze(-1))

        # Cross entropy loss: log_sum_exp - logit_at_target
        losses[tile_n] = log_sum_exp - logits_at_target

    return losses.mean()


@kd.kernel
def jsd_forward(
    _input: Tensor,  # student predictions (input) in log-space
    target: Tensor,  # teacher targets in log-space
    shift_labels: Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> tuple[Tensor, Tensor]:
    BT, V = _input.shape
    assert target.shape == _input.shape, (
        f"Shape mismatch: {target.shape} != {_input.shape}"
    )
    block_size_n = kd.register_block_size(V)
    block_size_m = kd.register_block_size(BT)

    # Create output tensor for accumulating loss
    loss = torch.zeros([BT], dtype=torch.float32, device=_input.device)
    dX = torch.empty_like(loss)

    one_minus_beta = 1 - beta

    # Count non-ignored elements
    n_non_ignore = float(BT)
    if shift_labels is not None:
        n_non_ignore = float((shift_labels != ignore_index).sum().item())
        if n_non_ignore == 0:
            return torch.zeros(
                [], dtype=_input.dtype, device=_input.device
            ), torch.zeros_like(_input)

    # Process each sequence position
    for tile_bt in kd.tile(BT, block_size=block_size_m):
        # Check for label masking
        if shift_labels is not None:
            if shift_labels[tile_bt] == ignore_index:
                for tile_X in kd.tile(V):
                    dX[tile_bt, tile_X] = 0.0
                continue
        intermediate_loss = kd.zeros([tile_bt, block_size_n], dtype=torch.float32)
        intermediate_dX = kd.zeros([tile_bt, block_size_n], dtype=torch.float32)
        for tile_v in kd.tile(V, block_size=block_size_n):
            # Load log probabilities and convert to float32
            X = _input[tile_bt, tile_v]
            Y = target[tile_bt, tile_v]

            if beta == 0.0:  # Forward KL: KL(P || Q)
                Y_max = torch.amax(Y, dim=0)
                Y_shift = Y - Y_max
                Y_prob = torch.exp(Y_shift) * torch.exp(
                    Y_max
                )  # Compensate for the shift
                intermediate_loss += Y_prob * (Y - X)
                intermediate_dX += -Y_prob
            elif beta == 1.0:  # Reverse KL: KL(Q || P)
                X_max = torch.amax(X, dim=0)
                X_shift = X - X_max
                X_prob = torch.exp(X_shift) * torch.exp(
                    X_max
                )  # Compensate for the shift
                intermediate_loss += X_prob * (X - Y)
                intermediate_dX += intermediate_loss + X_prob
            else:  # General JSD: beta*KL(P||M) + (1-beta)*KL(Q||M)
                Q = torch.exp(X)  # = exp(X)
                P = torch.exp(Y)  # = exp(Y)

                beta_P = beta * P
                one_minus_beta_Q = one_minus_beta * Q
                M = beta_P + one_minus_beta_Q
                log_M = torch.log(M)
                x_minus_log_m = X - log_M
                kl_q_m = one_minus_beta_Q * x_minus_log_m

                intermediate_loss += beta_P * (Y - log_M) + kl_q_m
                intermediate_dX += kl_q_m

        # Accumulate over vocabulary dimension
        scale = 1.0 / n_non_ignore
        loss[tile_bt] = torch.sum(intermediate_loss * scale, dim=1)
        dX[tile_bt] = torch.sum(intermediate_dX * scale, dim=1)

    # Normalize by number of non-ignored elements, run it on host to match liger_kernel
    final_loss = torch.sum(
        loss
    )  # This line raises a warning: helion.exc.TensorOperationInWrapper

    return final_loss, dX


# -- references ---------------------------------------------------------------------------------

def _kl_ref(y_pred: Tensor, y_true: Tensor, log_target: bool, reduction: str) -> Tensor:
    p, t = y_pred.double(), y_true.double()
    if not log_target:
        t = t.clamp(min=1e-10)  # the kernel's eps: log(0) never reaches the sum
    if reduction == "mean":  # torch warns that "mean" divides by BT * V: so does the kernel
        return torch.nn.functional.kl_div(p, t, reduction="sum", log_target=log_target) / p.numel()
    return torch.nn.functional.kl_div(p, t, reduction=reduction, log_target=log_target)


def _jsd_ref(x: Tensor, y: Tensor, beta: float) -> tuple[Tensor, Tensor | None]:
    """liger's JSD (Helion's TorchJSDBaseline) and the kernel's dX for beta < 1 (for beta = 1
    Helion's dX adds the running loss per V block: it depends on the block size)."""
    x, y = x.double(), y.double()
    q, p = x.exp(), y.exp()
    n = x.shape[0]
    if beta == 0.0:
        return (p * (y - x)).sum() / n, (-p).sum(1) / n
    if beta == 1.0:
        return (q * (x - y)).sum() / n, None
    log_m = (beta * p + (1 - beta) * q).log()
    kl_q_m = (1 - beta) * q * (x - log_m)
    return (beta * p * (y - log_m) + kl_q_m).sum() / n, kl_q_m.sum(1) / n


def _kl_args(bt: int, v: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(bt * 1000 + v)
    return (torch.randn(bt, v, generator=g).log_softmax(-1).to(dtype),
            torch.randn(bt, v, generator=g).softmax(-1).to(dtype))


def _ce_args(n: int, v: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(n * 1000 + v)
    return (torch.randn(n, v, generator=g).to(dtype) * 3,
            torch.randint(0, v, (n,), generator=g, dtype=torch.int64))


def _close(got: Tensor, want: Tensor, dtype: torch.dtype = torch.float32) -> None:
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol)


SHAPES = [(1, 1), (7, 33), (13, 130)]


# -- every backend, ragged sizes ------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_kl_div_matches_torch(backend: str, shape: tuple[int, int]) -> None:
    y_pred, y_true = _kl_args(*shape)
    with kd.backend(backend):
        for reduction in ("batchmean", "sum", "mean", "none"):
            got = kl_div_forward(y_pred, y_true, False, reduction)
            want = _kl_ref(y_pred, y_true, False, reduction)
            assert got.dtype == (torch.float32 if reduction != "none" else y_pred.dtype)
            _close(got, want)
        got = kl_div_forward(y_pred, y_true.log(), True, "batchmean")
        _close(got, _kl_ref(y_pred, y_true.log(), True, "batchmean"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_matches_torch(backend: str, shape: tuple[int, int], dtype: torch.dtype) -> None:
    logits, labels = _ce_args(*shape, dtype=dtype)
    with kd.backend(backend):
        got = cross_entropy(logits, labels)
    assert got.shape == () and got.dtype == dtype  # `losses.mean()` of a logits-dtype buffer
    want = torch.nn.functional.cross_entropy(logits.double(), labels)
    _close(got, want, dtype)


@pytest.mark.parametrize("beta", [0.5, 0.0, 1.0])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_jsd_matches_torch(backend: str, shape: tuple[int, int], beta: float) -> None:
    x, y = (a.log() for a in _kl_args(*shape))
    x = torch.randn(*shape).log_softmax(-1)
    with kd.backend(backend):
        loss, dx = jsd_forward(x, y, None, beta)
    want_loss, want_dx = _jsd_ref(x, y, beta)
    assert loss.shape == () and loss.dtype == torch.float32 and dx.shape == (shape[0],)
    _close(loss, want_loss)
    if want_dx is not None:
        _close(dx, want_dx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_configs_the_autotuner_may_pick(backend: str) -> None:
    """The epilogue is the same host code for every config: the kernels under it still match."""
    y_pred, y_true = _kl_args(13, 130)
    logits, labels = _ce_args(13, 130)
    x, y = torch.randn(13, 130).log_softmax(-1), y_true.log()
    # run_cpu takes every argument (a call fills in the defaults)
    cases = [(kl_div_forward, (y_pred, y_true, False, "batchmean", 1e-10),
              lambda o: _close(o[0], _kl_ref(y_pred, y_true, False, "batchmean"))),
             (cross_entropy, (logits, labels),
              lambda o: _close(o[0], torch.nn.functional.cross_entropy(logits.double(), labels))),
             (jsd_forward, (x, y, None, 0.5, -100),
              lambda o: [_close(a, b) for a, b in zip(o, _jsd_ref(x, y, 0.5))])]
    for kernel, args, check in cases[::2] if backend == "nki" else cases:
        cfgs = list({tuple(c.block_sizes): c for c in kernel.configs(*args, backend=backend)}.values())
        step = max(1, (len(cfgs) - 1) // 3)
        for cfg in cfgs[::step][:3] + cfgs[-1:]:
            check(kernel.run_cpu(backend, args, cfg))


# -- the custom op, torch.compile, autograd -------------------------------------------------------

def test_opcheck_on_epilogue_kernels() -> None:
    y_pred, y_true = _kl_args(7, 33)
    for op, args in ((kl_div_forward._ops.op, (y_pred, y_true, False, "batchmean", 1e-10)),
                     (kl_div_forward._ops.op, (y_pred, y_true, False, "sum", 1e-10)),
                     (cross_entropy._ops.op, _ce_args(5, 17)),
                     (jsd_forward._ops.op, (y_pred, y_true.log(), None, 0.5, -100))):
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamo_reset: Any, dynamic: bool) -> None:
    counter = torch._dynamo.testing.CompileCounter()

    def model(logits: Tensor, labels: Tensor, y_pred: Tensor, y_true: Tensor) -> Tensor:
        loss, dx = jsd_forward(y_pred, y_true.log(), None, 0.5)
        return cross_entropy(logits, labels) * 2 + kl_div_forward(y_pred, y_true) + loss + dx.sum()

    f = torch.compile(model, fullgraph=True, dynamic=dynamic, backend=counter)
    for n, v in ((7, 33), (9, 40)):
        args = (*_ce_args(n, v), *_kl_args(n, v))
        lq, lp = args[2], args[3].log()
        jl, jdx = _jsd_ref(lq, lp, 0.5)
        want = (torch.nn.functional.cross_entropy(args[0].double(), args[1]) * 2
                + _kl_ref(args[2], args[3], False, "batchmean") + jl + jdx.sum())
        _close(f(*args), want)
    assert counter.frame_count >= 1


@kd.kernel
def mean_square(x: Tensor) -> Tensor:
    """Row sums of squares in the kernel, their mean after it: `rows.sum() / n`."""
    n, v = x.shape
    rows = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        rows[tn] = (x[tn, :] * x[tn, :]).sum(-1)
    return rows.sum() / n


def _ms_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    assert isinstance(output, torch.Tensor) and output.shape == ()  # what the call returns
    ctx.save_for_backward(inputs[0])


def _ms_backward(ctx: Any, g: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    return g * 2 * x / x.shape[0]


mean_square.register_autograd(_ms_backward, setup_context=_ms_setup)


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_through_an_epilogue(dynamo_reset: Any, compiled: bool) -> None:
    x = torch.randn(5, 7, requires_grad=True)
    f = torch.compile(mean_square, fullgraph=True) if compiled else mean_square
    out = f(x)
    out.backward()
    xr = x.detach().clone().requires_grad_()
    ((xr * xr).sum(-1).mean()).backward()
    _close(out.detach(), (xr * xr).sum(-1).mean().detach())
    assert x.grad is not None and xr.grad is not None
    _close(x.grad, xr.grad)


@pytest.mark.filterwarnings("ignore:kernel_dsl. torch.vmap")
def test_vmap_runs_the_epilogue_per_element() -> None:
    x = torch.randn(3, 5, 7)
    _close(torch.vmap(mean_square)(x), (x * x).sum(-1).mean(-1))


# -- more host code after the kernel ---------------------------------------------------------------

@kd.kernel
def many(x: Tensor, s: float):
    """Two outputs, an argument, a float argument, an in-place op, a factory and a conversion."""
    n, v = x.shape
    a = torch.zeros([n], dtype=torch.float32, device=x.device)
    b = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        a[tn] = x[tn, :].sum(-1)
        b[tn] = x[tn, :].abs().sum(-1)
    r = a.sum() / b.sum() * s + x.mean()
    a.mul_(2)
    b[0] = 0.0
    z = torch.zeros([2], dtype=torch.int32, device=x.device)
    m = torch.max(x, dim=1)
    return r, a, b, z, (a + 1).to(torch.float16), m.indices, x.T.contiguous() + 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_general_host_code_after_the_kernel(backend: str) -> None:
    x = torch.randn(6, 11)
    with kd.backend(backend):
        r, a, b, z, h, idx, xt = many(x, 0.25)
    rows, absr = x.sum(-1), x.abs().sum(-1)
    _close(r, rows.sum() / absr.sum() * 0.25 + x.mean())
    _close(a, rows * 2)
    want_b = absr.clone()
    want_b[0] = 0
    _close(b, want_b)
    assert z.dtype == torch.int32 and z.shape == (2,) and not z.any()
    assert h.dtype == torch.float16
    torch.testing.assert_close(h, (rows * 2 + 1).half(), rtol=1e-3, atol=1e-3)
    assert torch.equal(idx, x.argmax(1)) and torch.equal(xt, x.T)
    r2 = many(x, 2.0)[0]  # the float argument is a runtime value: no retrace, new result
    _close(r2, rows.sum() / absr.sum() * 2.0 + x.mean())
    result = torch.library.opcheck(many._ops.op, (x, 0.25))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_triton_cuda_op_body_runs_the_epilogue() -> None:
    """The CUDA op's body (lowering/triton/cuda.py) on CPU tensors through Triton's interpreter:
    the epilogue reads the outputs, an argument and the float argument."""
    from kernel_dsl.lowering.triton.cuda import make_cuda_op

    op = make_cuda_op(many._ops, interpret=True, name="many_epilogue_interp")
    x = torch.randn(6, 11)
    r, a, *_, idx, xt = op(x, 0.25)
    rows = x.sum(-1)
    _close(r, rows.sum() / x.abs().sum(-1).sum() * 0.25 + x.mean())
    _close(a, rows * 2)
    assert torch.equal(idx, x.argmax(1)) and torch.equal(xt, x.T)


def test_data_before_the_loop_says_what_to_pass() -> None:
    """jagged_softmax's `N = int(x_offsets[-1].item())` and jsd with shift_labels read tensor
    data before the loop: the kernel is traced without data."""
    @kd.kernel
    def sized_by_data(x: Tensor, offsets: Tensor) -> Tensor:
        N = int(offsets[-1].item())
        out = torch.zeros([N], dtype=x.dtype, device=x.device)
        for t in kd.tile(N):
            out[t] = x[t]
        return out

    for call, line in ((lambda: sized_by_data(torch.randn(4), torch.tensor([0, 4]))
                        , "N = int(offsets[-1].item())"),
                       (lambda: jsd_forward(torch.randn(3, 5), torch.randn(3, 5),
                                            torch.tensor([1, -100, 2]), 0.5),
                        "n_non_ignore = float((shift_labels != ignore_index).sum().item())")):
        with pytest.raises(KernelSyntaxError) as e:
            call()
        assert "test_host_epilogue.py" in str(e.value) and line in str(e.value), str(e.value)
        assert "before the kernel's loop" in str(e.value) and "before the call" in e.value.hint


def test_device_moves_after_the_kernel_are_refused() -> None:
    @kd.kernel
    def moved(x: Tensor) -> Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t]
        return out.sum().to("cpu")

    with pytest.raises(KernelSyntaxError, match="to device 'cpu'") as e:
        moved(torch.randn(5))
    assert 'return out.sum().to("cpu")' in str(e.value)


# tpu-v4's Mosaic has no sublane gather: a lane reduction stored into a 1-D output (each kernel's
# per-row loss here) fails there with this message (libtpu compile-only), as the plain row sum
# `out[tb] = x[tb, tk].sum(1)` does (tests/test_jagged_tile.py); not the epilogue's doing.
V4_ROW_SUM = "Sublane gather not supported by this TPU generation"


@pytest.mark.slow
def test_the_real_tpu_compiler_accepts_the_ports() -> None:
    """libtpu compile-only, five generations: the kernels under the epilogues."""
    y_pred, y_true = _kl_args(13, 130)
    logits, labels = _ce_args(13, 130)
    for kernel, args in ((kl_div_forward, (y_pred, y_true, False, "batchmean")),
                         (cross_entropy, (logits, labels.int())),
                         (jsd_forward, (y_pred, y_true.log(), None, 0.5))):
        report = kernel.check(*args, targets=TPU_TARGETS, measure_vmem=False)
        assert len(report.entries) == 5
        for e in report.entries:
            if e.target == "tpu-v4":
                assert not e.ok and V4_ROW_SUM in e.message, report.table()
            else:
                assert e.ok, report.table()


# -- host code after the kernel on its outputs (Helion's cross_entropy, kl_div) --------------------

@kd.kernel
def mean_row_sums(x: torch.Tensor):
    """cross_entropy's `return losses.mean()`."""
    n, v = x.shape
    losses = torch.zeros([n], dtype=x.dtype, device=x.device)
    for tn in kd.tile(n):
        losses[tn] = x[tn, :].sum(-1)
    return losses.mean()


@kd.kernel
def batchmean(x: torch.Tensor):
    """kl_div's `torch.sum(loss) / BT`, next to a view of the same output times 2."""
    n, v = x.shape
    loss = torch.zeros([n], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        loss[tn] = x[tn, :].float().sum(-1)
    return torch.sum(loss) / n, loss.view(1, n) * 2


@pytest.mark.parametrize("shape", [(1, 1), (7, 33)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_host_code_after_the_kernel_runs_on_its_outputs(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    torch.testing.assert_close(run(mean_row_sums, backend, x), x.sum(-1).mean())
    a, b = run(batchmean, backend, x)
    torch.testing.assert_close(a, x.sum(-1).sum() / shape[0])
    torch.testing.assert_close(b, x.sum(-1).view(1, -1) * 2)


def test_an_epilogue_through_the_op_and_torch_compile(dynamo_reset: Any) -> None:
    x = torch.randn(9, 20)
    op = batchmean._ops.op
    result = torch.library.opcheck(op, (x,))
    assert all(v == "SUCCESS" for v in result.values()), result
    f = torch.compile(lambda t: mean_row_sums(t) * 3, fullgraph=True)
    torch.testing.assert_close(f(x), x.sum(-1).mean() * 3)


@pytest.mark.parametrize("body, words", [
    ("x.add_(1)\n    return out", "writes into a kernel argument"),
    ("return out.sum().item()", r"`\.item\(\)` reads tensor values"),
    ("return out if out.sum() > 0 else out2", "`if`/`and`/`or`/`bool\\(\\)` on a tensor"),
], ids=["in-place-argument", "item", "if"])
def test_epilogues_that_read_data_or_write_arguments_are_refused(tmp_path: Any, body: str,
                                                                 words: str) -> None:
    """Host code after the kernel (kernel_dsl/host_epilogue.py) is traced once, without data."""
    import importlib.util

    src = (
        "import torch\nimport kernel_dsl as kd\n\n@kd.kernel\ndef k(x: torch.Tensor):\n"
        "    out = torch.empty_like(x)\n    out2 = torch.empty_like(x)\n"
        "    for t in kd.tile(x.shape[0]):\n        out[t] = x[t]\n        out2[t] = x[t]\n"
        f"    {body}\n")
    path = tmp_path / "epi_mod.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("epi_mod", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    with pytest.raises(KernelSyntaxError, match=words) as e:
        mod.k(torch.randn(5))
    assert "epi_mod.py:11:" in str(e.value) and e.value.hint, str(e.value)  # the user's line
