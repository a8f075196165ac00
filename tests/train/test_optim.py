"""Learning-rate schedules and optimizer parameter groups."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glassroom.model.config import ModelConfig, MoEConfig
from glassroom.model.transformer import build_model
from glassroom.train.config import TrainSection
from glassroom.train.optim import CombinedOptimizer, build_optimizer, lr_multiplier

BASE = TrainSection(steps=100, batch_size=8, micro_batch_size=8, seq_len=16, lr=1e-3, warmup_steps=10)


def curve(**kw) -> list[float]:
    f = lr_multiplier(dataclasses.replace(BASE, **kw))
    return [f(s) for s in range(100)]


def test_warmup_is_linear_then_the_schedule_starts_at_the_peak():
    for schedule in ("constant", "cosine", "linear", "wsd"):
        c = curve(schedule=schedule)
        assert c[0] == pytest.approx(0.1) and c[9] == pytest.approx(1.0)
        assert c[10] == pytest.approx(1.0, abs=1e-3)


def test_cosine_and_linear_fall_to_the_floor():
    for schedule in ("cosine", "linear"):
        c = curve(schedule=schedule, min_lr_ratio=0.1)
        assert c[-1] == pytest.approx(0.1, abs=0.02)
        assert all(a >= b - 1e-12 for a, b in zip(c[10:], c[11:]))


def test_wsd_is_stable_then_decays_over_its_fraction_with_its_shape():
    for shape in ("linear", "cosine", "sqrt"):
        c = curve(schedule="wsd", decay_fraction=0.2, decay_shape=shape, min_lr_ratio=0.0)
        assert all(v == 1.0 for v in c[10:80])
        assert c[80] < 1.0 and c[-1] == pytest.approx(0.0, abs=1e-9)
    lin, sqrt = curve(schedule="wsd", decay_shape="linear"), curve(schedule="wsd", decay_shape="sqrt")
    assert sqrt[85] < lin[85]  # 1 - sqrt(t) falls faster early in the decay


def test_adamw_groups_decay_matrices_only():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=16,
                      moe=MoEConfig(n_experts=4, top_k=2, d_expert=16, first_dense_layers=1))
    model = build_model(cfg)
    opt = build_optimizer(model, BASE)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = {id(p) for p in no_decay["params"]}
    assert id(model.embed.weight) in ids and id(model.norm.weight) in ids
    assert id(model.blocks[1].mlp.experts.gate_up_proj) not in ids


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_the_embedding_learns_at_its_own_multiple_of_the_lr(optimizer):
    from glassroom.train.optim import set_lr

    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=16)
    model = build_model(cfg)
    opt = build_optimizer(model, dataclasses.replace(BASE, optimizer=optimizer, embedding_lr_multiplier=10.0))
    assert set_lr(opt, 0.5) == pytest.approx(0.5 * BASE.lr)   # the reported lr stays train.lr's
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    embed, head = by_param[id(model.embed.weight)], by_param[id(model.head.weight)]
    assert embed["lr"] == pytest.approx(10 * 0.5 * BASE.lr) and embed["weight_decay"] == 0.0
    assert head["lr"] == pytest.approx(0.5 * BASE.lr) and len(embed["params"]) == 1
    # Every parameter is in exactly one group.
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())


def test_muon_takes_hidden_matrices_and_trains():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=16)
    model = build_model(cfg)
    opt = build_optimizer(model, dataclasses.replace(BASE, optimizer="muon"))
    assert isinstance(opt, CombinedOptimizer)
    muon, adamw = opt.optimizers
    assert isinstance(muon, torch.optim.Muon)
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    assert id(model.blocks[0].attn.wq.weight) in muon_ids and id(model.embed.weight) not in muon_ids
    tokens = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(20):
        logits = model(tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.85 * losses[0]
