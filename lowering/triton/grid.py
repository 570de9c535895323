"""The program grid of a Triton kernel: the layout check of a config, the block index of every
grid tile from the one flat `tl.program_id(0)` (grouped for L2 reuse with `group_m`), and the
torch launcher that allocates the outputs and launches one program per grid point."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_dsl.config import Config, block_values
from kernel_dsl.errors import ConfigError
from kernel_dsl.ir import KernelIR, TileVar

from .exprs import TORCH, lit
from .layout import MAX_NUMEL, Layout, make_layout, max_numel

if TYPE_CHECKING:
    from .render import _KernelWriter


def prod(xs: Any) -> int:
    """The product of a shape's sizes (1 for a scalar's empty shape)."""
    n = 1
    for s in xs:
        n *= s
    return n


def make_layout_for(ir: KernelIR, config: Config) -> Layout:
    """The layout of `config`, refused where a value exceeds what Triton can hold."""
    layout = make_layout(ir, block_values(ir, config))
    numel, where = max_numel(ir, layout)
    if numel > MAX_NUMEL:
        loc = where.op.loc if where is not None and where.op is not None else ir.loc
        raise ConfigError(f"{config!r} gives a value of {numel} elements in one program; "
                          f"Triton holds at most {MAX_NUMEL}", loc,
                          "use smaller block sizes, or tile the `:` axes of large dims with "
                          "`kd.tile` instead of loading them whole")
    return layout


def split(w: "_KernelWriter", pid: str, tiles: list[TileVar]) -> None:
    """Row-major: the block index of each tile from `pid`, the last tile fastest."""
    counts = [w.lay.nb(t) for t in tiles]
    inner = prod(counts)
    for t, c in zip(tiles, counts):
        inner //= c
        if c == 1:
            w.em.line(f"i_{t!r} = 0")
        elif inner == 1:
            w.em.line(f"i_{t!r} = {pid} % {c}")
        elif t is tiles[0]:
            w.em.line(f"i_{t!r} = {pid} // {inner}")
        else:
            w.em.line(f"i_{t!r} = {pid} // {inner} % {c}")


def grid_header(w: "_KernelWriter", group: int) -> int:
    """Block indices of the grid tiles from one flat program id; returns the program count.

    With `group_m` > 1 the last two grid tiles are walked in groups of `group_m` rows, column by
    column (Triton's matmul tutorial): programs running at the same time then share blocks of
    both operands in L2 instead of streaming one operand whole."""
    grid = w.ir.grid
    counts = [w.lay.nb(t) for t in grid]
    total = prod(counts)
    if len(counts) == 1:
        w.em.line(f"i_{grid[0]!r} = tl.program_id(0)")
    elif group <= 1 or counts[-1] == 1 or counts[-2] <= group:
        w.em.line(f"pid = tl.program_id(0)  # {' x '.join(map(str, counts))} programs, "
                  "the last tile fastest")
        split(w, "pid", grid)
    else:
        tm, tn = grid[-2:]
        cm, cn = counts[-2:]
        em = w.em
        em.line(f"pid = tl.program_id(0)  # {' x '.join(map(str, counts))} programs; "
                f"{tm!r} x {tn!r} in groups of {group} rows of tiles")
        if len(grid) > 2:
            split(w, f"(pid // {cm * cn})", grid[:-2])
            em.line(f"pid_mn = pid % {cm * cn}")
        else:
            em.line("pid_mn = pid")
        em.line(f"first = pid_mn // {group * cn} * {group}")
        em.line(f"rows = tl.minimum({cm} - first, {group})")
        em.line(f"i_{tm!r} = first + pid_mn % rows")
        em.line(f"i_{tn!r} = pid_mn % {group * cn} // rows")
    for t in grid:
        w.tile_header(t, f"i_{t!r}")
    return total


TARGETS = ("cuda", "cpu")


def launcher(ir: KernelIR, kname: str, programs: int, warps: int, stages: int) -> list[str]:
    """The host function: allocates the outputs (filled first where the IR says `init`), launches
    one program per grid point and returns the outputs the kernel returns."""
    taken = {"torch", "triton", "tl", kname}
    names = {p.name: p.name + "_" if p.name in taken else p.name for p in ir.params}
    ins, outs = ir.inputs, ir.outputs
    first = names[ins[0].name]
    lines = [f"def {ir.name}({', '.join(names[p.name] for p in ins)}):",
             f'    """{", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ins)} -> '
             f'{", ".join(p.name for p in ir.returns)}, fresh tensors on the inputs\' device."""']
    lines += [f"    {names[p.name]} = {names[p.name]}.contiguous()" for p in ins]
    for p in outs:
        shape, dt = tuple(p.shape), TORCH[p.dtype]
        if p.init is None:
            lines.append(f"    {names[p.name]} = torch.empty({shape}, dtype={dt}, device={first}.device)")
        else:
            init = p.init if p.dtype in ("f32", "bf16", "f16") else int(p.init)
            lines.append(f"    {names[p.name]} = torch.full({shape}, {lit(init)}, dtype={dt}, "
                         f"device={first}.device)")
    args = ", ".join(names[p.name] for p in ins + outs)
    rets = [names[p.name] for p in ir.returns]
    lines += [f"    {kname}[({programs},)]({args}, num_warps={warps}, num_stages={stages})",
              f"    return ({rets[0]},)" if len(rets) == 1 else f"    return ({', '.join(rets)})",
              ""]
    return lines
