"""The KV cache: a prompt prefilled, then tokens one at a time and in chunks, gives the full
forward's logits for every kind of layer; its limits are one clear message."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glassroom.model.config import ModelConfig, MoEConfig, RopeScaling
from glassroom.model.transformer import build_model

BASE = ModelConfig(vocab_size=256, d_model=64, n_layers=3, n_heads=4, d_ff=96, max_seq_len=48)
GQA = dataclasses.replace(BASE, n_kv_heads=2)
QK_NORM = dataclasses.replace(GQA, qk_norm=True, rope_theta=500.0)
SLIDING = dataclasses.replace(GQA, sliding_window=4, global_every=2, n_layers=4)
MOE_SIGMOID = dataclasses.replace(
    GQA, qk_norm=True,
    moe=MoEConfig(n_experts=8, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1),
)
MOE_SOFTMAX = dataclasses.replace(
    SLIDING, moe=MoEConfig(n_experts=4, top_k=2, d_expert=32, router="softmax", norm_topk_prob=False,
                           routed_scale=2.5),
)
# Llama 3's RoPE scaling stretched over a context three times the "original" one, and HF's eps.
LLAMA3_ROPE = dataclasses.replace(
    QK_NORM, norm_eps=1e-5,
    rope_scaling=RopeScaling(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_seq_len=16),
)
TIED = dataclasses.replace(BASE, tie_embeddings=True, head_dim=32)

CONFIGS = {"dense": BASE, "gqa": GQA, "qk_norm": QK_NORM, "sliding": SLIDING, "moe_sigmoid": MOE_SIGMOID,
           "moe_softmax": MOE_SOFTMAX, "tied": TIED, "llama3_rope": LLAMA3_ROPE}


def _model(cfg, seed=0):
    model = build_model(cfg, seed=seed).eval()
    for _, moe in model.moe_layers():  # a trained router's bias changes which experts are chosen
        moe.router_bias.copy_(torch.linspace(-0.05, 0.05, moe.n_experts))
    return model


def _cached_logits(model, tokens, pieces):
    """Logits of `tokens` run through the cache in pieces of the given lengths."""
    cache = model.new_cache(tokens.shape[0], tokens.shape[1])
    out, start = [], 0
    for length in pieces:
        out.append(model(tokens[:, start:start + length], cache=cache).logits)
        start += length
        assert cache.pos == start
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cached_logits_equal_the_full_forward(name):
    cfg = CONFIGS[name]
    model = _model(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens).logits
        # A prompt of 7, then single tokens, a chunk of 6 against cached keys (beyond the window),
        # single tokens again, and a last chunk of 9.
        pieces = [7] + [1] * 12 + [6] + [1] * 6 + [9]
        cached = _cached_logits(model, tokens, pieces)
    assert cached.shape == full.shape
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)


def test_a_chunk_of_new_tokens_on_a_window_layer_sees_only_keys_inside_the_window():
    # One sliding layer of window 4: a chunk at positions 20..25 must not depend on token 15
    # (outside every query's window), while the full forward over 0..25 confirms the same.
    cfg = dataclasses.replace(BASE, n_layers=1, sliding_window=4)
    model = _model(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (1, 26), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[0, 15] = (changed[0, 15] + 1) % cfg.vocab_size
    with torch.no_grad():
        a = _cached_logits(model, tokens, [20, 6])
        b = _cached_logits(model, changed, [20, 6])
    torch.testing.assert_close(a[0, 19:], b[0, 19:], rtol=0, atol=0)
    assert (a[0, 15:19] - b[0, 15:19]).abs().max() > 1e-4


def test_batched_cache_rows_are_independent():
    model = _model(SLIDING)
    tokens = torch.randint(0, 256, (3, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        together = _cached_logits(model, tokens, [5] + [1] * 15)
        alone = _cached_logits(model, tokens[1:2], [5] + [1] * 15)
    torch.testing.assert_close(together[1:2], alone, rtol=0, atol=1e-5)


def test_generation_leaves_the_moe_step_counts_alone_and_the_cache_uses_the_model_dtype():
    model = _model(MOE_SIGMOID)
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        _cached_logits(model, tokens, [4] + [1] * 8)
    assert int(model.step_tokens_per_expert().sum()) == 0
    cache = model.to(torch.bfloat16).new_cache(1, 8)
    assert cache.keys[0].dtype == torch.bfloat16 and cache.keys[0].shape == (1, 2, 8, 16)
    assert model.new_cache(1, 8, dtype=torch.float32).values[-1].dtype == torch.float32


def test_the_cache_limits_are_clear_messages():
    model = _model(GQA)
    with pytest.raises(ValueError, match="max_seq_len 48"):
        model.new_cache(1, 49)
    cache = model.new_cache(1, 10)
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="room for 10 positions"):
            model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
        assert cache.pos == 8  # the refused call wrote nothing
        with pytest.raises(ValueError, match="batch of 2"):
            model(torch.zeros(2, 1, dtype=torch.long), cache=cache)
