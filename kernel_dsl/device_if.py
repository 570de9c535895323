"""Device-side `if`/`elif`/`else` and `continue` (Helion's `if end > start:` on loaded values).

Python decides an `if` itself, so the tracer cannot see both branches. When a kernel is traced
its function is rewritten (once per code object): every `if` lexically inside a `kd.tile` /
`kd.grid` loop becomes a call `_device_if(test, then_fn, else_fn, ...)`, each branch a nested
function that takes and returns the names either branch assigns. A host test (a Python bool,
a shape, a string arg) runs one branch, exactly as Python would. A rank-0 device test traces
both branches under a predicate (no new IR op): stores in a branch become
`where(pred, value, current contents)`, atomics add their identity where the branch is not
taken, loads at device scalars read index 0 there (so they never fault), and each name either
branch assigns leaves as `where(cond, then, else)`. `if c: ...; continue` at the top of a grid
body makes the rest of the body the else branch. Inside the loops, `and`/`or`/`not` in an `if`
test and the builtins `min`/`max` become the device-aware calls of kernel_dsl/device_builtins.py.
"""
from __future__ import annotations

import ast
import inspect
import math
import textwrap
from typing import Any, Callable

from . import device_builtins as db
from .errors import ControlFlowError
from .tracing import current, user_loc

_LOOPS = ("tile", "grid")
_cache: dict[Any, Any] = {}


class _Undef:
    """The value of a name not bound before an `if` (the branch that binds it was not taken)."""

    def __repr__(self) -> str:
        return "<unbound>"


UNDEF = _Undef()


class OneBranchName:
    """A name a device `if` binds in one branch only and that was unbound before: any use is an
    error naming the `if` (the other branch has no value for it)."""

    def __init__(self, name: str, loc: Any, why: str = "is assigned in only one branch of"):
        object.__setattr__(self, "_kd_name", name)
        object.__setattr__(self, "_kd_loc", loc)
        object.__setattr__(self, "_kd_why", why)

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        name = object.__getattribute__(self, "_kd_name")
        loc = object.__getattribute__(self, "_kd_loc")
        why = object.__getattribute__(self, "_kd_why")
        raise ControlFlowError(
            f"`{name}` {why} a device `if` (line {loc.line if loc else '?'}) and is used after "
            "it", user_loc(), f"assign `{name}` a tile before the `if` (a default) and update it "
            "in the branches; a branch's temporaries and loop variables stay inside it")

    __getattr__ = _fail
    for _m in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
               "matmul rmatmul and rand or ror xor rxor lt le gt ge eq ne neg pos abs invert "
               "bool int float index iter len getitem call").split():
        locals()[f"__{_m}__"] = _fail
    del _m
    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, OneBranchName):
                a._fail()
        return NotImplemented


# -- the trace-time helpers the rewritten code calls ---------------------------------------------
def predicate() -> Any:
    """The conjunction of the device `if` conditions being traced (a rank-0 bool), or None."""
    tr = current()
    preds = getattr(tr, "if_preds", None) if tr is not None else None
    return preds[-1] if preds else None


_device_test = db.device_cond  # the rank-0 bool device condition of an `if` test, or None


def host_test(test: Any) -> bool:
    """The test of an `if` whose branch leaves the loop (`break`, `return`): host values only."""
    if _device_test(test) is not None:
        raise ControlFlowError(
            "`break`/`return` inside an `if` on a device value", user_loc(),
            "a traced loop body always runs to its end: skip the rest of a grid body with "
            "`if cond: continue`, or guard the work with `if not_done: ...`")
    return bool(test)


def device_if(test: Any, then_fn: Callable[..., tuple], else_fn: Callable[..., tuple],
              vals: tuple, names: tuple) -> tuple:
    cond = _device_test(test)
    if cond is None:  # a host value: Python's own `if`
        return then_fn(*vals) if bool(test) else else_fn(*vals)
    from .device_ops import TileValue, where
    tr = current()
    loc = user_loc()
    preds = tr.__dict__.setdefault("if_preds", [])
    outer = preds[-1] if preds else None
    results = []
    for c, fn in ((cond, then_fn), (~cond, else_fn)):
        preds.append(c if outer is None else outer & c)
        try:
            results.append(fn(*vals))
        finally:
            preds.pop()
    out = []
    for name, t, e in zip(names, *results):
        if t is e:
            out.append(t)
        elif t is UNDEF or e is UNDEF or isinstance(t, OneBranchName) or isinstance(e, OneBranchName):
            out.append(OneBranchName(name, loc))
        elif isinstance(t, TileValue) or isinstance(e, TileValue) or all(
                isinstance(x, (int, float)) for x in (t, e)):  # numbers become device scalars
            if not all(isinstance(x, (int, float)) or (isinstance(x, TileValue) and (
                    x.v.region is None or x.v.region.encloses(tr.region))) for x in (t, e)):
                # a value of a loop that ended inside a branch, or a tile against a non-number
                out.append(OneBranchName(name, loc, "has no value common to both branches of"))
                continue
            out.append(where(cond, t, e))
        else:  # Python objects (a loop's Tile, a list) exist only at trace time
            out.append(OneBranchName(name, loc, "is a Python value set differently per branch of"))
    return tuple(out)


