"""Packing conversations into training rows for `train.task: sft` (docs/post-training.md).

Each row holds seq_len + 1 tokens: whole conversations placed one after another (first fit, in an
order shuffled per epoch), then padding. Row r gives the model inputs row[:-1] with `segments`
(the conversation's index within the row, -1 on padding) and `positions` (restarting at 0 in each
conversation), and targets row[1:] with a loss `mask`: the conversation's own mask (1 on assistant
content and its `<|im_end|>`), 0 on a conversation's first token (it has no context in the row)
and on padding. So no target is predicted across a conversation boundary, and the model's
block-diagonal mask keeps attention inside each conversation.

A conversation longer than seq_len + 1 tokens is truncated to its first seq_len + 1 tokens
(`train.overlong: truncate`, the default) or left out (`drop`); both are counted (`PackedSet.counts`).
A conversation left with no trained target (its answer starts past seq_len + 1 tokens) is left out
and counted as `dropped_empty`: it would only add rows that train nothing.

Which rows a step trains on: as in pretraining (glassroom.data.mixture), global row g is assigned
a domain by the data.weights block schedule (so weights sample rows, i.e. conversations, per
domain); the k-th row of a domain is row k - (rows of earlier epochs) of that domain's epoch e,
whose packing is a pure function of (dataset, seed, domain, e). So the rows of step s are a pure
function of (dataset, weights, seed, s), and a resumed run gets exactly the rows it would have had.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glassroom.data.chat import Conversations
from glassroom.data.mixture import BLOCK, BLOCKS_KEPT, block_counts, check_weights, hash_key
from glassroom.errors import GlassroomError

OVERLONG = ("truncate", "drop")


def open_conversations(path, domain: str, split: str):
    """glassroom.data.chat.Conversations of one shard: .tokens, .mask, .offsets."""
    return Conversations(path, domain, split)


@dataclass
class PackedRows:
    """Rows of packed conversations, arrays aligned on the row: tokens (b, L + 1) int64, and on the
    L inputs/targets: mask (b, L) float32, segments and positions (b, L) int64; domain_index (b,)."""

    tokens: np.ndarray
    mask: np.ndarray
    segments: np.ndarray
    positions: np.ndarray
    domain_index: np.ndarray

    @property
    def real_tokens(self) -> int:
        """Input tokens that are not padding."""
        return int((self.segments >= 0).sum())


def first_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Indices into `lengths` grouped into rows of at most `capacity` tokens: each item goes to the
    first row with room, else opens a new row (items in the given order). A max-tree over the rows'
    free room finds that row in O(log n), so an epoch of a million conversations packs in seconds."""
    sizes = [int(n) for n in np.asarray(lengths, dtype=np.int64)]
    if any(n > capacity or n < 1 for n in sizes):
        raise ValueError(f"first_fit: items must hold 1 to {capacity} tokens")
    leaves = 1
    while leaves < max(len(sizes), 1):
        leaves *= 2
    free = [capacity] * (2 * leaves)  # rows not opened yet have all their room
    rows: list[list[int]] = []
    for i, n in enumerate(sizes):
        node = 1
        while node < leaves:  # the leftmost row with room for n
            node = 2 * node if free[2 * node] >= n else 2 * node + 1
        row = node - leaves
        if row == len(rows):
            rows.append([])
        rows[row].append(i)
        free[node] -= n
        node //= 2
        while node:
            free[node] = max(free[2 * node], free[2 * node + 1])
            node //= 2
    return rows


@dataclass
class DomainConversations:
    """One domain's usable conversations of a split: start and length (after truncation)."""

    conversations: object
    start: np.ndarray
    length: np.ndarray


