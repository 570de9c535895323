"""`@kd.tpu_kernel`: the kernel object, its specializations and its compiled-kernel cache."""
from __future__ import annotations

import enum
import inspect
import os
import traceback
import types
from typing import Any, Callable

import torch

from . import (
    amp,
    arguments,
    bucket_plan,
    buckets,
    device_if,
    device_random,
    dtypes,
    guards,
    host_views,
    lowering,
    runtime_scalars,
    tunables,
    wide_ints,
)
from .arg_check import (
    autotune_target,
    check_config,
    check_strategy,
    check_target,
    did_you_mean,
    positive_seconds,
)
from .autotune.cost_model import estimate
from .autotune.search import STRATEGIES
from .autotune.tuner import TuneResult, autotune, tuned_config
from .bounded import Bounded
from .check import CheckReport
from .config import Config, ConfigSpace
from .errors import (
    ArgumentError,
    BackendError,
    ConfigError,
    DTypeError,
    KernelError,
    KernelSyntaxError,
    SourceLoc,
)
from .ir import KernelIR
from .ir_verify import verify
from .lowering.pallas.targets import TPU_TARGETS, tpu_target
from .runtime_scalars import RUNTIME_TYPES as _RUNTIME
from .runtime_scalars import kernel_inputs
from .torch_ops import make_ops
from .trace_mode import TraceMode
from .tracing import ShapeOnly, Tracer, is_machinery, run_traced, user_loc

_backend_stack: list[str] = []  # `with kd.backend(...)`; a plain global so Dynamo can read it
_ENV_BACKEND = os.environ.get("KD_BACKEND")
_faithful_stack: list[bool] = []
_ENV_FAITHFUL = os.environ.get("KD_INTERPRET", "") == "faithful"
# may take the plain CPU call (lists: `_validate`); enums and functions are keyed as constants
_PLAIN = (int, float, bool, list, tuple, str, type(None), enum.Enum, types.FunctionType)
_CONSTANT = (int, bool, float, str, type(None))  # keyed as (type, value)


