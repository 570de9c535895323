"""`kernel_dsl.testing.fuzz`: every DSL test kernel fuzzed against PyTorch, planted bugs caught
and shrunk, the tolerance policy checked in both directions, NaN-poisoned outputs, the CLI.

Fast tier: smoke fuzzing (12 examples per kernel, smaller sizes), the planted bugs (the CI
profile finds each within a few dozen examples), unit tests. Slow tier (`-m slow`): the CI
profile proper, 100 examples per kernel, and 100-example bf16 runs in both directions.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import dsl_kernels as dk
import fuzz_kernels as fk
import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.cli import main as kdsl_main
from kernel_dsl.testing import (
    CI,
    LONG,
    Case,
    active,
    compare,
    dim_pool,
    fuzz,
    make_input,
    parse,
    poison_outputs,
)
from kernel_dsl.testing.strategies import config_choices

ATTENTION = "q[b,h,sq,d], k[b,h,skv,d], v[b,h,skv,d], causal=False|True"
ATTENTION_DIMS = {"b": (1, 2), "h": (1, 3), "sq": (1, 130), "skv": (1, 130), "d": [8, 16, 32, 64]}
ROWS = {"m": (1, 300), "n": (1, 1100)}
HERE = os.path.dirname(os.path.abspath(__file__))
ALL_VALUES = ("normal", "large", "special")

LOW = ("f32", "bf16", "f16")

# name -> (kernel, reference, signature, dims, dtypes, value classes). This fuzzer found two
# bugs in these kernels, now fixed: softmax_two_pass gave NaN rows after an all -inf first
# column block, and attention rounded Q K^T to bf16/f16 before its softmax (the DSL now keeps
# the f32 product of `(a @ b).to(torch.float32)`). Value class "special" is left out for
# attention: what SDPA returns for inf/NaN inputs is not a contract the kernel makes.
KERNELS: dict[str, tuple[Any, Callable[..., Any], str, dict[str, Any], tuple[str, ...], tuple[str, ...]]] = {
    "add_where": (dk.add_where, fk.ref_add_where, "x[m,n], y[m,n]", {"m": (1, 300), "n": (1, 600)},
                  LOW, ALL_VALUES),
    "matmul": (dk.matmul, fk.ref_matmul, "x[m,k], y[k,n]", {"m": (1, 300), "n": (1, 300), "k": (1, 2100)},
               LOW, ALL_VALUES),
    "softmax_rows": (dk.softmax_rows, fk.ref_softmax, "x[m,n]", ROWS, LOW, ALL_VALUES),
    "softmax_two_pass": (dk.softmax_two_pass, fk.ref_softmax, "x[m,n]", ROWS, LOW, ALL_VALUES),
    "layer_norm": (dk.layer_norm, fk.ref_layer_norm, "x[m,n], w[n], b[n]", ROWS, LOW, ALL_VALUES),
    "attention": (dk.attention, fk.ref_attention, ATTENTION, ATTENTION_DIMS, LOW,
                  ("normal", "large")),
}


def _smoke_dims(dims: dict[str, Any]) -> dict[str, Any]:
    """Sizes capped at 130 (still ragged for every block up to 128, and > 128): fast-tier cost."""
    return {k: (v[0], min(v[1], 130)) if isinstance(v, tuple) else v for k, v in dims.items()}


def _caught(kernel: Any, reference: Callable[..., Any], signature: str, **kw: Any) -> AssertionError:
    with pytest.raises(AssertionError) as info:
        fuzz(kernel, reference, signature, **kw)
    return info.value


# -- every DSL test kernel ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNELS))
def test_dsl_kernel_smoke(name: str) -> None:
    kernel, ref, sig, dims, dtypes, values = KERNELS[name]
    result = fuzz(kernel, ref, sig, dims=_smoke_dims(dims), dtypes=dtypes, values=values,
                  max_examples=12)
    assert result.examples >= 12 and result.failures == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KERNELS))
def test_dsl_kernel_ci_profile(name: str) -> None:
    """The CI profile proper: 100 examples over every backend, dtype, layout and config."""
    kernel, ref, sig, dims, dtypes, values = KERNELS[name]
    result = fuzz(kernel, ref, sig, dims=dims, dtypes=dtypes, values=values, profile="ci")
    print(result.table())
    assert result.examples >= CI.max_examples and result.failures == 0
    assert {be for be, _ in result.cells} == set(lowering.names())


# -- planted bugs -------------------------------------------------------------------------------


def _blocks(case: Case) -> tuple[int, ...]:
    assert case.config is not None
    return case.config.block_sizes


# name -> (kernel, reference, signature, dims, dtypes, what the shrunk case must show)
PLANTED: dict[str, tuple[Any, Callable[..., Any], str, dict[str, Any], tuple[str, ...],
                         Callable[[Case], bool]]] = {
    "off_by_one_causal_mask": (
        fk.attention_causal_off_by_one, fk.ref_attention, ATTENTION, ATTENTION_DIMS, ("f32", "bf16"),
        lambda c: dict(c.scalars)["causal"] is True),
    "missing_accumulator_rescale": (
        fk.attention_missing_rescale, fk.ref_attention, ATTENTION, ATTENTION_DIMS, ("f32", "bf16"),
        lambda c: dict(c.sizes)["skv"] > _blocks(c)[1]),  # needs a second key block
    "reduction_over_wrong_axis": (
        fk.softmax_max_over_block, fk.ref_softmax, "x[m,n]", ROWS, ("f32", "bf16", "f16"),
        lambda c: c.values == "large" and dict(c.sizes)["m"] >= 2),  # rows far apart
    "dropped_edge_tile": (
        fk.matmul_dropped_edge_tile, fk.ref_matmul, "x[m,k], y[k,n]", KERNELS["matmul"][3],
        ("f32", "bf16", "f16"),
        lambda c: dict(c.sizes)["m"] % _blocks(c)[0] != 0 and dict(c.sizes)["m"] > _blocks(c)[0]),
    "bf16_accumulation": (
        fk.matmul_bf16_acc, fk.ref_matmul, "x[m,k], y[k,n]", KERNELS["matmul"][3], ("f32", "bf16", "f16"),
        lambda c: c.dtype in ("bf16", "f16") and dict(c.sizes)["k"] > _blocks(c)[2]),
    "missing_accumulator_reset": (
        fk.layer_norm_missing_reset, fk.ref_layer_norm, "x[m,n], w[n], b[n]", ROWS, ("f32", "bf16", "f16"),
        lambda c: max(dict(c.sizes).values()) <= 16),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the snippet's "large" inputs overflow f16
@pytest.mark.parametrize("name", list(PLANTED))
def test_ci_profile_catches_planted_bug(name: str) -> None:
    kernel, ref, sig, dims, dtypes, shows_bug = PLANTED[name]
    err = _caught(kernel, ref, sig, dims=dims, dtypes=dtypes, profile="ci")
    case: Case = err.case  # type: ignore[attr-defined]
    assert shows_bug(case), case
    assert all(v <= 130 for v in dict(case.sizes).values()), f"not shrunk: {case}"
    text = str(err)
    assert "Reproduce it (standalone Python):" in text and "kdsl fuzz" in text and "--replay" in text
    assert f"kernel.run_cpu({case.backend!r}, args, config)" in text
    with pytest.raises(AssertionError):  # the snippet alone reproduces the failure
        exec(compile(err.snippet, "<snippet>", "exec"), {})  # type: ignore[attr-defined]


def test_ci_profile_is_deterministic() -> None:
    first = _caught(fk.layer_norm_missing_reset, fk.ref_layer_norm, "x[m,n], w[n], b[n]", profile="ci")
    again = _caught(fk.layer_norm_missing_reset, fk.ref_layer_norm, "x[m,n], w[n], b[n]", profile="ci")
    assert first.case == again.case  # type: ignore[attr-defined]
    assert first.fuzz_result.examples == again.fuzz_result.examples  # type: ignore[attr-defined]


# -- the tolerance policy, in both directions --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul", "softmax_two_pass", "layer_norm"])
def test_correct_kernel_in_bf16_is_not_flagged(name: str) -> None:
    kernel, ref, sig, dims, _, values = KERNELS[name]
    result = fuzz(kernel, ref, sig, dims=dims, values=values, dtypes=("bf16",), profile="ci")
    assert result.examples >= 100 and result.failures == 0
    assert max(c.tightest for c in result.cells.values()) < 0.6  # far from the limit


@pytest.mark.slow
def test_f32_score_attention_in_bf16_is_not_flagged_even_with_large_logits() -> None:
    result = fuzz(fk.attention_f32_scores, fk.ref_attention, ATTENTION, dims=ATTENTION_DIMS,
                  dtypes=("bf16", "f16"), values=("normal", "large"), profile="ci")
    assert result.examples >= 100 and result.failures == 0


def _bf16_case(n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An exact float64 result and PyTorch's bf16 result of a computation whose only error is
    the final rounding (what a correct bf16 kernel makes too)."""
    exact = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return exact, exact.to(torch.bfloat16)


