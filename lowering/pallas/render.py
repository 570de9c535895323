"""Renders the tile IR as readable, standalone Pallas source (plan.py decides the layout)."""
from __future__ import annotations

from kernel_dsl.config import Config
from kernel_dsl.errors import BackendError, ConfigError, SourceLoc
from kernel_dsl.ir import Dim, KernelIR, Op, TileVar, Value
from kernel_dsl.tile_bounds import is_ragged, multiple_of

from .. import Generated
from . import bounds, dyn_lane, gather, onehot, tpu_shapes
from .call import Scratch, pallas_call, twins_of
from .grid_steps import init_outputs, write_grid_phases
from .plan import SMEM_MAX_ELEMS, Plan, covers, plan_for, runs_once
from .syntax import JNP, lit, tup
from .targets import tpu_target

UNARY = {"exp": "jnp.exp({})", "exp2": "jnp.exp2({})", "log": "jnp.log({})",
         "sqrt": "jnp.sqrt({})", "rsqrt": "jax.lax.rsqrt({})", "tanh": "jnp.tanh({})",
         "sigmoid": "jax.nn.sigmoid({})", "abs": "jnp.abs({})", "neg": "-{}",
         "not": "jnp.logical_not({})", "relu": "jnp.maximum({}, 0)", "sin": "jnp.sin({})",
         "cos": "jnp.cos({})", "erf": "jax.lax.erf({})", "floor": "jnp.floor({})",
         "ceil": "jnp.ceil({})", "round": "jnp.round({})", "log1p": "jnp.log1p({})"}
BINARY = {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "div": "{} / {}",
          "max": "jnp.maximum({}, {})", "min": "jnp.minimum({}, {})", "pow": "jnp.power({}, {})",
          "and": "jnp.logical_and({}, {})", "or": "jnp.logical_or({}, {})",
          "xor": "jnp.logical_xor({}, {})", "shl": "jnp.left_shift({}, {})",
          "shr": "jnp.right_shift({}, {})", "floordiv": "jnp.floor_divide({0}, jnp.where({1} == 0, 1, {1}))",
          "mod": "jnp.remainder({0}, jnp.where({1} == 0, 1, {1}))",  # x // 0 == x, x % 0 == 0
          "lt": "{} < {}", "le": "{} <= {}", "gt": "{} > {}", "ge": "{} >= {}",
          "eq": "{} == {}", "ne": "{} != {}"}
