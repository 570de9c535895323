"""`nki.jit`, `nki.simulate` and kernel launches: the program model of notes/nki.md §7.

A kernel runs eagerly as Python (every loop unrolls, as the NKI >= 0.3 compiler specializes it).
Before the first run its source is checked against the compiler's Python subset (no `*` in the
signature, no `is`, string dict keys, classes derived from NKIObject, `nl.shared_hbm` outputs
allocated at the kernel's top level). Arguments become HBM tensors; the kernel returns its
`shared_hbm` outputs. `kernel[g]` launches g in {1, 2} programs (LNC), run one after the other.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from enum import Enum
from typing import Any, Callable

import numpy as np
import torch

from kernel_dsl.lowering.numpy_views import numpy_view

from . import dtypes as dt
from .errors import NkiError
from .language import NKIObject, Op
from .state import Context, launch_context, target_from_env
from .tensor import NkiTensor, wrap_argument

_SCALARS = (bool, int, float, str, type(None), np.integer, np.floating)


def _fail(fn: Callable[..., Any], node: ast.AST | None, message: str, hint: str) -> NkiError:
    err = NkiError(f"kernel `{fn.__name__}`", message, "program model", hint)
    if node is not None and hasattr(node, "lineno"):
        first = fn.__code__.co_firstlineno
        err.args = (err.args[0] + f"\n  at {fn.__code__.co_filename}:{first + node.lineno - 1}",)
    return err


def check_source(fn: Callable[..., Any]) -> None:
    """Rejects Python the NKI compiler does not accept (its meta-programming subset)."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return  # no source to read (e.g. built at run time without linecache): nothing to check
    tree = ast.parse(src)
    fdef = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fdef is None:
        return
    a = fdef.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise _fail(fn, fdef, "the signature uses `*`, `*args` or `**kwargs`",
                    "kernel parameters are plain positional parameters")
    for node in ast.walk(fdef):
        # `is` / `is not` are allowed: the migration guide lists them as banned, but AWS's own
        # current-dialect kernels use them (`if bias is not None`), so the check would be stricter
        # than the compiler AWS ships against.
        if isinstance(node, ast.Dict) and any(
                k is not None and not (isinstance(k, ast.Constant) and isinstance(k.value, str))
                for k in node.keys):
            raise _fail(fn, node, "dict keys must be strings", "use string keys")
        if isinstance(node, ast.ClassDef) and not any(
                (isinstance(b, ast.Name) and b.id == "NKIObject")
                or (isinstance(b, ast.Attribute) and b.attr == "NKIObject") for b in node.bases):
            raise _fail(fn, node, f"class `{node.name}` does not derive from NKIObject",
                        "derive kernel classes from nl.NKIObject")
    _check_outputs_at_top_level(fn, fdef)


