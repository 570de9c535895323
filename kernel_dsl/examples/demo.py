"""The README's first command: a DSL matmul run on CPU, checked against PyTorch, then its tile IR
and the Pallas source it became."""
from __future__ import annotations

import time

import torch

import kernel_dsl as kd


@kd.tpu_kernel
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(300, 257, dtype=torch.bfloat16)  # ragged: not multiples of any block size
    y = torch.randn(257, 130, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    out = matmul(x, y)
    first = time.perf_counter() - t0
    ref = (x.float() @ y.float()).to(torch.bfloat16)
    err = (out.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    ok = err <= 2 ** -7 * scale
    print(f"matmul {tuple(x.shape)} @ {tuple(y.shape)} bf16 on CPU (Pallas interpret mode): "
          f"max |out - torch| = {err:.3g} (scale {scale:.3g}) -> {'OK' if ok else 'MISMATCH'}; "
          f"first call {first:.2f} s (trace + render + jit)")
    compiled = torch.compile(matmul, fullgraph=True, backend="aot_eager")
    same = torch.equal(compiled(x, y), out)
    print(f"inside torch.compile(fullgraph=True): {'same result' if same else 'DIFFERENT'}\n")
    small_x, small_y = torch.empty(100, 37, dtype=torch.bfloat16), torch.empty(37, 50, dtype=torch.bfloat16)
    print("=== tile IR (x: bf16[100, 37], y: bf16[37, 50]) ===")
    print(kd.print_ir(matmul.ir(small_x, small_y)))
    print("=== generated Pallas source, default config ===")
    print(matmul.source(small_x, small_y))
    return 0 if ok and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