# on integers `and or xor not` are bitwise (torch's & | ^ ~); jnp's `right_shift` is arithmetic
# for signed and logical for unsigned dtypes, as torch's >>
BITWISE = {"and": "{} & {}", "or": "{} | {}", "xor": "{} ^ {}", "not": "~{}"}
# Mosaic has no vector arithmetic on 8-bit integers and no 16-bit division (the real compiler
# rejects them), so elementwise ops on i8/u8/i16 run on int32 copies and the result is cast back:
# exact, and the cast wraps as torch does
NARROW_INT = ("i8", "u8", "i16")
REDUCE = {"sum": "jnp.sum", "max": "jnp.max", "min": "jnp.min", "prod": "_prod"}
# Pallas TPU has no reduce_prod ("Unimplemented primitive ... reduce_prod"): a halving tree of
# slices and multiplies, which Mosaic compiles at any width (checked on v5e and v6e, libtpu 0.0.52)
PROD_HELPER = """
def _prod(x, axis, keepdims=False):
    n = x.shape[axis]
    while n > 1:  # multiply the first half by the second; an odd middle lane carries over
        h = (n + 1) // 2
        lo = jax.lax.slice_in_dim(x, 0, n - h, axis=axis)
        hi = jax.lax.slice_in_dim(x, h, n, axis=axis)
        mid = jax.lax.slice_in_dim(x, n - h, h, axis=axis)
        x = lo * hi if h == n - h else jnp.concatenate([lo * hi, mid], axis=axis)
        n = h
    return x if keepdims else jnp.squeeze(x, axis)
"""
# `scan`: Mosaic has no cumsum/associative_scan primitive. A log-step (Hillis-Steele) scan needs
# no identity: lane i takes op(x[i - k], x[i]) where i >= k, for k = 1, 2, 4, ...; x[i - k] is a
# lane rotation (pltpu.roll, jnp.roll's direction)
SCAN_HELPER = """
def _scan(x, axis, op, reverse):
    if x.ndim == 1:  # Mosaic rotates no 1-D vector ("Unsupported 1D shape"): scan it as a row
        return _scan(x[None, :], 1, op, reverse)[0]
    n = x.shape[axis]
    pos = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    k = 1
    while k < n:
        if reverse:  # lane i takes op(x[i], x[i + k]) where i + k < n
            x = jnp.where(pos < n - k, op(x, pltpu.roll(x, n - k, axis)), x)
        else:
            x = jnp.where(pos >= k, op(pltpu.roll(x, k, axis), x), x)
        k *= 2
    return x
"""
SCAN_N_HELPER = """
def _scan_n(xs, axis, op, reverse):
    \"\"\"The log-step scan of a tuple of arrays with `op(earlier..., later...)` (reverse:
    `op(later..., earlier...)`), a combine region rendered as a function.\"\"\"
    if xs[0].ndim == 1:
        return tuple(y[0] for y in _scan_n(tuple(x[None, :] for x in xs), 1, op, reverse))
    n = xs[0].shape[axis]
    pos = jax.lax.broadcasted_iota(jnp.int32, xs[0].shape, axis)
    k = 1
    while k < n:
        moved = tuple(pltpu.roll(x, n - k if reverse else k, axis) for x in xs)
        new = op(*moved, *xs)
        keep = pos < n - k if reverse else pos >= k
        xs = tuple(jnp.where(keep, y, x) for y, x in zip(new, xs))
        k *= 2
    return xs
"""
SCAN_OP = {"add": "jnp.add", "mul": "jnp.multiply", "max": "jnp.maximum", "min": "jnp.minimum",
           "and": "jnp.bitwise_and", "or": "jnp.bitwise_or", "xor": "jnp.bitwise_xor"}
FLOATS = ("f32", "bf16", "f16")
# torch.amax/amin propagate NaN. On TPU, Mosaic lowers jnp.max/min reductions to
# vector.multi_reduction <maximumf/minimumf> (jax/_src/pallas/mosaic/lowering.py), which
# propagate NaN (MLIR arith's maximumf, unlike maxnumf), so TPU renderings use them as they are.
# XLA:CPU, which runs interpret mode, drops NaN from vectorized reduce-max/min (wider than ~32
# lanes; openxla/xla#21461, and cpu_compiler.cc's "XLA:CPU doesn't propagate NaN through
# min/max" TODO), so CPU renderings restore it explicitly.
NAN_FIXUP = "# max/min reductions restore NaN explicitly: XLA:CPU's reduce drops it (torch keeps it)"
LOOP_MODES = ("grid", "inner")


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.locs: dict[int, SourceLoc] = {}  # line index -> the user's line it came from
        self.indent = 0
        self._last_loc: tuple[str, int] | None = None

    def line(self, text: str, op: Op | None = None) -> None:
        comment = ""
        if op is not None and op.loc is not None:
            key = (op.loc.file, op.loc.line)
            if key != self._last_loc:
                comment = f"  # src: {op.loc.short()}"
                self._last_loc = key
            self.locs[len(self.lines)] = op.loc
        self.lines.append("    " * self.indent + text + comment)

    def open(self, *headers: str) -> int:
        """Starts an indented block; `close` drops it again if nothing was written in it."""
        for h in headers:
            self.line(h)
        self.indent += 1
        return len(self.lines)

    def close(self, start: int, n_headers: int) -> None:
        self.indent -= 1
        if len(self.lines) == start:
            del self.lines[start - n_headers:]
            for i in range(start - n_headers, start):
                self.locs.pop(i, None)