@dataclass
class PackedSet:
    """Every domain's conversations of one split, ready to pack into rows of seq_len + 1 tokens."""

    seq_len: int
    domains: list[str]
    parts: list[DomainConversations]
    pad_id: int
    counts: dict = field(default_factory=dict)  # conversations, truncated, dropped

    def row(self, d: int, members: list[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        """tokens (L + 1,), mask, segments, positions (L,) of one row of domain d holding
        conversations `members` ((index, length) pairs) in that order."""
        width = self.seq_len + 1
        part = self.parts[d]
        tokens = np.full(width, self.pad_id, dtype=np.int64)
        target_mask = np.zeros(width, dtype=np.float32)
        segments = np.full(width, -1, dtype=np.int64)
        positions = np.zeros(width, dtype=np.int64)
        at = 0
        for seg, (i, n) in enumerate(members):
            a = int(part.start[i])
            tokens[at: at + n] = part.conversations.tokens[a: a + n]
            target_mask[at + 1: at + n] = part.conversations.mask[a + 1: a + n]  # not its first token
            segments[at: at + n] = seg
            positions[at: at + n] = np.arange(n)
            at += n
        return tokens, target_mask[1:], segments[:-1], positions[:-1]

    def stack(self, rows: list[tuple[int, list[tuple[int, int]]]]) -> PackedRows:
        """PackedRows of (domain, members) rows."""
        built = [self.row(d, members) for d, members in rows]
        return PackedRows(tokens=np.stack([b[0] for b in built]), mask=np.stack([b[1] for b in built]),
                          segments=np.stack([b[2] for b in built]), positions=np.stack([b[3] for b in built]),
                          domain_index=np.array([d for d, _ in rows], dtype=np.int64))


def open_packed_set(dataset, domains: list[str], split: str, seq_len: int,
                    overlong: str = "truncate") -> PackedSet:
    """The conversations of `split` in `domains`, truncated or dropped beyond seq_len + 1 tokens."""
    if overlong not in OVERLONG:
        raise GlassroomError(f"train.overlong: {overlong!r} is not one of {', '.join(OVERLONG)}")
    limit = seq_len + 1
    parts, counts = [], {"conversations": 0, "truncated": 0, "dropped": 0, "dropped_empty": 0}
    for name in domains:
        conv = open_conversations(dataset.path, name, split)
        off = np.asarray(conv.offsets, dtype=np.int64)
        start, length = off[:-1], np.diff(off)
        counts["conversations"] += len(length)
        long = length > limit
        if overlong == "drop":
            counts["dropped"] += int(long.sum())
            start, length = start[~long], length[~long]
        else:
            counts["truncated"] += int(long.sum())
            length = np.minimum(length, limit)
        trained = _trained_targets(conv.mask, start, length)
        counts["dropped_empty"] += int((trained <= 0).sum())
        start, length = start[trained > 0], length[trained > 0]
        parts.append(DomainConversations(conv, start, length))
    return PackedSet(seq_len, list(domains), parts, int(dataset.eos_id), counts)


def _trained_targets(mask, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Mask-1 targets of each conversation (start, length): its mask past its first token."""
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    total = np.concatenate([[0], np.cumsum(np.asarray(mask, dtype=np.uint8), dtype=np.int64)])
    return total[start + length] - total[start + 1]


def describe_counts(counts: dict, overlong: str) -> str:
    """'N of M conversations truncated' (or dropped), for the start event; conversations left with
    no trained token are added when there are any."""
    done = "dropped" if overlong == "drop" else "truncated"
    text = f"{counts[done]} of {counts['conversations']} conversations {done} (longer than seq_len + 1 tokens)"
    if counts.get("dropped_empty"):
        text += f", {counts['dropped_empty']} dropped (no trained token left within seq_len + 1 tokens)"
    return text


class Packer:
    """The packed rows of every step: see the module doc."""

    def __init__(self, packed: PackedSet, weights: dict[str, float], batch_size: int, seed: int = 0):
        self.packed, self.batch_size, self.seed = packed, batch_size, seed
        self.weights = check_weights(dict(weights), packed.domains)
        self.domains = list(self.weights)
        self.index = [packed.domains.index(d) for d in self.domains]
        for d, i in zip(self.domains, self.index):
            if len(packed.parts[i].length) == 0:
                raise GlassroomError(f"data.weights.{d}: domain {d} has no usable train conversation; give it weight 0")
        self.counts = block_counts([self.weights[d] for d in self.domains])
        self._epochs: dict[int, list[list[list[tuple[int, int]]]]] = {i: [] for i in range(len(self.domains))}
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # this packer's last BLOCKS_KEPT blocks

    def epoch_rows(self, d: int, epoch: int) -> list[list[tuple[int, int]]]:
        """Rows of domain d (index into self.domains) in `epoch`: its conversations in an order
        shuffled by (seed, domain, epoch), first-fit packed."""
        cached = self._epochs[d]
        while len(cached) <= epoch:
            e = len(cached)
            part = self.packed.parts[self.index[d]]
            rng = np.random.default_rng(hash_key(self.seed, "sft/" + self.domains[d], e))
            order = rng.permutation(len(part.length))
            rows = first_fit(part.length[order], self.packed.seq_len + 1)
            cached.append([[(int(order[i]), int(part.length[order[i]])) for i in row] for row in rows])
        return cached[epoch]

    def domain_row(self, d: int, k: int) -> list[tuple[int, int]]:
        epoch = 0
        while k >= len(self.epoch_rows(d, epoch)):
            k -= len(self.epoch_rows(d, epoch))
            epoch += 1
        return self.epoch_rows(d, epoch)[k]

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        if b in self._blocks:
            return self._blocks[b]
        slots = np.random.default_rng([self.seed, b, 0x736674]).permutation(
            np.repeat(np.arange(len(self.domains), dtype=np.int64), self.counts))
        order = np.argsort(slots, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        rank = np.empty(BLOCK, dtype=np.int64)
        rank[order] = np.arange(BLOCK) - np.repeat(starts, self.counts)
        if len(self._blocks) >= BLOCKS_KEPT:
            del self._blocks[next(iter(self._blocks))]
        self._blocks[b] = (slots, rank)
        return slots, rank

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> PackedRows:
        """The rows of data-parallel `rank` at `step`: a pure function of the arguments."""
        per_rank = self.batch_size // world_size
        rows = []
        for g in range(step * self.batch_size + rank * per_rank, step * self.batch_size + (rank + 1) * per_rank):
            slots, slot_rank = self._block(g // BLOCK)
            d = int(slots[g % BLOCK])
            k = (g // BLOCK) * int(self.counts[d]) + int(slot_rank[g % BLOCK])
            rows.append((self.index[d], self.domain_row(d, k)))
        out = self.packed.stack(rows)
        out.domain_index = np.array([self.domains.index(self.packed.domains[i]) for i, _ in rows], dtype=np.int64)
        return out


def validation_rows(packed: PackedSet, d: int, max_rows: int) -> PackedRows | None:
    """Domain d's held-out conversations in shard order, first-fit packed, the first max_rows rows."""
    part = packed.parts[d]
    if len(part.length) == 0:
        return None
    rows = first_fit(part.length, packed.seq_len + 1)[:max_rows]
    return packed.stack([(d, [(i, int(part.length[i])) for i in row]) for row in rows])


def padding_shares(packed: PackedSet) -> dict[str, float]:
    """Share of padding tokens in rows of seq_len + 1: packing (first fit, shard order) against
    padding each conversation to a row of its own."""
    width = packed.seq_len + 1
    lengths = np.concatenate([p.length for p in packed.parts]) if packed.parts else np.zeros(0, np.int64)
    if len(lengths) == 0:
        return {"packed": 0.0, "padded": 0.0, "rows_packed": 0, "rows_padded": 0}
    rows = sum(len(first_fit(p.length, width)) for p in packed.parts)
    real = int(lengths.sum())
    return {"packed": 1 - real / (rows * width), "padded": 1 - real / (len(lengths) * width),
            "rows_packed": rows, "rows_padded": int(len(lengths))}
