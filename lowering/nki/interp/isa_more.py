"""More `nki.isa` instructions, from their SDK docstrings (`nki/api/nki/isa/__init__.py`):
`tensor_tensor_scan`, `scalar_tensor_tensor`, `tensor_scalar_reduce`, `activation_reduce`,
`dma_transpose`, `dma_compute`, `bn_stats` / `bn_aggr`, the target queries `get_nc_version` /
`get_nc_sub_version`, and, for the rest of the public ISA, a clear "not modelled" error naming
the instruction.

`tensor_scalar_reduce` accumulates in VectorE's reduction registers (accumulators.py).
"""
from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any

import numpy as np

from . import accumulators as acc
from . import checks as ck
from . import language as nl
from .checks import dge_mode, reduce_cmd
from .errors import NkiError
from .isa_compute import _apply, activation
from .state import current
from .tensor import NkiTensor


class nc_version(IntEnum):  # noqa: N801 - NKI's name; ordered (nki-library: `>= gen3`)
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(Enum):  # noqa: N801
    dma = 1
    gpsimd_dma = 2


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the target (NEURON_PLATFORM_TARGET_OVERRIDE)."""
    return nc_version(current().target.gen)


def get_nc_sub_version() -> int:
    return 0  # the first silicon revision; the interpreter models no other


def _arith(o: Any, w: str, role: str) -> nl.Op:
    op = ck.operator(o, w, role, alu=True)
    if op.kind == "bitvec":
        raise NkiError(w, f"`{role}={op!r}` is a bitvec operator; this instruction takes "
                       "arithmetic operators", "operands")
    return op


def _binary(o: nl.Op, a: Any, b: Any, reverse: bool) -> Any:
    with np.errstate(all="ignore"):
        return o.fn(b, a) if reverse else o.fn(a, b)


def tensor_tensor_scan(dst: NkiTensor, data0: NkiTensor, data1: NkiTensor, initial: Any, op0: Any,
                       op1: Any, reverse0: bool = False, reverse1: bool = False,
                       name: Any = None) -> None:
    """Per partition, along the flattened free dim: `r[i] = op1(op0(data0[i], r[i-1]), data1[i])`
    with `r[-1] = initial` (a float32 scalar or a (P, 1) tile), in float32 on VectorE."""
    w = "nisa.tensor_tensor_scan"
    d, a, b = (ck.tensor(x, w, r) for x, r in ((dst, "dst"), (data0, "data0"), (data1, "data1")))
    for t, r in ((d, "dst"), (a, "data0"), (b, "data1")):
        ck.placed(t, w, r, ("sbuf", "psum"))
    ck.same_layout(a, b, w, "data0", "data1")
    ck.same_layout(d, a, w, "dst", "data0")
    if a.buffer == "psum" and b.buffer == "psum":
        raise NkiError(w, "`data0` and `data1` are both in PSUM", "memory placement")
    o0, o1 = _arith(op0, w, "op0"), _arith(op1, w, "op1")
    p = a.shape[0]
    x0, x1 = a.f32().reshape(p, -1), b.f32().reshape(p, -1)
    prev = np.broadcast_to(np.asarray(ck.scalar_or_vector(initial, a, w, "initial"),
                                      dtype=np.float32).reshape(-1, 1)[:, 0], (p,)).astype(np.float32)
    out = np.empty_like(x0)
    for i in range(x0.shape[1]):
        step = _binary(o0, x0[:, i], prev, reverse0)
        prev = np.asarray(_binary(o1, step, x1[:, i], reverse1), dtype=np.float32)
        out[:, i] = prev
    d.write(out.reshape(d.shape))


def scalar_tensor_tensor(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, op1: Any,
                         operand1: NkiTensor, reverse0: bool = False, reverse1: bool = False,
                         name: Any = None) -> None:
    """`(data op0 operand0) op1 operand1` on VectorE in float32; operand0 a scalar or (P, 1)
    tile, operand1 a tile of data's layout; data and operand1 not both in PSUM."""
    w = "nisa.scalar_tensor_tensor"
    d, s, t1 = (ck.tensor(x, w, r) for x, r in ((dst, "dst"), (data, "data"), (operand1, "operand1")))
    for t, r in ((d, "dst"), (s, "data"), (t1, "operand1")):
        ck.placed(t, w, r, ("sbuf", "psum"))
    ck.same_layout(s, t1, w, "data", "operand1")
    ck.same_layout(d, s, w, "dst", "data")
    if s.buffer == "psum" and t1.buffer == "psum":
        raise NkiError(w, "`data` and `operand1` are both in PSUM", "memory placement")
    o0, o1 = _arith(op0, w, "op0"), _arith(op1, w, "op1")
    x = s.f32().reshape(s.shape)
    tmp = _apply(o0, x, ck.scalar_or_vector(operand0, s, w, "operand0"), reverse0)
    out = _binary(o1, np.asarray(tmp, dtype=np.float32), t1.f32().reshape(s.shape), reverse1)
    d.write(np.asarray(out).reshape(d.shape))


