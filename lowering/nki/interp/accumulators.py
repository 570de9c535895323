"""The engines' reduction registers: 128 per-partition 32-bit registers on ScalarE and on VectorE
that accumulating instructions share and that persist between instructions (SDK docstrings of
nisa.activation, nisa.tensor_scalar_reduce, nisa.exponential). State lives in the launch's
Context, so each LNC program has its own; a register never written reads as an error."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import checks as ck
from .checks import reduce_cmd
from .errors import NkiError
from .state import current
from .tensor import NkiTensor

_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
_REDUCERS = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}


def _read_out(w: str, regs: np.ndarray, s: NkiTensor, reduce_res: Any, negate: bool = False) -> None:
    p0, p = s.part_start, s.shape[0]
    r = ck.tensor(reduce_res, w, "reduce_res")
    ck.placed(r, w, "reduce_res", ("sbuf", "psum"))
    if r.shape[0] != p or r.free_size != 1:
        raise NkiError(w, f"`reduce_res` is {list(r.shape)}; it must be ({p}, 1)", "operands")
    if np.isnan(regs[p0:p0 + p]).any():
        raise NkiError(w, "reduce_res reads reduction registers that no reduce_cmd has written "
                       "(the default reduce_cmd is idle)", "reduction accumulators",
                       "pass reduce_cmd=nisa.reduce_cmd.reset_reduce")
    out = regs[p0:p0 + p]
    r.write((-out if negate else out).reshape(r.shape))


def scalar_engine(w: str, vals: np.ndarray, s: NkiTensor, reduce_op: Any, reduce_res: Any,
                  cmd: Any) -> None:
    """nisa.activation: reset / reset_reduce zero the registers; reduce / reset_reduce add this
    call's free-dim sum (`reduce_op` must be nl.add); idle leaves them; reduce_res reads them."""
    if reduce_res is None and cmd in (reduce_cmd.idle, None):
        return
    p0, p = s.part_start, s.shape[0]
    regs = current().accumulator("scalar")
    if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce):
        regs[p0:p0 + p] = 0.0
    if cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce):
        if getattr(reduce_op, "name", None) != "add":
            raise NkiError(w, f"reduce_op={reduce_op!r}; ScalarE reduces with nl.add", "operands")
        if np.isnan(regs[p0:p0 + p]).any():
            raise NkiError(w, "reduce_cmd=reduce adds onto reduction registers that were never "
                           "reset", "reduction accumulators", "start with reset_reduce")
        regs[p0:p0 + p] += vals.reshape(p, -1).sum(axis=1, dtype=np.float32)
    if reduce_res is not None:
        _read_out(w, regs, s, reduce_res)


def vector_engine(w: str, vals: np.ndarray, s: NkiTensor, op_name: str, reduce_res: Any, cmd: Any,
                  reduce_init: Any = None, negate: bool = False) -> None:
    """VectorE (tensor_scalar_reduce, exponential): reset_reduce starts from the operator's
    identity, reduce continues, load_reduce starts from reduce_init; then this call's values
    are reduced in; reduce_res (optional) reads the registers, negated if asked."""
    p0, p = s.part_start, s.shape[0]
    regs = current().accumulator("vector")
    if cmd == reduce_cmd.reset_reduce:
        regs[p0:p0 + p] = _IDENTITY[op_name]
    elif cmd == reduce_cmd.load_reduce:
        if reduce_init is None:
            raise NkiError(w, "reduce_cmd=load_reduce needs reduce_init", "operands")
        regs[p0:p0 + p] = np.asarray(ck.scalar_or_vector(reduce_init, s, w, "reduce_init"),
                                     dtype=np.float32).reshape(-1)
    elif cmd == reduce_cmd.reduce:
        if np.isnan(regs[p0:p0 + p]).any():
            raise NkiError(w, "reduce_cmd=reduce continues an accumulation that was never "
                           "started", "reduction accumulators", "start with reset_reduce")
    else:
        raise NkiError(w, f"reduce_cmd={cmd!r} is not one of reset_reduce, reduce, load_reduce",
                       "operands")
    with np.errstate(all="ignore"):
        regs[p0:p0 + p] = _REDUCERS[op_name].reduce(
            np.concatenate([regs[p0:p0 + p, None], vals.reshape(p, -1)], axis=1), axis=1)
    if reduce_res is not None:
        _read_out(w, regs, s, reduce_res, negate)
