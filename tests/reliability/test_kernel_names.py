"""Kernels whose Python name is not an ASCII identifier (`my-kernel`, `<lambda>`, `2x_kernel`,
`ядро`) decorate, render and run on every CPU backend; `kernel.name` stays the user's name."""
from __future__ import annotations

import keyword

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.names import identifier

NAMES = ["my-kernel", "<lambda>", "2x_kernel", "ядро", "class", ""]


def _kernel(name: str, backend: str) -> kd.Kernel:
    def body(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for t in kd.tile(x.shape[0]):
            out[t] = x[t] * 2
        return out

    body.__name__ = body.__qualname__ = name
    return kd.tpu_kernel(body, backend=backend)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("backend", ["pallas", "triton", "nki"])
def test_runs_on_cpu(name: str, backend: str) -> None:
    k = _kernel(name, backend)
    x = torch.randn(16)
    torch.testing.assert_close(k(x), x * 2)
    assert k.name == name
    assert f"def {identifier(name)}(" in k.source(x)


def test_identifier_is_ascii_deterministic_and_keeps_plain_names() -> None:
    for name in NAMES:
        ident = identifier(name)
        assert ident.isascii() and ident.isidentifier() and not keyword.iskeyword(ident), ident
        assert identifier(name) == ident
    assert identifier("matmul") == "matmul"
    assert identifier("ядро") != identifier("граф")  # non-ASCII names stay apart


def test_cyrillic_kernel_defined_in_source() -> None:
    namespace: dict[str, object] = {"kd": kd, "torch": torch}
    exec(compile("@kd.tpu_kernel\ndef ядро(x: torch.Tensor) -> torch.Tensor:\n"
                 "    out = torch.empty_like(x)\n    for t in kd.tile(x.shape[0]):\n"
                 "        out[t] = x[t] + 1\n    return out\n", "<user>", "exec"), namespace)
    k = namespace["ядро"]
    x = torch.randn(8)
    torch.testing.assert_close(k(x), x + 1)  # type: ignore[operator]


def _doubled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] * 2
    return out


def test_lambdas() -> None:
    """A lambda cannot hold the `for` loop itself, but it can call a function that does; one
    without a loop gets the usual error at the user's line."""
    x = torch.randn(8)
    torch.testing.assert_close(kd.tpu_kernel(lambda x: _doubled(x))(x), x * 2)
    with pytest.raises(kd.KernelSyntaxError, match="kd.tile") as info:
        kd.tpu_kernel(lambda x: x)(x)
    assert "test_kernel_names.py:" in str(info.value) and "hint:" in str(info.value)


def test_torch_compile_with_a_hyphenated_name() -> None:
    k = _kernel("my-kernel", "pallas")
    x = torch.randn(16)
    torch.testing.assert_close(torch.compile(lambda a: k(a) + 1, backend="eager")(x), x * 2 + 1)
