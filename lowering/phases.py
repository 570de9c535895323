"""Kernels in phases (`kd.barrier()`, kernel_dsl/grid_phases.py): one launch per phase, in order.

A kernel whose top-level grid loops are separated by `kd.barrier()` has `KernelIR.phases`:
one ordinary KernelIR per grid loop. Every backend renders each phase as it renders any kernel
and runs them one after another, so the barrier is the boundary between two launches (Pallas:
two `pallas_call`s; Triton: two kernel launches; NKI: two kernels). A phase reads the kernel's
inputs and the outputs earlier phases wrote (as inputs), and writes its own outputs.

`phased(cls)` wraps a backend class's `default_config`, `config_space`, `render`, `compile`,
`check` and `estimate_vmem` so that they take the whole kernel:
- one config for all phases (as Helion's): `block_sizes` lists every phase's free block sizes in
  source order; a backend knob goes to every phase that has it; where a phase's own space lacks
  the value another phase's has (Triton's `num_stages` of a phase with no loop), that phase takes
  its default for it;
- `render` gives one Generated whose source is every phase's source after a `#@kd-phase` line
  (inputs, outputs, dtypes: plain JSON), entry `ENTRY`; `compile` reads them back (so a worker
  process that sees only the source builds it too) and chains the phases' runners.
"""
from __future__ import annotations

import json
import types
from typing import Any, Callable

from kernel_dsl import tunables
from kernel_dsl.config import Config, ConfigSpace, block_values, named_syms, positional_syms
from kernel_dsl.ir import KernelIR

from . import Generated

ENTRY = "__kd_phases__"  # the entry of a phased kernel's Generated
_HEAD = "#@kd-phases "
_PHASE = "#@kd-phase "


def _owner_spaces(be: Any, ir: KernelIR, target: str) -> list[ConfigSpace]:
    return [be.config_space(ph, target) for ph in ir.phases]


def config_space(be: Any, ir: KernelIR, target: str) -> ConfigSpace:
    spaces = _owner_spaces(be, ir, target)
    lists: dict[int, list[int]] = {}
    for ph, sp in zip(ir.phases, spaces):
        given = dict(zip((s.index for s in positional_syms(ph)), sp.positional))
        given.update({s.index: sp.named[s.name] for s in named_syms(ph) if s.name in sp.named})
        for k, v in given.items():  # a named size in two phases: the values both take
            lists[k] = [c for c in lists[k] if c in v] or lists[k] if k in lists else list(v)
    knobs: dict[str, list[Any]] = {}
    for sp in spaces:
        for k, vs in sp.knobs.items():
            knobs.setdefault(k, [])
            knobs[k] += [v for v in vs if v not in knobs[k]]
    space = ConfigSpace([lists.get(s.index, [1]) for s in positional_syms(ir)],
                        {s.name: lists.get(s.index, [1]) for s in named_syms(ir) if s.name}, knobs)
    return tunables.extend_space(ir, space)


def default_config(be: Any, ir: KernelIR, target: str) -> Config:
    values: dict[int, int] = {}
    knobs: dict[str, Any] = {}
    for ph in ir.phases:
        d = be.default_config(ph, target)
        for k, v in block_values(ph, d).items():
            values.setdefault(k, v)
        for k, v in d.knobs.items():
            if not any(s.name == k for s in named_syms(ph)):
                knobs.setdefault(k, v)
    cfg = Config([values.get(s.index, 1) for s in positional_syms(ir)],  # 1: a size no loop takes
                 **{s.name: values.get(s.index, 1) for s in named_syms(ir) if s.name}, **knobs)
    return tunables.extend_default(ir, cfg)


def split(be: Any, ir: KernelIR, config: Config, target: str) -> list[tuple[KernelIR, Config]]:
    """(phase IR, its config) per phase of the IR traced for `config`'s tunables."""
    ir = tunables.ir_for(ir, config)
    own = Config(config.block_sizes, **{k: v for k, v in config.knobs.items()
                                        if k not in ir.tunables})
    values = block_values(ir, own)
    sym_names = {s.name for s in named_syms(ir)}
    knobs = {k: v for k, v in own.knobs.items() if k not in sym_names}
    spaces = _owner_spaces(be, ir, target) if knobs else [None] * len(ir.phases)
    out = []
    for ph, sp in zip(ir.phases, spaces):
        mine: dict[str, Any] = {}
        if sp is not None:
            default = None
            for k, v in knobs.items():
                others = any(k in o.knobs and v in o.knobs[k] for o in spaces if o is not None)
                if k in sp.knobs and v not in sp.knobs[k] and others:
                    default = default or be.default_config(ph, target)
                    if k in default.knobs:
                        mine[k] = default.knobs[k]
                elif k in sp.knobs or not others:
                    mine[k] = v
        mine.update({s.name: values[s.index] for s in named_syms(ph) if s.name})
        out.append((ph, Config([values[s.index] for s in positional_syms(ph)], **mine)))
    return out


