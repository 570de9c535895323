"""`kernel.autotune` / `kdsl autotune`: search a kernel's config space within a wall-clock budget.

Evaluators:
- "model" (TPU targets, offline): the analytical cost model (`cost_model.py`) ranks configs,
  the VMEM estimate prunes ones that cannot fit, and the real TPU compiler (libtpu compile-only
  targets, in isolated worker processes with a timeout) must accept a config before it can
  win. The winner is also run in Pallas interpret mode on CPU on a reduced problem (each tiled
  dim cut to at most two of its blocks) and compared with a reference config's output: the
  default config with each block raised to at least a quarter of the winner's (a different
  tiling of the same reduced problem, at most eight blocks a dim). Its compile settles
  feasibility; the compiler's VMEM need is measured for the winner alone, in the budget.
- "interpret" (the CPU target): runs each candidate on this machine's CPU through the backend's
  interpreter on the real arguments, compared with the default config's output. Its times are
  plumbing, never performance.
- "schedule" (TPU targets with a known TensorCore clock: v4, v5e, v5p; opt-in): as "model",
  then the `rerank` best-modelled configs are re-priced from the compiler's own VLIW schedule
  of the kernel body plus the model's DMA terms (autotune/schedule.py,
  docs/schedule_evaluator.md) and tried in that order. It costs one extra libtpu compile in a
  fresh process per re-priced config (~5-20 s each on a 2-core machine), against ~1 ms for
  the model. Its results are cached under their own key, preferred by later calls.
Candidates' code never runs in the caller's process: compiles and CPU runs happen in worker
processes (autotune/isolated.py, lowering/pallas/check.py), each under the candidate `timeout`,
so a hanging or crashing candidate is recorded as such and never wins. The wall time is at most
the budget plus one timeout. Every settled config is recorded (with its failure reason) in the
persistent cache as soon as it is settled; a repeat run on the same problem is answered from
the cache without evaluating anything, and a run killed midway resumes where it stopped.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from kernel_dsl import device_random, lowering, tunables
from kernel_dsl.config import Config
from kernel_dsl.errors import BackendError, ConfigError, KernelError
from kernel_dsl.host_views import kernel_tensors
from kernel_dsl.ir import KernelIR
from kernel_dsl.ir_printer import fingerprint
from kernel_dsl.lowering.pallas.targets import tpu_target
from kernel_dsl.lowering.pallas.vmem import PRUNE_HEADROOM, fits_vmem
from kernel_dsl.runtime_scalars import kernel_inputs
from kernel_dsl.version import __version__

from .cache import TuningCache, shape_bucket
from .cost_model import estimate
from .isolated import BUILTIN, CandidateRunner, Outcome
from .search import STRATEGIES, run

Progress = Callable[[str], None]


@dataclass
class Candidate:
    config: str  # Config JSON
    # "ok" | "pruned" | "failed" | "wrong" | "timeout" | "unverified" | "budget" (not run, or cut
    # short: the budget ran out; never cached, so a later run tries it)
    status: str
    reason: str = ""
    seconds: float | None = None  # modelled (model) or CPU interpreter (interpret) seconds
    utilization: float | None = None  # modelled fraction of the chip's bf16 peak
    vmem_estimate: int | None = None
    vmem_used: int | None = None
    # "schedule" where the schedule evaluator re-priced `seconds`; "model: schedule unusable"
    # where it tried and kept the model's price (an unusable dump; the reason went to progress)
    priced_by: str | None = None


@dataclass
class TuneResult:
    kernel: str
    backend: str
    target: str
    evaluator: str
    best: Config | None
    candidates: list[Candidate] = field(default_factory=list)
    from_cache: bool = False
    evaluations: int = 0
    resumed: int = 0  # candidates settled by an earlier, interrupted run (taken from the cache)
    wall_s: float = 0.0
    verified: str = ""  # how the winner's output was checked

    @property
    def best_candidate(self) -> Candidate | None:
        if self.best is None:
            return None
        return next(c for c in self.candidates if c.config == self.best.to_json())

    def failures(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.candidates:
            if c.status not in ("ok", "unverified"):
                out[c.status] = out.get(c.status, 0) + 1
        return out

    def table(self, top: int = 10) -> str:
        unit = {"model": "model s", "schedule": "sched s"}.get(self.evaluator, "interp s")
        rows = [f"autotune {self.kernel} for {self.target} ({self.backend}, {self.evaluator} "
                f"evaluator{', from cache' if self.from_cache else ''}): "
                f"{self.evaluations} evaluated in {self.wall_s:.1f} s",
                f"{'rank':<5}{'config':<58}{unit:>10}{'% peak':>8}{'VMEM MiB':>10}  status"]
        ranked = sorted((c for c in self.candidates if c.seconds is not None and c.status in
                         ("ok", "unverified")), key=lambda c: c.seconds or math.inf)
        for i, c in enumerate(ranked[:top]):
            vm = c.vmem_used if c.vmem_used is not None else c.vmem_estimate
            rows.append(f"{i + 1:<5}{c.config:<58}{c.seconds:>10.3g}"
                        f"{'' if c.utilization is None else f'{100 * c.utilization:.0f}%':>8}"
                        f"{'' if vm is None else f'{vm / 2**20:.1f}':>10}  {c.status}"
                        f"{f' ({c.priced_by})' if c.priced_by else ''}")
        fails = self.failures()
        if fails:
            rows.append("skipped: " + ", ".join(f"{n} {k}" for k, n in sorted(fails.items())))
        rows.append(f"best: {self.best!r}" + (f" ({self.verified})" if self.verified else ""))
        if self.evaluator == "interpret":
            rows.append("(interpret times are CPU plumbing, not performance)")
        return "\n".join(rows)

    def to_json(self) -> str:
        d = asdict(self)
        d["best"] = None if self.best is None else json.loads(self.best.to_json())
        return json.dumps(d, indent=2)


def cache_key(kernel: Any, ir: KernelIR, backend: str, target: str,
              evaluator: str = "model") -> dict[str, Any]:
    key = {"kernel": kernel.name, "ir": fingerprint(ir), "backend": backend, "target": target,
           "shapes": shape_bucket([p.shape for p in ir.inputs]),
           "dtypes": [p.dtype for p in ir.inputs]}
    if ir.tunables:  # another fragment is another search
        key["tunables"] = tunables.cache_part(ir)
    if evaluator == "schedule":  # its seconds and the model's never mix in one ranking
        key["evaluator"] = "schedule"
    return key


def cached_best(cache: TuningCache, key: dict[str, Any]) -> tuple[Config | None, list[dict[str, Any]]]:
    recs = cache.records(key)
    ok = [r for r in recs if r.get("status") == "ok" and r.get("seconds") is not None]
    if not ok:
        return None, recs
    return Config.from_json(min(ok, key=lambda r: r["seconds"])["config"]), recs


def tuned_config(kernel: Any, ir: KernelIR, backend: str, target: str) -> Config | None:
    """The cached winner for this kernel, shapes and target, if it was tuned here."""
    cache = TuningCache(version=__version__)  # also sees results held in memory (unwritable dir)
    for evaluator in ("schedule", "model"):  # a schedule-tuned winner, where one was asked for
        best = cached_best(cache, cache_key(kernel, ir, backend, target, evaluator))[0]
        if best is not None:
            return best
    return None


def _reduced_args(ir: KernelIR, args: tuple[Any, ...], config: Config) -> tuple[Any, ...]:
    """Random inputs where each tiled size is cut to at most two of its blocks under `config`."""
    from kernel_dsl.config import block_values

    blocks = block_values(ir, config)
    cut: dict[int, int] = {}
    for t in ir.tiles:
        cut[t.extent] = min(cut.get(t.extent, t.extent), 2 * min(blocks[t.block.index], t.extent))
    gen = torch.Generator().manual_seed(0)
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shape = [cut.get(d, d) for d in a.shape]
            out.append(torch.randn(shape, generator=gen).to(a.dtype))
        elif isinstance(a, int) and not isinstance(a, bool) and a in cut:
            # an int that is a cut size (attention's `seq_q`) shrinks with it, so that the
            # reduced problem keeps the full one's loop structure
            out.append(cut[a])
        else:
            out.append(a)
    return tuple(out)


def _same(a: list[torch.Tensor], b: list[torch.Tensor], ref: str = "the default config's") -> str:
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {tuple(x.shape)} {x.dtype}, expected {tuple(y.shape)} {y.dtype}"
        tol = 1e-3 if x.dtype == torch.float32 else 3e-2
        if x.is_floating_point():
            xf, yf = x.float(), y.float()
            bad = ~torch.isclose(xf, yf, atol=tol * (yf.abs().max().item() + 1), rtol=tol,
                                 equal_nan=True)
            if bad.any():
                return f"{int(bad.sum())} of {x.numel()} outputs differ from {ref}"
        elif not torch.equal(x, y):
            return f"integer outputs differ from {ref}"
    return ""


# statuses that settle a candidate: a rerun takes them from the cache instead of evaluating
SETTLED = ("ok", "failed", "wrong", "timeout")
COMPLETE = "complete"  # the record that says a search ended (budget or space), not was killed


def _execute(runner: CandidateRunner, kernel: Any, ir: KernelIR, backend: str,
             args: tuple[Any, ...], cfg: Config, timeout: float, left: float) -> Outcome:
    """Runs one config on the CPU: in a worker process under `timeout` for the built-in
    backends, else (a backend registered in this process, whose code a worker cannot import)
    here, without a timeout."""
    be = lowering.get(backend)
    try:
        gen = be.render(ir, cfg, be.cpu_target)
    except KernelError as e:  # e.g. a config that does not fit the reduced problem's loops
        return Outcome("failed", message=f"{type(e).__name__}: {e.message.splitlines()[0][:200]}")
    if gen.backend in BUILTIN:
        return runner.run(gen, [p.dtype for p in ir.returns],
                          kernel_tensors(ir.host, kernel_inputs(args, scalars=kernel.runtime_scalars))
                          + device_random.fresh_seeds(ir),
                          timeout, left)
    try:
        kernel.run_cpu(backend, args, cfg)  # build + warm up
        times = []
        for _ in range(3):
            t = time.perf_counter()
            outs = kernel.run_cpu(backend, args, cfg)
            times.append(time.perf_counter() - t)
    except Exception as e:  # noqa: BLE001  (a candidate may fail in any layer)
        return Outcome("failed", message=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return Outcome("ok", outs, times)


def verify_on_cpu(runner: CandidateRunner, kernel: Any, ir: KernelIR, args: tuple[Any, ...],
                   backend: str, cfg: Config, timeout: float, left: Callable[[], float]) -> Outcome:
    """Runs `cfg` and a reference config (`_reference_config`) on a reduced problem; "ok" if
    the outputs agree."""
    small = _reduced_args(ir, args, cfg)
    # random inputs must still keep a kernel's input contract (attention's qpos are positions,
    # which its causal block skipping assumes): a kernel may say how (`cpu_check_inputs`)
    fix = getattr(kernel, "cpu_check_inputs", None)
    if fix is not None:
        small = fix(small)
    try:
        small_ir = kernel.ir(*small)
        default = _reference_config(lowering.get(backend), small_ir, cfg)
    except KernelError as e:
        return Outcome("failed", message=f"failed on CPU: {e.message}")
    runs = []
    for c in (default, cfg):
        o = _execute(runner, kernel, small_ir, backend, small, c, timeout, left())
        if o.status != "ok":
            which = f"the reference config {default!r}" if c is default else "this config"
            return Outcome(o.status, message=f"{which} on CPU, reduced problem: {o.message}")
        runs.append(o.outputs)
    why = _same(runs[1], runs[0], f"the reference config's ({default!r})")
    return Outcome("wrong", message=why) if why else Outcome("ok")


def _reference_config(be: Any, small_ir: KernelIR, cfg: Config) -> Config:
    """The config a candidate's CPU output is compared with: the default config (small blocks,
    the most exercised) with each positional block raised to at least a quarter of the
    candidate's, the smallest such value of the space. On the reduced problem (two of the
    candidate's blocks a dim) that is a different tiling of at most eight blocks a dim; the
    default itself interpreted 32768 grid steps where an 8192^3 matmul's 2048-blocks cut it to
    4096^3, past the candidate timeout. The default where the raised config does not render."""
    default = be.default_config(small_ir, be.cpu_target)
    space = be.config_space(small_ir, be.cpu_target)
    if len(default.block_sizes) != len(cfg.block_sizes):
        return default
    blocks = []
    for d, c, choices in zip(default.block_sizes, cfg.block_sizes, space.positional):
        above = [v for v in choices if v >= max(d, c // 4)]
        blocks.append(min(above) if above and d in choices else d)
    ref = default.replace(block_sizes=blocks)
    try:
        be.render(small_ir, ref, be.cpu_target)
    except KernelError:
        return default
    return ref


def _measured_vmem(be: Any, ir: KernelIR, cfg: Config, target: str, timeout: float,
                   deadline: float) -> int | None:
    """The winner's VMEM need, asked of the compiler (the smallest limit it accepts), within
    the budget: an extra, so it never stretches a run past it. None where the budget would run
    out first or any limit compiles (the winner stands either way)."""
    if deadline - time.monotonic() <= 0:
        return None
    e = be.check(ir, [be.render(ir, cfg, target)], timeout, True, deadline=deadline)[0]
    return e.vmem_used if e.ok else None


def _from_record(r: dict[str, Any]) -> Candidate:
    return Candidate(**{k: r.get(k) for k in Candidate.__dataclass_fields__})


def _rerank_by_schedule(ir: KernelIR, target: str, ranked: list[Candidate], rerank: int,
                        deadline: float, progress: Progress) -> list[Candidate]:
    """Re-prices the `rerank` best-modelled candidates from the compiler's schedule (with the
    model's fitted serial cost per grid step, without which small blocks come out ~3.5x too fast:
    docs/schedule_evaluator.md) and puts them first, in schedule order. A config whose compile
    fails is settled as failed here; one whose dump is unusable keeps its model price. A config
    whose pricing compile succeeded is `compiled`: that was the verification compile, so
    tune_model checks it on CPU without compiling it again."""
    from .schedule import schedule_objective

    head = [c for c in ranked[:rerank] if c.status == "unverified"]
    log: list[dict[str, Any]] = []
    objective = schedule_objective(ir, target, with_overhead=True, log=log)
    priced: list[Candidate] = []
    for c in head:
        if time.monotonic() >= deadline:
            break
        progress(f"pricing {c.config} from the compiler's schedule ({len(priced) + 1}/{len(head)})")
        seconds = objective(Config.from_json(c.config))
        entry = log[-1]
        if math.isinf(seconds):
            c.status, c.reason = "failed", f"schedule: {entry.get('reason', '')[:200]}"
        else:
            if entry.get("compiled"):
                c.status = "compiled"
            if c.utilization is not None and c.seconds:  # same FLOPs, the new time
                c.utilization *= c.seconds / seconds
            c.seconds, c.priced_by = seconds, entry["evaluator"]
            if entry["evaluator"] != "schedule":
                c.priced_by = "model: schedule unusable"
                progress(f"kept the model's price: {entry.get('reason', '')[:200]}")
        priced.append(c)
    usable = ("unverified", "compiled")
    first = sorted((c for c in priced if c.status in usable), key=lambda c: c.seconds or math.inf)
    rest = [c for c in ranked if c not in priced]
    return first + [c for c in priced if c.status not in usable] + rest


def model_price(be: Any, ir: KernelIR, cfg: Config, target: str) -> Candidate:
    """A config as the model-driven tuner sees it before compiling: "failed" if it does not
    render, "pruned" if its VMEM estimate passes the headroom rule, else "unverified" with its
    modelled seconds (also benchmarks/shipped_configs.py --drift)."""
    tgt = tpu_target(target)
    assert tgt is not None
    c = Candidate(cfg.to_json(), "unverified")
    try:
        gen = be.render(ir, cfg, target)
    except (ConfigError, BackendError) as e:  # BackendError: a rule of the target's compiler
        c.status, c.reason = "failed", e.message
        return c
    c.vmem_estimate = be.estimate_vmem(gen)
    if not fits_vmem(c.vmem_estimate, tgt):
        c.status = "pruned"
        c.reason = (f"VMEM estimate {c.vmem_estimate / 2**20:.1f} MiB > {1 - PRUNE_HEADROOM:.0%} "
                    f"of {tgt.vmem_bytes >> 20} MiB")
        return c
    est = estimate(ir, cfg, tgt)
    c.seconds, c.utilization = est.seconds, est.utilization(tgt)
    return c


def tune_model(kernel: Any, ir: KernelIR, args: tuple[Any, ...], backend: str, target: str,
               budget: float, strategy: str, timeout: float, top_k: int, progress: Progress,
               prior: dict[str, Candidate], record: Callable[[list[Candidate]], None],
               t0: float, evaluator: str = "model", rerank: int = 6) -> TuneResult:
    deadline, hard = t0 + budget, t0 + budget + timeout  # start nothing after; wait for nothing past

    def left() -> float:
        return hard - time.monotonic()

    be = lowering.get(backend)
    space = be.config_space(ir, target)
    default = be.default_config(ir, target)
    res = TuneResult(kernel.name, backend, target, evaluator, None)
    by_cfg: dict[str, Candidate] = {}

    def objective(cfg: Config) -> float:
        c = model_price(be, ir, cfg, target)
        by_cfg[c.config] = c
        return c.seconds if c.status == "unverified" else math.inf

    # a model evaluation takes ~1-5 ms: every config of the Pallas space at large shapes (648
    # for matmul and attention, blocks up to 4096) is ranked in a few seconds, within the 30%
    # of the budget the search gets; pattern search only for larger (user-extended) spaces
    name = strategy if strategy != "auto" else ("exhaustive" if len(space) <= 1024 else "pattern")
    progress(f"searching {len(space)} configs ({name}, model)")
    run(name, space, default, objective, budget * 0.3)  # fills by_cfg through objective
    res.evaluations = len(by_cfg)
    ranked = sorted((c for c in by_cfg.values() if c.status == "unverified"),
                    key=lambda c: c.seconds or math.inf)
    for c in ranked:  # compiled and checked by an earlier, killed run: not again
        old = prior.get(c.config)
        if old is not None:
            c.status, c.reason, c.vmem_used = old.status, old.reason, old.vmem_used
            if old.priced_by is not None and old.seconds is not None:  # by the schedule
                c.seconds, c.priced_by = old.seconds, old.priced_by
            res.resumed += 1
    if evaluator == "schedule":
        ranked = _rerank_by_schedule(ir, target, ranked, rerank, deadline, progress)
    record([c for c in by_cfg.values() if c.status in ("pruned", "failed") and c.config not in prior])
    with CandidateRunner() as runner:
        # the real compiler decides feasibility: verify the best-ranked until one compiles
        for i in range(0, len(ranked), top_k):
            if time.monotonic() >= deadline or res.best is not None:
                break
            batch = ranked[i:i + top_k]
            fresh = [c for c in batch if c.status == "unverified"]
            if fresh:
                progress(f"compiling {len(fresh)} candidates for {target}")
                gens = [be.render(ir, Config.from_json(c.config), target) for c in fresh]
                # feasibility only: measuring VMEM searches the limit (up to ten compiles), which
                # at 8192^3 took 4096-wide blocks ~115 s each; the winner alone is measured below
                for c, e in zip(fresh, be.check(ir, gens, timeout, False, deadline=hard)):
                    c.vmem_used = e.vmem_used
                    if e.ok:
                        c.status = "compiled"
                    else:
                        c.status = {"timeout": "timeout", "budget": "budget"}.get(
                            e.error_class or "", "failed")
                        c.reason = f"{e.error_class}: {e.message.splitlines()[0][:200] if e.message else ''}"
            for c in batch:
                if res.best is None and c.status == "ok":  # verified by an earlier run
                    res.best = Config.from_json(c.config)
                    res.verified = "compiled for the target; output checked on CPU, reduced " \
                        "problem (an earlier run)"
                if c.status != "compiled" or res.best is not None:
                    continue
                cfg = Config.from_json(c.config)
                progress(f"checking {cfg!r} against a reference config on CPU")
                o = verify_on_cpu(runner, kernel, ir, args, backend, cfg, timeout, left)
                c.status, c.reason = o.status, o.message
                if o.status == "ok":
                    res.best = cfg
                    res.verified = "compiled for the target; output checked on CPU, reduced problem"
                    c.vmem_used = _measured_vmem(be, ir, cfg, target, timeout, deadline)
            for c in batch:
                if c.status == "compiled":  # compiled, not verified: the search ended first
                    c.status = "unverified"
            record([c for c in batch if c.status in SETTLED and c.config not in prior])
    for c in ranked:  # compiled while priced by the schedule, never reached for checking
        if c.status == "compiled":
            c.status = "unverified"
    res.candidates = list(by_cfg.values())
    res.wall_s = time.monotonic() - t0
    return res


def _materialize(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Random CPU tensors for shape-only (meta) arguments, e.g. from `kdsl autotune --shapes`."""
    gen = torch.Generator().manual_seed(0)
    out: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "meta":
            if a.dtype.is_floating_point:
                a = torch.randn(tuple(a.shape), generator=gen).to(a.dtype)
            else:
                a = torch.randint(-8, 8, tuple(a.shape), generator=gen).to(a.dtype)
        out.append(a)
    return tuple(out)


