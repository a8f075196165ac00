"""Direct preference optimisation: sequence log-probabilities, the DPO and IPO losses, pair batches.

A preference dataset (`task: dpo`, glassroom/data/chat.py) holds documents in pairs: document 2i
is a prompt and its chosen answer, 2i + 1 the same prompt and its rejected answer; each one's mask
is 1 on the final answer's tokens (as targets). A pair's log-probability under a model is the sum
of log p(token | tokens before it) over those targets (`sequence_logps`, summed in fp32).

With pi = policy (the model being trained) and ref = the starting model (log-probabilities cached
once, glassroom/train/dpo_reference.py), the implicit rewards are
    reward_chosen = beta * (pi_chosen - ref_chosen), reward_rejected = beta * (pi_rejected - ref_rejected)
and, with h = (pi_chosen - pi_rejected) - (ref_chosen - ref_rejected),
    sigmoid (the DPO paper, Rafailov et al. 2023): loss = -log sigmoid(beta * h)
    ipo (Azar et al. 2023):                        loss = (h - 1 / (2 beta))^2
(trl's DPOTrainer writes the same two formulas; for ipo it averages log-probabilities over the
answer's tokens where glassroom, like the paper, sums them.)

Pairs: every domain's train pairs together, in an order shuffled per epoch by (seed, epoch); step
s takes global pairs [s * B, (s + 1) * B) (B = train.batch_size pairs), rank r of W the r-th slice,
so a batch is a pure function of (dataset, seed, step) and a resumed run gets the batches it would
have had. A pair longer than seq_len + 1 tokens is truncated at the end (train.overlong: truncate,
the default) or dropped (drop); a pair whose chosen or rejected side has no trained target left is
dropped, and so is a pair whose two sides are the same tokens once truncated (answers that differ
only past seq_len + 1 tokens: h is 0 whatever the model, so it trains nothing and counts as a wrong
answer in dpo/accuracy). Each is counted once (`PairSet.counts`: truncated = truncated and kept,
dropped_overlong, dropped_empty, dropped_identical; journaled at the start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from glassroom.data.chat import Conversations
from glassroom.data.mixture import hash_key, permute
from glassroom.errors import GlassroomError

VARIANTS = ("sigmoid", "ipo")


# ------------------------------------------------------------------ the math

def sequence_logps(model, tokens: torch.Tensor, mask: torch.Tensor, segments=None, positions=None) -> torch.Tensor:
    """Sum of log p over the mask-1 targets of each row: (batch,) float32.

    tokens and mask are (batch, T): the model reads tokens[:, :-1] and predicts tokens[:, 1:];
    mask[:, i] = 1 means "token i is a trained target" (mask[:, 0] is never used). segments and
    positions (batch, T - 1), when given, go to the model as they are (packed rows)."""
    kwargs = {}
    if segments is not None:
        kwargs = {"segments": segments, "positions": positions}
    return logps_of(model(tokens[:, :-1], **kwargs).logits, tokens, mask)[0]


def logps_of(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, z_loss: bool = False):
    """(sum of log p over the mask-1 targets per row (batch,) float32, and with z_loss the mean of
    logsumexp(logits)^2 over those targets, else None) from the logits of tokens[:, :-1]."""
    logits = logits.float()
    targets, trained = tokens[:, 1:], mask[:, 1:] > 0
    token_logp = -F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
    z = None
    if z_loss:
        z = torch.where(trained, torch.logsumexp(logits, dim=-1).pow(2), 0.0).sum() / trained.sum().clamp(min=1)
    return torch.where(trained, token_logp, 0.0).sum(1), z


def pair_terms(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float, variant: str) -> dict:
    """Per pair (tensors of shape (pairs,)): loss, reward_chosen, reward_rejected."""
    if not beta > 0 or not math.isfinite(beta):
        raise GlassroomError(f"train.dpo_beta: must be above 0, got {beta}")
    if variant not in VARIANTS:
        raise GlassroomError(f"train.dpo_loss: {variant!r} is not a DPO loss (expected {' or '.join(VARIANTS)})")
    h = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)
    loss = -F.logsigmoid(beta * h) if variant == "sigmoid" else (h - 1.0 / (2.0 * beta)) ** 2
    return {"loss": loss, "reward_chosen": beta * (policy_chosen - ref_chosen).detach(),
            "reward_rejected": beta * (policy_rejected - ref_rejected).detach()}


def metrics_from_sums(sums: torch.Tensor, prefix: str) -> dict[str, float]:
    """Metrics from SUM_NAMES totals: mean loss, rewards, margin and accuracy over the pairs counted."""
    totals = dict(zip(SUM_NAMES, (float(v) for v in sums)))
    n = totals["pairs"]
    if n <= 0:
        return {}
    chosen, rejected = totals["reward_chosen"] / n, totals["reward_rejected"] / n
    return {f"{prefix}/loss": totals["loss"] / n, f"{prefix}/reward_chosen": chosen,
            f"{prefix}/reward_rejected": rejected, f"{prefix}/margin": chosen - rejected,
            f"{prefix}/accuracy": totals["correct"] / n}


SUM_NAMES = ("loss", "reward_chosen", "reward_rejected", "correct", "pairs")


def term_sums(terms: dict) -> torch.Tensor:
    """The SUM_NAMES totals of one batch's pair_terms (float64, for all-reduce and accumulation)."""
    return torch.stack([terms["loss"].detach().double().sum(), terms["reward_chosen"].double().sum(),
                        terms["reward_rejected"].double().sum(),
                        (terms["reward_chosen"] > terms["reward_rejected"]).double().sum(),
                        torch.tensor(float(len(terms["loss"])), dtype=torch.float64, device=terms["loss"].device)])


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float = 0.1,
             variant: str = "sigmoid") -> tuple[torch.Tensor, dict[str, float]]:
    """(mean loss over the pairs, {dpo/reward_chosen, dpo/reward_rejected, dpo/margin, dpo/accuracy, dpo/loss})."""
    terms = pair_terms(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, variant)
    return terms["loss"].mean(), metrics_from_sums(term_sums(terms), "dpo")