def render(inner: Callable[..., Generated], be: Any, ir: KernelIR, config: Config,
           target: str) -> Generated:
    traced = tunables.ir_for(ir, config)
    outs = traced.outputs
    ins = traced.inputs
    gens = []
    lines = [f"# {config!r}", f"# kd.barrier(): {len(traced.phases)} phases, one launch each, "
             "run in this order (kernel_dsl/lowering/phases.py)",
             _HEAD + json.dumps({"returns": [outs.index(p) for p in traced.returns],
                                 "inputs": len(ins)})]
    for i, (ph, cfg) in enumerate(split(be, traced, config, target)):
        gen = inner(ph, cfg, target)
        gens.append(gen)
        where = [["in", ins.index(p)] if p in ins else ["out", outs.index(p.readback_of)]
                 for p in ph.inputs]
        info = {"phase": i, "entry": gen.entry, "config": repr(cfg), "inputs": where,
                "specs": [[list(p.shape), p.dtype] for p in ph.inputs],
                "outputs": [outs.index(p) for p in ph.returns],
                "out_dtypes": [p.dtype for p in ph.returns]}
        lines += ["", _PHASE + json.dumps(info), gen.source.rstrip("\n")]
    return Generated(be.name, target, config, "\n".join(lines) + "\n", ENTRY,
                     {"phases": gens, "phase_irs": list(traced.phases)})


def parse(source: str) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """The head and (phase info, phase source) of a phased kernel's source."""
    head: dict[str, Any] = {}
    phases: list[tuple[dict[str, Any], list[str]]] = []
    for line in source.splitlines():
        if line.startswith(_HEAD):
            head = json.loads(line[len(_HEAD):])
        elif line.startswith(_PHASE):
            phases.append((json.loads(line[len(_PHASE):]), []))
        elif phases:
            phases[-1][1].append(line)
    return head, [(info, "\n".join(src) + "\n") for info, src in phases]


def stand_in(info: dict[str, Any]) -> Any:
    """What a backend's compile and check read from a phase's IR."""
    return types.SimpleNamespace(
        inputs=[types.SimpleNamespace(shape=tuple(s), dtype=d) for s, d in info["specs"]],
        returns=[types.SimpleNamespace(dtype=d) for d in info["out_dtypes"]], loc=None)


def compile(inner: Callable[..., Any], gen: Generated, **kw: Any) -> Callable[..., Any]:
    head, phases = parse(gen.source)
    runs = [(info, inner(Generated(gen.backend, gen.target, gen.config, src, info["entry"]),
                         stand_in(info), **kw)) for info, src in phases]

    def run(*tensors: Any) -> tuple[Any, ...]:
        outs: dict[int, Any] = {}
        for info, fn in runs:  # the barrier: a phase starts after the one before it returned
            args = [tensors[i] if kind == "in" else outs[i] for kind, i in info["inputs"]]
            outs.update(zip(info["outputs"], fn(*args)))
        return tuple(outs[i] for i in head["returns"])

    return run


def check(inner: Callable[..., Any], ir: KernelIR, gens: list[Generated], *args: Any,
          **kw: Any) -> list[Any]:
    """Every phase checked with the backend's own check; per target the first failing phase's
    entry, else one entry: the most VMEM any phase uses, the compile seconds of all."""
    per_phase = [[inner(gen.meta["phase_irs"][k], [g], *args, **kw)[0]
                  for k, g in enumerate(gen.meta["phases"])] for gen in gens]
    out = []
    for gen, entries in zip(gens, per_phase):
        bad = [(k, e) for k, e in enumerate(entries) if not e.ok]
        if bad:
            k, e = bad[0]
            e.message = f"phase {k + 1} of {len(entries)}: {e.message}"
        else:
            e = entries[0]
            used = [x.vmem_used for x in entries if x.vmem_used is not None]
            est = [x.vmem_estimate for x in entries if x.vmem_estimate is not None]
            e.vmem_used = max(used) if used else None
            e.vmem_estimate = max(est) if est else None
            e.compile_s = sum(x.compile_s for x in entries)
        e.config = repr(gen.config)
        out.append(e)
    return out


_WRAPPED = ("default_config", "config_space", "render", "compile", "check", "estimate_vmem")


def phased(cls: type) -> type:
    """Class decorator: the backend's methods take phased kernels too (see the module doc)."""
    orig = {n: getattr(cls, n) for n in _WRAPPED if hasattr(cls, n)}

    def default_config_(self: Any, ir: KernelIR, target: str) -> Config:
        if ir.phases:
            return default_config(self, ir, target)
        return orig["default_config"](self, ir, target)

    def config_space_(self: Any, ir: KernelIR, target: str) -> Any:
        if ir.phases:
            return config_space(self, ir, target)
        return orig["config_space"](self, ir, target)

    def render_(self: Any, ir: KernelIR, config: Config, target: str) -> Generated:
        if ir.phases:
            return render(lambda p, c, t: orig["render"](self, p, c, t), self, ir, config, target)
        return orig["render"](self, ir, config, target)

    def compile_(self: Any, gen: Generated, ir: Any, **kw: Any) -> Any:
        if gen.entry == ENTRY:
            return compile(lambda g, i, **k: orig["compile"](self, g, i, **k), gen, **kw)
        return orig["compile"](self, gen, ir, **kw)

    def check_(self: Any, ir: KernelIR, gens: list[Generated], *args: Any, **kw: Any) -> Any:
        if gens and gens[0].entry == ENTRY:
            return check(lambda i, g, *a, **k: orig["check"](self, i, g, *a, **k), ir, gens,
                         *args, **kw)
        return orig["check"](self, ir, gens, *args, **kw)

    def estimate_vmem_(self: Any, gen: Generated) -> int:
        if gen.entry == ENTRY:  # the phases run one after another: the largest one's
            return max(orig["estimate_vmem"](self, g) for g in gen.meta["phases"])
        return orig["estimate_vmem"](self, gen)

    for name, fn in (("default_config", default_config_), ("config_space", config_space_),
                     ("render", render_), ("compile", compile_), ("check", check_),
                     ("estimate_vmem", estimate_vmem_)):
        if name in orig:
            fn.__doc__ = orig[name].__doc__
            setattr(cls, name, fn)
    return cls
