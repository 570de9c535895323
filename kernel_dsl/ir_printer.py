"""The stable, readable text form of the tile IR (what `kdsl show` prints)."""
from __future__ import annotations

import hashlib

from .ir import KernelIR, Op, Region, TileVar, Value, shape_str


def _ty(v: Value) -> str:
    return f"{v.dtype}{shape_str(v.shape)}"


def _tile_decl(t: TileVar) -> str:
    if t.bounded:  # kd.tile(begin, end): at most `extent` elements
        return f"{t!r} = tile({t.lo!r}, {t.hi!r}, {t.block!r}) <= {t.extent}"
    return f"{t!r} = tile({t.extent}, {t.block!r})"


def _attrs(op: Op) -> str:
    a = op.attrs
    k = op.kind
    if k in ("load", "store"):
        at = f" atomic_{a['atomic']}" if a.get("atomic") else ""
        return f"{a['tensor'].name}[{', '.join(repr(i) for i in a['index'])}]{at}"
    if k == "const":
        return repr(a["value"])
    if k == "full":
        return f"{shape_str(a['shape'])} {a['value']!r}"
    if k in ("iota", "tile_begin", "tile_id", "tile_count"):
        return repr(a["tile"])
    if k == "arange":
        return repr(a["size"])
    if k == "cast":
        return a["dtype"]
    if k == "reduce":
        return f"{a['op']} axis={a['axis']}" + (" keepdim" if a["keepdim"] else "")
    if k == "scan":
        return f"{a['op']} axis={a['axis']}" + (" reverse" if a["reverse"] else "")
    if k in ("expand_dims", "concat"):
        return f"axis={a['axis']}"
    if k == "slice":
        return f"axis={a['axis']} {a['start']}:{a['stop']}"
    if k == "reshape":
        return shape_str(a["shape"])
    if k == "permute":
        return f"perm={list(a['perm'])}"
    if k == "pad_fill":
        return f"axis={a['axis']} past {a['tile']!r} with {a['fill']!r}"
    if k == "dot" and len(op.operands) == 3:
        return "acc"
    return ""


def _loc(op: Op, locs: bool) -> str:
    return f"  # {op.loc.short()}" if (locs and op.loc is not None) else ""


def _print_region(region: Region, indent: int, lines: list[str], locs: bool) -> None:
    pad = "  " * indent
    for op in region.ops:
        operands = ", ".join(repr(v) for v in op.operands)
        attrs = _attrs(op)
        if op.kind == "loop":
            body = op.body
            assert body is not None
            carried = ", ".join(f"{a!r} = {v!r}" for a, v in zip(body.args, op.operands))
            res = ", ".join(repr(r) for r in op.results)
            head = f"{res} = " if res else ""
            types = ", ".join(_ty(r) for r in op.results)
            lines.append(f"{pad}{head}loop {_tile_decl(op.attrs['tile'])} carry({carried})"
                         f"{' -> ' + types if types else ''}:{_loc(op, locs)}")
            _print_region(body, indent + 1, lines, locs)
            if body.yields:
                lines.append(f"{pad}  yield {', '.join(repr(v) for v in body.yields)}")
            continue
        if op.kind == "store":
            lines.append(f"{pad}store {attrs} = {operands}{_loc(op, locs)}")
            continue
        if op.kind == "scan" and op.attrs["op"] == "combine":
            reg = op.attrs["combine"]
            res = ", ".join(repr(r) for r in op.results)
            args = ", ".join(repr(a) for a in reg.args)
            lines.append(f"{pad}{res} = scan combine({args}) {attrs} {operands} : "
                         f"{', '.join(_ty(r) for r in op.results)}{_loc(op, locs)}")
            _print_region(reg, indent + 1, lines, locs)
            lines.append(f"{pad}  yield {', '.join(repr(v) for v in reg.yields)}")
            continue
        args = " ".join(x for x in (attrs, operands) if x)
        lines.append(f"{pad}{op.result!r} = {op.kind} {args} : {_ty(op.result)}{_loc(op, locs)}")


def print_ir(ir: KernelIR, locs: bool = True) -> str:
    ins = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ir.inputs)
    outs = ", ".join(p.name for p in ir.returns)
    lines = [f"kernel {ir.name}({ins}) -> ({outs})"]
    for p in ir.outputs:
        init = "empty" if p.init is None else f"full {p.init!r}"
        lines.append(f"  {p.name}: {p.dtype}{list(p.shape)} = {init}")
    for s in ir.block_syms:
        used = ", ".join(repr(t) for t in ir.tiles if t.block is s)
        how = f"pinned {s.pinned}" if s.pinned is not None else "free"
        extra = f" choices={list(s.choices)}" if s.choices else ""
        lines.append(f"  block {s!r}: {how}{extra} (tiles {used})")
    for k, part in enumerate(ir.phases or [ir]):  # kd.barrier(): each grid loop, in order
        if ir.phases:
            ins = ", ".join(p.name for p in part.inputs)
            lines.append(f"  {'barrier; ' if k else ''}phase {k}({ins}) -> "
                         f"({', '.join(p.name for p in part.returns)})")
        grid = ", ".join(_tile_decl(t) for t in part.grid)
        loc = f"  # {part.grid[0].loc.short()}" if (locs and part.grid and part.grid[0].loc) else ""
        lines.append(f"  grid {grid}:{loc}")
        _print_region(part.body, 2, lines, locs)
    return "\n".join(lines) + "\n"


def fingerprint(ir: KernelIR) -> str:
    """A stable hash of the printed IR: same kernel, shapes and dtypes give the same key."""
    return hashlib.sha256(print_ir(ir, locs=False).encode()).hexdigest()[:16]
