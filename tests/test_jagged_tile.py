"""`kd.jagged_tile` (Helion's `hl.jagged_tile`) and N-D integer gather indices
(`kd.load(x_flat, [flat_indices])` with a rank-2 or rank-3 index).

The five Helion jagged examples (examples/jagged_{sum,mean,layer_norm,dense_bmm,dense_add}.py at
the commit named in docs/helion_ports.md) are ported by the literal rename `hl.` -> `kd.`,
`@helion.kernel()` -> `@kd.kernel`, and checked against torch references written here. They
gather through rank-2/3 index tiles: Triton runs them, Pallas as a one-hot select along the lane
axis of the flat tensor, a row of the index tile at a time (lowering/pallas/onehot.py), NKI as
an indirect DMA per column (lowering/nki/gather.py). Jagged loops indexed by tiles (Helion's
`jagged_row_sum` docstring example) run on every backend. NKI walks a loop bounded by a value
read from memory over its static reach with run-time masks (lowering/nki/static_reach.py).
"""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import BackendError, ConfigError, KernelSyntaxError, ShapeError

# (row lengths, feature dim M): an empty batch row, size 1, primes, longer than a block
CASES = [([0, 2, 0], 7), ([1], 1), ([3, 0, 1, 7, 2, 5, 0, 13, 1], 11), ([2, 2, 0, 37, 1], 33)]
IDS = ["empty_rows", "one", "primes", "long"]


def _offsets(lengths: list[int]) -> torch.Tensor:
    lens = torch.tensor(lengths, dtype=torch.int64)
    return torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])


# -- Helion's examples, renamed ---------------------------------------------------------------
@kd.kernel
def jagged_sum_kernel(x_data: torch.Tensor, x_offsets: torch.Tensor) -> torch.Tensor:
    M = x_data.shape[1]
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, M], dtype=x_data.dtype, device=x_data.device)
    x_flat = x_data.view(-1)
    for tile_b in kd.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        nnz = ends - starts
        for tile_m in kd.tile(M):
            row_sums = kd.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in kd.jagged_tile(nnz):
                base_indices = starts[:, None] + tile_k.index[None, :]
                flat_indices = base_indices[:, :, None] * M + tile_m.index[None, None, :]
                x_slice = kd.load(x_flat, [flat_indices])
                row_sums = row_sums + x_slice.sum(dim=1)
            out[tile_b, tile_m] = row_sums
    return out


@kd.kernel
def jagged_mean_kernel(x_data: torch.Tensor, x_offsets: torch.Tensor,
                       x_feature_counts: torch.Tensor, max_M: int) -> torch.Tensor:
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, max_M], dtype=x_data.dtype, device=x_data.device)
    x_flat = x_data.view(-1)
    for tile_b in kd.tile(num_rows):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        nnz = ends - starts
        feature_counts = x_feature_counts[tile_b]
        for tile_m in kd.jagged_tile(feature_counts):
            row_sums = kd.zeros([tile_b, tile_m], dtype=x_data.dtype)
            for tile_k in kd.jagged_tile(nnz):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * max_M
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = kd.load(x_flat, [flat_indices])
                row_sums = row_sums + x_slice.sum(dim=1)
            nnz_float = nnz.to(x_data.dtype)
            nnz_expanded = nnz_float[:, None]
            result = torch.where(nnz_expanded > 0, row_sums / nnz_expanded, 0.0)
            out[tile_b, tile_m] = result
    return out


