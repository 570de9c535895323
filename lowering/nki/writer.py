"""The kernel writer: which SBUF tile holds each IR value, and the conversions between layouts.

Every real value is *defined* once, in its inferred orientation (layout.py), as a fresh SBUF tile.
When an op needs a value in the other orientation, on partitions broadcast, as a float32 vector
or as a tile at all (a `Splat`, `Affine` or `Pred`, affine.py), the writer emits that conversion
once, into the slot right after the value's definition, and caches it: a transpose of `q` before
the key loop is done once, not per key block. Op rules live in the lower_* modules.
"""
from __future__ import annotations

import itertools
import keyword
from dataclasses import dataclass
from typing import Any, Callable

from kernel_dsl import tile_bounds
from kernel_dsl.config import effective_block, num_blocks
from kernel_dsl.errors import ConfigError, SourceLoc
from kernel_dsl.ir import Dim, KernelIR, Op, Region, TensorParam, TileVar, Value
from kernel_dsl.tile_bounds import is_ragged

from .affine import Affine, Pred, Scalar, Splat, Virtual, analyze
from .emitter import Block, Emitter
from .layout import Core, infer, make_core, orient_with
from .names import BYTES, NL_DTYPE, SHORT, begin, count, index, literal, shape
from .targets import MOVING_FMAX, PMAX, Target

RESERVED = {"nki", "nl", "nisa", "range", "min", "max", "float", "int", "bool", "r0", "c0",
            "psum_t", "psum_mm"}
CMP = {"lt": "nl.less", "le": "nl.less_equal", "gt": "nl.greater", "ge": "nl.greater_equal",
       "eq": "nl.equal", "ne": "nl.not_equal"}


@dataclass(frozen=True)
class Tile:
    """An SBUF tile holding a value: its Python name, physical (partitions, free) shape and IR
    dtype; `dims` are the IR dims on partitions and on the free axis (for the config space)."""

    name: str
    phys: tuple[int, int]
    dtype: str
    dims: tuple[Dim | None, Dim | None] = (None, None)
    version: int = 0  # bumped where a carried value's name is rebound (conversions are per version)

    def swapped(self, name: str, dtype: str | None = None) -> Tile:
        return Tile(name, (self.phys[1], self.phys[0]), dtype or self.dtype,
                    (self.dims[1], self.dims[0]))

    def key(self, kind: str) -> tuple[str, int, str]:
        """The cache key of a conversion of this tile's current contents."""
        return (self.name, self.version, kind)


@dataclass(frozen=True)
class Operand:
    """An elementwise operand relative to the result's physical tile: "scalar" (an immediate),
    "col" (a (P, 1) tile broadcast along the free axis) or "full" (the result's shape)."""

    kind: str
    expr: str = ""
    tile: Tile | None = None


Rule = Callable[["Writer", Op], None]


