"""The kernel library: matmul, flash attention (forward and backward), softmax, RMS and layer norm.

Every kernel is written in the DSL (no hand-written backend code) and runs on every backend
(`with kd.backend("nki"):` ...). Each public function is a `torch.ops.kernel_dsl.*` op with
autograd, works under `torch.compile(fullgraph=True)`, and has a JAX twin as its `.jax`
attribute (e.g. `flash_attention.jax(q, k, v, causal=True)`, differentiable with `jax.grad`).

- `matmul(x, y, bias=, activation=, out_dtype=)`: ops `matmul` / `matmul_backward`;
  DSL kernels `matmul_kernel`, `column_sum`.
- `flash_attention(q, k, v, causal=, sm_scale=, return_lse=)`: ops `flash_attention` /
  `flash_attention_backward`; DSL kernels `flash_attention_fwd`, `flash_attention_bwd_dq`
  (which also writes delta = rowsum(dO * O)), `flash_attention_bwd_dkv`.
- `scaled_dot_product_attention(...)`: drop-in for torch's, on `flash_attention`.
- `softmax(x, dim)`: ops `softmax` / `softmax_backward`; `softmax_fwd[_streamed]`,
  `softmax_bwd[_streamed]`.
- `rms_norm(x, weight, eps)`: ops `rms_norm` / `rms_norm_backward`; `rms_norm_fwd`,
  `rms_norm_bwd_dx`, `rms_norm_bwd_dw`.
- `layer_norm(x, weight, bias, eps)`: ops `layer_norm` / `layer_norm_backward`;
  `layer_norm_fwd`, `layer_norm_bwd_dx`, `layer_norm_bwd_dwb`.

On TPU targets the kernels use the shipped autotuned configs in `configs/<target>.json`
(`tuned.py`); on CPU interpreters the backend's default config.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from . import attention_bwd, attention_fwd, norms
from .attention import FallbackWarning, flash_attention, scaled_dot_product_attention
from .matmul import matmul
from .norms import layer_norm, rms_norm
from .softmax import softmax

# isort: split
from . import batching  # noqa: F401  (vmap rules: after every op above exists)

if torch.distributed.is_available():
    from . import sharding  # noqa: F401  (DTensor inputs run shard-local)

matmul_mod = importlib.import_module(".matmul", __name__)  # `matmul` is the function here
softmax_mod = importlib.import_module(".softmax", __name__)

__all__ = ["FallbackWarning", "flash_attention", "layer_norm", "matmul", "rms_norm",
           "scaled_dot_product_attention", "softmax", "KERNELS"]


def _jax_entry(name: str) -> Callable[..., Any]:
    """`fn.jax`: the JAX version, imported on first call (JAX claims the TPU on import)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        from . import jax_api

        return getattr(jax_api, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"{name}.jax"
    call.__doc__ = f"JAX version of `kernel_dsl.kernels.{name}` (same kernels and semantics)."
    return call


for _fn in (matmul, flash_attention, softmax, rms_norm, layer_norm):
    _fn.jax = _jax_entry(_fn.__name__)  # type: ignore[attr-defined]


def _kernels() -> dict[str, Any]:
    from .base import LibraryKernel

    return {k.name: k for mod in (attention_fwd, attention_bwd, matmul_mod, softmax_mod, norms)
            for k in vars(mod).values() if isinstance(k, LibraryKernel)}


KERNELS = _kernels()
"""Every DSL kernel of the library by name (what `configs/*.json` entries refer to)."""