class backend:
    """`with kd.backend("nki"):` runs kernels on CPU through that backend's CPU path."""

    def __init__(self, name: str):
        lowering.get(name)  # unknown names fail here, at the user's `with` line
        self.name = name

    def __enter__(self) -> "backend":
        _backend_stack.append(self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        _backend_stack.pop()


class interpret_mode:
    """`with kd.interpret_mode("faithful"):` (or `KD_INTERPRET=faithful`) runs CPU interpreters
    like the hardware: out-of-bounds reads raise, new memory is NaN, races are reported. Slower
    (~10x per grid step); `"fast"` is the default."""

    def __init__(self, mode: str):
        if mode not in ("fast", "faithful"):
            raise ConfigError(f"interpret mode {mode!r}", user_loc(), "use 'fast' or 'faithful'")
        self.faithful = mode == "faithful"

    def __enter__(self) -> "interpret_mode":
        _faithful_stack.append(self.faithful)
        return self

    def __exit__(self, *exc: object) -> None:
        _faithful_stack.pop()


def _faithful() -> bool:
    return _faithful_stack[-1] if _faithful_stack else _ENV_FAITHFUL


def _foreign_error_loc(exc: BaseException) -> SourceLoc | None:
    """The innermost user frame of a traceback (not kernel_dsl, not torch)."""
    loc = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if not is_machinery(fs.filename):
            loc = SourceLoc(fs.filename, fs.lineno or 0, fs.line or "")
    return loc


def _check_decorator_args(config: Any, configs: Any, backend: Any) -> None:
    check_config(config)
    if configs is not None and (not isinstance(configs, (list, tuple))
                                or not all(isinstance(c, Config) for c in configs)):
        raise ConfigError(f"configs={configs!r} is not a list of kd.Config", user_loc(),
                          "pass configs=[kd.Config(...), ...]; one config is config=kd.Config(...)")
    if backend is not None and (not isinstance(backend, str) or backend not in lowering.names()):
        close = did_you_mean(backend, lowering.names()) if isinstance(backend, str) else ""
        raise BackendError(f"unknown backend {backend!r}", user_loc(),
                           f"{close}backends: {', '.join(lowering.names())}")


class Kernel:
    """A traced, specialized, compiled and cached tile kernel; callable like a torch function."""

    static_shapes = False  # True: never padded to shape buckets (the library's ops pad themselves)
    # float arguments are runtime scalars (runtime_scalars.py); False: constants, built per value
    runtime_scalars = True

    def __init__(self, fn: Callable[..., Any], *, config: Config | None = None,
                 configs: list[Config] | None = None, backend: str | None = None,
                 autocast: str | None = None, static_shapes: bool | None = None):
        if not callable(fn):
            raise ArgumentError(f"kd.tpu_kernel decorates a function, got {type(fn).__name__}",
                                user_loc(), "put @kd.tpu_kernel on a `def` whose body has a "
                                "`for ... in kd.tile(...)` loop")
        _check_decorator_args(config, configs, backend)
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)  # the user's; the IR's is names.py's
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        for p in self.params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                raise KernelSyntaxError(f"kernel `{self.name}` parameter `{p.name}` is "
                                        f"{p.kind.description}", user_loc(),
                                        "kernel parameters are plain positional arguments")
        self.kinds = [arguments.arg_kind(p, getattr(fn, "__globals__", None)) for p in self.params]
        self.has_callable = arguments.CALLABLE in self.kinds
        self.config = config if config is not None else (configs[0] if configs else None)
        self.configs_given = list(configs or [])
        self.default_backend = backend
        self.autocast = amp.check_policy(autocast)  # torch's cast policy under torch.autocast
        if static_shapes is not None:
            if not isinstance(static_shapes, bool):
                raise ConfigError(f"static_shapes={static_shapes!r}", user_loc(),
                                  "pass static_shapes=True (exact sizes) or False (buckets)")
            self.static_shapes = static_shapes
        self._sizes: dict[tuple[int, int], int] = {}  # (argument, axis) -> the first size seen
        self._dynamic: set[tuple[int, int]] = set()  # axes known to change (bucket_plan.py)
        self._plans: dict[tuple[Any, ...], bucket_plan.Padded | None] = Bounded()
        self.stats = {"traces": 0, "renders": 0, "compiles": 0}
        self._irs: dict[tuple[Any, ...], KernelIR] = Bounded()  # oldest out past the limit
        self._compiled: dict[tuple[Any, ...], Callable[..., tuple[torch.Tensor, ...]]] = Bounded()
        # float arguments keyed by value: those kd.specialize asked for, or all of them
        self._specialized: frozenset[int] = frozenset(
            () if self.runtime_scalars else range(len(self.params)))
        self._jax: Any = None
        self._ops = make_ops(self)

    # -- the call path (kept small: Dynamo traces it, eager calls pay for it) -------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(self.params):
            args = self._bind(args, kwargs)
        if not torch.compiler.is_compiling() and self._plain_cpu_call(args) and not (
                self.autocast and torch.is_autocast_enabled("cpu")):  # the op casts
            # the op's own body, minus the dispatcher: nothing here needs autograd, fake
            # tensors or functorch, and the dispatcher costs more than the kernel launch
            outs = self.run_cpu(self.backend_name(), args)
        else:
            outs = self._ops.route(args)(*args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _plain_cpu_call(args: tuple[Any, ...]) -> bool:
        grad = torch.is_grad_enabled()  # off inside a backward, or an autograd.Function
        for a in args:  # ~0.2 us an argument: eager calls of small kernels pay for this loop
            if type(a) is torch.Tensor:
                if not a.is_cpu or (grad and a.requires_grad):
                    return False
            elif isinstance(a, torch.Tensor) or not isinstance(a, _PLAIN):
                return False  # a subclass; or None, ...: the router says which
        return not torch._C._are_functorch_transforms_active()

    def register_autograd(self, backward: Callable[..., Any], *,
                          setup_context: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """torch.library's `register_autograd` for this kernel: `setup_context(ctx, inputs,
        output)` sees the output as a call returns it (a tensor, or a tuple); `backward(ctx,
        *grads)` gets one gradient per output and returns one per input (None for scalars). The
        backward may call kernels. Returns `backward`, so `@kernel.register_autograd` works."""
        self._ops.register_autograd(backward, setup_context)
        return backward

    def backend_name(self) -> str:
        if _backend_stack:
            return _backend_stack[-1]
        return self.default_backend or _ENV_BACKEND or "pallas"

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{self.name}(): {e}", user_loc(),
                                f"call it as {self.name}{self.signature}") from None
        bound.apply_defaults()
        return tuple(bound.args)

    # -- specialization --------------------------------------------------------------------------
    def _validate(self, args: tuple[Any, ...]) -> None:
        loc = user_loc()
        if len(args) != len(self.params):
            raise ArgumentError(f"{self.name}() takes {len(self.params)} arguments, got "
                                f"{len(args)}", loc, f"call it as {self.name}{self.signature}")
        device = None
        for p, kind, a in zip(self.params, self.kinds, args):
            if kind == "Tensor" or (kind == arguments.OPTIONAL and isinstance(a, torch.Tensor)):
                if not isinstance(a, torch.Tensor):
                    raise ArgumentError(f"argument `{p.name}` must be a torch.Tensor, got "
                                        f"{type(a).__name__}", loc, arguments.tensor_hint(a)
                                        or f"call it as {self.name}{self.signature}")
                if dtypes.to_ir(a.dtype) is None:
                    raise DTypeError(f"argument `{p.name}` has dtype {a.dtype}", loc,
                                     dtypes.unsupported_reason(a.dtype))
                if a.dim() == 0 or a.numel() == 0:
                    raise ArgumentError(f"argument `{p.name}` has shape {list(a.shape)}", loc,
                                        "kernels take tensors with at least one dim and one element")
                if device is not None and a.device != device:
                    raise ArgumentError(f"argument `{p.name}` is on {a.device}, earlier ones on "
                                        f"{device}", loc, "move all tensor arguments to one device")
                device = a.device
            elif arguments.check(kind, a) is not None:
                raise ArgumentError(f"argument `{p.name}` must be {arguments.check(kind, a)}, got "
                                    f"{a!r}", loc, f"call it as {self.name}{self.signature}")

    def arg_key(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The key of traces and builds: argument shapes, dtypes and constant values (a runtime
        float gives its type only, unless the kernel `kd.specialize`s it), and the values of the
        scalar globals and closure variables the kernel reads (guards.py)."""
        rs = self.__dict__.get("_reads")
        if rs is None:  # found once, at the first call (globals defined after `def` count)
            rs = self._reads = guards.reads(self.fn)
        spec = self._specialized
        return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor)
                     else arguments.FLOAT_KEY if type(a) in _RUNTIME and i not in spec
                     else (type(a), a) if type(a) in _CONSTANT else arguments.key_part(a)
                     for i, a in enumerate(args)) + guards.values(rs)

    def ir(self, *args: Any) -> KernelIR:
        """The tile IR of this kernel specialized to `args` (shapes, dtypes, constant values)."""
        args = self._bind(args, {}) if len(args) != len(self.params) else args
        key = self.arg_key(args)
        ir = self._irs.get(key)
        if ir is None:
            self._validate(args)
            ir = self._traced(args, {})
            self._irs[self.arg_key(args)] = ir  # again: kd.specialize may have widened the key
        return ir

    def _traced(self, args: tuple[Any, ...], values: dict[str, Any]) -> KernelIR:
        """A trace with these kd.register_tunable values (the fragments' defaults for the rest);
        its `retrace` traces other values, each once (kernel_dsl/tunables.py)."""
        ir = self._trace(args, values)
        if ir.tunables:
            # tensors: their metadata is all a trace reads (callables keep their closures)
            metas = tuple(torch.empty(tuple(a.shape), dtype=a.dtype, device="meta")
                          if isinstance(a, torch.Tensor) else a for a in args)
            key = self.arg_key(args)

            def retrace(want: dict[str, Any]) -> KernelIR:
                vkey = key + (("tunables",) + tuple(sorted(want.items())),)
                got = self._irs.get(vkey)
                if got is None:
                    got = self._irs[vkey] = self._traced(metas, want)
                return got

            ir.retrace = retrace
        return ir

    def _trace(self, args: tuple[Any, ...], tunable_values: dict[str, Any] | None = None) -> KernelIR:
        self.stats["traces"] += 1
        tracer = Tracer(self.name)
        tracer.tunable_values = dict(tunable_values or {})
        call_args: list[Any] = []
        scalars = runtime_scalars.ScalarArgs()
        for i, (p, a) in enumerate(zip(self.params, args)):
            if isinstance(a, torch.Tensor):
                meta = torch.empty(tuple(a.shape), dtype=a.dtype, device="meta")
                tracer.add_param(meta, p.name, dtypes.to_ir(a.dtype), False, arg_index=i)
                call_args.append(meta)
            elif self.runtime_scalars and runtime_scalars.is_runtime(a):  # a hidden input, in
                # argument order: [1, 1] f32
                meta = torch.empty(runtime_scalars.HIDDEN_SHAPE, dtype=torch.float32, device="meta")
                param = tracer.add_param(meta, p.name, "f32", False, arg_index=i)
                call_args.append(runtime_scalars.argument(p.name, a, param, i, scalars))
            else:
                call_args.append(a)
        for pname, name, t in self._captured(args):  # hidden inputs, after the arguments'
            meta = torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
            dt = dtypes.to_ir(t.dtype)
            if dt is None:
                raise DTypeError(f"tensor `{name}` captured by `{pname}` has dtype {t.dtype}",
                                 user_loc(), dtypes.unsupported_reason(t.dtype))
            captured = tracer.add_param(meta, f"{pname}_{name}", dt, False)
            tracer.param_of[id(t)] = captured  # device code indexes the closure's own tensor
            tracer._keep.append(t)
        try:
            returned = run_traced(device_if.rewritten(self.fn), tracer, call_args,
                                  TraceMode(tracer))
            if scalars.specialized - self._specialized:  # from now on keyed by those values
                self._specialized = self._specialized | scalars.specialized
        except KernelError:
            raise
        except Exception as e:  # the user's own code failed on these arguments
            shapes = ", ".join(f"{p.name}: {list(a.shape)} {a.dtype}" if isinstance(a, torch.Tensor)
                               else f"{p.name}={a!r}" for p, a in zip(self.params, args))
            # before the grid, host code only reads shapes: the arguments do not fit the kernel
            cls = ArgumentError if tracer.grid is None and not tracer.phases else KernelSyntaxError
            raise cls(f"{type(e).__name__}: {e}", _foreign_error_loc(e),
                      f"this line failed while tracing `{self.name}` for {shapes}; "
                      "check the arguments' ranks and shapes") from e
        ir = tracer.finish(returned, None)
        for part in ir.phases or [ir]:  # kd.barrier(): each grid loop is a kernel of its own
            verify(part)
        return ir

    # -- rendering and compiling -----------------------------------------------------------------
    def _config_for(self, ir: KernelIR, backend_name: str, target: str,
                    config: Config | None) -> Config:
        """explicit `config=` (call, then decorator) -> autotune cache -> default."""
        if config is not None:
            return config
        if self.config is not None:
            return self.config
        tuned = tuned_config(self, ir, backend_name, target)
        if tuned is not None:
            return tuned
        return lowering.get(backend_name).default_config(ir, target)

    def generated(self, *args: Any, backend: str | None = None, config: Config | None = None,
                  target: str | None = None) -> lowering.Generated:
        be = lowering.get(backend or self.backend_name())
        check_config(config)
        tgt = check_target(be, target) if target is not None else be.cpu_target
        ir = self.ir(*args)
        resolve = getattr(be, "resolve_target", None)  # "tpu" -> the attached chip's generation
        tgt = resolve(tgt) if resolve is not None else tgt
        self.stats["renders"] += 1
        return be.render(ir, self._config_for(ir, be.name, tgt, config), tgt)

    def source(self, *args: Any, backend: str | None = None, config: Config | None = None,
               target: str | None = None) -> str:
        """Generated source (readable, standalone) for these arguments."""
        return self.generated(*args, backend=backend, config=config, target=target).source

    def configs(self, *args: Any, backend: str | None = None, target: str | None = None) -> ConfigSpace:
        be = lowering.get(backend or self.backend_name())
        tgt = check_target(be, target) if target is not None else be.cpu_target
        return be.config_space(self.ir(*args), tgt)

    def default_config(self, *args: Any, backend: str | None = None) -> Config:
        be = lowering.get(backend or self.backend_name())
        return be.default_config(self.ir(*args), be.cpu_target)

    def compiled(self, backend_name: str, args: tuple[Any, ...],
                 config: Config | None = None) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The CPU runner for these arguments, built once per (backend, shapes, dtypes, config)."""
        faithful = _faithful()
        key = (backend_name, config, faithful) + self.arg_key(args)
        fn = self._compiled.get(key)
        if fn is None:
            be = lowering.get(backend_name)
            ir = self.ir(*args)
            cfg = self._config_for(ir, be.name, be.cpu_target, config)
            ir = tunables.ir_for(ir, cfg)  # the trace for its kd.register_tunable values
            gen = be.render(ir, cfg, be.cpu_target)
            self.stats["renders"] += 1
            fn = be.compile(gen, ir, faithful=True) if faithful else be.compile(gen, ir)
            fn = wide_ints.wrap(ir, fn)  # int64 arguments and outputs: narrowed, widened
            fn = host_views.wrap(ir.host, fn)  # host views of inputs and outputs, around it
            fn = device_random.wrap(ir, fn)  # torch.rand_like's seeds: fresh at every call
            self.stats["compiles"] += 1
            self._compiled[(backend_name, config, faithful) + self.arg_key(args)] = fn  # specialize
        return fn

    def run_cpu(self, backend_name: str, args: tuple[Any, ...],
                config: Config | None = None) -> list[torch.Tensor]:
        """Runs on CPU tensors; the body of the CPU custom ops."""
        key = self.arg_key(args)
        fn = self._compiled.get((backend_name, config, _faithful()) + key)
        if fn is None:
            padded = self._bucketed(args, key, backend_name, config)
            if padded is not None:  # the bucket's build, on padded inputs; outputs cut back
                args = padded.pad_args(args)
                fn = self.compiled(backend_name, args, config)
                return padded.cut_outputs(self._run(fn, args))
            fn = self.compiled(backend_name, args, config)
        return self._run(fn, args)

    def launch_state(self) -> tuple[Any, ...]:
        """What besides the arguments picks the CPU build `run_cpu` uses: the backend in force,
        the interpret mode and the shape-bucket policy. A caller that keeps `cpu_runner`'s result
        keys it on this and on the arguments' `arg_key`."""
        return (self.backend_name(), _faithful(), buckets.policy())

    def cpu_runner(self, args: tuple[Any, ...]) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The build `run_cpu(self.backend_name(), args)` runs, for a caller that launches many
        calls of one signature itself (it passes `runtime_scalars.kernel_inputs(args)`: the
        contiguous CPU tensors, and each float argument as a [1, 1] f32 tensor, in argument order).
        Static-shape kernels only: a bucketed kernel pads its arguments in `run_cpu`."""
        if not self.static_shapes:
            raise AssertionError(f"{self.name}: cpu_runner needs static_shapes=True")
        return self.compiled(self.backend_name(), args)

    def _run(self, fn: Callable[..., tuple[torch.Tensor, ...]], args: tuple[Any, ...]) -> list[torch.Tensor]:
        # the tensors, and each runtime float as a [1, 1] f32 input; then captured tensors
        tensors = kernel_inputs(args, scalars=self.runtime_scalars)
        if self.has_callable:
            tensors += [t.contiguous() for _, _, t in self._captured(args, check=True)]
        return list(fn(*tensors))

    def _captured(self, args: tuple[Any, ...], check: bool = False
                  ) -> list[tuple[str, str, torch.Tensor]]:
        """(parameter, variable, tensor) for each tensor the callable arguments' closures hold."""
        out = []
        for p, kind, a in zip(self.params, self.kinds, args):
            if kind != arguments.CALLABLE:
                continue
            for name, t in arguments.captured_tensors(a):
                if check and t.requires_grad and torch.is_grad_enabled():
                    raise ArgumentError(
                        f"tensor `{name}` captured by `{p.name}` requires grad, which a captured "
                        "tensor cannot get", user_loc(), f"pass `{name}` to the kernel as a "
                        "tensor argument (the kernel's autograd then sees it), or detach it")
                if check and t.device.type != "cpu":
                    raise ArgumentError(f"tensor `{name}` captured by `{p.name}` is on "
                                        f"{t.device}", user_loc(), "callable arguments run on cpu "
                                        "tensors: capture cpu tensors")
                out.append((p.name, name, t))
        return out

    # -- shape buckets (kernel_dsl/buckets.py, bucket_plan.py) ----------------------------------
    def note_dynamic(self, args: tuple[Any, ...]) -> None:
        """Records the axes that change: symbolic under torch.compile (the fake sees SymInts),
        marked with `torch._dynamo.mark_dynamic`, or seen with two sizes."""
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                continue
            marked = getattr(a, "_dynamo_dynamic_indices", ())
            for axis, size in enumerate(a.shape):
                if not isinstance(size, int) or axis in marked:
                    self._dynamic.add((i, axis))
                    continue
                if self._sizes.setdefault((i, axis), size) != size:
                    self._dynamic.add((i, axis))

    def _bucketed(self, args: tuple[Any, ...], key: tuple[Any, ...], backend_name: str,
                  config: Config | None) -> bucket_plan.Padded | None:
        if self.static_shapes or config is not None or not buckets.enabled():
            return None
        pkey = key + (buckets.policy(),)
        if pkey in self._plans:
            return self._plans[pkey]
        self.note_dynamic(args)
        found = None
        # host views (`x.view(-1)`) mix padded and real elements: their kernels run exact sizes
        # host views and phases (kd.barrier()) run exact sizes too
        if self._dynamic and self.ir(*args).host is None and not self.ir(*args).phases and not (
                self.has_callable and self._captured(args)):  # nor do captured tensors
            be = lowering.get(backend_name)
            # a config the user tuned for exactly these shapes wins over the bucket's build
            if self.config is not None or tuned_config(self, self.ir(*args), be.name,
                                                       be.cpu_target) is None:
                found = bucket_plan.plan(self, args, self._dynamic)
        self._plans[pkey] = found
        return found

    def shapes_only(self, args: tuple[Any, ...]) -> list[torch.Tensor]:
        """Runs the host code with `kd.tile` loops skipped: the outputs' metadata (the fake)."""
        # the kernel sees its tensor arguments as contiguous (the trace's meta tensors are, and
        # the call makes them so): `torch.empty_like(x)` and host views follow that layout
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        with ShapeOnly():
            out = self.fn(*args)
        return host_views.unaliased(list(out) if isinstance(out, (tuple, list)) else [out])

    def check(self, *args: Any, targets: list[str] | None = None, config: Config | None = None,
              backend: str = "pallas", timeout: float = 300.0,
              measure_vmem: bool = True) -> CheckReport:
        """Compiles for real targets with the backend's own toolchain (no hardware needed): one
        entry per target with status, error class, VMEM used and limit, compile seconds."""
        be = lowering.get(backend)
        checker = getattr(be, "check", None)
        if checker is None:
            raise BackendError(f"backend {backend!r} has no compile check", user_loc(),
                               "check TPU kernels with backend='pallas'")
        targets = [targets] if isinstance(targets, str) else list(targets or be.targets)
        unknown = [t for t in targets if t not in be.targets]
        if unknown:
            close = did_you_mean(unknown[0], be.targets) if isinstance(unknown[0], str) else ""
            raise ArgumentError(f"unknown targets {unknown} for backend {backend!r}", user_loc(),
                                f"{close}targets: {', '.join(be.targets)}")
        check_config(config)
        timeout = positive_seconds("timeout", timeout)
        ir = self.ir(*args)
        gens = [be.render(ir, self._config_for(ir, be.name, t, config), t) for t in targets]
        shapes = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ir.inputs)
        return CheckReport(self.name, shapes, checker(ir, gens, timeout, measure_vmem))

    def autotune(self, *args: Any, target: str = "cpu", budget: float = 60.0,
                 strategy: str = "auto", backend: str | None = None, **kw: Any) -> TuneResult:
        """Searches the config space within `budget` seconds; the winner goes to the persistent
        cache, where later calls with these shapes find it. Targets: "cpu" (times on this
        machine's CPU interpreter, any backend) and the TPU generations (Pallas: the cost model
        and the TPU compiler); other chips have no evaluator, so they are refused."""
        budget = positive_seconds("budget", budget)
        if "timeout" in kw:
            kw["timeout"] = positive_seconds("timeout", kw["timeout"])
        check_strategy(strategy, list(STRATEGIES))
        be = lowering.get(backend or ("pallas" if tpu_target(target) else self.backend_name()))
        tuned_for = autotune_target(be, target)
        res = autotune(self, args, target=tuned_for, budget=budget, strategy=strategy,
                       backend=be.name, **kw)
        if target == "cpu":
            res.target = "cpu"  # NKI's CPU path renders (and caches) for trn2; timed on this CPU
        return res

    def estimate(self, *args: Any, target: str, config: Config | None = None) -> float:
        """Modelled seconds on a TPU target (the autotuner's analytical model)."""
        tgt = tpu_target(target) if isinstance(target, str) else None
        if tgt is None:
            close = did_you_mean(target, TPU_TARGETS) if isinstance(target, str) else ""
            raise ArgumentError(f"no cost model for target {target!r}", user_loc(),
                                f"{close}estimate TPU targets: {', '.join(TPU_TARGETS)}")
        check_config(config)
        ir = self.ir(*args)
        return estimate(ir, self._config_for(ir, "pallas", target, config), tgt).seconds

    @property
    def jax(self) -> Any:
        """This kernel as a JAX callable (Pallas; interpret mode on CPU hosts)."""
        if self._jax is None:
            from .lowering.pallas.jax_entry import JaxKernel  # imports JAX only when used

            self._jax = JaxKernel(self, config=self.config)
        return self._jax

    def __repr__(self) -> str:
        return f"<kd.kernel {self.name} from {inspect.getsourcefile(self.fn)}>"


def tpu_kernel(fn: Callable[..., Any] | None = None, *, config: Config | None = None,
               configs: list[Config] | None = None, backend: str | None = None,
               autocast: str | None = None, static_shapes: bool | None = None) -> Any:
    """Decorator: `@kd.tpu_kernel` or `@kd.tpu_kernel(config=kd.Config(...))`.

    autocast: what the kernel does inside `torch.autocast`, named as torch's cast policies:
    "lower_precision_fp" (floating inputs cast to the autocast dtype, like torch.mm) or "fp32"
    (cast to float32, like layer_norm on CUDA); None (default): inputs as given.

    static_shapes: True builds every size exactly; False (default) lets dims that change run
    padded to their shape bucket where the kernel's IR proves it safe (kernel_dsl/buckets.py)."""
    kw = dict(config=config, configs=configs, backend=backend, autocast=autocast,
              static_shapes=static_shapes)
    if fn is None:
        return lambda f: Kernel(f, **kw)
    return Kernel(fn, **kw)


kernel = tpu_kernel
