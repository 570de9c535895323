"""`kd.barrier()`: Helion's grid-wide barrier between top-level grid loops.

All programs of the grid loop before the barrier finish before any program of the loop after it
starts, so a later loop may read what every program of an earlier one wrote (Helion's
examples/split_k_barrier.py: partial sums stored per split, summed after the barrier). Helion
runs the loops in one persistent kernel; here each grid loop is a phase, an ordinary KernelIR of
its own (`KernelIR.phases`), and the backends launch the phases one after another
(kernel_dsl/lowering/phases.py), which is the barrier.

Tracing: at the barrier the grid loop traced so far becomes a phase and a new grid body starts.
Each output a finished phase stored is read in later phases through a read-only input standing
for it (`TensorParam.readback_of`): a plain load, not a read-back (readback.py), since the whole
tensor is written. Storing into such an output after the barrier is refused (a phase's outputs
are fresh buffers; an input that is also an output is not a form the backends share).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import KernelSyntaxError, SourceLoc
from .ir import KernelIR, Region, TensorParam, TileVar
from .tracing import Tracer, current, shape_only, user_loc


@dataclass
class _Phase:
    grid: list[TileVar]
    body: Region
    first_tile: int  # the phase's tiles: tracer.tiles[first_tile:end_tile]
    end_tile: int


def barrier() -> None:
    """Grid-wide barrier separating top-level `kd.tile` loops (Helion's `hl.barrier()`): every
    program of the loop before it finishes before the loop after it starts."""
    loc = user_loc()
    tr = current()
    if tr is None:
        if shape_only():  # the host code run for output shapes only
            return
        raise KernelSyntaxError("kd.barrier() is called outside a kernel", loc,
                                "call it in a @kd.kernel function, between two top-level "
                                "`kd.tile` loops")
    if tr.region is not None:
        raise KernelSyntaxError("kd.barrier() inside a `kd.tile` loop", loc,
                                "a barrier separates top-level grid loops: call it in host code "
                                "after one loop and before the next")
    if not tr.grid_done:
        raise KernelSyntaxError("kd.barrier() does not follow a grid loop", loc,
                                "call it after a top-level `kd.tile` loop, before the next one")
    if tr.epilogue is not None and tr.epilogue.nodes:
        raise KernelSyntaxError("host code computes on the kernel's tensors before kd.barrier()",
                                loc, "compute it in a grid loop after the barrier, or after the "
                                "kernel")
    tr.phases.append(_Phase(tr.grid or [], tr.body, tr.phase_start, len(tr.tiles)))
    for p in tr.params:
        if p.is_output and id(p) in tr.stored and id(p) not in tr.sealed:
            tr.sealed[id(p)] = TensorParam(p.name, p.shape, p.dtype, readback_of=p)
    tr.grid, tr.body, tr.grid_done, tr.region = None, Region(), False, None
    tr.phase_start = len(tr.tiles)
    tr.phase_builder = _build


def check_store(tr: Tracer, p: TensorParam, loc: SourceLoc | None) -> None:
    if id(p) in tr.sealed:
        raise KernelSyntaxError(
            f"output `{p.name}` was written before kd.barrier(); a phase after it may read it "
            "but not write it", loc, "allocate another output for what this loop stores")


def _build(tr: Tracer, ir: KernelIR) -> KernelIR:
    """The kernel's IR with one phase per grid loop (the caller's `ir` holds the last one)."""
    records = tr.phases + [_Phase(ir.grid, ir.body, tr.phase_start, len(tr.tiles))]
    stored_any = {id(op.attrs["tensor"]) for r in records for op in r.body.walk()
                  if op.kind == "store"}
    phases = []
    for k, r in enumerate(records):
        ops = list(r.body.walk())
        loads = {id(op.attrs["tensor"]): op.attrs["tensor"] for op in ops if op.kind == "load"}
        stores = {id(op.attrs["tensor"]) for op in ops if op.kind == "store"}
        ins = [p for p in ir.inputs if id(p) in loads]
        ins += [p for p in loads.values() if p.readback_of is not None]
        # an output no loop stores (torch.zeros, returned as is) comes out of the first phase
        outs = [p for p in ir.outputs if id(p) in stores or
                (k == 0 and id(p) not in stored_any and p.init is not None)]
        tiles = tr.tiles[r.first_tile:r.end_tile]
        syms = sorted({id(t.block): t.block for t in tiles}.values(), key=lambda s: s.index)
        phases.append(KernelIR(f"{ir.name}_phase{k}", ins + outs, r.grid, r.body, syms, tiles,
                               outs, r.grid[0].loc))
    return KernelIR(ir.name, ir.params, records[0].grid, Region(), ir.block_syms, ir.tiles,
                    ir.returns, records[0].grid[0].loc, ir.host, ir.tunables, ir.tunable_values,
                    phases=phases)