def tune_interpret(kernel: Any, ir: KernelIR, args: tuple[Any, ...], backend: str, target: str,
                   budget: float, strategy: str, timeout: float, progress: Progress,
                   prior: dict[str, Candidate], record: Callable[[list[Candidate]], None],
                   t0: float) -> TuneResult:
    hard = t0 + budget + timeout  # candidates start before the budget ends; none waits past this
    args = _materialize(args)
    be = lowering.get(backend)
    space = be.config_space(ir, target)
    default = be.default_config(ir, target)
    res = TuneResult(kernel.name, backend, target, "interpret", None)
    by_cfg: dict[str, Candidate] = {}
    with CandidateRunner() as runner:
        progress(f"running the default config {default!r} (the reference output)")
        want = _execute(runner, kernel, ir, backend, args, default, timeout, hard - time.monotonic())
        if want.status != "ok":
            c = Candidate(default.to_json(), want.status, f"the default config: {want.message}")
            res.candidates, res.evaluations = [c], 1
            res.verified = ("nothing run: the budget ran out before the reference (the default "
                            "config) finished; a worker's start takes seconds, give a larger budget"
                            if want.status == "budget" else
                            "nothing verified: the default config, the reference, did not run")
            record([c] if c.status in SETTLED else [])
            res.wall_s = time.monotonic() - t0
            return res

        def objective(cfg: Config) -> float:
            key = cfg.to_json()
            if key in prior:
                c = by_cfg[key] = prior[key]
                res.resumed += 1
                return c.seconds if c.status == "ok" and c.seconds is not None else math.inf
            c = by_cfg[key] = Candidate(key, "ok")
            o = _execute(runner, kernel, ir, backend, args, cfg, timeout, hard - time.monotonic())
            c.status, c.reason = o.status, o.message
            if o.status == "ok":
                why = _same(o.outputs, want.outputs)
                if why:
                    c.status, c.reason = "wrong", why
                else:
                    c.seconds = statistics.median(o.times)
            record([c] if c.status in SETTLED else [])
            return c.seconds if c.seconds is not None else math.inf

        name = strategy if strategy != "auto" else ("exhaustive" if len(space) <= 16 else "pattern")
        progress(f"searching {len(space)} configs ({name}, CPU interpreter, one worker process)")
        run(name, space, default, objective, budget - (time.monotonic() - t0))
    res.candidates = list(by_cfg.values())
    res.evaluations = len(by_cfg)
    ok = [c for c in res.candidates if c.status == "ok" and c.seconds is not None]
    if ok:
        res.best = Config.from_json(min(ok, key=lambda c: c.seconds or math.inf).config)
        res.verified = "output checked against the default config on the real arguments"
    res.wall_s = time.monotonic() - t0
    return res


