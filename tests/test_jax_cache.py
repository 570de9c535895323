"""JAX's persistent compilation cache: a fresh process reuses what an earlier one compiled."""
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
          float(out.double().sum()))
""")


def _run(env: dict[str, str]) -> tuple[int, str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD.format(tests=TESTS)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    hits, path, total = out.stdout.split()
    return int(hits), path, float(total)


def test_a_second_process_hits_the_cache_with_the_same_result(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path)}
    env.pop("KD_JAX_CACHE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    hits1, path, total1 = _run(env)
    assert path == os.path.join(str(tmp_path), "jax") and os.listdir(path)
    assert hits1 == 0
    hits2, _, total2 = _run(env)
    assert hits2 >= 1 and total2 == total1


def test_off_with_kd_jax_cache_0_and_the_users_own_dir_wins(tmp_path: object) -> None:
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path), "KD_JAX_CACHE": "0"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    _, path, _ = _run(env)
    assert path == "None" and not os.path.exists(os.path.join(str(tmp_path), "jax"))
    mine = os.path.join(str(tmp_path), "mine")
    env = {**os.environ, "KD_CACHE_DIR": str(tmp_path), "JAX_COMPILATION_CACHE_DIR": mine}
    env.pop("KD_JAX_CACHE", None)
    _, path, _ = _run(env)
    assert path == mine and not os.path.exists(os.path.join(str(tmp_path), "jax"))
