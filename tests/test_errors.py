"""Every error a user can cause is typed, names their file and line, and carries a hint.

Each bad kernel below marks its offending line with a `# E:<name>` comment; `line_of(name)`
finds that line in this file, so the tests do not depend on hard-coded line numbers.
Kernels are traced lazily at their first call, so defining them here costs nothing.
"""
from __future__ import annotations

import os
import re

import pytest
import torch
from dsl_kernels import add_where, matmul

import kernel_dsl as kd
from kernel_dsl.errors import (
    ArgumentError,
    ConfigError,
    ControlFlowError,
    DTypeError,
    KernelSyntaxError,
    LoopScopeError,
    ShapeError,
    UnsupportedOpError,
)

THIS_FILE = os.path.abspath(__file__)
BASENAME = os.path.basename(THIS_FILE)
_MARKER = re.compile(r"#\s*E:(\w+)\s*$")


def _markers() -> dict[str, int]:
    out: dict[str, int] = {}
    with open(THIS_FILE) as f:
        for lineno, text in enumerate(f, start=1):
            m = _MARKER.search(text)
            if m:
                assert m.group(1) not in out, f"duplicate marker {m.group(1)}"
                out[m.group(1)] = lineno
    return out


MARKERS = _markers()


def line_of(name: str) -> int:
    """Line number of the line in this file that ends with `# E:<name>`."""
    return MARKERS[name]


def check_error(exc: BaseException, exc_type: type[Exception], marker: str) -> None:
    """`exc` is exactly `exc_type`, names this file and the marked line, and has a hint."""
    msg = str(exc)
    assert type(exc) is exc_type, f"expected {exc_type.__name__}, got {type(exc).__name__}: {msg}"
    line = line_of(marker)
    assert f"{BASENAME}:{line}" in msg, f"message does not name {BASENAME}:{line}:\n{msg}"
    assert "hint:" in msg, f"message has no hint:\n{msg}"


def raises(exc_type: type[Exception], marker: str, fn, *args, **kwargs) -> None:  # noqa: ANN001
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    check_error(info.value, exc_type, marker)


def f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float32)


# -- bad kernels ------------------------------------------------------------------------------------

@kd.tpu_kernel
def k_cummax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        out[tm, :] = torch.cummax(x[tm, :], dim=-1).values  # E:cummax
    return out


