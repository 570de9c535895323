"""Renders the tile IR as readable, standalone `@triton.jit` source plus a torch launcher.

One program per grid point: the grid tiles are flattened into `tl.program_id(0)` (CUDA limits
the second and third grid axes to 65535 programs). Each tile has `offs_<t>` (its lanes' global
indices) and, where some lanes are out of range, `mask_<t>`. Loads are masked with `other=0`,
stores are masked, and sequential `kd.tile` loops are Python `for` loops whose carried values are
plain variables reassigned at the end of the body (Triton turns them into `scf.for` iter args).
Sizes and strides are literals: a kernel is rendered per specialization, so Triton sees
constants and can vectorize without hints. layout.py decides every dim's lanes.
"""
from __future__ import annotations

from typing import Any

import torch

from kernel_dsl import tile_bounds
from kernel_dsl.config import Config
from kernel_dsl.dtypes import IR_TO_TORCH
from kernel_dsl.errors import BackendError, UnsupportedOpError
from kernel_dsl.ir import Dim, Index, KernelIR, Op, TensorParam, TileVar, Value
from kernel_dsl.tile_bounds import is_ragged

from .. import Generated
from . import shapes
from .exprs import (
    FP8,
    HELPERS,
    SCAN_COMBINE,
    SIG,
    TL,
    bf16_full,
    cast,
    elementwise,
    fill_lit,
    identity,
    lit,
    narrow,
    up,
)
from .grid import TARGETS, grid_header, launcher, make_layout_for, prod
from .layout import MIN_DOT, Layout
from .space import check_knobs

INT32_MAX = 2**31 - 1


def expand(expr: str, pos: int, rank: int, width: int = 1) -> str:
    """`expr` (rank `width`) placed at axes `pos .. pos + width - 1` of a rank-`rank` value:
    `x[None, :]`."""
    if rank <= width:
        return expr
    return f"{expr}[{', '.join(':' if pos <= i < pos + width else 'None' for i in range(rank))}]"


def shape_list(xs: list[int]) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


class _Emitter:
    def __init__(self, indent: int = 1) -> None:
        self.lines: list[str] = []
        self.indent = indent
        self._last_loc: tuple[str, int] | None = None

    def line(self, text: str, op: Op | None = None) -> None:
        comment = ""
        if op is not None and op.loc is not None:
            key = (op.loc.file, op.loc.line)
            if key != self._last_loc:
                comment = f"  # src: {op.loc.short()}"
                self._last_loc = key
        self.lines.append("    " * self.indent + text + comment)


