"""Non-tensor kernel arguments (kernel_dsl/arguments.py): None for an optional tensor, str mode
flags and enum members are compile-time constants keyed by value, so a Python `if` on them is
decided while tracing; a callable is a constant keyed by its code and closure values, called on
tiles and traced inline. All of it through the custom op (schema, fake, opcheck) and torch.compile."""
from __future__ import annotations

import enum
from typing import Callable

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import ArgumentError

BACKENDS = ("pallas", "triton", "nki")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# -- None: Helion's examples/layer_norm.py (`bias: torch.Tensor | None = None`) ------------------
@kd.kernel
def layer_norm_fwd(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor,
                   bias: torch.Tensor | None = None, eps: float = 1e-5):
    m, n = x.size()
    assert weight.size(0) == n, f"weight size mismatch {weight.size(0)} != {n}"
    if bias is not None:
        assert bias.size(0) == n, f"bias size mismatch {bias.size(0)} != {n}"
    assert len(normalized_shape) == 1
    assert normalized_shape[0] == n
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    mean = torch.empty([m], dtype=torch.float32, device=x.device)
    rstd = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in kd.tile(m):
        acc = x[tile_m, :].to(torch.float32)
        mean_val = torch.sum(acc, dim=-1) / n
        centered = acc - mean_val[:, None]
        var_val = torch.sum(centered * centered, dim=-1) / n
        rstd_val = torch.rsqrt(var_val + eps)
        normalized = centered * rstd_val[:, None]
        if bias is not None:
            acc = normalized * (weight[:].to(torch.float32)) + (bias[:].to(torch.float32))
        else:
            acc = normalized * (weight[:].to(torch.float32))
        out[tile_m, :] = acc.to(x.dtype)
        mean[tile_m] = mean_val
        rstd[tile_m] = rstd_val
    return out, mean, rstd


