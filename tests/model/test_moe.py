"""The MoE layer against a plain per-token reference written from its definition: for each token,
scores from the router (softmax or sigmoid), the top-k experts chosen on score + router bias, their
combine weights taken from the scores alone (renormalised when k > 1), each chosen expert's SwiGLU
weighted and summed, plus the shared experts; the switch balance loss and the router z-loss.
The grouped, sorted, batched implementation must give the same numbers (dividing by the combine
weight, or a wrong loss term, is caught here and by no other test)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from glassroom.model.config import MoEConfig
from glassroom.model.moe import MoEFeedForward
from glassroom.model.layers import SwiGLU


def reference(layer: MoEFeedForward, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = layer.cfg
    gate_up, down = layer.experts.gate_up_proj, layer.experts.down_proj
    d_expert = cfg.d_expert
    outputs, all_scores, all_logits, chosen_all = [], [], [], []
    for token in x:
        logits = layer.router.weight.float() @ token.float()
        scores = torch.softmax(logits, 0) if cfg.router == "softmax" else torch.sigmoid(logits)
        chosen = sorted(range(cfg.n_experts), key=lambda e: -(scores[e] + layer.router_bias[e]).item())[: cfg.top_k]
        weights = torch.stack([scores[e] for e in chosen])
        if cfg.top_k > 1:
            weights = weights / weights.sum()
        out = torch.zeros_like(token)
        for w, e in zip(weights, chosen):
            hidden = token @ gate_up[e]
            out = out + w * ((F.silu(hidden[:d_expert]) * hidden[d_expert:]) @ down[e])
        if layer.shared_experts is not None:
            out = out + layer.shared_experts(token)
        outputs.append(out)
        all_scores.append(scores)
        all_logits.append(logits)
        chosen_all += chosen
    scores = torch.stack(all_scores)
    probs = scores if cfg.router == "softmax" else scores / scores.sum(-1, keepdim=True)
    fraction = torch.bincount(torch.tensor(chosen_all), minlength=cfg.n_experts).float() / len(chosen_all)
    aux = cfg.n_experts * (fraction * probs.mean(0)).sum()
    z = torch.stack([torch.logsumexp(row, 0) ** 2 for row in all_logits]).mean()
    return torch.stack(outputs), cfg.aux_loss_coef * aux + cfg.z_loss_coef * z


@pytest.mark.parametrize("router, top_k, shared", [("softmax", 2, 1), ("sigmoid", 3, 0), ("sigmoid", 1, 1)])
def test_moe_layer_equals_the_per_token_reference(router, top_k, shared):
    torch.manual_seed(0)
    cfg = MoEConfig(n_experts=6, top_k=top_k, d_expert=8, n_shared_experts=shared, router=router,
                    aux_loss_coef=0.01, z_loss_coef=0.001)
    layer = MoEFeedForward(16, cfg)
    for p in layer.parameters():          # away from the init's small scale, so every term matters
        torch.nn.init.normal_(p, std=0.5)
    layer.router_bias.copy_(torch.linspace(-0.3, 0.3, cfg.n_experts))   # the bias changes the choice
    x = torch.randn(2, 5, 16)
    got, got_loss = layer(x)
    want, want_loss = reference(layer, x.reshape(-1, 16))
    torch.testing.assert_close(got.reshape(-1, 16), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-7)
    stats = layer.last_stats
    assert int(stats["tokens_per_expert"].sum()) == 10 * top_k




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