class _KernelWriter:
    """Writes the kernel body; knows which Python name holds each IR value."""

    def __init__(self, ir: KernelIR, layout: Layout, target: str):
        self.ir = ir
        self.target = target
        self.cpu = target == "cpu"  # Triton's interpreter: bf16 needs care (exprs.py)
        self.lay = layout
        self.em = _Emitter()
        self.names: dict[int, str] = {}
        self.helpers: set[str] = set()
        self.full_dims: set[int] = set()  # ints with `offs_<n>`/`mask_<n>` at the kernel top
        self.combines: list[str] = []  # `scan` combine regions as @triton.jit functions

    # -- names of offsets and masks ------------------------------------------------------------
    def n(self, v: Value) -> str:
        return self.names[v.id]

    def offs(self, d: Dim) -> str:
        if isinstance(d, TileVar):
            return f"offs_{d!r}"
        self.full_dims.add(d)
        return f"offs_{d}"

    def mask(self, d: Dim) -> str | None:
        """The name of `d`'s in-range mask, or None when every lane is in range."""
        if not self.lay.masked(d):
            return None
        if isinstance(d, TileVar):
            return f"mask_{d!r}"
        self.full_dims.add(d)
        return f"mask_{d}"

    def tile_header(self, t: TileVar, index: str) -> None:
        """`offs_t` and `mask_t` for tile `t`, whose block index is the variable `index`."""
        eb, lanes = self.lay.eb(t), self.lay.lanes(t)
        start = "" if self.lay.nb(t) == 1 else f"{index} + " if eb == 1 else f"{index} * {eb} + "
        if t.bounded and t.lo != 0:  # kd.tile(begin, end): blocks start at begin
            start = f"{self.bound(t.lo)} + {start}"
        self.em.line(f"offs_{t!r} = {start}tl.arange(0, {lanes})")
        conds = []
        if lanes > eb and (self.lay.nb(t) > 1 or t.dynamic):  # lanes past the block: the next one's
            conds.append(f"(tl.arange(0, {lanes}) < {eb})")
        if is_ragged(t, self.lay.blocks) or (lanes > eb and self.lay.nb(t) == 1):
            conds.append(f"(offs_{t!r} < {self.end(t)})")
        if conds:
            self.em.line(f"mask_{t!r} = {' & '.join(conds)}")

    def begin(self, t: TileVar) -> str:
        lo = f"{self.bound(t.lo)} + " if t.bounded and t.lo != 0 else ""
        return f"{lo}i_{t!r} * {self.lay.eb(t)}"

    def bound(self, b: int | Value) -> str:
        """A `kd.tile(begin, end)` bound: a literal, or the name of its scalar value."""
        return str(b) if isinstance(b, int) else self.n(b)

    def end(self, t: TileVar) -> str:
        return str(t.extent) if t.hi is None else self.bound(t.hi)

    def bind(self, v: Value, expr: str, op: Op | None) -> None:
        name = f"v{v.id}"
        self.names[v.id] = name
        self.em.line(f"{name} = {expr}", op)

    # -- memory ----------------------------------------------------------------------------------
    def address(self, p: TensorParam, index: tuple[Index, ...],
                store: bool = False) -> tuple[str, str | None]:
        """(pointer expression, mask expression or None) of `p[index]`. A gather index is
        clamped into the axis for loads (no out-of-bounds read; an out-of-range index is the
        user's bug, its lanes unspecified) and masked for stores (such lanes write nothing)."""
        rank = sum(ix.scalar.rank if ix.kind == "gather" else 1  # type: ignore[union-attr]
                   for ix in index if ix.kind not in ("int", "dyn"))
        wide = prod(p.shape) > INT32_MAX  # offsets past 2**31 need int64 arithmetic
        terms: list[str] = []
        masks: list[str] = []
        const = 0
        pos = 0
        for axis, ix in enumerate(index):
            stride = prod(p.shape[axis + 1:])
            if ix.kind == "int":
                const += ix.value * stride
                continue
            if ix.kind == "dyn":  # one element of the axis, at a device scalar
                assert ix.scalar is not None
                o = f"{self.n(ix.scalar)}.to(tl.int64)" if wide else self.n(ix.scalar)
                terms.append(o if stride == 1 else f"{o} * {stride}")
                continue
            if ix.kind == "gather":  # lane i at element idx[i]; lanes past idx's tiles masked
                assert ix.scalar is not None
                idx, n, w = self.n(ix.scalar), p.shape[axis], ix.scalar.rank
                if ix.scalar.dtype != "i32":  # i8 * stride would wrap
                    idx = f"{idx}.to(tl.int32)"
                o = expand(f"tl.minimum(tl.maximum({idx}, 0), {n - 1})" if not store else idx,
                           pos, rank, w)
                if store:
                    masks.append(expand(f"(({idx} >= 0) & ({idx} < {n}))", pos, rank, w))
                if wide:
                    o = f"{o}.to(tl.int64)"
                terms.append(o if stride == 1 else f"{o} * {stride}")
                for j, d in enumerate(ix.scalar.shape):  # an N-D index: one mask per dim
                    m = self.mask(d)
                    if m is not None:
                        masks.append(expand(m, pos + j, rank))
                pos += w
                continue
            elif ix.kind == "slice":  # a static a:b: lanes of b - a elements, from a
                d = ix.stop - ix.value
                const += ix.value * stride
                o = expand(self.offs(d), pos, rank)
            else:
                d = ix.tile if ix.kind == "tile" else p.shape[axis]  # type: ignore[assignment]
                o = expand(self.offs(d), pos, rank)
            if wide:
                o = f"{o}.to(tl.int64)"
            terms.append(o if stride == 1 else f"{o} * {stride}")
            m = self.mask(d)
            if m is not None:
                masks.append(expand(m, pos, rank))
            pos += 1
        if const:
            terms.append(str(const))
        ptr = f"{p.name}_ptr" + "".join(f" + {t}" for t in terms)
        return ptr, (" & ".join(masks) if masks else None)

    def load(self, op: Op) -> str:
        ptr, mask = self.address(op.attrs["tensor"], op.attrs["index"])
        if mask and op.result.dtype in FP8:  # Triton's interpreter cannot cast `other` to fp8;
            return f"tl.load({ptr}, mask={mask})"  # masked lanes are padded where it matters
        return f"tl.load({ptr}, mask={mask}, other=0)" if mask else f"tl.load({ptr})"

    def store(self, op: Op) -> None:
        ptr, mask = self.address(op.attrs["tensor"], op.attrs["index"], store=True)
        m = f", mask={mask}" if mask else ""
        at = op.attrs.get("atomic")
        if at and self.cpu and op.operands[0].dtype == "bf16" and not any(
                ix.kind == "gather" for ix in op.attrs["index"]):
            # Triton's interpreter has no bf16 atomics; it runs programs one after another, so
            # a read-modify-write of a block (no duplicate lanes) is exact there
            old = f"tl.load({ptr}{m}).to(tl.float32)"
            v = f"{self.n(op.operands[0])}.to(tl.float32)"
            new = f"{old} + {v}" if at == "add" else f"tl.{at}imum({old}, {v})"
            self.em.line(f"tl.store({ptr}, {cast(new, 'f32', 'bf16', True, self.helpers)}{m})", op)
            return
        if at and self.cpu and op.operands[0].dtype == "bf16":
            return self._bf16_lane_loop(op, ptr, mask)
        if at:  # kd.atomic_*: every lane's update lands, duplicates included
            self.em.line(f"tl.atomic_{at}({ptr}, {self.n(op.operands[0])}{m}, "
                         f"sem={op.attrs['sem']!r})", op)
            return
        self.em.line(f"tl.store({ptr}, {self.n(op.operands[0])}{m})", op)
        if any(op is o for o in self.ir.body.ops) and self._stores_read_back_op(op):
            self.em.line("tl.debug_barrier()  # later loops read back what this stored")

    def _bf16_lane_loop(self, op: Op, ptr: str, mask: str | None) -> None:
        """A bf16 atomic through an index tile in Triton's interpreter (no bf16 atomics): one
        read-modify-write per lane of the index, in lane order, so duplicates accumulate."""
        index = op.attrs["index"]
        rank = sum(ix.scalar.rank if ix.kind == "gather" else 1  # type: ignore[union-attr]
                   for ix in index if ix.kind not in ("int", "dyn"))
        pos = 0
        for ix in index:
            if ix.kind == "gather":
                break
            pos += ix.kind not in ("int", "dyn")
        g = next(ix.scalar for ix in index if ix.kind == "gather")
        assert g is not None
        if g.rank != 1:
            raise UnsupportedOpError(
                f"Triton's interpreter has no bf16 atomics: a bf16 kd.atomic_{op.attrs['atomic']} "
                f"through a rank-{g.rank} index tile does not run on CPU", op.loc,
                "use a float32 target on CPU, or run on a GPU")
        lanes = self.lay.lanes(g.shape[0])
        at = op.attrs["atomic"]
        em = self.em
        em.line(f"for lane in tl.static_range({lanes}):  # interpreter: no bf16 atomics; a "
                "read-modify-write per index lane, in order", op)
        em.indent += 1
        one = expand(f"(tl.arange(0, {lanes}) == lane)", pos, rank)
        m = f"({mask}) & {one}" if mask else one
        old = f"tl.load({ptr}, mask={m}, other=0).to(tl.float32)"
        v = f"{self.n(op.operands[0])}.to(tl.float32)"
        new = f"{old} + {v}" if at == "add" else f"tl.{at}imum({old}, {v})"
        em.line(f"tl.store({ptr}, {cast(new, 'f32', 'bf16', True, self.helpers)}, mask={m})")
        em.indent -= 1

    # -- ops -----------------------------------------------------------------------------------
    def op(self, op: Op) -> None:
        k, a = op.kind, op.attrs
        if k == "loop":
            return self.loop(op)
        if k == "store":
            return self.store(op)
        ins = [self.n(v) for v in op.operands]
        r = op.result
        lay = self.lay
        if k == "load":
            expr = self.load(op)
        elif k == "const":
            expr = full("[]", a["value"], r.dtype)
        elif k == "full":
            expr = full(shape_list(lay.shape(a["shape"])), a["value"], r.dtype)
        elif k == "iota":
            expr = self.offs(a["tile"])
        elif k == "arange":  # a full dim's lanes (past `size`: masked like any full dim's)
            expr = self.offs(a["size"])
        elif k == "tile_begin":
            expr = f"tl.cast({self.begin(a['tile'])}, tl.int32)"
        elif k == "tile_id":
            expr = f"tl.cast(i_{a['tile']!r}, tl.int32)"
        elif k == "tile_size":
            expr = f"tl.full([], {lay.eb(a['tile'])}, tl.int32)"
        elif k == "tile_count":
            t = a["tile"]
            expr = f"tl.minimum(tl.cast({lay.eb(t)}, tl.int32), {self.end(t)} - {self.begin(t)})"
        elif k == "where":
            expr = f"tl.where({ins[0]}, {ins[1]}, {ins[2]})"
        elif k == "cast":
            expr = cast(ins[0], op.operands[0].dtype, a["dtype"], self.cpu, self.helpers)
        elif k == "bitcast":  # same width: the bits read as another dtype
            expr = f"{ins[0]}.to({TL[a['dtype']]}, bitcast=True)"
        elif k == "reduce":
            expr = self.reduce(op, ins[0])
        elif k == "scan" and a["op"] == "combine":
            return self.combine_scan(op)
        elif k == "scan":
            expr = self.scan(op, ins[0])
        elif k == "dot":
            return self.dot(op, ins)
        elif k == "expand_dims":
            expr = f"tl.expand_dims({ins[0]}, {a['axis']})"
        elif k == "transpose":
            perm = list(range(r.rank))
            perm[-2:] = perm[-1], perm[-2]
            expr = f"tl.trans({ins[0]})" if r.rank == 2 else f"tl.permute({ins[0]}, {tuple(perm)})"
        elif k == "broadcast":
            expr = f"tl.broadcast_to({ins[0]}, {shape_list(lay.shape(a['shape']))})"
        elif k in ("reshape", "concat", "slice"):
            expr = shapes.render(self, op, ins)
        elif k == "permute":
            expr = f"tl.permute({ins[0]}, {tuple(a['perm'])})"
        elif k == "pad_fill":
            t = a["tile"]
            m = self.mask(t)
            if m is None:  # every lane in range under this config: nothing to fill
                self.names[r.id] = ins[0]
                return
            expr = f"tl.where({expand(m, a['axis'], r.rank)}, {ins[0]}, {fill_lit(a['fill'], r.dtype)})"
        else:
            src = op.operands[0].dtype if op.operands else r.dtype
            e = elementwise(k, ins, src, r.dtype, self.cpu, self.helpers)
            if e is None:  # the verifier knows every op; reaching here is a renderer gap
                raise BackendError(f"the triton renderer has no rule for IR op `{k}`", op.loc,
                                   "this is a kernel_dsl bug; please report it with the kernel")
            expr = e
        self.bind(r, expr, op)

    def fill_padding(self, x: str, v: Value, axis: int, fill: str) -> str:
        """Padded lanes of an int dim (a `:` axis of 1000 held in 1024 lanes) become `fill`."""
        d = v.shape[axis]
        m = None if isinstance(d, TileVar) else self.mask(d)
        return x if m is None else f"tl.where({expand(m, axis, v.rank)}, {x}, {fill})"

    def reduce(self, op: Op, x: str) -> str:
        a, src, r = op.attrs, op.operands[0], op.result
        axis, keep = a["axis"], a["keepdim"]
        x = self.fill_padding(x, src, axis, identity(a["op"], src.dtype))
        kd = ", keep_dims=True" if keep else ""
        if a["op"] == "sum":
            expr = f"tl.sum({x}, axis={axis}{kd})"
        elif a["op"] == "prod":
            self.helpers.add("_mul")
            expr = f"tl.reduce({x}, {axis}, _mul{kd})"
        elif src.dtype in ("f32", "bf16", "f16"):
            fn = f"_a{a['op']}"
            self.helpers.add(fn)
            expr = f"{fn}({up(x, src.dtype)}, {axis}, {keep})"
        else:
            expr = f"tl.{a['op']}({x}, axis={axis}{kd})"
        if src.dtype not in ("f32", "i32") or r.dtype != src.dtype:  # tl.sum/max widen small types
            expr = narrow(expr, r.dtype, self.cpu, self.helpers) if r.dtype in ("bf16", "f16") \
                else f"{expr}.to({TL[r.dtype]})"
        return expr

    def combine_scan(self, op: Op) -> None:
        """A scan whose combine is a region: a @triton.jit function of its `[]` args, rendered by
        the same rules, and tl.associative_scan of the tuple. With a validity flag (the last
        operand, op.attrs["flag"]), lanes past the axis' end this config pads get flag 0."""
        a, reg = op.attrs, op.attrs["combine"]
        fname = f"_combine_{op.result.id}"
        em, names = self.em, self.names
        self.em, self.names = _Emitter(), {}
        try:
            for i, v in enumerate(reg.args):
                self.names[v.id] = f"a{i}"
            for o in reg.ops:
                self.op(o)
            ys = ", ".join(self.n(y) for y in reg.yields)
            body = self.em.lines
        finally:
            self.em, self.names = em, names
        args = ", ".join(f"a{i}" for i in range(len(reg.args)))
        self.combines.append("\n".join(["@triton.jit", f"def {fname}({args}):", *body,
                                        f"    return {ys},"]))
        xs = [self.n(v) for v in op.operands]
        if a["flag"]:
            m = self.mask(op.operands[0].shape[a["axis"]])
            if m is not None:
                xs[-1] = f"tl.where({expand(m, a['axis'], op.result.rank)}, {xs[-1]}, 0)"
        for r in op.results:
            self.names[r.id] = f"v{r.id}"
        self.em.line(f"{', '.join(self.n(r) for r in op.results)}, = tl.associative_scan(("
                     f"{', '.join(xs)},), {a['axis']}, {fname}, reverse={a['reverse']})", op)

    def scan(self, op: Op, x: str) -> str:
        """tl.associative_scan; a reverse scan reads lanes past the axis' end first (padding of
        an int dim, or the next block's lanes), so those hold the identity."""
        a, src = op.attrs, op.operands[0]
        fn = SCAN_COMBINE[a["op"]]
        self.helpers.add(fn)
        if a["reverse"]:
            m = self.mask(src.shape[a["axis"]])
            if m is not None:
                x = f"tl.where({expand(m, a['axis'], src.rank)}, {x}, {identity(a['op'], src.dtype)})"
        return f"tl.associative_scan({x}, {a['axis']}, {fn}, reverse={a['reverse']})"

    def dot(self, op: Op, ins: list[str]) -> None:
        """`a @ b` over the last two dims, f32 accumulation; batch dims of 1 reshaped away."""
        a, b = op.operands[:2]
        r = op.result
        lay, em = self.lay, self.em
        xa = self.fill_padding(ins[0], a, a.rank - 1, fill_lit(0, a.dtype))  # padded K lanes must
        xb = self.fill_padding(ins[1], b, b.rank - 2, fill_lit(0, b.dtype))  # be 0 on both sides
        la, lb = lay.shape(a.shape), lay.shape(b.shape)
        m, k, n = la[-2], la[-1], lb[-1]
        batch = prod(la[:-2])
        lead = [batch] if batch > 1 else []
        if a.rank > 2 or xa != ins[0]:
            em.line(f"v{r.id}_a = " + (f"tl.reshape({xa}, {shape_list(lead + [m, k])})"
                                        if a.rank > 2 else xa), op)
            xa = f"v{r.id}_a"
        if b.rank > 2 or xb != ins[1]:
            em.line(f"v{r.id}_b = " + (f"tl.reshape({xb}, {shape_list(lead + [k, n])})"
                                        if b.rank > 2 else xb), op)
            xb = f"v{r.id}_b"
        if a.dtype != b.dtype or a.dtype not in ("f32", "bf16", "f16", "f8e4m3fn", "f8e5m2") or (
                a.dtype in ("bf16", "f8e4m3fn", "f8e5m2") and self.target == "cpu"):
            # bf16 widened for the interpreter (NumPy has no bf16): exact, and the same f32
            # accumulation of exact products as the tensor cores' bf16 dot
            xa = cast(xa, a.dtype, "f32", self.cpu, self.helpers)  # float8 specials need care
            xb = cast(xb, b.dtype, "f32", self.cpu, self.helpers)
            in_dtype = "f32"
        else:
            in_dtype = a.dtype
        acc = None
        if len(op.operands) == 3:
            acc = ins[2] if op.operands[2].dtype == "f32" else f"{ins[2]}.to(tl.float32)"
            if r.rank > 2:
                acc = f"tl.reshape({acc}, {shape_list(lead + [m, n])})"
        if min(m, k, n) < MIN_DOT:  # a dim of 1 (`x[:, None]`): tl.dot needs 16; multiply-sum
            c = len(lead)
            pa = ", ".join([":"] * (c + 2) + ["None"])
            pb = ", ".join([":"] * c + ["None"] + [":", ":"])
            expr = (f"tl.sum({xa}.to(tl.float32)[{pa}] * {xb}.to(tl.float32)[{pb}], "
                    f"axis={c + 1})")
            if acc is not None:
                expr = f"{acc} + {expr}"
        else:
            prec = ', input_precision="ieee"' if in_dtype == "f32" else ""  # no TF32: match torch
            if acc is not None:
                expr = f"tl.dot({xa}, {xb}, {acc}{prec})"
            else:
                expr = f"tl.dot({xa}, {xb}{prec}, out_dtype=tl.float32)"
        if r.rank > 2 and not lead:
            # unit batch dims back as new axes, not a reshape: Triton 3.7/3.8's layout pass
            # asserts (LinearLayout::reshapeOuts) on a reshaped sm_90 wgmma result
            expr = f"({expr})[{', '.join(['None'] * (r.rank - 2) + [':', ':'])}]"
        elif r.rank > 2:
            expr = f"tl.reshape({expr}, {shape_list(lay.shape(r.shape))})"
        if r.dtype != "f32":
            expr = narrow(expr, r.dtype, self.cpu, self.helpers)
        self.bind(r, expr, op)

    def loop(self, op: Op) -> None:
        """A sequential `kd.tile` loop: a `for` over its blocks; carried values reassigned."""
        body = op.body
        assert body is not None
        t: TileVar = op.attrs["tile"]
        em = self.em
        args = [f"v{x.id}" for x in body.args]
        for x in body.args:
            self.names[x.id] = f"v{x.id}"
        if args:
            inits = ", ".join(self.n(v) for v in op.operands)
            em.line(f"{', '.join(args)} = {inits}  # carried: "
                    + ", ".join(x.hint or f"v{x.id}" for x in body.args), op)
        trips = (tile_bounds.trip_count(t, self.bound(t.lo), self.bound(t.hi), self.lay.eb(t))
                 if t.dynamic else self.lay.nb(t))  # kd.tile(begin, end): known when it runs
        em.line(f"for i_{t!r} in range({trips}):", op)
        em.indent += 1
        self.tile_header(t, f"i_{t!r}")
        for o in body.ops:
            self.op(o)
        ys = [self.n(y) for y in body.yields]
        if args and ys != args:
            em.line(f"{', '.join(args)} = {', '.join(ys)}")
        if not body.ops and not args:
            em.line("pass")
        em.indent -= 1
        for res, x in zip(op.results, body.args):
            self.names[res.id] = f"v{x.id}"
        if self._stores_read_back(body):  # the program's threads see the loop's stores
            em.line("tl.debug_barrier()  # later loops read back what this one stored")

    def _stores_read_back(self, body: Any) -> bool:
        """The loop stores into an output that the kernel reads back (kernel_dsl/readback.py)."""
        return any(self._stores_read_back_op(o) for o in body.walk())

    def _stores_read_back_op(self, op: Op) -> bool:
        if not hasattr(self, "_read_back"):
            self._read_back = {id(o.attrs["tensor"]) for o in self.ir.body.walk()
                               if o.kind == "load" and o.attrs.get("readback")}
        return op.kind == "store" and id(op.attrs["tensor"]) in self._read_back


