"""Bad input at each public entry point ends in a clear error, never an internal traceback.

One row per case: (category, description, callable, expected). `expected` is the exception type
(or types) a user should see, or None for unusual but valid input that must give the right
answer. `python tests/reliability/report.py` prints the outcome counts per category.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import pytest
import torch
from dsl_kernels import add_where, layer_norm

import kernel_dsl as kd
from kernel_dsl import testing
from kernel_dsl.errors import ArgumentError, BackendError, ConfigError, DTypeError, KernelError

from .outcomes import ACCEPTED, CLEAR, CORRECT, LINE_HINT, WRONG_ANSWER, classify


class Case(NamedTuple):
    category: str
    what: str
    fn: Callable[[], Any]
    expected: type[BaseException] | tuple[type[BaseException], ...] | None


def x8() -> torch.Tensor:
    return torch.randn(8, 8)


def ref_add_where(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(x > y, x - y, 0.5 * y)


def _body(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] * 2
    return out


def _same_add_where(x: torch.Tensor, y: torch.Tensor, **kw: Any) -> Any:
    got = add_where(x, y, **kw)
    return got if torch.allclose(got, ref_add_where(x, y)) else WRONG_ANSWER


def _trn2_pallas_tune() -> Any:
    res = add_where.autotune(x8(), x8(), target="trn2", budget=0.5, use_cache=False)
    # Pallas interpreter timings labelled trn2 say nothing about a Trainium chip
    return WRONG_ANSWER if res.backend == "pallas" else res


def _fuzz(signature: str = "x[m,n], y[m,n]", **kw: Any) -> Any:
    kw = {"backends": ("nki",), "max_examples": 1, "configs": "default", "dtypes": ("f32",), **kw}
    return testing.fuzz(add_where, ref_add_where, signature, **kw)


def _with_config(cfg: kd.Config, backend: str) -> Any:
    k = kd.tpu_kernel(config=cfg, backend=backend)(_body)
    x = torch.randn(64)
    return k(x) if torch.allclose(k(x), x * 2) else WRONG_ANSWER


C = Case
CASES: list[Case] = [
    # -- the decorator -------------------------------------------------------------------------
    C("decorator", "config= a string", lambda: kd.tpu_kernel(config="big")(_body), ConfigError),
    C("decorator", "config= a dict", lambda: kd.tpu_kernel(config={"block_sizes": [8]})(_body),
      ConfigError),
    C("decorator", "configs= one Config, not a list",
      lambda: kd.tpu_kernel(configs=kd.Config([8]))(_body), ConfigError),
    C("decorator", "configs= a list of strings", lambda: kd.tpu_kernel(configs=["a"])(_body),
      ConfigError),
    C("decorator", "backend= unknown name", lambda: kd.tpu_kernel(backend="nope")(_body), BackendError),
    C("decorator", "backend= an int", lambda: kd.tpu_kernel(backend=3)(_body), BackendError),
    C("decorator", "decorating a non-function", lambda: kd.tpu_kernel(42), ArgumentError),
    C("decorator", "kd.backend('nope')", lambda: kd.backend("nope"), BackendError),
    C("decorator", "config with too many block sizes, at the call",
      lambda: kd.tpu_kernel(config=kd.Config([8, 8, 8]))(_body)(torch.randn(8)), ConfigError),
    # -- a kernel call -------------------------------------------------------------------------
    C("call", "too few arguments", lambda: add_where(x8()), ArgumentError),
    C("call", "too many arguments", lambda: add_where(x8(), x8(), x8()), ArgumentError),
    C("call", "unknown keyword", lambda: add_where(x8(), x8(), z=1), ArgumentError),
    C("call", "an int for a tensor", lambda: add_where(x8(), 3), ArgumentError),
    C("call", "a list for a tensor", lambda: add_where(x8(), [[1.0] * 8] * 8), ArgumentError),
    C("call", "a str for a float", lambda: layer_norm(x8(), torch.ones(8), torch.zeros(8), "a"),
      ArgumentError),
    C("call", "complex64 dtype", lambda: add_where(x8().to(torch.complex64), x8()), DTypeError),
    C("call", "float64 dtype", lambda: add_where(x8().double(), x8().double()), DTypeError),
    C("call", "mixed dtypes", lambda: _same_add_where(x8(), x8().to(torch.bfloat16)),
      (ArgumentError, DTypeError, None)),
    C("call", "0-dim tensors", lambda: add_where(torch.tensor(1.0), torch.tensor(2.0)), ArgumentError),
    C("call", "empty tensors", lambda: add_where(torch.empty(0, 8), torch.empty(0, 8)), ArgumentError),
    C("call", "shapes that do not match", lambda: add_where(x8(), torch.randn(4, 4)),
      (ArgumentError, KernelError)),
    C("call", "mixed devices (cpu, meta)", lambda: add_where(x8(), x8().to("meta")), ArgumentError),
    C("call", "non-contiguous input", lambda: _same_add_where(x8().t(), x8()), None),
    C("call", "requires_grad input", lambda: _same_add_where(x8().requires_grad_(), x8()),
      (None, RuntimeError)),
    # -- kernel.check --------------------------------------------------------------------------
    C("check", "unknown target", lambda: add_where.check(x8(), x8(), targets=["tpu-v9"]), ArgumentError),
    C("check", "targets= a string",
      lambda: add_where.check(x8(), x8(), targets="tpu-v9", measure_vmem=False), ArgumentError),
    C("check", "unknown backend", lambda: add_where.check(x8(), x8(), backend="nope"), BackendError),
    C("check", "backend without a check", lambda: add_where.check(x8(), x8(), backend="nki"),
      BackendError),
    C("check", "config= a string", lambda: add_where.check(x8(), x8(), targets=["tpu-v4"], config="big"),
      ConfigError),
    C("check", "config of the wrong length",
      lambda: add_where.check(x8(), x8(), targets=["tpu-v4"], config=kd.Config([8])), ConfigError),
    C("check", "negative timeout",
      lambda: add_where.check(x8(), x8(), targets=["tpu-v4"], timeout=-1, measure_vmem=False),
      ArgumentError),
    C("check", "timeout a string",
      lambda: add_where.check(x8(), x8(), targets=["tpu-v4"], timeout="10", measure_vmem=False),
      ArgumentError),
    # -- kernel.autotune -----------------------------------------------------------------------
    C("autotune", "unknown target", lambda: add_where.autotune(x8(), x8(), target="trn9", budget=0.5),
      ArgumentError),
    C("autotune", "trn2 on the pallas backend", _trn2_pallas_tune, ArgumentError),
    C("autotune", "trn2 on the nki backend (no evaluator for trn2)",
      lambda: add_where.autotune(x8(), x8(), target="trn2", backend="nki", budget=0.5), ArgumentError),
    C("autotune", "a TPU target on the nki backend",
      lambda: add_where.autotune(x8(), x8(), target="tpu-v5e", backend="nki", budget=0.5),
      ArgumentError),
    C("autotune", "negative budget", lambda: add_where.autotune(x8(), x8(), budget=-1), ArgumentError),
    C("autotune", "zero budget", lambda: add_where.autotune(x8(), x8(), budget=0), ArgumentError),
    C("autotune", "NaN budget", lambda: add_where.autotune(x8(), x8(), budget=math.nan), ArgumentError),
    C("autotune", "budget a string", lambda: add_where.autotune(x8(), x8(), budget="60s"), ArgumentError),
    C("autotune", "unknown strategy", lambda: add_where.autotune(x8(), x8(), strategy="best", budget=0.5),
      ConfigError),
    C("autotune", "negative timeout",
      lambda: add_where.autotune(x8(), x8(), target="tpu-v5e", budget=0.5, timeout=-1), ArgumentError),
    C("autotune", "unknown backend", lambda: add_where.autotune(x8(), x8(), backend="nope", budget=0.5),
      BackendError),
    # -- kernel.configs ------------------------------------------------------------------------
    C("configs", "unknown target", lambda: add_where.configs(x8(), x8(), target="tpu-v9"), ArgumentError),
    C("configs", "a Trainium target on pallas", lambda: add_where.configs(x8(), x8(), target="trn2"),
      ArgumentError),
    C("configs", "target an int", lambda: add_where.configs(x8(), x8(), target=5), ArgumentError),
    C("configs", "unknown backend", lambda: add_where.configs(x8(), x8(), backend="nope"), BackendError),
    # -- kernel.estimate -----------------------------------------------------------------------
    C("estimate", "unknown target", lambda: add_where.estimate(x8(), x8(), target="tpu-v9"), ArgumentError),
    C("estimate", "cpu target", lambda: add_where.estimate(x8(), x8(), target="cpu"), ArgumentError),
    C("estimate", "config= a string",
      lambda: add_where.estimate(x8(), x8(), target="tpu-v5e", config="big"), ConfigError),
    C("estimate", "config of the wrong length",
      lambda: add_where.estimate(x8(), x8(), target="tpu-v5e", config=kd.Config([8])), ConfigError),
    # -- kernel.source -------------------------------------------------------------------------
    C("source", "unknown target", lambda: add_where.source(x8(), x8(), target="tpu-v9"), ArgumentError),
    C("source", "a Trainium target on pallas", lambda: add_where.source(x8(), x8(), target="trn2"),
      ArgumentError),
    C("source", "a TPU target on nki",
      lambda: add_where.source(x8(), x8(), backend="nki", target="tpu-v5e"), ArgumentError),
    C("source", "unknown backend", lambda: add_where.source(x8(), x8(), backend="nope"), BackendError),
    C("source", "config= a string", lambda: add_where.source(x8(), x8(), config="big"), ConfigError),
    # -- kd.Config -----------------------------------------------------------------------------
    C("Config", "negative block size", lambda: kd.Config([-8]), ConfigError),
    C("Config", "zero block size", lambda: kd.Config([0]), ConfigError),
    C("Config", "a float block size", lambda: kd.Config([1.5]), ConfigError),
    C("Config", "a str block size", lambda: kd.Config(["a"]), ConfigError),
    C("Config", "block_sizes an int", lambda: kd.Config(5), ConfigError),
    C("Config", "a bool block size", lambda: kd.Config([True]), ConfigError),
    C("Config", "from_json: invalid JSON", lambda: kd.Config.from_json("{block_sizes"), ConfigError),
    C("Config", "from_json: a list", lambda: kd.Config.from_json("[1, 2]"), ConfigError),
    C("Config", "non-power-of-two on triton", lambda: _with_config(kd.Config([24]), "triton"),
      (ConfigError, None)),
    C("Config", "unknown knob on pallas", lambda: _with_config(kd.Config([8], foo=1), "pallas"),
      ConfigError),
    C("Config", "unknown knob on triton", lambda: _with_config(kd.Config([8], foo=1), "triton"),
      ConfigError),
    C("Config", "unknown knob on nki", lambda: _with_config(kd.Config([8], foo=1), "nki"),
      ConfigError),
    C("Config", "bad loop_mode", lambda: _with_config(kd.Config([8], loop_mode="x"), "pallas"),
      ConfigError),
    # -- kernel_dsl.testing.fuzz ---------------------------------------------------------------
    C("fuzz", "unclosed signature", lambda: _fuzz("x[m,n], y[m,n"), ValueError),
    C("fuzz", "signature for too few arguments", lambda: _fuzz("x[m,n]"), ValueError),
    C("fuzz", "signature with an empty dim", lambda: _fuzz("x[m,], y[m,n]"), ValueError),
    C("fuzz", "unknown dtype", lambda: _fuzz(dtypes=("f99",)), ValueError),
    C("fuzz", "dtype a torch int64", lambda: _fuzz(dtypes=(torch.int64,)), ValueError),
    C("fuzz", "dim range low > high", lambda: _fuzz(dims={"m": (9, 2)}), ValueError),
    C("fuzz", "dim range from 0", lambda: _fuzz(dims={"m": (0, 4)}), ValueError),
    C("fuzz", "dim a string", lambda: _fuzz(dims={"m": "abc"}), ValueError),
    C("fuzz", "dim of negative sizes", lambda: _fuzz(dims={"m": [-1, 4]}), ValueError),
    C("fuzz", "dim not in the signature", lambda: _fuzz(dims={"q": 4}), ValueError),
    C("fuzz", "unknown backend", lambda: _fuzz(backends=("nope",)), (ValueError, BackendError)),
    C("fuzz", "unknown value class", lambda: _fuzz(values=("weird",)), ValueError),
    C("fuzz", "bad configs=", lambda: _fuzz(configs="bogus"), ValueError),
]


def wanted(case: Case) -> set[str]:
    """The outcomes a row allows: a typed error, with the user's line where there is one."""
    exp = case.expected if isinstance(case.expected, tuple) else (case.expected,)
    out = {CORRECT} if None in exp else set()
    if any(e is not None and issubclass(e, KernelError) for e in exp):
        out.add(LINE_HINT)
    if any(e is not None and not issubclass(e, KernelError) for e in exp):
        out |= {CLEAR, LINE_HINT}
    return out


