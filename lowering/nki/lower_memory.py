"""HBM <-> SBUF: loads and stores as `nisa.dma_copy` with `min()`-clamped edge slices, and the
initial fill of outputs the host code made with torch.zeros/full.

A tile index with block size 1 becomes an int index (the dim drops out of the HBM view, as it
drops out of the on-chip tile); other tiles become `t0:t0 + n_t`. The on-chip side of a ragged
block is sliced to the same in-range counts, so the element counts match and out-of-range lanes
are never read from or written to HBM. A gather or scatter indexed by `t.index + c` is the DMA
of `t`'s block shifted by `c`, clipped to the axis where it may leave it (shifted.py).
"""
from __future__ import annotations

from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import FLOAT_DTYPES as FLOATS
from kernel_dsl.ir import Index, Op, TensorParam, TileVar

from . import atomic_scatter
from . import gather as gt
from .names import BYTES, NL_DTYPE, lit, shape
from .shifted import Shift, shift_of
from .targets import PMAX
from .writer import Tile, Writer, at

INIT_COLS = 2048  # free size of the tile that fills an initialized output


def hbm_view(w: Writer, p: TensorParam, index: tuple[Index, ...],
             override: dict[int, str] | None = None, shift: Shift | None = None) -> str:
    """The HBM side of a DMA: NumPy-style indexing, an int for blocks of 1, `min()`-clamped
    `t0:t0 + n_t` slices for ragged tiles, `t0 + c:t0 + c + n_t` for a shifted block
    (shifted.py; `override` replaces an axis's entry)."""
    parts = []
    for axis, (ix, n) in enumerate(zip(index, p.shape)):
        if override and axis in override:
            parts.append(override[axis])
        elif ix.kind == "gather":  # only a shifted block gets here (render.check_no_gather)
            sh = shift
            assert sh is not None and sh.axis == axis, "a gather that is not a shifted block"
            first = sh.expr(w.begin(sh.tile))
            parts.append(first if w.eb(sh.tile) == 1 else f"{first}:{first} + {w.count(sh.tile)}")
        elif ix.kind == "int":
            parts.append(str(ix.value))
        elif ix.kind == "dyn":  # a device scalar: a Python int when the kernel is traced
            assert ix.scalar is not None
            parts.append(w.bound(ix.scalar, None))
        elif ix.kind == "full":
            parts.append(":")
        elif ix.kind == "slice":  # a static part of the axis
            parts.append(f"{ix.value}:{ix.stop}")
        else:
            t = ix.tile
            assert t is not None
            if w.eb(t) == 1:
                parts.append(w.begin(t))
            else:
                parts.append(f"{w.begin(t)}:{w.begin(t)} + {w.count(t)}")
    return f"{w.pname(p)}[{', '.join(parts)}]"


def sbuf_view(w: Writer, tile: Tile, override: dict[TileVar, str] | None = None) -> str:
    """The in-range part of a tile: ragged tile dims sliced to their counts (`override`
    replaces a tile dim's slice)."""
    parts = []
    ragged = False
    for d in tile.dims:
        if override and isinstance(d, TileVar) and d in override:
            parts.append(override[d])
            ragged = True
        elif isinstance(d, TileVar) and w.ragged(d):
            parts.append(f"0:{w.count(d)}")
            ragged = True
        else:
            parts.append(":")
    return f"{tile.name}[{', '.join(parts)}]" if ragged else tile.name


