"""Domain (and domain x quality cell) weights to deterministic, resumable batches; epochs; validation.

The batch of step s is a pure function of (dataset, weights, seed, s): no iterator state, so a run
restarted at step s gets exactly the batch it would have had. How a global sequence index g maps
to tokens:

1. Domain. Sequences come in blocks of BLOCK slots. Each domain gets round(weight * BLOCK) slots of
   every block (largest remainder), in an order shuffled by (seed, block). So over any whole block
   the realised shares equal the weights to 1/BLOCK, and each domain's sequences are numbered
   k = 0, 1, 2, ... in order.
2. Window. A domain's train tokens are cut into windows of seq_len + 1 tokens starting every seq_len
   tokens (inputs and targets overlap by one). Its k-th sequence is window perm_e(k mod n) of epoch
   e = k div n, where perm_e is a keyed Feistel permutation of the n windows (no memory, any n).

Weights are keyed by domain (`prose`: all its train tokens) or by quality cell (`prose:q4`: the
train tokens of bucket 4, manifest cells[].token_range, one contiguous range since shards are
ordered by bucket; docs/data-quality.md). A cell is scheduled exactly like a domain, over its own
token range, with its key in place of the domain name; domain-only weights give the same batches
as before cells existed.

Data-parallel rank r of W takes global indices [s*B + r*B/W, s*B + (r+1)*B/W): ranks never overlap.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glassroom.data.shards import Shard, check_manifest, read_manifest
from glassroom.data.tokenizer import load_tokenizer
from glassroom.errors import GlassroomError

BLOCK = 65536  # domain slots per schedule block: shares exact to 1/65536 over every block
BLOCKS_KEPT = 4  # schedule blocks each mixture (and packer) keeps computed: a step reads one, rarely two
_CELL = re.compile(r"q(0|[1-9][0-9]?)")  # q0..q99, no leading zeros: one spelling per cell
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


class Dataset:
    """A built dataset folder: its manifest, and shards opened on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        check_manifest(self.manifest, self.path / "manifest.json")
        self.domains: list[str] = list(self.manifest["domains"])
        self.dtype = np.dtype(self.manifest["dtype"])
        self.vocab_size: int = self.manifest["tokenizer"]["vocab_size"]
        self.eos_id: int = self.manifest["tokenizer"]["eos_id"]
        self._shards: dict[tuple[str, str], Shard] = {}

    def shard(self, domain: str, split: str = "train") -> Shard:
        if domain not in self.manifest["domains"]:
            raise GlassroomError(f"{self.path}: no domain {domain!r} (it has {', '.join(self.domains)})")
        key = (domain, split)
        if key not in self._shards:
            shard = Shard(self.path, domain, split, self.dtype, self.manifest["domains"][domain][split].get("max_token_id"))
            expected = self.manifest["domains"][domain][split]["tokens"]
            if len(shard) != expected:
                raise GlassroomError(f"{shard.paths['tokens']}: holds {len(shard)} tokens, manifest.json says {expected} "
                                     f"(a damaged or replaced shard); rebuild the dataset")
            self._shards[key] = shard
        return self._shards[key]

    def cells(self, domain: str, split: str = "train") -> list[dict] | None:
        """The (domain, split)'s quality cells from manifest.json (bucket, documents, token_range...), or None."""
        cells = self.manifest["domains"][domain][split].get("cells")
        return cells if isinstance(cells, list) and cells else None

    def bytes_per_token(self, domain: str, split: str = "validation") -> float:
        return self.manifest["domains"][domain][split]["bytes_per_token"]

    def tokenizer(self):
        return load_tokenizer(self.path / "tokenizer.json")

    def validation_batches(self, domain: str, seq_len: int, batch_size: int, max_sequences: int | None = None):
        """Held-out sequences of one domain, in order: yields (tokens, n_bytes).

        The split is read as one stream preceded by EOS, so that every document, the first one
        included, is predicted after an EOS as in training. Window k is that stream's tokens
        [k * seq_len, (k + 1) * seq_len + 1): consecutive windows overlap by one token and every
        token of the split up to the last whole window is a target exactly once (the rolling
        tasks of `glassroom data tasks` are these windows). tokens is int64 (b, seq_len + 1);
        n_bytes is the UTF-8 bytes of text that its targets (tokens[:, 1:]) cover, so bits per
        byte = sum of target losses in nats / ln 2 / sum of n_bytes.
        """
        shard = self.shard(domain, "validation")
        n = len(shard) // seq_len
        if n < 1:
            raise GlassroomError(f"{shard.paths['tokens']}: domain {domain} has {len(shard)} validation tokens, fewer than "
                                 f"seq_len = {seq_len}; lower seq_len or rebuild with more validation data")
        if max_sequences is not None:
            n = min(n, max_sequences)
        eos = np.array([self.eos_id], dtype=np.int64)
        for first in range(0, n, batch_size):
            starts = np.arange(first, min(first + batch_size, n), dtype=np.int64) * seq_len  # first target of each
            tokens = np.stack([np.concatenate([eos, np.asarray(shard.tokens[: seq_len], dtype=np.int64)]) if s == 0
                               else np.asarray(shard.tokens[s - 1: s + seq_len], dtype=np.int64) for s in starts])
            n_bytes = shard.bytes_between(int(starts[0]), int(starts[-1]) + seq_len)
            yield tokens, n_bytes


