"""Near-duplicate removal that keeps its promise: derived LSH bands, verified pairs, clusters.

The promise (docs/data-dedup.md): two documents whose sets of `shingle_words`-word shingles have a
Jaccard similarity at or above `threshold` end in one duplicate cluster with probability at least
`recall` (LSH catches the pair), and no pair below the threshold is ever joined (every candidate
is verified against the true Jaccard of the two texts). One document per cluster is kept: the one
with the smallest build index (first in recipe order).

Pieces, in the order a build uses them:
- `Signer.signatures(texts)` (glassroom/data/minhash.py): MinHash signatures, a batch of documents per numpy pass (in the build's
  workers): each shingle hashed to 64 bits (glassroom/data/ngrams.py), slot i the minimum over the
  shingles of (a_i * x + b_i) mod 2^64 with a_i odd, a bijection per slot, so each slot is a MinHash
  and two documents agree in it with probability their Jaccard; the same in every process and machine.
- `choose_bands` / `catch_probability` / `curve`: the LSH banding derived from the threshold.
- `Deduplicator.add(i, digest, signature)` for every document, then `finish(texts_of)`: exact
  groups by digest, LSH candidates by band hash (numpy sort and group, no quadratic loop),
  verification (estimated Jaccard with a margin, then the exact Jaccard from the texts),
  connected components, canonical = smallest index. Returns a `DedupResult`.
- `DedupResult.decision(i)`, `.clusters`, `.example_records(...)` (removed/duplicates.jsonl).
- `StreamingDeduplicator`: the decision for one document at a time (clean.Cleaner's path).
- `benchmark(texts, cfg)`: documents/s of signature + LSH + verification, for bench/data.py.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import defaultdict
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from glassroom.data.minhash import Signer, slot_constants  # noqa: F401 (the signer the build uses, re-exported)
from glassroom.errors import ConfigError

WORDS = re.compile(r"\w+")
CURVE_POINTS = (0.3, 0.5, 0.6, 0.7, 0.9, 1.0)  # plus the threshold itself
ESTIMATE_SIGMAS = 4.0  # candidates whose estimated Jaccard is this many standard deviations below the threshold are dropped
GROUP_WINDOW = 200  # in a band group larger than this, each document is paired with the 200 before it
TEXT_CUT = 64 * 1024
MAX_NUM_PERM = 1024
VERIFY_CHUNK = 4096  # candidate pairs whose texts are read back at a time
CACHE_DOCS = 20_000  # shingle sets kept between chunks


def words(text: str) -> list[str]:
    """The words shingles (and decontamination n-grams) are made of: lowercased `\\w+` runs."""
    return WORDS.findall(text.lower())


def shingle_set(text: str, k: int) -> frozenset[str]:
    """The `k`-word shingles of `text`; a text of fewer than k words is one shingle, no words: empty.

    Jaccard similarities (the promise, the verification) are of these sets.
    """
    w = words(text)
    if not w:
        return frozenset()
    k = min(k, len(w))
    return frozenset(" ".join(w[i: i + k]) for i in range(len(w) - k + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b|; 0 when either set is empty (documents without words are never near copies)."""
    if not a or not b:
        return 0.0
    inter = len(a & b) if len(a) <= len(b) else len(b & a)
    return inter / (len(a) + len(b) - inter)


# ---- banding -------------------------------------------------------------------------------

def catch_probability(j: float, bands: int, rows: int) -> float:
    """P(a pair of Jaccard j shares at least one band) = 1 - (1 - j^rows)^bands."""
    return float(-math.expm1(bands * math.log1p(-(float(j) ** rows)))) if j < 1 else 1.0


def _below_area(threshold: float, bands: int, rows: int) -> float:
    """Integral of the catch probability over [0, threshold): the expected share of candidates below it."""
    js = np.linspace(0.0, threshold, 401)
    p = 1.0 - (1.0 - js ** rows) ** bands
    return float(np.sum((p[1:] + p[:-1]) * 0.5 * np.diff(js)))


