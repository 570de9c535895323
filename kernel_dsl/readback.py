"""Reading back an output the kernel wrote (Helion's examples/squeeze_and_excitation_net.py:
`c[tile_m, tile_k] = relu(...)` in one loop, `c[tile_m, tile_k]` read by a later loop).

Loops run in program order within a grid program, so a read sees what the same program stored
before it, provided that
- every read and every store of the output share no enclosing sequential loop (their innermost
  common region is the grid body): a store in one `kd.tile` loop, reads in a later sibling loop
  (or in straight-line code after it). A read and a store inside one loop nest would make a
  later iteration read an earlier one's store: refused;
- the read touches only elements this program wrote: at every axis where a store is indexed by
  a grid tile (or a `kd.grid` index), the read has the same entry. Elements other programs
  write are not visible (programs run in parallel): refused;
- no atomic updates the output (other programs' updates land in any order).
A read of exactly the block the last store of that output wrote, in the same region (`d[t] =
v` then `d[t]` in one loop body), is that store's value (forwarded: no load). Any other read is
an ordinary `load` with `attrs["readback"] = True`; the backends order it after the program's
earlier stores (docs/ir.md "Reading back an output").
"""
from __future__ import annotations

from typing import Any

from .errors import KernelSyntaxError, SourceLoc
from .ir import Index, Region, TensorParam

_HINT = ("keep the value in a variable, or split the work in two kernels: a later grid loop "
         "may read only what the same grid program stored in an earlier `kd.tile` loop")


def _grid_entry(ix: Index) -> bool:
    return (ix.kind == "tile" and ix.tile is not None and ix.tile.kind == "grid") or \
        ix.kind in ("dyn", "gather")


def _same(a: Index, b: Index) -> bool:
    return a.kind == b.kind and a.tile is b.tile and a.scalar is b.scalar and \
        a.value == b.value and a.stop == b.stop


def _shared_loop(top: Region, a: Region, b: Region) -> bool:
    """True if some sequential loop body encloses both regions."""
    seen = set()
    r: Region | None = a
    while r is not None:
        seen.add(id(r))
        r = r.parent
    r = b
    while r is not None and id(r) not in seen:
        r = r.parent
    return r is not None and r is not top


def _accesses(tr: Any) -> dict[int, list[tuple[str, tuple[Index, ...], Region, Any, Any]]]:
    """id(output) -> (kind, index, region, loc, stored value) per access, in program order."""
    return tr.__dict__.setdefault("_out_accesses", {})


def on_store(tr: Any, p: TensorParam, index: tuple[Index, ...], atomic: bool,
             loc: SourceLoc | None, value: Any) -> None:
    region = tr.region
    for kind, _, r, rloc, _ in _accesses(tr).get(id(p), []):
        if kind == "read" and _shared_loop(tr.body, r, region):
            raise KernelSyntaxError(f"output `{p.name}` is stored in the loop that reads it "
                                    f"back (read at {rloc.short() if rloc else '?'}): a later "
                                    "iteration would read an earlier one's store", loc, _HINT)
        if kind == "read" and atomic:
            raise KernelSyntaxError(f"kd.atomic into `{p.name}`, which the kernel reads back",
                                    loc, "other grid programs' atomics land in any order: "
                                    "read it in a second kernel")
    _accesses(tr).setdefault(id(p), []).append(
        ("atomic" if atomic else "store", index, region, loc, value))


def on_read(tr: Any, p: TensorParam, index: tuple[Index, ...], loc: SourceLoc | None) -> Any:
    """The stored value to forward (a read of the block just stored), else None: load it."""
    stores = [a for a in _accesses(tr).get(id(p), []) if a[0] != "read"]
    if stores:
        kind, sindex, region, _, value = stores[-1]
        if kind == "store" and region is tr.region and len(sindex) == len(index) and all(
                _same(a, b) for a, b in zip(sindex, index)):
            return value
    if not stores:
        raise KernelSyntaxError(f"reading output `{p.name}` before the kernel stores into it",
                                loc, "outputs start as the host code allocated them only "
                                "where an earlier loop of the same grid program stored; "
                                + _HINT)
    for kind, sindex, region, sloc, _ in stores:
        where = sloc.short() if sloc else "?"
        if kind == "atomic":
            raise KernelSyntaxError(f"reading output `{p.name}`, which kd.atomic_* updates "
                                    f"({where})", loc, "other grid programs' atomics land in any "
                                    "order: read it in a second kernel")
        if _shared_loop(tr.body, region, tr.region):
            raise KernelSyntaxError(f"reading output `{p.name}` inside the loop that stores it "
                                    f"({where})", loc, _HINT)
        for axis, (s, r) in enumerate(zip(sindex, index)):
            if _grid_entry(s) and not _same(s, r):
                raise KernelSyntaxError(
                    f"reading `{p.name}[...]` at axis {axis} as {r!r}, but the store at {where} "
                    f"writes it per grid program ({s!r}): other programs' elements are not "
                    "visible", loc, f"index axis {axis} with {s!r}, as the store does")
    _accesses(tr)[id(p)].append(("read", index, tr.region, loc, None))
    return None
