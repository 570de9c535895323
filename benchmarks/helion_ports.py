"""Port Helion's examples literally to kernel_dsl and tally which ones run (docs/helion_ports.md).

This is the runner behind docs/helion_ports.md ("How to reproduce", steps 1-4). For every kernel
example in a pytorch/helion git directory it:

1. ports the file by renaming only (`import helion.language as hl` -> `import kernel_dsl as kd`,
   `hl.` -> `kd.`, each `@helion.kernel(...)` decorator, all its lines -> `@kd.kernel`,
   `from helion._testing import ...` -> `from _harness import ...`, `from helion.autotuner
   import ...` -> `from kernel_dsl.autotuner import ...`, `helion.cdiv` / `helion.next_power_of_2`
   -> `kd.`, every other `import helion...` / `from helion...` dropped). Any other `helion.`
   stays, so it fails with `NameError: helion`.
   The port is written to OUT/src/NAME.py, the stand-in for `helion._testing` to OUT/_harness.py.
2. `_harness` gives DEVICE=cpu, HALF_DTYPE=float16, LONG_INT_TYPE=int64, `do_bench` (calls the
   function once) and `run_example` (runs the first baseline that runs on CPU once (a raw
   `@triton.jit` baseline raises there: the next one is taken), then each kernel, and compares
   with `torch.testing.assert_close`, rtol 1e-2 / atol 1e-1 unless the example gives its own;
   for each kernel it records ok, mismatch or the first line of the error).
3. runs one subprocess per example (`--jobs` at a time, each with OMP_NUM_THREADS = cores // jobs
   unless set, killed after `--timeout` s): it imports the
   module and calls the first `check*(...)` call that `main()` makes, with each literal int argument
   shrunk (under 16 as is, 16-255 -> v//2+1, 256 and up -> min(v//16+1, 97)). Only calls whose
   arguments are all literals count (so `check(B, S, N)` in a loop, `check(10240 * 10240)` or
   `check(..., HALF_DTYPE)` are passed over); with no such call it runs `main()` instead.
   It runs under `kd.backend("pallas")`, then under "triton" and "nki" only when every pallas
   kernel passed. An exception outside run_example's kernel calls is recorded as a failing kernel
   named "driver"; a driver that returns without calling run_example (its check asserts on its
   own, as low_mem_dropout's does) counts as one passing "driver" kernel.
4. classifies each example: "ports as is (3 backends)", "pallas ok; fails on B", "ports partly
   (pallas), k/n kernels ok", "blocked (pallas), 0/n kernels ok", "blocked (import)" or "blocked"
   (timeout / crash), with the first error line and the example line it was raised from.

Which files count as kernel examples: every `examples/**/*.py` whose text mentions
`helion.kernel` (a `@helion.kernel` decorator or a `helion.kernel(fn)` call). That skips the
`__init__.py` files, the AOT demos (`helion.aot_kernel`), `distributed/allreduce_bias_rmsnorm.py`
(`helion.jit`) and the helper modules under `examples/linear/` (harness, utils, generated AOT
code, `example_*.py` drivers), leaving 63 files at Helion ef091f4. A file in a subdirectory is
named `subdir__file` (e.g. `distributed__all_reduce`).

Usage (CPU is enough; pallas runs JAX interpret, triton and nki kernel_dsl's interpreters):

    nice -n 10 python benchmarks/helion_ports.py --helion /path/to/helion/.git \\
        --out /tmp/helion_ports --jobs 2 --json /tmp/helion_ports/results.json [--only add,bmm]

`--helion` may be a bare repository: files are read with `git show HEAD:examples/...`. The
markdown table, the blocker counts and the tally are printed to stdout; per-example logs are
OUT/logs/NAME.{out,err,json}. `--drive SRC --result FILE` is the internal per-example mode.
"""
from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

BACKENDS = ("pallas", "triton", "nki")