def run_case(case: Case) -> tuple[str, BaseException | None]:
    return classify(case.fn, none_ok=case.expected is None or (
        isinstance(case.expected, tuple) and None in case.expected))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("case", CASES, ids=[f"{c.category}: {c.what}" for c in CASES])
def test_bad_input(case: Case) -> None:
    outcome, exc = run_case(case)
    types = tuple(e for e in (case.expected if isinstance(case.expected, tuple) else (case.expected,))
                  if e is not None)
    detail = f"{type(exc).__name__}: {exc}" if exc is not None else "(returned)"
    assert outcome in wanted(case), f"{outcome}, want {sorted(wanted(case))}: {detail}"
    if exc is not None:
        assert isinstance(exc, types), detail
    assert outcome != ACCEPTED



def test_autotune_cpu_on_nki_times_the_cpu_path() -> None:
    """target="cpu" works on every backend (NKI's CPU path renders for trn2 and reads its tuned
    configs there); the result says cpu, not a chip it was never timed on."""
    x, y = x8(), x8()
    res = add_where.autotune(x, y, target="cpu", backend="nki", budget=30, use_cache=False)
    assert res.target == "cpu" and res.backend == "nki" and res.best is not None
    with kd.backend("nki"):
        torch.testing.assert_close(add_where(x, y), ref_add_where(x, y))
