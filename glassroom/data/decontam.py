"""Decontamination: find training documents that share long word n-grams with evaluation text.

The rule (docs/data-decontamination.md) is GPT-3's: a training document is contaminated when it shares an
n-gram of `ngram` words (13 by default) with any evaluation text, after dropping common phrases (n-grams
found in more than `common_docs` training documents: licence headers, liturgical formulas). Words are
lowercased `\\w+` runs, the words the dedup shingles count.

Pieces, in the order a build uses them (glassroom/data/build.py wires them):
- `ngram_hashes(text, n)`: a 64-bit hash of every n-word window, all in numpy (no Python loop per word): the
  text's code points are classified \\w or not by a table built from `re` itself, each word is hashed as a
  polynomial of its code points mod 2^64 (prefix sums), the n word hashes of a window are combined by a
  second polynomial in n array steps, each finished with the splitmix64 mixer. Deterministic across
  processes and machines (no Python hash()). `batch_ngram_hashes` does a whole batch in one pass.
- `BloomFilter`: a numpy bit array sized from the expected items and a false-positive rate; k positions by
  double hashing of the 64-bit hash; vectorised add/contains; to_bytes/from_bytes.
- `EvalIndex.build(cfg, eval_texts)`: the Bloom filter of every evaluation n-gram, the exact sorted array of
  them (a Bloom hit is verified there, so a reported leak is never a false positive) and each n-gram's first
  source. `file_texts(files)` reads the recipe's extra evaluation files.
- `scan_batch(blob, texts)`: per text, the sorted unique evaluation n-gram hashes it contains (top-level and
  picklable for executor tasks; the index is deserialised once per process, cached by digest).
- `decide(index, hits_per_doc, cfg)`: drops common phrases, says which documents are contaminated; its
  `summary()` goes to manifest["decontamination"]; `example_record` makes one removed/contaminated.jsonl line.
- `benchmark(texts, eval_texts, cfg)`: scan speed against a plain Python set-of-tuples baseline.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from glassroom.errors import GlassroomError

WORDS = re.compile(r"\w+")  # the dedup shingles' words (glassroom/data/clean.py), lowercased before matching
FP_RATE = 0.001  # the Bloom filter's target false-positive rate
EXAMPLE_BYTES = 64 * 1024  # a removed/contaminated.jsonl text is cut here, the cut marked with "…"
PASSAGES = 5  # leaked passages shown per example record
PASSAGE_CHARS = 1000
FILE_SUFFIXES = (".txt", ".jsonl", ".json")
MAX_DEPTH = 8  # folder levels file_texts descends
MAX_FILES = 10_000  # files file_texts reads from one folder
MAX_FILE_BYTES = 1 << 30  # one evaluation file at most (each is read whole)
_MAGIC = b"glassroom-evalindex/1\n"

_U64 = np.uint64
_MUL = _U64(0x9E3779B97F4A7C15)  # the n-gram polynomial's base (odd)
_CHAR = 0x100000001B3  # the word polynomial's base over code points (odd, so invertible mod 2^64)
_CHAR_INV = pow(_CHAR, -1, 1 << 64)
PIECE = 1 << 20  # characters hashed at once (bounds the powers tables: 16 MB)
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_TABLE: np.ndarray | None = None  # bool per code point: a \w character (built from `re` itself, once per process)
_POWERS: list[np.ndarray] = []  # [_CHAR^j, _CHAR^-j for j < the longest piece seen]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on a uint64 array (wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _U64(30))
        x = x * _M1
        x = x ^ (x >> _U64(27))
        x = x * _M2
        return x ^ (x >> _U64(31))


def words_of(text: str) -> list[str]:
    """The lowercased \\w+ words of text."""
    return WORDS.findall(text.lower())


def _word_table() -> np.ndarray:
    global _TABLE
    if _TABLE is None:
        every = "".join(map(chr, range(0x110000)))
        _TABLE = np.frombuffer(re.sub(r"\W", "\0", every).encode("utf-32-le", "surrogatepass"), dtype=np.uint32) != 0
    return _TABLE


def _powers(count: int) -> tuple[np.ndarray, np.ndarray]:
    """_CHAR^j and _CHAR^-j mod 2^64 for j < count (cached, grown by doubling; count is at most a piece's length)."""
    have = len(_POWERS[0]) if _POWERS else 0
    if have < count:
        size = max(count, 2 * have, 1 << 16)
        up = np.full(size, _CHAR, dtype=np.uint64)
        down = np.full(size, _CHAR_INV, dtype=np.uint64)
        up[0] = down[0] = 1
        _POWERS[:] = [np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64)]
    return _POWERS[0], _POWERS[1]


