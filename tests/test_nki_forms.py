"""The audit of the generated NKI's forms (issue 18; docs/nki.md "Generated NKI in AWS's forms").

Every `nisa.*` / `nl.*` call the NKI backend writes for a broad corpus of the project's kernels,
with its argument names, must be in lowering/nki/forms.py's FORMS, and every other `nl.*` name in
its NAMES, each entry naming the AWS kernel (aws-neuron/nki-library or aws-neuron/nki-samples) or
the SDK reference that uses or documents it. Tensor operands must be tensors where AWS passes
tensors, and no infinite literal may reach a mask, pad or comparison operand (AWS masks with the
finite -3.4028235e38). Then what the finite masks mean, checked against torch, and a writer fix.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl import lowering
from kernel_dsl.lowering.nki import forms
from kernel_dsl.lowering.nki.runner import compile_for_torch

E = torch.empty
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
NKI = lowering.get("nki")


def _dsl_cases() -> Iterator[tuple[str, Any, tuple[Any, ...], str]]:
    import dsl_kernels as dk
    import fuzz_kernels as fk
    import test_casting_stores as tc
    import test_elementwise_ops as te
    import test_integer_ops as ti
    import test_torch_semantics as ts

    q = (E(2, 4, 200, 64, dtype=BF16), E(2, 4, 300, 64, dtype=BF16), E(2, 4, 300, 64, dtype=BF16))
    q_long = (E(1, 2, 300, 32), E(1, 2, 200, 32), E(1, 2, 200, 32))  # rows that see no key
    for tgt in ("trn1", "trn2", "trn3"):
        yield "add_where", dk.add_where, (E(37, 300), E(37, 300)), tgt
        yield "matmul", dk.matmul, (E(256, 384, dtype=BF16), E(384, 640, dtype=BF16)), tgt
        yield "attention", dk.attention, (*q, True), tgt
    yield "matmul_ragged", dk.matmul, (E(131, 17), E(17, 700)), "trn2"
    yield "matmul_long_k", dk.matmul, (E(64, 4096), E(4096, 128)), "trn2"
    yield "softmax_rows", dk.softmax_rows, (E(37, 200),), "trn2"
    yield "softmax_two_pass", dk.softmax_two_pass, (E(37, 1000, dtype=BF16),), "trn2"
    yield "layer_norm", dk.layer_norm, (E(37, 300), E(300), E(300)), "trn2"
    yield "attention_noncausal", dk.attention, (*q_long, False), "trn2"
    yield "attention_no_key", dk.attention, (*q_long, True), "trn2"
    for name in ("attention_causal_off_by_one", "attention_missing_rescale", "attention_f32_scores"):
        yield name, getattr(fk, name), (*q_long, True), "trn2"
    yield "softmax_max_over_block", fk.softmax_max_over_block, (E(37, 300),), "trn2"
    yield "matmul_dropped_edge_tile", fk.matmul_dropped_edge_tile, (E(37, 61), E(61, 130)), "trn2"
    yield "matmul_bf16_acc", fk.matmul_bf16_acc, (E(37, 61, dtype=BF16), E(61, 130, dtype=BF16)), "trn2"
    yield "layer_norm_missing_reset", fk.layer_norm_missing_reset, (E(37, 300), E(300), E(300)), "trn2"
    for name, k in te.KERNELS.items():
        for dt in (F32, BF16, F16):
            yield f"{name}_{dt}", k, (E(37, 5, dtype=dt),), "trn2"
    for dt in (torch.int32, torch.int16, torch.int8, torch.uint8):
        yield f"arith_{dt}", ti.arith, (E(37, 5, dtype=dt), E(37, 5, dtype=dt)), "trn2"
        yield f"shifts_{dt}", ti.shifts, (E(37, 5, dtype=dt), E(37, 5, dtype=dt)), "trn2"
    yield "promoted", ti.promoted, (E(37, 5, dtype=torch.int8), E(37, 5, dtype=torch.int16),
                                    E(37, 5, dtype=torch.bool)), "trn2"
    yield "unpack_int4", ti.unpack_int4, (E(37, 5, dtype=torch.uint8),), "trn2"
    yield "div_by_zero", ti.div_by_zero, (E(37, 5, dtype=torch.int32), E(37, 5, dtype=torch.int32)), "trn2"
    for dt in (torch.int8, BF16, torch.int32):
        yield f"store_as_{dt}", tc.store_as, (E(37, 130), E(1, dtype=dt)), "trn2"
    yield "mul_promoted", tc.mul_promoted, (E(37, 130, dtype=BF16), E(37, 130, dtype=F16)), "trn2"
    yield "scale_by_half", tc.scale_by_half, (E(37, 130, dtype=torch.int32),), "trn2"
    yield from _newer_cases()
    for dt in (F32, BF16):
        yield f"col_max_min_{dt}", ts.col_max_min, (E(37, 130, dtype=dt),), "trn2"
        yield f"row_max_min_{dt}", ts.row_max_min, (E(37, 300, dtype=dt),), "trn2"
        yield f"elementwise_max_min_{dt}", ts.elementwise_max_min, (E(37, 130, dtype=dt),
                                                                    E(37, 130, dtype=dt)), "trn2"


def _newer_cases() -> Iterator[tuple[str, Any, tuple[Any, ...], str]]:
    """Kernels of newer test files (softmax / logsumexp, argmax / cumsum on tiles), if present."""
    try:
        import test_composite_ops as tco
    except ImportError:
        tco = None
    composite = {**getattr(tco, "KERNELS", {}), **{f"ragged_{n}": k for n, k in
                                                   getattr(tco, "RAGGED", {}).items()}}
    for name, k in composite.items():
        yield f"composite_{name}", k, (E(37, 300, dtype=BF16),), "trn2"
    try:
        import test_segment_atomics as tsa
    except ImportError:
        tsa = None
    if tsa is not None:  # atomics through index tiles: a read-modify-write per lane
        ids = E(70, dtype=torch.int32)
        yield "seg_rows", tsa.seg_rows, (E(70, 130), ids, 3), "trn2"
        yield "seg_add_bf16", tsa.seg_add, (E(70, 9, dtype=BF16), ids, 3), "trn2"
        yield "hist_max", tsa.hist_max, (E(70), ids, 3), "trn2"
        yield "segment_reduction", tsa.segmented_reduction_helion, (E(50, dtype=torch.int64),
                                                                    E(50, 9), 13), "trn2"
    try:
        import test_positional_ops as tp
    except ImportError:
        return
    for name, shape in (("row_args", (37, 130)), ("tiled_argmax", (19, 300)), ("scans", (21, 37)),
                        ("scan_1d", (45,))):
        if hasattr(tp, name):
            yield name, getattr(tp, name), (E(*shape),), "trn2"


@kd.tpu_kernel
def odd_forms(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Forms the corpus above may not reach: exp2 (activation scale), `2.0 - x` and `3.0 < x`
    (scalar first), a tile.index predicate with tile branches (iota), infinities as values and
    as masks."""
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape, block_size=[16, 128]):
        a, b = x[tm, tn], y[tm, tn]
        keep = torch.where(tm.index[:, None] > tn.index[None, :], a, b)  # a Pred, tile branches
        low = torch.where(tn.index[None, :] < 200, keep, float("-inf"))  # a user's -inf mask
        big = torch.where(3.0 < a, float("inf"), b)  # +inf as a value: a memset tile
        out[tm, tn] = torch.exp2(2.0 - low).clamp_max(float("inf")) + big
    return out