def load(w: Writer, op: Op) -> None:
    v = op.result
    p: TensorParam = op.attrs["tensor"]
    c = w.core(v)
    o = w.orient[v.id]
    g = gt.gather_of(op)
    if g is not None:
        gather(w, op, g)
        return
    if c.sizes[0] > PMAX and min(c.sizes) > 1:
        w.lazy[v.id] = RowBlocks(w, op)  # loaded in row blocks where a consumer needs it
        w.slots[v.id] = w.em.slot()
        return
    if min(c.sizes) > 1 and o != "N":  # a 2-D DMA keeps HBM's row-major order: rows on partitions
        raise AssertionError("layout inference loads 2-D tiles rows-on-partitions")
    tile = w.new_result(v, f"{p.name}_{v.id}")
    edges = [d for d in tile.dims if isinstance(d, TileVar) and w.ragged(d)]
    if edges and w.target.gen == 2 and v.dtype in ("f32", "bf16", "f16"):
        # NeuronCore-v2 transposes on TensorE as a matmul with the identity, where NaN/Inf in
        # one lane reaches every lane: keep the lanes past a ragged edge finite
        cond = " or ".join(f"{w.count(d)} < {w.eb(d)}" for d in edges)
        w.em.open(f"if {cond}:", comment="trn1: lanes past the edge must not be NaN/Inf")
        w.line(f"nisa.memset(dst={tile.name}, value=0.0)")
        w.em.close()
    sh = shift_of(op)
    if sh is None:
        w.line(f"nisa.dma_copy(dst={sbuf_view(w, tile)}, src={hbm_view(w, p, op.attrs['index'])})")
    else:
        shifted_dma(w, op, sh, tile, load=True)
    w.define(v, tile)


def gather(w: Writer, op: Op, g: gt.Gather) -> None:
    """A gather through an index tile: one indirect DMA, a row per partition (a rank-N index:
    one per column, an element per partition; gather.py)."""
    v = op.result
    p: TensorParam = op.attrs["tensor"]
    tile = w.new_result(v, f"{p.name}_{v.id}")
    gt.check_partitions(w, op, g, tile)
    idx = gt.index_column(w, g)
    zero = "0.0" if v.dtype in FLOATS else "0"
    w.line(f"nisa.memset(dst={tile.name}, value={zero})", comment="out-of-range ids read 0")
    _indirect_dma(w, op, g, tile, idx, load=True)
    w.define(v, tile)


def what(g: gt.Gather, p: TensorParam) -> str:
    return f"an element of `{p.name}`" if g.per_lane else f"a row of `{p.name}`"


def _indirect_dma(w: Writer, op: Op, g: gt.Gather, tile: Tile, idx: str, load: bool) -> None:
    """The indirect DMA between `tile` and the rows of the tensor that the index column `idx`
    names (a rank-N index: an element per partition, a DMA per column); ids outside it skipped."""
    col = gt.column(w, g, tile)
    sbuf = f"{tile.name}{col}" if col else sbuf_view(w, tile)
    hbm = gt.indirect_view(w, op, g, idx + col)
    dst, src = (sbuf, hbm) if load else (hbm, sbuf)
    w.line(f"nisa.dma_copy(dst={dst}, src={src}, oob_mode=nisa.oob_mode.skip)",
           comment=f"{'gather' if load else 'scatter'}: {what(g, op.attrs['tensor'])} per partition")
    if g.per_lane and tile.phys[1] > 1:
        w.em.close()


def scatter(w: Writer, op: Op, g: gt.Gather) -> None:
    """A scatter through an index tile: one indirect DMA from the value's tile (gather.py)."""
    p: TensorParam = op.attrs["tensor"]
    tile = atomic_scatter.value_tile(w, op, g, f"scatter into `{p.name}`")
    _indirect_dma(w, op, g, tile, gt.index_column(w, g), load=False)


