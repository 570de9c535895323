"""The NKI rendering: current-dialect source with `# src:` comments, the config space within the
hardware limits, errors for configs and kernels the lowering cannot take, `kdsl show --backend
nki`, docs/nki.md in sync with the renderer, and the interpreter's NaN fills catching a missing
mask."""
from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Any

import pytest
import torch
from dsl_kernels import add_where, attention, layer_norm, matmul, softmax_rows, softmax_two_pass

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.cli import main as kdsl
from kernel_dsl.errors import ArgumentError, BackendError, ConfigError, UnsupportedOpError
from kernel_dsl.lowering.nki import render as nki_render
from kernel_dsl.lowering.nki.runner import compile_for_torch
from kernel_dsl.lowering.nki.space import candidates, roles
from kernel_dsl.lowering.nki.targets import TARGETS

NKI = lowering.get("nki")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _args(name: str) -> tuple[Any, ...]:
    return {
        "add_where": (torch.randn(37, 300), torch.randn(37, 300)),
        "matmul": (torch.randn(100, 300), torch.randn(300, 700)),
        "softmax_rows": (torch.randn(37, 200),),
        "softmax_two_pass": (torch.randn(37, 3000),),
        "layer_norm": (torch.randn(37, 500), torch.randn(500), torch.randn(500), 1e-5),
        "attention": (torch.randn(1, 2, 300, 64), torch.randn(1, 2, 200, 64),
                      torch.randn(1, 2, 200, 64), True),
    }[name]


KERNELS = {"add_where": add_where, "matmul": matmul, "softmax_rows": softmax_rows,
           "softmax_two_pass": softmax_two_pass, "layer_norm": layer_norm, "attention": attention}


@pytest.mark.parametrize("name", list(KERNELS))
def test_source_is_current_dialect_nki(name: str) -> None:
    src = KERNELS[name].source(*_args(name), backend="nki")
    assert "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n" in src
    assert f"@nki.jit\ndef {name}(" in src
    assert "buffer=nl.shared_hbm)" in src and "# src: dsl_kernels.py:" in src
    for legacy in ("neuronxcc", "nl.load(", "nl.store(", "mask=", "nl.divide", "affine_range",
                   "nl.mgrid", "nl.arange"):
        assert legacy not in src, legacy
    for call in re.findall(r"nisa\.\w+\(([^)]*)\)", src):  # destination first, by keyword
        assert call.startswith("dst="), call
    compile(src, "<nki>", "exec")


def test_matmul_lowers_to_nc_matmul_with_psum_eviction() -> None:
    src = matmul.source(*_args("matmul"), backend="nki", config=kd.Config([64, 512, 128]))
    assert re.search(r"nisa\.nc_transpose\(dst=psum_t, data=(\w+)\)", src)  # a[M, K] -> a.T
    assert re.search(r"nisa\.nc_matmul\(dst=psum_mm, stationary=\w+_T, moving=\w+\)", src)
    assert re.search(r"nisa\.tensor_tensor\(dst=v\d+, data1=psum_mm, data2=acc, op=nl\.add\)", src)
    assert "n_tn = min(512, 700 - tn0)" in src and "y[tk0:tk0 + n_tk, tn0:tn0 + n_tn]" in src
    assert "buffer=nl.psum" in src and "(64, 512), dtype=nl.float32, buffer=nl.psum" in src


def test_attention_masks_are_affine_selects_and_q_is_transposed_once() -> None:
    src = attention.source(*_args("attention"), backend="nki", config=kd.Config([128, 128]))
    assert "offset=tq0 + -100 - tk0" in src or "offset=tq0 - 100 - tk0" in src \
        or "offset=tq0 + (-100) - tk0" in src, src
    assert "cmp_op=nl.greater_equal, offset=199 - tk0" in src  # the ragged key edge
    loop = src.index("for i_tk in range(")
    assert src.index("nisa.nc_transpose(dst=psum_t, data=q_") < loop  # hoisted out of the loop
    assert "nisa.tensor_reduce(" in src and "axis=1, keepdims=True" in src


