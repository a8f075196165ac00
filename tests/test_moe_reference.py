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
