"""The Mixture-of-Experts feed-forward: router, router-bias balancing, shared and grouped experts.

Token-choice top-k: each token picks `top_k` of `n_experts` routed experts by its router scores
(sigmoid or softmax of fp32 router logits) plus a per-expert `router_bias`. The bias only chooses;
the combine weights come from the scores alone (normalised over the chosen experts when top_k > 1, or
as `norm_topk_prob` says), times `routed_scale`.
The bias is a persistent buffer moved by `update_router_bias` once per optimizer step
(auxiliary-loss-free balancing, as in DeepSeek-V3), never by a gradient.

The routed experts themselves (sorting, grouped matmuls, combining) are experts.py.

Capacity (`capacity_factor`, training only; null = dropless, the default): in each micro-batch each
expert keeps at most ceil(capacity_factor * tokens * top_k / n_experts) of the assignments routed to
it, `tokens` being this layer's tokens of the micro-batch on this rank. The first assignments in
token order are kept (row by row of the batch, position by position, then a token's k choices in
top-k order); the rest are dropped: their `chosen` becomes -1, they are left out of the counts
the experts get, and the token receives nothing from that expert (its shared experts and its other
kept experts still apply). The router-bias balancer, the balance loss and `tokens_per_expert` count
what the router chose, before dropping: the bias steers the router's preference, which is what the
capacity clips. In eval mode (evaluation, sampling, export) nothing is dropped, as in transformers.
Dropped and routed assignments are summed over the step's micro-batches for `moe/.../drop_fraction`.

Activation checkpointing recomputes a forward during backward (train/activation_checkpointing.py);
inside `recomputing()` the forward accumulates no statistics, so nothing is counted twice.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch
import torch.nn.functional as F
from torch import nn

from glassroom.model.config import MoEConfig
from glassroom.model.experts import GroupedExperts
from glassroom.model.layers import SwiGLU

_RECOMPUTING = contextvars.ContextVar("glassroom_moe_recomputing", default=False)


@contextlib.contextmanager
def recomputing():
    """While a checkpointed forward is recomputed in backward: MoE layers leave their statistics alone."""
    token = _RECOMPUTING.set(True)
    try:
        yield
    finally:
        _RECOMPUTING.reset(token)


def apply_capacity(chosen: torch.Tensor, counts: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep each expert's first `capacity` assignments in token order (row-major over chosen (T, k)):
    (chosen with the others set to -1, kept assignments per expert)."""
    flat = chosen.flatten()
    order = torch.argsort(flat, stable=True)  # by expert, token order within each expert
    starts = torch.cumsum(counts, 0) - counts
    rank_sorted = torch.arange(flat.numel(), device=flat.device) - starts.index_select(0, flat.index_select(0, order))
    rank = torch.empty_like(rank_sorted).index_copy_(0, order, rank_sorted)
    kept = torch.where(rank < capacity, flat, torch.full_like(flat, -1))
    return kept.view_as(chosen), counts.clamp(max=capacity)