_REDUCE_OPS = ("add", "multiply", "maximum", "minimum")


def _reduce_op(o: Any, w: str) -> nl.Op:
    op = ck.operator(o, w, "reduce_op", alu=True, reduce=True)
    if op.name not in _REDUCE_OPS:
        raise NkiError(w, f"reduce_op={op!r}; this instruction reduces with nl.add, nl.multiply, "
                       "nl.maximum or nl.minimum", "operands")
    return op


def tensor_scalar_reduce(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, reduce_op: Any,
                         reduce_res: Any = None, reverse0: bool = False,
                         reduce_cmd: Any = reduce_cmd.reset_reduce, reduce_init: Any = None,
                         reduce_res_negate: bool = False, name: Any = None) -> None:
    """`dst = data op0 operand0` and a reduction of dst over all free dims into the VectorE
    accumulator; `reduce_res` ((P, 1), optional) receives it (negated if asked)."""
    w = "nisa.tensor_scalar_reduce"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    ck.same_layout(d, s, w, "dst", "data")
    o0 = _arith(op0, w, "op0")
    if reverse0:
        raise NkiError(w, "reverse0 is documented as not supported yet", "operands")
    ro = _reduce_op(reduce_op, w)
    x0 = None if o0.unary else ck.scalar_or_vector(operand0, s, w, "operand0")
    res = np.asarray(_apply(o0, s.f32().reshape(s.shape), x0, False), dtype=np.float32)
    d.write(res.reshape(d.shape))
    # the reduction reads the rounded dst values
    acc.vector_engine(w, d.f32(), s, ro.name, reduce_res, reduce_cmd, reduce_init,
                      reduce_res_negate)


def activation_reduce(dst: NkiTensor, op: Any, data: NkiTensor, reduce_op: Any,
                      reduce_res: NkiTensor, bias: Any = None, scale: Any = 1.0,
                      name: Any = None) -> None:
    """`nisa.activation` with a reset accumulator and the free-dim reduction written to
    reduce_res (documented as equivalent to activation(..., reduce_cmd=reset_reduce))."""
    if reduce_res is None:
        raise NkiError("nisa.activation_reduce", "`reduce_res` is required", "operands")
    activation(dst=dst, op=op, data=data, bias=bias, scale=scale, reduce_op=reduce_op,
               reduce_res=reduce_res, reduce_cmd=ck.reduce_cmd.reset_reduce)


_DEFAULT_PERM = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst: NkiTensor, src: NkiTensor, axes: Any = None, priority: Any = None,
                  dge_mode: Any = dge_mode.unknown, oob_mode: Any = None, name: Any = None) -> None:
    """A transposing DMA (NeuronCore-v3+): dst = src permuted by `axes`, by default [1, 0],
    [2, 1, 0] or [3, 1, 2, 0] for 2-, 3- and 4-D sources. Hardware-DGE constraints are checked
    when dge_mode=hwdge. Indirect (gather) transposes are not modelled."""
    w = "nisa.dma_transpose"
    ck.gen_at_least(3, w, "nisa.dma_transpose")
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(src, w, "src")
    why = "DMA cannot read or write PSUM"
    ck.placed(s, w, "src", ("hbm", "sbuf"), why, engine_access=False)
    ck.placed(d, w, "dst", ("hbm", "sbuf"), why, engine_access=False)
    if s.ndim not in _DEFAULT_PERM:
        raise NkiError(w, f"`src` is {s.ndim}-D; dma_transpose takes 2- to 4-D sources",
                       "tensor shapes")
    perm = tuple(int(a) for a in axes) if axes is not None else _DEFAULT_PERM[s.ndim]
    if sorted(perm) != list(range(s.ndim)):
        raise NkiError(w, f"axes={perm} is not a permutation of {s.ndim} dims", "operands")
    if dge_mode == ck.dge_mode.hwdge:
        if s.dtype.itemsize != 2:
            raise NkiError(w, f"a hardware-DGE transpose needs a 2-byte dtype, got {s.dtype!r}",
                           "dtypes")
        if s.shape[-1] > 128 or (s.ndim == 2 and s.shape[0] != 16):
            raise NkiError(w, f"`src` {list(s.shape)} breaks the hardware-DGE transpose limits "
                           "(2-D: shape[0] == 16; shape[-1] <= 128)", "tensor shapes")
    vals = s.raw().transpose(perm)
    if d.size != vals.size:
        raise NkiError(w, f"`dst` {list(d.shape)} cannot hold the transpose {list(vals.shape)}",
                       "tensor shapes")
    if d.dtype is s.dtype:
        d.arr[...] = vals.reshape(d.shape)
    else:
        d.write(s.f32().transpose(perm).reshape(d.shape))


