"""The transformer and the MoE layer: causality, equivalences, routing, balancing, gradients."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from glassroom.errors import ConfigError
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.layers import SwiGLU
from glassroom.model.experts import grouped_matmul
from glassroom.model.moe import MoEFeedForward
from glassroom.model.transformer import build_model

DENSE = ModelConfig(vocab_size=256, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)
MOE = dataclasses.replace(
    DENSE,
    qk_norm=True,
    moe=MoEConfig(n_experts=8, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1),
)
SLIDING = dataclasses.replace(DENSE, sliding_window=4, global_every=2)


@pytest.mark.parametrize("cfg", [DENSE, MOE, SLIDING], ids=["dense", "moe", "sliding"])
def test_changing_a_later_token_never_changes_earlier_logits(cfg):
    model = build_model(cfg, seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 15] = (changed[:, 15] + 7) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(tokens).logits, model(changed).logits
    torch.testing.assert_close(a[:, :15], b[:, :15], rtol=0, atol=1e-5)
    assert (a[:, 15:] - b[:, 15:]).abs().max() > 1e-3


def test_sliding_window_layers_do_not_see_past_the_window():
    # One sliding layer of window 4: position 10 must not depend on position 5.
    cfg = dataclasses.replace(DENSE, n_layers=1, sliding_window=4, global_every=None)
    model = build_model(cfg, seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[0, 5] = (changed[0, 5] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(tokens).logits, model(changed).logits
    torch.testing.assert_close(a[0, 9:], b[0, 9:], rtol=0, atol=1e-6)
    assert (a[0, 5:9] - b[0, 5:9]).abs().max() > 1e-4
    # With global_every=1 the same layer is global and sees it.
    global_model = build_model(dataclasses.replace(cfg, global_every=1), seed=0).eval()
    with torch.no_grad():
        c, d = global_model(tokens).logits, global_model(changed).logits
    assert (c[0, 9:] - d[0, 9:]).abs().max() > 1e-4


def test_initialisation_is_deterministic_from_the_seed():
    a, b, c = build_model(MOE, seed=3), build_model(MOE, seed=3), build_model(MOE, seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if "norm" not in name:
            assert not torch.equal(pa, pc), name
    # Projections into the residual stream are scaled down with depth.
    assert a.blocks[0].attn.wo.weight.std() < 0.6 * a.blocks[0].attn.wq.weight.std()


def test_the_embedding_can_start_at_its_own_scale():
    wide = build_model(dataclasses.replace(MOE, embedding_init_std=1.0), seed=3)
    plain = build_model(MOE, seed=3)
    assert wide.embed.weight.std().item() == pytest.approx(1.0, rel=0.05)
    assert plain.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    for (name, a), b in zip(wide.named_parameters(), plain.parameters()):   # nothing else changes
        if name != "embed.weight":
            assert torch.equal(a, b), name
    with pytest.raises(ConfigError, match="embedding_init_std"):
        dataclasses.replace(DENSE, tie_embeddings=True, embedding_init_std=1.0).check("model")


def test_tied_embeddings_share_the_table_and_z_loss_is_returned():
    model = build_model(dataclasses.replace(DENSE, tie_embeddings=True), seed=0)
    assert model.head is None
    tokens = torch.randint(0, 256, (2, 8))
    out = model(tokens, z_loss=True)
    expected = torch.logsumexp(out.logits.float(), -1).pow(2).mean()
    torch.testing.assert_close(out.logit_z_loss, expected)
    assert model(tokens).logit_z_loss is None


def test_moe_with_one_expert_top1_equals_dense_swiglu():
    torch.manual_seed(0)
    moe = MoEFeedForward(32, MoEConfig(n_experts=1, top_k=1, d_expert=48, router="softmax"))
    dense = SwiGLU(32, 48)
    with torch.no_grad():
        moe.router.weight.normal_()
        moe.experts.gate_up_proj.copy_(torch.cat([dense.gate.weight.T, dense.up.weight.T], dim=1)[None])
        moe.experts.down_proj.copy_(dense.down.weight.T[None])
    x = torch.randn(4, 10, 32)
    out, _ = moe(x)
    torch.testing.assert_close(out, dense(x), rtol=1e-5, atol=1e-6)


def test_router_bias_changes_choice_but_not_combine_weights():
    torch.manual_seed(0)
    moe = MoEFeedForward(16, MoEConfig(n_experts=6, top_k=2, d_expert=8, router="sigmoid"))
    x = torch.randn(200, 16)
    _, _, chosen0, weights0 = moe.route(x)
    with torch.no_grad():
        moe.router_bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.3]))
    _, _, chosen1, weights1 = moe.route(x)
    assert (chosen1 == 5).any(dim=1).sum() > (chosen0 == 5).any(dim=1).sum()
    same = (chosen0.sort(dim=1).values == chosen1.sort(dim=1).values).all(dim=1)
    assert 0 < same.sum() < len(x)
    order0, order1 = chosen0[same].argsort(dim=1), chosen1[same].argsort(dim=1)
    torch.testing.assert_close(weights0[same].gather(1, order0), weights1[same].gather(1, order1))


@pytest.mark.parametrize("router,rate", [("sigmoid", 0.002), ("softmax", 0.001)])
def test_bias_updates_balance_a_skewed_router(router, rate):
    torch.manual_seed(0)
    moe = MoEFeedForward(32, MoEConfig(n_experts=8, top_k=2, d_expert=16, router=router, bias_update_rate=rate))
    with torch.no_grad():  # Skew the router: experts 0 and 1 win for most tokens.
        moe.router.weight.normal_(0, 0.1)
        moe.router.weight[:2] += 0.2
    x = torch.randn(1024, 32) + 0.5

    def step() -> float:
        with torch.no_grad():
            chosen = moe.route(x)[2]
        counts = torch.bincount(chosen.flatten(), minlength=8)
        moe.update_router_bias(counts)
        return float(counts.max() / counts.float().mean())

    start = step()
    history = [step() for _ in range(1500)]
    settled = sum(history[-50:]) / 50
    assert start > 3.0
    assert settled < 1.15, (start, settled)
    assert abs(float(moe.router_bias.mean())) < 1e-6  # re-centred
    assert moe.router_bias[:2].max() < moe.router_bias[2:].min()  # the busy experts were pushed down


def test_every_used_expert_gets_a_gradient_and_router_bias_none():
    model = build_model(MOE, seed=0)
    model(torch.randint(0, 256, (4, 32))).logits.float().pow(2).mean().backward()
    for _, moe in model.moe_layers():
        used = moe.last_stats["tokens_per_expert"] > 0
        grads = moe.experts.gate_up_proj.grad.flatten(1).abs().sum(1)
        assert (grads[used] > 0).all() and (grads[~used] == 0).all()
        assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0
        assert moe.router_bias.grad is None and not moe.router_bias.requires_grad
    names = [n for n, _ in model.named_parameters()]
    assert not any("router_bias" in n for n in names)
    assert any("router_bias" in k for k in model.state_dict())


def test_step_counts_accumulate_over_micro_batches_and_update_resets_them():
    model = build_model(MOE, seed=0).train()
    for _ in range(3):
        model(torch.randint(0, 256, (2, 16)))
    counts = model.step_tokens_per_expert()
    assert counts.shape == (2, 8)
    assert int(counts[0].sum()) == 3 * 2 * 16 * 2  # micro-batches x tokens x top_k
    before = [moe.router_bias.clone() for _, moe in model.moe_layers()]
    model.update_router_biases(counts)
    assert int(model.step_tokens_per_expert().sum()) == 0
    assert any(not torch.equal(b, moe.router_bias) for b, (_, moe) in zip(before, model.moe_layers()))
    model.eval()
    model(torch.randint(0, 256, (2, 16)))
    assert int(model.step_tokens_per_expert().sum()) == 0  # evaluation does not count


def test_router_stats_report_load_entropy_bias_and_losses():
    model = build_model(MOE, seed=0)
    model(torch.randint(0, 256, (2, 16)))
    _, moe = next(model.moe_layers())
    stats = moe.router_stats()
    assert len(stats["tokens_per_expert"]) == 8 and sum(stats["tokens_per_expert"]) == 64
    assert stats["imbalance"] >= 1.0
    assert 0 < stats["entropy"] <= torch.log(torch.tensor(8.0)).item() + 1e-5
    assert stats["aux_loss"] > 0 and stats["z_loss"] > 0
    assert stats["bias"] == [0.0] * 8


def test_aux_and_z_losses_enter_the_loss_with_their_coefficients():
    cfg = dataclasses.replace(MOE, moe=dataclasses.replace(MOE.moe, aux_loss_coef=0.01, z_loss_coef=0.001))
    model = build_model(cfg, seed=0)
    out = model(torch.randint(0, 256, (2, 16)))
    expected = sum(0.01 * m.last_stats["aux_loss"] + 0.001 * m.last_stats["z_loss"] for _, m in model.moe_layers())
    torch.testing.assert_close(out.moe_loss.detach(), expected)
    out.moe_loss.backward()
    assert next(model.moe_layers())[1].router.weight.grad.abs().sum() > 0
    assert float(build_model(MOE, seed=0)(torch.randint(0, 256, (2, 16))).moe_loss.detach()) == 0.0


def test_grouped_matmul_matches_a_loop_and_its_fallback():
    torch.manual_seed(0)
    counts = torch.tensor([5, 0, 3, 8])
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(4, 32, 24, requires_grad=True)
    starts = [0, 5, 5, 8]
    reference = torch.cat([x[s : s + int(c)] @ w[g] for g, (s, c) in enumerate(zip(starts, counts))])
    torch.testing.assert_close(grouped_matmul(x, w, counts), reference)
    # Rows of 6 floats are not 16-byte aligned: the per-expert fallback takes over.
    x6, w6 = torch.randn(16, 6), torch.randn(4, 6, 5)
    ref6 = torch.cat([x6[s : s + int(c)] @ w6[g] for g, (s, c) in enumerate(zip(starts, counts))])
    torch.testing.assert_close(grouped_matmul(x6, w6, counts), ref6)


def test_moe_runs_under_bf16_autocast():
    model = build_model(MOE, seed=0)
    tokens = torch.randint(0, 256, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(tokens)
        loss = F.cross_entropy(out.logits.float().flatten(0, 1), tokens.flatten())
    loss.backward()
    reference = model(tokens).logits
    assert (out.logits.float() - reference).abs().max() < 0.1
    grad = next(model.moe_layers())[1].experts.down_proj.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0  # not merely allocated


def rope_by_hand(head_dim: int, positions, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta^(-2i / head_dim) for pair i, from the RoPE definition."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    angles = torch.tensor(positions, dtype=torch.float64)[:, None] * theta ** (-2 * i / head_dim)[None, :]
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("cfg", [DENSE, MOE], ids=["dense", "moe"])
def test_rope_theta_sets_the_rotation_and_so_the_logits(cfg):
    """rope_theta is not a label: with the same weights, each theta gives other logits, and the model's
    rotation at positions 1, 5 and 37 is cos/sin of position * theta^(-2i/h) computed here; putting
    those hand-made tables into the model leaves its logits unchanged."""
    thetas = (50.0, 1_000.0, 10_000.0, 500_000.0)
    base = build_model(cfg, seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, 40), generator=torch.Generator().manual_seed(2))
    logits = {}
    for theta in thetas:
        model = build_model(dataclasses.replace(cfg, rope_theta=theta), seed=1).eval()
        model.load_state_dict(base.state_dict())   # identical weights; the rotation tables are not weights
        head_dim = cfg.dim_per_head
        cos, sin = rope_by_hand(head_dim, [1, 5, 37], theta)
        torch.testing.assert_close(model.rope_cos[[1, 5, 37]].double(), cos, rtol=0, atol=1e-6)
        torch.testing.assert_close(model.rope_sin[[1, 5, 37]].double(), sin, rtol=0, atol=1e-6)
        with torch.no_grad():
            logits[theta] = model(tokens).logits
            all_cos, all_sin = rope_by_hand(head_dim, list(range(cfg.max_seq_len)), theta)
            model.rope_cos.copy_(all_cos.float())
            model.rope_sin.copy_(all_sin.float())
            torch.testing.assert_close(model(tokens).logits, logits[theta], rtol=0, atol=1e-5)
    for a, b in zip(thetas, thetas[1:]):
        assert (logits[a] - logits[b]).abs().max() > 1e-3, (a, b)
    # position 0 is not rotated, so the first token's logits agree whatever theta is
    for theta in thetas[1:]:
        torch.testing.assert_close(logits[theta][:, 0], logits[thetas[0]][:, 0], rtol=0, atol=1e-5)