def guard_store(value: Any, load_old: Callable[[], Any], atomic: str | None, dtype: str) -> Any:
    """A store (or atomic) inside a device `if`: lanes where the branch is not taken keep what
    memory holds (a read-modify-write of the block) or add the atomic's identity."""
    pred = predicate()
    if pred is None:
        return value
    from .device_ops import const, where
    if atomic is None:
        return where(pred, value, load_old())
    floating = dtype in ("f32", "bf16", "f16")
    identity = {"add": 0,
                "max": -math.inf if floating else -(2 ** 31),
                "min": math.inf if floating else 2 ** 31 - 1}[atomic]
    return where(pred, value, const(identity, dtype))


def guard_index(scalar: Any) -> Any:
    """A device-scalar (or gather) index of a load in a device `if`: index 0 where the branch
    is not taken, so a not-taken load never reads out of bounds."""
    pred = predicate()
    op = scalar.v.op
    if pred is None or (op is not None and op.kind in ("tile_begin", "tile_id")):
        return scalar  # a grid index or tile position is in range (and stays static for NKI)
    from .device_ops import where
    return where(pred, scalar, 0)


# -- the rewrite -----------------------------------------------------------------------------------
def rewritten(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its device `if`s and grid-body `continue`s rewritten; `fn` itself if its source
    is not available or it has none."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return fn
    if code not in _cache:
        _cache[code] = _compile(fn)
    factory_code = _cache[code]
    if factory_code is None:
        return fn
    ns: dict[str, Any] = {}
    exec(factory_code, fn.__globals__, ns)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new = ns["__kd_factory"](device_if, host_test, UNDEF, db.bool_and, db.bool_or, db.bool_not,
                             db.minmax, *cells)
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__wrapped__ = fn
    return new


def _compile(fn: Callable[..., Any]) -> Any:
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fdef.name != fn.__name__:
        return None
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    rw = _Rewriter()
    fdef.body = [rw.visit(s) for s in fdef.body]
    fdef.body = [s for b in fdef.body for s in (b if isinstance(b, list) else [b])]
    if not rw.changed:
        return None
    fdef.decorator_list = []
    params = ["__kd_if", "__kd_host_test", "__kd_undef", "__kd_and", "__kd_or", "__kd_not",
              "__kd_minmax", *fn.__code__.co_freevars]
    factory = ast.FunctionDef(
        name="__kd_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], decorator_list=[])
    ast.copy_location(factory, fdef)
    mod = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(mod)
    return compile(mod, fn.__code__.co_filename, "exec")


def _is_device_loop(node: ast.For) -> bool:
    f = node.iter.func if isinstance(node.iter, ast.Call) else None
    return (isinstance(f, ast.Attribute) and f.attr in _LOOPS) or \
        (isinstance(f, ast.Name) and f.id in _LOOPS)


def _scoped_walk(nodes: list[ast.stmt]) -> Any:
    """The nodes under `nodes`, not entering nested functions, lambdas, classes or comprehensions."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                  ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                stack.append(c)


def _leaves(stmts: list[ast.stmt]) -> bool:
    """True if a statement here jumps out of the `if` (return/yield, break/continue not inside
    a loop of their own, global/nonlocal): such an `if` stays Python's own."""
    stack = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global,
                          ast.Nonlocal, ast.Break, ast.Continue)):
            return True
        for c in ast.iter_child_nodes(n):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(n, (ast.For, ast.While)) and c in n.body + n.orelse:
                # a loop's own break/continue stays inside it; its returns do not
                if any(isinstance(x, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global,
                                      ast.Nonlocal)) for x in _scoped_walk([c])):
                    return True
                continue
            stack.append(c)
    return False


