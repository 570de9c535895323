"""The source layout shows the architecture (DESIGN.md §6-7): lowering/, autotune/ and kernels/
reach the front end by absolute name, and no modules import each other in a circle.

Imports are read from the source (ast), not by importing. Every import between the package's
modules is an edge, also one inside a function (a deferred import hides a cycle, it does not
remove it); only those under `if TYPE_CHECKING:` are not. Optional toolchains (JAX, TorchTPU)
stay lazy by being imported inside functions; they are outside the package, so never in a cycle.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"kernel_dsl": "kernel_dsl", "lowering": "kernel_dsl.lowering",
           "autotune": "kernel_dsl.autotune", "kernels": "kernel_dsl.kernels"}


def _modules() -> dict[str, tuple[str, bool]]:
    """module name -> (path, is_package) for every source file of the distribution."""
    out = {}
    for folder, pkg in FOLDERS.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    parts = os.path.relpath(path, os.path.join(ROOT, folder))[:-3].split(os.sep)
                    is_pkg = parts[-1] == "__init__"
                    name = ".".join(pkg.split(".") + (parts[:-1] if is_pkg else parts))
                    out[name] = (path, is_pkg)
    return out


def _imports(name: str, path: str, is_pkg: bool) -> list[tuple[int, int, str, list[str]]]:
    """(line, level, absolute module, imported names) of every import but those under
    `if TYPE_CHECKING:`. Imports inside functions count: deferring an import to dodge a cycle
    keeps the cycle (DESIGN.md §7)."""
    tree = ast.parse(open(path).read())
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, 0, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            if node.level:
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, node.level, mod, [a.name for a in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_lowering_autotune_kernels_import_the_front_end_by_absolute_name() -> None:
    climbing = []
    for name, (path, is_pkg) in _modules().items():
        folder_pkg = next(p for p in sorted(FOLDERS.values(), key=len, reverse=True)
                          if name == p or name.startswith(p + "."))
        if folder_pkg == "kernel_dsl":
            continue
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):  # function-local imports too: the rule is about names
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                if not (mod == folder_pkg or mod.startswith(folder_pkg + ".")):
                    climbing.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} -> {mod}")
    assert not climbing, "relative imports that climb out of their folder:\n" + "\n".join(climbing)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        for _, _, mod, names in _imports(name, path, is_pkg):
            # `from pkg import sub` imports the submodule when `sub` is one
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in mods] or [mod]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            # a package's own submodules importing the package's __init__ is Python's normal
            # parent-first import, not a cycle between modules
            if m.startswith(n + "."):
                continue
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := dfs(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := dfs(m)):
            return found
    return None


def test_no_module_level_import_cycles() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "modules import each other in a circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_checkout_root_is_not_on_sys_path_so_no_folder_imports_twice() -> None:
    """A test that imports transformers must not import this checkout's `kernels/` folder as
    Hugging Face's `kernels` package (see conftest.py)."""
    import importlib.util
    import sys

    assert importlib.util.find_spec("kernels") is None or \
        not (importlib.util.find_spec("kernels").origin or "").startswith(ROOT + os.sep)
    # Hugging Face's own `kernels` package (a dependency of transformers >= 5.25) may be imported;
    # what must not be is a module of that name loaded from this checkout
    from_checkout = [m for m, mod in list(sys.modules.items())
                     if (m == "kernels" or m.startswith("kernels."))
                     and (getattr(mod, "__file__", None) or "").startswith(ROOT + os.sep)]
    assert not from_checkout, f"imported from the checkout under a bare name: {from_checkout}"
