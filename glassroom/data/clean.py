"""Cleaning: normalise, filter, exact and fuzzy dedup, held-out split; counts of what each stage did.

Per document, in worker processes: Unicode NFC and newline normalisation, the quality filters of
CleanConfig (thresholds in docs/data-build.md), a content hash, and a MinHash signature of word
shingles (dedup.Signer, over the batch's documents at once). Dedup itself (bands derived from the
threshold, verified pairs, clusters) is glassroom/data/dedup.py; `Cleaner` records each document
through the stages, then the held-out split by a stable hash of the id. Dedup runs over the whole
corpus (a document in two domains is kept once, where it came first).
`Stats` records, per stage and domain, documents and bytes in and out and removals by reason.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from glassroom.data.dedup import Deduplicator, Signer, StreamingDeduplicator, shingle_set  # noqa: F401 (re-exported)
from glassroom.data.recipe import CleanConfig, DedupConfig, SplitConfig

STAGES = ("extract", "normalize", "filter", "exact_dedup", "fuzzy_dedup", "split", "tokenize")

_LETTERS = re.compile(r"[^\W\d_]+")
_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")

class Stats:
    """Per stage and domain: docs/bytes in and out and removals by reason (stats.json)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, dict]] = {s: {} for s in STAGES}

    def entry(self, stage: str, domain: str) -> dict:
        return self.data[stage].setdefault(
            domain, {"docs_in": 0, "bytes_in": 0, "docs_out": 0, "bytes_out": 0, "removed": {}}
        )

    def record_in(self, stage: str, domain: str, nbytes: int) -> None:
        e = self.entry(stage, domain)
        e["docs_in"] += 1
        e["bytes_in"] += nbytes

    def record_out(self, stage: str, domain: str, nbytes: int) -> None:
        e = self.entry(stage, domain)
        e["docs_out"] += 1
        e["bytes_out"] += nbytes

    def record_removed(self, stage: str, domain: str, reason: str, nbytes: int) -> None:
        removed = self.entry(stage, domain)["removed"].setdefault(reason, {"docs": 0, "bytes": 0})
        removed["docs"] += 1
        removed["bytes"] += nbytes

    def passthrough(self, stage: str, domain: str, nbytes: int) -> None:
        self.record_in(stage, domain, nbytes)
        self.record_out(stage, domain, nbytes)

    def to_json(self) -> dict:
        return self.data