def test_tolerance_passes_a_correctly_rounded_result() -> None:
    exact, torch_bf16 = _bf16_case()
    assert compare(torch_bf16.clone(), exact, torch_bf16).ok
    # rounded from a slightly different f32 value (another summation order): still fine
    kernel = (exact.float() * (1 + 2 ** -12)).to(torch.bfloat16)
    res = compare(kernel, exact, torch_bf16)
    assert res.ok and res.tightest < 1
    # one extra rounding of an intermediate (half an eps, systematically): still allowed
    assert compare((exact * (1 + 2 ** -9)).to(torch.bfloat16), exact, torch_bf16).ok


def test_tolerance_flags_precision_lost_everywhere() -> None:
    """Each element off by a few ulps (repeated roundings, low-precision accumulation):
    elementwise fine, but twice PyTorch's error plus one rounding is exceeded in the norm."""
    exact, torch_bf16 = _bf16_case()
    kernel = (exact * (1 + 2 ** -5)).to(torch.bfloat16)
    res = compare(kernel, exact, torch_bf16)
    assert not res.ok and res.elementwise <= 1 < res.aggregate
    assert "precision is lost everywhere" in res.report()


def test_tolerance_flags_one_bad_element() -> None:
    exact, torch_bf16 = _bf16_case()
    kernel = torch_bf16.clone()
    kernel[1234] = (exact[1234] * 1.1).to(torch.bfloat16)
    res = compare(kernel, exact, torch_bf16)
    assert not res.ok and "1 of 4096 elements outside the tolerance; worst at [1234]" in res.report()