HARNESS_SOURCE = '''\
"""Stand-in for helion._testing, written by benchmarks/helion_ports.py."""
import os
import traceback

import torch

DEVICE = torch.device("cpu")
HALF_DTYPE = torch.float16
LONG_INT_TYPE = torch.int64
EXAMPLE_FILE = None  # the ported source; its frames give the "[file.py:line]" of an error
RESULTS = []  # one {"kernel", "status", "line"} per kernel run by run_example


def first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def example_line(exc):
    """The innermost frame of the traceback that lies in the example's source, as [file:line]."""
    where = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == EXAMPLE_FILE:
            where = lineno
    return "" if where is None else f" [{os.path.basename(EXAMPLE_FILE)}:{where}]"


def describe(exc):
    return f"{type(exc).__name__}: {first_line(exc)}{example_line(exc)}"


def do_bench(fn, *args, **kwargs):
    fn()
    return 0.0


def _as_tensors(result):
    return list(result) if isinstance(result, tuple) else [result]


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _compare(got, expected, rtol, atol):
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=rtol, atol=atol, check_dtype=False)


def _check_kernel(name, fn, args, expected, rtol, atol):
    try:
        got = _as_tensors(fn(*_clone(args)))
    except Exception as exc:
        return {"kernel": name, "status": "error", "line": describe(exc)}
    try:
        _compare(got, expected, rtol, atol)
    except Exception as exc:
        return {"kernel": name, "status": "mismatch", "line": first_line(exc)}
    return {"kernel": name, "status": "ok", "line": ""}


def _kernel_label(fn, kernel_name):
    """The example's kernel_name= if given, else the function's name ("helion" for a kd.kernel)."""
    return kernel_name or getattr(fn, "__name__", "helion")


def run_example(kernel_fn, baseline_fn, args, kernel_name=None, baseline_name="torch",
                rtol=1e-2, atol=1e-1, **ignored):
    if isinstance(kernel_fn, dict):
        kernels = kernel_fn
    else:
        kernels = {_kernel_label(kernel_fn, kernel_name): kernel_fn}
    baselines = list(baseline_fn.values()) if isinstance(baseline_fn, dict) else [baseline_fn]
    for i, baseline in enumerate(baselines):  # a raw Triton baseline cannot run on CPU: the next
        try:
            expected = _as_tensors(baseline(*args))
            break
        except Exception:
            if i == len(baselines) - 1:
                raise
    for name, fn in kernels.items():
        RESULTS.append(_check_kernel(name, fn, args, expected, rtol, atol))
    return {}
'''