@kd.tpu_kernel
def k_sort(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm in kd.tile(m):
        v = x[tm, :]
        out[tm, :] = torch.sort(v, dim=-1).values  # E:sort
    return out


@kd.tpu_kernel
def k_if(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        v = x[tm, tn]
        if v > 0:  # E:if
            v = -v
        out[tm, tn] = v
    return out


@kd.tpu_kernel
def k_int(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        v = x[tm, tn]
        k = int(v.sum())  # E:int
        out[tm, tn] = v * k
    return out


@kd.tpu_kernel
def k_float(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        v = x[tm, tn]
        s = float(v.amax())  # E:float
        out[tm, tn] = v / s
    return out


@kd.tpu_kernel
def k_shape_mismatch(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        col = x[tm, 0]  # shape [tm]
        row = x[0, tn]  # shape [tn]
        s = col + row  # E:shape
        out[tm, tn] = s[:, None]
    return out


@kd.tpu_kernel
def k_matmul_dtype(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]  # E:matmul_dtype
        out[tm, tn] = acc
    return out


@kd.tpu_kernel
def k_store_shape(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, :]  # E:store_shape
    return out


@kd.tpu_kernel
def k_store_dtype(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m, n], dtype=torch.bfloat16, device=x.device)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, tn] * 2.0  # not an error: the store casts, as torch's setitem
    return out


@kd.tpu_kernel
def k_loop_scope(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n):
            part = x[tm, tn].sum(dim=-1)  # computed in the loop, never carried
        out[tm] = acc + part  # E:loop_scope
    return out


@kd.tpu_kernel
def k_carried_dtype(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc = (acc + x[tm, tk] @ y[tk, tn]).to(torch.bfloat16)  # E:carried_dtype
        out[tm, tn] = acc.to(out.dtype)
    return out


@kd.tpu_kernel
def k_carried_shape(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tm in kd.tile(m):
        acc = kd.zeros([tm], dtype=torch.float32)
        for tn in kd.tile(n):
            acc = acc[:, None] + x[tm, tn]  # E:carried_shape
        out[tm] = acc.sum(dim=-1)
    return out


@kd.tpu_kernel
def k_host_compute(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    total = x.sum()  # E:host_compute
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, tn] / total
    return out


@kd.tpu_kernel
def k_write_input(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        v = x[tm, tn]
        x[tm, tn] = v * 2.0  # E:write_input
        out[tm, tn] = v
    return out


@kd.tpu_kernel
def k_rank2(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape  # E:rank
    out = torch.empty_like(x)
    for tm, tn in kd.tile([m, n]):
        out[tm, tn] = x[tm, tn] + 1.0
    return out


@kd.tpu_kernel
def k_config(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    _, n = y.shape
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tm, tn in kd.tile([m, n]):  # E:config_grid
        acc = kd.zeros([tm, tn], dtype=torch.float32)
        for tk in kd.tile(k):
            acc += x[tm, tk] @ y[tk, tn]
        out[tm, tn] = acc.to(out.dtype)
    return out


# -- device code outside the subset -----------------------------------------------------------------

def test_unsupported_torch_op_cummax() -> None:
    """torch.cummax on a tile: UnsupportedOpError at the cummax line."""
    raises(UnsupportedOpError, "cummax", k_cummax.ir, f32(16, 32))


def test_unsupported_torch_op_sort() -> None:
    """torch.sort on a tile: UnsupportedOpError at the sort line."""
    raises(UnsupportedOpError, "sort", k_sort.ir, f32(16, 32))


def test_python_if_on_tile_value() -> None:
    """`if v > 0:` on a device value: ControlFlowError at the `if` line."""
    raises(ControlFlowError, "if", k_if.ir, f32(16, 32))


def test_int_of_tile_value() -> None:
    """int() of a tile value: ControlFlowError at that line."""
    raises(ControlFlowError, "int", k_int.ir, f32(16, 32))


def test_float_of_tile_value() -> None:
    """float() of a tile value: ControlFlowError at that line."""
    raises(ControlFlowError, "float", k_float.ir, f32(16, 32))


def test_shape_mismatch_between_tiles() -> None:
    """Adding a [tm] tile to a [tn] tile: ShapeError at the addition."""
    raises(ShapeError, "shape", k_shape_mismatch.ir, f32(16, 32))


def test_matmul_dtype_mismatch() -> None:
    """f32 @ bf16 tiles: DTypeError at the matmul line."""
    x, y = f32(16, 32), f32(32, 8).to(torch.bfloat16)
    raises(DTypeError, "matmul_dtype", k_matmul_dtype.ir, x, y)


def test_store_of_wrong_shape() -> None:
    """Storing a [tm, n] tile into out[tm, tn]: ShapeError at the store."""
    raises(ShapeError, "store_shape", k_store_shape.ir, f32(16, 300))


def test_store_f32_into_bf16_output_casts() -> None:
    """An f32 tile stored into a bf16 output without .to() is cast, as torch's setitem does
    (it used to raise DTypeError; a wrong shape still raises, see test_store_of_wrong_shape)."""
    x = f32(16, 32)
    ops = k_store_dtype.ir(x).body.ops
    assert [(op.kind, op.attrs.get("dtype")) for op in ops[-2:]] == [("cast", "bf16"), ("store", None)]
    torch.testing.assert_close(k_store_dtype(x), (x * 2.0).to(torch.bfloat16), rtol=0, atol=0)


def test_value_from_nested_loop_used_after_it() -> None:
    """A value computed in a nested loop and used after it: LoopScopeError at the use."""
    raises(LoopScopeError, "loop_scope", k_loop_scope.ir, f32(16, 32))


def test_loop_carried_value_changes_dtype() -> None:
    """A carried f32 acc rebound to bf16 in the loop: LoopScopeError at the rebinding line."""
    raises(LoopScopeError, "carried_dtype", k_carried_dtype.ir, f32(16, 32), f32(32, 8))


def test_loop_carried_value_changes_shape() -> None:
    """A carried [tm] acc rebound to a [tm, tn] tile in the loop: LoopScopeError at that line."""
    raises(LoopScopeError, "carried_shape", k_carried_shape.ir, f32(16, 32))


def test_host_code_computes_on_data() -> None:
    """`x.sum()` in host code: KernelSyntaxError at that line."""
    raises(KernelSyntaxError, "host_compute", k_host_compute.ir, f32(16, 32))


def test_write_into_input_argument() -> None:
    """Assigning into a kernel argument: ArgumentError at the assignment."""
    raises(ArgumentError, "write_input", k_write_input.ir, f32(16, 32))


# -- call-time errors -------------------------------------------------------------------------------

def test_wrong_argument_count() -> None:
    """Calling a 2-argument kernel with one tensor: ArgumentError at the call."""
    x = f32(13, 37)
    with pytest.raises(Exception) as info:
        add_where(x)  # E:argcount
    check_error(info.value, ArgumentError, "argcount")


def test_float64_input() -> None:
    """A float64 input: DTypeError at the call, before any backend work."""
    x, y = f32(13, 37).double(), f32(13, 37).double()
    with pytest.raises(Exception) as info:
        add_where(x, y)  # E:float64
    check_error(info.value, DTypeError, "float64")


def test_wrong_rank_names_kernel_line() -> None:
    """A 3-D input to host code doing `m, n = x.shape`: ArgumentError naming that kernel line."""
    with pytest.raises(Exception) as info:
        k_rank2(f32(2, 3, 4))
    check_error(info.value, ArgumentError, "rank")


@pytest.mark.parametrize("position", [0, 1])
def test_non_tensor_argument(position: int) -> None:
    """A float where a tensor parameter is expected: ArgumentError at the call."""
    args = [f32(13, 37), f32(13, 37)]
    args[position] = 3.0
    with pytest.raises(Exception) as info:
        add_where(*args)  # E:non_tensor
    check_error(info.value, ArgumentError, "non_tensor")


@pytest.mark.parametrize("meta_position", [0, 1])
def test_tensors_on_different_devices(meta_position: int) -> None:
    """A cpu tensor and a meta tensor, in either order: ArgumentError at the call, no result."""
    args = [f32(13, 37), f32(13, 37)]
    args[meta_position] = torch.empty(13, 37, device="meta")
    with pytest.raises(Exception) as info:
        add_where(*args)  # E:devices
    check_error(info.value, ArgumentError, "devices")


def test_keyword_argument_unknown() -> None:
    """An unknown keyword argument: ArgumentError at the call."""
    x = f32(13, 37)
    with pytest.raises(Exception) as info:
        add_where(x, z=x)  # E:bad_kwarg
    check_error(info.value, ArgumentError, "bad_kwarg")


def test_trace_error_through_eager_call() -> None:
    """A device-code error hit through an ordinary eager call keeps its type and kernel line."""
    with pytest.raises(Exception) as info:
        k_cummax(f32(16, 32))
    check_error(info.value, UnsupportedOpError, "cummax")


def test_config_with_wrong_number_of_block_sizes() -> None:
    """A Config with 1 block size for a kernel with 3 free ones: ConfigError at the kd.tile line."""
    x, y = f32(16, 32), f32(32, 8)
    with pytest.raises(Exception) as info:
        k_config.source(x, y, config=kd.Config([64], loop_mode="grid"))
    check_error(info.value, ConfigError, "config_grid")


def test_config_with_unknown_loop_mode() -> None:
    """loop_mode="bogus": ConfigError at the kd.tile line, naming the bad value."""
    x, y = f32(16, 32), f32(32, 8)
    with pytest.raises(Exception) as info:
        k_config.source(x, y, config=kd.Config([8, 128, 128], loop_mode="bogus"))
    check_error(info.value, ConfigError, "config_grid")
    assert "bogus" in str(info.value)


def test_library_kernel_still_works_after_errors() -> None:
    """Errors in other kernels leave the tracer state clean: a good kernel still runs."""
    with pytest.raises(Exception):
        k_if.ir(f32(16, 32))
    x, y = f32(13, 37), f32(37, 5)
    torch.testing.assert_close(matmul(x, y), x @ y, atol=1e-4, rtol=1e-4)