def _assigned(stmts: list[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for n in _scoped_walk(stmts):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
    for n in stmts:  # nested defs are skipped by the walk; their names still bind here
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
    return out


class _Rewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.depth = 0  # inside how many kd.tile / kd.grid loops
        self.count = 0
        self.changed = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        return node  # a nested function is not traced as kernel code

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_Lambda = visit_FunctionDef  # type: ignore[assignment]

    def visit_For(self, node: ast.For) -> Any:
        device = _is_device_loop(node)
        if device:
            node.body = _continue_to_else(node.body)
            self.depth += 1
        self.generic_visit(node)
        if device:
            self.depth -= 1
        return node

    def _stmts(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in stmts:
            r = self.visit(s)
            out.extend(r if isinstance(r, list) else [r])
        return out

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        if self.depth and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            self.changed = True  # `min(a, b)` -> `__kd_minmax(min, a, b)`: the name still resolves
            node.args = [ast.Name(node.func.id, ast.Load()), *node.args]
            node.func = ast.Name("__kd_minmax", ast.Load())
        return node

    def visit_If(self, node: ast.If) -> Any:
        if self.depth == 0:  # host code: Python's own `if`
            self.generic_visit(node)
            return node
        self.changed = True  # min/max first: the `and`/`or` operands become lambdas, not visited
        node.test = _BoolOps().visit(self.visit(node.test))
        if _leaves(node.body) or _leaves(node.orelse):
            self.generic_visit(node)
            node.test = ast.copy_location(ast.Call(ast.Name("__kd_host_test", ast.Load()),
                                                   [node.test], []), node.test)
            return node
        body, orelse = self._stmts(node.body), self._stmts(node.orelse)
        names = sorted(_assigned(node.body) | _assigned(node.orelse))
        self.count += 1
        k = f"{node.lineno}_{self.count}"
        params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[],
                               kw_defaults=[], defaults=[])
        ret = ast.Return(ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()))
        fns = [ast.FunctionDef(name=f"__kd_{which}_{k}", args=params,
                               body=(stmts or [ast.Pass()]) + [ret], decorator_list=[])
               for which, stmts in (("then", body), ("else", orelse))]
        # a name unbound before the `if` is passed as the UNDEF marker
        vals = [ast.Call(ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get",
                                       ast.Load()),
                         [ast.Constant(n), ast.Name("__kd_undef", ast.Load())], []) for n in names]
        call = ast.Call(ast.Name("__kd_if", ast.Load()),
                        [node.test, ast.Name(fns[0].name, ast.Load()),
                         ast.Name(fns[1].name, ast.Load()), ast.Tuple(vals, ast.Load()),
                         ast.Tuple([ast.Constant(n) for n in names], ast.Load())], [])
        out: list[ast.stmt] = list(fns)
        if names:
            out.append(ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names],
                                             ast.Store())], call))
            # a host `if` that did not bind a name leaves it unbound, as Python does
            out += [ast.If(ast.Compare(ast.Name(n, ast.Load()), [ast.Is()],
                                       [ast.Name("__kd_undef", ast.Load())]),
                           [ast.Delete([ast.Name(n, ast.Del())])], []) for n in names]
        else:
            out.append(ast.Expr(call))
        for s in out:
            for sub in ast.walk(s):
                if not hasattr(sub, "lineno") or sub in (node.test,):
                    ast.copy_location(sub, node)
        return out


class _BoolOps(ast.NodeTransformer):
    """`a and b` -> `__kd_and(lambda: a, lambda: b)` (the short circuit stays), `not a` ->
    `__kd_not(a)`, in the test of an `if` in device code."""

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        self.generic_visit(node)
        thunks = [ast.Lambda(ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                           defaults=[]), v) for v in node.values]
        fn = "__kd_and" if isinstance(node.op, ast.And) else "__kd_or"
        return ast.copy_location(ast.Call(ast.Name(fn, ast.Load()), thunks, []), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(ast.Call(ast.Name("__kd_not", ast.Load()), [node.operand], []), node)


def _continue_to_else(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """`if c: A; continue` then `rest` -> `if c: A` else `rest` (the grid body runs once)."""
    for i, s in enumerate(stmts):
        if isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Continue):
            rest = _continue_to_else(stmts[i + 1:])
            new = ast.If(s.test, s.body[:-1] or [ast.Pass()], s.orelse + rest)
            ast.copy_location(new, s)
            return stmts[:i] + [new]
    return stmts
