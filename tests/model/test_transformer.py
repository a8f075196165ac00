"""The transformer and the MoE layer: causality, equivalences, routing, balancing, gradients."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from glassroom.errors import ConfigError
from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import INIT_STD, build_model, sliding_window_mask
import math
import re

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




MOE_2 = dataclasses.replace(
    DENSE, moe=MoEConfig(n_experts=8, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1))


@pytest.mark.parametrize("cfg", [DENSE, MOE_2], ids=["dense", "moe"])
def test_every_projection_into_the_residual_stream_is_scaled_by_depth(cfg):
    """attn.wo, the dense `down`, the shared experts' `down` and experts.down_proj: std 0.02 /
    sqrt(2 * n_layers); every other matrix std 0.02. Checked per parameter, by name."""
    model = build_model(cfg, seed=0)
    residual_std = INIT_STD / math.sqrt(2 * cfg.n_layers)
    scaled = []
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            assert torch.all(param == 1.0), name
            continue
        into_residual = name.endswith(("attn.wo.weight", "down.weight", "down_proj"))
        want = residual_std if into_residual else INIT_STD
        got = float(param.detach().float().std())
        assert got == pytest.approx(want, rel=0.06), (name, got, want)
        if into_residual:
            scaled.append(name)
    kinds = {re.sub(r"^blocks\.\d+\.", "", n) for n in scaled}
    want_kinds = {"attn.wo.weight", "mlp.down.weight"}
    if cfg.moe is not None:
        want_kinds |= {"mlp.experts.down_proj", "mlp.shared_experts.down.weight"}
    assert kinds == want_kinds  # each kind of output projection really exists and was checked


def test_sliding_window_mask_is_exactly_the_band():
    from glassroom.model import transformer

    transformer._MASKS.clear()   # built here, not taken from the cache (so a mutant of it is tested)
    for seq, window in ((9, 1), (12, 4), (16, 5)):
        mask = sliding_window_mask(seq, window, torch.device("cpu"))
        want = torch.tensor([[0 <= i - j < window for j in range(seq)] for i in range(seq)])
        assert torch.equal(mask, want), (seq, window)
        assert int(mask.sum(1).max()) == window  # each query sees exactly `window` keys once far enough in


def test_a_sliding_layer_sees_exactly_window_positions():
    """Window 4: the token at p changes the logits at p, p+1, p+2 and p+3, each one, and none after."""
    cfg = dataclasses.replace(DENSE, n_layers=1, sliding_window=4, global_every=None)
    model = build_model(cfg, seed=0).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    for p in (3, 6):
        changed = tokens.clone()
        changed[0, p] = (changed[0, p] + 1) % cfg.vocab_size
        with torch.no_grad():
            diff = (model(tokens).logits - model(changed).logits).abs().amax(-1)[0]
        for q in range(p, p + 4):
            assert diff[q] > 1e-4, (p, q, diff.tolist())
        assert float(diff[:p].max()) == 0.0 and float(diff[p + 4:].max()) < 1e-6, (p, diff.tolist())


def test_rope_is_a_rotation_by_position_that_keeps_only_relative_offsets():
    """RoPE from its definition: pair i of a head turns by position * theta^(-2i/h); so norms are kept,
    position 0 is the identity, and a query-key product depends on the offset alone (shift both
    positions and it is unchanged)."""
    from glassroom.model.transformer import apply_rope, rope_tables

    head_dim, theta = 8, 10_000.0
    cos, sin = rope_tables(head_dim, 64, theta)
    expected = torch.outer(torch.arange(64, dtype=torch.float64),
                           theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    torch.testing.assert_close(cos, expected.cos().float())
    torch.testing.assert_close(sin, expected.sin().float())

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 64, head_dim, generator=g), torch.randn(1, 1, 64, head_dim, generator=g)
    rq = apply_rope(q, cos, sin)
    torch.testing.assert_close(rq[..., 0, :], q[..., 0, :])                       # position 0: unchanged
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))                    # a rotation
    same_q, same_k = q[..., :1, :].expand(1, 1, 64, head_dim), k[..., :1, :].expand(1, 1, 64, head_dim)
    rq, rk = apply_rope(same_q, cos, sin), apply_rope(same_k, cos, sin)
    scores = rq[0, 0] @ rk[0, 0].T                                                 # (query pos, key pos)
    for offset in (0, 3, 17):
        diagonal = torch.diagonal(scores, -offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), rtol=1e-4, atol=1e-4)
