"""`kdsl` with bad input: one `kdsl: error: ...` line and exit status 2, never a traceback;
`--debug` shows the traceback; an internal error says it is a bug and exits 3.

Most cases call `kernel_dsl.cli.main` in-process (fast); a few run `python -m kernel_dsl` to
prove the exit status and stderr a shell sees. No case compiles for a real TPU.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from typing import NamedTuple

import pytest

from kernel_dsl import cli

from .outcomes import ACCEPTED, CLEAR, LINE_HINT, TRACEBACK

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
K = os.path.join(HERE, "cli_kernels.py")
SCALE, ADD = f"{K}:scale", os.path.join(ROOT, "tests", "dsl_kernels.py") + ":add_where"
LN = os.path.join(ROOT, "tests", "dsl_kernels.py") + ":layer_norm"
FUZZ = ["fuzz", SCALE, "--reference", f"{K}:ref_scale", "--backends", "nki", "--max-examples",
        "1", "--configs", "default", "--dtypes", "f32", "--quiet"]


class CliCase(NamedTuple):
    category: str
    what: str
    argv: list[str]


C = CliCase
CLI_CASES: list[CliCase] = [
    C("show", "missing module", ["show", "no_such_module:k", "--shapes", "8"]),
    C("show", "module raises on import", ["show", f"{HERE}/cli_raises.py:k", "--shapes", "8"]),
    C("show", "missing attribute", ["show", f"{K}:nope", "--shapes", "8"]),
    C("show", "file that does not exist", ["show", "no/such/file.py:k", "--shapes", "8"]),
    C("show", "a non-kernel object", ["show", f"{K}:not_a_kernel", "--shapes", "8"]),
    C("show", "no :KERNEL", ["show", K, "--shapes", "8"]),
    C("show", "shape 12xab", ["show", SCALE, "--shapes", "12xab"]),
    C("show", "shape 0x4", ["show", SCALE, "--shapes", "0x4"]),
    C("show", "shape -1", ["show", SCALE, "--shapes", "-1"]),
    C("show", "empty shape", ["show", SCALE, "--shapes", ""]),
    C("show", "too many shapes", ["show", SCALE, "--shapes", "8", "8"]),
    C("show", "too few shapes", ["show", ADD, "--shapes", "8x8"]),
    C("show", "unknown dtype", ["show", SCALE, "--shapes", "8:f99"]),
    C("show", "invalid --config JSON", ["show", SCALE, "--shapes", "8", "--config", "{bad"]),
    C("show", "--config a list", ["show", SCALE, "--shapes", "8", "--config", "[8]"]),
    C("show", "--config block sizes that don't fit",
      ["show", SCALE, "--shapes", "8", "--config", '{"block_sizes": [8, 8, 8]}']),
    C("show", "--arg without =", ["show", SCALE, "--shapes", "8", "--arg", "times"]),
    C("show", "--arg unknown name", ["show", SCALE, "--shapes", "8", "--arg", "zzz=1"]),
    C("show", "--arg non-int for int", ["show", SCALE, "--shapes", "8", "--arg", "times=abc"]),
    C("show", "--arg non-float for float", ["show", LN, "--shapes", "8x8", "8", "8", "--arg", "eps=x"]),
    C("show", "--target tpu-v9", ["show", SCALE, "--shapes", "8", "--target", "tpu-v9"]),
    C("show", "--backend nope", ["show", SCALE, "--shapes", "8", "--backend", "nope"]),
    C("show", "a kernel that fails on these shapes", ["show", f"{K}:bad_rank", "--shapes", "8"]),
    C("check", "--targets tpu-v9", ["check", SCALE, "--shapes", "8", "--targets", "tpu-v9"]),
    C("check", "--targets empty", ["check", SCALE, "--shapes", "8", "--targets", ","]),
    C("check", "--timeout -1",
      ["check", SCALE, "--shapes", "8", "--targets", "tpu-v4", "--no-vmem", "--timeout", "-1"]),
    C("check", "shape 12xab", ["check", SCALE, "--shapes", "12xab", "--targets", "tpu-v4"]),
    C("check", "invalid --config JSON",
      ["check", SCALE, "--shapes", "8", "--targets", "tpu-v4", "--config", "{bad"]),
    C("autotune", "--budget abc", ["autotune", SCALE, "--shapes", "8", "--budget", "abc"]),
    C("autotune", "--budget -5", ["autotune", SCALE, "--shapes", "8", "--budget", "-5"]),
    C("autotune", "--budget 0", ["autotune", SCALE, "--shapes", "8", "--budget", "0s"]),
    C("autotune", "--target tpu-v9", ["autotune", SCALE, "--shapes", "8", "--target", "tpu-v9",
                                      "--budget", "1"]),
    C("autotune", "--target trn2", ["autotune", SCALE, "--shapes", "8", "--target", "trn2",
                                    "--budget", "1", "--no-cache"]),
    C("autotune", "--strategy best", ["autotune", SCALE, "--shapes", "8", "--strategy", "best",
                                      "--budget", "1"]),
    C("autotune", "--backend nope", ["autotune", SCALE, "--shapes", "8", "--backend", "nope",
                                     "--budget", "1"]),
    C("fuzz", "unclosed --signature", FUZZ + ["--signature", "x[m"]),
    C("fuzz", "--signature for too few arguments", [*FUZZ[:2], "--reference", f"{K}:ref_scale",
                                                    "--signature", "", *FUZZ[4:]]),
    C("fuzz", "--dim m=abc", FUZZ + ["--signature", "x[m]", "--dim", "m=abc"]),
    C("fuzz", "--dim without =", FUZZ + ["--signature", "x[m]", "--dim", "m"]),
    C("fuzz", "--dim m=5:1", FUZZ + ["--signature", "x[m]", "--dim", "m=5:1"]),
    C("fuzz", "--dim q=4 (not in the signature)", FUZZ + ["--signature", "x[m]", "--dim", "q=4"]),
    C("fuzz", "--dtypes f99", FUZZ + ["--signature", "x[m]", "--dtypes", "f99"]),
    C("fuzz", "--backends nope", FUZZ + ["--signature", "x[m]", "--backends", "nope"]),
    C("fuzz", "--values weird", FUZZ + ["--signature", "x[m]", "--values", "weird"]),
    C("fuzz", "--configs bogus", FUZZ + ["--signature", "x[m]", "--configs", "bogus"]),
    C("fuzz", "--replay invalid JSON", FUZZ + ["--signature", "x[m]", "--replay", "{bad"]),
    C("fuzz", "--reference missing", [*FUZZ[:3], f"{K}:nope", *FUZZ[4:], "--signature", "x[m]"]),
    C("demo", "unknown option", ["demo", "--foo"]),
    C("demo", "extra argument", ["demo", "extra"]),
]

_LINE = re.compile(r"\.py:\d+")


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`kdsl ARGV` in-process: exit status, stdout, stderr. An exception that escapes `main`
    is what a user would see as a traceback: status -1, its text on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            rc = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # noqa: BLE001  (escaping `main` is the outcome we count)
            print(f"Traceback (escaped main)\n{type(e).__name__}: {e}", file=sys.stderr)
            rc = -1
    return rc, out.getvalue(), err.getvalue()


def classify_cli(rc: int, err: str) -> str:
    if rc == -1 or "Traceback" in err or rc == getattr(cli, "EXIT_INTERNAL", 3):
        return TRACEBACK
    said = [ln for ln in err.splitlines() if ln.startswith("kdsl")]  # an error message, not progress
    if rc == 0 or not said:
        return ACCEPTED  # the bad input went ahead
    return LINE_HINT if _LINE.search(err) and ("hint" in err or "(" in err) else CLEAR


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("case", CLI_CASES, ids=[f"{c.category}: {c.what}" for c in CLI_CASES])
def test_bad_input_is_one_error_line(case: CliCase) -> None:
    rc, _, err = run_cli(case.argv)
    assert rc == 2, f"exit status {rc}:\n{err}"
    assert "Traceback" not in err, err
    said = [ln for ln in err.splitlines() if ln.startswith("kdsl")]  # argparse adds its usage
    assert len(said) == 1 and re.match(r"kdsl( \w+)?: error: ", said[0]), err


def test_kernel_error_keeps_the_users_line_and_hint() -> None:
    rc, _, err = run_cli(["show", f"{K}:bad_rank", "--shapes", "8"])
    assert rc == 2
    assert "cli_kernels.py:" in err and "(" in err and "check the arguments" in err, err


def test_debug_shows_the_traceback_before_or_after_the_subcommand() -> None:
    for argv in (["--debug", "show", SCALE, "--shapes", "12xab"],
                 ["show", SCALE, "--shapes", "12xab", "--debug"]):
        rc, _, err = run_cli(argv)
        assert rc == 2 and "Traceback" in err and "kdsl: error:" in err, err


def test_internal_error_says_it_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ns: object) -> int:
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(cli, "cmd_demo", broken)
    rc, _, err = run_cli(["demo"])
    assert rc == cli.EXIT_INTERNAL == 3
    assert "bug in kernel_dsl" in err and "ZeroDivisionError: planted" in err, err
    assert "kdsl --debug" in err and "Traceback" not in err, err


def test_good_input_still_works() -> None:
    rc, out, err = run_cli(["show", SCALE, "--shapes", "8", "--arg", "times=3", "--what", "ir"])
    assert rc == 0 and "scale" in out, err


def _kdsl(*argv: str) -> subprocess.CompletedProcess[str]:
    # other packages' import-time warnings (torch_tpu's tcmalloc notice, where TorchTPU
    # autoloads) are not the CLI's output: the assertions below are about every line of it
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "kernel_dsl", *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env)


def test_subprocess_exit_status_and_no_traceback() -> None:
    p = _kdsl("show", "no_such_module:k", "--shapes", "8")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.startswith("kdsl: error: "), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_subprocess_debug_shows_the_traceback() -> None:
    p = _kdsl("--debug", "show", SCALE, "--shapes", "12xab")
    assert p.returncode == 2 and "Traceback" in p.stderr, p.stderr