@dataclass
class Batch:
    """Sequences for one rank at one step: tokens (b, seq_len + 1) int64, and each one's domain."""

    step: int
    tokens: np.ndarray
    domain_index: np.ndarray  # index into Mixture.domains, per sequence
    domains: list[str]  # Mixture.domains

    @property
    def inputs(self) -> np.ndarray:
        return self.tokens[:, :-1]

    @property
    def targets(self) -> np.ndarray:
        return self.tokens[:, 1:]

    def sequence_domains(self) -> list[str]:
        return [self.domains[i] for i in self.domain_index]

    def tokens_per_domain(self) -> dict[str, int]:
        """Input tokens of this batch per domain (for `data/tokens/<domain>`)."""
        counts = np.bincount(self.domain_index, minlength=len(self.domains)) * (self.tokens.shape[1] - 1)
        return {d: int(c) for d, c in zip(self.domains, counts) if c}


def check_weights(weights: dict[str, float], domains: list[str]) -> dict[str, float]:
    """Weights normalised to sum 1, domains with weight 0 dropped; a one-line error for bad ones."""
    if not weights:
        raise GlassroomError(f"mixture weights: none given; give a weight per domain ({', '.join(domains)})")
    for name in weights:
        if name not in domains:
            raise GlassroomError(f"mixture weights: no domain {name!r} in the dataset (it has {', '.join(domains)})")
    total = _positive_total(weights, "domain")
    return {d: weights[d] / total for d in domains if weights.get(d, 0) > 0}


def _positive_total(weights: dict, what: str) -> float:
    """The sum of `weights` after checking each is a finite number >= 0 and one is positive."""
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w):
            raise GlassroomError(f"mixture weights: {name} has weight {w!r}, expected a number")
        if w < 0:
            raise GlassroomError(f"mixture weights: {name} has negative weight {w}; weights must be 0 or more")
    total = float(sum(weights.values()))
    if total <= 0:
        raise GlassroomError(f"mixture weights: all are zero; give at least one {what} a positive weight")
    return total


def weight_domain(key: str) -> str:
    """The domain a weights key names: `prose` -> prose, `prose:q4` -> prose."""
    return key.rpartition(":")[0] if ":" in key else key


