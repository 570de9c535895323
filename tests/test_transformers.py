"""kernel_dsl.integrations.transformers: attn_implementation="kernel_dsl" against "sdpa".

A tiny Llama built from a config (no download): grouped-query attention (4 query heads, 2
key/value heads), logits and parameter gradients, with no mask and with left/right padding.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   '(pip install "kernel-dsl[hf]")')

from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

import kernel_dsl.integrations.transformers as kt  # noqa: E402  (registers "kernel_dsl")
from kernel_dsl.kernels import FallbackWarning  # noqa: E402

CONFIG = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=64)
B, S = 2, 12
F32 = {"atol": 1e-5, "rtol": 1e-4}  # measured max differences: ~2e-7 (logits and gradients)


def _models(dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    # from_config writes attn_implementation into the config: one copy each.
    ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(CONFIG), attn_implementation="sdpa")
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(CONFIG),
                                                         attn_implementation="kernel_dsl")
    ours.load_state_dict(ref.state_dict())
    assert ours.config._attn_implementation == "kernel_dsl"
    return ref.to(dtype), ours.to(dtype)


def _run(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None):
    model.zero_grad()
    labels = ids if mask is None else ids.masked_fill(mask == 0, -100)  # no loss on padding
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def _padding(kind: str) -> torch.Tensor | None:
    mask = torch.ones(B, S, dtype=torch.long)
    if kind == "left":
        mask[0, :3] = 0
    elif kind == "right":
        mask[0, -4:] = 0
    return None if kind == "none" else mask


@pytest.mark.parametrize("padding", ["none", "left", "right"])
def test_logits_and_grads_match_sdpa(padding: str) -> None:
    ref, ours = _models()
    ids = torch.randint(0, CONFIG.vocab_size, (B, S), generator=torch.Generator().manual_seed(1))
    mask = _padding(padding)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every call runs the library kernels
        logits, grads = _run(ours, ids, mask)
    ref_logits, ref_grads = _run(ref, ids, mask)
    keep = torch.ones(B, S, dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(logits[keep], ref_logits[keep], **F32)
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], **F32, msg=lambda m: f"{name}: {m}")


def test_unsupported_calls_fall_back_to_sdpa_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kt, "_warned", set())
    _, ours = _models()
    attn = ours.model.layers[0].self_attn
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, h, S, 16, generator=g) for h in (4, 2, 2))
    window = torch.ones(S, S, dtype=torch.bool).tril() & ~torch.ones(S, S, dtype=torch.bool).tril(-4)
    window = window.expand(B, 1, S, S)  # a sliding window: not causal plus padding
    with pytest.warns(FallbackWarning, match="this attention mask"):
        out, _ = kt.attention_forward(attn, q, k, v, window, scaling=0.25)
    ref, _ = sdpa_attention_forward(attn, q, k, v, window, scaling=0.25)
    torch.testing.assert_close(out, ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # the same reason warns only once
        kt.attention_forward(attn, q, k, v, window, scaling=0.25)
    with pytest.warns(FallbackWarning, match="dropout"):
        kt.attention_forward(attn, q, k, v, None, dropout=0.1, scaling=0.25)


def test_additive_mask_matches_sdpa() -> None:
    _, ours = _models()
    attn = ours.model.layers[0].self_attn
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, h, S, 16, generator=g) for h in (4, 2, 2))
    allowed = torch.ones(S, S, dtype=torch.bool).tril().expand(B, 1, S, S).clone()
    allowed[0, ..., :5] = False  # left padding, with rows that see no key
    additive = torch.zeros(B, 1, S, S).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out, _ = kt.attention_forward(attn, q, k, v, additive, scaling=0.25)
    ref, _ = sdpa_attention_forward(attn, q, k, v, allowed, scaling=0.25)
    torch.testing.assert_close(out, ref, **F32)


def test_bf16_and_generate_match_sdpa() -> None:
    ref, ours = _models()
    ids = torch.randint(0, CONFIG.vocab_size, (B, S), generator=torch.Generator().manual_seed(4))
    mask = _padding("left")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        # greedy decoding with a KV cache: one-token queries under a padded bottom-right mask
        new = {"max_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
        assert torch.equal(ours.generate(ids, attention_mask=mask, **new),
                           ref.generate(ids, attention_mask=mask, **new))
        a = ours.to(torch.bfloat16)(input_ids=ids, attention_mask=mask).logits.float()
    b = ref.to(torch.bfloat16)(input_ids=ids, attention_mask=mask).logits.float()
    keep = mask.bool()
    torch.testing.assert_close(a[keep], b[keep], atol=1e-2, rtol=1e-2)  # measured: equal


@pytest.mark.slow
def test_compile_one_graph() -> None:
    ref, ours = _models()
    ids = torch.randint(0, CONFIG.vocab_size, (B, S), generator=torch.Generator().manual_seed(5))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(ours)(input_ids=ids)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes}
    if int(transformers.__version__.split(".")[0]) >= 5:  # 4.x builds a mask: SDPA fallback
        assert "kernel_dsl.flash_attention.default" in ops
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(ours, fullgraph=True)
        torch.testing.assert_close(compiled(input_ids=ids).logits, ref(input_ids=ids).logits, **F32)