@kd.kernel
def jagged_layer_norm_kernel(x_values: torch.Tensor, x_offsets: torch.Tensor,
                             eps: float = 1e-6) -> torch.Tensor:
    total_L, M = x_values.shape
    B = x_offsets.size(0) - 1
    out = torch.empty_like(x_values)
    x_flat = x_values.view(-1)
    out_flat = out.view(-1)
    for tile_b in kd.tile(B):
        starts = x_offsets[tile_b]
        ends = x_offsets[tile_b.index + 1]
        seq_lengths = ends - starts
        mean_acc = kd.zeros([tile_b], dtype=x_values.dtype)
        var_acc = kd.zeros([tile_b], dtype=x_values.dtype)
        for tile_m in kd.tile(M):
            row_sums = kd.zeros([tile_b, tile_m], dtype=x_values.dtype)
            for tile_k in kd.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * M
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = kd.load(x_flat, [flat_indices])
                row_sums = row_sums + x_slice.sum(dim=1)
            mean_acc = mean_acc + row_sums.sum(dim=1)
        seq_lengths_float = seq_lengths.to(x_values.dtype)
        mean_acc = mean_acc / (seq_lengths_float * M)
        for tile_m in kd.tile(M):
            var_sums = kd.zeros([tile_b, tile_m], dtype=x_values.dtype)
            for tile_k in kd.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * M
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = kd.load(x_flat, [flat_indices])
                centered = x_slice.to(torch.float32) - mean_acc[:, None, None]
                var_sums = var_sums + (centered * centered).sum(dim=1)
            var_acc = var_acc + var_sums.sum(dim=1)
        variance = var_acc / (seq_lengths_float * M)
        rstd = torch.rsqrt(variance + eps)
        for tile_m in kd.tile(M):
            for tile_k in kd.jagged_tile(seq_lengths):
                flat_indices = (starts[:, None] + tile_k.index[None, :])[:, :, None] * M
                flat_indices = flat_indices + tile_m.index[None, None, :]
                x_slice = kd.load(x_flat, [flat_indices])
                normalized = (x_slice.to(torch.float32) - mean_acc[:, None, None]) * rstd[:, None, None]
                kd.store(out_flat, [flat_indices], normalized.to(x_values.dtype))
    return out.reshape(total_L, M)


@kd.kernel
def jagged_dense_bmm(seq_offsets: torch.Tensor, jagged: torch.Tensor, dense: torch.Tensor,
                     bias: torch.Tensor | None) -> torch.Tensor:
    L, D = jagged.shape
    B, D, K = dense.shape
    dtype = torch.promote_types(jagged.dtype, dense.dtype)
    device = jagged.device
    jagged = jagged.view(-1)
    output = torch.empty((L, K), dtype=dtype, device=device).view(-1)
    for tile_b in kd.tile(B):
        starts = seq_offsets[tile_b]
        ends = seq_offsets[tile_b.index + 1]
        seq_len = ends - starts
        for tile_len in kd.jagged_tile(seq_len):
            jagged_indices = starts[:, None] + tile_len.index[None, :]
            for tile_k in kd.tile(0, K):
                acc = kd.zeros([tile_b, tile_len, tile_k], dtype=dtype, device=device)
                for tile_d in kd.tile(0, D):
                    jagged_data = kd.load(
                        jagged, [jagged_indices[:, :, None] * D + tile_d.index[None, None, :]])
                    dense_data = dense[tile_b, tile_d, tile_k]
                    acc = acc + torch.matmul(jagged_data, dense_data)
                if bias is not None:
                    bias_data = bias[tile_b, tile_k]
                    acc = acc + bias_data.unsqueeze(1)
                kd.store(output, [jagged_indices[:, :, None] * K + tile_k.index[None, None, :]], acc)
    return output.reshape(L, K)


@kd.kernel
def jagged_dense_add_2d(x_data: torch.Tensor, x_offsets: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    num_rows = y.size(0)
    assert x_offsets.size(0) == num_rows + 1
    out = torch.zeros_like(y)
    for tile0 in kd.tile(num_rows):
        starts = x_offsets[tile0]
        ends = x_offsets[tile0.index + 1]
        nnz = ends - starts
        max_nnz = nnz.amax()
        for tile1 in kd.tile(0, max_nnz):
            x_slice = kd.load(x_data, [starts[:, None] + tile1.index[None, :]],
                              extra_mask=tile1.index[None, :] < nnz[:, None])
            out[tile0, tile1] = y[tile0, tile1] + x_slice
        for tile1 in kd.tile(max_nnz, out.size(1)):
            out[tile0, tile1] = y[tile0, tile1]
    return out


# -- torch references ------------------------------------------------------------------------
def _rows(off: torch.Tensor):
    return [(int(off[i]), int(off[i + 1])) for i in range(len(off) - 1)]


def ref_sum(x: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[s:e].float().sum(0) for s, e in _rows(off)]).to(x.dtype)