def normalize(text: str) -> str:
    """NFC, `\\r\\n` and `\\r` to `\\n`, trailing spaces dropped, blank lines at the ends dropped."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text.strip("\n")


def quality_reason(text: str, nbytes: int, cfg: CleanConfig) -> str | None:
    """The first filter that `text` fails, or None; see CleanConfig for the thresholds."""
    if nbytes < cfg.min_bytes:
        return "too_short"
    if nbytes > cfg.max_bytes:
        return "too_long"
    chars = len(text)
    if len(_GARBAGE.findall(text)) > cfg.max_garbage_fraction * chars:
        return "garbled"
    letters = chars - len(_LETTERS.sub("", text))
    if letters < cfg.min_letter_fraction * chars:
        return "few_letters"
    lines = text.split("\n")
    limit = cfg.max_line_bytes
    if any(len(line) * 4 > limit and len(line.encode()) > limit for line in lines):  # 4 bytes/char at most
        return "long_lines"
    counts = Counter(line for line in lines if len(line.strip()) > 3)
    repeated = sum(len(line) * (n - 1) for line, n in counts.items() if n > 1)
    if repeated > cfg.max_duplicate_line_fraction * chars:
        return "repetitive"
    return None


@dataclass
class Cleaned:
    """A document after the per-document stages, with what the dedup stages need."""

    doc: dict
    raw_bytes: int
    nbytes: int
    reason: str | None  # None when it passed the filters
    digest: bytes = b""
    signature: np.ndarray | None = None


_SIGNERS: dict[tuple[int, int], Signer] = {}


def clean_batch(docs: list[dict], clean: CleanConfig, dedup: DedupConfig) -> list[Cleaned]:
    """The per-document stages for a batch; runs in a worker process."""
    key = (dedup.num_perm, dedup.shingle_words)
    signer = _SIGNERS.get(key) or _SIGNERS.setdefault(key, Signer(*key))
    out = []
    for doc in docs:
        raw_bytes = len(doc["text"].encode())
        text = normalize(doc["text"])
        data = text.encode()
        doc = dict(doc, text=text)
        reason = quality_reason(text, len(data), clean)
        item = Cleaned(doc, raw_bytes, len(data), reason)
        if reason is None:
            item.digest = hashlib.blake2b(data, digest_size=16).digest()
        out.append(item)
    if dedup.fuzzy:  # the batch's signatures at once (dedup.Signer works over many documents per numpy call)
        passed = [item for item in out if item.reason is None]
        for item, signature in zip(passed, signer.signatures([item.doc["text"] for item in passed])):
            item.signature = signature.copy()  # its own 1 KB, not a view of the batch's matrix
    return out


def split_score(doc_id: str, seed: int) -> float:
    """A stable number in [0, 1) from the document id: below the validation fraction is held out."""
    digest = hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def record_filter(stats: Stats, item: Cleaned) -> bool:
    """Record the extract, normalize and filter stages of `item` in `stats`; True when it passed the filters."""
    domain = item.doc["domain"]
    stats.passthrough("extract", domain, item.raw_bytes)
    stats.record_in("normalize", domain, item.raw_bytes)
    stats.record_out("normalize", domain, item.nbytes)
    stats.record_in("filter", domain, item.nbytes)
    if item.reason is not None:
        stats.record_removed("filter", domain, item.reason, item.nbytes)
        return False
    stats.record_out("filter", domain, item.nbytes)
    return True


class Cleaner:
    """Runs the stages over a stream of documents and records them in `stats`.

    `accept` decides dedup as documents come (dedup.StreamingDeduplicator). A build that runs the
    global pass (dedup.Deduplicator) calls `record_filter` for every document, then
    `record_dedup(item, result.decision(i))` for those that passed, in build order.
    """

    def __init__(self, clean: CleanConfig, dedup: DedupConfig, split: SplitConfig, stats: Stats) -> None:
        self.clean, self.dedup_cfg, self.split = clean, dedup, split
        self.stats = stats
        self.dedup = StreamingDeduplicator(dedup)
        self.kept: dict[str, int] = defaultdict(int)

    def record_filter(self, item: Cleaned) -> bool:
        """Record extract, normalize and filter for `item`; True when it passed the filters."""
        return record_filter(self.stats, item)

    def record_dedup(self, item: Cleaned, decision: tuple | str | None) -> bool:
        """Record exact_dedup and fuzzy_dedup for a document that passed the filters; True when kept.

        `decision` is a Deduplicator result's decision(i) (None or (reason, canonical, jaccard)) or
        a bare reason; a removed document counts in its own domain.
        """
        stats, domain = self.stats, item.doc["domain"]
        reason = decision[0] if isinstance(decision, tuple) else decision
        stats.record_in("exact_dedup", domain, item.nbytes)
        if reason == "exact_duplicate":
            stats.record_removed("exact_dedup", domain, reason, item.nbytes)
            return False
        stats.record_out("exact_dedup", domain, item.nbytes)
        stats.record_in("fuzzy_dedup", domain, item.nbytes)
        if reason == "near_duplicate":
            stats.record_removed("fuzzy_dedup", domain, reason, item.nbytes)
            return False
        stats.record_out("fuzzy_dedup", domain, item.nbytes)
        self.kept[domain] += 1
        return True

    def accept(self, item: Cleaned) -> bool:
        """Record `item` through the cleaning stages, deciding dedup as it comes; True when it is kept."""
        if not self.record_filter(item):
            return False
        return self.record_dedup(item, self.dedup.reason(item.digest, item.signature, item.doc["text"]))


def validation_cutoff(rows: list[tuple[float, int]], fraction: float) -> float:
    """Documents (split score, bytes) whose score is below the result are held out.

    Normally `fraction` itself. When the documents below it hold less than `fraction` of the
    domain's bytes (a few large documents, or bad luck in a small domain), the next-lowest scores
    are added until they do, so every domain of two or more documents has a validation split big
    enough to evaluate on; at least one document always stays in train.
    """
    if len(rows) < 2:
        return fraction
    ordered = sorted(rows)
    total = sum(b for _, b in rows)
    held, cutoff = 0, 0.0
    for i, (score, nbytes) in enumerate(ordered[:-1]):
        if score >= fraction and held >= fraction * total:
            break
        held += nbytes
        cutoff = ordered[i + 1][0]
    return max(cutoff, min(fraction, ordered[-1][0]))