def _is_shared_alloc(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and any(
        isinstance(x, ast.Attribute) and x.attr == "shared_hbm"
        for x in [*node.args, *(k.value for k in node.keywords)])


def _check_outputs_at_top_level(fn: Callable[..., Any], fdef: ast.AST) -> None:
    """`err_shared_hbm_must_in_kernel_level`: outputs are allocated in the kernel body, not in a
    loop or nested function. An `if`/`with`/`try` is fine: AWS's nki-library allocates optional
    outputs under `if cache_softmax:` (attention_cte)."""
    nested = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    inside = {id(n) for node in ast.walk(fdef) if node is not fdef and isinstance(node, nested)
              for n in ast.walk(node)}
    for node in ast.walk(fdef):
        if _is_shared_alloc(node) and id(node) in inside:
            raise _fail(fn, node, "an nl.shared_hbm output is allocated inside a loop or nested "
                        "function", "allocate outputs at the top level of the kernel body (an `if` is fine)")


def _check_arg(name: str, a: Any) -> None:
    if isinstance(a, list):
        raise NkiError("launch", f"argument `{name}` is a list", "program model",
                       "pass a tuple instead")
    if isinstance(a, dict) and not all(isinstance(k, str) for k in a):
        raise NkiError("launch", f"argument `{name}` is a dict with non-string keys", "program model")
    if isinstance(a, tuple):
        for i, x in enumerate(a):
            _check_arg(f"{name}[{i}]", x)
    elif not isinstance(a, (*_SCALARS, np.ndarray, NKIObject, tuple, dict, dt.DType, Op, Enum)) \
            and not _is_torch(a):
        raise NkiError("launch", f"argument `{name}` is a {type(a).__name__}", "program model",
                       "pass arrays, numbers, strings, dtypes, operators, enum members, tuples "
                       "or NKIObject instances")


def _is_torch(a: Any) -> bool:
    return isinstance(a, torch.Tensor)


def _to_numpy(a: Any) -> Any:
    """torch tensors cross as NumPy arrays (bfloat16 as ml_dtypes.bfloat16)."""
    if _is_torch(a):
        # not `.numpy()`: it would leave the caller's storage non-resizable for good
        return numpy_view(a.detach().cpu().contiguous())
    return a


class Kernel:
    """What `@nki.jit` returns: call it, launch it as `kernel[lnc](...)`, or simulate it."""

    def __init__(self, func: Callable[..., Any], **options: Any):
        self.func = func
        self.options = options
        self.sign = inspect.signature(func)
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self._checked = False

    def __getitem__(self, grid: Any) -> Launch:
        return Launch(self, grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _plain(self)(*args, **kwargs)

    def check(self) -> None:
        if not self._checked:
            check_source(self.func)
            self._checked = True


class Launch:
    """One launch configuration: `kernel[g]` with the LNC degree g in {1, 2}."""

    def __init__(self, kernel: Kernel, grid: Any):
        g = grid
        if isinstance(g, tuple):
            if len(g) != 1:
                raise NkiError("launch", f"kernel[{', '.join(map(str, g))}]: the only launch grid "
                               "is the LNC degree", "program model",
                               "launch kernel[1] or kernel[2]; tile loops go inside the kernel")
            g = g[0]
        if not isinstance(g, (int, np.integer)) or int(g) not in (1, 2):
            raise NkiError("launch", f"kernel[{grid}]: the launch grid is the LNC degree, 1 or 2",
                           "program model", "launch kernel[1] or kernel[2]; loop over tiles "
                           "inside the kernel")
        self.kernel = kernel
        self.grid = int(g)
        self.grid_ndim = 1  # kernel[g](...); a plain kernel(...) call sets 0 (no grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        k = self.kernel
        k.check()
        bound = k.sign.bind(*args, **kwargs)
        bound.apply_defaults()
        target = target_from_env()
        buffer = "shared_hbm" if self.grid == 2 else "hbm"
        wrapped: list[Any] = []
        torch_out = any(_is_torch(a) for a in bound.arguments.values())
        for name, a in bound.arguments.items():
            _check_arg(name, a)
            a = _to_numpy(a)
            wrapped.append(wrap_argument(a, buffer, name) if isinstance(a, np.ndarray) else a)
        shared: list[NkiTensor] = []
        result: Any = None
        for pid in range(self.grid):
            ctx = Context(target, pid, self.grid, shared, grid_ndim=self.grid_ndim)
            with launch_context(ctx):
                out = k.func(*wrapped)
            ctx.check_budgets()
            result = _check_outputs(k, out) if pid == 0 else result
        return _from_outputs(result, torch_out)


def _plain(k: Kernel) -> Launch:
    launch = Launch(k, 1)
    launch.grid_ndim = 0
    return launch


def _check_outputs(k: Kernel, out: Any) -> Any:
    """Outputs are nl.shared_hbm tensors the kernel allocates, or HBM tensors it was passed and
    wrote into (the `*_tkg` kernels of AWS's nki-library take their outputs as arguments)."""
    outs = out if isinstance(out, tuple) else (out,)
    for i, o in enumerate(outs):
        ok = isinstance(o, NkiTensor) and (
            (o.buffer == "shared_hbm" and o.storage.origin == "kernel")
            or (o.storage.origin == "argument"))
        if not ok:
            raise NkiError(f"kernel `{k.__name__}`", f"return value #{i} is "
                           f"{o!r}; outputs are nl.shared_hbm tensors the kernel allocates (or "
                           "HBM tensors passed in as arguments) and returns", "program model",
                           "out = nl.ndarray(shape, dtype=..., buffer=nl.shared_hbm); ...; return out")
    return out


def _from_outputs(out: Any, torch_out: bool) -> Any:
    def conv(t: NkiTensor) -> Any:
        arr = np.array(t.arr)  # the returned view, with the view's shape
        if t.dtype.kind == "bool":
            arr = arr.astype(np.bool_)
        if not torch_out:
            return arr
        if arr.dtype.name == "bfloat16":
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)

    return tuple(conv(t) for t in out) if isinstance(out, tuple) else conv(out)


def jit(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`@nki.jit` / `@nki.jit(...)`: the kernel object (it runs on this interpreter)."""
    if fn is None:
        return lambda f: Kernel(f, **kwargs)
    return Kernel(fn, **kwargs)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*arrays)`: runs a kernel (or `kernel[2]`) on CPU; NumPy in, NumPy
    out (torch tensors in, torch out), as AWS's `nki.simulate` does."""
    if isinstance(kernel, Launch):
        return kernel
    if isinstance(kernel, Kernel):
        return _plain(kernel)
    if callable(kernel):
        return _plain(Kernel(kernel))
    raise TypeError(f"nki.simulate needs a kernel, got {kernel!r}")
