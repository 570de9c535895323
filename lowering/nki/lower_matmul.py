"""`dot` as `nisa.nc_matmul`: `dst[M, N] = stationary[K, M].T @ moving[K, N]` into PSUM, with the
contraction K on partitions of both operands, K <= 128 per instruction (longer K accumulates in
PSUM over 128-row chunks), M <= 128, and N <= 512 per PSUM bank (wider N is split). The result is
evicted with `tensor_copy`, or folded into the f32 accumulator with one `tensor_tensor(add)`
reading PSUM (the IR's `acc + a @ b` with f32 products and no intermediate rounding).

`a[M, K]` arrives rows-on-partitions, so the stationary operand is its transpose (TensorE
`nc_transpose`, once per value); `b[K, N]` is already K-on-partitions.
"""
from __future__ import annotations

from kernel_dsl.ir import Op, Value

from .layout import orient_with
from .names import BYTES, NL_DTYPE
from .targets import MOVING_FMAX, PMAX
from .writer import Tile, Writer, at


def k_major(w: Writer, x: Value, pos_k: int) -> list[tuple[str, int]]:
    """`x` with its contraction dim (core position `pos_k`) on partitions, as (view, rows)
    chunks of at most 128 rows. A contraction longer than 128 lies on the free axis of `x`; it is
    transposed block by block into one (128, chunks, X) tile, written once next to `x`."""
    c = w.core(x)
    k = c.sizes[pos_k]
    if x.id in w.lazy and pos_k == 0:  # a load of more than 128 rows: its row blocks
        return w.lazy[x.id].chunks()  # type: ignore[no-any-return]
    if k <= PMAX:
        t = w.get(x, orient_with(pos_k, on_partitions=True))
        return [(t.name, k)]
    key = (f"%{x.id}", f"k{pos_k}")
    if key not in w.converted:
        with at(w, x):
            src = w.get(x, orient_with(pos_k, on_partitions=False))
            xdim = src.phys[0]
            n = -(-k // PMAX)
            name = w.fresh(f"{src.name}_kT")
            w.line(f"{name} = nl.ndarray(({PMAX}, {n}, {xdim}), dtype={NL_DTYPE[src.dtype]}, "
                   "buffer=nl.sbuf)", comment=f"contraction of {k} in {n} blocks of 128 rows")
            w.sbuf_estimate += n * xdim * BYTES[src.dtype]
            for j in range(n):
                rows = min(PMAX, k - j * PMAX)
                ps = w.alloc("psum_t", (rows, xdim), src.dtype, "psum")
                w.line(f"nisa.nc_transpose(dst={ps}, data={src.name}[:, {j * PMAX}:{j * PMAX + rows}])")
                w.line(f"nisa.tensor_copy(dst={name}[0:{rows}, {j}, :], src={ps})")
            w.converted[key] = Tile(name, (PMAX, n * xdim), src.dtype)
    name = w.converted[key].name
    return [(f"{name}[0:{min(PMAX, k - j * PMAX)}, {j}, :]", min(PMAX, k - j * PMAX))
            for j in range(-(-k // PMAX))]


def dot(w: Writer, op: Op) -> None:
    r = op.result
    a, b = op.operands[:2]
    acc = op.operands[2] if len(op.operands) == 3 else None
    rc = w.core(r)
    m, n = rc.sizes
    if m > PMAX:
        w.too_big(rc.dims[0], m, "on partitions (the matmul's M)", PMAX)
    w.role(rc.dims[1], "moving")
    stat = k_major(w, a, 1)
    mov = k_major(w, b, 0)
    acc_t = w.get(acc, "N") if acc is not None else None
    res = w.new_result(r)
    for n0 in range(0, n, MOVING_FMAX):
        width = min(MOVING_FMAX, n - n0)
        cols = "" if width == n else f"[:, {n0}:{n0 + width}]"
        ps = w.alloc("psum_mm", (m, width), "f32", "psum")
        for (s, _), (mv, _) in zip(stat, mov):
            w.line(f"nisa.nc_matmul(dst={ps}, stationary={s}, moving={mv}{cols})")
        if acc_t is not None:
            w.line(f"nisa.tensor_tensor(dst={res.name}{cols}, data1={ps}, "
                   f"data2={acc_t.name}{cols}, op=nl.add)")
        else:
            w.line(f"nisa.tensor_copy(dst={res.name}{cols}, src={ps})")
    w.define(r, res)


RULES = {"dot": dot}
