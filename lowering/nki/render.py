"""Renders the tile IR as standalone NKI (>= 0.3, `import nki`) source.

The kernel is one `@nki.jit` function over the input tensors (scalar arguments are constants of
the specialization). Outputs are allocated at its top level in `nl.shared_hbm` and returned. NKI
has no launch grid beyond the LNC degree, so the IR's parallel grid becomes nested Python loops
inside the kernel, like its sequential loops: all of them unroll at trace time, so block indices,
edge counts and mask offsets are Python ints. Layout rules: layout.py; op rules: lower_*.py.
"""
from __future__ import annotations

from kernel_dsl.config import Config, block_values
from kernel_dsl.errors import BackendError, ConfigError
from kernel_dsl.ir import KernelIR

from .. import Generated
from . import (
    atomic_scatter,
    lower_elementwise,
    lower_matmul,
    lower_memory,
    lower_reduce,
    lower_scan,
    lower_shapes,
)
from .emitter import Emitter
from .expand import expand
from .gather import gather_of
from .names import HBM_DTYPE, index, shape
from .shifted import shift_of
from .static_reach import static_reach
from .targets import TARGETS, Target
from .writer import Rule, Writer

RULES: dict[str, Rule] = {**lower_memory.RULES, **lower_elementwise.RULES, **lower_matmul.RULES,
                          **lower_reduce.RULES, **lower_scan.RULES, **lower_shapes.RULES}
KNOBS: tuple[str, ...] = ()  # the NKI backend has no knobs besides block sizes


def target_of(name: str, ir: KernelIR) -> Target:
    tgt = TARGETS.get(name)
    if tgt is None:
        raise ConfigError(f"target {name!r} is not a Trainium target", ir.loc,
                          f"the nki backend renders for {', '.join(TARGETS)}")
    return tgt


def check_knobs(ir: KernelIR, config: Config) -> None:
    named = {s.name for s in ir.block_syms if s.name}
    unknown = sorted(set(config.knobs) - named - set(KNOBS))
    if unknown:
        raise ConfigError(f"unknown config knobs {unknown} for the nki backend", ir.loc,
                          "the nki backend takes block sizes only (block_sizes=[...] and named "
                          "kd.block_size knobs); loop_mode and other knobs belong to other backends")


def check_no_gather(ir: KernelIR) -> None:
    """Gathers and scatters the NKI lowering takes: `t.index + c` (shifted.py: the tile's block
    shifted by `c`, an ordinary DMA) and one index tile (gather.py: per-partition indirect DMA,
    `.ap(vector_offset=)`, a row per partition, or an element per partition and column for a
    rank-N index); atomics through a 1-D index tile (atomic_scatter.py: a read-modify-write per
    lane)."""
    for op in ir.body.walk():
        if op.kind in ("load", "store") and any(ix.kind == "gather" for ix in op.attrs["index"]):
            g = gather_of(op, atomic=True)
            if g is not None and op.attrs.get("atomic"):
                atomic_scatter.check(op, g)
                continue
            if shift_of(op) is not None or g is not None:
                continue
            what = "gather from" if op.kind == "load" else "scatter into"
            rank = max(ix.scalar.rank for ix in op.attrs["index"] if ix.kind == "gather")
            raise ConfigError(
                f"the NKI lowering cannot {what} `{op.attrs['tensor'].name}` through "
                f"{'an index tile' if rank == 1 else f'a rank-{rank} index tile'}: NKI's "
                "indirect DMA takes one index tile per access", op.loc,
                "index one axis with an index tile, or use the pallas or triton backend")


def check_dtypes(ir: KernelIR, tgt: Target) -> None:
    """torch's float8_e4m3fn is NKI's float8_e4m3fn, a NeuronCore-v4 type (notes/nki.md §2). The
    older cores' float8_e4m3 is another format (IEEE-style: inf and NaN, largest 240)."""
    if tgt.gen >= 4:
        return
    found = [(f"argument `{p.name}`", ir.loc) for p in ir.inputs + ir.outputs
             if p.dtype == "f8e4m3fn"]
    found += [("a value", op.loc) for op in ir.body.walk()
              if any(r.dtype == "f8e4m3fn" for r in op.results)]
    if found:
        what, loc = found[0]
        raise BackendError(f"{tgt.name} ({tgt.version}) has no float8_e4m3fn ({what}): its "
                           "float8_e4m3 is a different format", loc,
                           "target trn3, or use torch.float8_e5m2, which every NeuronCore has")


def write(ir: KernelIR, config: Config, target: str) -> tuple[Writer, list[str]]:
    """The writer (with roles and the SBUF estimate) and the kernel body's lines."""
    tgt = target_of(target, ir)
    check_dtypes(ir, tgt)
    check_knobs(ir, config)
    check_no_gather(ir)
    ir = expand(ir)  # `//`, `%`, rounding, log1p/expm1: no NKI instruction of their own
    ir = static_reach(ir)  # loops bounded from memory: their static reach, masked at run time
    blocks = block_values(ir, config)
    em = Emitter(indent=1)
    w = Writer(ir, blocks, tgt, em, RULES)
    for p in ir.outputs:
        em.line(f"{w.pname(p)} = nl.ndarray({shape(p.shape)}, dtype={HBM_DTYPE[p.dtype]}, "
                "buffer=nl.shared_hbm)")
    w.prologue = em.slot()
    lower_memory.init_outputs(w)
    for t in ir.grid:
        em.open(f"for {index(t)} in range({w.nb(t)}):", t.loc,
                f"grid {t!r}: {t.extent} in blocks of {w.eb(t)}")
        w.tile_header(t)
    w.region(ir.body)
    for _ in ir.grid:
        em.close()
    returns = ", ".join(w.pname(p) for p in ir.returns)
    em.line(f"return {returns}")
    return w, em.lines()


def render(ir: KernelIR, config: Config, target: str) -> Generated:
    w, body = write(ir, config, target)
    tgt = w.target
    loc = ir.loc.short() if ir.loc else "?"
    args = ", ".join(w.pname(p) for p in ir.inputs)
    src = [
        f"# Generated by kernel_dsl from `{ir.name}` ({loc}) for {tgt.name} ({tgt.version}).",
        f"# {config!r}",
        "# NKI >= 0.3. Runs as-is on Trainium, on CPU through nki.simulate(kernel)(*arrays) or",
        "# kernel_dsl's NKI interpreter. On-chip tiles are (partitions <= 128, free): a tile's",
        "# second-to-last dim on partitions, its last dim on the free axis, leading unit dims",
        "# dropped; `_T` tiles are TensorE transposes, `psum_*` tiles hold TensorE results.",
        "import nki",
        "import nki.isa as nisa",
        "import nki.language as nl",
        "",
        "",
        "@nki.jit",
        f"def {ir.name}({args}):",
        *body,
        "",
    ]
    meta = {"roles": {k: sorted(v) for k, v in w.roles.items()}, "sbuf_estimate": w.sbuf_estimate}
    return Generated("nki", tgt.name, config, "\n".join(src), ir.name, meta)
