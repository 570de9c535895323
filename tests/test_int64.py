"""int64 tensors at the kernel boundary (kernel_dsl/wide_ints.py): torch's default integer dtype
goes in narrowed to int32 (exactly, or a clear error) and comes out widened where the host code
allocated int64, so token ids, labels and argmax outputs port without `.int()` everywhere."""
from __future__ import annotations

import pytest
import torch

import kernel_dsl as kd
from kernel_dsl.errors import DTypeError

BACKENDS = ("pallas", "triton", "nki")


@kd.kernel
def embedding(ids: torch.Tensor, weight: torch.Tensor):
    n = ids.shape[0]
    out = torch.empty([n, weight.shape[1]], dtype=weight.dtype)
    for tb, td in kd.tile([n, weight.shape[1]]):
        out[tb, td] = weight[ids[tb], td]
    return out


@kd.kernel
def shifted(x: torch.Tensor, y: torch.Tensor):
    out = torch.empty_like(x)  # int64, as in torch
    for t in kd.tile(x.shape[0]):
        out[t] = x[t] * 3 - y[t]
    return out


@kd.kernel
def row_argmax(x: torch.Tensor):
    m = x.shape[0]
    idx = torch.empty([m], dtype=torch.long)
    for tm in kd.tile(m):
        idx[tm] = x[tm, :].argmax(dim=1)
    return idx


@kd.kernel
def picked_logit(logits: torch.Tensor, labels: torch.Tensor):
    """The target-logit pick of a cross entropy, with torch.long labels, written without a gather
    (a one-hot compare, as NKI needs); `.to(torch.int64)` in device code is int32."""
    n, v = logits.shape
    out = torch.empty([n], dtype=torch.float32)
    for tn in kd.tile(n):
        lab = labels[tn].to(torch.int64)
        acc = kd.zeros([tn], dtype=torch.float32)
        for tv in kd.tile(v):
            hit = tv.index[None, :] == lab[:, None]
            acc = acc + torch.where(hit, logits[tn, tv].float(), 0.0).sum(dim=1)
        out[tn] = acc
    return out


@kd.kernel
def flat_ids(ids: torch.Tensor, weight: torch.Tensor):
    flat = ids.view(-1)  # a host view of an int64 argument: narrowed like the argument
    n = flat.shape[0]
    out = torch.empty([n, weight.shape[1]], dtype=weight.dtype)
    for tb, td in kd.tile([n, weight.shape[1]]):
        out[tb, td] = weight[flat[tb], td]
    return out


@pytest.mark.parametrize("n", [1, 13, 37])
@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_takes_int64_token_ids(backend: str, n: int) -> None:
    ids = torch.randint(0, 11, (n,))
    assert ids.dtype == torch.int64
    w = torch.randn(11, 5)
    with kd.backend(backend):
        out = embedding(ids, w)
    torch.testing.assert_close(out, w[ids], rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 7, 29])
@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_in_and_out_keep_torch_dtypes_and_values(backend: str, n: int) -> None:
    x = torch.randint(-2**29, 2**29, (n,))
    y = torch.randint(-1000, 1000, (n,))
    with kd.backend(backend):
        out = shifted(x, y)
    assert out.dtype == torch.int64
    assert torch.equal(out, x * 3 - y)


@pytest.mark.parametrize("shape", [(1, 1), (9, 13), (5, 130)], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_argmax_into_a_long_output(backend: str, shape: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    with kd.backend(backend):
        idx = row_argmax(x)
    assert idx.dtype == torch.long and torch.equal(idx, x.argmax(dim=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_labels_and_device_int64_casts(backend: str) -> None:
    logits, labels = torch.randn(7, 19), torch.randint(0, 19, (7,))
    with kd.backend(backend):
        out = picked_logit(logits, labels)
    torch.testing.assert_close(out, logits.gather(1, labels[:, None])[:, 0])


def test_a_host_view_of_an_int64_argument_is_narrowed_too() -> None:
    ids, w = torch.randint(0, 6, (3, 4)), torch.randn(6, 8)
    torch.testing.assert_close(flat_ids(ids, w), w[ids.view(-1)], rtol=0, atol=0)


def test_values_outside_int32_are_refused_at_the_call() -> None:
    x = torch.tensor([0, 2**31 - 1, -2**31])  # the int32 range's ends go through; device
    # arithmetic is int32 and wraps there, as documented (docs/ir.md "Integer ops")
    assert torch.equal(shifted(x, x), (x.int() * 3 - x.int()).long())
    for bad in (2**31, -2**31 - 1, 2**40):
        with pytest.raises(DTypeError, match=rf"`x` holds {bad}, outside int32") as e:
            shifted(torch.tensor([1, bad, 2]), torch.zeros(3, dtype=torch.long))
        assert e.value.loc is not None and e.value.loc.file == __file__
        assert "shifted(torch.tensor" in e.value.loc.text  # the user's call line


def test_int64_under_torch_compile_fullgraph() -> None:
    x, y = torch.randint(-50, 50, (10,)), torch.randint(-50, 50, (10,))
    out = torch.compile(lambda a, b: shifted(a, b) + 1, fullgraph=True)(x, y)
    assert out.dtype == torch.int64 and torch.equal(out, x * 3 - y + 1)
