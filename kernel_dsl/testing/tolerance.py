"""The tolerance policy: a kernel may be as wrong as PyTorch itself is in the same dtype, twice
over, plus a small allowance per dtype. Never a fixed rtol/atol pair.

Why relative to PyTorch: a bf16 softmax and a bf16 matmul over k=4096 have errors that differ
by orders of magnitude, and any fixed tolerance loose enough for the second hides bugs in the
first. PyTorch's own result in the kernel's dtype measures how hard the computation is on
*these* inputs; the exact answer is the same reference run in float64 on the same (already
rounded) inputs.

Per output, with e the exact result, t PyTorch's in the dtype, k the kernel's and eps the
dtype's machine epsilon, over the elements where all three are finite:
  elementwise  |k - e| <= 2 |t - e| + eps (R |e| + A max|e|) + F
  aggregate    ||k - e||_2 <= 2 ||t - e||_2 + eps G ||e||_2          (bf16, f16)
The elementwise check catches local damage (a wrong mask, a dropped tile, one bad lane); the
aggregate one catches precision lost everywhere by a little (bf16 accumulation), which hides
in the per-element noise of a low-precision result but adds up in the norm. Per dtype:
- bf16/f16: R = A = 2, G = 1, F = 0. Rounding the output dominates both errors; R and A
  cover a one-ulp difference in that rounding. G allows, where PyTorch happens to be exact
  (a one-hot softmax returns a row of v unchanged), one extra rounding of an intermediate
  (the flash-attention idiom `p.to(v.dtype) @ v`, up to eps/2 relative) plus the output's
  own rounding (eps/2): a kernel at G is as good as PyTorch but for one rounding. Rounding an
  accumulator at every k block exceeds it. Correct kernels stay below about 0.5 of the
  tolerance on the test kernels.
- f32: R = A = 8, F = 1e-5 (torch.testing's f32 atol), no aggregate check. PyTorch's f32 is
  sometimes far more accurate than a tiled kernel can be (a 1 x K x 1 matmul is a dot product
  it sums nearly exactly), so twice its error says little there; the eps terms and F allow
  ordinary f32 accumulation error, and any real f32 bug is far larger.
Non-finite results: where the exact result rounded to the dtype is inf or NaN, the kernel must
give the same (or what PyTorch gives); where it is finite, a kernel inf/NaN fails unless
PyTorch's is not finite there either. NaN where the exact result is finite usually means an
element was never written (outputs are NaN-poisoned before each run).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Tolerance:
    """Allowances in units of the dtype's epsilon (see the module docstring)."""

    rtol: float  # x eps x |exact|, per element
    atol: float  # x eps x max|exact| of the output, per element
    agg: float | None  # x eps x ||exact||_2, on the error norm; None: no aggregate check
    abs_floor: float = 0.0  # an absolute allowance per element (torch.testing's f32 atol)


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(8.0, 8.0, None, 1e-5),
    torch.bfloat16: Tolerance(2.0, 2.0, 1.0),
    torch.float16: Tolerance(2.0, 2.0, 1.0),
}


@dataclass
class Comparison:
    """The outcome for all outputs of one example: `ok`, the tightest fraction of the
    tolerance used (1.0 = at the limit) and a readable line per problem."""

    ok: bool = True
    tightest: float = 0.0
    elementwise: float = 0.0  # the tightest fraction of the elementwise check alone
    aggregate: float = 0.0  # ... and of the aggregate (norm) check
    problems: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        self.ok = False
        self.problems.append(line)

    def report(self) -> str:
        if self.ok:
            return f"ok (tightest: {self.tightest:.2f} of the tolerance)"
        return "\n".join(self.problems)


def _same_nonfinite(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.isnan() & b.isnan()) | (a.isinf() & (a == b))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()
    return str(idx[0].tolist()) if len(idx) else "?"


