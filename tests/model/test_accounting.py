"""Parameter and FLOP accounting from the config alone, checked against instantiated models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from glassroom.model.accounting import count_params, flops_per_token, plan
from glassroom.model.config import ModelConfig, MoEConfig, load_model_config
from glassroom.model.transformer import build_model

ROOT = Path(__file__).resolve().parents[2]
BASE = ModelConfig(vocab_size=1000, d_model=96, n_layers=4, n_heads=6, d_ff=160, max_seq_len=128)
MOE = MoEConfig(n_experts=16, top_k=4, d_expert=48)

CASES = {
    "dense_untied": BASE,
    "dense_tied_gqa": dataclasses.replace(BASE, tie_embeddings=True, n_kv_heads=2),
    "qk_norm_head_dim": dataclasses.replace(BASE, qk_norm=True, head_dim=32, n_kv_heads=3),
    "moe": dataclasses.replace(BASE, moe=MOE),
    "moe_shared_first_dense": dataclasses.replace(
        BASE, qk_norm=True, moe=dataclasses.replace(MOE, n_shared_experts=2, first_dense_layers=2)
    ),
    "moe_tied_all_dense_below": dataclasses.replace(
        BASE, tie_embeddings=True, moe=dataclasses.replace(MOE, first_dense_layers=4)
    ),
}


def _active_on_meta(model, cfg) -> int:
    """Count active parameters of a built model: all but the unchosen routed experts."""
    total = sum(p.numel() for p in model.parameters())
    for _, moe in model.moe_layers():
        per_expert = (moe.experts.gate_up_proj.numel() + moe.experts.down_proj.numel()) // moe.n_experts
        total -= (moe.n_experts - moe.top_k) * per_expert
    return total


@pytest.mark.parametrize("name", list(CASES))
def test_counts_equal_the_instantiated_model(name):
    cfg = CASES[name]
    model = build_model(cfg, device="meta")
    counts = count_params(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.active == _active_on_meta(model, cfg)
    assert counts.embedding == model.embed.weight.numel()
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    assert counts.norm_weights == norms


def test_counts_of_a_500b_class_model_on_meta():
    cfg = load_model_config(ROOT / "experiments" / "hero-530b.yaml")
    model = build_model(cfg, device="meta")
    total = sum(p.numel() for p in model.parameters())
    assert total > 500e9
    assert count_params(cfg).total == total
    assert count_params(cfg).active == _active_on_meta(model, cfg)


def test_llama3_8b_shape_is_8_0b():
    cfg = load_model_config(ROOT / "experiments" / "llama3-8b.yaml")
    counts = count_params(cfg)
    assert counts.total == 8_030_261_248  # the published Llama 3 8B count
    assert plan(cfg)["name"] == "8.0B"


def test_hero_plan_matches_the_story():
    cfg = load_model_config(ROOT / "experiments" / "hero-530b.yaml")
    report = plan(cfg, seq_len=4096, tokens=18e12, gpu="h200", gpus=2048, mfu=0.35)
    assert 520e9 < report["total_params"] < 540e9
    assert 19.0e9 < report["active_params"] < 20.0e9
    assert 2.0e24 < report["total_flops"] < 2.8e24
    assert report["name"] == "530B-A19.5B"
    assert report["days"] == pytest.approx(report["total_flops"] / (2048 * 989e12 * 0.35) / 86400)


def test_flops_per_token_formula():
    cfg = CASES["moe_shared_first_dense"]
    counts = count_params(cfg)
    attention = 12 * cfg.n_layers * cfg.n_heads * cfg.dim_per_head * 128
    assert flops_per_token(cfg, 128) == 6 * counts.active_matmul + attention
    # Sliding-window layers attend to at most the window.
    sliding = dataclasses.replace(cfg, sliding_window=32, global_every=2)
    width = cfg.n_heads * cfg.dim_per_head
    assert flops_per_token(sliding, 128) == 6 * counts.active_matmul + 12 * width * (2 * 128 + 2 * 32)


def test_a_tied_head_still_costs_its_matmul():
    untied = count_params(BASE)
    tied = count_params(dataclasses.replace(BASE, tie_embeddings=True))
    assert tied.total == untied.total - BASE.vocab_size * BASE.d_model
    assert tied.active_matmul == untied.active_matmul
    assert flops_per_token(dataclasses.replace(BASE, tie_embeddings=True), 64) == flops_per_token(BASE, 64)
