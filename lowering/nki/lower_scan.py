"""`scan`: an inclusive scan along the free axis, as a log-step (Hillis-Steele) scan of free-axis
slices: step k sets lane i to op(y[i - k], y[i]) for i >= k (reverse: op(y[i], y[i + k]) for
i + k < n) and copies the other lanes, for k = 1, 2, 4, ... < n, between two SBUF tiles.

`nisa.tensor_tensor_scan` (VectorE) computes in float32 only, so int32 sums would lose bits past
2**24; `nisa.tensor_tensor` of int32 tiles runs on GpSimd's native 32-bit integer ALU (exact, and
wrapping as torch's int32 does: see lower_elementwise.int_arith), and of f32 tiles on VectorE.
The layout puts the scanned dim on the free axis (layout.py); a scan along the partitions is
transposed first, as a reduction is. A general combine function (a region) runs the same steps
with the region's ops on the shifted slices (scan_combine.py).
"""
from __future__ import annotations

from kernel_dsl.ir import Op

from .layout import orient_with
from .scan_combine import combine_scan, log_steps
from .writer import Tile, Writer

OPS = {"add": "nl.add", "mul": "nl.multiply", "max": "nl.maximum", "min": "nl.minimum",
       "and": "nl.bitwise_and", "or": "nl.bitwise_or", "xor": "nl.bitwise_xor"}


def scan(w: Writer, op: Op) -> None:
    if op.attrs["op"] == "combine":
        return combine_scan(w, op)
    r, x = op.result, op.operands[0]
    xc = w.core(x)
    pos = xc.pos_of(op.attrs["axis"])
    ro = w.orient[r.id]
    if pos is None or xc.sizes[pos] == 1:  # a scan over one lane changes no value
        w.alias(r, x, ro, w.orient.get(x.id, "N"))
        return
    src = w.get(x, orient_with(pos, on_partitions=False))
    res = w.new_result(r)
    assert res.phys == src.phys, (res.phys, src.phys)
    n = src.phys[1]
    steps = log_steps(n)
    tmp = Tile(w.fresh(f"{res.name}_scan"), res.phys, res.dtype, res.dims)
    w.alloc(tmp.name, tmp.phys, tmp.dtype, dims=tmp.dims)
    cur = src.name
    fn, rev = OPS[op.attrs["op"]], op.attrs["reverse"]
    for s, k in enumerate(steps):
        dst = res.name if (len(steps) - 1 - s) % 2 == 0 else tmp.name
        keep = f"{n - k}:{n}" if rev else f"0:{k}"  # lanes with no partner k away
        out = f"0:{n - k}" if rev else f"{k}:{n}"
        w.line(f"nisa.tensor_copy(dst={dst}[:, {keep}], src={cur}[:, {keep}])",
               comment=f"scan step {k}" + (" (reverse)" if rev else ""))
        w.line(f"nisa.tensor_tensor(dst={dst}[:, {out}], data1={cur}[:, 0:{n - k}], "
               f"data2={cur}[:, {k}:{n}], op={fn})")
        cur = dst
    w.define(r, res)


RULES = {"scan": scan}