def shifted_dma(w: Writer, op: Op, sh: Shift, tile: Tile, load: bool) -> None:
    """A load or store of a shifted block (shifted.py): the ordinary DMA of the tile's block
    moved by `sh.by` elements along the axis; where that may leave `[0, size)`, the DMA is
    clipped to the in-bounds elements (Python ints at trace time) and a load's other lanes
    are 0 (docs/ir.md "Gather and scatter")."""
    p: TensorParam = op.attrs["tensor"]
    index = op.attrs["index"]
    t = sh.tile
    note = sh.describe(p)
    if sh.in_bounds:
        hbm = hbm_view(w, p, index, shift=sh)
        src, dst = (hbm, sbuf_view(w, tile)) if load else (sbuf_view(w, tile), hbm)
        w.line(f"nisa.dma_copy(dst={dst}, src={src})", comment=note)
        return
    first, n, size = sh.expr(w.begin(t)), w.count(t), p.shape[sh.axis]
    lo, hi = w.fresh(f"{w.pname(p)}_lo"), w.fresh(f"{w.pname(p)}_hi")
    w.line(f"{lo} = max(0, {first})", comment=f"{note}, clipped to [0, {size})")
    w.line(f"{hi} = min({size}, {first} + {n})")
    if load:
        w.em.open(f"if {lo} > {first} or {hi} < {first} + {n}:",
                  comment="lanes whose index is outside the axis read 0")
        w.line(f"nisa.memset(dst={tile.name}, value={'0.0' if tile.dtype in FLOATS else '0'})")
        w.em.close()
    w.em.open(f"if {hi} > {lo}:")
    if w.eb(t) == 1:
        hbm = hbm_view(w, p, index, {sh.axis: lo})
        on_chip = sbuf_view(w, tile)
    else:
        hbm = hbm_view(w, p, index, {sh.axis: f"{lo}:{hi}"})
        on_chip = sbuf_view(w, tile, {t: f"{lo} - ({first}):{hi} - ({first})"})
    src, dst = (hbm, on_chip) if load else (on_chip, hbm)
    w.line(f"nisa.dma_copy(dst={dst}, src={src})")
    w.em.close()


class RowBlocks:
    """A load with more than 128 rows (a whole dim of an input, e.g. `y[:, tn]` with K = 4096):
    DMA'd in blocks of 128 rows into one (128, blocks, F) tile, the canonical NKI layout of a
    matmul's moving operand; a consumer that needs it transposed gets (F, rows) built from the
    blocks with TensorE transposes. Written once, where the load was."""

    def __init__(self, w: Writer, op: Op):
        self.w, self.op = w, op
        self.v = op.result
        c = w.core(self.v)
        self.rows, self.cols = c.sizes
        self.free_dim = c.dims[1]
        self.row_axis = c.axes[0]
        self.tile: Tile | None = None

    def row_ranges(self) -> list[tuple[int, int]]:
        return [(r0, min(PMAX, self.rows - r0)) for r0 in range(0, self.rows, PMAX)]

    def blocks(self) -> Tile:
        """The (128, blocks, F) tile (F = the free size), loaded block by block."""
        if self.tile is not None:
            return self.tile
        w, op = self.w, self.op
        p: TensorParam = op.attrs["tensor"]
        index = list(op.attrs["index"])
        row_ix = index[self.row_axis]  # type: ignore[index]
        if row_ix.kind not in ("full", "slice"):
            w.too_big(row_ix.tile, self.rows, "on partitions", PMAX)
        sh = shift_of(op)
        if sh is not None and not sh.in_bounds:
            raise ConfigError(f"the NKI lowering cannot load {sh.describe(p)} in row blocks: the "
                              "shifted block may leave the axis", op.loc,
                              "use a block size <= 128 for the rows, or the pallas or triton "
                              "backend")
        n = len(self.row_ranges())
        name = w.fresh(f"{p.name}_{self.v.id}")
        with at(w, self.v):
            w.loc = op.loc
            w.line(f"{name} = nl.ndarray(({PMAX}, {n}, {self.cols}), dtype={NL_DTYPE[self.v.dtype]}, "
                   "buffer=nl.sbuf)", comment=f"{self.rows} rows in blocks of {PMAX}")
            w.sbuf_estimate += n * self.cols * BYTES[self.v.dtype]
            w.role(self.free_dim, "free")
            cols = ":"
            if isinstance(self.free_dim, TileVar) and w.ragged(self.free_dim):
                cols = f"0:{w.count(self.free_dim)}"
            for j, (r0, rows) in enumerate(self.row_ranges()):
                src = hbm_view(w, p, tuple(index), {self.row_axis: f"{r0}:{r0 + rows}"},
                               shift_of(op))
                w.line(f"nisa.dma_copy(dst={name}[0:{rows}, {j}, {cols}], src={src})")
        self.tile = Tile(name, (PMAX, n * self.cols), self.v.dtype)
        return self.tile

    def chunks(self) -> list[tuple[str, int]]:
        """(view, rows) per row block, for a matmul contracting over the rows."""
        name = self.blocks().name
        return [(f"{name}[0:{rows}, {j}, :]", rows) for j, (_, rows) in enumerate(self.row_ranges())]

    def transposed(self) -> Tile:
        """(F, rows): the rows on the free axis."""
        w = self.w
        blocks = self.blocks()
        if self.cols > PMAX:
            w.too_big(self.free_dim, self.cols, "on partitions (for a transpose)", PMAX)
        with at(w, self.v):
            out = Tile(w.fresh(f"{blocks.name}_T"), (self.cols, self.rows), self.v.dtype,
                       (self.free_dim, None))
            w.alloc(out.name, out.phys, out.dtype, dims=out.dims)
            for j, (r0, rows) in enumerate(self.row_ranges()):
                ps = w.alloc("psum_t", (self.cols, rows), self.v.dtype, "psum")
                w.line(f"nisa.nc_transpose(dst={ps}, data={blocks.name}[0:{rows}, {j}, :])")
                w.line(f"nisa.tensor_copy(dst={out.name}[:, {r0}:{r0 + rows}], src={ps})")
        return out


