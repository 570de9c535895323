"""Operand checks shared by the instructions: memory placement, partition limits, the
start-partition rule, matching layouts, operator tokens, scalar-or-vector operands and
generation gates. Each failure is an `NkiError` naming the rule it enforces."""
from __future__ import annotations

import warnings
from enum import Enum
from typing import Any

import numpy as np

from . import dtypes as dt
from .errors import NkiError, StartPartitionWarning, kernel_line
from .language import Op, RejectedOp
from .state import PMAX, current
from .tensor import NkiTensor


class engine(Enum):  # noqa: N801 - NKI's name
    """`nisa.engine`: which engine runs an instruction."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(Enum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class matmul_perf_mode(Enum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class oob_mode(Enum):  # noqa: N801
    error = 0
    skip = 1


class dge_mode(Enum):  # noqa: N801
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


def tensor(x: Any, where: str, role: str) -> NkiTensor:
    if not isinstance(x, NkiTensor):
        if type(x).__name__ == "IndirectTensor":  # indirect.py: a dma_copy operand only
            raise NkiError(where, f"`{role}` is a vector_offset view; only nisa.dma_copy takes "
                           "one here", "not modelled")
        raise NkiError(where, f"`{role}` must be a tensor, got {type(x).__name__}", "operands")
    return x


def placed(t: NkiTensor, where: str, role: str, allowed: tuple[str, ...], why: str = "",
           engine_access: bool = True) -> NkiTensor:
    """`t` lives in one of the `allowed` memories (hbm means any HBM buffer). The start-partition
    rule binds compute engines only: a DMA (`engine_access=False`) may address any partition,
    as AWS's kernels do (nki-library's cross_entropy writes one partition at a time)."""
    buf = "hbm" if t.buffer in ("hbm", "private_hbm", "shared_hbm") else t.buffer
    if buf not in allowed:
        names = " or ".join(a.upper() for a in allowed)
        raise NkiError(where, f"`{role}` is in {t.buffer.upper()}; it must be in {names}"
                       + (f" ({why})" if why else ""), "memory placement")
    if buf in ("sbuf", "psum"):
        if engine_access:
            check_partitions(t, where, role)
        elif t.shape[0] > PMAX:
            raise NkiError(where, f"`{role}` spans {t.shape[0]} partitions; the hardware has "
                           f"{PMAX}", "partition limit")
        if t.storage.alloc is not None:
            current().touch(t.storage.alloc)
    return t


def check_partitions(t: NkiTensor, where: str, role: str) -> None:
    """At most 128 partitions, and the start-partition rule (a warning, as the compiler gives)."""
    p = t.shape[0]
    if p > PMAX:
        raise NkiError(where, f"`{role}` spans {p} partitions; the hardware has {PMAX}",
                       "partition limit")
    s = t.part_start
    allowed = (0,) if p > 64 else (0, 64) if p > 32 else (0, 32, 64, 96)
    if s not in allowed:
        warnings.warn(StartPartitionWarning(
            f"{where}: `{role}` covers partitions {s}..{s + p - 1}; an access of {p} partitions "
            f"must start at partition {' or '.join(map(str, allowed))} [rule: start partition]"
            + (f"\n  at {kernel_line()}" if kernel_line() else "")), stacklevel=3)


def same_layout(a: NkiTensor, b: NkiTensor, where: str, ra: str, rb: str) -> None:
    """Same partition count and the same number of elements per partition."""
    if a.shape[0] != b.shape[0] or a.free_size != b.free_size:
        raise NkiError(where, f"`{ra}` {list(a.shape)} and `{rb}` {list(b.shape)} differ in "
                       "partitions or elements per partition", "tensor shapes",
                       "give both the same partition count and free size")


def operator(o: Any, where: str, role: str, *, alu: bool = False, act: bool = False,
             reduce: bool = False) -> Op:
    if isinstance(o, RejectedOp):
        raise o.reject(where)
    if not isinstance(o, Op):
        raise NkiError(where, f"`{role}` must be an nl operator, got {o!r}", "operands")
    if o.kind == "tile":
        raise NkiError(where, f"`{role}={o!r}` is a tile-level nl function, not an instruction "
                       "operator", "operands", f"call {o!r}(tile) instead")
    if o.kind == "unmodelled":
        raise NkiError(where, f"`{role}={o!r}` is not modelled by this interpreter",
                       "not modelled")
    if alu and not o.alu:
        raise NkiError(where, f"`{role}={o!r}` is an activation function, not an ALU operator",
                       "operands", "use nisa.activation for it")
    if act and not o.act:
        raise NkiError(where, f"`{role}={o!r}` is not an activation function", "operands",
                       "ScalarE runs copy, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, ...")
    if reduce and not o.reduce:
        raise NkiError(where, f"`{role}={o!r}` is not a legal reduction operator", "operands",
                       "reduce with nl.add, nl.multiply, nl.maximum or nl.minimum")
    return o


def scalar_or_vector(x: Any, data: NkiTensor, where: str, role: str) -> np.ndarray | float:
    """A compile-time number, or a float32 `(P, 1)` tile broadcast along the free dim."""
    if isinstance(x, (bool, np.bool_)):
        return float(x)
    if isinstance(x, (int, float, np.integer, np.floating)):
        return float(np.float32(x))
    t = tensor(x, where, role)
    placed(t, where, role, ("sbuf", "psum"))
    if t.shape[0] != data.shape[0] or t.free_size != 1:
        raise NkiError(where, f"`{role}` is {list(t.shape)}; a vector operand is "
                       f"({data.shape[0]}, 1), one value per partition of the data", "operands")
    if t.dtype is not dt.float32:
        raise NkiError(where, f"`{role}` is {t.dtype!r}; vector operands must be float32",
                       "dtypes", "cast it with nisa.tensor_copy into a float32 tile")
    return t.f32().reshape(t.shape[0], *([1] * (data.ndim - 1)))


def gen_at_least(gen: int, where: str, feature: str) -> None:
    tgt = current().target
    if tgt.gen < gen:
        raise NkiError(where, f"{feature} needs NeuronCore-v{gen}+, and {tgt.name} is "
                       f"{tgt.version}", "generation gates",
                       f"set NEURON_PLATFORM_TARGET_OVERRIDE to a newer target or avoid {feature}")


def no_psum(ts: list[tuple[Any, str]], where: str, why: str) -> None:
    for t, role in ts:
        if isinstance(t, NkiTensor) and t.buffer == "psum":
            raise NkiError(where, f"`{role}` is in PSUM; {why}", "memory placement",
                           "copy it to SBUF with nisa.tensor_copy first")
