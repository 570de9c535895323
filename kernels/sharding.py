"""DTensor sharding rules for the library's ops, so that DTensor inputs run shard-local.

Each rule lists, for one mesh dim, the placements under which the op computes its output from
each rank's local shards alone: ([output placements], [input placements]), None for an input
that is not a tensor. DTensor picks the cheapest rule for the inputs it gets and redistributes
them to it first, so a placement no rule lists (matmul with only x split on the contraction dim,
attention split along the sequence) still gives the right result, after a collective.

- matmul: x split on a row dim (any but the last; with a batched y, M or a batch dim y shares),
  y split on its columns (bias with it), or x and y both on K (partial sums; no bias, no
  activation). Backward: the other operand's gradient is then a partial sum.
- flash_attention: q, k, v split on batch (dim 0) or heads (dim 1; with grouped heads only when
  both head counts divide the mesh).
- rms_norm, layer_norm, softmax: x split on any dim they do not normalize over; weight and bias
  replicated; their gradients are partial sums.

Registered through DTensor's op-strategy hook rather than `register_sharding`, which cannot
describe ops that return `Tensor[]` (the backward ops do: they return one gradient per input).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._op_schema import OpSchema, OpStrategy, RuntimeSchemaInfo
from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

for _mod in ("attention", "matmul", "norms", "softmax"):  # the modules that define the ops
    importlib.import_module(f".{_mod}", __package__)

R, P = Replicate(), Partial()
Rule = Callable[..., list[tuple[list[Any], list[Any]]]]


def _rep(t: Any) -> Any:
    return R if t is not None else None


def _cols(bias: Any) -> Any:
    return Shard(0) if bias is not None else None


def _matmul_dims(x: Any, y: Any) -> tuple[int, list[int], bool]:
    """(out ndim, x's row dims that may be split with y replicated, whether x and y share
    their batch dims)."""
    if y.ndim == 2:
        return x.ndim, list(range(x.ndim - 1)), False
    nd = max(x.ndim, y.ndim)
    return nd, [x.ndim - 2], tuple(x.shape[:-2]) == tuple(y.shape[:-2])


def _matmul(mesh: Any, x: Any, y: Any, bias: Any, activation: str, out_dtype: Any) -> list:
    nd, rows, same_batch = _matmul_dims(x, y)
    b = _rep(bias)
    out = [([R], [R, R, b])]
    out += [([Shard(d + nd - x.ndim)], [Shard(d), R, b]) for d in rows]  # rows of x
    if same_batch:
        out += [([Shard(d)], [Shard(d), Shard(d), b]) for d in range(x.ndim - 2)]
    out.append(([Shard(nd - 1)], [R, Shard(y.ndim - 1), _cols(bias)]))  # columns of y
    if bias is None and activation == "none":  # K: each rank's product is a partial sum
        out.append(([P], [Shard(x.ndim - 1), Shard(y.ndim - 2), None]))
    return out


def _matmul_backward(mesh: Any, dout: Any, x: Any, y: Any, bias: Any, activation: str) -> list:
    """Outputs [dx, dy, (dbias)]; a gradient that sums over a split dim is a partial sum."""
    nd, rows, same_batch = _matmul_dims(x, y)
    b = _rep(bias)
    db = [P] if bias is not None else []
    out = [([R, R, *([R] if bias is not None else [])], [R, R, R, b])]
    out += [([Shard(d), P, *db], [Shard(d + nd - x.ndim), Shard(d), R, b]) for d in rows]
    if same_batch:
        out += [([Shard(d), Shard(d), *db], [Shard(d), Shard(d), Shard(d), b])
                for d in range(x.ndim - 2)]
    dcols = [Shard(0)] if bias is not None else []
    out.append(([P, Shard(y.ndim - 1), *dcols],
                [Shard(nd - 1), R, Shard(y.ndim - 1), _cols(bias)]))
    if bias is None and activation == "none":
        k_x, k_y = Shard(x.ndim - 1), Shard(y.ndim - 2)
        out.append(([k_x, k_y], [R, k_x, k_y, None]))
    return out


def _lead_dims(x: Any, *params: Any) -> range:
    """The dims a norm does not normalize over: all but the trailing `weight.shape` ones."""
    shape_src = next((p for p in params if p is not None), None)
    return range(x.ndim - (shape_src.ndim if shape_src is not None else 1))


def _rms_norm(mesh: Any, x: Any, weight: Any, eps: float) -> list:
    w = _rep(weight)
    return [([R, R], [R, w])] + [([Shard(d)] * 2, [Shard(d), w]) for d in _lead_dims(x, weight)]


def _rms_norm_backward(mesh: Any, dy: Any, x: Any, weight: Any, rstd: Any) -> list:
    w = _rep(weight)
    dw = [P] if weight is not None else []
    out = [([R, *([R] if weight is not None else [])], [R, R, w, R])]
    return out + [([Shard(d), *dw], [Shard(d), Shard(d), w, Shard(d)])
                  for d in _lead_dims(x, weight)]


def _layer_norm(mesh: Any, x: Any, weight: Any, bias: Any, eps: float) -> list:
    w, b = _rep(weight), _rep(bias)
    return [([R] * 3, [R, w, b])] + [([Shard(d)] * 3, [Shard(d), w, b])
                                     for d in _lead_dims(x, weight, bias)]


def _layer_norm_backward(mesh: Any, dy: Any, x: Any, weight: Any, bias: Any, mean: Any,
                         rstd: Any) -> list:
    w, b = _rep(weight), _rep(bias)
    n_params = (weight is not None) + (bias is not None)
    out = [([R] * (1 + n_params), [R, R, w, b, R, R])]
    return out + [([Shard(d), *[P] * n_params], [Shard(d), Shard(d), w, b, Shard(d), Shard(d)])
                  for d in _lead_dims(x, weight, bias)]


def _softmax(mesh: Any, x: Any, dim: int) -> list:
    return [([R], [R])] + [([Shard(d)], [Shard(d)]) for d in range(x.ndim) if d != dim % x.ndim]


def _softmax_backward(mesh: Any, dy: Any, y: Any, dim: int) -> list:
    return [([R], [R, R])] + [([Shard(d)], [Shard(d)] * 2) for d in range(y.ndim)
                              if d != dim % y.ndim]


def _attention_dims(mesh: Any, q: Any, k: Any) -> list[int]:
    """Batch, and heads unless grouped heads could be split unevenly (query head h reads
    key/value head h // (H // Hkv), which must land on the same rank)."""
    h, hkv, n = q.shape[1], k.shape[1], mesh.size()
    return [0, 1] if h == hkv or (h % n == 0 and hkv % n == 0) else [0]


def _flash_attention(mesh: Any, q: Any, k: Any, v: Any, causal: bool, sm_scale: float,
                     causal_offset: int) -> list:
    return [([R] * 2, [R] * 3)] + [([Shard(d)] * 2, [Shard(d)] * 3)
                                   for d in _attention_dims(mesh, q, k)]


def _flash_attention_backward(mesh: Any, dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any,
                              causal: bool, sm_scale: float, causal_offset: int) -> list:
    return [([R] * 3, [R] * 6)] + [([Shard(d)] * 3, [Shard(d)] * 6)
                                   for d in _attention_dims(mesh, q, k)]


def _strategy(op: Any, rule: Rule) -> Callable[[OpSchema], OpStrategy]:
    returns = op._schema.returns
    returns_list = len(returns) == 1 and isinstance(returns[0].type, torch.ListType)

    def strategy(op_schema: OpSchema) -> OpStrategy:
        mesh = op_schema.get_mesh_from_args()
        args = [a.strategies[0].output_spec if isinstance(a, OpStrategy) else a
                for a in op_schema.args_schema]
        rows = rule(mesh, *args)
        n_out = len(rows[0][0])
        result = expand_to_full_mesh_op_strategy(mesh, op_schema, [o + i for o, i in rows],
                                                 input_index=n_out)
        if returns_list and n_out == 1:  # a one-tensor list still needs a tuple of specs
            for spec in result.strategies:
                spec.output_specs = (spec.output_specs,)
        return result

    return strategy


RULES: dict[str, Rule] = {
    "matmul": _matmul, "matmul_backward": _matmul_backward,
    "rms_norm": _rms_norm, "rms_norm_backward": _rms_norm_backward,
    "layer_norm": _layer_norm, "layer_norm_backward": _layer_norm_backward,
    "softmax": _softmax, "softmax_backward": _softmax_backward,
    "flash_attention": _flash_attention, "flash_attention_backward": _flash_attention_backward,
}


def _is_tensor(arg: Any) -> bool:
    t = arg.type.getElementType() if isinstance(arg.type, torch.OptionalType) else arg.type
    return isinstance(t, torch.TensorType)


def register() -> None:
    propagator = DTensor._op_dispatcher.sharding_propagator
    for name, rule in RULES.items():
        op = getattr(torch.ops.kernel_dsl, name).default
        # scalar arguments (softmax's dim, matmul's activation) change the rules: part of the key
        first_scalar = next((i for i, a in enumerate(op._schema.arguments) if not _is_tensor(a)),
                            100)
        propagator.register_op_strategy(op, _strategy(op, rule), RuntimeSchemaInfo(first_scalar))


register()