def store(w: Writer, op: Op) -> None:
    g = gt.gather_of(op, atomic=True)
    if g is not None and op.attrs.get("atomic"):  # left by expand.py: a RMW per lane
        atomic_scatter.render(w, op, g)
        return
    if g is not None:
        scatter(w, op, g)
        return
    x = op.operands[0]
    p: TensorParam = op.attrs["tensor"]
    c = w.core(x)
    o = "N" if min(c.sizes) > 1 else w.orient.get(x.id, "N")
    tile = w.get(x, o)
    sh = shift_of(op)
    if sh is not None:
        shifted_dma(w, op, sh, tile, load=False)
        return
    w.line(f"nisa.dma_copy(dst={hbm_view(w, p, op.attrs['index'])}, src={sbuf_view(w, tile)})")


def init_outputs(w: Writer) -> None:
    """Outputs made with torch.zeros/ones/full start with their fill value in HBM: a memset tile
    DMA'd over every row block (before any store)."""
    for p in w.ir.outputs:
        if p.init is None:
            continue
        dims = list(p.shape)
        rows = dims[-2] if len(dims) >= 2 else 1
        cols = dims[-1]
        pr, fc = min(rows, 128), min(cols, INIT_COLS)
        name = w.fresh(f"{w.pname(p)}_init")
        value = lit(float(p.init)) if p.dtype in ("f32", "bf16", "f16") else str(int(p.init))
        w.em.line(f"{name} = nl.ndarray({shape((pr, fc))}, dtype={NL_DTYPE[p.dtype]}, "
                  "buffer=nl.sbuf)", comment=f"`{p.name}` starts as {value} (host code)")
        w.em.line(f"nisa.memset(dst={name}, value={value})")
        lead = [f"i{k}" for k in range(len(dims) - 2)]
        for k, n in enumerate(dims[:-2]):
            w.em.open(f"for {lead[k]} in range({n}):")
        idx = list(lead)
        if len(dims) >= 2:
            w.em.open(f"for r0 in range(0, {rows}, {pr}):")
        w.em.open(f"for c0 in range(0, {cols}, {fc}):")
        if len(dims) >= 2:
            idx.append(f"r0:r0 + min({pr}, {rows} - r0)")
        idx.append(f"c0:c0 + min({fc}, {cols} - c0)")
        src_rows = f"0:min({pr}, {rows} - r0)" if len(dims) >= 2 else "0:1"
        w.em.line(f"nisa.dma_copy(dst={w.pname(p)}[{', '.join(idx)}], "
                  f"src={name}[{src_rows}, 0:min({fc}, {cols} - c0)])")
        for _ in range(len(lead) + (2 if len(dims) >= 2 else 1)):  # a 1-D output opens one loop
            w.em.close()


RULES = {"load": load, "store": store}