# -- selection -------------------------------------------------------------------------------------
def git_show(helion: str, path: str) -> str:
    return subprocess.run(["git", "-C", helion, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def list_example_paths(helion: str) -> list[str]:
    out = subprocess.run(["git", "-C", helion, "ls-tree", "-r", "--name-only", "HEAD", "examples"],
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split() if p.endswith(".py") and not p.endswith("__init__.py")]


def is_kernel_example(source: str) -> bool:
    return "helion.kernel" in source


def example_name(path: str) -> str:
    return path[len("examples/"):-len(".py")].replace("/", "__")


def select_examples(helion: str, only: set[str] | None) -> dict[str, str]:
    """name -> original source, for the kernel examples (all, or those named in `only`)."""
    chosen = {}
    for path in list_example_paths(helion):
        name = example_name(path)
        if only is not None and name not in only:
            continue
        source = git_show(helion, path)
        if is_kernel_example(source):
            chosen[name] = source
    return chosen


# -- step 1: port by renaming ---------------------------------------------------------------------
def _is_helion_module(name: str | None) -> bool:
    return name is not None and (name == "helion" or name.startswith("helion."))


def _import_rewrite(node: ast.AST, line: str) -> str | None:
    """The new text of an import's first line, or None to drop the import."""
    indent = line[:len(line) - len(line.lstrip())]
    if isinstance(node, ast.Import):
        if any(a.name == "helion.language" for a in node.names):
            return indent + "import kernel_dsl as kd"
        return None
    if node.module == "helion._testing":
        return line.replace("helion._testing", "_harness", 1)
    if node.module == "helion.autotuner":  # the config fragments of kd.register_tunable
        return line.replace("helion.autotuner", "kernel_dsl.autotuner", 1)
    return None


def _is_helion_kernel_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return ast.unparse(target) == "helion.kernel"


def port_edits(tree: ast.AST, lines: list[str]) -> dict[int, str | None]:
    """0-based line -> replacement text (None: delete) for the imports and the decorators."""
    edits: dict[int, str | None] = {}
    for node in ast.walk(tree):
        spans = []
        if isinstance(node, ast.Import) and any(_is_helion_module(a.name) for a in node.names):
            spans.append((node, _import_rewrite(node, lines[node.lineno - 1])))
        elif isinstance(node, ast.ImportFrom) and _is_helion_module(node.module):
            spans.append((node, _import_rewrite(node, lines[node.lineno - 1])))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                if _is_helion_kernel_decorator(dec):
                    indent = " " * node.col_offset
                    spans.append((dec, indent + "@kd.kernel"))
        for span, first in spans:
            for i in range(span.lineno - 1, span.end_lineno):
                edits[i] = None
            edits[span.lineno - 1] = first
    return edits


def port_source(source: str) -> str:
    lines = source.splitlines()
    edits = port_edits(ast.parse(source), lines)
    out = []
    for i, line in enumerate(lines):
        if i in edits:
            if edits[i] is not None:
                out.append(edits[i])
        else:
            line = re.sub(r"(?<![\w.])helion\.(cdiv|next_power_of_2)\b", r"kd.\1", line)
            out.append(re.sub(r"(?<![\w.])hl\.", "kd.", line))
    return "\n".join(out) + "\n"


def write_ports(examples: dict[str, str], out: str) -> dict[str, str]:
    """Writes OUT/_harness.py and OUT/src/NAME.py; returns name -> ported path."""
    os.makedirs(os.path.join(out, "src"), exist_ok=True)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    with open(os.path.join(out, "_harness.py"), "w") as f:
        f.write(HARNESS_SOURCE)
    paths = {}
    for name, source in examples.items():
        paths[name] = os.path.join(out, "src", f"{name}.py")
        with open(paths[name], "w") as f:
            f.write(port_source(source))
    return paths


# -- step 3, inside the per-example subprocess ----------------------------------------------------
def shrink(v: int) -> int:
    if v < 16:
        return v
    if v < 256:
        return v // 2 + 1
    return min(v // 16 + 1, 97)


def literal_args(call: ast.Call) -> list | None:
    """The call's arguments if every one is a literal (ints shrunk), else None."""
    if call.keywords:
        return None
    try:
        values = [ast.literal_eval(a) for a in call.args]
    except (ValueError, TypeError, SyntaxError):  # a name or an expression: not literal
        return None
    return [shrink(v) if type(v) is int else v for v in values]


def first_literal_check(tree: ast.Module) -> tuple[str, list] | None:
    """(name, shrunk args) of main()'s first `check*(...)` call whose arguments are all literals."""
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    if not mains:
        return None
    calls = sorted((n for n in ast.walk(mains[0]) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name) and n.func.id.startswith("check")),
                   key=lambda c: (c.lineno, c.col_offset))
    for call in calls:
        args = literal_args(call)
        if args is not None:
            return call.func.id, args
    return None


def driver_target(module, source: str):
    """(callable, description): main()'s first literal check*(...) call shrunk, else main()."""
    found = first_literal_check(ast.parse(source))
    if found is not None and callable(getattr(module, found[0], None)):
        name, args = found
        return (lambda: getattr(module, name)(*args)), f"{name}({', '.join(map(repr, args))})"
    return (lambda: module.main()), "main()"


def import_example(path: str):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_backend(kd, harness, target, backend: str) -> list[dict]:
    import torch
    harness.RESULTS.clear()
    torch.manual_seed(0)
    try:
        with kd.backend(backend):
            target()
    except Exception as exc:
        harness.RESULTS.append({"kernel": "driver", "status": "error", "line": harness.describe(exc)})
    if not harness.RESULTS:  # a check*() that asserts on its own (low_mem_dropout) and returned
        harness.RESULTS.append({"kernel": "driver", "status": "ok", "line": ""})
    return list(harness.RESULTS)


def all_ok(entries: list[dict] | None) -> bool:
    return bool(entries) and all(e["status"] == "ok" for e in entries)


def write_json(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def drive(src: str, result_path: str) -> None:
    """The per-example subprocess: import, then pallas, then triton and nki if pallas all passed."""
    out = os.path.dirname(os.path.dirname(os.path.abspath(src)))
    sys.path[:0] = [out, os.path.dirname(os.path.abspath(src))]
    import _harness

    import kernel_dsl as kd
    _harness.EXAMPLE_FILE = os.path.abspath(src)
    data: dict = {"backends": {}}
    try:
        module = import_example(src)
    except Exception as exc:
        data["import_error"] = _harness.describe(exc)
        return write_json(result_path, data)
    with open(src) as f:
        target, data["via"] = driver_target(module, f.read())
    for backend in BACKENDS:
        data["backends"][backend] = run_backend(kd, _harness, target, backend)
        write_json(result_path, data)
        if backend == "pallas" and not all_ok(data["backends"]["pallas"]):
            break


# -- step 3, the parent: one subprocess per example -----------------------------------------------
def child_env(jobs: int) -> dict[str, str]:
    """The environment of a per-example process: torch threads split between the `jobs` running
    at once (OMP_NUM_THREADS, unless set), as oversubscribed OpenMP threads slow big tensors ~4x."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    return env


def run_one(name: str, src: str, out: str, timeout: float, jobs: int) -> dict:
    logs = os.path.join(out, "logs")
    result_path = os.path.join(logs, f"{name}.json")
    if os.path.exists(result_path):
        os.remove(result_path)
    cmd = [sys.executable, os.path.abspath(__file__), "--drive", src, "--result", result_path]
    start = time.monotonic()
    with open(os.path.join(logs, f"{name}.out"), "w") as fo, \
            open(os.path.join(logs, f"{name}.err"), "w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=child_env(jobs),
                                start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc, timed_out = proc.wait(), True
    data = {}
    if os.path.exists(result_path):
        with open(result_path) as f:
            data = json.load(f)
    data.update(name=name, rc=rc, timed_out=timed_out, seconds=round(time.monotonic() - start, 1))
    return data


def run_all(ports: dict[str, str], out: str, jobs: int, timeout: float) -> dict[str, dict]:
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, n, p, out, timeout, jobs): n for n, p in ports.items()}
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            results[r["name"]] = r
            print(f"[{len(results)}/{len(ports)}] {r['name']}: {r['seconds']} s", file=sys.stderr)
    return dict(sorted(results.items()))


# -- step 4: classification and report -------------------------------------------------------------
def entry_text(e: dict) -> str:
    return f"{e['kernel']}: {e['status']}: {e['line']}"


def first_bad(entries: list[dict]) -> dict:
    return next(e for e in entries if e["status"] != "ok")


def cut_short(r: dict, timeout: float) -> str | None:
    """Why a backend's results are missing: timeout or crash (None if the run ended normally)."""
    if r["timed_out"]:
        return f"timeout {timeout:g} s"
    return f"crash (exit code {r['rc']})" if r["rc"] != 0 else None


def classify_later_backends(r: dict, timeout: float) -> tuple[str, str]:
    failing, detail = [], ""
    for b in BACKENDS[1:]:
        entries = r["backends"].get(b)
        if all_ok(entries):
            continue
        failing.append(b)
        if not detail:
            bad = first_bad(entries) if entries else None
            detail = (f"{b}: {bad['status']}: {bad['line']}" if bad
                      else f"{b}: {cut_short(r, timeout) or 'no kernels ran'}")
    if not failing:
        return "ports as is (3 backends)", f"via {r.get('via', '?')}"
    return f"pallas ok; fails on {' and '.join(failing)}", detail


def classify(r: dict, timeout: float) -> tuple[str, str]:
    """(status, first blocker / driver) for one example's result, as in the doc's Results table."""
    if "import_error" in r:
        return "blocked (import)", r["import_error"]
    pallas = r.get("backends", {}).get("pallas")
    if not pallas:
        return "blocked", cut_short(r, timeout) or "no kernels ran"
    if all_ok(pallas):
        return classify_later_backends(r, timeout)
    n_ok = sum(e["status"] == "ok" for e in pallas)
    bad = first_bad(pallas)
    kind = "ports partly" if n_ok else "blocked"
    return f"{kind} (pallas), {n_ok}/{len(pallas)} kernels ok", entry_text(bad)


def normalize_blocker(status: str, detail: str) -> str:
    """The doc's second table key: the first error without paths, [..] parts or the kernel name."""
    if status.startswith("pallas ok"):
        return "backend-only failure"
    if status == "blocked (import)":
        return detail.split(":")[0] + " at import"
    if status == "blocked":
        return detail.split(" (")[0]
    text = re.sub(r"^[^:]*: (error|mismatch): ", "", detail)
    text = re.sub(r"\S*/[^/\s]+\.py:\d+:", "", text)
    return re.sub(r"\[[^\]]*\]", "", text)[:70]


def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def results_table(rows: dict[str, tuple[str, str]]) -> str:
    lines = ["| example | status | first blocker / driver |", "|---|---|---|"]
    lines += [md_row([name, status, detail]) for name, (status, detail) in rows.items()]
    return "\n".join(lines)


def blocker_table(rows: dict[str, tuple[str, str]]) -> str:
    counts = collections.Counter(normalize_blocker(s, d) for s, d in rows.values()
                                 if not s.startswith("ports as is"))
    lines = ["| blocker (first error, normalized) | examples |", "|---|---|"]
    lines += [md_row([k, str(v)]) for k, v in counts.most_common()]
    return "\n".join(lines)


def tally(rows: dict[str, tuple[str, str]]) -> str:
    def named(prefix: str) -> list[str]:
        return [n for n, (s, _) in rows.items() if s.startswith(prefix)]
    as_is, backend_only, partly = named("ports as is"), named("pallas ok"), named("ports partly")
    blocked = len(rows) - len(as_is) - len(backend_only) - len(partly)
    return (f"{len(as_is)} of {len(rows)} port as they are and match torch on pallas, triton and nki "
            f"({', '.join(as_is)}); {len(backend_only)} pass on pallas and stop on another backend "
            f"({', '.join(backend_only)}); {len(partly)} port partly ({', '.join(partly)}); "
            f"{blocked} blocked.")


def status_counts(rows: dict[str, tuple[str, str]]) -> str:
    counts = collections.Counter(s.split(",")[0] for s, _ in rows.values())
    return "Status counts: " + ", ".join(f"{k}: {v}" for k, v in counts.most_common())


def report(results: dict[str, dict], timeout: float) -> tuple[dict[str, tuple[str, str]], str]:
    rows = {name: classify(r, timeout) for name, r in results.items()}
    text = "\n\n".join([results_table(rows), blocker_table(rows), status_counts(rows), tally(rows)])
    return rows, text


# -- command line ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--helion", help="git dir of a pytorch/helion clone (bare is fine)")
    p.add_argument("--out", default="/tmp/helion_ports", help="scratch dir: ported sources, logs")
    p.add_argument("--jobs", type=int, default=2, help="examples run at a time (default 2)")
    p.add_argument("--only", help="comma-separated example names (e.g. add,distributed__all_reduce)")
    p.add_argument("--timeout", type=float, default=120, help="seconds per example (default 120)")
    p.add_argument("--json", help="write the per-example results and statuses here")
    p.add_argument("--drive", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.drive and not args.helion:
        p.error("--helion is required")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.drive:
        return drive(args.drive, args.result)
    only = set(args.only.split(",")) if args.only else None
    examples = select_examples(args.helion, only)
    if only is not None and only - set(examples):
        print(f"not kernel examples: {', '.join(sorted(only - set(examples)))}", file=sys.stderr)
    ports = write_ports(examples, args.out)
    results = run_all(ports, args.out, args.jobs, args.timeout)
    rows, text = report(results, args.timeout)
    print(text)
    if args.json:
        for name, (status, detail) in rows.items():
            results[name].update(status=status, detail=detail)
        write_json(args.json, {"helion": args.helion, "timeout_s": args.timeout, "examples": results})


if __name__ == "__main__":
    main()