def resolve_weights(weights: dict[str, float], dataset: "Dataset") -> tuple[dict[str, float], dict[str, tuple[str, int, int]]]:
    """Weights keyed by domain or cell -> (normalised weights without zeros, key -> (domain, first token,
    end token) of its train tokens). Domain-only weights are exactly check_weights'. One-line errors."""
    domains = dataset.domains
    if not any(isinstance(k, str) and ":" in k for k in weights):
        out = check_weights(weights, domains)
        return out, {d: (d, 0, -1) for d in out}
    where = dataset.path / "manifest.json"
    spans: dict[str, tuple[str, int, int]] = {}
    order: dict[str, tuple[int, int]] = {}
    for key in weights:
        if not isinstance(key, str):
            raise GlassroomError(f"mixture weights: key {key!r} is not a domain or domain:qN cell")
        domain, _, cell = key.rpartition(":") if ":" in key else (key, "", "")
        if domain not in domains:
            raise GlassroomError(f"mixture weights: {key}: no domain {domain!r} in the dataset (it has {', '.join(domains)})")
        if not cell:
            order[key] = (domains.index(domain), -1)
            spans[key] = (domain, 0, -1)
            continue
        cells = dataset.cells(domain)
        if cells is None:
            raise GlassroomError(f"mixture weights: {key} is a quality cell, but domain {domain} of {where} has no quality "
                                 f"buckets (built without quality); weight the domain {domain} instead, or rebuild with quality")
        match = _CELL.fullmatch(cell)
        buckets = [int(c["bucket"]) for c in cells]
        if match is None:
            raise GlassroomError(f"mixture weights: {key}: expected {domain}:qN with N a bucket "
                                 f"(it has {', '.join(f'{domain}:q{b}' for b in buckets)})")
        bucket = int(match.group(1))
        if bucket not in buckets:
            raise GlassroomError(f"mixture weights: {key}: no bucket {bucket} in domain {domain} "
                                 f"(it has {', '.join(f'{domain}:q{b}' for b in buckets)})")
        entry = cells[buckets.index(bucket)]
        first, end = (int(v) for v in entry["token_range"])
        order[key] = (domains.index(domain), bucket)
        spans[key] = (domain, first, end)
    for key in weights:
        if ":" in key and weight_domain(key) in weights:
            raise GlassroomError(f"mixture weights: both {weight_domain(key)} and its cell {key} are given; weight "
                                 f"either the domain or its cells")
    total = _positive_total(weights, "domain or cell")
    keys = sorted((k for k in weights if weights[k] > 0), key=lambda k: order[k])
    return {k: weights[k] / total for k in keys}, {k: spans[k] for k in keys}


def block_counts(weights: list[float], block: int = BLOCK) -> np.ndarray:
    """Slots per domain in a block: weight * block rounded by largest remainder, at least 1 each."""
    raw = np.asarray(weights, dtype=np.float64) * block
    counts = np.maximum(np.floor(raw).astype(np.int64), 1)
    short = block - int(counts.sum())
    if short > 0:
        order = np.argsort(-(raw - np.floor(raw)), kind="stable")
        counts[order[:short]] += 1
    while counts.sum() > block:  # only when many tiny weights were raised to 1
        counts[int(np.argmax(counts))] -= 1
    return counts