class _KernelWriter:
    """Writes the kernel body; knows which Python name holds each IR value."""

    def __init__(self, ir: KernelIR, plan: Plan, em: _Emitter, nan_fixup: bool):
        self.ir = ir
        self.plan = plan
        self.em = em
        self.nan_fixup = nan_fixup  # see NAN_FIXUP
        self.xla_cpu = nan_fixup  # rendered for interpret mode: XLA:CPU runs it
        self.names: dict[int, str] = {}
        self.tile_index: dict[int, str] = {}  # TileVar.id -> name of its block index
        self.value_shapes: set[tuple[tuple[int, ...], str]] = set()  # for the VMEM estimate
        self.scratch: list[Scratch] = []  # VMEM scratch of gathers (render adds the rest)
        self.lane_only = gather.lane_only_values(ir)
        for pos, t in enumerate(ir.grid):
            self.tile_index[t.id] = f"i_{t!r}"

    # -- helpers -------------------------------------------------------------------------------
    def n(self, v: Value) -> str:
        return self.names[v.id]

    def shape(self, dims: tuple[Dim, ...]) -> str:
        return tup(self.plan.eb(d) if isinstance(d, TileVar) else d for d in dims)

    def begin(self, t: TileVar) -> str:
        lo = f"{self.bound(t.lo)} + " if t.bounded and t.lo != 0 else ""
        if self.plan.nb(t) == 1:  # one block: a static start, which Mosaic can prove aligned
            # (a block shrunk to 7 rows); a loop bounded at run time then runs 0 or 1 times,
            # its block index 0 (an `i * 13` lane offset is not provably aligned: Mosaic E2003)
            return lo.removesuffix(" + ") or "0"
        at = f"{lo}{self.tile_index[t.id]} * {self.plan.eb(t)}"
        if isinstance(t.lo, Value) and multiple_of(t.lo, self.plan.eb(t), self.plan.blocks):
            return f"pl.multiple_of({at}, {self.plan.eb(t)})"  # Mosaic must prove loads aligned
        return at

    def bound(self, b: int | Value) -> str:
        """A `kd.tile(begin, end)` bound: a literal, or the name of its scalar value."""
        return str(b) if isinstance(b, int) else self.n(b)

    def end(self, t: TileVar) -> str:
        return str(t.extent) if t.hi is None else self.bound(t.hi)

    def lanes_in_range(self, t: TileVar, shape: tuple[Dim, ...], axis: int) -> str:
        iota = f"jax.lax.broadcasted_iota(jnp.int32, {self.shape(shape)}, {axis})"
        return f"{iota} + {self.begin(t)} < {self.end(t)}"

    def store(self, op: Op, x: str) -> None:
        """A block store; lanes of a ragged `kd.tile(begin, end)` block, or of a tile over a
        leading part of the axis, past its end keep what the tensor holds there (other tiles'
        lanes past the axis land in padding)."""
        if gather.lane_form(op):
            return onehot.render_scatter(self, op, x)
        if gather.gather_entry(op) is not None:
            return gather.render_scatter(self, op, x)
        if gather.dyn_row(self.plan, op) is not None:
            return gather.render_dyn_row(self, op, x)
        if dyn_lane.dyn_lane(self.plan, op) is not None:
            return dyn_lane.render(self, op, x)
        ref = self.ref_index(op)
        at = op.attrs.get("atomic")
        if at:  # TPU has no atomics; grid steps run in order on one core (plan.shared)
            x = gather.ATOMIC[at].format(ref, x)
        v = op.operands[0]
        dims = [ix for ix in op.attrs["index"] if ix.kind not in ("int", "dyn")]
        p = op.attrs["tensor"]
        full = [n for ix, n in zip(op.attrs["index"], p.shape) if ix.kind not in ("int", "dyn")]
        conds = [self.lanes_in_range(ix.tile, v.shape, axis)
                 for axis, (ix, n) in enumerate(zip(dims, full))
                 if ix.kind == "tile" and (ix.tile.bounded or not covers(ix.tile, n))
                 and is_ragged(ix.tile, self.plan.blocks)]
        if conds and v.rank == len(dims):
            x = f"jnp.where({' & '.join(f'({c})' for c in conds)}, {x}, {ref})"
        self.em.line(f"{ref} = {x}", op)

    def bind(self, v: Value, expr: str, op: Op) -> None:
        self.value_shapes.add((tuple(self.plan.eb(d) if isinstance(d, TileVar) else d
                                     for d in v.shape), v.dtype))
        name = f"v{v.id}"
        self.names[v.id] = name
        self.em.line(f"{name} = {expr}", op)

    def ref_index(self, op: Op, gather: str | None = None, row: tuple[int, str] | None = None) -> str:
        """The ref subscript of a load or store; `gather` is the entry of a gather axis, `row`
        (axis, entry) replaces one axis's entry."""
        p = op.attrs["tensor"]
        parts = []
        for axis, (ix, ax, n) in enumerate(zip(op.attrs["index"], self.plan.axes[p.name], p.shape)):
            if row is not None and axis == row[0]:
                parts.append(row[1])
                continue
            if ax.squeezed:  # the BlockSpec picked the element: the ref has no such dim
                continue
            if ax.pick:  # the block of sublanes holding row g
                assert ix.scalar is not None
                parts.append(f"jax.lax.rem({self.n(ix.scalar)}, {ax.pick})")  # g >= 0: no sign
            elif ax.kind in ("grid", "loop"):
                parts.append(":")
            elif ix.kind == "tile":
                parts.append(f"pl.ds({self.begin(ix.tile)}, {self.plan.eb(ix.tile)})")
            elif ix.kind == "full":
                parts.append(":" if ax.block == n else f":{n}")
            elif ix.kind == "slice":  # a static part of a resident axis
                parts.append(f"{ix.value}:{ix.stop}")
            elif ix.kind == "dyn":  # one element at a device scalar (a kd.grid index, ...)
                assert ix.scalar is not None
                parts.append(self.n(ix.scalar))
            elif ix.kind == "gather":  # one lane's row (gather.py writes the loop around it)
                assert gather is not None
                parts.append(gather)
            else:
                parts.append(str(ix.value))
        if all(s == ":" for s in parts):
            return f"{p.name}_ref[...]"
        return f"{p.name}_ref[{', '.join(parts)}]"

    # -- ops -----------------------------------------------------------------------------------
    def op(self, op: Op) -> None:
        k, a = op.kind, op.attrs
        if op.results and op.results[0].id in self.lane_only:  # recomputed per lane (gather.py)
            return
        ins = [self.n(v) for v in op.operands]
        if k == "loop":
            return self.inner_loop(op)
        if k == "store":
            return self.store(op, ins[0])
        r = op.result
        if k == "load" and gather.lane_form(op):
            expr = onehot.render_gather(self, op)
        elif k == "load" and gather.gather_entry(op) is not None:
            expr = gather.render_gather(self, op)
        elif k == "load":
            expr = self.ref_index(op)
        elif k == "const":
            expr = f"{JNP[r.dtype]}({lit(a['value'])})"
        elif k == "full":
            expr = f"jnp.full({self.shape(a['shape'])}, {lit(a['value'])}, {JNP[r.dtype]})"
        elif k == "iota":
            t = a["tile"]
            expr = f"{self.begin(t)} + jax.lax.broadcasted_iota(jnp.int32, ({self.plan.eb(t)},), 0)"
        elif k == "arange":
            expr = f"jax.lax.broadcasted_iota(jnp.int32, ({a['size']},), 0)"
        elif k == "tile_begin":
            expr = f"jnp.int32({self.begin(a['tile'])})"
        elif k == "tile_id":
            expr = f"jnp.int32({self.tile_index[a['tile'].id]})"
        elif k == "tile_size":
            expr = f"jnp.int32({self.plan.eb(a['tile'])})"
        elif k == "tile_count":
            t = a["tile"]
            expr = f"jnp.minimum({self.plan.eb(t)}, {self.end(t)} - {self.begin(t)})"
        elif k == "expm1":
            expr = self.expm1(op, ins[0])
        elif k in UNARY or k in BINARY:
            expr = self.elementwise(op, ins)
        elif k == "where":
            expr = f"jnp.where({ins[0]}, {ins[1]}, {ins[2]})"
        elif k == "cast" and a["dtype"] == "f8e4m3fn" and op.operands[0].dtype != "bool":
            # torch saturates at the largest e4m3fn (inf too); JAX (ml_dtypes) gives NaN there
            expr = f"jnp.clip({ins[0]}, -448, 448).astype(jnp.float8_e4m3fn)"
        elif k == "cast":
            expr = f"{ins[0]}.astype({JNP[a['dtype']]})"
        elif k == "bitcast":  # same width: the bits read as another dtype
            expr = f"jax.lax.bitcast_convert_type({ins[0]}, {JNP[a['dtype']]})"
        elif k == "reduce":
            keep = ", keepdims=True" if a["keepdim"] else ""
            expr = f"{REDUCE[a['op']]}({ins[0]}, axis={a['axis']}{keep})"
            if a["op"] in ("max", "min") and op.operands[0].dtype in FLOATS and self.nan_fixup:
                expr = f"jnp.where(jnp.isnan({ins[0]}).any(axis={a['axis']}{keep}), jnp.nan, {expr})"
        elif k == "dot":
            expr = self.dot(op, ins)
        elif k == "scan" and a["op"] == "combine":
            return self.combine_scan(op)
        elif k == "scan":
            expr = f"_scan({ins[0]}, {a['axis']}, {SCAN_OP[a['op']]}, {a['reverse']})"
        elif k == "expand_dims" and r.dtype == "bool":  # Mosaic: "non-noop i1 reshape is unsupported"
            expr = f"(jnp.expand_dims({ins[0]}.astype(jnp.int32), {a['axis']}) != 0)"
        elif k == "expand_dims":
            expr = f"jnp.expand_dims({ins[0]}, {a['axis']})"
        elif k == "transpose":
            expr = f"{ins[0]}.T" if r.rank == 2 else f"jnp.swapaxes({ins[0]}, -1, -2)"
        elif k == "broadcast":
            expr = f"jnp.broadcast_to({ins[0]}, {self.shape(a['shape'])})"
        elif k == "reshape":
            expr = f"{ins[0]}.reshape({self.shape(a['shape'])})"
        elif k == "concat":
            expr = f"jnp.concatenate([{', '.join(ins)}], axis={a['axis']})"
        elif k == "slice":
            expr = f"jax.lax.slice_in_dim({ins[0]}, {a['start']}, {a['stop']}, axis={a['axis']})"
        elif k == "permute":
            expr = f"jnp.transpose({ins[0]}, {tuple(a['perm'])})"
        elif k == "pad_fill":
            t = a["tile"]
            if not is_ragged(t, self.plan.blocks):
                self.names[r.id] = ins[0]
                return
            expr = (f"jnp.where({self.lanes_in_range(t, op.operands[0].shape, a['axis'])}, "
                    f"{ins[0]}, {JNP[r.dtype]}({lit(a['fill'])}))")
        else:  # the verifier knows every op; reaching here is a renderer gap
            raise BackendError(f"the pallas renderer has no rule for IR op `{k}`", op.loc,
                               "this is a kernel_dsl bug; please report it with the kernel")
        self.bind(r, expr, op)

    def combine_scan(self, op: Op) -> None:
        """A scan whose combine is a region: a local function of its `[]` args, rendered by the
        same rules, scanned by `_scan_n` (values here are exactly the axis' size: no padding)."""
        a, reg, em = op.attrs, op.attrs["combine"], self.em
        fname = f"_combine_{op.result.id}"
        em.line(f"def {fname}({', '.join(f'a{i}' for i in range(len(reg.args)))}):", op)
        em.indent += 1
        for i, v in enumerate(reg.args):
            self.names[v.id] = f"a{i}"
        for o in reg.ops:
            self.op(o)
        em.line(f"return {', '.join(self.n(y) for y in reg.yields)},")
        em.indent -= 1
        xs = ", ".join(self.n(v) for v in op.operands)
        for r in op.results:
            self.names[r.id] = f"v{r.id}"
        em.line(f"{', '.join(self.n(r) for r in op.results)}, = _scan_n(({xs},), {a['axis']}, "
                f"{fname}, {a['reverse']})", op)

    def elementwise(self, op: Op, ins: list[str]) -> str:
        k, r = op.kind, op.result
        narrow = [v.dtype in NARROW_INT for v in op.operands]
        ins = [f"{x}.astype(jnp.int32)" if n else x for x, n in zip(ins, narrow)]
        if k in ("floordiv", "mod") and r.rank == 0:  # scalars: no `sign` (bounds.py)
            expr = (bounds.floordiv if k == "floordiv" else bounds.mod)(*ins)
        elif k in BITWISE and r.dtype != "bool":
            expr = BITWISE[k].format(*ins)
        else:
            expr = (UNARY if k in UNARY else BINARY)[k].format(*ins)
        return f"({expr}).astype({JNP[r.dtype]})" if r.dtype in NARROW_INT and any(narrow) else expr

    def expm1(self, op: Op, x: str) -> str:
        """Mosaic has no expm1: 2t / (1 - t) with t = tanh(x / 2) near 0, where exp(x) - 1
        cancels (Kahan's log-based form would not survive XLA, which folds log(exp(x)) to x);
        in f32 for 16-bit floats."""
        r = op.result
        if r.dtype != "f32":
            self.em.line(f"v{r.id}_x = {x}.astype(jnp.float32)", op)
            x = f"v{r.id}_x"
        t = f"v{r.id}_t"
        self.em.line(f"{t} = jnp.tanh({x} * 0.5)", op)
        expr = f"jnp.where(jnp.abs({x}) < 0.5, 2 * {t} / (1 - {t}), jnp.exp({x}) - 1)"
        return expr if r.dtype == "f32" else f"({expr}).astype({JNP[r.dtype]})"

    def dot(self, op: Op, ins: list[str]) -> str:
        a, b = op.operands[:2]
        prec = ", precision=jax.lax.Precision.HIGHEST" if a.dtype == "f32" else ""
        kw = f"preferred_element_type=jnp.float32{prec}"
        r = a.rank
        lead = [self.plan.eb(d) if isinstance(d, TileVar) else d for d in a.shape[:-2]]
        if r == 2:
            expr = f"jnp.dot({ins[0]}, {ins[1]}, {kw})"
        elif all(x == 1 for x in lead):  # batch of one: a plain 2-D matmul on the MXU
            m, kk, nn = (self.plan.eb(d) if isinstance(d, TileVar) else d
                         for d in (a.shape[-2], a.shape[-1], b.shape[-1]))
            expr = (f"jnp.dot({ins[0]}.reshape({m}, {kk}), {ins[1]}.reshape({kk}, {nn}), {kw})"
                    f".reshape({self.shape(op.result.shape)})")
        else:
            batch = tuple(range(r - 2))
            x, y = ins[:2]
            if self.xla_cpu and a.dtype in ("bf16", "f16"):
                # XLA:CPU has no batched bf16 x bf16 -> f32 dot inside a loop ("Unsupported
                # element type for DotThunk"); f32 copies give the same result: 16-bit float
                # products are exact in f32, and the sum is in f32 either way
                x, y = f"{x}.astype(jnp.float32)", f"{y}.astype(jnp.float32)"
            expr = (f"jax.lax.dot_general({x}, {y}, ((({r - 1},), ({r - 2},)), "
                    f"({batch}, {batch})), {kw})")
        if len(op.operands) == 3:
            acc = op.operands[2]
            acc_s = ins[2] if acc.dtype == "f32" else f"{ins[2]}.astype(jnp.float32)"
            expr = f"{acc_s} + {expr}"
        if op.result.dtype != "f32":
            expr = f"({expr}).astype({JNP[op.result.dtype]})"
        return expr

    def ops(self, ops: list[Op]) -> None:
        for op in ops:
            self.op(op)

    def inner_loop(self, op: Op) -> None:
        """A sequential loop as `lax.fori_loop` over a resident block; a loop of one static
        block inline (plan.runs_once): a fori_loop is a region the scheduler does not overlap
        with the code around it."""
        body = op.body
        assert body is not None
        t: TileVar = op.attrs["tile"]
        it = f"i_{t!r}"
        self.tile_index[t.id] = it
        em = self.em
        if runs_once(t, self.plan.blocks):
            em.line(f"{it} = 0  # one block: the loop body once, inline", op)
            for a, init in zip(body.args, op.operands):
                self.names[a.id] = self.n(init)
            self.ops(body.ops)
            for r, y in zip(op.results, body.yields):
                self.names[r.id] = self.n(y)
            return
        fn = f"loop_{t!r}"
        em.line(f"def {fn}({it}, carry):", op)
        em.indent += 1
        args = [f"v{a.id}" for a in body.args]
        for a in body.args:
            self.names[a.id] = f"v{a.id}"
        if args:
            em.line(f"{', '.join(args)}, = carry")
        self.ops(body.ops)
        em.line(f"return ({''.join(self.n(y) + ', ' for y in body.yields)})")
        em.indent -= 1
        inits = "".join(self.n(v) + ", " for v in op.operands)
        res = [f"v{r.id}" for r in op.results]
        eb = self.plan.eb(t)  # kd.tile(begin, end): known when it runs; lax.div as bounds.py
        trips = (f"jax.lax.div({self.bound(t.hi)} - {self.bound(t.lo)} + {eb - 1}, {eb})"
                 if t.dynamic else self.plan.nb(t))
        call = f"jax.lax.fori_loop(0, {trips}, {fn}, ({inits}))"
        em.line(f"{', '.join(res)}, = {call}" if res else call)
        for r in op.results:
            self.names[r.id] = f"v{r.id}"