class Writer:
    def __init__(self, ir: KernelIR, blocks: dict[int, int], target: Target, em: Emitter,
                 rules: dict[str, Rule]):
        self.ir, self.blocks, self.target, self.em, self.rules = ir, blocks, target, em, rules
        self.virt: dict[int, Virtual] = analyze(ir, self.begin, self.eb, self.count)
        self.orient = infer(ir, self.virt, self.eb)
        self.tiles: dict[tuple[int, str], Tile] = {}
        self.converted: dict[tuple[Any, ...], Tile] = {}
        self.versions = itertools.count(1)
        self.slots: dict[int, Block] = {}
        self.cores: dict[int, Core] = {}
        self.used: set[str] = set(RESERVED)
        self.pnames = {p.name: self.fresh(p.name if p.name.isidentifier() and
                                          not keyword.iskeyword(p.name) else "arg")
                       for p in ir.params}
        for t in ir.tiles:
            self.used.update((index(t), begin(t), count(t)))
        self.consts: dict[str, str] = {}
        self.prologue: Block = em.root
        self.roles: dict[int, set[str]] = {}
        self.sbuf_estimate = 0  # upper bound of live SBUF bytes per partition (config space)
        self.loc: SourceLoc | None = None  # the op being written, for `# src:` and errors
        self.lazy: dict[int, Any] = {}  # value id -> a loader for loads of more than 128 rows

    # -- tiles and blocks ----------------------------------------------------------------------
    def eb(self, t: TileVar) -> int:
        return effective_block(t, self.blocks)

    def nb(self, t: TileVar) -> int:
        return num_blocks(t, self.blocks)

    def ragged(self, t: TileVar) -> bool:
        return is_ragged(t, self.blocks)

    def begin(self, t: TileVar) -> str:
        return index(t) if self.eb(t) == 1 and not t.bounded else begin(t)

    def bound(self, b: int | Value, t: TileVar | None) -> str:
        """A `kd.tile(begin, end)` bound or a scalar index (`t` None): a Python int expression
        (loops unroll at trace time)."""
        if isinstance(b, int):
            return str(b)
        x = self.virt.get(b.id)
        if not isinstance(x, Scalar):
            what = f"bound loop {t!r}" if t is not None else "index a tensor"
            why = ("" if t is None else ": its loops unroll at trace time (block starts and edge "
                   "counts are Python ints), and NKI's run-time loop (nl.fori_loop over a "
                   "register) is not generated")
            raise ConfigError(f"the NKI lowering cannot {what} by a value loaded from memory{why}",
                              t.loc if t is not None else b.op.loc if b.op else None,
                              "use ints, kd.grid indices or tiles' begin/end (a static bound "
                              "with a mask, e.g. `kd.tile(kmax)` and `extra_mask=tk.index[None, :] "
                              "< nnz[:, None]`); or the triton backend")
        return x.expr

    def end(self, t: TileVar) -> str:
        return str(t.extent) if t.hi is None else self.bound(t.hi, t)

    def count(self, t: TileVar) -> str:
        return count(t) if self.ragged(t) else str(self.eb(t))

    def pname(self, p: TensorParam) -> str:
        """The Python name of an HBM tensor in the kernel."""
        return self.pnames[p.name]

    def core(self, v: Value) -> Core:
        c = self.cores.get(v.id)
        if c is None:
            c = self.cores[v.id] = make_core(v, self.eb)
        return c

    # -- emission helpers ----------------------------------------------------------------------
    def line(self, text: str, comment: str = "") -> None:
        self.em.line(text, self.loc, comment)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def value_name(self, v: Value, base: str | None = None) -> str:
        return self.fresh(base or (v.hint if v.hint and v.hint.isidentifier() else f"v{v.id}"))

    def alloc(self, name: str, phys: tuple[int, int], dtype: str, buffer: str = "sbuf",
              dims: tuple[Dim | None, Dim | None] = (None, None), comment: str = "") -> str:
        """`name = nl.ndarray(...)`; checks the partition limit and records the dims' roles."""
        p, f = phys
        if p > PMAX:
            self.too_big(dims[0], p, "on partitions", PMAX)
        dt = "f32" if buffer == "psum" and dtype not in ("f32", "bf16", "f16") else dtype
        self.line(f"{name} = nl.ndarray({shape(phys)}, dtype={NL_DTYPE[dt]}, "
                  f"buffer=nl.{buffer})", comment)
        for d, role in zip(dims, ("part", "free")):
            if isinstance(d, TileVar):
                self.roles.setdefault(d.block.index, set()).add(role)
        if buffer == "sbuf" and f * BYTES[dtype] > self.target.sbuf_bytes:
            self.too_big(dims[1], f, f"on the free axis ({f * BYTES[dtype]} B per partition, "
                         f"more than {self.target.name}'s SBUF)", self.target.sbuf_bytes // BYTES[dtype])
        if buffer == "sbuf":  # as if every tile of one iteration were live at once
            self.sbuf_estimate += f * BYTES[dtype]
        return name

    def role(self, d: Dim | None, role: str) -> None:
        if isinstance(d, TileVar):
            self.roles.setdefault(d.block.index, set()).add(role)

    def too_big(self, d: Dim | None, size: int, where: str, limit: int) -> None:
        what = f"tile `{d!r}` (block {size})" if isinstance(d, TileVar) else f"a dim of {size}"
        hint = (f"use a block size <= {limit} for `{d!r}`" if isinstance(d, TileVar) else
                "tile that dim with kd.tile so its blocks fit")
        raise ConfigError(f"the NKI lowering puts {what} {where}, where at most {limit} fit",
                          self.loc, hint)

    # -- definitions and realizations ----------------------------------------------------------
    def define(self, v: Value, tile: Tile) -> None:
        """Records the tile holding `v` (in its own orientation) and leaves a slot after it."""
        self.tiles[(v.id, self.orient[v.id])] = tile
        self.slots[v.id] = self.em.slot()

    def alias(self, v: Value, src: Value, orient: str, src_orient: str) -> None:
        """`v` is held by `src`'s tile (expand_dims, transpose, same-format casts): no data moves."""
        tile = self.get(src, src_orient)
        c = self.core(v)
        self.tiles[(v.id, orient)] = Tile(tile.name, tile.phys, v.dtype,
                                          (c.part_dim(orient), c.free_dim(orient)), tile.version)
        # conversions of `v` are conversions of `src`'s tile, cached by that tile: write them
        # where `src` is defined, so a use in a later sibling loop never reads one emitted inside
        # an earlier loop (which may run no iteration)
        slot = self.slots.get(src.id)
        self.slots[v.id] = slot if slot is not None else self.em.slot()

    def get(self, v: Value, orient: str) -> Tile:
        """`v`'s tile in `orient`, converting (once, next to `v`'s definition) if needed."""
        key = (v.id, orient)
        tile = self.tiles.get(key)
        if tile is not None:
            return tile
        with at(self, v):
            if v.id in self.lazy:
                c = self.core(v)
                if orient == "N":
                    self.too_big(c.dims[0], c.sizes[0], "on partitions", PMAX)
                tile = self.lazy[v.id].transposed()
            elif v.id in self.virt:
                tile = self.materialize(v, orient)
            else:
                have = self.tiles.get((v.id, self.orient[v.id]))
                assert have is not None, f"value %{v.id} used before its definition"
                tile = self.transpose(have, f"{have.name}_T")
        self.tiles[key] = tile
        return tile

    def materialize(self, v: Value, orient: str) -> Tile:
        """A tile for a virtual value: memset (Scalar/Splat), iota (Affine), iota + compare (Pred)."""
        x = self.virt[v.id]
        c = self.core(v)
        phys, dims = c.phys(orient), (c.part_dim(orient), c.free_dim(orient))
        name = self.value_name(v, f"v{v.id}" + ("" if orient == self.orient.get(v.id, "N") else
                                                 f"_{orient}"))
        if isinstance(x, (Scalar, Splat)):
            self.alloc(name, phys, v.dtype, dims=dims)
            value = x.expr if v.dtype in ("f32", "bf16", "f16") else f"int({x.expr})"
            self.line(f"nisa.memset(dst={name}, value={value})")
            return Tile(name, phys, v.dtype, dims)
        diff = x.diff if isinstance(x, Pred) else x
        assert isinstance(diff, Affine)
        pos = c.part_pos(orient)
        part_c, free_c = diff.c(-2 + pos), diff.c(-1 - pos)
        dt = "i32" if isinstance(x, Pred) else v.dtype
        iname = self.fresh(f"{name}_iota") if isinstance(x, Pred) else name
        self.alloc(iname, phys, dt, dims=dims)
        self.line(f"nisa.iota(dst={iname}, pattern=[[{free_c}, {phys[1]}]], offset={diff.const}, "
                  f"channel_multiplier={part_c})")
        if isinstance(x, Pred):
            self.alloc(name, phys, "bool", dims=dims)
            self.line(f"nisa.tensor_scalar(dst={name}, data={iname}, op0={CMP[x.cmp]}, "
                      "operand0=0.0)")
        return Tile(name, phys, v.dtype, dims)

    # -- conversions ---------------------------------------------------------------------------
    def transpose(self, t: Tile, name: str) -> Tile:
        """(P, F) -> (F, P) through TensorE into PSUM, then back to SBUF. Integer tiles go
        through float32 (exact below 2^24): TensorE transposes floats."""
        key = t.key("T")
        if key in self.converted:
            return self.converted[key]
        p, f = t.phys
        if f > PMAX:
            self.too_big(t.dims[1], f, "on partitions (for a transpose)", PMAX)
        src = t if t.dtype in ("f32", "bf16", "f16") else self.cast(t, "f32")
        ps = self.alloc("psum_t", (f, p), src.dtype, "psum")
        self.line(f"nisa.nc_transpose(dst={ps}, data={src.name})")
        out = t.swapped(self.fresh(name))
        self.alloc(out.name, out.phys, out.dtype, dims=out.dims)
        self.line(f"nisa.tensor_copy(dst={out.name}, src={ps})")
        self.converted[key] = out
        return out

    def cast(self, t: Tile, dtype: str) -> Tile:
        """A copy of `t` in another dtype (`tensor_copy` casts through float32)."""
        if t.dtype == dtype or (SHORT[t.dtype] == SHORT[dtype] and "bool" not in (t.dtype, dtype)):
            return t
        key = t.key(dtype)
        if key not in self.converted:
            out = Tile(self.fresh(f"{t.name}_{SHORT[dtype]}"), t.phys, dtype, t.dims)
            self.alloc(out.name, out.phys, dtype, dims=out.dims)
            self.line(f"nisa.tensor_copy(dst={out.name}, src={t.name})")
            self.converted[key] = out
        return self.converted[key]

    def const_tile(self, kind: str, phys: tuple[int, int], dtype: str, value: str) -> str:
        """A constant tile (ones for broadcasts, zeros) allocated once, in the kernel prologue."""
        name = f"{kind}_{SHORT[dtype]}_{phys[0]}x{phys[1]}"
        if name not in self.consts:
            self.used.add(name)
            self.prologue_memset(name, phys, dtype, value)
            self.consts[name] = name
        return name

    def fill(self, expr: str, phys: tuple[int, int], dtype: str) -> Tile:
        """A read-only tile holding `expr` (an operand that must be a tensor): a literal is memset
        once in the prologue and shared, anything else (`tq0 + 3`) is memset here."""
        if literal(expr) is None:
            return self.splat(expr, phys, dtype)
        key = ("fill", expr, phys, dtype)
        if key not in self.converted:
            name = self.fresh(f"fill_{SHORT[dtype]}")
            value = expr if dtype in ("f32", "bf16", "f16") else f"int({expr})"
            self.prologue_memset(name, phys, dtype, value)
            self.converted[key] = Tile(name, phys, dtype)
        return self.converted[key]

    def prologue_memset(self, name: str, phys: tuple[int, int], dtype: str, value: str) -> None:
        self.em.push(self.prologue)
        saved, self.loc = self.loc, None
        self.alloc(name, phys, dtype)
        self.line(f"nisa.memset(dst={name}, value={value})")
        self.loc = saved
        self.em.pop()

    def _int32_broadcast(self, t: Tile, spread: Callable[[Tile], Tile]) -> Tile:
        """Broadcasts an int32 tile exactly. Both broadcasts run in float32, exact only below
        2**24, so the value goes as two halves (`t >> 16` and `t & 0xFFFF`, each exact in f32),
        which are cast back and joined: `(hi << 16) | lo`."""
        halves = []
        for part, op, k in (("hi", "nl.right_shift", 16), ("lo", "nl.bitwise_and", 0xFFFF)):
            h = Tile(self.fresh(f"{t.name}_{part}"), t.phys, "i32", t.dims)
            self.alloc(h.name, h.phys, "i32", dims=h.dims)
            kt = self.const_tile(f"k{k}", t.phys, "i32", str(k))
            self.line(f"nisa.tensor_tensor(dst={h.name}, data1={t.name}, data2={kt}, op={op})")
            halves.append(self.cast(spread(self.cast(h, "f32")), "i32"))
        hi, lo = halves
        out = Tile(self.fresh(f"{t.name}_w"), hi.phys, "i32", hi.dims)
        self.alloc(out.name, out.phys, "i32", dims=out.dims)
        k16 = self.const_tile("k16", hi.phys, "i32", "16")
        self.line(f"nisa.tensor_tensor(dst={out.name}, data1={hi.name}, data2={k16}, op=nl.left_shift)",
                  comment="an int32 broadcast, exact: two 16-bit halves")
        self.line(f"nisa.tensor_tensor(dst={out.name}, data1={out.name}, data2={lo.name}, "
                  "op=nl.bitwise_or)")
        return out

    def broadcast_partitions(self, t: Tile, p: int) -> Tile:
        """(1, F) -> (p, F): `ones(1, p).T @ row` on TensorE (K = 1, so each output element is
        exactly 1 * row[j]), in moving chunks of 512."""
        key = t.key(f"b{p}")
        if key in self.converted:
            return self.converted[key]
        if t.dtype == "i32":
            self.converted[key] = self._int32_broadcast(t, lambda h: self.broadcast_partitions(h, p))
            return self.converted[key]
        src = t if t.dtype in ("f32", "bf16", "f16") else self.cast(t, "f32")
        ones = self.const_tile("ones", (1, p), src.dtype, "1.0")
        f = t.phys[1]
        out = Tile(self.fresh(f"{t.name}_b"), (p, f), t.dtype, (None, t.dims[1]))
        self.alloc(out.name, out.phys, out.dtype, dims=out.dims)
        for f0 in range(0, f, MOVING_FMAX):
            w = min(MOVING_FMAX, f - f0)
            sl = "" if w == f else f"[:, {f0}:{f0 + w}]"
            ps = self.alloc("psum_mm", (p, w), "f32", "psum")
            self.line(f"nisa.nc_matmul(dst={ps}, stationary={ones}, moving={src.name}{sl})")
            self.line(f"nisa.tensor_copy(dst={out.name}{sl}, src={ps})")
        self.converted[key] = out
        return out

    def broadcast_free(self, t: Tile, f: int) -> Tile:
        """(P, 1) -> (P, f): `zeros + t` with `t` as a per-partition operand."""
        key = t.key(f"x{f}")
        if key not in self.converted and t.dtype == "i32":
            self.converted[key] = self._int32_broadcast(t, lambda h: self.broadcast_free(h, f))
        if key not in self.converted:
            p = t.phys[0]
            zeros = self.const_tile("zeros", (p, f), "f32", "0.0")
            col = self.cast(t, "f32")
            out = Tile(self.fresh(f"{t.name}_x"), (p, f), t.dtype, (t.dims[0], None))
            self.alloc(out.name, out.phys, out.dtype, dims=out.dims)
            self.line(f"nisa.tensor_scalar(dst={out.name}, data={zeros}, op0=nl.add, "
                      f"operand0={col.name})")
            self.converted[key] = out
        return self.converted[key]

    # -- elementwise operands ------------------------------------------------------------------
    def operand(self, x: Value, r: Core, ro: str) -> Operand:
        """`x` as an operand of an elementwise op whose result has core `r` in orientation `ro`."""
        v = self.virt.get(x.id)
        if isinstance(v, (Scalar, Splat)):
            return Operand("scalar", v.expr)
        p, f = r.phys(ro)
        xc = self.core(x)
        if xc.sizes == r.sizes:
            return Operand("full", tile=self.get(x, ro))
        pos = xc.vector_pos
        if pos is None:  # a (1, 1) tile
            t = self.get(x, "N")
            if p > 1:
                t = self.broadcast_partitions(t, p)
            return Operand("col" if f > 1 else "full", tile=t)
        on_part = pos == r.part_pos(ro)
        t = self.get(x, orient_with(pos, on_part))
        if on_part:
            return Operand("col" if f > 1 else "full", tile=t)
        return Operand("full", tile=self.broadcast_partitions(t, p) if p > 1 else t)

    def full(self, x: Value, r: Core, ro: str) -> Tile:
        """`x` broadcast to the result's whole physical tile."""
        op = self.operand(x, r, ro)
        if op.kind == "full":
            assert op.tile is not None
            return op.tile
        if op.kind == "col":
            assert op.tile is not None
            return self.broadcast_free(op.tile, r.phys(ro)[1])
        return self.splat(op.expr, r.phys(ro), x.dtype)

    def splat(self, expr: str, phys: tuple[int, int], dtype: str) -> Tile:
        name = self.fresh("splat")
        self.alloc(name, phys, dtype)
        value = expr if dtype in ("f32", "bf16", "f16") else f"int({expr})"
        self.line(f"nisa.memset(dst={name}, value={value})")
        return Tile(name, phys, dtype)

    def new_result(self, v: Value, base: str | None = None) -> Tile:
        """A fresh SBUF tile for `v` in its own orientation."""
        c = self.core(v)
        o = self.orient[v.id]
        t = Tile(self.value_name(v, base), c.phys(o), v.dtype, (c.part_dim(o), c.free_dim(o)))
        self.alloc(t.name, t.phys, t.dtype, dims=t.dims)
        return t

    # -- structure -----------------------------------------------------------------------------
    def region(self, region: Region) -> None:
        for op in region.ops:
            self.loc = op.loc
            if op.kind == "loop":
                self.loop(op)
            elif op.results and op.result.id in self.virt:
                self.slots[op.result.id] = self.em.slot()
            else:
                rule = self.rules.get(op.kind)
                if rule is None:
                    raise ConfigError(f"the NKI lowering has no rule for `{op.kind}`", op.loc,
                                      "rewrite the kernel without it or use another backend")
                rule(self, op)

    def tile_header(self, t: TileVar) -> None:
        """Per-block Python names: the first index and, for ragged tiles, the in-range count."""
        eb = self.eb(t)
        if t.bounded:  # kd.tile(begin, end): blocks start at begin
            lo = "" if t.lo == 0 else f"{self.bound(t.lo, t)} + "
            self.em.line(f"{begin(t)} = {lo}{index(t)} * {eb}")
        elif eb > 1:
            self.em.line(f"{begin(t)} = {index(t)} * {eb}")
        if self.ragged(t):
            self.em.line(f"{count(t)} = min({eb}, {self.end(t)} - {self.begin(t)})",
                         comment=f"the last block of {t!r} is ragged")

    def loop(self, op: Op) -> None:
        """A sequential `kd.tile` loop: a Python `for` (unrolled at trace time); carried values
        are Python names rebound at the end of each iteration."""
        body = op.body
        assert body is not None
        t: TileVar = op.attrs["tile"]
        names = []
        for init, arg in zip(op.operands, body.args):
            o = self.orient[arg.id]
            name = self.value_name(arg)
            if init.id in self.virt:
                c = self.core(arg)
                tile = self.materialize_as(init, o, name, c)
            else:
                tile = self.get(init, o)
                self.line(f"{name} = {tile.name}")
            c = self.core(arg)
            self.tiles[(arg.id, o)] = Tile(name, c.phys(o), arg.dtype, (c.part_dim(o), c.free_dim(o)),
                                           next(self.versions))
            names.append(name)
        self.loc = op.loc
        trips = (tile_bounds.trip_count(t, self.bound(t.lo, t), self.end(t), self.eb(t))
                 if t.dynamic else self.nb(t))  # a Python int when the kernel is traced
        note = f"loop over {t!r}: {t.extent} in blocks of {self.eb(t)}"
        if "static_reach" in op.attrs:  # static_reach.py: a bound read from memory
            note += f"; {op.attrs['static_reach']}"
        self.em.open(f"for {index(t)} in range({trips}):", op.loc, note)
        self.tile_header(t)
        for arg in body.args:
            self.slots[arg.id] = self.em.slot()
        self.region(body)
        if names:
            ys = [self.get(y, self.orient[a.id]).name for y, a in zip(body.yields, body.args)]
            self.loc = None
            self.em.line(f"{', '.join(names)} = {', '.join(ys)}", comment="carried to the next block")
        self.em.close()
        for arg, res in zip(body.args, op.results):  # the names now hold the last yields
            o = self.orient[arg.id]
            self.orient[res.id] = o
            inside = self.tiles[(arg.id, o)]
            self.tiles[(res.id, o)] = Tile(inside.name, inside.phys, inside.dtype, inside.dims,
                                           next(self.versions))
            self.slots[res.id] = self.em.slot()

    def materialize_as(self, v: Value, orient: str, name: str, c: Core) -> Tile:
        """A virtual loop init written straight into the carried value's tile."""
        x = self.virt[v.id]
        if isinstance(x, (Scalar, Splat)):
            phys = c.phys(orient)
            self.alloc(name, phys, v.dtype, dims=(c.part_dim(orient), c.free_dim(orient)))
            value = x.expr if v.dtype in ("f32", "bf16", "f16") else f"int({x.expr})"
            self.line(f"nisa.memset(dst={name}, value={value})")
            return Tile(name, phys, v.dtype)
        tile = self.get(v, orient)
        self.line(f"{name} = {tile.name}")
        return tile


class at:  # noqa: N801 - used as `with at(writer, v):`
    """Writes into the slot right after `v`'s definition, so a conversion of `v` is emitted once
    and visible wherever `v` is."""

    def __init__(self, w: Writer, v: Value):
        self.w, self.v = w, v

    def __enter__(self) -> None:
        self.w.em.push(self.w.slots[self.v.id])

    def __exit__(self, *exc: Any) -> None:
        self.w.em.pop()


__all__ = ["CMP", "Operand", "Rule", "Tile", "Writer", "at"]
