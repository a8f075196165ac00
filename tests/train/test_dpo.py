"""DPO (glassroom/train/dpo.py): the losses against hand computation and trl's documented formulas,
sequence log-probabilities, the pair schedule. The training runs are in tests/train/test_dpo_train.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from glassroom.errors import GlassroomError
from glassroom.train.dpo import dpo_loss, pair_indices, pair_terms, sequence_logps

PC, PR = torch.tensor([-10.0, -20.0, -5.0]), torch.tensor([-12.0, -18.0, -5.0])
RC, RR = torch.tensor([-11.0, -19.0, -6.0]), torch.tensor([-11.5, -19.5, -4.0])


def test_sigmoid_loss_and_metrics_by_hand():
    beta = 0.1
    loss, metrics = dpo_loss(PC, PR, RC, RR, beta, "sigmoid")
    # pair 0: (-10 - -12) - (-11 - -11.5) = 2 - 0.5 = 1.5; pair 1: -2 - 0.5 = -2.5; pair 2: 0 - (-2) = 2
    h = [1.5, -2.5, 2.0]
    by_hand = [math.log(1 + math.exp(-beta * x)) for x in h]  # -log sigmoid(beta h)
    assert loss.item() == pytest.approx(sum(by_hand) / 3, rel=1e-6)
    chosen = [beta * 1.0, beta * -1.0, beta * 1.0]  # beta (pc - rc)
    rejected = [beta * -0.5, beta * 1.5, beta * -1.0]  # beta (pr - rr)
    assert metrics["dpo/reward_chosen"] == pytest.approx(sum(chosen) / 3, abs=1e-7)
    assert metrics["dpo/reward_rejected"] == pytest.approx(sum(rejected) / 3, abs=1e-7)
    assert metrics["dpo/margin"] == pytest.approx((sum(chosen) - sum(rejected)) / 3)
    assert metrics["dpo/accuracy"] == pytest.approx(2 / 3)  # pair 1 prefers the rejected answer
    assert metrics["dpo/loss"] == pytest.approx(loss.item())


def test_ipo_loss_by_hand():
    beta = 0.5
    loss, _ = dpo_loss(PC, PR, RC, RR, beta, "ipo")
    h = [1.5, -2.5, 2.0]
    assert loss.item() == pytest.approx(sum((x - 1 / (2 * beta)) ** 2 for x in h) / 3, rel=1e-6)


def trl_formula(pc, pr, rc, rr, beta, loss_type):
    """DPOTrainer.dpo_loss as trl documents it (trl is not a dependency, so not imported):
    logits = (pi_logratios - ref_logratios); sigmoid: -logsigmoid(beta * logits) (label_smoothing 0);
    ipo: (logits - 1 / (2 * beta)) ** 2; rewards = beta * (policy - reference)."""
    logits = (pc - pr) - (rc - rr)
    if loss_type == "sigmoid":
        losses = -torch.nn.functional.logsigmoid(beta * logits)
    else:
        losses = (logits - 1 / (2 * beta)) ** 2
    return losses, beta * (pc - rc), beta * (pr - rr)


@pytest.mark.parametrize("variant", ["sigmoid", "ipo"])
def test_matches_trl_formula(variant):
    gen = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(64, generator=gen) * 20 - 50 for _ in range(4))
    terms = pair_terms(pc, pr, rc, rr, 0.2, variant)
    losses, chosen, rejected = trl_formula(pc, pr, rc, rr, 0.2, variant)
    torch.testing.assert_close(terms["loss"], losses)
    torch.testing.assert_close(terms["reward_chosen"], chosen)
    torch.testing.assert_close(terms["reward_rejected"], rejected)
    _, metrics = dpo_loss(pc, pr, rc, rr, 0.2, variant)
    assert metrics["dpo/accuracy"] == pytest.approx(float((chosen > rejected).float().mean()))


def test_gradient_pushes_chosen_up_and_rejected_down():
    pc, pr = PC.clone().requires_grad_(), PR.clone().requires_grad_()
    loss, _ = dpo_loss(pc, pr, RC, RR, 0.1, "sigmoid")
    loss.backward()
    assert (pc.grad < 0).all() and (pr.grad > 0).all()  # descending raises chosen, lowers rejected


@pytest.mark.parametrize("beta,variant,words", [(0.0, "sigmoid", "train.dpo_beta"), (-1.0, "ipo", "train.dpo_beta"),
                                                (float("nan"), "sigmoid", "train.dpo_beta"),
                                                (0.1, "hinge", "train.dpo_loss")])
def test_bad_beta_or_variant_is_one_line(beta, variant, words):
    with pytest.raises(GlassroomError) as err:
        dpo_loss(PC, PR, RC, RR, beta, variant)
    assert words in str(err.value) and "\n" not in str(err.value)


class Bigram(torch.nn.Module):
    """A model whose logits at position t depend on token t only: log-probabilities easy to check."""

    def __init__(self, vocab: int = 7):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(1)))

    def forward(self, ids, **kwargs):
        return type("Out", (), {"logits": self.table[ids]})()


def test_sequence_logps_sums_masked_targets_only():
    model = Bigram()
    tokens = torch.tensor([[1, 2, 3, 4, 5], [6, 5, 4, 3, 0]])
    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.uint8)  # mask[:, 0] is never a target
    got = sequence_logps(model, tokens, mask)
    logp = torch.log_softmax(model.table.detach().double(), -1)
    expected = [logp[2, 3] + logp[3, 4], logp[4, 3] + logp[3, 0]]  # targets 2, 3 of row 0; 3, 4 of row 1
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), torch.stack(expected))
    changed = tokens.clone()
    changed[1, 1] = 2  # a token that is only context for an unmasked target
    assert sequence_logps(model, changed, mask)[1] == got[1]


def test_pair_schedule_is_a_pure_seeded_permutation_per_epoch():
    n, batch = 10, 4
    steps = [pair_indices(n, 3, s, batch) for s in range(5)]  # 20 pairs = 2 epochs
    first, second = np.concatenate(steps)[:10], np.concatenate(steps)[10:]
    assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))
    assert list(first) != list(second) and list(first) != list(range(n))
    assert (pair_indices(n, 3, 2, batch) == steps[2]).all()  # recomputed alone: the same
    assert (pair_indices(n, 4, 0, batch) != steps[0]).any()  # another seed, another order
    ranks = [pair_indices(n, 3, 1, batch, r, 2) for r in range(2)]
    assert (np.concatenate(ranks) == steps[1]).all()  # ranks split the global batch


def test_reference_cache_is_computed_once_and_checked(tmp_path):
    from glassroom.train.dpo_reference import REFERENCE_FILE, REFERENCE_META, load_or_compute

    calls = []

    def compute():
        calls.append(1)
        return np.array([[-1.0, -2.0]] * 3, np.float32), np.array([[-3.0, -4.0]], np.float32), 2

    train, held, meta, computed = load_or_compute(tmp_path, "d1", 0, compute)
    assert computed and len(calls) == 1 and meta["pairs"] == 4 and meta["forwards"] == 2
    again = load_or_compute(tmp_path, "d1", 7, compute)  # a resume: read back, not computed
    assert len(calls) == 1 and not again[3]
    np.testing.assert_array_equal(again[0], train)
    np.testing.assert_array_equal(again[1], held)
    for digest, step, words in (("d2", 7, "digest differs"), ("d1", 7, "cannot be read")):
        if words == "cannot be read":
            np.save(tmp_path / REFERENCE_FILE, np.zeros((2, 2), np.float32))  # fewer rows than the json says
        with pytest.raises(GlassroomError) as err:
            load_or_compute(tmp_path, digest, step, compute)
        assert words in str(err.value) and "\n" not in str(err.value)
    (tmp_path / REFERENCE_META).unlink()
    with pytest.raises(GlassroomError, match="missing, and the run is at step 7"):
        load_or_compute(tmp_path, "d1", 7, compute)
    assert len(calls) == 1