def _no_fp8_dots(ir: KernelIR, target: str) -> None:
    for op in ir.body.walk():
        if op.kind == "dot" and op.operands[0].dtype in ("f8e4m3fn", "f8e5m2"):
            raise BackendError(f"{target} cannot multiply {op.operands[0].dtype} tiles: its "
                               "compiler rejects float8 matmul operands", op.loc,
                               "cast the operands to bfloat16 for this target, or target "
                               "tpu-v5e or newer")


def _no_f16_bit_views(ir: KernelIR, target: str) -> None:
    # libtpu 0.0.52 rejects every bitcast from or to float16 ("Invalid vector register cast",
    # all five generations); bfloat16, int and float8 views compile
    for op in ir.body.walk():
        if op.kind == "bitcast" and "f16" in (op.operands[0].dtype, op.result.dtype):
            raise BackendError(f"{target} cannot view float16 bits: its compiler rejects "
                               "float16 bitcasts", op.loc, "view bfloat16 instead, or widen "
                               "first: `x.float().view(torch.int32)`")


def render(ir: KernelIR, config: Config, target: str) -> Generated:
    mode = config.knobs.get("loop_mode", "grid")
    if mode not in LOOP_MODES:
        raise ConfigError(f"loop_mode={mode!r} is not one of {LOOP_MODES}", ir.loc,
                          "use loop_mode='grid' (a trailing grid axis) or 'inner' (fori_loop)")
    unknown = set(config.knobs) - {"loop_mode"} - {s.name for s in ir.block_syms if s.name}
    if unknown:
        raise ConfigError(f"unknown config knobs {sorted(unknown)} for the pallas backend", ir.loc,
                          "pallas knobs: loop_mode ('grid' | 'inner') and named block sizes")
    gather.check_form(ir)  # before the plan: it sizes gathers by their 1-D index
    plan = plan_for(ir, config)
    em = _Emitter()
    tgt = tpu_target(target)
    if tgt is not None and not tgt.fp8_dot:
        _no_fp8_dots(ir, tgt.name)
    if tgt is not None:
        _no_f16_bit_views(ir, tgt.name)
        tpu_shapes.check(ir, tgt.name, plan.eb)
        tpu_shapes.check_lane_offsets(ir, plan, tgt.name)
    w = _KernelWriter(ir, plan, em, nan_fixup=tgt is None)
    w.vmem_bytes = tgt.vmem_limit if tgt is not None else None  # onehot.py sizes tables by it
    gather.check_smem(ir, plan.smem | plan.twins, SMEM_MAX_ELEMS)
    scratch: list[Scratch] = w.scratch
    ins, outs = ir.inputs, ir.outputs
    refs = [f"{p.name}_ref" for p in ins] + [f"{p.name}_sref" for p in twins_of(ir, plan)] + \
        [f"{p.name}_ref" for p in outs]
    body = _Emitter()
    w.em = body
    body.indent = 1
    for pos, t in enumerate(ir.grid):
        body.line(f"i_{t!r} = pl.program_id({pos})")
    if plan.loop_axis:
        write_grid_phases(w, scratch)
    else:
        init_outputs(w)
        w.ops(ir.body.ops)
    loc = ir.loc.short() if ir.loc else "?"
    src = [
        f"# Generated by kernel_dsl from `{ir.name}` ({loc}) for target {target}.",
        f"# {config!r}",
        f"# Runs on its own: `{ir.name}(...)` on a TPU, `{ir.name}(..., interpret=True)` on CPU.",
        *([NAN_FIXUP] if any("jnp.isnan(" in ln for ln in body.lines) else []),
        "import jax",
        "import jax.numpy as jnp",
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import tpu as pltpu",
        *([PROD_HELPER] if any("_prod(" in ln for ln in body.lines) else []),
        *([SCAN_HELPER] if any("_scan(" in ln for ln in body.lines) else []),
        *([SCAN_N_HELPER] if any("_scan_n(" in ln for ln in body.lines) else []),
        "",
        *([f"VMEM_LIMIT_BYTES = {tgt.vmem_limit}  # {tgt.name}: "
           f"{tgt.vmem_bytes >> 20} MiB of VMEM per TensorCore"] if tgt else []),
        "",
        "",
        f"def {ir.name}_kernel({', '.join(refs + [name for name, _, _ in scratch])}):",
    ]
    line_map = {len(src) + i + 1: loc_ for i, loc_ in body.locs.items()}  # 1-based lines
    src += [*body.lines, "", "", *pallas_call(ir, plan, scratch, vmem_limit=tgt is not None)]
    return Generated("pallas", target, config, "\n".join(src), ir.name,
                     {"grid": plan.grid, "loop_mode": mode if plan.loop_axis else "inner",
                      "line_map": line_map,
                      "blocks": [(tuple(a.block for a in plan.axes[p.name]), p.dtype)
                                 for p in ir.params if p.name not in plan.smem],
                      "scratch": [(shape, dt) for _, shape, dt in scratch],
                      "values": sorted(w.value_shapes)})
