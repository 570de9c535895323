"""CI: kernel-dsl's extras resolve beside the packages our users already run (README.md,
"Dependencies"). pip resolves each install without installing it (`--dry-run`); `fast-deps`
reads wheel metadata through range requests, so CUDA torch is checked without downloading it.

    python .ci/resolve.py            # every case below; exit 1 if any fails to resolve

Each case names the Python it resolves for, the requirements (the checkout stands for
`kernel-dsl`), and the versions the resolution must pick.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python312() -> str | None:
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "-V"], capture_output=True).returncode == 0:
        return found
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    return pyenv[-1] if pyenv else None


# (name, python, requirements, {package: allowed versions or a predicate}, use the local CPU torch)
CASES = [
    ("TPU VM, Python 3.11: kernel-dsl[tpu] + torch-tpu 0.2.0", sys.executable,
     [f"{ROOT}[tpu]", "torch-tpu==0.2.0", "torch==2.13.0"],
     {"torch-tpu": "0.2.0", "libtpu": lambda v: v >= (0, 0, 50)}, True),
    ("TPU VM, Python 3.12: kernel-dsl[tpu] + torch-tpu 0.2.0", _python312(),
     [f"{ROOT}[tpu]", "torch-tpu==0.2.0"],
     {"torch-tpu": "0.2.0", "libtpu": lambda v: v >= (0, 0, 50)}, False),
    ("GPU box: kernel-dsl[gpu] + CUDA torch 2.13.0", sys.executable,
     [f"{ROOT}[gpu]", "torch==2.13.0"], {"torch": "2.13.0", "triton": "3.7.1"}, False),
    ("GPU box: kernel-dsl[gpu] + CUDA torch 2.14.0", sys.executable,
     [f"{ROOT}[gpu]", "torch==2.14.0"], {"torch": "2.14.0", "triton": "3.8.0"}, False),
]


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("+")[0].split(".") if p.isdigit())


def resolve(python: str, requirements: list[str], local_torch: bool) -> dict[str, str]:
    """{package: version} that pip would install; raises with pip's output if it cannot."""
    env = dict(os.environ)
    if not local_torch:  # the CPU torch on this machine's disk would stand in for CUDA torch
        env.pop("PIP_FIND_LINKS", None)
        env["PIP_CONFIG_FILE"] = os.devnull  # and so would the local indexes pip is set up with
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
               "--use-feature=fast-deps", "--report", report, *requirements]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            tail = "\n".join(line for line in proc.stderr.splitlines() if "is ignored" not in line)
            raise RuntimeError(f"{' '.join(cmd)}\n{tail[-3000:]}")
        with open(report) as f:
            return {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                    for i in json.load(f)["install"]}


def main() -> int:
    failed = 0
    for name, python, requirements, want, local_torch in CASES:
        if python is None:
            print(f"FAIL {name}: no python3.12 on this machine")
            failed += 1
            continue
        try:
            got = resolve(python, requirements, local_torch)
        except RuntimeError as e:
            print(f"FAIL {name}: pip cannot resolve it\n{e}")
            failed += 1
            continue
        bad = [f"{p}=={got.get(p)}" for p, ok in want.items()
               if p not in got or not (ok(_version(got[p])) if callable(ok)
                                       else _version(got[p]) == _version(ok))]
        picked = ", ".join(f"{p} {got.get(p)}" for p in ("torch", "torch-tpu", "jax", "jaxlib",
                                                          "libtpu", "triton") if p in got)
        print(f"{'FAIL' if bad else 'ok  '} {name}: {picked}" + (f" (unexpected: {bad})" if bad else ""))
        failed += bool(bad)
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