def _least_bands(threshold: float, rows: int, recall: float) -> int:
    """The fewest bands of `rows` rows that catch a pair at the threshold with probability >= recall."""
    t_r = threshold ** rows
    if t_r <= 0.0:
        return 1 << 40
    if t_r >= 1.0:
        return 1
    need = math.log(1.0 - recall) / math.log1p(-t_r)
    if not math.isfinite(need) or need * rows > 1 << 20:  # far beyond any num_perm
        return 1 << 40
    bands = max(1, math.ceil(need))
    while catch_probability(threshold, bands, rows) < recall:  # float rounding of the log
        bands += 1
    return bands


def _cheapest(threshold: float, num_perm: int, recall: float) -> tuple[int, int] | None:
    """(bands, rows) with bands*rows <= num_perm, P(threshold) >= recall, least area below the threshold."""
    best = None
    for rows in range(1, num_perm + 1):
        bands = _least_bands(threshold, rows, recall)
        if bands * rows > num_perm:
            continue
        area = _below_area(threshold, bands, rows)
        if best is None or area < best[0] - 1e-12:
            best = (area, bands, rows)
    return None if best is None else (best[1], best[2])


def choose_bands(threshold: float, num_perm: int, recall: float, path: str = "dedup") -> tuple[int, int]:
    """The LSH banding for a threshold: (bands, rows).

    Rows are those of the cheapest banding (least expected share of candidate pairs below the
    threshold: the integral of the catch curve over [0, threshold)) that reaches margin_recall
    (halfway from `recall` to 1: 0.975 for 0.95) at the threshold, or `recall` itself when no
    banding of num_perm reaches the margin; then the rest of the signature is spent on more bands
    of those rows (bands = num_perm // rows). Both raise the catch probability at the threshold
    above `recall` (0.986 instead of 0.953 for the defaults), so that a sample of pairs at the
    threshold does not fall below it by chance, for more candidates below the threshold, all of
    which verification removes.
    Raises a one-line ConfigError naming `<path>.num_perm` and a value that works when none does.
    """
    found = _cheapest(threshold, num_perm, margin_recall(recall)) or _cheapest(threshold, num_perm, recall)
    if found is None:
        need = min((_least_bands(threshold, rows, recall) * rows for rows in range(1, MAX_NUM_PERM + 1)),
                   default=MAX_NUM_PERM + 1)
        need = need if need <= MAX_NUM_PERM else None
        best = catch_probability(threshold, num_perm, 1)
        what = (f"raise {path}.num_perm to {need}" if need is not None else
                f"even {MAX_NUM_PERM} cannot: raise {path}.threshold or lower {path}.recall")
        raise ConfigError(f"{path}.num_perm: {num_perm} permutations catch a pair at threshold {threshold} "
                          f"with probability {best:.3f} at most, below recall {recall}; {what}")
    bands, rows = found
    return num_perm // rows, rows


def margin_recall(recall: float) -> float:
    """The catch probability the banding aims at when num_perm allows: halfway from recall to 1."""
    return recall + (1.0 - recall) / 2


def curve(threshold: float, bands: int, rows: int) -> list[list[float]]:
    """[[jaccard, P(candidate)], ...] at 0.3, 0.5, 0.6, 0.7, the threshold, 0.9 and 1.0."""
    points = sorted(set(CURVE_POINTS) | {round(float(threshold), 6)})
    return [[j, round(catch_probability(j, bands, rows), 6)] for j in points]


