"""The model options published models need: norm_eps, rope_scaling, moe.norm_topk_prob, moe.routed_scale.

Each is checked against its definition (or, for RoPE scaling, against transformers' own rule), and
the defaults are checked to leave a model exactly as it was.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from glassroom.config import build_section
from glassroom.errors import ConfigError
from glassroom.model.config import ModelConfig, MoEConfig, RopeScaling
from glassroom.model.moe import MoEFeedForward
from glassroom.model.transformer import build_model, rope_frequencies
from glassroom.train.run_dir import config_differences

BASE = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32, d_ff=64)


def test_norm_eps_reaches_every_norm_and_changes_the_output():
    cfg = build_section(ModelConfig, {**BASE, "qk_norm": True, "norm_eps": 0.25}, "model")
    model = build_model(cfg, seed=0)
    norms = [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert len(norms) == 2 * 2 + 2 * 2 + 1  # per layer attn, mlp, q, k; the final norm
    assert {m.eps for m in norms} == {0.25}
    x = torch.randn(3, 32) * 0.3  # small activations, where eps matters
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 0.25)
    assert torch.allclose(model.norm(x), expected, atol=1e-6)
    default = build_model(build_section(ModelConfig, {**BASE, "qk_norm": True}, "model"), seed=0)
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(model(ids).logits, default(ids).logits, atol=1e-4)
    assert {m.eps for m in default.modules() if type(m).__name__ == "RMSNorm"} == {1e-6}


@pytest.mark.parametrize("params", [
    dict(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_seq_len=64),
    dict(type="llama3", factor=32.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_seq_len=8192),
    dict(type="linear", factor=4.0),
])
def test_rope_scaling_matches_transformers(params):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = build_section(RopeScaling, params, "model.rope_scaling")
    head_dim, theta = 64, 500000.0
    rope = {"rope_type": params["type"], "rope_theta": theta, "factor": params["factor"]}
    if params["type"] == "llama3":
        rope.update(low_freq_factor=params["low_freq_factor"], high_freq_factor=params["high_freq_factor"],
                    original_max_position_embeddings=params["original_max_seq_len"])
    hf = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                     max_position_embeddings=4 * params.get("original_max_seq_len", 64), rope_parameters=rope)
    expected, _ = ROPE_INIT_FUNCTIONS[params["type"]](hf, "cpu")
    ours = rope_frequencies(head_dim, theta, scaling)
    torch.testing.assert_close(ours.float(), expected.float(), rtol=1e-6, atol=0)
    plain = rope_frequencies(head_dim, theta)
    assert not torch.allclose(ours, plain)  # the test models really are scaled
    if params["type"] == "llama3":  # the fastest rotations are kept, the slowest divided by factor
        assert ours[0] == plain[0] and math.isclose(ours[-1], plain[-1] / params["factor"], rel_tol=1e-12)


def test_rope_scaling_reaches_the_model_tables():
    scaled = dict(BASE, rope_scaling={"type": "linear", "factor": 2.0})
    model = build_model(build_section(ModelConfig, scaled, "model"), seed=0)
    plain = build_model(build_section(ModelConfig, BASE, "model"), seed=0)
    # linear scaling by 2: position p of the scaled model rotates as position p / 2 of the plain one
    torch.testing.assert_close(model.rope_cos[10], plain.rope_cos[5])
    torch.testing.assert_close(model.rope_sin[6], plain.rope_sin[3])


def _router_weights(**moe) -> tuple[MoEFeedForward, torch.Tensor, torch.Tensor, torch.Tensor]:
    cfg = build_section(MoEConfig, {"n_experts": 6, "d_expert": 8, **moe}, "model.moe")
    layer = MoEFeedForward(16, cfg)
    torch.nn.init.normal_(layer.router.weight, std=0.5, generator=torch.Generator().manual_seed(0))
    x = torch.randn(20, 16, generator=torch.Generator().manual_seed(1))
    _, scores, chosen, weights = layer.route(x)
    return layer, scores.gather(1, chosen), chosen, weights


@pytest.mark.parametrize("router", ["sigmoid", "softmax"])
def test_norm_topk_prob_and_routed_scale(router):
    _, raw, _, default_k2 = _router_weights(top_k=2, router=router)
    torch.testing.assert_close(default_k2, raw / raw.sum(-1, keepdim=True))  # default, top_k > 1
    _, raw1, _, default_k1 = _router_weights(top_k=1, router=router)
    torch.testing.assert_close(default_k1, raw1)  # default, top_k 1: the score itself, as before
    _, raw, _, never = _router_weights(top_k=2, router=router, norm_topk_prob=False)
    torch.testing.assert_close(never, raw)
    _, _, _, always = _router_weights(top_k=1, router=router, norm_topk_prob=True)
    torch.testing.assert_close(always, torch.ones_like(always))
    _, raw, _, scaled = _router_weights(top_k=3, router=router, routed_scale=2.5)
    torch.testing.assert_close(scaled, 2.5 * raw / raw.sum(-1, keepdim=True))


def test_routed_scale_scales_the_routed_output_only():
    base = {"n_experts": 4, "top_k": 2, "d_expert": 8, "n_shared_experts": 1}
    one = MoEFeedForward(16, build_section(MoEConfig, base, "m"))
    two = MoEFeedForward(16, build_section(MoEConfig, {**base, "routed_scale": 2.0}, "m"))
    two.load_state_dict(one.state_dict())
    for p in one.parameters():
        torch.nn.init.normal_(p, std=0.3)
    two.load_state_dict(one.state_dict())
    x = torch.randn(10, 16)
    shared = one.shared_experts(x)
    torch.testing.assert_close(two(x)[0] - shared, 2.0 * (one(x)[0] - shared), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("section,raw,message", [
    ("model", {**BASE, "norm_eps": 0}, "model.norm_eps: must be positive"),
    ("model", {**BASE, "rope_scaling": {"type": "yarn", "factor": 2}}, "model.rope_scaling.type"),
    ("model", {**BASE, "rope_scaling": {"type": "linear", "factor": -1}}, "model.rope_scaling.factor"),
    ("model", {**BASE, "rope_scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 4,
                                          "high_freq_factor": 4}}, "model.rope_scaling.high_freq_factor"),
    ("model", {**BASE, "rope_scaling": {"factor": 2}}, "model.rope_scaling.type: missing"),
    ("model.moe", {"n_experts": 4, "top_k": 2, "d_expert": 8, "routed_scale": 0}, "model.moe.routed_scale"),
    ("model.moe", {"n_experts": 4, "top_k": 2, "d_expert": 8, "norm_topk_prob": "yes"}, "model.moe.norm_topk_prob"),
])
def test_bad_option_values_name_the_key(section, raw, message):
    cls = ModelConfig if section == "model" else MoEConfig
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build_section(cls, raw, section)


def test_a_run_saved_before_the_options_existed_still_resumes():
    moe = {"n_experts": 4, "top_k": 2, "d_expert": 8}
    current = {"model": dataclasses.asdict(build_section(ModelConfig, {**BASE, "moe": moe}, "model"))}
    old = {"model": {k: v for k, v in current["model"].items() if k not in ("norm_eps", "rope_scaling")}}
    old["model"]["moe"] = {k: v for k, v in current["model"]["moe"].items()
                           if k not in ("norm_topk_prob", "routed_scale")}
    assert config_differences(old, current) == []
    changed = {"model": {**current["model"], "norm_eps": 1e-5}}
    assert config_differences(old, changed) == ["model.norm_eps (1e-06 -> 1e-05)"]
