"""Matmul with bias and activation epilogues, as a torch op with autograd and a JAX entry.

    y = matmul(x, w, bias=b, activation="gelu", out_dtype=torch.float32)

One DSL kernel does every variant: operands [Bt, M, K] @ [Bt, K, N] (either side may be read
transposed, so backward needs no transposed copies), f32 accumulation over K, then the
epilogue in f32: + bias, the activation, or (for backward) the incoming gradient times the
activation's derivative. Flags are scalar kernel arguments: each combination is its own
specialization, the unused branches are not traced. Unused tensor arguments are [1, 1].
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

import kernel_dsl as kd
from kernel_dsl import amp
from kernel_dsl.buckets import bucket, cut, pad
from kernel_dsl.fast_path import eager_route

from .base import call, check_float, library_kernel, library_op, placeholder, register_autograd

F32 = torch.float32
ACTIVATIONS = (None, "relu", "gelu", "silu")
_ACT = {a: i for i, a in enumerate(ACTIVATIONS)}
_OUT = {None: 0, torch.float32: 1, torch.bfloat16: 2, torch.float16: 3}
SQRT1_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _activation(z: Any, act: int) -> Any:
    if act == 1:
        return torch.relu(z)
    if act == 2:  # exact (erf) GELU, torch's default
        return 0.5 * z * (1.0 + torch.erf(z * SQRT1_2))
    if act == 3:
        return z * torch.sigmoid(z)
    return z


def _activation_grad(z: Any, act: int) -> Any:
    if act == 1:
        return (z > 0.0).to(torch.float32)
    if act == 2:
        return 0.5 * (1.0 + torch.erf(z * SQRT1_2)) + z * torch.exp(-0.5 * z * z) * INV_SQRT_2PI
    if act == 3:
        s = torch.sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    return z * 0.0 + 1.0


@library_kernel
def matmul_kernel(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, grad: torch.Tensor,
                  act: int, act_grad: bool, trans_x: bool, trans_y: bool, has_bias: bool,
                  out_code: int):
    bt = x.shape[0]
    m = x.shape[2] if trans_x else x.shape[1]
    k = x.shape[1] if trans_x else x.shape[2]
    n = y.shape[1] if trans_y else y.shape[2]
    dtype = grad.dtype if act_grad else x.dtype
    if out_code == 1:
        dtype = torch.float32
    elif out_code == 2:
        dtype = torch.bfloat16
    elif out_code == 3:
        dtype = torch.float16
    out = torch.empty([bt, m, n], dtype=dtype, device=x.device)
    for tb, tm, tn in kd.tile([bt, m, n], block_size=[1, None, None]):
        acc = kd.zeros([tb, tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            a = x[tb, tk, tm].transpose(-2, -1) if trans_x else x[tb, tm, tk]
            b = y[tb, tn, tk].transpose(-2, -1) if trans_y else y[tb, tk, tn]
            acc += a @ b
        if has_bias:
            acc = acc + bias[:, tn][None].to(torch.float32)
        if act_grad:
            acc = grad[tb, tm, tn].to(torch.float32) * _activation_grad(acc, act)
        else:
            acc = _activation(acc, act)
        out[tb, tm, tn] = acc.to(out.dtype)
    return out


@library_kernel
def column_sum(x: torch.Tensor):
    """[M, N] -> [N, 1] f32: the bias gradient. Summed as a column (a lane reduction of the
    transposed tile) so that the carried sum has the layout every TPU generation can keep."""
    m, n = x.shape
    out = torch.empty([n, 1], dtype=torch.float32, device=x.device)
    for tn in kd.tile(n):
        acc = kd.zeros([tn, 1], dtype=torch.float32)
        for tm in kd.tile(m):
            acc = acc + x[tm, tn].to(torch.float32).T.sum(dim=-1, keepdim=True)
        out[tn, :] = acc
    return out


# -- host side: shapes, the ops and autograd --------------------------------------------------------
def _dummy(device: torch.device) -> torch.Tensor:
    return placeholder(device)


def _as_3d(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
    """x [..., M, K], y [K, N] or [..., K, N] -> [Bt, M, K], [Bt, K, N] and the batch shape.
    A 2-D y folds x's batch into M (one weight read); batched operands broadcast like torch."""
    if y.dim() == 2:
        return x.reshape(1, -1, x.shape[-1]), y.unsqueeze(0), list(x.shape[:-2])
    batch = list(torch.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    x3 = x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
    y3 = y.expand(*batch, *y.shape[-2:]).reshape(-1, *y.shape[-2:])
    return x3, y3, batch


def _out_shape(x: torch.Tensor, y: torch.Tensor) -> list[Any]:
    if y.dim() == 2:
        return [*x.shape[:-1], y.shape[-1]]
    batch = list(torch.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    return [*batch, x.shape[-2], y.shape[-1]]


def _act_code(activation: str) -> int:
    return _ACT[None if activation == "none" else activation]


def _out_code(out_dtype: torch.dtype | None) -> int:
    if not (out_dtype is None or isinstance(out_dtype, torch.dtype)) or out_dtype not in _OUT:
        raise TypeError(f"matmul: out_dtype {out_dtype} is not float32, bfloat16 or float16")
    return _OUT[out_dtype]


@library_op("kernel_dsl::matmul")
def _fwd_op(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, activation: str,
            out_dtype: torch.dtype | None) -> torch.Tensor:
    if y.dim() == 2 and eager_route((x, y, bias)) is not None:  # plain CPU tensors
        return _launch(x, y, bias, activation, out_dtype)(x, y, bias)
    x3, y3, _ = _as_3d(x, y)
    m = x3.shape[1]  # rows are independent: pad them to their shape bucket (kernel_dsl.buckets)
    none = placeholder(x.device)
    out = matmul_kernel(pad(x3, 1, bucket(m)), y3, none if bias is None else bias.reshape(1, -1),
                        none, _act_code(activation), False, False, False, bias is not None,
                        _OUT[out_dtype])
    return cut(out, 1, m).reshape(_out_shape(x, y))


@_fwd_op.register_fake
def _fwd_fake(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, activation: str,
              out_dtype: torch.dtype | None) -> torch.Tensor:
    return x.new_empty(_out_shape(x, y), dtype=out_dtype or x.dtype)


@library_op("kernel_dsl::matmul_backward")
def _bwd_op(dout: torch.Tensor, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None,
            activation: str) -> list[torch.Tensor]:
    x3, y3, batch = _as_3d(x, y)
    g3 = dout.reshape(x3.shape[0], x3.shape[1], y3.shape[2])
    m = x3.shape[1]  # zero rows pad to the bucket: dz is zero there, so dy gains nothing
    x3, g3 = pad(x3, 1, bucket(m)), pad(g3, 1, bucket(m))
    code = _OUT[x.dtype]
    act = _act_code(activation)
    if act:  # dz = dout * act'(x @ y + bias), the pre-activation recomputed in f32
        b2 = bias.reshape(1, -1) if bias is not None else _dummy(x.device)
        dz = matmul_kernel(x3, y3, b2, g3.contiguous(), act, True, False, False,
                           bias is not None, code)
    else:
        dz = g3.to(x.dtype).contiguous()
    none = _dummy(x.device)
    dx = cut(matmul_kernel(dz, y3, none, none, 0, False, False, True, False, code), 1, m)
    dy = matmul_kernel(x3.contiguous(), dz, none, none, 0, False, True, False, False, _OUT[y.dtype])
    dx = dx.reshape(*batch, *x.shape[-2:]) if y.dim() > 2 else dx.reshape(x.shape)
    dx = dx.sum_to_size(x.shape) if dx.shape != x.shape else dx
    dy = dy.reshape(y.shape) if y.dim() == 2 else dy.reshape(*batch, *y.shape[-2:])
    dy = dy.sum_to_size(y.shape) if dy.shape != y.shape else dy
    grads = [dx.contiguous(), dy.contiguous()]
    if bias is not None:
        db = column_sum(dz.reshape(-1, dz.shape[-1]))
        grads.append(db.reshape(bias.shape).to(bias.dtype))
    return grads


@_bwd_op.register_fake
def _bwd_fake(dout: torch.Tensor, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None,
              activation: str) -> list[torch.Tensor]:
    out = [x.new_empty(x.shape), y.new_empty(y.shape)]
    if bias is not None:
        out.append(bias.new_empty(bias.shape))
    return out


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, y, bias, activation, _ = inputs
    ctx.save_for_backward(x, y, bias)
    ctx.activation = activation


def _backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
    x, y, bias = ctx.saved_tensors
    grads = call(_bwd_op, dout, x, y, bias, ctx.activation)
    return grads[0], grads[1], grads[2] if bias is not None else None, None, None


register_autograd(_fwd_op, _backward, _setup_context)
amp.register("kernel_dsl::matmul", "lower_precision_fp")  # as torch.mm/matmul, CPU and CUDA


def matmul(x: torch.Tensor, y: torch.Tensor, *, bias: torch.Tensor | None = None,
           activation: str | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """`activation(x @ y + bias)` with f32 accumulation, as one kernel.

    x: [..., M, K]; y: [K, N] (x's batch dims fold into M: the weight is read once per tile) or
    [..., K, N] (batch dims broadcast as in `torch.matmul`). bias: [N] or None. activation:
    None, "relu", "gelu" (exact, erf) or "silu", applied in f32 before the one rounding to
    `out_dtype` (default: x's dtype). float32, bfloat16 or float16; x and y the same dtype,
    except under `torch.autocast`, where x, y and bias run in the autocast dtype (as torch.mm).
    Differentiable in x, y and bias (the backward recomputes the pre-activation in the same
    kernel that applies the activation's derivative).
    """
    try:  # a plain eager CPU call of a signature seen before: checked and built already
        launch = _checked.get(_call_key(x, y, bias, activation, out_dtype))
    except (TypeError, AttributeError):  # not tensors, or unhashable flags: the checks say so
        launch = None
    if launch is not None:
        return launch(x, y, bias)
    check_float("x", x)
    check_float("y", y)
    if x.dtype != y.dtype:
        amp.check_same_dtype("matmul", x=x, y=y)
    if x.dim() < 2 or y.dim() < 2:
        raise ValueError(f"matmul: x {list(x.shape)} and y {list(y.shape)} need at least 2 dims")
    if x.shape[-1] != y.shape[-2]:
        raise ValueError(f"matmul: x {list(x.shape)} @ y {list(y.shape)}: inner dims differ")
    if activation not in ACTIVATIONS:  # a tuple: an unhashable value is an error, not a crash
        raise ValueError(f"matmul: activation {activation!r} is not one of {ACTIVATIONS}")
    if bias is not None:
        check_float("bias", bias)
        if bias.dim() != 1 or bias.shape[0] != y.shape[-1]:
            raise ValueError(f"matmul: bias {list(bias.shape)} must be [{y.shape[-1]}]")
    if x.numel() == 0 or y.numel() == 0:
        raise ValueError("matmul: empty tensors are not supported")
    _out_code(out_dtype)
    key = _call_key(x, y, bias, activation, out_dtype)
    if key is not None:
        if len(_checked) >= _MAX_LAUNCHES:
            _checked.clear()
        launch = _checked[key] = _launch(x, y, bias, activation or "none", out_dtype)
        return launch(x, y, bias)
    return call(_fwd_op, x, y, bias, activation or "none", out_dtype)


# -- calls on plain CPU tensors, prepared once per signature ----------------------------------------
# The forward body's own work (bucket lookup, placeholders, views, the kernel object's routing and
# specialization key) is a pure function of the signature below, and so are `matmul`'s argument
# checks: both are done once. A call then costs its views and the launch (benchmarks/overhead.py:
# the library call against the kernel call it makes). Eager calls with gradients and compiled
# graphs reach the body through the op's autograd, and take the same launches.
_launches: dict[tuple[Any, ...], Callable[..., torch.Tensor]] = {}  # the body's, by signature
_checked: dict[tuple[Any, ...], Callable[..., torch.Tensor]] = {}  # `matmul`'s: checks passed
_MAX_LAUNCHES = 512  # many shapes (no buckets): keep the memos bounded


def _signature(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, activation: Any,
               out_dtype: Any) -> tuple[Any, ...]:
    return (x.shape, y.shape, x.dtype, y.dtype, None if bias is None else (bias.shape, bias.dtype),
            activation, out_dtype) + matmul_kernel.launch_state()


def _call_key(x: Any, y: Any, bias: Any, activation: Any, out_dtype: Any) -> tuple[Any, ...] | None:
    """The signature of a plain eager CPU call with a 2-D weight, or None for any other call."""
    if y.dim() != 2 or eager_route((x, y, bias)) != "body":
        return None
    return _signature(x, y, bias, activation, out_dtype)


def _launch(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, activation: str,
            out_dtype: torch.dtype | None) -> Callable[..., torch.Tensor]:
    key = _signature(x, y, bias, activation, out_dtype)
    launch = _launches.get(key)
    if launch is None:
        if len(_launches) >= _MAX_LAUNCHES:
            _launches.clear()
        launch = _launches[key] = _prepare_launch(x, y, bias, activation, out_dtype)
    return launch


def _prepare_launch(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None,
                    activation: str, out_dtype: torch.dtype | None) -> Callable[..., torch.Tensor]:
    """What `_fwd_op`'s body does for this signature (2-D y), with every decision taken now."""
    k, n = x.shape[-1], y.shape[1]
    m = x.numel() // k  # x's batch dims fold into M: one weight read per tile
    mb = bucket(m)
    out_shape = (*x.shape[:-1], n)
    none = placeholder(x.device)
    x3 = pad(x.reshape(1, m, k), 1, mb)
    run = matmul_kernel.cpu_runner((x3, y[None], none if bias is None else bias.reshape(1, n),
                                    none, _act_code(activation), False, False, False,
                                    bias is not None, _OUT[out_dtype]))

    def launch(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ts = (pad(x.reshape(1, m, k), 1, mb), y[None],
              none if bias is None else bias.reshape(1, n), none)
        out = run(*[t if t.is_contiguous() else t.contiguous() for t in ts])[0]
        return cut(out, 1, m).reshape(out_shape)

    return launch