class MoEFeedForward(nn.Module):
    """Router + routed experts + always-on shared experts, with router statistics."""

    def __init__(self, d_model: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.n_experts = cfg.n_experts
        self.top_k = cfg.top_k
        self.router = nn.Linear(d_model, cfg.n_experts, bias=False)
        self.register_buffer("router_bias", torch.zeros(cfg.n_experts), persistent=True)
        # Tokens per expert summed over the micro-batches of the current optimizer step.
        self.register_buffer(
            "step_tokens_per_expert", torch.zeros(cfg.n_experts, dtype=torch.long), persistent=False
        )
        # (dropped, routed) assignments summed over the step's micro-batches; the last step's, once reset.
        self.register_buffer("step_drops", torch.zeros(2, dtype=torch.long), persistent=False)
        self.register_buffer("last_step_drops", torch.zeros(2, dtype=torch.long), persistent=False)
        self.experts = GroupedExperts(cfg.n_experts, d_model, cfg.d_expert)
        self.shared_experts = (
            SwiGLU(d_model, cfg.n_shared_experts * cfg.d_expert) if cfg.n_shared_experts else None
        )
        self.last_stats: dict[str, torch.Tensor] = {}

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Router logits (fp32), scores, chosen experts (T, k) and their combine weights (T, k)."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(x.float(), self.router.weight.float())
        if self.cfg.router == "sigmoid":
            scores = torch.sigmoid(logits)
        else:
            scores = torch.softmax(logits, dim=-1)
        with torch.no_grad():
            chosen = torch.topk(scores + self.router_bias.float(), self.top_k, dim=-1).indices
        weights = scores.gather(1, chosen)
        if self.cfg.renormalises():
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if self.cfg.routed_scale != 1.0:
            weights = weights * self.cfg.routed_scale
        return logits, scores, chosen, weights

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., d) -> (output of the same shape, weighted auxiliary losses to add to the loss)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        logits, scores, chosen, weights = self.route(flat)
        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)
        kept_chosen, kept_counts = chosen, counts
        if self.training and self.cfg.capacity_factor is not None:
            with torch.no_grad():
                kept_chosen, kept_counts = apply_capacity(chosen, counts, self.capacity(flat.shape[0]))
        out = self.experts(flat, kept_chosen, weights, kept_counts)
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)

        # Switch-style balance loss: E * sum_i (fraction of assignments to i) * (mean prob of i).
        probs = scores if self.cfg.router == "softmax" else scores / scores.sum(-1, keepdim=True)
        fraction = counts.float() / chosen.numel()
        aux_loss = self.n_experts * torch.sum(fraction * probs.mean(dim=0))
        z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
        moe_loss = self.cfg.aux_loss_coef * aux_loss + self.cfg.z_loss_coef * z_loss

        if _RECOMPUTING.get():  # activation checkpointing's second forward: counted the first time
            return out.reshape(shape), moe_loss
        with torch.no_grad():
            if self.training:
                self.step_tokens_per_expert += counts
                self.step_drops[0] += counts.sum() - kept_counts.sum()
                self.step_drops[1] += chosen.numel()
            entropy = -(probs * torch.log(probs.clamp_min(1e-20))).sum(-1).mean()
            self.last_stats = {
                "tokens_per_expert": counts,
                "entropy": entropy,
                "aux_loss": aux_loss.detach(),
                "z_loss": z_loss.detach(),
            }
        return out.reshape(shape), moe_loss

    def capacity(self, tokens: int) -> int:
        """Assignments each expert keeps out of `tokens` tokens (capacity_factor set); at most
        `tokens`, all an expert can be given (a huge factor is dropless)."""
        wanted = self.cfg.capacity_factor * tokens * self.top_k / self.n_experts
        return tokens if not wanted < tokens else math.ceil(wanted)  # 1.7e308 * tokens overflows to inf

    def drop_counts(self) -> torch.Tensor:
        """(dropped, routed) assignments of this step's training forwards, else of the last step's."""
        return self.step_drops if int(self.step_drops[1]) > 0 else self.last_step_drops

    @torch.no_grad()
    def update_router_bias(self, tokens_per_expert: torch.Tensor | None = None, rate: float | None = None) -> None:
        """Move each expert's bias by `rate * sign(mean_count - count_i)`, then re-centre to zero mean.

        Call once per optimizer step with the counts of all its micro-batches (summed across
        data-parallel ranks when distributed); by default the counts this layer accumulated.
        Resets the accumulated counts.
        """
        counts = self.step_tokens_per_expert if tokens_per_expert is None else tokens_per_expert
        counts = counts.to(self.router_bias.device, torch.float32)
        rate = self.cfg.bias_update_rate if rate is None else rate
        if rate > 0 and counts.sum() > 0:
            self.router_bias += rate * torch.sign(counts.mean() - counts).to(self.router_bias.dtype)
            self.router_bias -= self.router_bias.mean()
        self.step_tokens_per_expert.zero_()
        self.last_step_drops.copy_(self.step_drops)
        self.step_drops.zero_()

    @torch.no_grad()
    def router_stats(self) -> dict[str, float | list[float]]:
        """Tokens per expert (this step's, else the last forward's), load imbalance (max/mean),
        router entropy (nats), bias values, norm and range, auxiliary and z losses."""
        counts = self.step_tokens_per_expert
        if int(counts.sum()) == 0 and self.last_stats:
            counts = self.last_stats["tokens_per_expert"]
        counts = counts.float().cpu()
        mean = float(counts.mean())
        bias = self.router_bias.float().cpu()
        stats: dict[str, float | list[float]] = {
            "tokens_per_expert": counts.tolist(),
            "imbalance": float(counts.max()) / mean if mean > 0 else math.nan,
            "bias": bias.tolist(),
            "bias_norm": float(bias.norm()),
            "bias_min": float(bias.min()),
            "bias_max": float(bias.max()),
        }
        for key in ("entropy", "aux_loss", "z_loss"):
            value = self.last_stats.get(key)
            stats[key] = float(value) if value is not None else math.nan
        return stats