@kd.kernel
def gather_scatter(ids: torch.Tensor, weight: torch.Tensor, perm: torch.Tensor):
    """An embedding gather with int16 ids (cast to an int32 column) and a scatter through a
    permutation: indirect DMAs (lowering/nki/gather.py)."""
    n, dim = ids.shape[0], weight.shape[1]
    out = torch.empty([n, dim], dtype=weight.dtype)
    moved = torch.zeros([n, dim], dtype=weight.dtype)
    for tb, td in kd.tile([n, dim]):
        rows = weight[ids[tb], td]
        out[tb, td] = rows
        moved[perm[tb], td] = rows * 2
    return out, moved


def _library_sources(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What the library kernels render under `kd.backend("nki")`, forward and backward (shapes no
    other test uses, so no cached rendering hides a call)."""
    import kernel_dsl.lowering.nki as nki_pkg
    from kernel_dsl import kernels as lib

    seen: list[tuple[str, str]] = []
    real = nki_pkg._render

    def spy(ir: Any, config: Any, target: str) -> Any:
        gen = real(ir, config, target)
        seen.append((f"library {ir.name}", gen.source))
        return gen

    monkeypatch.setattr(nki_pkg, "_render", spy)
    r = torch.randn
    with kd.backend("nki"):
        for causal in (True, "bottom_right"):
            q, k, v = (r(1, 2, n, 16, requires_grad=True) for n in (23, 19, 19))
            out, lse = lib.flash_attention(q, k, v, causal=causal, return_lse=True)
            (out.sum() + lse[lse.isfinite()].sum()).backward()
        x = r(11, 29, requires_grad=True)
        lib.softmax(x, -1).sum().backward()
        w, bias = r(29, requires_grad=True), r(29, requires_grad=True)
        lib.rms_norm(x, w, 1e-5).sum().backward()
        lib.layer_norm(x, w, bias).sum().backward()
        y = r(29, 13, requires_grad=True)
        lib.matmul(x, y, bias=r(13, requires_grad=True), activation="gelu").sum().backward()
    return seen


def _dynamic_loop_sources() -> list[tuple[str, str]]:
    """Helion's jagged ports and grouped GEMM: loops bounded by values read from memory, walked
    over their static reach with run-time masks (lowering/nki/static_reach.py)."""
    import test_grouped_loops as tg
    import test_jagged_tile as tj

    out = []
    for ex in tj.EXAMPLES:
        k, _, args = tj._inputs(ex, [3, 0, 1, 7], 5)
        out.append((f"jagged_{ex}", k.source(*args, backend="nki")))
    offs = tg._offsets([5, 0, 9])
    out.append(("grouped_gemm", tg.grouped_gemm_jagged.source(E(14, 33, dtype=BF16), E(33, 17, dtype=BF16),
                                                              offs, backend="nki")))
    return out


@pytest.fixture(scope="module")
def corpus() -> Iterator[list[tuple[str, str]]]:
    out = [(name, k.source(*args, backend="nki", target=tgt)) for name, k, args, tgt in _dsl_cases()]
    out.append(("odd_forms", odd_forms.source(E(37, 300), E(37, 300), backend="nki")))
    ids = E(150, dtype=torch.int16)
    out.append(("gather_scatter", gather_scatter.source(ids, E(40, 33), E(150, dtype=torch.int32),
                                                       backend="nki")))
    out += _dynamic_loop_sources()
    with pytest.MonkeyPatch.context() as mp:
        lib = _library_sources(mp)
    rendered = {name.split()[1] for name, _ in lib}  # a cached rendering would hide its calls
    assert {"flash_attention_fwd", "flash_attention_bwd_dq", "softmax_fwd", "softmax_bwd",
            "rms_norm_fwd", "layer_norm_bwd_dx", "matmul_kernel"} <= rendered, rendered
    yield out + lib


def test_every_generated_form_is_an_aws_form(corpus: list[tuple[str, str]]) -> None:
    bad = {name: v for name, src in corpus if (v := forms.violations(src))}
    assert not bad, "\n".join(f"{name}: {line}" for name, v in bad.items() for line in v)


def test_every_allowlisted_form_is_still_generated(corpus: list[tuple[str, str]]) -> None:
    """The allowlist stays the list of what the writer emits: a form it no longer writes goes."""
    used = {(c.name, c.args) for _, src in corpus for c in forms.calls(src)}
    assert set(forms.FORMS) <= used, sorted(set(forms.FORMS) - used)


# -- what the finite masks mean --------------------------------------------------------------------
def test_masks_and_pads_are_finite_and_the_users_inf_guard_sees_them() -> None:
    import dsl_kernels as dk

    src = dk.attention.source(E(1, 2, 300, 32), E(1, 2, 200, 32), E(1, 2, 200, 32), True,
                              backend="nki")
    selects = [ln for ln in src.splitlines() if "nisa.affine_select" in ln]
    assert selects and all("inf" not in ln.split("#")[0] for ln in selects)
    assert sum("on_false_value=-3.4028235e38" in ln for ln in selects) == 2  # causal mask, key pad
    # `m_new == -inf` clamps first, so the finite mask counts as -inf
    assert "op0=nl.maximum, operand0=-3.4028235e38, op1=nl.equal, operand1=-3.4028235e38" in src
    assert 'nisa.memset(dst=m_i, value=float("-inf"))' in src  # the user's own value, kept


@pytest.mark.parametrize("sq, skv, cfg", [(300, 200, None), (300, 200, kd.Config([64, 32])),
                                          (5, 3, None), (130, 130, kd.Config([32, 48]))])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_rows_that_see_no_key_are_zero_as_in_torch(sq: int, skv: int, cfg: Any,
                                                   dtype: torch.dtype) -> None:
    """Causal attention with sq > skv: the first sq - skv rows see no key in any block, so their
    scores are all the finite mask. exp(mask - 0) is 0 only because the guard turns their max
    into 0; exp(mask - mask) would be 1."""
    import dsl_kernels as dk
    import fuzz_kernels as fk
    from test_nki_kernels import run

    q, k, v = (torch.randn(1, 2, n, 32).to(dtype) for n in (sq, skv, skv))
    got = run(dk.attention, (q, k, v, True), cfg)
    want = fk.ref_attention(q.float(), k.float(), v.float(), True).to(dtype)
    tol = 1e-5 if dtype == F32 else 2e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert (got[:, :, :max(sq - skv, 0)] == 0).all()


@kd.tpu_kernel
def masked_exp_sum(x: torch.Tensor, limit: int) -> torch.Tensor:
    """A bf16 mask, cast to f32, then the usual guard: the mask must still count as -inf."""
    m, n = x.shape
    out = torch.empty([m, 1], dtype=torch.float32)
    for tm, tn in kd.tile([m, n], block_size=[None, n]):  # one block per row
        s = torch.where(tn.index[None, :] < limit, x[tm, tn], float("-inf")).float()
        mx = s.amax(-1, keepdim=True)
        safe = torch.where(mx == float("-inf"), 0.0, mx)
        out[tm, :] = torch.exp(s - safe).sum(-1, keepdim=True)
    return out


@pytest.mark.parametrize("limit", [0, 5])
def test_a_narrow_mask_still_counts_as_minus_inf_after_a_cast(limit: int) -> None:
    from test_nki_kernels import run

    x = torch.randn(37, 64).to(BF16)
    s = torch.where(torch.arange(64)[None, :] < limit, x, -math.inf).float()
    mx = s.amax(-1, keepdim=True)
    want = torch.exp(s - torch.where(mx == -math.inf, 0.0, mx)).sum(-1, keepdim=True)
    torch.testing.assert_close(run(masked_exp_sum, (x, limit)), want)


def test_softmax_of_minus_inf_rows_matches_torch() -> None:
    import dsl_kernels as dk
    from test_nki_kernels import run

    x = torch.randn(37, 300)
    x[3] = float("-inf")
    x[5, 7:] = float("-inf")  # one real lane in a row, the rest -inf data and finite pad
    for kern in (dk.softmax_rows, dk.softmax_two_pass):
        got, want = run(kern, (x,)), torch.softmax(x, -1)
        assert torch.equal(got.isnan(), want.isnan())
        torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), atol=1e-6, rtol=1e-6)


@kd.tpu_kernel
def compares_with_inf(x: torch.Tensor):
    outs = [torch.empty(x.shape, dtype=torch.bool) for _ in range(8)]
    for tm, tn in kd.tile(x.shape):
        a = x[tm, tn]
        got = [a == float("-inf"), a != float("-inf"), a < float("inf"), a >= float("-inf"),
               float("inf") == a, float("-inf") < a, a > float("inf"), torch.isinf(a)]
        for o, g in zip(outs, got):
            o[tm, tn] = g
    return tuple(outs)


@pytest.mark.parametrize("dtype", [F32, BF16, F16])
def test_comparisons_with_inf_match_torch(dtype: torch.dtype) -> None:
    """Exact, NaN included, for every value but float32's finite extreme, which compares as
    infinite (it is the stand-in that masks and pads hold)."""
    x = torch.tensor([[0.0, 1.5, -2.0, math.inf, -math.inf],
                      [math.nan, 1e30, -1e30, 7.0, -0.0]] * 2).to(dtype)
    ir = compares_with_inf.ir(x)
    gen = NKI.render(ir, NKI.default_config(ir, "trn2"), "trn2")
    assert not forms.violations(gen.source)
    want = [x == -math.inf, x != -math.inf, x < math.inf, x >= -math.inf, x == math.inf,
            x > -math.inf, x > math.inf, x.isinf()]
    for i, (got, w) in enumerate(zip(compile_for_torch(gen, ir)(x), want)):
        assert torch.equal(got, w), (i, got, w)


def test_predicated_copies_take_a_tile_of_the_value() -> None:
    from test_nki_kernels import run

    x = torch.randn(37, 300)
    x[0, :3] = float("nan")
    src = odd_forms.source(x, x, backend="nki")
    copies = [c for c in forms.calls(src) if c.name == "nisa.tensor_copy_predicated"]
    assert copies and all(c.kind("src") == "tensor" for c in copies)
    assert 'value=float("inf")' in src  # where(a > 3, inf, b): the user's inf, as a memset tile
    y = torch.randn(37, 300)
    m, n = torch.arange(37)[:, None], torch.arange(300)[None, :]
    low = torch.where(n < 200, torch.where(m > n, x, y), float("-inf"))
    want = torch.exp2(2.0 - low).clamp_max(math.inf) + torch.where(x > 3.0, math.inf, y)
    torch.testing.assert_close(run(odd_forms, (x, y)), want, equal_nan=True)


# -- a writer fix ------------------------------------------------------------------------------------
@kd.tpu_kernel
def scalar_where_broadcast(x: torch.Tensor) -> torch.Tensor:
    """A where of a scalar condition and scalar branches, broadcast over the block and stored."""
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape, block_size=[16, 128]):
        out[tm, tn] = torch.where(tm.begin > 10, 2.0, 3.0).expand(tm, tn)
    return out


@kd.tpu_kernel
def row_sum_broadcast(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in kd.tile(x.shape, block_size=[16, 128]):
        out[tm, tn] = x[tm, tn].sum(-1, keepdim=True).expand(tm, tn)
    return out


@pytest.mark.parametrize("shape", [(37, 300), (32, 256), (1, 1)])
def test_a_broadcast_stored_on_a_ragged_edge_is_sliced_like_its_tile(shape: tuple[int, int]) -> None:
    """The broadcast's tile carries the result's dims, so its store slices the ragged edges
    (37 = 2 * 16 + 5 rows, 300 = 2 * 128 + 44 columns) like the HBM side; it used to copy the
    whole (16, 128) tile into the edge's (5, 128) / (16, 44) and fail."""
    from test_nki_kernels import run

    x = torch.randn(shape)
    rows = torch.arange(shape[0])[:, None] // 16 * 16
    torch.testing.assert_close(run(scalar_where_broadcast, (x,)),
                               torch.where(rows > 10, 2.0, 3.0).expand(shape))
    want = torch.cat([x[:, i:i + 128].sum(-1, keepdim=True).expand(-1, min(128, shape[1] - i))
                      for i in range(0, shape[1], 128)], dim=1)
    torch.testing.assert_close(run(row_sum_broadcast, (x,)), want, atol=1e-5, rtol=1e-5)


def test_every_name_the_writer_can_emit_is_an_aws_name() -> None:
    """Operators, activations, dtypes and buffers from the lowering's tables, also those the
    corpus does not reach."""
    from kernel_dsl.lowering.nki import lower_elementwise as le
    from kernel_dsl.lowering.nki import lower_reduce as lr
    from kernel_dsl.lowering.nki import names as nm

    tables = (le.ALU, le.INT_ALU, le.ACTIVATION, lr.REDUCE, nm.NL_DTYPE, nm.HBM_DTYPE)
    emitted = {v for t in tables for v in t.values()}
    assert emitted - set(forms.NAMES) == set()