def bn_stats(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """Per partition (VectorE, float32), over at most 512 elements: (count, mean, variance * count)
    of the even elements, then the same of the odd elements (6 values)."""
    w = "nisa.bn_stats"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    if s.free_size > 512:
        raise NkiError(w, f"`data` has {s.free_size} elements per partition; at most 512 "
                       "(nl.tile_size.bn_stats_fmax)", "tensor shapes",
                       "run bn_stats per 512-element tile and aggregate with one bn_aggr")
    if d.shape[0] != s.shape[0] or d.free_size != 6:
        raise NkiError(w, f"`dst` is {list(d.shape)}; it must be ({s.shape[0]}, 6)", "tensor shapes")
    x = s.f32().reshape(s.shape[0], -1)
    parts = []
    for half in (x[:, 0::2], x[:, 1::2]):
        n = half.shape[1]
        mean = half.mean(axis=1) if n else np.zeros(x.shape[0], np.float32)
        m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(x.shape[0], np.float32)
        parts += [np.full(x.shape[0], n, np.float32), mean, m2]
    d.write(np.stack(parts, axis=1).reshape(d.shape))


def bn_aggr(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """Combines (count, mean, variance * count) triples per partition into (mean, variance)."""
    w = "nisa.bn_aggr"
    d, s = ck.tensor(dst, w, "dst"), ck.tensor(data, w, "data")
    ck.placed(s, w, "data", ("sbuf", "psum"))
    ck.placed(d, w, "dst", ("sbuf", "psum"))
    if s.free_size % 3:
        raise NkiError(w, f"`data` has {s.free_size} elements per partition, not a multiple of 3 "
                       "(count, mean, variance * count)", "tensor shapes")
    if d.shape[0] != s.shape[0] or d.free_size != 2:
        raise NkiError(w, f"`dst` is {list(d.shape)}; it must be ({s.shape[0]}, 2)", "tensor shapes")
    t = s.f32().reshape(s.shape[0], -1, 3).astype(np.float64)
    cnt, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = cnt.sum(axis=1)
    with np.errstate(all="ignore"):
        mu = (cnt * mean).sum(axis=1) / total
        var = (m2.sum(axis=1) + (cnt * (mean - mu[:, None]) ** 2).sum(axis=1)) / total
    d.write(np.stack([mu, var], axis=1).astype(np.float32).reshape(d.shape))


def dma_compute(dst: NkiTensor, srcs: Any, reduce_op: Any, scales: Any = None,
                unique_indices: bool = True, oob_mode: Any = None, name: Any = None) -> None:
    """`dst = reduce_op(srcs[0] * scales[0], ...)` in the DMA engines, in float32: reduce_op is
    nl.add and every scale 1.0 (the documented limits); 1 to 16 sources (HBM or SBUF) with dst's
    element count. The indirect read-modify-write forms need `.ap(vector_offset=)`, which is not
    modelled."""
    w = "nisa.dma_compute"
    d = ck.tensor(dst, w, "dst")
    ck.placed(d, w, "dst", ("hbm", "sbuf"), "DMA cannot touch PSUM", engine_access=False)
    ts = [ck.tensor(t, w, f"srcs[{i}]") for i, t in enumerate(srcs)]
    if not 1 <= len(ts) <= 16:
        raise NkiError(w, f"{len(ts)} sources; dma_compute takes 1 to 16", "operands")
    if ck.operator(reduce_op, w, "reduce_op", alu=True).name != "add":
        raise NkiError(w, f"reduce_op={reduce_op!r}; only nl.add is supported", "operands")
    if scales is not None and any(float(x) != 1.0 for x in scales):
        raise NkiError(w, f"scales {list(scales)} must all be 1.0", "operands")
    total = np.zeros(d.size, dtype=np.float32)
    for i, t in enumerate(ts):
        ck.placed(t, w, f"srcs[{i}]", ("hbm", "sbuf"), "DMA cannot touch PSUM", engine_access=False)
        if t.size != d.size:
            raise NkiError(w, f"`srcs[{i}]` has {t.size} elements, `dst` {d.size}", "tensor shapes")
        total = total + t.f32().reshape(-1)
    d.write(total.reshape(d.shape))


def _not_modelled(instr: str, what: str = "") -> Any:
    def run(*args: Any, **kwargs: Any) -> None:
        raise NkiError(f"nisa.{instr}", (what or "this instruction") + " is not modelled by "
                       "kernel_dsl's NKI interpreter", "not modelled",
                       "run the kernel with AWS's nki.simulate")

    run.__name__ = instr
    return run


_COLLECTIVE = "a multi-core collective"
NOT_MODELLED = {
    "sendrecv": _COLLECTIVE, "core_barrier": _COLLECTIVE,
    "quantize_mx": "MX quantization",
    "local_gather": "",
    "sequence_bounds": "", "tensor_scalar_cumulative": "", "topk": "",
    "rng": "hardware random number generation", "dropout": "hardware random number generation",
    "set_rng_seed": "hardware random number generation",
    "rand_set_state": "hardware random number generation",
    "rand_get_state": "hardware random number generation",
    "rand2": "hardware random number generation",
}
STUBS = {n: _not_modelled(n, what) for n, what in NOT_MODELLED.items()}
