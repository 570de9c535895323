"""Shape buckets: one build of a kernel serves every size of a dynamic dim within a bucket.

A kernel is built per shape, so a model whose sequence length changes would build every kernel
again for each new length. Instead, a dynamic dim (the rows of a norm or matmul, the sequence of
attention) is padded up to its bucket, the bucket's build runs, and the outputs are cut back to
the true size. The pad is chosen so that it cannot change a real element: rows are independent,
padded rows are zeros, and sums over a padded dim add zeros. Attention's key dim, which a
softmax reduces, is masked at run time from a small int32 tensor of per-row limits
(kernels/attention.py): the true length is a runtime value, not part of the build.

Policies (`kd.shape_buckets(policy)`, as a context manager or for the rest of the process with
`kd.set_shape_buckets(policy)`; the environment variable `KD_SHAPE_BUCKETS` sets the default):

- "pow2" (the default): the next power of two, at least 16. At most 2x the work; one build
  per octave of sizes.
- "off" (or None): every size builds its own kernel, exactly as given.
- a list of sizes, e.g. [128, 512, 2048]: the smallest listed size that holds n; a size past
  the last builds exactly.
- a function n -> size (at least n).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import torch

Policy = Any  # "pow2" | "off" | None | Sequence[int] | Callable[[int], int]
_MIN_POW2 = 16


def _check(policy: Policy) -> Policy:
    if policy is None or policy in ("off", "pow2") or callable(policy):
        return policy
    if isinstance(policy, (list, tuple)) and policy and all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in policy):
        return tuple(sorted(policy))
    raise ValueError(f"shape buckets {policy!r}: use 'pow2', 'off', a list of positive sizes "
                     "or a function n -> size")


def _from_env() -> Policy:
    text = os.environ.get("KD_SHAPE_BUCKETS", "pow2").strip()
    if text in ("off", "pow2"):
        return text
    try:
        return _check([int(s) for s in text.split(",")])
    except ValueError:
        raise ValueError(f"KD_SHAPE_BUCKETS={text!r}: use pow2, off, or sizes like "
                         "128,512,2048") from None


_stack: list[Policy] = [_from_env()]


def set_shape_buckets(policy: Policy) -> None:
    """Sets the bucket policy for the rest of the process (see this module's doc)."""
    _stack[0] = _check(policy)


class shape_buckets:
    """`with kd.shape_buckets("off"):` builds kernels at exact sizes inside the block."""

    def __init__(self, policy: Policy):
        self.policy = _check(policy)

    def __enter__(self) -> "shape_buckets":
        _stack.append(self.policy)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack.pop()


def policy() -> Policy:
    """The policy in force (hashable: part of a kernel's bucket-plan key)."""
    return _stack[-1]


def enabled() -> bool:
    return _stack[-1] not in (None, "off")


def bucket(n: int) -> int:
    """The size a dynamic dim of `n` elements is padded to under the policy in force."""
    policy = _stack[-1]
    if policy in (None, "off"):
        return n
    if policy == "pow2":
        return max(_MIN_POW2, 1 << (n - 1).bit_length())
    if callable(policy):
        size = int(policy(n))
        if size < n:
            raise ValueError(f"shape bucket function gave {size} for a dim of {n}; it must "
                             "give a size >= n")
        return size
    return next((s for s in policy if s >= n), n)


def pad(t: torch.Tensor, dim: int, size: int, value: float = 0.0) -> torch.Tensor:
    """`t` grown along `dim` to `size` elements, the new ones `value` (t itself if it fits)."""
    n = t.shape[dim]
    if size == n:
        return t
    shape = list(t.shape)
    shape[dim] = size
    out = t.new_full(shape, value)
    out.narrow(dim, 0, n).copy_(t)
    return out


def padded(ts: Sequence[torch.Tensor], dim: int, size: int) -> list[torch.Tensor]:
    return [pad(t, dim, size) for t in ts]


def cut(t: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """The first `n` elements of `t` along `dim`, contiguous (a copy only if it must be)."""
    if t.shape[dim] == n:
        return t
    return t.narrow(dim, 0, n).contiguous()

