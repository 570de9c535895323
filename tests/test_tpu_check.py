"""TPU verification without a TPU: Pallas lowering (jax.export) and libtpu's compile-only targets,
the analytical VMEM estimate, and the hardware-faithful CPU interpret mode."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from dsl_kernels import add_where, attention, layer_norm, matmul, row_dot, softmax_rows, softmax_two_pass

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.check import BLOCK_RULE, CRASH, TIMEOUT, UNSUPPORTED, VMEM_OVERFLOW
from kernel_dsl.lowering.pallas.targets import TARGETS, tpu_target
from kernel_dsl.lowering.pallas.vmem import padded_bytes

E = torch.empty
BF = torch.bfloat16
ALL = list(TARGETS)


def _line_of(fn: object, text: str) -> str:
    import inspect

    lines, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return f"{inspect.getsourcefile(fn)}:{start + next(i for i, ln in enumerate(lines) if text in ln)}"  # type: ignore[arg-type]


def test_block_rule_violation_is_caught_at_lowering_and_names_the_tile_line() -> None:
    """(8, 64) over a 512-wide last dim breaks the (8, 128) rule: stage 1 says so, no libtpu."""
    r = add_where.check(E(256, 512), E(256, 512), config=kd.Config([8, 64]), measure_vmem=False)
    assert not r.ok and [e.target for e in r.entries] == ALL
    for e in r.entries:
        assert (e.status, e.error_class, e.stage) == ("failed", BLOCK_RULE, "lower")
        assert "block" in e.message and "(8, 128)" in e.hint
        assert e.source_line == _line_of(add_where.fn, "kd.tile([m, n])")
    assert "FAILED on: tpu-v4" in r.table()
    assert json.loads(r.to_json())["entries"][0]["error_class"] == BLOCK_RULE


def test_check_rejects_unknown_targets() -> None:
    with pytest.raises(kd.ArgumentError, match="tpu-v9"):
        add_where.check(E(8, 128), E(8, 128), targets=["tpu-v9"])


def test_generated_source_sets_the_targets_vmem_limit() -> None:
    for name, t in TARGETS.items():
        src = matmul.source(E(256, 256), E(256, 256), target=name)
        assert f"VMEM_LIMIT_BYTES = {t.vmem_bytes}" in src
        assert "vmem_limit_bytes=VMEM_LIMIT_BYTES" in src
    assert "VMEM_LIMIT_BYTES" not in matmul.source(E(256, 256), E(256, 256))  # cpu: interpret


def test_vmem_estimate_pads_to_tiles() -> None:
    v6e = tpu_target("tpu-v6e")
    assert padded_bytes((17, 100), "bf16", v6e) == 32 * 128 * 2  # 16-row bf16 tiles
    assert padded_bytes((17, 100), "f32", v6e) == 24 * 128 * 4
    assert padded_bytes((3, 8, 130), "f32", v6e) == 3 * 8 * 256 * 4
    assert padded_bytes((100,), "f32", v6e) == 8 * 128 * 4  # a vector fills whole rows
    gen = matmul.generated(E(1024, 1024, dtype=BF), E(1024, 1024, dtype=BF),
                           config=kd.Config([256, 512, 128], loop_mode="grid"), target="tpu-v6e")
    blocks = 256 * 128 * 2 + 128 * 512 * 2 + 256 * 512 * 2  # x, y, out blocks
    # + the f32 accumulator in scratch + the f32 product, too big for the vector registers
    assert lowering.get("pallas").estimate_vmem(gen) == 2 * blocks + 2 * 256 * 512 * 4


# -- the hardware-faithful interpreter ----------------------------------------------------------
@pytest.mark.parametrize("mode", ["grid", "inner"])
def test_faithful_interpret_mode_runs_dsl_kernels(mode: str) -> None:
    """Pallas' TPU interpreter: NaN-filled memory, out-of-bounds reads raise, races detected."""
    x, y = torch.randn(20, 37), torch.randn(37, 130)
    s = torch.randn(13, 300)
    q, k = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 27, 16)
    with kd.interpret_mode("faithful"):
        (mm,) = matmul.run_cpu("pallas", (x, y), kd.Config([8, 128, 8], loop_mode=mode))
        (sm,) = softmax_two_pass.run_cpu("pallas", (s,), kd.Config([8, 128, 128], loop_mode=mode))
        (at,) = attention.run_cpu("pallas", (q, k, k, True), kd.Config([8, 8], loop_mode=mode))
    torch.testing.assert_close(mm, x @ y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(sm, torch.softmax(s, -1))
    assert torch.isfinite(at).all()
    assert any(key[2] for key in matmul._compiled)  # a faithful build is cached apart


def test_faithful_mode_catches_an_out_of_bounds_read_the_fast_mode_hides() -> None:
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    be = lowering.get("pallas")
    ir = add_where.ir(x, y)
    gen = be.render(ir, kd.Config([8, 128]), "cpu")
    # plant a bug: read x one block further along the rows than the grid point owns
    gen.source = gen.source.replace("lambda i0, i1: (i0, i1)),  # x", "lambda i0, i1: (i0 + 1, i1)),  # x")
    assert "(i0 + 1, i1)" in gen.source
    be.compile(gen, ir)(x, y)  # the fast interpreter clamps the read: no error, wrong data
    from jax.experimental.pallas import tpu as pltpu

    with pytest.raises(Exception, match="(?i)out.of.bounds|out of range"):
        be.compile(gen, ir, faithful=True)(x, y)
    pltpu.reset_tpu_interpret_mode_state()


def test_interpret_mode_from_environment() -> None:
    code = "import kernel_dsl.kernel_object as k; print(k._faithful())"
    env = dict(os.environ, KD_INTERPRET="faithful")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
    with pytest.raises(kd.ConfigError):
        kd.interpret_mode("bogus")


# -- the real compiler (libtpu compile-only targets): slow tier --------------------------------
DSL_CASES = [
    ("add_where", add_where, (E(256, 512), E(256, 512))),
    ("add_where bf16 ragged", add_where, (E(37, 300, dtype=BF), E(37, 300, dtype=BF))),
    ("matmul bf16", matmul, (E(512, 1024, dtype=BF), E(1024, 768, dtype=BF))),
    ("matmul f32 ragged", matmul, (E(300, 257), E(257, 130))),
    ("softmax_rows", softmax_rows, (E(256, 1024),)),
    ("softmax_rows bf16 ragged", softmax_rows, (E(100, 1000, dtype=BF),)),
    ("softmax_two_pass", softmax_two_pass, (E(256, 2048),)),
    ("softmax_two_pass bf16 ragged", softmax_two_pass, (E(100, 1000, dtype=BF),)),
    ("layer_norm", layer_norm, (E(256, 1024), E(1024), E(1024), 1e-5)),
    ("layer_norm bf16 ragged", layer_norm, (E(100, 1000, dtype=BF), E(1000, dtype=BF),
                                            E(1000, dtype=BF), 1e-5)),
    ("attention bf16 causal", attention, (E(2, 4, 1024, 128, dtype=BF),) * 3 + (True,)),
    ("attention f32 ragged", attention, (E(1, 2, 300, 64), E(1, 2, 200, 64), E(1, 2, 200, 64),
                                         False)),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel,args", DSL_CASES, ids=[c[0] for c in DSL_CASES])
def test_every_dsl_kernel_compiles_for_every_tpu_generation(name: str, kernel: kd.Kernel,
                                                           args: tuple) -> None:
    r = kernel.check(*args, measure_vmem=name.startswith("matmul"))
    assert r.ok, r.table()
    for e in r.entries:
        assert e.stage == "compile" and e.compile_s > 0
        if name.startswith("matmul"):
            assert e.vmem_used is not None and 0 < e.vmem_used <= e.vmem_limit


@pytest.mark.slow
def test_vmem_overflow_on_64mib_chips_fits_on_v6e() -> None:
    args = (E(4096, 4096, dtype=BF), E(4096, 4096, dtype=BF))
    r = matmul.check(*args, config=kd.Config([2048, 2048, 2048], loop_mode="grid"),
                     targets=["tpu-v5p", "tpu-v6e", "tpu-v7x"], measure_vmem=False)
    assert r["tpu-v6e"].ok, r.table()
    for t in ("tpu-v5p", "tpu-v7x"):
        e = r[t]
        assert e.error_class == VMEM_OVERFLOW, r.table()
        assert e.vmem_used is not None and e.vmem_limit is not None
        assert abs(e.vmem_limit - (64 << 20)) < (1 << 20) < e.vmem_used - e.vmem_limit  # as reported
        assert "VMEM" in e.hint


@pytest.mark.slow
def test_vmem_used_is_what_the_kernel_needs_not_what_an_overflow_message_asked_for() -> None:
    # Under a 4 KiB limit the compiler asks for 72 MiB here (XLA would keep the whole (64, 2048, 1)
    # f32 output in VMEM), yet the kernel compiles in 8: the figure is bisected down to that.
    o = E(64, 2048, 128, dtype=BF)
    e = row_dot.check(o, o, targets=["tpu-v6e"], config=kd.Config([8, 512]))["tpu-v6e"]
    assert e.ok, e.message
    blocks = 2 * 2 * 8 * 512 * 128 * 2  # two bf16 inputs, double-buffered
    assert blocks <= e.vmem_used < 16 << 20


@pytest.mark.slow
def test_float16_is_reported_unsupported_by_the_real_compiler() -> None:
    r = softmax_rows.check(E(64, 256, dtype=torch.float16), targets=["tpu-v6e"], measure_vmem=False)
    e = r["tpu-v6e"]
    assert e.error_class == UNSUPPORTED and e.stage == "compile", r.table()
    assert "bfloat16" in e.hint


@pytest.mark.slow
def test_a_hang_or_a_crash_does_not_stop_the_other_checks() -> None:
    from kernel_dsl.lowering.pallas.check import Job, compile_checks

    ir = add_where.ir(E(64, 256), E(64, 256))
    good = lowering.get("pallas").render(ir, kd.Config([8, 128]), "tpu-v6e")
    hang = lowering.Generated("pallas", "tpu-v6e", good.config,
                              "import time\ntime.sleep(600)\n" + good.source, good.entry)
    crash = lowering.Generated("pallas", "tpu-v6e", good.config,
                               "import os\nos._exit(7)\n" + good.source, good.entry)
    specs = [((64, 256), "f32"), ((64, 256), "f32")]
    res = compile_checks([Job(g, specs) for g in (hang, good, crash, good)], timeout=8.0,
                         measure_vmem=False)
    assert [e.error_class for e in res] == [TIMEOUT, None, CRASH, None]
    assert [e.status for e in res] == ["failed", "ok", "failed", "ok"]


@pytest.mark.slow
def test_compile_workers_do_not_import_from_the_callers_directory(
        tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `json.py` in the working directory must not be imported into a compile worker: that
    would run code from wherever the user happens to call `kernel.check` or autotune."""
    marker = tmp_path / "imported"  # type: ignore[operator]
    (tmp_path / "json.py").write_text(  # type: ignore[operator]
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit('planted json.py was imported')\n")
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    r = add_where.check(E(64, 256), E(64, 256), targets=["tpu-v6e"], measure_vmem=False)
    assert not marker.exists(), "the compile worker imported json.py from the caller's cwd"
    assert r.ok, r.table()
