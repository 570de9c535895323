"""Arithmetic on a block size in device code (issue 13 item 5), as Helion's kernels write it:
`bk = kd.register_block_size(n)`, then `x // bk * bk`, `(n + bk - 1) // bk`, `2 * bk` as int32
scalars, e.g. a loop bound `kd.tile(0, x // bk * bk, block_size=bk)`.

The value is the block a loop over the registered size takes under the config:
`min(config's block size, n)`, the same `tile.block_size` of a loop `kd.tile(n, block_size=bk)`
reads. It is the `tile_size` op of a tile of that block size and extent that no loop walks (one
per block size, made at the first use), so every backend renders it as it renders
`tile.block_size`, and bounds built from it keep a static range (kernel_dsl/tile_bounds.py
knows `x // bk * bk <= x`).

Host code cannot do it: an allocation sized by a block count (`torch.empty([n // bk, m])`, as
Helion's layer_norm backward does) would give the kernel an output shape that depends on the
config, and one traced IR serves every config (docs/ir.md). That is a KernelSyntaxError.
"""
from __future__ import annotations

from typing import Any

from .device_ops import TileValue, _emit, binary
from .errors import KernelSyntaxError
from .ir import TileVar
from .tracing import current, user_loc


def value(bs: Any) -> TileValue:
    """The block size `bs` (a `kd.BlockSize`) as an int32 device scalar."""
    tr, loc = current(), user_loc()
    if tr is None or tr.region is None:
        raise KernelSyntaxError(
            "arithmetic on a block size in host code (e.g. sizing an output by a block count, "
            "`torch.empty([kd.cdiv(m, bm), n])`) is not supported: the output's shape would "
            "depend on the config, and one traced kernel serves every config", loc,
            "allocate per element and reduce in the kernel, or do the block arithmetic in "
            "device code (inside `kd.tile`), where it is an int32 scalar")
    sym = bs.sym_in(tr, loc)
    t = tr.size_tiles.get(sym.index)
    if t is None:
        extent = bs.extent
        if extent is None:  # kd.block_size(name): the loops that already take it bound it
            used = [u.extent for u in tr.tiles if u.block is sym]
            extent = max(used, default=0) or (max(sym.choices) if sym.choices else None)
        if not extent:
            raise KernelSyntaxError(
                f"{bs!r} is used in arithmetic before any loop takes it, so its largest value "
                "is unknown", loc, "declare it with `kd.register_block_size(n)`, give it "
                "`choices=`, or use it after a `kd.tile(..., block_size=...)` loop")
        t = tr.new_tile(extent, sym, "loop", loc, f"{bs.name or 'block'}_size")
        tr.size_tiles[sym.index] = t
    return _emit("tile_size", [], {"tile": t}, (), "i32")


def same_size(a: Any, b: Any) -> bool:
    """Two scalars that are the same block size (`x // bk * bk` reads `bk` twice)."""
    if a is b:
        return True
    oa, ob = a.op, b.op
    if oa is None or ob is None or oa.kind != ob.kind:
        return False
    if oa.kind == "tile_size":
        ta, tb = oa.attrs["tile"], ob.attrs["tile"]
        return ta is tb or (isinstance(ta, TileVar) and ta.block is tb.block and ta.extent == tb.extent)
    return oa.kind == "const" and oa.attrs["value"] == ob.attrs["value"]


def _op(kind: str, swap: bool = False) -> Any:
    def f(self: Any, o: Any) -> TileValue:
        v = value(self)
        o = value(o) if type(o) is type(self) else o
        return binary(kind, o, v) if swap else binary(kind, v, o)
    return f


def install(cls: type) -> None:
    """Gives `kd.BlockSize` the integer operators."""
    for name, kind in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("floordiv", "floordiv"),
                       ("mod", "mod")):
        setattr(cls, f"__{name}__", _op(kind))
        setattr(cls, f"__r{name}__", _op(kind, swap=True))
    cls.__neg__ = lambda self: -value(self)  # type: ignore[attr-defined]
    cls.device_value = value  # type: ignore[attr-defined]  # a tile op's operand (device_ops._common)
