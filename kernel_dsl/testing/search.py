"""`fuzz(kernel, reference, "x[m,k], y[k,n]", ...)`: hypothesis searches for an input, dtype,
layout, backend and config on which the kernel disagrees with its PyTorch reference beyond the
tolerance (tolerance.py), shrinks it, and raises an AssertionError holding the shrunk case as
a runnable snippet (snippet.py).

One example: draw a case (strategies.py), build its inputs from the seed (case.py), trace the
kernel for those shapes, draw a config from the backend's config space for those shapes, run
the exact reference in float64 and PyTorch in the kernel's dtype, run the kernel with outputs
NaN-poisoned, compare. A crash anywhere in the kernel's path is a failure too, tracing
included: the caller's dtypes and sizes are promises. Only a backend refusing a dtype
(DTypeError while rendering) or a case the reference cannot compute is skipped, and counted.
Results are memoized per case, so shrinking never pays twice for one case, and a shrink time
budget keeps a CI failure from shrinking for many minutes.
"""
from __future__ import annotations

import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from hypothesis import HealthCheck, Phase, given, reject, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Unsatisfiable

from .. import dtypes as kd_dtypes
from .. import lowering
from ..config import Config
from ..errors import DTypeError
from .case import VALUES, Case, build_args, poison_outputs, to_float64
from .profiles import Profile, active, database_path
from .report import FuzzResult, Progress
from .signature import Signature, parse
from .snippet import command, snippet, spec_string
from .strategies import DEFAULT_DIMS, cases, config_choices
from .tolerance import compare

DEFAULT_DTYPES = ("f32", "bf16", "f16")
DEFAULT_VALUES = ("normal", "large")


class _Failed(Exception):
    """Raised inside the hypothesis test for a failing case; turned into AssertionError."""

    def __init__(self, case: Case, detail: str):
        super().__init__(detail)
        self.case = case
        self.detail = detail


@dataclass
class _State:
    result: FuzzResult
    profile: Profile
    time_budget: float
    progress: Progress | None
    memo: dict[Case, str | None] = field(default_factory=dict)  # case -> failure detail or None
    unsupported: dict[tuple[str, str], str] = field(default_factory=dict)  # (backend, dtype)
    calls: int = 0
    first_failure: float | None = None

    def shrink_over(self) -> bool:
        return (self.first_failure is not None
                and time.perf_counter() - self.first_failure > self.profile.shrink_budget)


def _dtype_name(d: Any) -> str:
    if isinstance(d, torch.dtype):
        name = kd_dtypes.TORCH_TO_IR.get(d)
        if d in kd_dtypes.NARROWED:  # kernels take it, as int32 (kernel_dsl/wide_ints.py)
            raise ValueError(f"dtype {d}: kernels compute it as int32, so fuzz with torch.int32")
        if name is None:
            raise ValueError(f"dtype {d} is not one kernels take ({kd_dtypes.unsupported_reason(d)})")
        return name
    if d not in kd_dtypes.IR_TO_TORCH:
        raise ValueError(f"dtype {d!r}: use torch dtypes or one of {', '.join(kd_dtypes.IR_TO_TORCH)}")
    return str(d)


def _as_outputs(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t if isinstance(t, torch.Tensor) else torch.as_tensor(t) for t in x]
    return [torch.as_tensor(x)]


