"""Optimizers and learning-rate schedules.

AdamW with two weight-decay groups: matrices (and expert tensors) decay; embeddings, norms and the
output head do not. Muon (`torch.optim.Muon`) takes the 2-D hidden matrices of the blocks
(attention and dense/shared feed-forward projections); AdamW keeps the rest (embeddings, head,
norms, routers, 3-D expert tensors). Schedules return a multiplier of the peak lr for step s.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from glassroom.errors import GlassroomError


def _no_decay(name: str, param: torch.Tensor) -> bool:
    return param.ndim < 2 or "norm" in name or name.startswith("embed") or name.startswith("head")


def _muon_eligible(name: str, param: torch.Tensor) -> bool:
    """2-D matrices inside the blocks, except routers (tiny, and not a hidden transform)."""
    return param.ndim == 2 and name.startswith("blocks.") and ".router." not in name


class CombinedOptimizer(torch.optim.Optimizer):
    """Steps several optimizers as one (Muon for hidden matrices + AdamW for the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers
        self.defaults = {}
        self.state = {}

    @property
    def param_groups(self) -> list[dict]:
        # Read through every time: load_state_dict gives each optimizer new group dicts, and the
        # schedule's lr must reach those (a copied list kept the old ones, so after a resume every
        # step ran at the lr the checkpoint was saved with).
        return [g for opt in self.optimizers for g in opt.param_groups]

    def step(self, closure=None):
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True):
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state):
        for opt, sd in zip(self.optimizers, state["optimizers"]):
            opt.load_state_dict(sd)


def _adam_groups(named: list, train_cfg) -> list[dict]:
    """AdamW's groups: decayed matrices, then the rest (norms, embedding, head) without decay; the token
    embedding in a group of its own (first) when train.embedding_lr_multiplier is not 1. Empty groups are kept
    (the order is what a checkpoint's optimizer state is matched by)."""
    scale = train_cfg.embedding_lr_multiplier
    own = (lambda n: scale != 1.0 and n.startswith("embed"))  # noqa: E731
    groups = [{"params": [p for n, p in named if not _no_decay(n, p)], "weight_decay": train_cfg.weight_decay,
               "peak_lr": train_cfg.lr},
              {"params": [p for n, p in named if _no_decay(n, p) and not own(n)], "weight_decay": 0.0,
               "peak_lr": train_cfg.lr}]
    if scale != 1.0:  # first: set_lr reports the last group's lr, train.lr's
        groups.insert(0, {"params": [p for n, p in named if own(n)], "weight_decay": 0.0,
                          "peak_lr": train_cfg.lr * scale})
    return groups


def build_optimizer(model: nn.Module, train_cfg, distributed_fsdp: bool = False) -> torch.optim.Optimizer:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    adam_kwargs = dict(lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2), eps=train_cfg.eps)
    if train_cfg.optimizer == "adamw":
        return torch.optim.AdamW(_adam_groups(named, train_cfg), **adam_kwargs)
    if distributed_fsdp:
        raise GlassroomError("train.optimizer: muon needs whole matrices; use train.parallel: ddp with muon")
    muon_lr = train_cfg.muon_lr if train_cfg.muon_lr is not None else 0.02
    hidden = [p for n, p in named if _muon_eligible(n, p)]
    rest = [(n, p) for n, p in named if not _muon_eligible(n, p)]
    muon = torch.optim.Muon(
        [{"params": hidden, "peak_lr": muon_lr}], lr=muon_lr, weight_decay=train_cfg.weight_decay,
        adjust_lr_fn="match_rms_adamw",
    )
    adamw = torch.optim.AdamW(
        _adam_groups(rest, train_cfg), **adam_kwargs)
    return CombinedOptimizer([muon, adamw])


def lr_multiplier(train_cfg) -> Callable[[int], float]:
    """Multiplier of the peak lr at step s (0-based): warmup, then the configured schedule."""
    steps, warmup, floor = train_cfg.steps, train_cfg.warmup_steps, train_cfg.min_lr_ratio
    schedule = train_cfg.schedule

    def multiplier(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, steps - warmup)
        if schedule == "cosine":
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        if schedule == "linear":
            return 1.0 - (1 - floor) * min(1.0, progress)
        # wsd: stable at the peak, then decay over the last decay_fraction of all steps.
        decay_steps = max(1, round(train_cfg.decay_fraction * steps))
        decay_start = steps - decay_steps
        if step < decay_start:
            return 1.0
        t = min(1.0, (step - decay_start + 1) / decay_steps)
        if train_cfg.decay_shape == "linear":
            shape = 1 - t
        elif train_cfg.decay_shape == "cosine":
            shape = 0.5 * (1 + math.cos(math.pi * t))
        else:  # sqrt
            shape = 1 - math.sqrt(t)
        return floor + (1 - floor) * shape

    return multiplier


def set_lr(optimizer: torch.optim.Optimizer, multiplier: float) -> float:
    """Set every group's lr to its peak times `multiplier`; returns the last group's lr (train.lr's)."""
    for group in optimizer.param_groups:
        group["lr"] = group["peak_lr"] * multiplier
    return optimizer.param_groups[-1]["lr"]
