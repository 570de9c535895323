"""`kd.load` and `kd.store`: Helion's `hl.load(tensor, index, extra_mask=None,
eviction_policy=None)` and `hl.store(tensor, index, value, extra_mask=None)`.

They exist so that Helion kernels that mask by hand port unchanged, above all the masked
concatenation (Helion's examples/concatenate.py), where one tile runs over `N1 + N2` output
columns and reads `x` (N1 columns) and `y` (through `tile.index - N1`) under complementary masks.
No new IR op: both are the subscript path of kernel_dsl/trace_mode.py plus a `where`.

- `index` is a list (or tuple) of subscript entries, exactly as `tensor[...]` in device code.
  Without `extra_mask`, `kd.load(x, idx)` is `x[*idx]` and `kd.store(o, idx, v)` is
  `o[*idx] = v`, with the same errors.
- `extra_mask` is a bool tile that broadcasts to the indexed block's shape. A load reads 0 in
  its masked-off lanes (Triton's `other=0`); a store writes nothing there (the tensor keeps
  what it held): the store is predicated as a store inside a device `if` (device_if.py:
  `where(mask, value, current contents)`).
- With `extra_mask`, an entry may reach outside its axis in the masked-off lanes: a tile
  longer than the axis becomes a gather (scatter for a store) through `tile.index`. Gather
  lanes outside the axis read a clamped element and scatter lanes write nothing (docs/ir.md
  "Gather and scatter"), so index tiles are left as written (affine ones, `t.index - n1`,
  stay affine for the backends that lower those as shifted blocks); a load clamps only its
  device-scalar indices into the axis (a `dyn` index must be in range). The mask then replaces
  the masked lanes of a load by 0.
- `eviction_policy` (a Triton cache hint) is accepted and ignored.
"""
from __future__ import annotations

from typing import Any

import torch

from . import dtypes, tile_bounds
from .device_ops import Tile, TileValue, _emit, binary, const, where
from .errors import DTypeError, KernelSyntaxError, ShapeError, UnsupportedOpError
from .ir import TensorParam, broadcast_shapes, shape_str
from .tracing import Tracer, current, user_loc

_INT = ("i32", "i16", "i8", "u8")


def _tracer(name: str, example: str) -> Tracer:
    tr = current()
    if tr is None or tr.region is None:
        raise KernelSyntaxError(f"`{name}` is device code", user_loc(),
                                f"call `{example}` inside a `kd.tile` loop")
    return tr


def _items(index: Any, name: str, example: str) -> list[Any]:
    if not isinstance(index, (list, tuple)):
        raise KernelSyntaxError(
            f"`{name}` takes its index as a list of subscript entries, got {type(index).__name__}",
            user_loc(), f"write `{example}` (one entry per axis, as inside `x[...]`)")
    return list(index)


def _check_mask(mask: Any, name: str) -> TileValue:
    hint = "pass a bool tile, e.g. `extra_mask=(t.index < n)[None, :]`"
    if not isinstance(mask, TileValue):
        raise KernelSyntaxError(
            f"`{name}(..., extra_mask=...)` takes a bool tile, got {type(mask).__name__}",
            user_loc(), hint + "; omit it (None) for no extra mask")
    if mask.v.dtype != "bool":
        raise DTypeError(f"`{name}(..., extra_mask=...)` is a {mask.v.dtype} tile, not bool",
                         user_loc(), hint + " (compare: `m != 0`)")
    return mask


def _check_broadcast(mask: TileValue, shape: tuple[Any, ...], p: TensorParam, name: str) -> None:
    if broadcast_shapes(mask.v.shape, shape) != shape:
        raise ShapeError(
            f"`{name}`: extra_mask of shape {shape_str(mask.v.shape)} does not broadcast to the "
            f"indexed block of `{p.name}`, of shape {shape_str(shape)}", user_loc(),
            "the mask must broadcast to the block without growing it: index the mask's axes "
            "as the block's, e.g. `(tn.index < n)[None, :]` for a `[tm, tn]` block")


def _reaches_out(t: Tile, n: int) -> bool:
    """Whether tile `t` may index past an axis of `n` (the subscript would refuse it)."""
    v = t.var
    if v.bounded:
        return not tile_bounds.from_memory(v) and tile_bounds.end_max(v) > n
    return v.extent > n


