"""Failure reproduction: a standalone Python snippet for one case, and the `kdsl fuzz` command
that re-runs the whole search.

The snippet imports the kernel and the reference by module path, rebuilds the exact inputs
with `make_input` (shape, dtype, layout, value class, seed), runs the exact backend and config
with outputs NaN-poisoned, and applies the same tolerance check. So a failure found in CI can
be pasted into a shell, a notebook or a bug report, with no fuzzing machinery in the loop.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import shlex
import sys
from typing import Any

from ..dtypes import TORCH_TO_IR
from .case import Case, arg_dtype
from .signature import Signature

_FILE_MODULES = ("__main__", "kdsl_user_module")


def object_spec(obj: Any) -> tuple[str, str, str | None]:
    """(module, attribute, source directory) naming a module-level object; module is a file
    path when the object's module cannot be imported by name (a script, `kdsl` file loading)."""
    fn = getattr(obj, "fn", obj)  # a Kernel wraps the user's function
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or getattr(obj, "name", "?")
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    if module in _FILE_MODULES or module.startswith("kdsl_file_"):
        return (os.path.relpath(path) if path else module), qual, None
    root = None
    if path:
        root = os.path.dirname(os.path.abspath(path))
        for _ in range(module.count(".")):
            root = os.path.dirname(root)
    return module, qual, root


def importable(obj: Any) -> bool:
    _, qual, _ = object_spec(obj)
    return "<" not in qual and "." not in qual


def load_object(spec: str) -> Any:
    """`package.module:NAME` or `path/to/file.py:NAME`. A file's directory goes on sys.path
    first (as when running it as a script), so its own sibling imports work; loading the same
    file twice returns the same module."""
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"expected MODULE:NAME or FILE.py:NAME, got {spec!r}")
    if mod_name.endswith(".py"):
        path = os.path.abspath(mod_name)
        module = next((m for m in list(sys.modules.values())
                       if getattr(m, "__file__", None) and os.path.abspath(m.__file__) == path), None)
        if module is None:
            sys.path.insert(0, os.path.dirname(path))
            name = "kdsl_file_" + os.path.splitext(os.path.basename(path))[0]
            file_spec = importlib.util.spec_from_file_location(name, path)
            if file_spec is None or file_spec.loader is None:
                raise ValueError(f"cannot load {mod_name}")
            module = importlib.util.module_from_spec(file_spec)
            sys.modules[name] = module
            file_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{spec}: `{mod_name}` has no `{attr}`")
    return obj


def spec_string(obj: Any) -> str:
    """`module:NAME`, or `path/to/file.py:NAME` when the module only imports with its
    directory on sys.path (a test helper module): what `kdsl fuzz` loads from any directory."""
    module, qual, root = object_spec(obj)
    if root and not module.endswith(".py") and not _on_default_path(module):
        path = os.path.join(root, *module.split(".")) + ".py"
        if os.path.exists(path):
            return f"{os.path.relpath(path)}:{qual}"
    return f"{module}:{qual}"


def _import_lines(obj: Any, alias: str, paths: list[str]) -> list[str]:
    """Lines binding `alias` to `obj`; directories already put on sys.path (in `paths`) are
    not added twice."""
    module, qual, root = object_spec(obj)
    if not importable(obj):
        return [f"# `{qual}` (from {module}) is not a module-level name: define it here as `{alias}`",
                f"{alias} = ...  # noqa"]
    if module.endswith(".py"):
        return [f"{alias} = load_object({module + ':' + qual!r})"]
    lines = []
    if root and not _on_default_path(module) and root not in paths:
        paths.append(root)
        lines.append(f"sys.path.insert(0, {root!r})")
    lines.append(f"from {module} import {qual} as {alias}")
    return lines


def _on_default_path(module: str) -> bool:
    """Whether `module` imports without any sys.path change (an installed package)."""
    top = module.split(".")[0]
    mod = sys.modules.get(top)
    spec = getattr(mod, "__spec__", None) if mod is not None else importlib.util.find_spec(top)
    origin = getattr(spec, "origin", None) or ""
    return "site-packages" in origin or top == "kernel_dsl"


def _dtype_expr(name: str) -> str:
    return {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16",
            "i32": "torch.int32", "i16": "torch.int16", "i8": "torch.int8", "u8": "torch.uint8",
            "bool": "torch.bool"}[name]


def snippet(kernel: Any, reference: Any, sig: Signature, case: Case) -> str:
    """A standalone script reproducing `case` (see the module docstring)."""
    sizes, layouts, scalars = dict(case.sizes), dict(case.layouts), dict(case.scalars)
    paths: list[str] = []
    lines = [
        f"# kernel_dsl fuzz failure: `{getattr(kernel, 'name', kernel)}` on {case.backend}, {case.dtype}",
        "import sys",
        "",
        "import torch",
        "",
        "import kernel_dsl as kd",
        "from kernel_dsl.testing import compare, load_object, make_input, poison_outputs  # noqa: F401",
        "",
        *_import_lines(kernel, "kernel", paths),
        *_import_lines(reference, "reference", paths),
        "",
    ]
    names = []
    i = 0
    for name in sig.order:
        spec = sig.tensor(name)
        names.append(name)
        if spec is None:
            lines.append(f"{name} = {scalars[name]!r}")
            continue
        dt = arg_dtype(sig, name, case)
        lines.append(f"{name} = make_input({sig.shape(spec, sizes)}, {_dtype_expr(TORCH_TO_IR[dt])}, "
                     f"layout={layouts[name]!r}, values={case.values!r}, seed={case.seed + i})")
        i += 1
    lines += [
        f"args = ({', '.join(names)},)",
        f"config = kd.{case.config!r}" if case.config is not None else "config = None",
        "with poison_outputs():  # elements the kernel never writes read as NaN",
        f"    outs = kernel.run_cpu({case.backend!r}, args, config)",
        "exact = reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a",
        "                    for a in args])",
        "lowp = reference(*args)  # PyTorch in the same dtype: how hard these inputs are",
        "result = compare(outs, exact, lowp)",
        "print(result.report())",
        "assert result.ok",
    ]
    return "\n".join(lines) + "\n"


def command(kernel: Any, reference: Any, sig: Signature, *, dtypes: tuple[str, ...],
            backends: tuple[str, ...], dims: dict[str, Any], values: tuple[str, ...],
            configs: Any, max_examples: int, seed: int | None, case: Case | None = None) -> str:
    """The `kdsl fuzz` command that re-runs this search (with `case`: that case only)."""
    parts = ["kdsl", "fuzz", spec_string(kernel), "--reference", spec_string(reference),
             "--signature", sig.text]
    if case is not None:
        parts += ["--replay", case.to_json()]
        return " ".join(shlex.quote(p) for p in parts)
    parts += ["--dtypes", ",".join(dtypes), "--backends", ",".join(backends),
              "--values", ",".join(values)]
    for name, spec in dims.items():
        if isinstance(spec, int):
            text = str(spec)
        elif isinstance(spec, tuple) and len(spec) == 2:
            text = f"{spec[0]}:{spec[1]}"
        else:
            text = ",".join(str(v) for v in spec)
        parts += ["--dim", f"{name}={text}"]
    if isinstance(configs, (int, str)):
        parts += ["--configs", str(configs)]
    parts += ["--max-examples", str(max_examples)]
    if seed is not None:
        parts += ["--seed", str(seed)]
    return " ".join(shlex.quote(p) for p in parts)