def test_kernel_source_and_kdsl_show_agree() -> None:
    x, y = torch.empty(64, 96, device="meta"), torch.empty(96, 80, device="meta")
    want = matmul.source(x, y, backend="nki", target="trn3")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = kdsl(["show", "tests/dsl_kernels.py:matmul", "--shapes", "64x96", "96x80",
                   "--backend", "nki", "--target", "trn3", "--what", "source"])
    assert rc == 0 and out.getvalue().rstrip("\n") == want.rstrip("\n")
    assert "for trn3 (NeuronCore-v4)" in want


def test_docs_listings_are_the_current_rendering() -> None:
    text = open(os.path.join(ROOT, "docs", "nki.md")).read()
    blocks = re.findall(r"<!-- kdsl show (.+?) -->\n```python\n(.*?)\n```", text, re.S)
    assert len(blocks) == 2, "docs/nki.md shows matmul and attention"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for args, listing in blocks:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert kdsl(["show", *args.split()]) == 0
            assert out.getvalue().rstrip("\n") == listing, f"regenerate docs/nki.md for: {args}"
    finally:
        os.chdir(cwd)


# -- the config space --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_config_space_within_hardware_limits(name: str, target: str) -> None:
    k = KERNELS[name]
    ir = k.ir(*_args(name))
    r = roles(ir, target)
    cands = candidates(ir, target)
    for sym in ir.free_syms:
        got = r.get(sym.index, set())
        limit = 128 if "part" in got else 512 if "moving" in got else 2048 if got else 1
        assert max(cands[sym.index]) <= limit, (sym, got, cands[sym.index])
    space = NKI.config_space(ir, target)
    assert len(space) >= 1
    default = NKI.default_config(ir, target)
    largest = max(space, key=lambda c: sum(c.block_sizes))
    for cfg in (default, largest):  # every combination renders and fits SBUF (estimate)
        gen = NKI.render(ir, cfg, target)
        assert gen.meta["sbuf_estimate"] <= TARGETS[target].sbuf_bytes


def test_matmul_default_config_is_the_canonical_tiling() -> None:
    ir = matmul.ir(torch.randn(1024, 1024), torch.randn(1024, 1024))
    assert NKI.default_config(ir, "trn2") == kd.Config([128, 512, 128])
    assert str(NKI.config_space(ir, "trn2")) == (
        "ConfigSpace(48 configs: block_sizes[0] in [16, 32, 64, 128]; block_sizes[1] in "
        "[128, 256, 512]; block_sizes[2] in [16, 32, 64, 128])")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul", "attention", "softmax_two_pass"])
def test_every_config_in_the_space_runs(name: str) -> None:
    """Exhaustive: every config the autotuner may pick gives the right answer."""
    k = KERNELS[name]
    args = {"matmul": (torch.randn(70, 150), torch.randn(150, 300)),
            "attention": (torch.randn(1, 1, 70, 32), torch.randn(1, 1, 150, 32),
                          torch.randn(1, 1, 150, 32), True),
            "softmax_two_pass": (torch.randn(20, 600),)}[name]
    ir = k.ir(*args)
    want = k.run_cpu("pallas", args)[0]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    for cfg in NKI.config_space(ir, "trn2"):
        (got,) = compile_for_torch(NKI.render(ir, cfg, "trn2"), ir, "interp")(*tensors)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=str(cfg))


# -- errors ------------------------------------------------------------------------------------
def test_unknown_knobs_are_rejected_with_a_hint() -> None:
    x, y = _args("matmul")
    for cfg in (kd.Config([64, 128, 128], loop_mode="grid"), kd.Config([64, 128, 128], warps=4)):
        with pytest.raises(ConfigError, match="unknown config knobs") as info:
            matmul.source(x, y, backend="nki", config=cfg)
        assert "block sizes only" in (info.value.hint or "")


def test_targets_are_trainium_generations() -> None:
    with pytest.raises(ArgumentError, match="unknown target 'tpu-v5e' for the nki backend") as info:
        matmul.source(*_args("matmul"), backend="nki", target="tpu-v5e")
    assert "trn1, trn2, trn3" in (info.value.hint or "")


def test_a_block_over_128_on_partitions_names_the_tile() -> None:
    with pytest.raises(ConfigError, match="tile `tm` \\(block 256\\)") as info:
        matmul.source(torch.randn(300, 300), torch.randn(300, 300), backend="nki",
                      config=kd.Config([256, 128, 128]))
    assert "block size <= 128 for `tm`" in (info.value.hint or "")


