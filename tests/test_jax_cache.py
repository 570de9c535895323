"""JAX's persistent compilation cache and the exported kernels beside it: a fresh process
reuses what an earlier one lowered and compiled."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))

_CHILD = textwrap.dedent("""
    import sys, torch
    import jax.monitoring
    sys.path.insert(0, {tests!r})
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    from dsl_kernels import add_where
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 300, generator=gen), torch.randn(24, 300, generator=gen)
    out = add_where(x, y)
    import jax
    print(events.count("/jax/compilation_cache/cache_hits"), jax.config.jax_compilation_cache_dir,
          float(out.double().sum()), "jax.experimental.pallas" in sys.modules)
""")


def _run(env: dict[str, str], pallas: bool | None = None) -> tuple[int, str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD.format(tests=TESTS)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    hits, path, total, imported = out.stdout.split()
    if pallas is not None:
        assert imported == str(pallas), "Pallas imported" if pallas is False else "not imported"
    return int(hits), path, float(total)


def _exports(tmp_path: object) -> list[str]:
    d = os.path.join(str(tmp_path), "jax_export")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_a_second_process_hits_the_cache_with_the_same_result(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path)}
    env.pop("KD_JAX_CACHE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    hits1, path, total1 = _run(env, pallas=True)
    assert path == os.path.join(str(tmp_path), "jax") and os.listdir(path)
    assert hits1 == 0 and len(_exports(tmp_path)) == 1
    # the second process loads the exported kernel: it never imports Pallas to lower it
    hits2, _, total2 = _run(env, pallas=False)
    assert hits2 >= 1 and total2 == total1


def test_a_damaged_export_is_rebuilt(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path)}
    env.pop("KD_JAX_CACHE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    _, _, total = _run(env)
    (name,) = _exports(tmp_path)
    path = os.path.join(str(tmp_path), "jax_export", name)
    with open(path, "r+b") as f:
        f.truncate(40)
    _, _, again = _run(env, pallas=True)  # lowered again, and the file replaced
    assert again == total and os.path.getsize(path) > 40
    assert _run(env, pallas=False)[2] == total


def test_faithful_runs_and_autotune_candidates_are_not_exported(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torch
    from dsl_kernels import add_where

    import kernel_dsl as kd

    monkeypatch.setenv("KD_CACHE_DIR", str(tmp_path))
    x = torch.randn(8, 130)
    with kd.interpret_mode("faithful"):
        add_where(x, x)
    add_where.autotune(x, x, budget=5)  # its candidates run in a worker, from source
    assert _exports(tmp_path) == []


def test_off_with_kd_jax_cache_0_and_the_users_own_dir_wins(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path), "KD_JAX_CACHE": "0"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    _, path, _ = _run(env)
    assert path == "None" and not os.path.exists(os.path.join(str(tmp_path), "jax"))
    assert _exports(tmp_path) == []
    mine = os.path.join(str(tmp_path), "mine")
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path), "JAX_COMPILATION_CACHE_DIR": mine}
    env.pop("KD_JAX_CACHE", None)
    _, path, _ = _run(env)
    assert path == mine and not os.path.exists(os.path.join(str(tmp_path), "jax"))
