"""Where each tile's dims go on chip: the layout rules of the NKI lowering.

An on-chip NKI tile is 2-D here: (partitions <= 128, free). A tile-IR value maps onto it by its
*core*: its last two dims, after leading dims of size 1 are dropped (attention's [1, 1, bq, d]
tiles are (bq, d)); a rank-1 value [n] is [1, n] and a scalar [1, 1]. Leading dims larger than 1
are not supported (pin their tiles' block size to 1). A value is laid out in one of two
orientations:

- "N": the core's first dim on partitions, the second on the free axis: (A, B), what a load from
  HBM gives (rows on partitions, contiguous elements along the free axis);
- "T": transposed, (B, A).

So a row vector [n] is (1, n) in N and (n, 1) in T; a row statistic `x.amax(-1)` of an N tile is
(rows, 1), i.e. T. Orientation is chosen per value (`infer`), forward from loads, dots (their
results are N) and reductions (the reduced dim goes on the free axis), then backward for values
whose producers do not decide (vector loads). Where an op needs the other orientation, the writer
transposes once (TensorE `nc_transpose`) right after the value is defined.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import Dim, KernelIR, Op, Region, TileVar, Value

from .affine import Virtual
from .gather import block_axis, gather_of, index_orient

ELEMENTWISE = ("add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "xor", "shl", "shr",
               "floordiv", "mod", "lt", "le", "gt", "ge", "eq", "ne", "where")
SAME_LAYOUT = ("neg", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "not",
               "relu", "sin", "cos", "erf", "floor", "ceil", "round", "log1p", "expm1", "cast",
               "pad_fill", "bitcast")


@dataclass(frozen=True)
class Core:
    """The (A, B) core of a value; `axes` are the IR axes of A and B (None: padding)."""

    sizes: tuple[int, int]
    axes: tuple[int | None, int | None]
    dims: tuple[Dim | None, Dim | None]

    def phys(self, orient: str) -> tuple[int, int]:
        return self.sizes if orient == "N" else (self.sizes[1], self.sizes[0])

    def part_pos(self, orient: str) -> int:
        """Which core position (0: A, 1: B) lies on partitions."""
        return 0 if orient == "N" else 1

    def part_dim(self, orient: str) -> Dim | None:
        return self.dims[self.part_pos(orient)]

    def free_dim(self, orient: str) -> Dim | None:
        return self.dims[1 - self.part_pos(orient)]

    def pos_of(self, axis: int) -> int | None:
        """Core position of IR axis `axis`, or None if it was dropped (a leading unit dim)."""
        return self.axes.index(axis) if axis in self.axes else None

    @property
    def vector_pos(self) -> int | None:
        """For a core with exactly one dim > 1: its position."""
        big = [i for i in (0, 1) if self.sizes[i] > 1]
        return big[0] if len(big) == 1 else None


def orient_with(pos: int, on_partitions: bool) -> str:
    """The orientation that puts core position `pos` on partitions (or on the free axis)."""
    return "N" if (pos == 0) == on_partitions else "T"


def make_core(v: Value, eb: Callable[[TileVar], int]) -> Core:
    sizes = [eb(d) if isinstance(d, TileVar) else int(d) for d in v.shape]
    r = len(sizes)
    for i in range(r - 2):
        if sizes[i] != 1:
            d = v.shape[i]
            what = f"tile `{d!r}`" if isinstance(d, TileVar) else f"a dim of {d}"
            raise BackendError(
                f"the NKI backend lays a tile's last two dims onto (partitions, free); dim {i} of "
                f"a {r}-D value ({what}, size {sizes[i]}) must be 1", v.op.loc if v.op else None,
                "pin the block size of leading tiles to 1 (kd.tile(..., block_size=[1, ...])) or "
                "index that dim with an int")
    if r >= 2:
        return Core((sizes[-2], sizes[-1]), (r - 2, r - 1), (v.shape[-2], v.shape[-1]))
    if r == 1:
        return Core((1, sizes[0]), (None, 0), (None, v.shape[0]))
    return Core((1, 1), (None, None), (None, None))


def carry(src: Core, so: str, dst: Core, axis_map: dict[int, int]) -> str | None:
    """The orientation of `dst` that keeps `src`'s physical tile (for expand_dims, transpose,
    reductions): same physical shape, and the same IR dim on partitions when that decides."""
    phys = src.phys(so)
    fits = [o for o in ("N", "T") if dst.phys(o) == phys]
    if len(fits) <= 1:
        return fits[0] if fits else None
    sp = src.axes[src.part_pos(so)]
    mapped = axis_map.get(sp) if sp is not None else None
    if mapped is not None and mapped in dst.axes:
        return "N" if dst.axes[0] == mapped else "T"
    return "N"


def holds(src: Core, so: str, dst: Core, ro: str, axis_map: dict[int, int]) -> bool:
    """Whether `src`'s physical tile in `so` is already `dst`'s in `ro`: the same physical shape,
    and each physical axis longer than 1 holds the same IR dim. `carry` picks one orientation;
    this accepts every one that works, e.g. both for a (1, 1) tile (a size-1 `x[tb][:, None]`)."""
    if src.phys(so) != dst.phys(ro):
        return False
    for p in (0, 1):
        if src.phys(so)[p] > 1:
            sa = src.axes[p if so == "N" else 1 - p]
            da = dst.axes[p if ro == "N" else 1 - p]
            if sa is None or axis_map.get(sa) != da:
                return False
    return True


def reduced(src: Core, so: str, dst: Core, amap: dict[int, int]) -> str:
    """The orientation of a reduction's result: the operand's partition dim stays on partitions
    and the reduced free axis becomes 1: (P, F) -> (P, 1)."""
    p = src.phys(so)[0]
    sp = src.axes[src.part_pos(so)]
    mapped = amap.get(sp) if sp is not None else None
    if mapped is not None and mapped in dst.axes and dst.sizes[dst.axes.index(mapped)] == p:
        return "N" if dst.axes[0] == mapped else "T"
    return "N" if dst.sizes == (p, 1) else "T"


def axis_map(op: Op) -> dict[int, int]:
    """IR axis of the operand -> IR axis of the result, for the layout-keeping ops."""
    x, r = op.operands[0], op.result
    if op.kind == "expand_dims":
        k = op.attrs["axis"]
        return {i: (i if i < k else i + 1) for i in range(x.rank)}
    if op.kind == "transpose":
        m = {i: i for i in range(x.rank)}
        m[x.rank - 1], m[x.rank - 2] = x.rank - 2, x.rank - 1
        return m
    if op.kind == "permute":
        return {p: i for i, p in enumerate(op.attrs["perm"])}
    if op.kind == "reshape":  # only unit dims come or go (lower_shapes.py refuses the rest)
        xs = [i for i, d in enumerate(x.shape) if d != 1]
        rs = [i for i, d in enumerate(r.shape) if d != 1]
        same = len(xs) == len(rs) and all(x.shape[i] is r.shape[j] or x.shape[i] == r.shape[j]
                                          for i, j in zip(xs, rs))
        return dict(zip(xs, rs)) if same else {}
    if op.kind == "reduce":
        k = op.attrs["axis"]
        if op.attrs["keepdim"]:
            return {i: i for i in range(x.rank) if i != k}
        return {i: (i if i < k else i - 1) for i in range(x.rank) if i != k}
    shift = r.rank - x.rank  # broadcast: right-aligned
    return {i: i + shift for i in range(x.rank)}


class _Infer:
    def __init__(self, ir: KernelIR, virt: dict[int, Virtual], eb: Callable[[TileVar], int]):
        self.ir = ir
        self.virt = virt
        self.eb = eb
        self.o: dict[int, str | None] = {}
        self.want: dict[int, str] = {}
        self.cores: dict[int, Core] = {}

    def core(self, v: Value) -> Core:
        c = self.cores.get(v.id)
        if c is None:
            c = self.cores[v.id] = make_core(v, self.eb)
        return c

    def get(self, v: Value) -> str | None:
        return None if v.id in self.virt else self.o.get(v.id)

    # -- forward -----------------------------------------------------------------------------
    def forward(self, region: Region) -> bool:
        changed = False
        for op in region.ops:
            if op.kind == "loop":
                changed |= self.loop(op)
                continue
            if not op.results or op.result.id in self.virt:
                continue
            o = self.rule(op)
            if o is None:
                o = self.want.get(op.result.id)
            for res in (op.results if op.kind == "scan" else [op.result]):  # a tuple scan: one layout
                if self.o.get(res.id) != o:
                    self.o[res.id] = o
                    changed = True
        return changed

    def loop(self, op: Op) -> bool:
        body = op.body
        assert body is not None
        changed = False
        for init, arg in zip(op.operands, body.args):
            o = self.get(init) or self.o.get(arg.id) or self.want.get(arg.id)
            if self.o.get(arg.id) != o:
                self.o[arg.id], changed = o, True
        changed |= self.forward(body)
        for arg, y, res in zip(body.args, body.yields, op.results):
            if self.o.get(arg.id) is None and self.get(y) is not None:
                self.o[arg.id], changed = self.get(y), True
                changed |= self.forward(body)
            if self.o.get(res.id) != self.o.get(arg.id):
                self.o[res.id], changed = self.o.get(arg.id), True
        return changed

    def rule(self, op: Op) -> str | None:
        k = op.kind
        r = self.core(op.result)
        if k == "load":
            g = gather_of(op)
            if g is not None:  # an indirect DMA moves a row per partition (gather.py)
                pos = r.pos_of(g.part_axis)
                return orient_with(pos, on_partitions=True) if pos is not None else None
            return "N" if min(r.sizes) > 1 else None
        if k == "dot":
            return "N"
        x = op.operands[0] if op.operands else None
        if k == "reduce":
            assert x is not None
            xc = self.core(x)
            pos = xc.pos_of(op.attrs["axis"])
            if pos is None:
                xo = self.get(x)
                return carry(xc, xo, r, axis_map(op)) if xo else None
            return reduced(xc, orient_with(pos, on_partitions=False), r, axis_map(op))
        if k == "scan":  # the scanned dim on the free axis, as a reduced one
            assert x is not None
            pos = self.core(x).pos_of(op.attrs["axis"])
            return self.get(x) if pos is None else orient_with(pos, on_partitions=False)
        if k in SAME_LAYOUT:
            assert x is not None
            return self.get(x)
        if k in ("slice", "concat"):  # the sliced/joined axis on the free axis
            pos = r.pos_of(op.attrs["axis"])
            return orient_with(pos, on_partitions=False) if pos is not None else None
        if k in ("expand_dims", "transpose", "broadcast", "reshape", "permute"):
            assert x is not None
            xo = self.get(x)
            got = carry(self.core(x), xo, r, axis_map(op)) if xo else None
            if got is not None or k != "broadcast":
                return got
        if k in ELEMENTWISE or k == "broadcast":
            return self.elementwise(op, r)
        return None

    def elementwise(self, op: Op, r: Core) -> str | None:
        tiles = [x for x in op.operands if x.id not in self.virt and self.get(x) is not None]
        for x in tiles:
            if self.core(x).sizes == r.sizes:
                return self.get(x)
        for x in tiles:
            pos = self.core(x).vector_pos
            if pos is not None and r.sizes[pos] > 1:
                return orient_with(pos, on_partitions=True)
        return None

    # -- backward ----------------------------------------------------------------------------
    def backward(self, region: Region) -> None:
        for op in reversed(region.ops):
            if op.kind == "loop":
                body = op.body
                assert body is not None
                for init, arg, y in zip(op.operands, body.args, body.yields):
                    ao = self.o.get(arg.id)
                    if ao:
                        self.suggest(init, ao)
                        self.suggest(y, ao)
                self.backward(body)
                continue
            for x, o in self.wants(op):
                self.suggest(x, o)

    def suggest(self, v: Value, o: str) -> None:
        if v.id not in self.virt and self.o.get(v.id) is None and v.id not in self.want:
            self.want[v.id] = o

    def wants(self, op: Op) -> list[tuple[Value, str]]:
        k = op.kind
        g = gather_of(op, atomic=True)
        if g is not None:  # the index as an SBUF column (n, 1): one index per partition
            out = [(g.index, index_orient(self.core(g.index), g))]
            if k == "store":
                x = op.operands[0]
                pos = self.core(x).pos_of(block_axis(g, op, x))
                out += [(x, orient_with(pos, on_partitions=True))] if pos is not None else []
            return out
        if k == "store":
            return [(op.operands[0], "N")]
        if k == "dot":
            out = [(op.operands[0], "T"), (op.operands[1], "N")]
            return out + ([(op.operands[2], "N")] if len(op.operands) == 3 else [])
        if not op.results:
            return []
        ro = self.o.get(op.result.id) or self.want.get(op.result.id)
        x = op.operands[0] if op.operands else None
        if k in ("reduce", "scan"):
            assert x is not None
            pos = self.core(x).pos_of(op.attrs["axis"])
            if pos is None:
                return []
            return [(v, orient_with(pos, False)) for v in (op.operands if k == "scan" else [x])]
        if ro is None:
            return []
        if k in SAME_LAYOUT:
            return [(op.operands[0], ro)]
        if k in ("slice", "concat"):
            pos = self.core(x).pos_of(op.attrs["axis"])
            return [(v, orient_with(pos, False)) for v in op.operands] if pos is not None else []
        if k in ("expand_dims", "transpose", "broadcast", "reshape", "permute"):
            assert x is not None
            xc, r = self.core(x), self.core(op.result)
            return [(x, o) for o in ("N", "T") if carry(xc, o, r, axis_map(op)) == ro][:1]
        if k in ELEMENTWISE:
            r = self.core(op.result)
            out = []
            for x in op.operands:
                xc = self.core(x)
                if xc.sizes == r.sizes:
                    out.append((x, ro))
                elif xc.vector_pos is not None:
                    on_part = xc.vector_pos == r.part_pos(ro)
                    out.append((x, orient_with(xc.vector_pos, on_part)))
            return out
        return []

    def run(self) -> dict[int, str]:
        for _ in range(6):
            changed = self.forward(self.ir.body)
            before = len(self.want)
            self.backward(self.ir.body)
            if not changed and len(self.want) == before:
                break
        out: dict[int, str] = {}
        for region_op in self.ir.body.walk():
            vals = list(region_op.results)
            if region_op.body is not None:
                vals += region_op.body.args
            for v in vals:
                if v.id not in self.virt:
                    out[v.id] = self.o.get(v.id) or self.want.get(v.id) or "N"
        return out


def infer(ir: KernelIR, virt: dict[int, Virtual], eb: Callable[[TileVar], int]) -> dict[int, str]:
    """The orientation ("N" or "T") of every value that is a real tile."""
    return _Infer(ir, virt, eb).run()