def _mix(x: np.ndarray, key: int) -> np.ndarray:
    """splitmix64 of x ^ key: a well-mixed 64-bit function (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x ^ np.uint64(key & 0xFFFFFFFFFFFFFFFF)) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def permute(index: np.ndarray, n: int, key: int, rounds: int = 4) -> np.ndarray:
    """A keyed bijection of [0, n) applied to `index`: a Feistel network with cycle walking."""
    index = np.asarray(index, dtype=np.uint64)
    if n <= 1:
        return np.zeros_like(index)
    half = max(1, math.ceil(math.ceil(math.log2(n)) / 2))
    low_mask = np.uint64((1 << half) - 1)
    keys = [int(_mix(np.array([r], dtype=np.uint64), key)[0]) for r in range(rounds)]

    def once(x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(half), x & low_mask
        for k in keys:
            left, right = right, left ^ (_mix(right, k) & low_mask)
        return (left << np.uint64(half)) | right

    out = once(index)
    todo = out >= np.uint64(n)
    while todo.any():  # the domain is at most 4n, so this ends after a few passes
        out[todo] = once(out[todo])
        todo = out >= np.uint64(n)
    return out


class Mixture:
    """Batches from domain or cell weights; see the module doc for how step s maps to tokens.

    `domains` are the weights' keys (domains and cells, e.g. `prose:q4`) in dataset order; Batch.domain_index
    indexes them, so per-domain metrics become per-cell ones for cell weights."""

    def __init__(self, dataset: str | Path | Dataset, weights: dict[str, float], seq_len: int, batch_size: int,
                 seed: int = 0, max_epochs: float = 4.0) -> None:
        self.dataset = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
        if seq_len < 1 or batch_size < 1:
            raise GlassroomError(f"mixture: seq_len and batch_size must be positive, got {seq_len} and {batch_size}")
        self.weights, spans = resolve_weights(dict(weights), self.dataset)
        self.domains = list(self.weights)
        self.seq_len, self.batch_size, self.seed, self.max_epochs = seq_len, batch_size, seed, max_epochs
        self.shards = [self.dataset.shard(spans[d][0], "train") for d in self.domains]
        self.first = np.array([spans[d][1] for d in self.domains], dtype=np.int64)  # token range of each key
        self.end = np.array([len(s) if spans[d][2] < 0 else spans[d][2] for d, s in zip(self.domains, self.shards)],
                            dtype=np.int64)
        self.windows = (self.end - self.first - 1) // seq_len
        for d, n, s, a, b in zip(self.domains, self.windows, self.shards, self.first, self.end):
            if not 0 <= a <= b <= len(s):
                raise GlassroomError(f"{self.dataset.path / 'manifest.json'}: cell {d} has token range [{a}, {b}) outside "
                                     f"{s.paths['tokens']} ({len(s)} tokens); rebuild the dataset")
            if n < 1:
                what = "domain" if ":" not in d else "cell"
                raise GlassroomError(f"{s.paths['tokens']}: {what} {d} has {b - a} train tokens, fewer than "
                                     f"seq_len + 1 = {seq_len + 1}; lower seq_len or give {d} weight 0")
        self.counts = block_counts([self.weights[d] for d in self.domains])
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # this mixture's last BLOCKS_KEPT blocks

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(domain index, occurrence rank within the block) for each slot of block b."""
        if b in self._blocks:
            return self._blocks[b]
        slots = np.repeat(np.arange(len(self.domains), dtype=np.int64), self.counts)
        rng = np.random.default_rng([self.seed, b, 0x6D6978])
        slots = rng.permutation(slots)
        rank = np.empty(BLOCK, dtype=np.int64)
        order = np.argsort(slots, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        rank[order] = np.arange(BLOCK) - np.repeat(starts, self.counts)
        if len(self._blocks) >= BLOCKS_KEPT:
            del self._blocks[next(iter(self._blocks))]
        self._blocks[b] = (slots, rank)
        return slots, rank

    def locate(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For global sequence indices g: (domain index, token start in that domain's train shard)."""
        g = np.asarray(g, dtype=np.int64)
        dom = np.empty(len(g), dtype=np.int64)
        k = np.empty(len(g), dtype=np.int64)
        for b in np.unique(g // BLOCK):
            sel = (g // BLOCK) == b
            slots, rank = self._block(int(b))
            pos = g[sel] % BLOCK
            dom[sel] = slots[pos]
            k[sel] = b * self.counts[slots[pos]] + rank[pos]
        start = np.empty(len(g), dtype=np.int64)
        for d in np.unique(dom):
            sel = dom == d
            n = int(self.windows[d])
            epoch, j = np.divmod(k[sel], n)
            out = np.empty(int(sel.sum()), dtype=np.int64)
            for e in np.unique(epoch):
                key = hash_key(self.seed, self.domains[d], int(e))
                pick = epoch == e
                out[pick] = permute(j[pick], n, key).astype(np.int64)
            start[sel] = self.first[d] + out * self.seq_len
        return dom, start

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        """The sequences of data-parallel `rank` at `step`: a pure function of its arguments."""
        if step < 0:
            raise GlassroomError(f"mixture: step must be 0 or more, got {step}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise GlassroomError(f"mixture: rank {rank} is not in 0..{world_size - 1}")
        if self.batch_size % world_size:
            raise GlassroomError(f"mixture: batch size {self.batch_size} does not divide over {world_size} ranks")
        per_rank = self.batch_size // world_size
        first = step * self.batch_size + rank * per_rank
        dom, start = self.locate(np.arange(first, first + per_rank, dtype=np.int64))
        tokens = np.empty((per_rank, self.seq_len + 1), dtype=np.int64)
        for i, (d, s) in enumerate(zip(dom, start)):
            tokens[i] = self.shards[d].tokens[s: s + self.seq_len + 1]
        return Batch(step=step, tokens=tokens, domain_index=dom, domains=self.domains)

    def epochs(self, total_tokens: float) -> dict[str, dict]:
        """Per domain or cell, for a planned budget of training tokens: weight, tokens drawn and epochs."""
        report = {}
        for d, a, b in zip(self.domains, self.first, self.end):
            drawn = self.weights[d] * total_tokens
            report[d] = {"weight": self.weights[d], "tokens": drawn, "train_tokens": int(b - a),
                         "epochs": drawn / int(b - a)}
        return report

    def epoch_warnings(self, total_tokens: float) -> list[str]:
        """One line per domain or cell that a budget of `total_tokens` would repeat more than max_epochs times."""
        return [
            f"{'cell' if ':' in d else 'domain'} {d} would be seen {r['epochs']:.1f} times (max_epochs {self.max_epochs:g}): "
            f"lower its weight or add data"
            for d, r in self.epochs(total_tokens).items() if r["epochs"] > self.max_epochs
        ]


def hash_key(seed: int, domain: str, epoch: int) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}/{domain}/{epoch}".encode()).digest()[:8], "big")