def _crash(what: str, e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    tail = "".join(tb[-6:]).rstrip()
    return f"{what} raised {type(e).__name__}: {e}\n{tail}"


def _one(kernel: Any, reference: Callable[..., Any], sig: Signature, state: _State,
         data: Any, case: Case, configs: Any) -> tuple[Case, str | None]:
    """Runs one example (see the module docstring): the case with its config, and what went
    wrong (None: it passed). Skips reject the example (hypothesis draws another)."""
    res = state.result
    if (case.backend, case.dtype) in state.unsupported:
        res.skip(case.backend, case.dtype, state.unsupported[(case.backend, case.dtype)])
        reject()
    args = build_args(sig, case)
    try:
        kernel.ir(*args)
    except Exception as e:  # the caller promised these shapes and dtypes work
        return case, _crash("tracing the kernel", e) + (
            f"\n(if the kernel is not meant to take {case.dtype} or these sizes, leave them out "
            "of dtypes= / dims=)")
    try:
        space = kernel.configs(*args, backend=case.backend)
        default = kernel.default_config(*args, backend=case.backend)
    except Exception as e:
        return case, _crash(f"the {case.backend} config space", e)
    salt = zlib.crc32(repr((case.backend, case.dtype, case.sizes)).encode())
    choices = config_choices(space, default, configs, salt)
    case = case.with_config(choices[data.draw(st.integers(0, len(choices) - 1), label="config")])
    if case in state.memo:
        if state.memo[case] is not None:
            return case, state.memo[case]
        reject()  # a repeat of a passing case: hypothesis draws another instead
    if state.shrink_over():
        return case, None  # unseen case after the shrink budget: not run, so shrinking stops
    try:
        exact = _as_outputs(reference(*to_float64(args)))
    except Exception as e:
        res.skip(case.backend, case.dtype, f"the reference raised {type(e).__name__} in float64")
        reject()
    try:
        lowp: list[torch.Tensor] | None = _as_outputs(reference(*args))
    except Exception:
        lowp = None  # PyTorch cannot compute in this dtype: its error is one rounding
    start = time.perf_counter()
    try:
        with poison_outputs():
            outs = kernel.run_cpu(case.backend, args, case.config)
    except DTypeError as e:
        state.unsupported[(case.backend, case.dtype)] = \
            f"backend {case.backend} does not take {case.dtype}: {e.message}"
        res.skip(case.backend, case.dtype, state.unsupported[(case.backend, case.dtype)])
        reject()
    except ImportError as e:
        state.unsupported[(case.backend, case.dtype)] = f"backend {case.backend} unavailable: {e}"
        res.skip(case.backend, case.dtype, state.unsupported[(case.backend, case.dtype)])
        reject()
    except Exception as e:
        detail = _crash(f"running on {case.backend}", e)
        res.record(case.backend, case.dtype, time.perf_counter() - start, 0.0, False,
                   case.describe(sig))
        state.memo[case] = detail
        return case, detail
    seconds = time.perf_counter() - start
    outcome = compare(outs, exact, lowp)
    res.record(case.backend, case.dtype, seconds, outcome.tightest, outcome.ok, case.describe(sig))
    state.memo[case] = None if outcome.ok else outcome.report()
    # hill-climb towards cases that use more of the tolerance: subtle precision loss (bf16
    # accumulation over many blocks) grows into a failure instead of hiding below the limit
    target(min(outcome.tightest, 100.0), label="fraction of the tolerance used")
    return case, state.memo[case]


def fuzz(kernel: Any, reference: Callable[..., Any], signature: str, *,
         dtypes: Sequence[Any] = DEFAULT_DTYPES, dims: dict[str, Any] | None = None,
         configs: int | str | Sequence[Config] = "all", backends: Sequence[str] | None = None,
         values: Sequence[str] = DEFAULT_VALUES, max_examples: int | None = None,
         seed: int | None = None, profile: str | Profile | None = None,
         time_budget: float | None = None, progress: Progress | None = None) -> FuzzResult:
    """Fuzzes `kernel` against `reference` (a PyTorch function of the same arguments).

    signature: each argument's dims, e.g. "x[m,k], y[k,n]" (signature.py); shared names stay
    equal. dtypes: the dtypes the kernel takes (torch dtypes or "f32"/"bf16"/"f16"); a
    backend that refuses one is skipped for it. dims: per dim name, a range (lo, hi), a list
    of sizes or one size (default (1, 512)). configs: "all" (the whole config space), N (the
    default and N - 1 others), "default", or a list of Configs. backends: default every
    registered backend (each runs on this CPU). values: input value classes, from "normal",
    "large" and "special" (±inf/NaN, masked rows: only where the reference defines what the
    kernel must return). max_examples/seed default to the profile's (profiles.py;
    KD_FUZZ_PROFILE=ci|long).

    Returns the summary (FuzzResult). On a failure raises AssertionError with the shrunk case
    as a runnable snippet and the `kdsl fuzz` commands; the error carries `.case`, `.snippet`
    and `.fuzz_result`."""
    prof = profile if isinstance(profile, Profile) else active(profile)
    sig = parse(signature, kernel.params, kernel.kinds)
    dtype_names = tuple(_dtype_name(d) for d in dtypes)
    backend_names = tuple(backends) if backends is not None else tuple(lowering.names())
    for b in backend_names:
        lowering.get(b)  # unknown names fail now, with the list of known ones
    bad_values = [v for v in values if v not in VALUES]
    if bad_values or not values:
        raise ValueError(f"values {list(values)}: use some of {', '.join(VALUES)}")
    dims = dict(dims or {})
    unknown = set(dims) - set(sig.dim_names)
    if unknown:
        raise ValueError(f"dims {sorted(unknown)} are not in the signature {signature!r}")
    n_examples = max_examples if max_examples is not None else prof.max_examples
    run_seed = seed if seed is not None else prof.seed
    result = FuzzResult(spec_string(kernel), spec_string(reference), prof.name, run_seed)
    state = _State(result, prof, time_budget if time_budget is not None else prof.time_budget,
                   progress)
    strategy = cases(sig, backend_names, dtype_names, dims, tuple(values))

    db = DirectoryBasedExampleDatabase(database_path()) if prof.database else None

    @settings(max_examples=n_examples, database=db, deadline=None, derandomize=False,
              report_multiple_bugs=False, print_blob=False,
              phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def search(data: Any) -> None:
        state.calls += 1
        try:
            if time.perf_counter() - result.started > state.time_budget and state.first_failure is None:
                result.budget_hit = True
                return
            case = data.draw(strategy, label="case")
            with warnings.catch_warnings():  # "large" values overflow on purpose
                warnings.simplefilter("ignore", RuntimeWarning)
                case, detail = _one(kernel, reference, sig, state, data, case, configs)
            if detail is not None:
                if state.first_failure is None:
                    state.first_failure = time.perf_counter()
                raise _Failed(case, detail)  # the one place: hypothesis tells bugs apart by it
        finally:
            if progress is not None:
                progress(result, state.calls)

    # examples of different kernels must not share database entries
    search.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{result.kernel}|{result.reference}|{signature}".encode())
    runner = hypothesis_seed(run_seed)(search) if run_seed is not None else search
    reproduce = dict(dtypes=dtype_names, backends=backend_names, dims=dims, values=tuple(values),
                     configs=configs, max_examples=n_examples, seed=run_seed)
    try:
        runner()
    except _Failed as f:
        result.finished = time.perf_counter()
        raise _assertion(kernel, reference, sig, f, result, reproduce) from None
    except Unsatisfiable:
        result.finished = time.perf_counter()
        raise AssertionError(f"fuzz {result.kernel}: no example could run\n{result.table()}") from None
    result.finished = time.perf_counter()
    if result.examples == 0 and not result.budget_hit:
        raise AssertionError(f"fuzz {result.kernel}: no example could run\n{result.table()}")
    return result


def _assertion(kernel: Any, reference: Any, sig: Signature, f: _Failed, result: FuzzResult,
               reproduce: dict[str, Any]) -> AssertionError:
    case = f.case
    code = snippet(kernel, reference, sig, case)
    rerun = command(kernel, reference, sig, **reproduce)
    only = command(kernel, reference, sig, **{**reproduce, "max_examples": 1}, case=case)
    msg = "\n".join([
        f"fuzz: kernel `{getattr(kernel, 'name', kernel)}` disagrees with `{result.reference}` "
        f"(the shrunk case; {result.examples} examples run, {result.failures} of them failing):",
        f"  {case.describe(sig)}",
        *("  " + line for line in f.detail.splitlines()),
        "",
        "Reproduce it (standalone Python):",
        "-" * 72,
        code.rstrip(),
        "-" * 72,
        f"Re-run the search:  {rerun}",
        f"Run only this case: {only}",
        "",
        result.table(),
    ])
    err = AssertionError(msg)
    err.case = case  # type: ignore[attr-defined]
    err.snippet = code  # type: ignore[attr-defined]
    err.fuzz_result = result  # type: ignore[attr-defined]
    err.detail = f.detail  # type: ignore[attr-defined]
    return err


def replay(kernel: Any, reference: Callable[..., Any], signature: str, case: Case) -> FuzzResult:
    """Runs exactly `case` (from a failure message's `--replay` JSON); raises like `fuzz`."""
    sig = parse(signature, kernel.params, kernel.kinds)
    result = FuzzResult(spec_string(kernel), spec_string(reference), "replay", case.seed)
    args = build_args(sig, case)
    exact = _as_outputs(reference(*to_float64(args)))
    try:
        lowp: list[torch.Tensor] | None = _as_outputs(reference(*args))
    except Exception:
        lowp = None
    start = time.perf_counter()
    try:
        with poison_outputs():
            outs = kernel.run_cpu(case.backend, args, case.config)
    except Exception as e:
        detail = _crash(f"running on {case.backend}", e)
        ok, tightest = False, 0.0
    else:
        outcome = compare(outs, exact, lowp)
        detail, ok, tightest = outcome.report(), outcome.ok, outcome.tightest
    result.record(case.backend, case.dtype, time.perf_counter() - start, tightest, ok,
                  case.describe(sig))
    result.finished = time.perf_counter()
    if not ok:
        reproduce = dict(dtypes=(case.dtype,), backends=(case.backend,), dims=dict(case.sizes),
                         values=(case.values,), configs="all", max_examples=1, seed=None)
        raise _assertion(kernel, reference, sig, _Failed(case, detail), result, reproduce)
    return result


__all__ = ["DEFAULT_DIMS", "DEFAULT_DTYPES", "DEFAULT_VALUES", "fuzz", "replay"]
