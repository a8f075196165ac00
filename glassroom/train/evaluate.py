"""Per-domain held-out loss and bits per byte, plus their macro average.

Each domain's validation shard, read after an EOS, is cut into consecutive windows of seq_len + 1
tokens overlapping by one (the first `eval_sequences` of them, the same every time;
glassroom.data.mixture.Dataset.validation_batches), so each token is a target once. Bits per byte = (summed loss in nats / ln 2) over
the UTF-8 bytes of text those tokens cover, so tokenizers of different sizes compare fairly. Under
torchrun the windows are split across ranks and the sums reduced.

For `train.task: sft` (evaluate_masked): each domain's held-out conversations, packed as in training,
scored on their mask-1 targets only (held-out assistant loss), bits per byte over the bytes of those
targets' text.
"""

from __future__ import annotations

import contextlib
import math
import numpy as np
import torch
import torch.nn.functional as F

from glassroom.data.packing import open_packed_set, validation_rows
from glassroom.train.parallel import DistInfo, all_reduce_sum


class DomainValidation:
    """The fixed evaluation sequences of one domain: token ids and the bytes their targets cover."""

    def __init__(self, dataset, domain: str, seq_len: int, max_sequences: int):
        pairs = list(dataset.validation_batches(domain, seq_len, 1, max_sequences))
        self.domain = domain
        self.tokens = np.concatenate([t for t, _ in pairs]) if pairs else np.zeros((0, seq_len + 1), np.int64)
        self.window_bytes = np.array([b for _, b in pairs], dtype=np.float64)


def load_validation(dataset, domains: list[str], seq_len: int, max_sequences: int) -> list[DomainValidation]:
    return [DomainValidation(dataset, d, seq_len, max_sequences) for d in domains]


@contextlib.contextmanager
def _eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def _add_domain(results: dict[str, float], domain: str, totals: torch.Tensor) -> None:
    """eval/<domain>/loss and bpb from the reduced (loss sum, targets, bytes), when it had targets."""
    if totals[1] > 0:
        results[f"eval/{domain}/loss"] = float(totals[0] / totals[1])
        results[f"eval/{domain}/bpb"] = float(totals[0]) / math.log(2) / max(float(totals[2]), 1.0)


def _add_macro(results: dict[str, float], domains: list[str]) -> dict[str, float]:
    """eval/macro/loss and bpb: the mean over the domains that were measured."""
    measured = [d for d in domains if f"eval/{d}/loss" in results]
    if measured:
        results["eval/macro/loss"] = sum(results[f"eval/{d}/loss"] for d in measured) / len(measured)
        results["eval/macro/bpb"] = sum(results[f"eval/{d}/bpb"] for d in measured) / len(measured)
    return results


@torch.no_grad()
def evaluate(model, sets: list[DomainValidation], micro_batch: int, device: torch.device,
             autocast_dtype, info: DistInfo) -> dict[str, float]:
    """`eval/<domain>/loss`, `eval/<domain>/bpb`, and `eval/macro/loss|bpb` (mean over domains)."""
    results: dict[str, float] = {}
    with _eval_mode(model):
        for vs in sets:
            # Every rank runs the same number of forwards (FSDP gathers weights collectively).
            usable = len(vs.tokens) - len(vs.tokens) % info.world_size
            rows = vs.tokens[info.rank : usable : info.world_size]
            totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, tokens, bytes
            totals[2] += float(vs.window_bytes[info.rank : usable : info.world_size].sum())
            for start in range(0, len(rows), micro_batch):
                batch = torch.from_numpy(rows[start : start + micro_batch]).to(device)
                with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
                    logits = model(batch[:, :-1]).logits
                loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
                totals[0] += loss.double()
                totals[1] += batch[:, 1:].numel()
            all_reduce_sum(totals, info)
            _add_domain(results, vs.domain, totals)
    return _add_macro(results, [vs.domain for vs in sets])


# ------------------------------------------------------------------ post-training (train.task: sft)


class MaskedValidation:
    """One domain's held-out conversations, packed (glassroom.data.packing.validation_rows, the first
    eval_sequences rows), and the UTF-8 bytes of the text of each row's mask-1 targets (assistant
    content; `<|im_end|>` is trained but counts no bytes)."""

    def __init__(self, domain: str, rows, tokenizer):
        self.domain, self.rows = domain, rows
        self.row_bytes = np.zeros(0 if rows is None else len(rows.tokens), dtype=np.float64)
        for r in range(len(self.row_bytes)):
            targets, mask = rows.tokens[r, 1:], rows.mask[r] > 0
            # runs of consecutive trained targets, decoded as text
            edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
            for a, b in zip(edges[::2], edges[1::2]):
                text = tokenizer.decode(targets[a:b].tolist(), skip_special_tokens=True)
                self.row_bytes[r] += len(text.encode("utf-8"))


def load_masked_validation(dataset, seq_len: int, max_rows: int, overlong: str) -> list[MaskedValidation]:
    packed = open_packed_set(dataset, dataset.domains, "validation", seq_len, overlong)
    tokenizer = dataset.tokenizer()
    return [MaskedValidation(d, validation_rows(packed, i, max_rows), tokenizer) for i, d in enumerate(dataset.domains)]


@torch.no_grad()
def evaluate_masked(model, sets: list[MaskedValidation], micro_batch: int, device: torch.device,
                    autocast_dtype, info: DistInfo) -> dict[str, float]:
    """`eval/<domain>/loss|bpb` over held-out mask-1 targets (assistant tokens), and `eval/macro/...`."""
    results: dict[str, float] = {}
    with _eval_mode(model):
        for vs in sets:
            if vs.rows is None:
                continue
            usable = len(vs.row_bytes) - len(vs.row_bytes) % info.world_size
            pick = np.arange(info.rank, usable, info.world_size)
            totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, targets, bytes
            totals[2] += float(vs.row_bytes[pick].sum())
            for start in range(0, len(pick), micro_batch):
                sel = pick[start: start + micro_batch]
                tokens = torch.from_numpy(vs.rows.tokens[sel]).to(device)
                mask = torch.from_numpy(vs.rows.mask[sel]).to(device) > 0
                with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
                    logits = model(tokens[:, :-1], segments=torch.from_numpy(vs.rows.segments[sel]).to(device),
                                   positions=torch.from_numpy(vs.rows.positions[sel]).to(device)).logits
                per_token = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
                totals[0] += torch.where(mask.flatten(), per_token, 0.0).sum().double()
                totals[1] += mask.sum()
            all_reduce_sum(totals, info)
            _add_domain(results, vs.domain, totals)
    return _add_macro(results, [vs.domain for vs in sets])