def _evaluator_for(evaluator: str | None, target: str) -> str:
    from .schedule import CLOCK_HZ

    default = "model" if tpu_target(target) else "interpret"
    if evaluator is None or evaluator == default:
        return default
    if evaluator == "schedule" and default == "model":
        if target not in CLOCK_HZ:
            raise ConfigError(
                f"the schedule evaluator has no TensorCore clock for {target}, so the compiler's "
                "bundles cannot become seconds (docs/schedule_evaluator.md)", None,
                f"use it on {', '.join(CLOCK_HZ)}, or the default model evaluator on {target}")
        return evaluator
    raise ConfigError(f"evaluator {evaluator!r} does not apply to target {target!r}", None,
                      "TPU targets: 'model' (default) or 'schedule'; the cpu target: 'interpret'")


def autotune(kernel: Any, args: tuple[Any, ...], *, target: str = "cpu", backend: str | None = None,
             budget: float = 60.0, strategy: str = "auto", timeout: float = 120.0, top_k: int = 4,
             cache: TuningCache | None = None, use_cache: bool = True,
             progress: Progress | None = None, evaluator: str | None = None,
             rerank: int = 6) -> TuneResult:
    """Wall time: at most `budget` plus one candidate `timeout` (and a worker's shutdown).
    Every settled candidate goes to the cache as soon as it is settled, so a run killed midway
    loses only the candidates in flight, and the next run resumes from the cache."""
    t0 = time.monotonic()  # the budget counts tracing and cache reads too
    backend = backend or ("pallas" if tpu_target(target) else kernel.backend_name())
    if strategy not in (*STRATEGIES, "auto"):
        raise ConfigError(f"unknown strategy {strategy!r}", None,
                          f"strategies: auto, {', '.join(STRATEGIES)}")
    progress = progress or (lambda _msg: None)
    cache = cache or TuningCache(version=__version__)
    evaluator = _evaluator_for(evaluator, target)
    ir = kernel.ir(*args)
    key = cache_key(kernel, ir, backend, target, evaluator)
    prior: dict[str, Candidate] = {}
    if use_cache:
        best, recs = cached_best(cache, key)
        done = any(r.get("status") == COMPLETE for r in recs)
        cands = [_from_record(r) for r in recs if r.get("status") != COMPLETE]
        if best is not None and done:
            return TuneResult(kernel.name, backend, target, recs[0].get("evaluator", "?"), best,
                              cands, from_cache=True)
        if not done:  # an earlier run was killed: keep what it settled
            prior = {c.config: c for c in cands if c.status in SETTLED}
            if prior:
                progress(f"resuming: {len(prior)} candidates settled by an earlier run")

    def record(cands: list[Candidate]) -> None:
        if cands:
            cache.add(key, [{**asdict(c), "evaluator": evaluator} for c in cands])

    if evaluator != "interpret":
        res = tune_model(kernel, ir, args, backend, target, budget, strategy, timeout, top_k,
                         progress, prior, record, t0, evaluator, rerank)
    else:
        res = tune_interpret(kernel, ir, args, backend, target, budget, strategy, timeout,
                             progress, prior, record, t0)
    # the unsettled ranking too (model estimates of configs never compiled), and the end mark
    record([c for c in res.candidates if c.status == "unverified" and c.seconds is not None])
    cache.add(key, [{"status": COMPLETE, "evaluator": evaluator}])  # no config: one per key
    return res