def _compare_float(i: int, k: torch.Tensor, e: torch.Tensor, t: torch.Tensor,
                   dtype: torch.dtype, res: Comparison) -> None:
    tol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    eps = torch.finfo(dtype).eps
    k, t = k.double(), t.double()
    e_d = e.to(dtype).double()  # the exact result as the dtype can hold it (inf past its range)
    name = f"output {i} ({str(dtype).replace('torch.', '')}{list(k.shape)})"
    exact_bad = ~e_d.isfinite()
    wrong_special = exact_bad & ~(_same_nonfinite(k, e_d) | _same_nonfinite(k, t))
    if wrong_special.any():
        at = wrong_special.nonzero()[0]
        res.fail(f"{name}: {int(wrong_special.sum())} elements differ where the exact result is "
                 f"inf/NaN; first at {at.tolist()}: kernel {_fmt(k[tuple(at)].item())}, exact "
                 f"{_fmt(e_d[tuple(at)].item())}, PyTorch {_fmt(t[tuple(at)].item())}")
    fin = ~exact_bad
    spurious = fin & ~k.isfinite() & t.isfinite()
    if spurious.any():
        nans = int((spurious & k.isnan()).sum())
        hint = " (NaN: elements never written, since outputs are NaN-poisoned, or a NaN computed)" \
            if nans else ""
        at = spurious.nonzero()[0]
        res.fail(f"{name}: {int(spurious.sum())} of {k.numel()} elements are inf/NaN where the "
                 f"exact result is finite{hint}; first at {at.tolist()}: kernel "
                 f"{_fmt(k[tuple(at)].item())}, exact {_fmt(e[tuple(at)].item())}")
    both = fin & k.isfinite() & t.isfinite()
    if not both.any():
        return
    kk, tt, ee = k[both], t[both], e[both]
    err_k, err_t = (kk - ee).abs(), (tt - ee).abs()
    scale = ee.abs().max()
    bound = 2 * err_t + eps * (tol.rtol * ee.abs() + tol.atol * scale) + tol.abs_floor
    frac = torch.where(bound > 0, err_k / bound, torch.where(err_k > 0, torch.inf, 0.0))
    worst = int(frac.argmax())
    res.elementwise = max(res.elementwise, float(frac[worst]))
    res.tightest = max(res.tightest, res.elementwise)
    bad = err_k > bound
    local = bool(bad.any())
    if local:
        pos = both.nonzero()[worst].tolist()
        res.fail(f"{name}: {int(bad.sum())} of {k.numel()} elements outside the tolerance; worst "
                 f"at {pos}: kernel {_fmt(kk[worst].item())}, exact {_fmt(ee[worst].item())}, "
                 f"PyTorch {_fmt(tt[worst].item())} (error {_fmt(err_k[worst].item())}, allowed "
                 f"{_fmt(bound[worst].item())} = 2 x PyTorch's error + "
                 f"{_fmt(bound[worst].item() - 2 * err_t[worst].item())})")
    if tol.agg is None:
        return
    norm_k, norm_t = float(err_k.norm()), float(err_t.norm())
    agg_bound = 2 * norm_t + eps * tol.agg * float(ee.norm())
    agg_frac = norm_k / agg_bound if agg_bound > 0 else (float("inf") if norm_k > 0 else 0.0)
    res.aggregate = max(res.aggregate, agg_frac)
    res.tightest = max(res.tightest, agg_frac)
    if norm_k > agg_bound and local:
        res.ok = False  # already reported by the elementwise line
    elif norm_k > agg_bound:
        res.fail(f"{name}: error norm {_fmt(norm_k)} exceeds 2 x PyTorch's {_fmt(norm_t)} + "
                 f"{_fmt(agg_bound - 2 * norm_t)} ({agg_frac:.2f}x the tolerance): precision is "
                 "lost everywhere, e.g. accumulation in a low-precision dtype")


def compare(outs: list[torch.Tensor] | tuple[torch.Tensor, ...] | torch.Tensor,
            exact: torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor],
            lowp: torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor] | None) -> Comparison:
    """Compares a kernel's outputs with the exact (float64) reference and PyTorch's result in
    the kernel's dtype (`lowp`; None when PyTorch cannot compute in that dtype: then its error
    is taken as one correct rounding of the exact result)."""
    outs = _as_list(outs)
    exact = _as_list(exact)
    res = Comparison()
    if len(outs) != len(exact):
        res.fail(f"the kernel returns {len(outs)} outputs, the reference {len(exact)}")
        return res
    lowp_l = _as_list(lowp) if lowp is not None else [None] * len(exact)
    for i, (k, e, t) in enumerate(zip(outs, exact, lowp_l)):
        if tuple(k.shape) != tuple(e.shape):
            res.fail(f"output {i}: shape {list(k.shape)}, the reference's {list(e.shape)}")
            continue
        if t is not None and k.dtype != t.dtype:
            res.fail(f"output {i}: dtype {k.dtype}, PyTorch's {t.dtype} for the same inputs")
            continue
        if not k.dtype.is_floating_point:
            want = t if t is not None else e.to(k.dtype)
            diff = k != want
            if diff.any():
                res.fail(f"output {i}: {int(diff.sum())} of {k.numel()} elements differ; first at "
                         f"{_where(diff)}")
            continue
        _compare_float(i, k, e, t if t is not None else e.to(k.dtype), k.dtype, res)
    return res


def _as_list(x: object) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return list(x)  # type: ignore[call-overload]