def test_a_tile_larger_than_sbuf_is_rejected() -> None:
    with pytest.raises(ConfigError, match="more than trn1's SBUF"):
        softmax_rows.source(torch.empty(8, 60000, device="meta"), backend="nki", target="trn1")


def test_leading_dims_larger_than_one_are_rejected_with_a_hint() -> None:
    @kd.tpu_kernel
    def batched(x: torch.Tensor) -> torch.Tensor:
        b, m, n = x.shape
        out = torch.empty_like(x)
        for tb, tm in kd.tile([b, m]):
            out[tb, tm, :] = x[tb, tm, :] * 2.0
        return out

    x = torch.randn(4, 20, 30)
    torch.testing.assert_close(batched.run_cpu("nki", (x,))[0], x * 2)  # default: tb in blocks of 1
    with pytest.raises(BackendError, match="last two dims") as info:
        batched.source(x, backend="nki", config=kd.Config([2, 16]))
    assert "block_size" in (info.value.hint or "")


def test_cos_has_no_lowering() -> None:
    @kd.tpu_kernel
    def cosine(x: torch.Tensor) -> torch.Tensor:
        (n,) = x.shape
        out = torch.empty_like(x)
        for t in kd.tile(n):
            out[t] = torch.cos(x[t])
        return out

    with pytest.raises(UnsupportedOpError, match="torch.cos"):
        cosine.source(torch.randn(10), backend="nki")


def test_missing_mask_shows_up_as_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter fills new tiles with NaN: a lowering that skips `pad_fill` is caught."""
    x = torch.randn(20, 200)
    ir = softmax_two_pass.ir(x)
    cfg = kd.Config([16, 128, 128])
    (good,) = compile_for_torch(NKI.render(ir, cfg, "trn2"), ir, "interp")(x)
    torch.testing.assert_close(good, torch.softmax(x, -1))

    def no_mask(w: Any, op: Any) -> None:
        ro = w.orient[op.result.id]
        w.alias(op.result, op.operands[0], ro, ro)

    monkeypatch.setitem(nki_render.RULES, "pad_fill", no_mask)
    (bad,) = compile_for_torch(NKI.render(ir, cfg, "trn2"), ir, "interp")(x)
    assert torch.isnan(bad).any()


@kd.kernel
def _two_spans(q: torch.Tensor, k: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """k @ q^T @ do in two query loops split at the key block's begin: the first runs no
    iteration at the first key block, and both use the key block transposed."""
    m, d = q.shape
    out = torch.empty([k.shape[0], d], dtype=torch.float32)
    for tk in kd.tile(k.shape[0]):
        kb = k[tk, :]
        acc = kd.zeros([tk, d], dtype=torch.float32)
        split = tk.begin.clamp(max=m)
        for tq in kd.tile(0, split):
            acc = acc + (q[tq, :] @ kb.transpose(-2, -1)).transpose(-2, -1) @ do[tq, :]
        for tq in kd.tile(split, m):
            acc = acc + (q[tq, :] @ kb.transpose(-2, -1)).transpose(-2, -1) @ do[tq, :]
        out[tk, :] = acc
    return out


@pytest.mark.parametrize("backend", ["nki", "pallas", "triton"])
def test_a_conversion_in_a_loop_that_may_not_run_is_written_where_its_value_is(backend: str) -> None:
    """A transpose of an outer value (`kb.transpose(...)` is a view of kb's tile) used in two
    sibling loops is written once next to kb, not inside the first loop, which may run no
    iteration (NKI once read an unbound `k_T` in the second loop then)."""
    q, k, do = torch.randn(37, 16), torch.randn(21, 16), torch.randn(37, 16)
    got = _two_spans.run_cpu(backend, (q, k, do), kd.Config([8, 8, 8]))[0]
    torch.testing.assert_close(got, k @ q.T @ do, rtol=1e-4, atol=1e-4)
    if backend == "nki":
        src = _two_spans.source(q, k, do, backend="nki", config=kd.Config([8, 8, 8]))
        first_loop = src.index("for i_tq in range(")
        transpose = re.search(r"nisa\.nc_transpose\(dst=psum_t, data=(k_\d+)\)", src)
        assert transpose and transpose.start() < first_loop, src
