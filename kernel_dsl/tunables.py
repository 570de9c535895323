"""`kd.register_tunable(name, fragment)`: Helion's user-defined config value.

The call returns the config's value for `name` (the fragment's default when the config does not
give one) as a plain Python value while the kernel is traced, so host code may size loops with it
(`kd.tile(k, block_size=next_power_of_2(cdiv(k, split_k)))`) and device code may use it as a
constant. The value is part of the trace: an IR is traced for one assignment of its tunables
(`KernelIR.tunable_values`), and `ir_for(ir, config)` gives the IR traced for a config's values
(`KernelIR.retrace`, the kernel's IR cache). The fragments (`KernelIR.tunables`) extend every
backend's config space and default config; the value is a config knob named `name`.
"""
from __future__ import annotations

from typing import Any

from .autotuner import ConfigSpecFragment, valid_values
from .config import Config, ConfigSpace
from .errors import ConfigError, KernelSyntaxError
from .ir import KernelIR
from .tracing import current, shape_only, user_loc

# config keys of the backends and of kd.Config itself: a tunable must not shadow one
RESERVED = ("block_sizes", "loop_mode", "num_warps", "num_stages", "group_m")


def register_tunable(name: str, fragment: ConfigSpecFragment) -> Any:
    """The config's value of the tunable `name`, searched over `fragment` by the autotuner
    (Helion's `hl.register_tunable`). Call it in the kernel's host code or device code."""
    loc = user_loc()
    if not isinstance(name, str) or not name.isidentifier():
        raise KernelSyntaxError(f"kd.register_tunable name {name!r} is not an identifier", loc,
                                "name it like a keyword argument: kd.register_tunable('split_k', "
                                "PowerOfTwoFragment(1, 256))")
    if not isinstance(fragment, ConfigSpecFragment):
        raise KernelSyntaxError(f"kd.register_tunable({name!r}, {fragment!r}): the second "
                                "argument is not a config fragment", loc,
                                "pass a fragment: PowerOfTwoFragment, IntegerFragment, "
                                "EnumFragment or BooleanFragment (kernel_dsl.autotuner)")
    tr = current()
    if tr is None:
        if shape_only():  # the host code run for output shapes only: any value will do
            return fragment.default()
        raise KernelSyntaxError("kd.register_tunable is called outside a kernel", loc,
                                "call it inside a @kd.kernel function")
    if name in RESERVED or name in tr.named_syms:
        raise KernelSyntaxError(f"tunable `{name}` has the name of a config key", loc,
                                f"rename it: {', '.join(RESERVED)} and named block sizes are "
                                "config keys already")
    seen = tr.tunables.get(name)
    if seen is not None and seen != fragment:
        raise KernelSyntaxError(f"tunable `{name}` is registered again with {fragment!r}; it "
                                f"was {seen!r}", loc,
                                "register a name once, or with an equal fragment each time")
    tr.tunables[name] = fragment
    value = tr.tunable_values.get(name, fragment.default())
    tr.tunables_used[name] = value
    return value


def values_of(ir: KernelIR, config: Config) -> dict[str, Any]:
    """The tunable values `config` gives (defaults where it gives none), checked."""
    out = {}
    for name, frag in ir.tunables.items():
        v = config.knobs.get(name, frag.default())
        ok = valid_values(frag)
        if not any(type(c) is type(v) and c == v for c in ok):  # 1 is not True here
            raise ConfigError(f"{config!r} gives tunable `{name}`={v!r}, not a value of "
                              f"{frag!r}", ir.loc, f"use one of {ok}")
        out[name] = v
    return out


def ir_for(ir: KernelIR, config: Config) -> KernelIR:
    """The IR traced with `config`'s tunable values (`ir` itself when they are its own)."""
    if not ir.tunables:
        return ir
    want = values_of(ir, config)
    if want == ir.tunable_values or ir.retrace is None:
        return ir
    return ir.retrace(want)


def render(render_fn: Any, ir: KernelIR, config: Config, target: str) -> Any:
    """A backend's `render` of the IR traced for `config`'s tunables, given the config without
    them (they are not the backend's knobs); the Generated keeps the whole config."""
    if not ir.tunables:
        return render_fn(ir, config, target)
    traced = ir_for(ir, config)
    own = {k: v for k, v in config.knobs.items() if k not in ir.tunables}
    backend_config = Config(config.block_sizes, **own)
    gen = render_fn(traced, backend_config, target)
    gen.config = config
    gen.source = gen.source.replace(f"# {backend_config!r}", f"# {config!r}", 1)  # the header
    return gen


def extend_space(ir: KernelIR, space: ConfigSpace) -> ConfigSpace:
    """A backend's space times each tunable's choices (knobs named after the tunables)."""
    for name, frag in ir.tunables.items():
        space.knobs[name] = list(frag.choices())
    return space


def extend_default(ir: KernelIR, config: Config) -> Config:
    """A backend's default config with every tunable at its fragment's default."""
    if not ir.tunables:
        return config
    return config.replace(**{n: f.default() for n, f in ir.tunables.items()})


def cache_part(ir: KernelIR) -> list[str]:
    """The tunables' fragments, for the persistent tune cache's key (another range: another
    search)."""
    return [f"{n}={f!r}" for n, f in sorted(ir.tunables.items())]


def cdiv(a: int, b: int) -> int:
    """Helion's `helion.cdiv`: ceil(a / b) of host ints (sizes, tunables)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """Helion's `helion.next_power_of_2`: the smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