def _hash_piece(cp: np.ndarray, isw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    edge = np.diff(isw.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    up, down = _powers(len(cp) + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(cp) + 1, dtype=np.uint64)
        np.cumsum(cp.astype(np.uint64) * up[: len(cp)], out=prefix[1:])
        h = (prefix[ends] - prefix[starts]) * down[starts] + (ends - starts).astype(np.uint64) * _M2
    return _mix(h), starts


def _words_hashed(lowered: str) -> tuple[np.ndarray, np.ndarray]:
    """(hash, first character) of every \\w+ word of an already lowercased string, all in numpy: a word's hash
    is the polynomial sum of cp[i] * C^i over its code points (i from 0 at its first character: prefix sums
    of cp[j] * C^j, shifted by C^-start) plus its length, mixed. Equal words hash equal wherever they stand.
    A long text is hashed in pieces of about PIECE characters cut after a non-word character, so memory
    (the powers tables) stays bounded by the piece, not the text."""
    cp = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    isw = _word_table()[cp]
    if len(cp) <= PIECE:
        return _hash_piece(cp, isw)
    hashes, starts = [], []
    at = 0
    while at < len(cp):
        end = min(at + PIECE, len(cp))
        if end < len(cp):
            breaks = np.flatnonzero(~isw[at:end])
            if len(breaks):
                end = at + int(breaks[-1]) + 1
            else:  # one word longer than a piece: take it whole
                after = np.flatnonzero(~isw[end:])
                end = end + int(after[0]) if len(after) else len(cp)
        h, s = _hash_piece(cp[at:end], isw[at:end])
        hashes.append(h)
        starts.append(s + at)
        at = end
    return np.concatenate(hashes), np.concatenate(starts)


def _windows(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of each n-word window (window j: words j..j+n-1): a polynomial in n array steps, mixed."""
    m = len(word_hashes) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    acc = word_hashes[:m].copy()
    with np.errstate(over="ignore"):
        for j in range(1, n):
            acc *= _MUL
            acc += word_hashes[j: j + m]
    return _mix(acc)


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """uint64 hashes of every n-word window of text, in order (repeats kept); empty when text has fewer than n words."""
    return _windows(_words_hashed(text.lower())[0], n)


def batch_ngram_hashes(texts: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, document) of every n-word window of every text, computed over the texts joined by NUL (not a
    word character) and dropping windows that cross from one text to the next: the same hashes as
    ngram_hashes(text, n) text by text, in far fewer numpy calls for short documents."""
    if not texts:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    lowered = [t.lower() for t in texts]
    first_char = np.cumsum([0] + [len(t) + 1 for t in lowered[:-1]])
    words, starts = _words_hashed("\0".join(lowered))
    m = len(words) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    doc = np.searchsorted(first_char, starts, side="right") - 1
    keep = doc[: m] == doc[n - 1:]
    return _windows(words, n)[keep], doc[: m][keep]


def _blocked_fp_rate(items: int, blocks: int, hashes: int) -> float:
    """False-positive rate of a blocked Bloom filter (64-bit blocks, `hashes` uniform bit picks per item): the
    block loads are Poisson(items/blocks); with x items a block has each bit set with 1 - (63/64)^(k x)."""
    if not items:
        return 0.0
    lam = items / blocks
    total, x, p = 0.0, 0, math.exp(-lam)
    while x < 10 * lam + 50:
        total += p * (1 - (63 / 64) ** (hashes * x)) ** hashes
        x += 1
        p *= lam / x
    return total


class BloomFilter:
    """A blocked Bloom filter of uint64 items: `blocks` 64-bit words; an item picks one word (multiply-shift of
    its high 32 bits) and `hashes` bits inside it (6-bit fields of a second, mixed hash), so a lookup is one
    gather and one compare, whatever k is. Sized by `sized` to meet the false-positive rate for its items."""

    MAX_HASHES = 8  # 6-bit fields of one 64-bit hash (8: the fastest lookup at 0.1% measured)
    MARGIN = 0.75  # the Poisson model underestimates a blocked filter's rate a little (bits set in a block correlate)

    def __init__(self, blocks: int, hashes: int, data: np.ndarray | None = None, items: int = 0) -> None:
        self.blocks = int(blocks)
        self.hashes = int(hashes)
        self.items = int(items)
        self.data = np.zeros(self.blocks, dtype=np.uint64) if data is None else data
        if len(self.data) != self.blocks or not 1 <= self.blocks < 1 << 32 or not 1 <= self.hashes <= self.MAX_HASHES:
            raise ValueError("BloomFilter: inconsistent size")

    @classmethod
    def sized(cls, expected_items: int, fp_rate: float = FP_RATE) -> "BloomFilter":
        """The smallest filter (in 5% steps from the classic m = -n ln p / (ln 2)^2 bits) whose blocked
        false-positive rate for expected_items is at most fp_rate; k = m/n ln 2, at most MAX_HASHES."""
        n = max(int(expected_items), 1)
        bits = max(64.0, -n * math.log(fp_rate) / math.log(2) ** 2)
        hashes = min(cls.MAX_HASHES, max(1, round(bits / n * math.log(2))))
        while _blocked_fp_rate(n, math.ceil(bits / 64), hashes) > fp_rate * cls.MARGIN:
            bits *= 1.05
        return cls(math.ceil(bits / 64), hashes)

    @property
    def bits(self) -> int:
        return 64 * self.blocks

    def _locate(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(block index, bit mask) per item."""
        with np.errstate(over="ignore"):
            folded = (items >> _U64(32)) ^ (items & _U64(0xFFFFFFFF))  # all 64 bits choose the block
            block = ((folded * _U64(self.blocks)) >> _U64(32)).astype(np.int64)
            fields = (_mix(items ^ _U64(0x5851F42D4C957F2D))[:, None] >> self._shifts()) & _U64(63)
            mask = np.bitwise_or.reduce(_U64(1) << fields, axis=1)
        return block, mask

    def _shifts(self) -> np.ndarray:
        return (6 * np.arange(self.hashes, dtype=np.uint64))[None, :]

    def add(self, items: np.ndarray) -> None:
        items = np.unique(np.asarray(items, dtype=np.uint64))
        for at in range(0, len(items), 1 << 18):
            block, mask = self._locate(items[at: at + (1 << 18)])
            np.bitwise_or.at(self.data, block, mask)
        self.items += len(items)

    def contains(self, items: np.ndarray) -> np.ndarray:
        """bool per item: True when all its bits are set (maybe in the set), False when surely not."""
        items = np.asarray(items, dtype=np.uint64)
        out = np.zeros(len(items), dtype=bool)
        for at in range(0, len(items), 1 << 18):  # bounded memory: k fields per item
            block, mask = self._locate(items[at: at + (1 << 18)])
            out[at: at + len(mask)] = (self.data[block] & mask) == mask
        return out

    def expected_fp_rate(self) -> float:
        return _blocked_fp_rate(self.items, self.blocks, self.hashes)

    def describe(self) -> dict:
        return {"kind": "blocked (64-bit blocks)", "bits": self.bits, "bytes": 8 * self.blocks, "hashes": self.hashes,
                "items": self.items, "fp_rate_target": FP_RATE, "fp_rate_expected": round(self.expected_fp_rate(), 8)}

    def to_bytes(self) -> bytes:
        return struct.pack("<QII", self.blocks, self.hashes, 0) + struct.pack("<Q", self.items) + \
            self.data.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, blob: bytes) -> "BloomFilter":
        blocks, hashes, _ = struct.unpack_from("<QII", blob, 0)
        (items,) = struct.unpack_from("<Q", blob, 16)
        data = np.frombuffer(blob, dtype="<u8", offset=24).astype(np.uint64, copy=False)
        return cls(blocks, hashes, data, items)


@dataclass
class EvalIndex:
    """Every evaluation n-gram: a Bloom filter, the exact sorted hashes, each hash's first source."""

    ngram: int
    bloom: BloomFilter
    hashes: np.ndarray  # sorted unique uint64
    source_of: np.ndarray  # int32, per hash: index into sources
    sources: list[dict] = field(default_factory=list)  # {"name", "documents", "short_documents", "ngrams"}

    @classmethod
    def build(cls, cfg, eval_texts: Iterable[tuple[str, str]], fp_rate: float = FP_RATE) -> "EvalIndex":
        """The index of eval_texts, (source_name, text) pairs; texts shorter than cfg.ngram words count as short."""
        n = int(cfg.ngram)
        names: dict[str, int] = {}
        sources: list[dict] = []
        chunks: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        for name, text in eval_texts:
            s = names.get(name)
            if s is None:
                s = names[name] = len(sources)
                sources.append({"name": name, "documents": 0, "short_documents": 0, "ngrams": 0})
            sources[s]["documents"] += 1
            h = np.unique(ngram_hashes(text, n))
            if not len(h):
                sources[s]["short_documents"] += 1
                continue
            chunks.append(h)
            owners.append(np.full(len(h), s, dtype=np.int32))
        if chunks:
            everything = np.concatenate(chunks)
            owner = np.concatenate(owners)
            hashes, first = np.unique(everything, return_index=True)
            source_of = owner[first]
            for s, src in enumerate(sources):
                src["ngrams"] = int(len(np.unique(everything[owner == s])))
        else:
            hashes, source_of = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int32)
        bloom = BloomFilter.sized(len(hashes), fp_rate)
        bloom.add(hashes)
        return cls(n, bloom, hashes, source_of.astype(np.int32), sources)

    def verify(self, items: np.ndarray) -> np.ndarray:
        """bool per uint64 item: exactly one of the evaluation n-grams (no false positives)."""
        if not len(self.hashes) or not len(items):
            return np.zeros(len(items), dtype=bool)
        at = np.searchsorted(self.hashes, items)
        at[at == len(self.hashes)] = 0
        return self.hashes[at] == items

    def lookup(self, text: str) -> np.ndarray:
        """The sorted unique evaluation n-gram hashes in text: Bloom filter first, then the exact check."""
        return self.lookup_batch([text])[0]

    def lookup_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """lookup() of each text, computed for the whole batch at once."""
        h, doc = batch_ngram_hashes(texts, self.ngram)
        if len(h) and len(self.hashes):
            sel = self.bloom.contains(h)
            h, doc = h[sel], doc[sel]
            sel = self.verify(h)
            h, doc = h[sel], doc[sel]
        else:
            h, doc = h[:0], doc[:0]
        order = np.lexsort((h, doc))
        h, doc = h[order], doc[order]
        if len(h):
            first = np.ones(len(h), dtype=bool)
            first[1:] = (h[1:] != h[:-1]) | (doc[1:] != doc[:-1])
            h, doc = h[first], doc[first]
        bounds = np.searchsorted(doc, np.arange(len(texts) + 1))
        return [h[bounds[i]: bounds[i + 1]] for i in range(len(texts))]

    def source_names(self, hits: np.ndarray) -> list[str]:
        """The sources (sorted names) the given evaluation n-gram hashes first came from."""
        hits = np.asarray(hits, dtype=np.uint64)
        at = np.searchsorted(self.hashes, hits)
        inside = at < len(self.hashes)
        at, hits = at[inside], hits[inside]
        at = at[self.hashes[at] == hits]
        return sorted({self.sources[int(s)]["name"] for s in self.source_of[at]})

    def to_bytes(self) -> bytes:
        """A self-contained, deterministic serialisation (shipped to executor tasks)."""
        bloom = self.bloom.to_bytes()
        meta = json.dumps({"ngram": self.ngram, "sources": self.sources, "hashes": len(self.hashes),
                           "bloom": len(bloom)}, sort_keys=True).encode()
        return b"".join([_MAGIC, struct.pack("<Q", len(meta)), meta, self.hashes.astype("<u8").tobytes(),
                         self.source_of.astype("<i4").tobytes(), bloom])

    @classmethod
    def from_bytes(cls, blob: bytes) -> "EvalIndex":
        if not blob.startswith(_MAGIC):
            raise ValueError("not a glassroom evaluation index")
        at = len(_MAGIC)
        (size,) = struct.unpack_from("<Q", blob, at)
        at += 8
        meta = json.loads(blob[at: at + size])
        at += size
        count = meta["hashes"]
        hashes = np.frombuffer(blob, dtype="<u8", count=count, offset=at).astype(np.uint64, copy=False)
        at += 8 * count
        source_of = np.frombuffer(blob, dtype="<i4", count=count, offset=at).astype(np.int32, copy=False)
        at += 4 * count
        bloom = BloomFilter.from_bytes(blob[at: at + meta["bloom"]])
        return cls(meta["ngram"], bloom, hashes, source_of, meta["sources"])


_INDEXES: dict[bytes, EvalIndex] = {}


_LAST: list = [None, None]  # the last blob object seen and its index: no digest when a caller reuses the object


def _index_of(blob: bytes) -> EvalIndex:
    if _LAST[0] is blob:
        return _LAST[1]
    key = hashlib.blake2b(blob, digest_size=16).digest()
    index = _INDEXES.get(key)
    if index is None:
        if len(_INDEXES) >= 2:
            _INDEXES.clear()
        index = _INDEXES[key] = EvalIndex.from_bytes(blob)
    _LAST[0], _LAST[1] = blob, index
    return index


def scan_batch(blob: bytes, texts: Sequence[str]) -> list[np.ndarray]:
    """Per text, the sorted unique uint64 evaluation n-gram hashes it contains (blob: EvalIndex.to_bytes())."""
    return _index_of(blob).lookup_batch(list(texts))


@dataclass
class Verdict:
    """decide()'s answer, per document in the order given: contaminated or not, distinct leaked n-grams."""

    contaminated: np.ndarray  # bool
    matches: np.ndarray  # int64: distinct leaked n-grams after dropping common phrases
    common: np.ndarray  # sorted uint64: n-grams dropped as common phrases
    hits_per_doc: list[np.ndarray]
    index: EvalIndex
    cfg: object
    raw_documents: int = 0  # documents with any evaluation n-gram before dropping common phrases

    def leaked(self, i: int) -> np.ndarray:
        """Document i's leaked n-gram hashes, common phrases left out."""
        hits = self.hits_per_doc[i]
        if not len(self.common) or not len(hits):
            return hits
        return hits[~np.isin(hits, self.common, assume_unique=True)]

    def summary(self, domains: Sequence[str] | None = None) -> dict:
        """manifest["decontamination"]; `domains` (one name per document) adds the counts per domain."""
        action = getattr(self.cfg, "action", "remove")
        verb = "removed" if action == "remove" else "flagged"
        out = {
            "ngram": self.index.ngram,
            "action": action,
            "words": "lowercased \\w+ runs (the dedup shingles' words)",
            "method": "64-bit hash of each n-word window; Bloom filter first, every hit verified against the "
                      "exact sorted set of evaluation n-gram hashes",
            "eval_sources": self.index.sources,
            "eval_ngrams": int(len(self.index.hashes)),
            "common_docs": int(getattr(self.cfg, "common_docs", 0)),
            "common_phrases_dropped": int(len(self.common)),
            "documents_scanned": int(len(self.contaminated)),
            "documents_with_common_phrases_only": int(self.raw_documents - int(self.contaminated.sum())),
            f"documents_{verb}": int(self.contaminated.sum()),
            "bloom": self.index.bloom.describe(),
        }
        if domains is not None:
            per: dict[str, dict] = {}
            for d, bad, m in zip(domains, self.contaminated, self.matches):
                entry = per.setdefault(d, {"scanned": 0, verb: 0, "ngrams": 0})
                entry["scanned"] += 1
                entry[verb] += int(bad)
                entry["ngrams"] += int(m)
            out["domains"] = per
        return out


def decide(index: EvalIndex, hits_per_doc: Sequence[np.ndarray], cfg) -> Verdict:
    """Which documents are contaminated: >= 1 leaked n-gram that is in at most cfg.common_docs documents."""
    hits_per_doc = [np.unique(np.asarray(h, dtype=np.uint64)) for h in hits_per_doc]  # a repeat counts once
    nonempty = [h for h in hits_per_doc if len(h)]
    if nonempty:
        grams, counts = np.unique(np.concatenate(nonempty), return_counts=True)
        common = grams[counts > int(cfg.common_docs)]
    else:
        common = np.empty(0, dtype=np.uint64)
    verdict = Verdict(np.zeros(len(hits_per_doc), dtype=bool), np.zeros(len(hits_per_doc), dtype=np.int64),
                      common, hits_per_doc, index, cfg, raw_documents=len(nonempty))
    for i, h in enumerate(hits_per_doc):
        if len(h):
            verdict.matches[i] = len(verdict.leaked(i))
    verdict.contaminated = verdict.matches > 0
    return verdict


def _cut(text: str, limit: int = EXAMPLE_BYTES) -> str:
    """text as valid UTF-8 (a lone surrogate from a JSON escape becomes ?), cut at `limit` bytes with "…"."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return raw.decode("utf-8")
    return raw[:limit].decode("utf-8", "ignore") + "…"


def leaked_passages(text: str, hits: np.ndarray, n: int, limit: int = PASSAGES) -> list[str]:
    """Up to `limit` passages of text made of leaked n-grams (overlapping windows merged), in text order."""
    lowered = text.lower()
    spans = [m.span() for m in WORDS.finditer(lowered)]
    h = ngram_hashes(text, n)
    if not len(h) or not len(hits):
        return []
    starts = np.flatnonzero(np.isin(h, hits))
    source = text if len(lowered) == len(text) else lowered  # same offsets only when lowercasing kept lengths
    out: list[str] = []
    run_start = run_end = -1
    for j in starts.tolist() + [None]:
        if j is not None and run_end >= j:  # overlaps or touches the current run
            run_end = j + n - 1
            continue
        if run_start >= 0:
            piece = source[spans[run_start][0]: spans[run_end][1]]
            piece = _cut(piece[:PASSAGE_CHARS]) + ("…" if len(piece) > PASSAGE_CHARS else "")
            if piece not in out:  # a passage repeated in the document is shown once
                out.append(piece)
            if len(out) == limit:
                break
        if j is not None:
            run_start, run_end = j, j + n - 1
    return out


ACTIONS = {"remove": "removed", "removed": "removed", "flag": "flagged", "flagged": "flagged"}


def example_record(doc: dict, text: str, hits: np.ndarray, index: EvalIndex, action: str) -> dict:
    """One line of removed/contaminated.jsonl: the document, its leaked passages and where they came from.

    `hits` are the document's leaked n-gram hashes (Verdict.leaked(i)); doc holds index, id, domain, source;
    action is the recipe's (remove, flag) or the record's word for it (removed, flagged)."""
    hits = np.asarray(hits, dtype=np.uint64)
    if action not in ACTIONS:
        raise ValueError(f"example_record: action {action!r} is not one of {sorted(ACTIONS)}")
    return {"index": doc.get("index"), "id": doc.get("id"), "domain": doc.get("domain"), "source": doc.get("source"),
            "action": ACTIONS[action], "matches": int(len(hits)),
            "eval_sources": index.source_names(hits), "ngrams": leaked_passages(text, hits, index.ngram),
            "text": _cut(text)}


# --- evaluation files --------------------------------------------------------------------------------------


def _strings(value, where: str) -> Iterator[str]:
    """Every string inside a JSON value, depth first, without recursion."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v.strip():
                yield v
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _read(path: Path, where: str) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise GlassroomError(f"{where}: {path} is {size / 2**30:.1f} GiB, more than an evaluation file may be "
                                 f"({MAX_FILE_BYTES / 2**30:.0f} GiB); give the evaluation sets, not a corpus")
        raw = path.read_bytes()
    except OSError as exc:
        raise GlassroomError(f"{where}: cannot read {path} ({exc.strerror or exc}); give a readable file") from None
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark is not text
    except UnicodeDecodeError as exc:
        raise GlassroomError(f"{where}: {path} is not UTF-8 text (byte {exc.start}); "
                             "convert it to UTF-8 or leave it out") from None


def _texts_of_file(path: Path, where: str) -> list[str]:
    text = _read(path, where)
    if path.suffix.lower() == ".jsonl":
        out: list[str] = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.extend(_strings(json.loads(line), where))
            except (ValueError, RecursionError):
                raise GlassroomError(f"{where}: {path}:{line_no} is not a JSON value; "
                                     "fix the line (one JSON record per line)") from None
        return out
    if path.suffix.lower() == ".json":
        try:
            return list(_strings(json.loads(text), where))
        except (ValueError, RecursionError):
            raise GlassroomError(f"{where}: {path} is not valid JSON; fix it or give it as .txt") from None
    return [text] if text.strip() else []


def _folder_files(root: Path, where: str) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if depth < MAX_DEPTH else []
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.suffix.lower() in FILE_SUFFIXES and not name.startswith(".") and p.is_file():
                found.append(p)
                if len(found) > MAX_FILES:
                    raise GlassroomError(f"{where}: {root} holds more than {MAX_FILES} evaluation files; "
                                         "give a narrower folder or the files themselves")
    return sorted(found)


def check_files(files: Sequence[str]) -> None:
    """The cheap checks of file_texts (each path exists, is a file or a folder holding evaluation files),
    for a build to run before any text is read; one-line GlassroomError naming decontaminate.files[i]."""
    _plan(files)


def _plan(files: Sequence[str]) -> list[tuple[str, str, list[Path], bool]]:
    plan: list[tuple[str, str, list[Path], bool]] = []
    for i, name in enumerate(files):
        where = f"decontaminate.files[{i}]"
        path = Path(os.path.expanduser(str(name)))
        if not path.exists():
            raise GlassroomError(f"{where}: {name} does not exist; give an evaluation file or folder "
                                 "(.txt, .jsonl, .json)")
        if path.is_dir():
            found = _folder_files(path, where)
            if not found:
                raise GlassroomError(f"{where}: folder {name} has no .txt, .jsonl or .json files; "
                                     "give a folder of evaluation text")
            plan.append((where, name, found, True))
        elif path.is_file():
            plan.append((where, name, [path], False))
        else:
            raise GlassroomError(f"{where}: {name} is not a regular file or folder; give an evaluation file")
    return plan


def file_texts(files: Sequence[str]) -> Iterator[tuple[str, str]]:
    """("file:<path>", text) for every evaluation text in the recipe's decontaminate.files: a .txt file is one
    text; a .jsonl or .json file gives every string value of every record, each its own text; a folder gives
    those files inside it (sorted, hidden ones skipped, at most MAX_DEPTH levels and MAX_FILES files).
    Paths are relative to the current folder, ~ expanded. Every input is checked before the first text is
    given, so a mistake in files[2] is reported before any work: a missing, unreadable, non-UTF-8, malformed
    or empty input is a one-line GlassroomError naming decontaminate.files[i]."""
    plan = _plan(files)
    loaded: list[tuple[str, list[str]]] = []
    for where, name, paths, folder in plan:
        got = 0
        for p in paths:
            texts = _texts_of_file(p, where)
            if not texts and not folder:
                raise GlassroomError(f"{where}: {p} has no text; give a file with evaluation text or leave it out")
            got += len(texts)
            loaded.append((f"file:{p}", texts))
        if not got:
            raise GlassroomError(f"{where}: the evaluation files in folder {name} have no text; give evaluation text")
    for label, texts in loaded:
        for text in texts:
            yield label, text


# --- speed ------------------------------------------------------------------------------------------------


def benchmark(texts: Sequence[str], eval_texts: Iterable[tuple[str, str]], cfg, batch: int = 64) -> dict:
    """Documents/s of scan_batch over texts against a Python set-of-word-tuples baseline, in the same run.
    Both must find the same number of distinct leaked n-grams per document (`agree`)."""
    eval_texts = list(eval_texts)
    n = int(cfg.ngram)
    t0 = time.perf_counter()
    index = EvalIndex.build(cfg, eval_texts)
    blob = index.to_bytes()
    build_s = time.perf_counter() - t0
    _INDEXES.clear()
    _LAST[0] = _LAST[1] = None
    t0 = time.perf_counter()
    hits: list[np.ndarray] = []
    for at in range(0, len(texts), batch):
        hits.extend(scan_batch(blob, texts[at: at + batch]))
    scan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    grams: set[tuple[str, ...]] = set()
    for _, text in eval_texts:
        w = words_of(text)
        grams.update(tuple(w[j: j + n]) for j in range(len(w) - n + 1))
    base_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    base: list[int] = []
    for text in texts:
        w = words_of(text)
        base.append(len({g for g in (tuple(w[j: j + n]) for j in range(len(w) - n + 1)) if g in grams}))
    base_s = time.perf_counter() - t0
    mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
    docs = len(texts)
    return {
        "documents": docs, "mb": round(mb, 2), "ngram": n, "eval_texts": len(eval_texts),
        "eval_ngrams": int(len(index.hashes)), "bloom": index.bloom.describe(),
        "index_build_s": round(build_s, 3), "baseline_build_s": round(base_build_s, 3),
        "scan_s": round(scan_s, 3), "scan_docs_per_s": round(docs / max(scan_s, 1e-9), 1),
        "scan_mb_per_s": round(mb / max(scan_s, 1e-9), 2),
        "baseline_s": round(base_s, 3), "baseline_docs_per_s": round(docs / max(base_s, 1e-9), 1),
        "speedup": round(base_s / max(scan_s, 1e-9), 2),
        "documents_with_hits": int(sum(1 for h in hits if len(h))),
        "agree": [len(h) for h in hits] == base,
    }