# ------------------------------------------------------------------ pairs

@dataclass
class PairSet:
    """The usable pairs of one split: where each side lies in its domain's shard, and its length."""

    split: str
    domains: list[str]
    conversations: list  # glassroom.data.chat.Conversations per domain
    domain: np.ndarray  # (n,) index into domains
    start: np.ndarray  # (n, 2): first token of chosen, rejected
    length: np.ndarray  # (n, 2): tokens used (after truncation)
    counts: dict = field(default_factory=dict)  # pairs, truncated, dropped_overlong, dropped_empty, dropped_identical

    def __len__(self) -> int:
        return len(self.domain)

    def rows(self, index, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
        """tokens (2k, L) int64 and mask (2k, L) uint8 for pairs `index`: the k chosen sides, then
        the k rejected ones, padded at the end to the longest (pad = EOS, mask 0)."""
        index = np.asarray(index, dtype=np.int64)
        width = int(self.length[index].max()) if len(index) else 1
        tokens = np.full((2 * len(index), width), eos_id, dtype=np.int64)
        mask = np.zeros((2 * len(index), width), dtype=np.uint8)
        for side in (0, 1):
            for j, i in enumerate(index):
                conv = self.conversations[self.domain[i]]
                a, n = int(self.start[i, side]), int(self.length[i, side])
                tokens[side * len(index) + j, :n] = conv.tokens[a: a + n]
                mask[side * len(index) + j, :n] = conv.mask[a: a + n]
        return tokens, mask


def open_pairs(dataset, domains: list[str], split: str, seq_len: int, overlong: str = "truncate") -> PairSet:
    """The pairs of `split` in `domains`, checked and counted (see the module doc)."""
    task = dataset.manifest.get("task", "pretrain")
    if task != "dpo":
        raise GlassroomError(f"{dataset.path}/manifest.json: task is {task!r}, not 'dpo'; train.task: dpo needs "
                             "preference data (a recipe with task: dpo and a preferences source)")
    limit = seq_len + 1
    convs, dom, start, length = [], [], [], []
    counts = {"pairs": 0, "truncated": 0, "dropped_overlong": 0, "dropped_empty": 0, "dropped_identical": 0}
    for d, name in enumerate(domains):
        conv = Conversations(dataset.path, name, split)  # refuses an odd number of documents
        off = np.asarray(conv.offsets, dtype=np.int64)
        convs.append(conv)
        for p in range(0, len(off) - 1, 2):
            counts["pairs"] += 1
            sides = [(int(off[p + s]), int(off[p + s + 1] - off[p + s])) for s in (0, 1)]
            long = max(n for _, n in sides) > limit
            if long and overlong == "drop":
                counts["dropped_overlong"] += 1
                continue
            sides = [(a, min(n, limit)) for a, n in sides]
            if not all(np.asarray(conv.mask[a + 1: a + n]).any() for a, n in sides):
                counts["dropped_empty"] += 1  # truncated or not, nothing of the answer is trained
                continue
            (a, n), (b, m) = sides
            if n == m and np.array_equal(conv.tokens[a: a + n], conv.tokens[b: b + m]):
                counts["dropped_identical"] += 1  # the answers differ only past the cut
                continue
            counts["truncated"] += long  # truncated and kept
            dom.append(d)
            start.append([a for a, _ in sides])
            length.append([n for _, n in sides])
    counts["used"] = len(dom)
    return PairSet(split, list(domains), convs, np.asarray(dom, dtype=np.int64),
                   np.asarray(start, dtype=np.int64).reshape(-1, 2), np.asarray(length, dtype=np.int64).reshape(-1, 2),
                   counts)


def pair_indices(n: int, seed: int, step: int, batch_size: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
    """The pairs (indices into a PairSet of n) of `rank` at `step`: a pure function of the arguments."""
    if n < 1:
        raise GlassroomError("no usable train pairs")
    per_rank = batch_size // world_size
    g = np.arange(step * batch_size + rank * per_rank, step * batch_size + (rank + 1) * per_rank, dtype=np.int64)
    epoch, j = np.divmod(g, n)
    out = np.empty(len(g), dtype=np.int64)
    for e in np.unique(epoch):
        pick = epoch == e
        out[pick] = permute(j[pick], n, hash_key(seed, "dpo-pairs", int(e))).astype(np.int64)
    return out