def _ln_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x.double(), [x.shape[1]], w.double(),
                                          None if b is None else b.double()).to(x.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_optional_bias_none_and_tensor(backend: str) -> None:
    x, w, b = torch.randn(37, 24), torch.randn(24), torch.randn(24)
    with kd.backend(backend):
        for bias in (None, b):
            out, mean, rstd = layer_norm_fwd(x, [24], w, bias)
            torch.testing.assert_close(out, _ln_ref(x, w, bias), atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(mean, x.mean(-1))
        # the default of None, as Helion's callers leave it out
        torch.testing.assert_close(layer_norm_fwd(x, [24], w)[0], _ln_ref(x, w, None),
                                   atol=1e-4, rtol=1e-4)


def test_none_and_tensor_are_two_builds_with_different_inputs() -> None:
    x, w, b = torch.randn(5, 8), torch.randn(8), torch.randn(8)
    assert [p.name for p in layer_norm_fwd.ir(x, [8], w, None).inputs if "bias" in p.name] == []
    assert any("bias" in p.name for p in layer_norm_fwd.ir(x, [8], w, b).inputs)
    assert layer_norm_fwd._ops.schema.count("Tensor? bias") == 1


# -- str and enum: mode flags ---------------------------------------------------------------------
class Act(enum.Enum):
    RELU = 1
    NEG = "neg"


@kd.kernel
def activate(x: torch.Tensor, activation: str = "gelu", act: Act = Act.RELU):
    out = torch.empty_like(x)
    for t in kd.tile(x.shape):
        v = x[t]
        if activation == "gelu":
            v = torch.sigmoid(v * 1.702) * v
        elif activation == "square":
            v = v * v
        if act is Act.RELU:
            v = torch.relu(v)
        else:
            v = -v
        out[t] = v
    return out


def _act_ref(x: torch.Tensor, activation: str, act: Act) -> torch.Tensor:
    v = torch.sigmoid(x * 1.702) * x if activation == "gelu" else x * x if activation == "square" else x
    return torch.relu(v) if act is Act.RELU else -v


@pytest.mark.parametrize("backend", BACKENDS)
def test_str_and_enum_pick_the_code(backend: str) -> None:
    x = torch.randn(13, 7)
    with kd.backend(backend):
        for mode in ("gelu", "square", "none"):
            for act in Act:
                torch.testing.assert_close(activate(x, mode, act), _act_ref(x, mode, act))
        torch.testing.assert_close(activate(x), _act_ref(x, "gelu", Act.RELU))


def test_str_and_enum_are_keyed_by_value() -> None:
    @kd.kernel
    def k(x: torch.Tensor, mode: str, act: Act):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = x[t] * 2 if mode == "double" and act is Act.NEG else x[t]
        return out
    x = torch.randn(4, 4)
    k(x, "double", Act.NEG)
    k(x, "".join(["dou", "ble"]), Act("neg"))  # an equal str (another object), the same member
    assert k.stats["traces"] == 1
    torch.testing.assert_close(k(x, "x", Act.NEG), x)
    assert k.stats["traces"] == 2


def test_opcheck_and_schema_for_str_enum_none() -> None:
    assert activate._ops.schema == "(Tensor x, str activation, str act) -> Tensor[]"
    x = torch.randn(8, 8)
    torch.library.opcheck(activate._ops.op, (x, "square", "NEG"))  # the enum by its name
    w, b = torch.randn(8), torch.randn(8)
    torch.library.opcheck(layer_norm_fwd._ops.op, (x, [8], w, None, 1e-5))
    torch.library.opcheck(layer_norm_fwd._ops.op, (x, [8], w, b, 1e-5))


def test_torch_compile_fullgraph_str_enum_none() -> None:
    x, w, b = torch.randn(9, 8), torch.randn(8), torch.randn(8)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return activate(layer_norm_fwd(x, [8], w, b)[0], "square", Act.NEG)

    for bias in (b, None):
        torch.testing.assert_close(f(x, w, bias), _act_ref(_ln_ref(x, w, bias), "square", Act.NEG),
                                   atol=1e-4, rtol=1e-4)


# -- callables: Helion's examples/template_via_closure.py -----------------------------------------
@kd.kernel
def matmul_with_epilogue(x: torch.Tensor, y: torch.Tensor,
                         epilogue: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor]):
    m, k = x.size()
    k2, n = y.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    out = torch.empty([m, n], dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile_m, tile_n in kd.tile([m, n]):
        acc = kd.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in kd.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, [tile_m, tile_n])
    return out


def _relu_plus_one(acc: torch.Tensor, tile: list[torch.Tensor]) -> torch.Tensor:
    return torch.relu(acc + 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_template_via_closure(backend: str) -> None:
    x, y = torch.randn(33, 20), torch.randn(20, 17)
    with kd.backend(backend):
        torch.testing.assert_close(matmul_with_epilogue(x, y, _relu_plus_one), torch.relu(x @ y + 1),
                                   atol=1e-4, rtol=1e-4)
        scale = 0.5  # a closure scalar, read at trace time: keyed with the function
        torch.testing.assert_close(matmul_with_epilogue(x, y, lambda acc, tile: acc * scale),
                                   x @ y * 0.5, atol=1e-4, rtol=1e-4)


def test_callables_are_keyed_by_code_and_closure_values() -> None:
    @kd.kernel
    def apply(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]):
        out = torch.empty_like(x)
        for t in kd.tile(x.shape):
            out[t] = fn(x[t])
        return out
    x = torch.randn(6, 5)
    for _ in range(3):
        torch.testing.assert_close(apply(x, torch.exp), x.exp())
    assert apply.stats["traces"] == 1
    for i in range(3):  # a new closure value each time: one build each
        torch.testing.assert_close(apply(x, lambda v: v + i), x + i)
    assert apply.stats["traces"] == 4


def test_a_tensor_captured_by_the_callable_is_lifted_to_an_input() -> None:
    # as Helion does (tests/test_captured_tensors.py has the rest)
    x, y, bias = torch.randn(8, 20), torch.randn(20, 17), torch.randn(1, 17)
    out = matmul_with_epilogue(x, y, lambda acc, tile: torch.relu(acc + bias[0, tile[1]]))
    torch.testing.assert_close(out, torch.relu(x @ y + bias), atol=1e-4, rtol=1e-4)


# -- an attention-style score_mod -----------------------------------------------------------------
@kd.kernel
def scores(q: torch.Tensor, k: torch.Tensor, score_mod: Callable[..., torch.Tensor]):
    m, d = q.shape
    n, _ = k.shape
    out = torch.empty([m, n], dtype=torch.float32)
    for tq, tk in kd.tile([m, n]):
        s = kd.dot(q[tq, :], k[tk, :].T)
        s = score_mod(s, tq.index, tk.index)
        out[tq, tk] = s
    return out


def _causal(s: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
    # a finite mask value: NKI's lowering writes -inf as -FLT_MAX (not this file's concern)
    return torch.where(qi[:, None] >= ki[None, :], s, -1e9)


def _alibi(s: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
    return s - 0.25 * (qi[:, None] - ki[None, :]).abs().float()


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_mod(backend: str) -> None:
    q, k = torch.randn(37, 16), torch.randn(29, 16)
    s = q @ k.T
    qi, ki = torch.arange(37), torch.arange(29)
    with kd.backend(backend):
        torch.testing.assert_close(scores(q, k, _causal), _causal(s, qi, ki), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(scores(q, k, _alibi), _alibi(s, qi, ki), atol=1e-4, rtol=1e-4)


def test_callable_through_the_op_and_torch_compile() -> None:
    q, k = torch.randn(9, 8), torch.randn(7, 8)
    want = _alibi(q @ k.T, torch.arange(9), torch.arange(7))
    assert scores._ops.schema == "(Tensor q, Tensor k, int score_mod) -> Tensor[]"
    q.requires_grad_(True)  # not the plain CPU call: the custom op route
    torch.testing.assert_close(scores(q, k, _alibi), want, atol=1e-4, rtol=1e-4)
    q.requires_grad_(False)
    from kernel_dsl import arguments
    torch.library.opcheck(scores._ops.op, (q, k, arguments.encode("callable", _alibi)))

    @torch.compile(backend="aot_eager")  # the call is a graph break (torch_ops.py `route`)
    def f(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return scores(q, k, _alibi) * 2
    torch.testing.assert_close(f(q, k), want * 2, atol=1e-4, rtol=1e-4)


# -- what stays unsupported -----------------------------------------------------------------------
def test_bad_arguments_are_typed_errors_at_the_call() -> None:
    x = torch.randn(4, 4)
    with pytest.raises(ArgumentError, match="dict argument is not supported") as e:
        activate({"a": x})
    assert "test_nontensor_args.py" in str(e.value)
    with pytest.raises(ArgumentError, match="must be a str"):
        activate(x, 3, Act.RELU)
    with pytest.raises(ArgumentError, match="enum.Enum member"):
        activate(x, "gelu", 1)
    with pytest.raises(ArgumentError, match="torch.Tensor or None"):
        layer_norm_fwd(x, [4], x[0], 2.0)
    with pytest.raises(ArgumentError, match="a callable"):
        scores(x, x, 3)
    with pytest.raises(ArgumentError, match="torch.Tensor \\| None"):
        scores(x, None, _alibi)


def test_annotation_forms() -> None:
    import inspect
    import typing

    from kernel_dsl import arguments

    def kind(ann: object, default: object = inspect.Parameter.empty) -> str:
        p = inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ann, default=default)
        return arguments.arg_kind(p, globals())

    empty = inspect.Parameter.empty
    for ann in (typing.Optional[torch.Tensor], torch.Tensor | None, "Optional[torch.Tensor]",
                "torch.Tensor | None", "Tensor | None", "typing.Optional[Tensor]"):
        assert kind(ann) == "Tensor?", ann
    assert kind(empty, None) == "Tensor?"
    assert kind(str) == kind("str") == kind(empty, "gelu") == "str"
    assert kind(Act) == kind("Act") == kind(empty, Act.NEG) == "enum"
    for ann in (Callable, typing.Callable[[int], int], "Callable[[Tensor, list[Tensor]], Tensor]",
                "collections.abc.Callable"):
        assert kind(ann) == "callable", ann
    assert kind(empty, _alibi) == "callable"
    assert kind("torch.Tensor") == kind(empty) == "Tensor"


@pytest.mark.slow
def test_real_tpu_compiler_accepts_them() -> None:
    x, w = torch.randn(64, 128), torch.randn(128)
    for kernel, args in ((layer_norm_fwd, (x, [128], w, None, 1e-5)), (activate, (x, "gelu", Act.NEG)),
                         (scores, (torch.randn(128, 64), torch.randn(256, 64), _alibi))):
        report = kernel.check(*args, targets=["tpu-v5e"])
        assert [e.status for e in report.entries] == ["ok"], report
