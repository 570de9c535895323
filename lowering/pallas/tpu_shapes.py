"""Shape ops a TPU generation's compiler rejects (docs/ir.md "Shape ops"), as BackendErrors
before Mosaic's own message.

libtpu 0.0.52, compile-only: tpu-v4's Mosaic cannot split a minor (lane) dim wider than 128
into a minor dim that is not a multiple of 128 (`[m, 256] -> [m, 128, 2]`, `[m, 300] -> [m, 3,
100]`, `[m, 256] -> [m, 256, 1]`: "infer-vector-layout: unsupported shape cast", "Sublane gather
not supported by this TPU generation"); tpu-v5e and newer compile them.
"""
from __future__ import annotations

from typing import Any

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import KernelIR, TileVar, shape_str

LANES = 128


def check(ir: KernelIR, target: str, eb: Any) -> None:
    if target != "tpu-v4":
        return
    for op in ir.body.walk():
        if op.kind != "reshape":
            continue
        x, r = op.operands[0], op.result
        old, new = (eb(v.shape[-1]) if isinstance(v.shape[-1], TileVar) else v.shape[-1]
                    for v in (x, r))
        if old > LANES and new < old and new % LANES:
            raise BackendError(
                f"{target} cannot reshape a {shape_str(x.shape)} tile to {shape_str(r.shape)}: "
                f"its compiler does not split a minor dim of {old} lanes into one of {new} "
                "(Mosaic: unsupported shape cast)", op.loc,
                "keep the minor dim a multiple of 128 (for rope: "
                "`x.reshape([tm, 2, d // 2]).permute(0, 2, 1)` then kd.split, which is two "
                "slices), or target tpu-v5e or newer")
