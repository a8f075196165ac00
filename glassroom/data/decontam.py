"""Decontamination: find training documents that hold evaluation text, judged by how much of it they cover.

The rule (docs/data-decontamination.md): words are lowercased `\\w+` runs (the dedup shingles' words); two
texts share an n-gram of `ngram` words (13 by default), common phrases left out (n-grams found in more
than `common_docs` training documents: licence headers, liturgical formulas). A training document is
contaminated when the longest passage of an evaluation text it holds spans `eval_passage` of that text's
words, or the shared n-grams cover `eval_coverage` of them, or `train_coverage` of the document's own;
one that shares less is kept and listed (an overlap).

Pieces, in the order a build uses them (glassroom/data/build.py and stages.py wire them); the n-gram hashes
and the Bloom filter are glassroom/data/ngrams.py's, the evaluation files are read by glassroom/data/eval_files.py:
- `EvalIndex.build(cfg, eval_texts)`: the Bloom filter of every evaluation n-gram, the exact sorted array of
  them (a Bloom hit is verified there, so a reported leak is never a false positive), each n-gram's first
  source, and every occurrence's place (for the coverage of each evaluation text: `EvalIndex.coverage`).
- `scan_batch(blob, texts)`: per text, the sorted unique evaluation n-gram hashes it contains (top-level and
  picklable for executor tasks; the index is deserialised once per process, cached by digest).
- `decide(index, hits_per_doc, cfg, texts_of)`: drops common phrases, measures the three shares of every
  document with leaked n-grams left, says which are contaminated; its `summary()` goes to
  manifest["decontamination"]; `example_record` makes one removed/contaminated.jsonl line.
- `benchmark(texts, eval_texts, cfg)`: scan speed against a plain Python set-of-tuples baseline.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from glassroom.data.ngrams import FP_RATE, WORDS, BloomFilter, batch_ngram_hashes, ngram_hashes, words_of

EXAMPLE_BYTES = 64 * 1024  # a removed/contaminated.jsonl text is cut here, the cut marked with "…"
PASSAGES = 5  # leaked passages shown per example record
PASSAGE_CHARS = 1000
COVERAGE_BATCH = 64  # documents read back at a time to measure their coverage
_MAGIC = b"glassroom-evalindex/2\n"


@dataclass
class EvalIndex:
    """Every evaluation n-gram: a Bloom filter, the exact sorted hashes, each hash's first source."""

    ngram: int
    bloom: BloomFilter
    hashes: np.ndarray  # sorted unique uint64
    source_of: np.ndarray  # int32, per hash: index into sources
    sources: list[dict] = field(default_factory=list)  # {"name", "documents", "short_documents", "ngrams"}
    # every n-gram occurrence of every evaluation text of at least `ngram` words, sorted by (hash, place):
    occ_hash: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    occ_word: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # its first word, all texts end to end
    doc_words: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))  # text e: words [e], [e+1]
    doc_source: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))  # per text: index into sources

    @classmethod
    def build(cls, cfg, eval_texts: Iterable[tuple[str, str]], fp_rate: float = FP_RATE) -> "EvalIndex":
        """The index of eval_texts, (source_name, text) pairs; texts shorter than cfg.ngram words count as short."""
        n = int(cfg.ngram)
        names: dict[str, int] = {}
        sources: list[dict] = []
        chunks: list[np.ndarray] = []
        doc_source: list[int] = []
        doc_words = [0]
        for name, text in eval_texts:
            s = names.get(name)
            if s is None:
                s = names[name] = len(sources)
                sources.append({"name": name, "documents": 0, "short_documents": 0, "ngrams": 0})
            sources[s]["documents"] += 1
            h = ngram_hashes(text, n)
            if not len(h):
                sources[s]["short_documents"] += 1
                continue
            chunks.append(h)
            doc_source.append(s)
            doc_words.append(doc_words[-1] + len(h) + n - 1)
        offsets = np.asarray(doc_words, dtype=np.int64)
        if chunks:
            everything = np.concatenate(chunks)
            word = np.concatenate([np.arange(len(h), dtype=np.int64) + offsets[e] for e, h in enumerate(chunks)])
            order = np.lexsort((word, everything))  # by hash, then by place: an n-gram's first occurrence first
            occ_hash, occ_word = everything[order], word[order]
            hashes, first = np.unique(occ_hash, return_index=True)
            owner = np.asarray(doc_source, dtype=np.int32)[np.searchsorted(offsets, occ_word, side="right") - 1]
            source_of = owner[first]
            for s, src in enumerate(sources):
                src["ngrams"] = int(len(np.unique(occ_hash[owner == s])))
        else:
            occ_hash, occ_word = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
            hashes, source_of = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int32)
        bloom = BloomFilter.sized(len(hashes), fp_rate)
        bloom.add(hashes)
        return cls(n, bloom, hashes, source_of.astype(np.int32), sources, occ_hash, occ_word, offsets,
                   np.asarray(doc_source, dtype=np.int32))

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
        arrays = [self.hashes.astype("<u8"), self.source_of.astype("<i4"), self.occ_hash.astype("<u8"),
                  self.occ_word.astype("<i8"), self.doc_words.astype("<i8"), self.doc_source.astype("<i4")]
        meta = json.dumps({"ngram": self.ngram, "sources": self.sources, "bloom": len(bloom),
                           "arrays": [[a.dtype.str, len(a)] for a in arrays]}, sort_keys=True).encode()
        return b"".join([_MAGIC, struct.pack("<Q", len(meta)), meta, *(a.tobytes() for a in arrays), bloom])

    @classmethod
    def from_bytes(cls, blob: bytes) -> "EvalIndex":
        if not blob.startswith(_MAGIC):
            raise ValueError("not a glassroom evaluation index")
        at = len(_MAGIC)
        (size,) = struct.unpack_from("<Q", blob, at)
        at += 8
        meta = json.loads(blob[at: at + size])
        at += size
        arrays = []
        for dtype, count in meta["arrays"]:
            a = np.frombuffer(blob, dtype=dtype, count=count, offset=at)
            arrays.append(a.astype(a.dtype.newbyteorder("="), copy=False))
            at += a.nbytes
        bloom = BloomFilter.from_bytes(blob[at: at + meta["bloom"]])
        hashes, source_of, occ_hash, occ_word, doc_words, doc_source = arrays
        return cls(meta["ngram"], bloom, hashes, source_of, meta["sources"], occ_hash, occ_word, doc_words, doc_source)

    def coverage(self, leaked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per evaluation text (its place in the index): the share of its words the `leaked` n-grams cover, and
        the share its longest passage spans (consecutive words all covered: the windows of a run of shared
        n-grams that overlap or touch). A word is covered when a leaked n-gram holds it (the
        contaminated-token count of Llama 2's appendix A.6, by words); the passage is ConTAM's longest
        match (Singh et al. 2024)."""
        leaked = np.asarray(leaked, dtype=np.uint64)
        texts = len(self.doc_source)
        share, passage = np.zeros(texts), np.zeros(texts)
        if not len(leaked) or not len(self.occ_hash):
            return share, passage
        lo = np.searchsorted(self.occ_hash, leaked, side="left")
        counts = np.searchsorted(self.occ_hash, leaked, side="right") - lo
        if not counts.sum():
            return share, passage
        take = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(counts.sum())
        starts = np.sort(self.occ_word[take])
        text = np.searchsorted(self.doc_words, starts, side="right") - 1
        words = np.diff(self.doc_words).astype(np.float64)
        share = np.bincount(text, weights=_run_cover(starts, self.ngram, text), minlength=texts) / words
        # passages: a new one begins where the text changes or a word after the last window is not covered
        new = np.ones(len(starts), dtype=bool)
        new[1:] = (text[1:] != text[:-1]) | (starts[1:] > starts[:-1] + self.ngram)
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(starts)) - 1
        spans = (starts[last] + self.ngram - starts[first]).astype(np.float64)
        np.maximum.at(passage, text[first], spans)
        return share, passage / words

    def text_name(self, e: int) -> str:
        """`source #k`: the k-th evaluation text (from 0, counting only texts of at least `ngram` words) of its source."""
        s = int(self.doc_source[e])
        return f"{self.sources[s]['name']} #{int(np.count_nonzero(self.doc_source[:e] == s))}"


def _run_cover(starts: np.ndarray, n: int, group: np.ndarray | None = None) -> np.ndarray:
    """Per sorted n-gram start, the words it covers that the next one (in the same group) does not: the
    union of the windows [start, start + n) is their sum."""
    out = np.full(len(starts), n, dtype=np.float64)
    if len(starts) > 1:
        gap = np.minimum(np.diff(starts), n).astype(np.float64)
        same = np.ones(len(gap), dtype=bool) if group is None else group[1:] == group[:-1]
        out[:-1] = np.where(same, gap, n)
    return out


def train_coverage(text: str, leaked: np.ndarray, n: int) -> float:
    """The share of text's words inside its leaked n-grams (0.0 for a text of fewer than n words)."""
    h = ngram_hashes(text, n)
    if not len(h) or not len(leaked):
        return 0.0
    starts = np.flatnonzero(np.isin(h, np.asarray(leaked, dtype=np.uint64)))
    return float(_run_cover(starts, n).sum() / (len(h) + n - 1)) if len(starts) else 0.0


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
    """decide()'s answer, per document in the order given: contaminated (covered past a threshold) or only
    overlapping (shares n-grams below both thresholds: kept), distinct leaked n-grams, the two coverages."""

    contaminated: np.ndarray  # bool
    matches: np.ndarray  # int64: distinct leaked n-grams after dropping common phrases
    common: np.ndarray  # sorted uint64: n-grams dropped as common phrases
    hits_per_doc: list[np.ndarray]
    index: EvalIndex
    cfg: object
    raw_documents: int = 0  # documents with any evaluation n-gram before dropping common phrases
    eval_coverage: np.ndarray = field(default_factory=lambda: np.zeros(0))  # share of the most covered eval text
    eval_text: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # which one (-1: none)
    train_coverage: np.ndarray = field(default_factory=lambda: np.zeros(0))  # share of the document itself
    eval_passage: np.ndarray = field(default_factory=lambda: np.zeros(0))  # its longest passage in the document

    @property
    def overlapping(self) -> np.ndarray:
        """bool: shares evaluation n-grams, but covers too little of either text to count as contaminated."""
        return (self.matches > 0) & ~self.contaminated

    def leaked(self, i: int) -> np.ndarray:
        """Document i's leaked n-gram hashes, common phrases left out."""
        hits = self.hits_per_doc[i]
        if not len(self.common) or not len(hits):
            return hits
        return hits[~np.isin(hits, self.common, assume_unique=True)]

    def reason(self, i: int) -> str:
        """Why document i is contaminated or kept, in words (removed/contaminated.jsonl's `reason`)."""
        ep, ec, tc = float(self.eval_passage[i]), float(self.eval_coverage[i]), float(self.train_coverage[i])
        cfg = self.cfg
        name = self.index.text_name(int(self.eval_text[i])) if self.eval_text[i] >= 0 else "an evaluation text"
        parts = []
        if ep >= float(cfg.eval_passage):
            parts.append(f"holds a passage of {ep:.0%} of {name} (at least {float(cfg.eval_passage):.0%})")
        if ec >= float(cfg.eval_coverage):
            parts.append(f"covers {ec:.0%} of {name} (at least {float(cfg.eval_coverage):.0%})")
        if tc >= float(cfg.train_coverage):
            parts.append(f"is {tc:.0%} evaluation text (at least {float(cfg.train_coverage):.0%})")
        if parts:
            return " and ".join(parts)
        return (f"kept: its longest passage of {name} is {ep:.0%} of it (below {float(cfg.eval_passage):.0%}), "
                f"covering {ec:.0%} in all (below {float(cfg.eval_coverage):.0%}); it is {tc:.0%} evaluation text "
                f"(below {float(cfg.train_coverage):.0%})")

    def coverage_of(self, i: int) -> dict:
        """Document i's coverage figures and reason, as removed/contaminated.jsonl has them."""
        e = int(self.eval_text[i])
        return {"eval_text": self.index.text_name(e) if e >= 0 else None,
                "eval_passage": round(float(self.eval_passage[i]), 4), "eval_coverage": round(float(self.eval_coverage[i]), 4),
                "train_coverage": round(float(self.train_coverage[i]), 4), "reason": self.reason(i)}

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
            "rule": "contaminated when one passage of an evaluation text in the document spans at least "
                    "eval_passage of its words, or the shared n-grams cover at least eval_coverage of them, or at "
                    "least train_coverage of the document's own words; a document sharing less is kept (overlapping)",
            "eval_passage": float(self.cfg.eval_passage),
            "eval_coverage": float(self.cfg.eval_coverage),
            "train_coverage": float(self.cfg.train_coverage),
            "eval_sources": self.index.sources,
            "eval_ngrams": int(len(self.index.hashes)),
            "common_docs": int(getattr(self.cfg, "common_docs", 0)),
            "common_phrases_dropped": int(len(self.common)),
            "documents_scanned": int(len(self.contaminated)),
            "documents_with_common_phrases_only": int(self.raw_documents - int((self.matches > 0).sum())),
            "documents_overlapping_kept": int(self.overlapping.sum()),
            f"documents_{verb}": int(self.contaminated.sum()),
            "bloom": self.index.bloom.describe(),
        }
        if domains is not None:
            per: dict[str, dict] = {}
            for d, bad, over, m in zip(domains, self.contaminated, self.overlapping, self.matches):
                entry = per.setdefault(d, {"scanned": 0, verb: 0, "overlapping_kept": 0, "ngrams": 0})
                entry["scanned"] += 1
                entry[verb] += int(bad)
                entry["overlapping_kept"] += int(over)
                entry["ngrams"] += int(m)
            out["domains"] = per
        return out


def decide(index: EvalIndex, hits_per_doc: Sequence[np.ndarray], cfg,
           texts_of: Callable[[list[int]], list[str]]) -> Verdict:
    """Which documents are contaminated. N-grams in more than cfg.common_docs documents are common phrases and
    dropped; a document with leaked n-grams left is contaminated when they cover at least cfg.eval_coverage of
    one evaluation text's words or cfg.train_coverage of its own (texts_of(positions) reads those documents'
    texts back), and overlapping (kept) otherwise."""
    hits_per_doc = [np.unique(np.asarray(h, dtype=np.uint64)) for h in hits_per_doc]  # a repeat counts once
    nonempty = [h for h in hits_per_doc if len(h)]
    if nonempty:
        grams, counts = np.unique(np.concatenate(nonempty), return_counts=True)
        common = grams[counts > int(cfg.common_docs)]
    else:
        common = np.empty(0, dtype=np.uint64)
    docs = len(hits_per_doc)
    verdict = Verdict(np.zeros(docs, dtype=bool), np.zeros(docs, dtype=np.int64), common, hits_per_doc, index, cfg,
                      raw_documents=len(nonempty), eval_coverage=np.zeros(docs),
                      eval_text=np.full(docs, -1, dtype=np.int64), train_coverage=np.zeros(docs),
                      eval_passage=np.zeros(docs))
    for i, h in enumerate(hits_per_doc):
        if len(h):
            verdict.matches[i] = len(verdict.leaked(i))
    candidates = np.flatnonzero(verdict.matches).tolist()
    for at in range(0, len(candidates), COVERAGE_BATCH):
        batch = candidates[at: at + COVERAGE_BATCH]
        for i, text in zip(batch, texts_of(batch)):
            leaked = verdict.leaked(i)
            share, passage = index.coverage(leaked)
            e = int(np.argmax(passage)) if passage.max() >= float(cfg.eval_passage) else int(np.argmax(share))
            verdict.eval_text[i], verdict.eval_coverage[i], verdict.eval_passage[i] = e, share[e], passage[e]
            verdict.train_coverage[i] = train_coverage(text, leaked, index.ngram)
    verdict.contaminated = (verdict.matches > 0) & ((verdict.eval_passage >= float(cfg.eval_passage))
                                                   | (verdict.eval_coverage >= float(cfg.eval_coverage))
                                                   | (verdict.train_coverage >= float(cfg.train_coverage)))
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


ACTIONS = {"remove": "removed", "removed": "removed", "flag": "flagged", "flagged": "flagged", "kept": "kept"}
FLAG_CONTAMINATED = 1  # doc_flags bit of a contaminated document that action: flag kept in train
FLAG_OVERLAP = 2  # doc_flags bit of a document sharing evaluation n-grams below the coverage thresholds


def example_record(doc: dict, text: str, hits: np.ndarray, index: EvalIndex, action: str,
                   coverage: dict | None = None) -> dict:
    """One line of removed/contaminated.jsonl: the document, its leaked passages, where they came from and why.

    `hits` are the document's leaked n-gram hashes (Verdict.leaked(i)); doc holds index, id, domain, source;
    action is the recipe's (remove, flag), the record's word for it (removed, flagged) or kept (a document
    that only overlaps); coverage is Verdict.coverage_of(i)."""
    hits = np.asarray(hits, dtype=np.uint64)
    if action not in ACTIONS:
        raise ValueError(f"example_record: action {action!r} is not one of {sorted(ACTIONS)}")
    return {"index": doc.get("index"), "id": doc.get("id"), "domain": doc.get("domain"), "source": doc.get("source"),
            "action": ACTIONS[action], "matches": int(len(hits)), **(coverage or {}),
            "eval_sources": index.source_names(hits), "ngrams": leaked_passages(text, hits, index.ngram),
            "text": _cut(text)}


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