def ref_mean(x: torch.Tensor, off: torch.Tensor, counts: torch.Tensor, max_m: int) -> torch.Tensor:
    out = torch.zeros(len(off) - 1, max_m, dtype=x.dtype)
    for i, (s, e) in enumerate(_rows(off)):
        c = int(counts[i])
        if e > s:
            out[i, :c] = x[s:e, :c].mean(0)
    return out


def ref_layer_norm(x: torch.Tensor, off: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    out = torch.empty_like(x)
    for s, e in _rows(off):
        if e > s:
            out[s:e] = torch.nn.functional.layer_norm(x[s:e], list(x[s:e].shape), eps=eps)
    return out


def ref_bmm(off: torch.Tensor, jagged: torch.Tensor, dense: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.empty(jagged.shape[0], dense.shape[2], dtype=jagged.dtype)
    for i, (s, e) in enumerate(_rows(off)):
        out[s:e] = jagged[s:e] @ dense[i] + bias[i]
    return out


def ref_dense_add(x: torch.Tensor, off: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = y.clone()
    for i, (s, e) in enumerate(_rows(off)):
        out[i, :e - s] += x[s:e]
    return out


def _inputs(example: str, lengths: list[int], m: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(sum(lengths) * 31 + m)
    off = _offsets(lengths)
    L, B = int(off[-1]), len(lengths)
    x = torch.randn(L, m, generator=g).to(dtype)
    if example == "sum":
        return jagged_sum_kernel, ref_sum, (x, off)
    if example == "mean":
        counts = torch.randint(0, m + 1, (B,), generator=g)
        return jagged_mean_kernel, ref_mean, (x, off, counts, m)
    if example == "layer_norm":
        return jagged_layer_norm_kernel, ref_layer_norm, (x, off, 1e-6)
    if example == "dense_bmm":
        dense = torch.rand(B, m, 5, generator=g) * 2 - 1
        bias = torch.rand(B, 5, generator=g) * 2 - 1
        return jagged_dense_bmm, ref_bmm, (off, x, dense.to(dtype), bias.to(dtype))
    y = torch.randn(B, max(lengths) + 4, generator=g).to(dtype)
    return jagged_dense_add_2d, ref_dense_add, (x[:, 0].contiguous(), off, y)


EXAMPLES = ["sum", "mean", "layer_norm", "dense_bmm", "dense_add"]


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("backend", ["triton", "pallas", "nki"])
def test_helion_jagged_examples_match_torch(backend: str, example: str, case) -> None:
    kernel, ref, args = _inputs(example, *case)
    with kd.backend(backend):
        _check(kernel(*args), ref(*args))


def _spread(cfgs: list, n: int) -> list:
    """`n` configs spread over the space (the space is the product of every loop's blocks: up
    to thousands), each with distinct block sizes (num_warps / num_stages do not change what
    the interpreter computes), the first (default) and the last included."""
    uniq = list({tuple(c.block_sizes): c for c in cfgs}.values())
    step = max(1, (len(uniq) - 1) // (n - 1))
    return (uniq[::step][:n - 1] + [uniq[-1]]) if len(uniq) > 1 else uniq


@pytest.mark.parametrize("example", ["sum", "mean", "layer_norm", "dense_bmm"])
def test_triton_block_configs(example: str) -> None:
    """Jagged blocks shorter and longer than the rows, several M blocks."""
    kernel, ref, args = _inputs(example, [3, 0, 1, 7, 2, 5, 0, 13, 1], 11)
    want = ref(*args)
    cfgs = _spread(list(kernel.configs(*args, backend="triton")), 5)
    assert len(cfgs) >= 2
    for cfg in cfgs:
        _check(kernel.run_cpu("triton", args, cfg)[0], want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backend", ["triton", "nki"])
def test_jagged_sum_in_half_precision(backend: str, dtype: torch.dtype) -> None:
    kernel, ref, args = _inputs("sum", [3, 0, 1, 7, 2, 5, 0, 13, 1], 11, dtype)
    with kd.backend(backend):
        got = kernel(*args)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), ref(*args).float(), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("example", EXAMPLES)
def test_pallas_block_configs(example: str) -> None:
    """A spread of the configs the autotuner may pick (every one: the slow test below)."""
    kernel, ref, args = _inputs(example, [3, 0, 1, 7, 2, 5, 0, 13, 1], 11)
    want = ref(*args)
    cfgs = _spread(list(kernel.configs(*args, backend="pallas")), 3)
    assert len(cfgs) >= (1 if example == "dense_add" else 2)  # dense_add: one 17-lane block
    for cfg in cfgs:
        _check(kernel.run_cpu("pallas", args, cfg)[0], want)


@pytest.mark.slow  # every pallas config of the five examples: a few minutes
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_pallas_config_of_the_examples(example: str) -> None:
    """Every config (8, 16, 16 and 1 of them), but 24 spread over layer_norm's 8192 (three
    loop nests of blocks: about 1 s each in interpret mode)."""
    kernel, ref, args = _inputs(example, [2, 2, 0, 37, 1], 33)
    want = ref(*args)
    cfgs = list(kernel.configs(*args, backend="pallas"))
    if len(cfgs) > 100:
        cfgs = _spread(cfgs, 24)
    ran = 0
    for cfg in cfgs:
        # blocks up to 4096 (space.py) can make the one-hot over 4 MiB: a ConfigError at render,
        # which the autotuner records as a failed candidate and never picks (tuner.objective)
        try:
            got = kernel.run_cpu("pallas", args, cfg)[0]
        except ConfigError as e:
            assert "one-hot select over the resident row" in str(e), str(e)
            continue
        _check(got, want)
        ran += 1
    assert ran >= max(1, len(cfgs) // 2), (ran, len(cfgs))


def test_pallas_jagged_gathers_are_exact() -> None:
    """The one-hot select picks bits: NaN, inf and -0.0 come through, and a NaN of one row
    does not spread (as 0 * NaN would in a one-hot matmul)."""
    kernel = jagged_dense_add_2d
    off = _offsets([3, 0, 1, 7])
    x, y = torch.randn(11), torch.zeros(4, 9)
    x[0], x[2], x[5] = float("nan"), float("-inf"), -0.0
    with kd.backend("pallas"):
        got = kernel(x, off, y)
    want = ref_dense_add(x, off, y)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    src = kernel.source(x, off, y, backend="pallas")
    assert "a rank-2 index tile: one [" in src and "TPU has no lane gather" in src


@pytest.mark.parametrize("target", ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7x"])
def test_dense_add_needs_an_aligned_lane_offset_on_tpu(target: str) -> None:
    """jagged_dense_add's gather compiles, but its second loop, `kd.tile(max_nnz, n)`, starts at
    a lane offset known only at run time: every generation's Mosaic rejects that ("E2003:
    cannot statically prove that index in dimension 1 is a multiple of 128", libtpu 0.0.52), so
    rendering for a TPU target is a BackendError naming the line (interpret mode runs it)."""
    _, _, args = _inputs("dense_add", [3, 0, 1, 7], 5)
    with pytest.raises(BackendError, match=f"{target} cannot index the lane axis of `y` at the "
                       "start of `kd.tile"):
        jagged_dense_add_2d.source(*args, target=target)


def test_a_table_too_big_for_vmem_is_a_config_error() -> None:
    """The flat table stays whole in VMEM: a quarter of the target's VMEM (32 MiB in interpret
    mode), a ConfigError naming the line past it."""
    x = torch.randn(400_000, 5)
    off = torch.tensor([0, 5, 400_000])
    with pytest.raises(ConfigError, match=r"keeps `x_flat` whole in VMEM to gather along its lane "
                       r"axis .* 7.6 MiB is over the 4 MiB this rendering allows \(a quarter of "
                       r"the target's 16 MiB\)") as e:
        jagged_sum_kernel.source(x, off, target="tpu-v4")
    assert "x_slice = kd.load(x_flat, [flat_indices])" in str(e.value)
    assert "def jagged_sum_kernel" in jagged_sum_kernel.source(x, off, target="tpu-v5e")


@pytest.mark.parametrize("example", EXAMPLES)
def test_tables_longer_than_a_window(example: str) -> None:
    """A flat table over 1024 elements is gathered from window by window of the span of each
    index row (onehot.py WINDOW)."""
    lengths = [0, 1, 300, 3, 150, 2, 1, 0, 129] if example != "dense_add" else [0, 1, 1100, 3, 1500]
    kernel, ref, args = _inputs(example, lengths, 5 if example != "dense_add" else 1)
    if example in ("sum", "dense_add"):  # comes through as inf, not NaN
        args[0].view(-1)[7] = float("inf")
    src = kernel.source(*args, backend="pallas")
    assert "pl.multiple_of(w0_" in src
    with kd.backend("pallas"):
        _check(kernel(*args), ref(*args))


@pytest.mark.parametrize("example", EXAMPLES)
def test_nki_block_configs(example: str) -> None:
    """A spread of the NKI configs (jagged blocks shorter and longer than the rows; every one:
    the slow test below). The jagged loop walks its static reach (the flat table's length for
    the rank-N gathers) with run-time masks, and says so in the generated code."""
    kernel, ref, args = _inputs(example, [3, 0, 1, 7, 2, 5, 0, 13, 1], 11)
    want = ref(*args)
    cfgs = _spread(list(kernel.configs(*args, backend="nki")), 2 if example == "layer_norm" else 3)
    assert len(cfgs) >= (1 if example == "dense_add" else 2)
    for cfg in cfgs:
        _check(kernel.run_cpu("nki", args, cfg)[0], want)
    src = kernel.source(*args, backend="nki")
    assert "read from memory: a static loop over its reach" in src
    assert "NKI's nl.fori_loop is not generated" in src
    if example == "sum":  # the flat index (starts + k) * 11 + m reaches the 32 packed rows
        assert "the `end` of tile_k read from memory: a static loop over its reach [0, 32)" in src


@pytest.mark.slow  # every NKI config of the five examples (24 spread over layer_norm's 64): ~2 min
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_nki_config_of_the_examples(example: str) -> None:
    kernel, ref, args = _inputs(example, [2, 2, 0, 37, 1], 33)
    want = ref(*args)
    cfgs = list(kernel.configs(*args, backend="nki"))
    if len(cfgs) > 24:
        cfgs = _spread(cfgs, 24)
    for cfg in cfgs:
        _check(kernel.run_cpu("nki", args, cfg)[0], want)


@pytest.mark.parametrize("example", ["sum", "mean", "dense_bmm", "dense_add"])
def test_nki_in_bf16(example: str) -> None:
    """The ports that take bf16 (jagged_layer_norm's port carries an f32 sum in a bf16 zeros:
    a LoopScopeError on every backend)."""
    kernel, ref, args = _inputs(example, [3, 0, 1, 7, 2, 5, 0, 13, 1], 11, torch.bfloat16)
    with kd.backend("nki"):
        got = kernel(*args)
    assert got.dtype == torch.bfloat16
    wide = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    torch.testing.assert_close(got.float(), ref(*wide).float(), rtol=2e-2, atol=5e-2)


@kd.kernel
def jagged_sum_per_row(x_data: torch.Tensor, x_offsets: torch.Tensor) -> torch.Tensor:
    """jagged_sum as the Pallas error's hint says: one row per grid step, a 1-D row gather."""
    M = x_data.shape[1]
    num_rows = x_offsets.size(0) - 1
    out = torch.zeros([num_rows, M], dtype=x_data.dtype, device=x_data.device)
    for b in kd.grid(num_rows):
        start = x_offsets[b]
        end = x_offsets[b + 1]
        for tm in kd.tile(M):
            acc = kd.zeros([tm], dtype=x_data.dtype)
            for tk in kd.tile(end - start):
                acc = acc + x_data[start + tk.index, tm].sum(0)
            out[b, tm] = acc
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("backend", ["triton", "pallas"])
def test_the_pallas_hint_for_jagged_sum(backend: str, case) -> None:
    x, off = _inputs("sum", *case)[2]
    with kd.backend(backend):
        _check(jagged_sum_per_row(x, off.to(torch.int32)), ref_sum(x, off))


# -- jagged loops indexed by tiles: every backend but NKI ------------------------------------
@kd.kernel
def jagged_row_sum(x: torch.Tensor, row_lengths: torch.Tensor) -> torch.Tensor:
    """Helion's `hl.jagged_tile` docstring example: the mask is implicit."""
    b = row_lengths.size(0)
    out = torch.zeros([b], dtype=x.dtype, device=x.device)
    for tile_b in kd.tile(b):
        lengths = row_lengths[tile_b]
        acc = kd.zeros([tile_b], dtype=x.dtype)
        for tile_k in kd.jagged_tile(lengths):
            acc = acc + x[tile_b, tile_k].sum(dim=1)
        out[tile_b] = acc
    return out


@kd.kernel
def jagged_row_sum_masked(x: torch.Tensor, row_lengths: torch.Tensor) -> torch.Tensor:
    """The same "before jagged_tile": a dense loop to the max and a hand-made mask."""
    b = row_lengths.size(0)
    out = torch.zeros([b], dtype=x.dtype, device=x.device)
    for tile_b in kd.tile(b):
        lengths = row_lengths[tile_b]
        max_len = lengths.amax()
        acc = kd.zeros([tile_b], dtype=x.dtype)
        for tile_k in kd.tile(max_len):
            mask = tile_k.index[None, :] < lengths[:, None]
            vals = kd.load(x, [tile_b, tile_k], extra_mask=mask)
            acc = acc + vals.sum(dim=1)
        out[tile_b] = acc
    return out


@kd.kernel
def jagged_row_shift(x: torch.Tensor, row_lengths: torch.Tensor) -> torch.Tensor:
    """x minus its row's max over the first `len` elements; the rest keep the output's -7:
    a max over the jagged dim sees only the row's lanes (all x < 0 here: a 0 read past the
    end would win), and a store past the end writes nothing."""
    b, n = x.shape
    out = torch.full_like(x, -7.0)
    for tile_b in kd.tile(b):
        lengths = row_lengths[tile_b]
        mx = kd.full([tile_b], float("-inf"), dtype=x.dtype)
        for tile_k in kd.jagged_tile(lengths):
            mx = torch.maximum(mx, x[tile_b, tile_k].amax(dim=1))
        for tile_k in kd.jagged_tile(lengths):
            out[tile_b, tile_k] = x[tile_b, tile_k] - mx[:, None]
    return out


def ref_row_sum(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[i, :int(k)].sum() for i, k in enumerate(lengths)])


def ref_row_shift(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.full_like(x, -7.0)
    for i, k in enumerate(lengths.tolist()):
        if k:
            out[i, :k] = x[i, :k] - x[i, :k].max()
    return out


def _dense(lengths: list[int], n: int):
    g = torch.Generator().manual_seed(len(lengths) * 7 + n)
    return -1 - torch.rand(len(lengths), n, generator=g), torch.tensor(lengths, dtype=torch.int32)


DENSE = [([0, 4, 0], 5), ([1], 1), ([3, 0, 1, 7, 2, 5, 0, 13, 1], 13), ([0] * 3 + [130, 1, 129], 131)]
TILE_FORM = [(jagged_row_sum, ref_row_sum), (jagged_row_sum_masked, ref_row_sum),
             (jagged_row_shift, ref_row_shift)]


@pytest.mark.parametrize("case", DENSE, ids=IDS)
@pytest.mark.parametrize("kernel,ref", TILE_FORM, ids=["row_sum", "row_sum_masked", "row_shift"])
@pytest.mark.parametrize("backend", ["triton", "pallas", "nki"])
def test_tile_indexed_jagged_loops(backend: str, kernel, ref, case) -> None:
    x, lengths = _dense(*case)
    with kd.backend(backend):
        torch.testing.assert_close(kernel(x, lengths), ref(x, lengths), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel,ref", TILE_FORM[::2], ids=["row_sum", "row_shift"])
def test_every_pallas_config(kernel, ref) -> None:
    x, lengths = _dense([0] * 3 + [130, 1, 129, 2, 3, 0, 17], 131)
    want = ref(x, lengths)
    cfgs = list(kernel.configs(x, lengths, backend="pallas"))
    assert len(cfgs) >= 2
    for cfg in cfgs:
        torch.testing.assert_close(kernel.run_cpu("pallas", (x, lengths), cfg)[0], want,
                                   rtol=1e-5, atol=1e-5)


@kd.kernel
def jagged_2d_parent_sum(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A rank-2 parent: one length per (batch, head)."""
    b, h, n = x.shape
    out = torch.zeros([b, h], dtype=x.dtype, device=x.device)
    for tb, th in kd.tile([b, h]):
        ln = lengths[tb, th]
        acc = kd.zeros([tb, th], dtype=x.dtype)
        for tk in kd.jagged_tile(ln):
            acc = acc + x[tb, th, tk].sum(dim=2)
        out[tb, th] = acc
    return out


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 3, 17), (3, 9, 130)], ids=str)
@pytest.mark.parametrize("backend", ["triton", "pallas", "nki"])
def test_a_rank_2_parent(backend: str, shape: tuple[int, int, int]) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g)
    lengths = torch.randint(0, shape[2] + 1, shape[:2], generator=g, dtype=torch.int32)
    want = torch.stack([torch.stack([x[i, j, :int(lengths[i, j])].sum() for j in range(shape[1])])
                        for i in range(shape[0])])
    with kd.backend(backend):
        torch.testing.assert_close(jagged_2d_parent_sum(x, lengths), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel,ref", TILE_FORM[::2], ids=["row_sum", "row_shift"])
def test_nki_configs_of_the_tile_form(kernel, ref) -> None:
    x, lengths = _dense([0] * 3 + [130, 1, 129, 2, 3, 0, 17], 131)
    want = ref(x, lengths)
    cfgs = _spread(list(kernel.configs(x, lengths, backend="nki")), 4)
    assert len(cfgs) >= 2
    for cfg in cfgs:
        torch.testing.assert_close(kernel.run_cpu("nki", (x, lengths), cfg)[0], want,
                                   rtol=1e-5, atol=1e-5)


@kd.kernel
def jagged_stride_sum(x: torch.Tensor) -> torch.Tensor:
    """Row i sums its first (7 i + 3) % (n + 1) elements: lengths computed on the device."""
    b, n = x.shape
    out = torch.zeros([b], dtype=torch.float32, device=x.device)
    for tb in kd.tile(b):
        lengths = (tb.index * 7 + 3) % (n + 1)
        acc = kd.zeros([tb], dtype=torch.float32)
        for tk in kd.jagged_tile(lengths):
            acc = acc + x[tb, tk].float().sum(dim=1)
        out[tb] = acc
    return out


def _stride_sum_ref(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[1]
    return torch.stack([x[i, :(7 * i + 3) % (n + 1)].float().sum() for i in range(x.shape[0])])


def test_fuzz_jagged_stride_sum() -> None:
    from kernel_dsl.testing import fuzz

    fuzz(jagged_stride_sum, _stride_sum_ref, "x[b,n]", dtypes=[torch.float32, torch.bfloat16],
         dims={"b": (1, 40), "n": (1, 300)}, configs=3, backends=["triton", "pallas", "nki"],
         max_examples=6, seed=0)


# -- errors ----------------------------------------------------------------------------------
def test_jagged_tile_is_not_the_grid() -> None:
    @kd.kernel
    def outer(x: torch.Tensor, n: torch.Tensor):
        out = torch.empty_like(x)
        for t in kd.jagged_tile(n):
            out[t] = x[t]
        return out

    with pytest.raises(KernelSyntaxError, match="runs inside a `kd.tile` loop"):
        outer(torch.randn(4), torch.ones(4, dtype=torch.int32))


def test_jagged_tile_takes_an_integer_tile() -> None:
    @kd.kernel
    def floats(x: torch.Tensor):
        out = torch.zeros([x.shape[0]], dtype=x.dtype, device=x.device)
        for tb in kd.tile(x.shape[0]):
            for tk in kd.jagged_tile(x[tb, 0]):
                out[tb] = x[tb, tk].sum(1)
        return out

    with pytest.raises(KernelSyntaxError, match="takes an integer tile of rank >= 1, got a "
                                                "rank-1 f32 value"):
        floats(torch.randn(4, 3))


def test_a_jagged_block_needs_its_parents_dims() -> None:
    @kd.kernel
    def no_parent(x: torch.Tensor, n: torch.Tensor):
        out = torch.zeros([n.shape[0]], dtype=x.dtype, device=x.device)
        for tb in kd.tile(n.shape[0]):
            acc = kd.zeros([tb], dtype=x.dtype)
            for tk in kd.jagged_tile(n[tb]):
                acc = acc + x[tk].sum()
            out[tb] = acc
        return out

    with pytest.raises(ShapeError, match="has the jagged tile .* not its parent's dims") as e:
        no_parent(torch.randn(8), torch.ones(4, dtype=torch.int32))
    assert "x[tile_b, tile_k]" in e.value.hint


# tpu-v4's Mosaic has no sublane gather: a lane reduction stored into a 1-D output (the row
# sums here) fails there with "Sublane gather not supported by this TPU generation", as the
# plain non-jagged row sum `out[tb] = x[tb, tk].sum(1)` does (not the jagged loop's doing)
V4_ROW_SUM = "Sublane gather not supported by this TPU generation"


@pytest.mark.slow  # about 8 minutes
def test_helion_jagged_examples_compile_for_every_tpu_generation() -> None:
    """The one-hot forms (rank-2 and rank-3 index tiles, gathers and scatters) on the real
    Mosaic compiler of the five TPU targets."""
    # a table of one window (99 x 11 elements) and of several (586 x 33: windowed gathers and
    # scatters); dense_add: test_dense_add_needs_an_aligned_lane_offset_on_tpu
    for lengths, m in (([3, 0, 1, 7, 2, 5, 0, 13, 1], 11), ([0, 1, 300, 3, 150, 2, 1, 0, 129], 33)):
        for example in EXAMPLES[:-1]:
            kernel, _, args = _inputs(example, lengths, m)
            r = kernel.check(*args, measure_vmem=False)
            assert [e.target for e in r.entries] == ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
                                                     "tpu-v7x"]
            assert all(e.ok for e in r.entries), (example, r.table())


@pytest.mark.slow
def test_tile_indexed_jagged_loops_compile_for_every_tpu_generation() -> None:
    """The real Mosaic compiler on the five TPU targets (the kernels Pallas accepts): a jagged
    tile of one block on the lane axis (its start a static 0, provably aligned) and of several."""
    runs = [(k, (torch.empty(9, n), torch.ones(9, dtype=torch.int32))) for k, _ in TILE_FORM
            for n in (13, 300)]
    runs.append((jagged_2d_parent_sum, (torch.empty(3, 9, 130), torch.ones(3, 9, dtype=torch.int32))))
    for kernel, args in runs:
        r = kernel.check(*args, measure_vmem=False)
        assert len(r.entries) == 5
        for e in r.entries:
            if e.target == "tpu-v4" and kernel is not jagged_row_shift:
                assert not e.ok and V4_ROW_SUM in e.message, r.table()
            else:
                assert e.ok, r.table()