# ---- LSH by band hashes ------------------------------------------------------------------------

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * _MIX1
    h = h ^ (h >> np.uint64(27))
    h = h * _MIX2
    return h ^ (h >> np.uint64(31))


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: each band's `rows` signature values hashed to one number."""
    sig = np.asarray(signatures, dtype=np.uint64)
    out = np.empty((sig.shape[0], bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for b in range(bands):
            h = np.full(sig.shape[0], np.uint64(b + 1) * _MUL, dtype=np.uint64)
            for r in range(b * rows, (b + 1) * rows):
                h = _mix(h ^ sig[:, r])
            out[:, b] = h
    return out


def candidate_pairs(hashes: np.ndarray) -> np.ndarray:
    """(m, 2) int64 sorted unique pairs (a < b) of rows sharing a band hash.

    Each band is sorted once and its runs of equal hashes paired; in a run longer than
    GROUP_WINDOW each row is paired with the GROUP_WINDOW rows before it (a chain through the
    run, so the run's rows still meet in one cluster when they are near copies of each other).
    """
    n = hashes.shape[0]
    keys = np.empty(0, dtype=np.int64)  # a * n + b of the pairs so far, unique (bounded by the pairs, not the bands)
    for b in range(hashes.shape[1] if n > 1 else 0):
        chunks = []
        order = np.argsort(hashes[:, b], kind="stable")
        h = hashes[order, b]
        same = h[1:] == h[:-1]
        if not same.any():
            continue
        starts = np.flatnonzero(np.concatenate(([True], ~same)))
        lengths = np.diff(np.concatenate((starts, [n])))
        multi = lengths > 1
        starts, lengths = starts[multi], lengths[multi]
        # positions inside runs of 2 or more, with the position where their run starts
        run_start = np.repeat(starts, lengths)
        pos = run_start + (np.arange(len(run_start)) - np.repeat(np.cumsum(lengths) - lengths, lengths))
        for lag in range(1, min(int(lengths.max()), GROUP_WINDOW + 1)):
            ok = pos - lag >= run_start
            pos, run_start = pos[ok], run_start[ok]
            if not len(pos):
                break
            a, c = order[pos - lag].astype(np.int64), order[pos].astype(np.int64)
            chunks.append(np.minimum(a, c) * n + np.maximum(a, c))
        keys = _sorted_unique(np.concatenate([keys] + chunks))
    return np.stack([keys // n, keys % n], axis=1)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy 2's hash-based unique is 100x slower on millions of int64)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def estimated_jaccard(signatures: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Share of equal signature values per pair (the MinHash estimate), in chunks."""
    out = np.empty(len(pairs), dtype=np.float64)
    for s in range(0, len(pairs), 16384):
        p = pairs[s: s + 16384]
        out[s: s + 16384] = (signatures[p[:, 0]] == signatures[p[:, 1]]).mean(axis=1)
    return out


def estimate_floor(threshold: float, num_perm: int) -> float:
    """Candidates estimated below this are dropped unread: the threshold less ESTIMATE_SIGMAS std."""
    return threshold - ESTIMATE_SIGMAS * math.sqrt(threshold * (1 - threshold) / num_perm)


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            lo, hi = (ra, rb) if ra < rb else (rb, ra)
            self.parent[hi] = lo  # the root is always the smallest row: the canonical


# ---- the global pass ---------------------------------------------------------------------------

class DedupResult:
    """What the global pass decided: clusters, and per build index the decision."""

    def __init__(self, clusters: list[list[int]], decisions: dict[int, tuple[str, int, float]]) -> None:
        self.clusters = clusters  # each a sorted list of build indices, canonical first; sorted by canonical
        self._decisions = decisions

    def decision(self, i: int) -> tuple[str, int, float] | None:
        """None (kept) or (reason, canonical index, Jaccard of its shingles with the canonical's)."""
        return self._decisions.get(int(i))

    def removed(self) -> int:
        return len(self._decisions)

    def example_records(self, doc_info: Callable[[int], dict], texts_of: Callable[[list[int]], list[str]],
                        limit: int) -> Iterator[dict]:
        """One record per duplicate cluster (the first `limit` by canonical), for removed/duplicates.jsonl."""
        for n, cluster in enumerate(self.clusters[: max(int(limit), 0)]):
            texts = texts_of(list(cluster))
            kept, *rest = cluster
            info = doc_info(kept)
            record = {"cluster": n,
                      "kept": {"index": kept, "id": info["id"], "domain": info["domain"],
                               "source": info["source"], "text": _cut(texts[0])},
                      "removed": []}
            for i, text in zip(rest, texts[1:]):
                info = doc_info(i)
                reason, _, jac = self._decisions[i]
                record["removed"].append({"index": i, "id": info["id"], "domain": info["domain"],
                                          "source": info["source"], "reason": reason,
                                          "jaccard": round(jac, 4), "text": _cut(text)})
            yield record


def _cut(text: str) -> str:
    if len(text) <= TEXT_CUT // 4 or len(text.encode()) <= TEXT_CUT:
        return text
    cut = text.encode()[: TEXT_CUT - 3].decode("utf-8", "ignore")
    return cut + "…"


class Deduplicator:
    """Exact and near-duplicate removal over a whole build: add every document, then finish."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.bands, self.rows = (choose_bands(cfg.threshold, cfg.num_perm, cfg.recall) if cfg.fuzzy
                                 else (0, 0))
        self._index: list[int] = []
        self._digest: list[bytes] = []
        self._sig: list[np.ndarray | None] = []
        self.counts = self._zero_counts()
        self.seconds: dict[str, float] = {}

    @staticmethod
    def _zero_counts() -> dict[str, int]:
        return {"documents": 0, "candidate_pairs": 0, "estimated_pairs": 0, "verified_pairs": 0,
                "clusters": 0, "exact_duplicates": 0, "near_duplicates": 0}

    def add(self, i: int, digest: bytes, signature: np.ndarray | None) -> None:
        """Document with build index `i` (any order; each index once)."""
        if self.cfg.fuzzy and signature is None:
            raise ValueError(f"Deduplicator: build index {i} has no MinHash signature but dedup.fuzzy is on")
        self._index.append(int(i))
        self._digest.append(bytes(digest))
        self._sig.append(signature)

    def finish(self, texts_of: Callable[[list[int]], list[str]]) -> DedupResult:
        """Candidates -> verified pairs -> connected components; `texts_of(indices)` reads texts back."""
        cfg = self.cfg
        t0 = time.perf_counter()
        self.counts = self._zero_counts()
        index = np.asarray(self._index, dtype=np.int64)
        order = np.argsort(index, kind="stable")
        index = index[order]
        if len(index) and (np.diff(index) == 0).any():
            raise ValueError(f"Deduplicator: build index {int(index[np.flatnonzero(np.diff(index) == 0)[0]])} added twice")
        digests = [self._digest[k] for k in order]
        n = len(index)
        self.counts["documents"] = n
        uf = _UnionFind(n)
        exact_of: dict[int, int] = {}  # row -> first row with the same digest (only for later copies)
        first: dict[bytes, int] = {}
        for row, d in enumerate(digests):
            if d in first:
                exact_of[row] = first[d]
                if cfg.exact:
                    uf.union(first[d], row)
            else:
                first[d] = row
        shingles: dict[int, frozenset] = {}

        def load(rows: Iterable[int]) -> None:
            asked = {int(r) for r in rows}
            need = sorted(asked - shingles.keys())
            if not need:
                return
            if len(shingles) + len(need) > CACHE_DOCS:
                shingles.clear()
                need = sorted(asked)
            texts = texts_of([int(index[r]) for r in need])
            if len(texts) != len(need):
                raise ValueError(f"Deduplicator: texts_of returned {len(texts)} texts for {len(need)} indices")
            for r, text in zip(need, texts):
                shingles[r] = shingle_set(text, cfg.shingle_words)

        t1 = time.perf_counter()
        if cfg.fuzzy and n > 1:
            # Only the first of each digest takes part (its copies follow it through union-find).
            reps = np.asarray([row for row in range(n) if not (cfg.exact and row in exact_of)], dtype=np.int64)
            sigs = np.stack([np.asarray(self._sig[order[r]], dtype=np.uint64) for r in reps]) if len(reps) else \
                np.empty((0, cfg.num_perm), dtype=np.uint64)
            if sigs.shape[1] != cfg.num_perm:
                raise ValueError(f"Deduplicator: signatures of {sigs.shape[1]} values, expected num_perm {cfg.num_perm}")
            # Documents without words all share one signature and are never near copies: left out.
            empty = np.asarray(_empty_signature(cfg.num_perm, cfg.shingle_words), dtype=np.uint64)
            worded = ~(sigs == empty).all(axis=1)
            reps, sigs = reps[worded], sigs[worded]
            pairs = candidate_pairs(band_hashes(sigs, self.bands, self.rows))
            self.counts["candidate_pairs"] = int(len(pairs))
            t2 = time.perf_counter()
            est = estimated_jaccard(sigs, pairs)
            pairs = reps[pairs[est >= estimate_floor(cfg.threshold, cfg.num_perm)]]
            self.counts["estimated_pairs"] = int(len(pairs))
            t3 = time.perf_counter()
            verified = 0
            for s in range(0, len(pairs), VERIFY_CHUNK):
                chunk = pairs[s: s + VERIFY_CHUNK]
                todo = [(int(a), int(b)) for a, b in chunk if uf.find(int(a)) != uf.find(int(b))]
                load(r for ab in todo for r in ab)
                for a, b in todo:
                    if uf.find(a) == uf.find(b):  # joined by an earlier pair of this chunk
                        continue
                    if jaccard(shingles[a], shingles[b]) >= cfg.threshold:
                        uf.union(a, b)
                        verified += 1
            self.counts["verified_pairs"] = verified
            self.seconds.update(lsh=t2 - t1, estimate=t3 - t2, verify=time.perf_counter() - t3)
        # Clusters: rows with the same root; the root is the smallest row, i.e. the smallest index.
        roots = np.asarray([uf.find(r) for r in range(n)], dtype=np.int64)
        members: dict[int, list[int]] = defaultdict(list)
        for row in np.flatnonzero(roots != np.arange(n)):
            members[int(roots[row])].append(int(row))
        decisions: dict[int, tuple[str, int, float]] = {}
        clusters = []
        t4 = time.perf_counter()
        todo: list[tuple[int, int]] = []  # (root, row) whose Jaccard must be read from the texts
        for root in sorted(members):
            rows = members[root]
            clusters.append([int(index[root])] + [int(index[r]) for r in rows])
            todo += [(root, r) for r in rows if digests[r] != digests[root]]
        jac: dict[int, float] = {}
        for s in range(0, len(todo), VERIFY_CHUNK):  # read back in chunks, as verification does
            chunk = todo[s: s + VERIFY_CHUNK]
            load(x for pair in chunk for x in pair)
            for root, r in chunk:
                jac[r] = jaccard(shingles[root], shingles[r])
        for root in sorted(members):
            for r in members[root]:
                reason = "exact_duplicate" if cfg.exact and r in exact_of else "near_duplicate"
                decisions[int(index[r])] = (reason, int(index[root]), jac.get(r, 1.0))
                self.counts[reason + "s"] += 1
        self.counts["clusters"] = len(clusters)
        self.seconds.update(total=time.perf_counter() - t0, decisions=time.perf_counter() - t4)
        return DedupResult(clusters, decisions)

    def manifest_entry(self) -> dict:
        """manifest["dedup"]: the settings, the derived banding and its curve, what the pass counted."""
        cfg = self.cfg
        entry = {"exact": cfg.exact, "fuzzy": cfg.fuzzy, "threshold": cfg.threshold, "num_perm": cfg.num_perm,
                 "shingle_words": cfg.shingle_words, "recall": cfg.recall}
        if cfg.fuzzy:
            entry.update(bands=self.bands, rows=self.rows,
                         catch_probability=round(catch_probability(cfg.threshold, self.bands, self.rows), 6),
                         curve=curve(cfg.threshold, self.bands, self.rows),
                         verification=(f"candidates with an estimated Jaccard below "
                                       f"{estimate_floor(cfg.threshold, cfg.num_perm):.4f} (threshold less "
                                       f"{ESTIMATE_SIGMAS:g} std) dropped; the rest kept only when the exact "
                                       f"Jaccard of their shingle sets is at least {cfg.threshold}"))
        entry.update(self.counts)
        return entry


_EMPTY: dict[tuple[int, int], np.ndarray] = {}


def _empty_signature(num_perm: int, shingle_words: int) -> np.ndarray:
    """The signature Signer gives a text without words."""
    key = (num_perm, shingle_words)
    if key not in _EMPTY:
        _EMPTY[key] = Signer(num_perm, shingle_words).signature("")
    return _EMPTY[key]


# ---- one document at a time -------------------------------------------------------------------

class StreamingDeduplicator:
    """Decides each document as it comes, against the documents kept before it (clean.Cleaner).

    Same banding and verification as the global pass (the exact Jaccard from the kept texts'
    shingle sets, held in memory), but a document only meets documents kept before it, so a
    chain A~B~C with A, C apart keeps C. Deduplicator is the build's pass; this is for streams.
    """

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.bands, self.rows = (choose_bands(cfg.threshold, cfg.num_perm, cfg.recall) if cfg.fuzzy
                                 else (0, 0))
        self.seen: set[bytes] = set()
        self.buckets: list[dict[int, list[int]]] = [defaultdict(list) for _ in range(self.bands)]
        self.kept: list[frozenset] = []
        self.floor = estimate_floor(cfg.threshold, cfg.num_perm)
        self.sigs: list[np.ndarray] = []

    def reason(self, digest: bytes, signature: np.ndarray | None, text: str) -> str | None:
        """'exact_duplicate', 'near_duplicate' or None (then the document is remembered)."""
        cfg = self.cfg
        if cfg.exact and digest in self.seen:
            return "exact_duplicate"
        keys = None
        if cfg.fuzzy and signature is not None:
            sig = np.asarray(signature, dtype=np.uint64)
            keys = band_hashes(sig[None, :], self.bands, self.rows)[0]
            shingles = shingle_set(text, cfg.shingle_words)
            if shingles:
                seen = set()
                for b, key in enumerate(keys):
                    for j in self.buckets[b].get(int(key), ()):
                        if j in seen:
                            continue
                        seen.add(j)
                        if (self.sigs[j] == sig).mean() >= self.floor and \
                                jaccard(self.kept[j], shingles) >= cfg.threshold:
                            return "near_duplicate"
                j = len(self.kept)
                self.kept.append(shingles)
                self.sigs.append(sig)
                for b, key in enumerate(keys):
                    self.buckets[b][int(key)].append(j)
        self.seen.add(digest)
        return None


# ---- speed ------------------------------------------------------------------------------------

def benchmark(texts: Sequence[str], cfg, signer=None) -> dict:
    """Documents/s of signatures + LSH + verification over `texts` (one process), for bench/data.py.

    `signer`: anything with `signatures(texts)` (bench/data.py passes its datasketch reference); Signer by default.
    """
    signer = signer or Signer(cfg.num_perm, cfg.shingle_words)
    t0 = time.perf_counter()
    sigs = list(signer.signatures(texts)) if cfg.fuzzy else [None] * len(texts)
    t1 = time.perf_counter()
    dd = Deduplicator(cfg)
    for i, (text, sig) in enumerate(zip(texts, sigs)):
        dd.add(i, hashlib.blake2b(text.encode(), digest_size=16).digest(), sig)
    result = dd.finish(lambda idx: [texts[i] for i in idx])
    t2 = time.perf_counter()
    n = len(texts)
    return {"documents": n, "megabytes": round(sum(len(t.encode()) for t in texts) / 1e6, 3),
            "signature_seconds": round(t1 - t0, 3), "dedup_seconds": round(t2 - t1, 3),
            "docs_per_second": round(n / max(t2 - t0, 1e-9), 1),
            "bands": dd.bands, "rows": dd.rows,
            "candidate_pairs": dd.counts["candidate_pairs"], "estimated_pairs": dd.counts["estimated_pairs"],
            "verified_pairs": dd.counts["verified_pairs"], "clusters": dd.counts["clusters"],
            "removed": result.removed(),
            "stage_seconds": {k: round(v, 3) for k, v in dd.seconds.items()}}