def test_tolerance_scales_with_pytorch_error() -> None:
    """Where PyTorch itself is far off (an ill-conditioned computation), the kernel may be too:
    up to twice as far, no further."""
    exact = torch.randn(1000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    noise = torch.randn(1000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    lowp = (exact + 0.05 * noise).to(torch.bfloat16)
    assert compare((exact + 0.08 * noise).to(torch.bfloat16), exact, lowp).ok
    assert not compare((exact + 0.3 * noise).to(torch.bfloat16), exact, lowp).ok


def test_tolerance_f32_is_tight() -> None:
    exact = torch.randn(1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert compare((exact * (1 + 2e-7)).float(), exact, exact.float()).ok
    assert not compare((exact * (1 + 1e-4)).float(), exact, exact.float()).ok


def test_tolerance_special_values() -> None:
    exact = torch.tensor([1.0, math.inf, -math.inf, math.nan, 2.0], dtype=torch.float64)
    lowp = exact.float()
    assert compare(lowp.clone(), exact, lowp).ok
    wrong_inf = lowp.clone()
    wrong_inf[1] = -math.inf
    assert not compare(wrong_inf, exact, lowp).ok
    unwritten = lowp.clone()
    unwritten[4] = math.nan
    res = compare(unwritten, exact, lowp)
    assert not res.ok and "never written" in res.report()
    overflow = torch.tensor([1e6], dtype=torch.float64)  # past f16's range: inf is right
    assert compare(torch.tensor([math.inf], dtype=torch.float16), overflow,
                   overflow.to(torch.float16)).ok


def test_tolerance_shape_and_dtype() -> None:
    exact = torch.zeros(3, 4, dtype=torch.float64)
    assert "shape [4, 3]" in compare(torch.zeros(4, 3), exact, exact.float()).report()
    assert "dtype torch.bfloat16" in compare(torch.zeros(3, 4, dtype=torch.bfloat16), exact,
                                             exact.float()).report()


# -- NaN-poisoned outputs -----------------------------------------------------------------------


@kd.tpu_kernel
def writes_first_column(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, 2], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        out[tm, 0] = x[tm, :].sum(dim=-1)
    return out


def ref_first_column_and_zeros(x: torch.Tensor) -> torch.Tensor:
    """Column 1 is zero here: only poisoning tells an unwritten zero from a written one."""
    return torch.stack([x.sum(-1), torch.zeros_like(x[:, 0])], dim=1)


def test_poison_outputs_fills_torch_empty_with_nan() -> None:
    with poison_outputs():
        assert torch.empty(64).isnan().all()
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("backend", lowering.names())
def test_unwritten_elements_fail_on_every_backend(backend: str) -> None:
    err = _caught(writes_first_column, ref_first_column_and_zeros, "x[m,n]", backends=(backend,),
                  dtypes=("f32",), dims={"m": [3], "n": [5]}, max_examples=3)
    assert "never written" in str(err)


# -- pieces -------------------------------------------------------------------------------------


def test_signature_grammar() -> None:
    sig = parse(ATTENTION + ", ", dk.attention.params, dk.attention.kinds)
    assert [t.name for t in sig.tensors] == ["q", "k", "v"] and sig.dim_names == ["b", "h", "sq", "d", "skv"]
    assert sig.scalars[0].choices == (False, True)
    ln = parse("x[m, n], w[n]:f32, b[n]:f32", dk.layer_norm.params, dk.layer_norm.kinds)
    assert ln.tensor("w").dtype == "f32" and ln.scalars[0].choices == (1e-5,)  # eps: its default
    assert parse("x[m, 64]").tensors[0].dims == ("m", 64)
    with pytest.raises(ValueError, match="needs its dims"):
        parse("x[m,k]", dk.matmul.params, dk.matmul.kinds)
    with pytest.raises(ValueError, match="does not take"):
        parse("x[m,k], y[k,n], z[n]", dk.matmul.params, dk.matmul.kinds)


def test_dim_pool_hits_the_sizes_that_break_tiles() -> None:
    pool = dim_pool((1, 2100))
    assert {1, 2, 3, 2039, 2100} <= set(pool)
    for block in (8, 16, 32, 64, 128, 256, 512, 1024, 2048):
        assert block in pool and block + 1 in pool  # one full tile; one ragged tile past it
        assert any(v > block and v % block for v in pool)
    assert dim_pool([8, 16, 16]) == [8, 16] and dim_pool(5) == [5]
    assert dim_pool((3, 9)) == [3, 5, 7, 8, 9]


def test_make_input_layouts_values_and_determinism() -> None:
    a = make_input([5, 7], torch.bfloat16, layout="transposed", values="normal", seed=3)
    assert a.shape == (5, 7) and a.stride() == (1, 5)
    assert torch.equal(a, make_input([5, 7], torch.bfloat16, layout="transposed", seed=3))
    s = make_input([5, 7], torch.float32, layout="strided", values="special", seed=4)
    assert s.shape == (5, 7) and s.stride() == (15, 2)
    assert s.isnan().any() and (s == -math.inf).any()
    assert make_input([64], torch.float32, values="large").abs().max() > 1e3
    assert make_input([64], torch.float16, values="large").isfinite().all()


def test_config_choices_cover_the_space() -> None:
    x, y = torch.randn(37, 61), torch.randn(61, 13)
    space = dk.matmul.configs(x, y, backend="triton")
    default = dk.matmul.default_config(x, y, backend="triton")
    every = config_choices(space, default, "all", salt=0)
    assert every[0] == default and set(space) <= set(every) and len(set(every)) == len(every)
    some = config_choices(space, default, 3, salt=0)
    assert len(some) == 3 and some[0] == default and some == config_choices(space, default, 3, salt=0)
    assert config_choices(space, default, "default", salt=0) == [default]
    result = fuzz(dk.matmul, fk.ref_matmul, "x[m,k], y[k,n]", backends=("nki",), configs=2,
                  dims={"m": (1, 40), "k": (1, 40), "n": (1, 40)}, max_examples=4)
    assert result.examples == 4


def test_case_json_round_trip() -> None:
    case = Case("pallas", "bf16", (("m", 3), ("n", 5)), (("x", "strided"),), "large", 7, (),
                kd.Config([8, 128], loop_mode="grid"))
    assert Case.from_json(case.to_json()) == case


def test_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CI.seed is not None and not CI.database and CI.max_examples >= 100
    monkeypatch.setenv("KD_FUZZ_PROFILE", "long")
    assert active() is LONG and LONG.seed is None and LONG.database
    monkeypatch.setenv("KD_FUZZ_PROFILE", "nightly")
    with pytest.raises(ValueError, match="unknown fuzz profile"):
        active()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="not in the signature"):
        fuzz(dk.add_where, fk.ref_add_where, "x[m,n], y[m,n]", dims={"k": (1, 4)})
    with pytest.raises(ValueError, match="values"):
        fuzz(dk.add_where, fk.ref_add_where, "x[m,n], y[m,n]", values=("huge",))
    with pytest.raises(kd.BackendError):
        fuzz(dk.add_where, fk.ref_add_where, "x[m,n], y[m,n]", backends=("cuda",))


# -- kdsl fuzz ----------------------------------------------------------------------------------


def test_cli_fuzz_pass_fail_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    assert kdsl_main(["fuzz", f"{HERE}/dsl_kernels.py:add_where", "--reference",
                      f"{HERE}/fuzz_kernels.py:ref_add_where", "--signature", "x[m,n], y[m,n]",
                      "--backends", "nki", "--dim", "m=1:40", "--dim", "n=3,17", "--max-examples",
                      "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "examples" in out and "slowest case" in out and "nki" in out
    assert kdsl_main(["fuzz", f"{HERE}/fuzz_kernels.py:layer_norm_missing_reset", "--reference",
                      f"{HERE}/fuzz_kernels.py:ref_layer_norm", "--signature", "x[m,n], w[n], b[n]",
                      "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "Reproduce it (standalone Python):" in out
    replay = next(line for line in out.splitlines() if line.startswith("Run only this case: "))
    case_json = replay.split("--replay ", 1)[1].strip("'")
    assert kdsl_main(["fuzz", f"{HERE}/fuzz_kernels.py:layer_norm_missing_reset", "--reference",
                      f"{HERE}/fuzz_kernels.py:ref_layer_norm", "--signature", "x[m,n], w[n], b[n]",
                      "--replay", case_json]) == 1
    assert "outside the tolerance" in capsys.readouterr().out