def full(shape: str, value: Any, dtype: str) -> str:
    """`tl.full` of a literal, rounded to the dtype first (so a bf16 one is exact in f32)."""
    if dtype == "bf16" and value != 0:
        return bf16_full(shape, lit(rounded(value, dtype)))
    return f"tl.full({shape}, {lit(rounded(value, dtype))}, {TL[dtype]})"


def rounded(value: Any, dtype: str) -> Any:
    """A float literal rounded to a 16-bit dtype as torch rounds it (nearest even), so that
    no backend has to round it again."""
    if dtype in ("bf16", "f16") and isinstance(value, float):
        return float(torch.tensor(value, dtype=IR_TO_TORCH[dtype]))
    return value


def render(ir: KernelIR, config: Config, target: str) -> Generated:
    """`target` "cuda" is the GPU kernel; "cpu" the same kernel for Triton's interpreter, except
    that bf16 dot operands are widened to f32 there and bf16 results rounded by `_to_bf16` (the
    interpreter's NumPy has no bf16 arithmetic and its f32 -> bf16 conversion truncates)."""
    if target not in TARGETS:
        raise BackendError(f"the triton backend has no target {target!r}", ir.loc,
                           f"triton targets: {', '.join(TARGETS)}")
    num_warps, num_stages, group = check_knobs(ir, config)
    layout = make_layout_for(ir, config)
    w = _KernelWriter(ir, layout, target)
    programs = grid_header(w, group)
    header_end = len(w.em.lines)
    for op in ir.body.ops:
        w.op(op)
    top = _Emitter()  # whole-axis offsets and masks, first needed anywhere in the body
    for d in sorted(w.full_dims):
        top.line(f"offs_{d} = tl.arange(0, {layout.lanes(d)})")
        if layout.int_masked(d):
            top.line(f"mask_{d} = offs_{d} < {d}")
    body = w.em.lines[:header_end] + top.lines + w.em.lines[header_end:]
    ins, outs = ir.inputs, ir.outputs
    loc = ir.loc.short() if ir.loc else "?"
    kname = f"{ir.name}_kernel"
    how = ("on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1 set before triton is "
           "imported)" if target == "cpu" else "on CUDA tensors")
    src = [f"# Generated by kernel_dsl from `{ir.name}` ({loc}) for target {target}.",
           f"# {config!r}",
           f"# Runs on its own: `{ir.name}(...)` {how}.",
           "import torch", "import triton", "import triton.language as tl", ""]
    for h in sorted(w.helpers):
        src += [HELPERS[h].rstrip("\n"), ""]
    for fn in w.combines:  # after the helpers they call
        src += [fn, ""]
    src += ["", "@triton.jit", f"def {kname}({', '.join(f'{p.name}_ptr' for p in ins + outs)}):",
            *body, "", ""]
    src += launcher(ir, kname, programs, num_warps, num_stages)
    meta = {"kernel": kname, "grid": (programs,), "num_warps": num_warps,
            "num_stages": num_stages,
            "outputs": [(p.name, tuple(p.shape), p.dtype, p.init) for p in outs],
            "returns": [outs.index(p) for p in ir.returns],
            "signature": {f"{p.name}_ptr": f"*{SIG[p.dtype]}" for p in ins + outs}}
    return Generated("triton", target, config, "\n".join(src), ir.name, meta)