def _widen(p: TensorParam, items: list[Any], tr: Tracer, load: bool, name: str) -> list[Any]:
    """The entries of a masked access: tiles that reach past their axis become index tiles
    (`tile.index`); a load's device scalars are clamped into the axis."""
    if any(it is Ellipsis for it in items):
        i = next(i for i, it in enumerate(items) if it is Ellipsis)
        items[i:i + 1] = [slice(None)] * max(0, len(p.shape) - len(items) + 1)
    if len(items) > len(p.shape):
        return items  # the subscript's own ShapeError
    out = []
    for it, n in zip(items, p.shape):
        if isinstance(it, Tile) and it.region.encloses(tr.region) and _reaches_out(it, n):
            it = it.index  # a gather: its lanes past the axis read a clamped element
        elif load and isinstance(it, TileValue) and it.v.rank == 0 and it.v.dtype in _INT:
            op = it.v.op  # a `dyn` index must be in range: clamp it (grid indices already are)
            if not (op is not None and op.kind in ("tile_begin", "tile_id")):
                it = binary("min", binary("max", it, 0), n - 1)
        out.append(it)
    out += items[len(out):]
    if sum(1 for it in out if isinstance(it, TileValue) and it.v.rank >= 1) > 1:
        raise UnsupportedOpError(
            f"`{name}` on `{p.name}`: more than one entry reaches outside its axis or is an "
            "index tile; each becomes a gather, and a subscript takes one", user_loc(),
            "tile the other axes by the tensor's own sizes (`kd.tile(x.shape[i])`), so only one "
            "entry needs the mask to stay in bounds")
    return out


def load(tensor: torch.Tensor, index: Any, extra_mask: Any = None,
         eviction_policy: Any = None) -> TileValue:
    """`tensor[index]`; lanes where `extra_mask` is False read 0. See the module docstring.
    `eviction_policy` ("evict_first", "evict_last": a Triton cache hint) is ignored."""
    from .trace_mode import TraceMode
    name, example = "kd.load", "kd.load(x, [tm, tn])"
    tr = _tracer(name, example)
    items = _items(index, name, example)
    if eviction_policy is not None and not isinstance(eviction_policy, str):
        raise KernelSyntaxError(f"`{name}(..., eviction_policy={eviction_policy!r})` is not a "
                                "string", user_loc(), "use 'evict_first', 'evict_last' or None")
    mode = TraceMode(tr)
    if extra_mask is None:
        return mode._getitem(tensor, tuple(items))
    mask = _check_mask(extra_mask, name)
    tr.check_visible(mask.v, user_loc())
    p = mode._param(tensor, "indexing")
    v = mode._getitem(tensor, tuple(_widen(p, items, tr, True, name)))
    _check_broadcast(mask, v.v.shape, p, name)
    dt = v.v.dtype
    if dt in dtypes.FP8:  # float8 is storage only (no `where`): select its bits, 0x00 is +0.0
        bits = where(mask, _emit("bitcast", [v.v], {"dtype": "u8"}, v.v.shape, "u8"),
                     const(0, "u8"))
        return _emit("bitcast", [bits.v], {"dtype": dt}, bits.v.shape, dt)
    return where(mask, v, const(0, dt))


def store(tensor: torch.Tensor, index: Any, value: Any, extra_mask: Any = None) -> None:
    """`tensor[index] = value` (cast to the tensor's dtype, broadcast to the block); lanes
    where `extra_mask` is False keep what the tensor holds. See the module docstring."""
    from . import device_if
    from .trace_mode import TraceMode
    name, example = "kd.store", "kd.store(out, [tm, tn], value)"
    tr = _tracer(name, example)
    items = _items(index, name, example)
    mode = TraceMode(tr)
    if extra_mask is None:
        mode._setitem(tensor, tuple(items), value)
        return
    mask = _check_mask(extra_mask, name)
    tr.check_visible(mask.v, user_loc())
    p = mode._param(tensor, "assigning into")
    items = _widen(p, items, tr, False, name)
    index, shape = mode._index(p, tuple(items))
    _check_broadcast(mask, shape, p, name)
    # the mask predicates the store as a device `if` does (device_if.guard_store): the lanes
    # it leaves out store what the tensor holds, `where(mask, value, load(same index))`
    preds = tr.__dict__.setdefault("if_preds", [])
    outer = device_if.predicate()
    preds.append(mask if outer is None else outer & mask)
    try:
        mode._setitem(tensor, tuple(items), value)
    finally:
        preds.pop()
