"""Quality: a linear classifier over hashed n-grams, trained on the corpus itself; scores and buckets.

`train(sample, cfg)` builds a training set from kept train documents (docs/data-quality.md):
positives are windows of the positive domains' text with licence blocks and boilerplate lines taken
out; negatives are (a) garbled versions of those windows (words shuffled, letters substituted, text
cut mid-word into fragments), (b) licence and copyright blocks mined from the sample, (c) boilerplate:
lines repeated in many documents. Classes are balanced; 20% of the documents (and of the distinct
licence blocks and boilerplate lines) are held out and give the accuracy recorded in the manifest.
The model is logistic regression (lbfgs, single-threaded, deterministic) over scikit-learn's
HashingVectorizer features: lowercased word 1-2-grams (character n-grams were tried: slower 4x and
no more accurate on the held-out garbled text, docs/data-quality.md).

`score_batch(blob, texts)` -> P(positive) per text, float32, computed row by row so a text gets the
same score bit for bit whatever batch it is in; long texts are scored on at most SCORE_CHARS
characters taken as evenly spaced windows. `cutoffs` and `assign` turn scores into equal-count
buckets per domain, q0 the lowest.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import time
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glassroom.data.recipe import QualityConfig
from glassroom.data.shards import savez_fixed
from glassroom.errors import GlassroomError

FORMAT = 1
WORD_FEATURES = 2**20  # hashed word 1-2-grams
WINDOW_CHARS = 1200  # training windows: paragraphs joined up to about this many characters
MIN_WINDOW_CHARS = 200
WINDOWS_PER_DOC = 6  # at most this many positive windows per document (evenly spread)
SCORE_CHARS = 8192  # a document is scored on at most this many characters...
SCORE_WINDOWS = 4  # ...taken as this many evenly spaced windows when it is longer
HELDOUT = 0.2
BOILERPLATE_MIN_DOCS = 3  # a line is boilerplate in at least max(this, BOILERPLATE_FRACTION of documents)...
BOILERPLATE_FRACTION = 0.02
BOILERPLATE_MIN_CHARS = 16  # ...and has at least this many characters and 2 words
C = 100.0  # inverse regularisation of the logistic regression

_LICENCE = [re.compile(p, re.I) for p in (
    r"\bcopyright\b", r"\(c\)\s*(?:\d{4}|[A-Z])|©", r"permission is hereby granted", r"without any warranty",
    r"licensed under", r"spdx-license-identifier", r"all rights reserved", r"\bgnu (?:lesser |library )?general public licen[cs]e",
    r"apache licen[cs]e", r"\bmit licen[cs]e", r"redistribution and use in source and binary forms",
    r"this (?:program|library|file) is free software", r"merchantability", r"fitness for a particular purpose",
    r"the above copyright notice", r"warrant(?:y|ies) of any kind", r"licen[cs]e,? or \(at your option\)",
    r"you may not use this file except", r"liable for any (?:claim|damages)",
)]
# a licence phrase contains one of these (lowercased): a cheap test before the regular expressions
_LICENCE_WORDS = ("copyright", "(c)", "©", "permission", "warrant", "licen", "spdx", "rights", "merchantab",
                  "fitness", "free software", "liable", "redistribution", "you may not use")
_SPDX = re.compile(r"spdx-license-identifier", re.I)
_WORD = re.compile(r"\S+")
_PARAGRAPH = re.compile(r"\n\s*\n")
KINDS = ("positive", "garbled", "licence", "boilerplate")


def licence_block(text: str) -> bool:
    """A licence or copyright block: an SPDX line, or two distinct licence phrases."""
    lower = text.lower()
    if not any(word in lower for word in _LICENCE_WORDS):
        return False
    if _SPDX.search(text):
        return True
    hits = 0
    for pattern in _LICENCE:
        if pattern.search(text):
            hits += 1
            if hits >= 2:
                return True
    return False


def _key(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "big")


def _cut(text: str, limit: int) -> list[str]:
    """Text split at whitespace into pieces of at most about `limit` characters."""
    out, start = [], 0
    while len(text) - start > limit:
        end = text.rfind(" ", start + limit // 2, start + limit)
        end = text.rfind("\n", start + limit // 2, start + limit) if end < 0 else end
        end = start + limit if end < 0 else end
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return [t.strip() for t in out if t.strip()]


def windows(text: str, limit: int = WINDOW_CHARS) -> list[str]:
    """Paragraphs (blank-line separated) joined in order into windows of up to `limit` characters."""
    out, cur = [], ""
    for para in _PARAGRAPH.split(text):
        para = para.strip("\n")
        if not para.strip():
            continue
        for piece in _cut(para, limit):
            if cur and len(cur) + len(piece) + 2 > limit:
                out.append(cur)
                cur = ""
            cur = f"{cur}\n\n{piece}" if cur else piece
    if cur:
        if out and len(cur) < MIN_WINDOW_CHARS and len(out[-1]) + len(cur) + 2 <= 2 * limit:
            out[-1] = f"{out[-1]}\n\n{cur}"
        else:
            out.append(cur)
    return out


def scoring_text(text: str) -> str:
    """What a document is scored on: the whole text up to SCORE_CHARS, else evenly spaced windows."""
    if len(text) <= SCORE_CHARS:
        return text
    width = SCORE_CHARS // SCORE_WINDOWS
    step = (len(text) - width) / (SCORE_WINDOWS - 1)
    return "\n".join(text[int(i * step): int(i * step) + width] for i in range(SCORE_WINDOWS))


# --- negatives -------------------------------------------------------------------------------------------

_SUBSTITUTE = "abcdefghijklmnopqrstuvwxyz0123456789#@%&*~^|"


def garble(text: str, kind: int, rng: np.random.Generator) -> str:
    """A garbled version of text: 0 words shuffled, 1 letters substituted, 2 fragments cut mid-word."""
    if kind == 0:
        words = _WORD.findall(text)
        rng.shuffle(words)
        lines, line = [], []
        for w in words:
            line.append(w)
            if len(line) >= 12:
                lines.append(" ".join(line))
                line = []
        return "\n".join(lines + [" ".join(line)]).strip()
    if kind == 1:
        draws = rng.random(len(text)).tolist()
        subs = rng.integers(0, len(_SUBSTITUTE), len(text)).tolist()
        return "".join(_SUBSTITUTE[k] if c.isalnum() and r < 0.3 else c for c, r, k in zip(text, draws, subs))
    pieces, total = [], 0
    while total < len(text) and len(pieces) < 200:
        n = int(rng.integers(4, 24))
        start = int(rng.integers(0, max(1, len(text) - n)))
        pieces.append(text[start: start + n].replace("\n", " "))
        total += n
    seps = rng.choice(np.array([" ", " ", "\n", "", " | "]), len(pieces))
    return "".join(p + s for p, s in zip(pieces, seps)).strip()


def boilerplate_lines(texts: list[str]) -> set[str]:
    """Lines (stripped) repeated in at least max(3, 2% of) documents: navigation, headers, footers."""
    counts: Counter = Counter()
    for text in texts:
        counts.update({line.strip() for line in text.split("\n")
                       if len(line.strip()) >= BOILERPLATE_MIN_CHARS and len(line.split()) >= 2})
    floor = max(BOILERPLATE_MIN_DOCS, math.ceil(BOILERPLATE_FRACTION * len(texts)))
    return {line for line, n in counts.items() if n >= floor}


# --- the model -------------------------------------------------------------------------------------------

def _features(texts: list[str]):
    from sklearn.feature_extraction.text import HashingVectorizer  # lazy: sklearn loads only when this runs

    words = HashingVectorizer(n_features=WORD_FEATURES, ngram_range=(1, 2), lowercase=True, alternate_sign=False,
                              norm="l2", token_pattern=r"(?u)\b\w+\b", dtype=np.float64)
    return words.transform(texts).tocsr()


@dataclass
class QualityModel:
    """The fitted linear model: one weight per hashed feature (WORD_FEATURES of them)."""

    coef: np.ndarray  # float64, dense, one weight per feature
    intercept: float
    temperature: float = 1.0  # score = sigmoid(z / temperature): spreads confident scores apart in float32

    def logits(self, texts: list[str]) -> np.ndarray:
        """z = w . x + b per text (float64), each row's dot product computed alone (batch-independent)."""
        x = _features([scoring_text(t) for t in texts])
        out = np.empty(len(texts), dtype=np.float64)
        for i in range(len(texts)):  # row by row: the sum's order depends on the text only
            lo, hi = x.indptr[i], x.indptr[i + 1]
            out[i] = float(np.dot(x.data[lo:hi], self.coef[x.indices[lo:hi]])) + self.intercept
        return out

    def scores(self, texts: list[str]) -> np.ndarray:
        """P(positive) per text, float32; each row's dot product is computed alone (batch-independent)."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        z = self.logits(texts) / self.temperature
        # math.exp per element (not numpy's SIMD exp): the same bits for a text alone or in any batch
        return np.array([1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0 for v in z.tolist()], dtype=np.float32)

    def to_bytes(self) -> bytes:
        nz = np.flatnonzero(self.coef).astype(np.int32)
        arrays = {"format": np.array(FORMAT, dtype=np.int32),
                  "coef_index": nz, "coef_value": self.coef[nz].astype(np.float64),
                  "intercept": np.array(self.intercept, dtype=np.float64),
                  "temperature": np.array(self.temperature, dtype=np.float64),
                  "word_features": np.array(WORD_FEATURES, dtype=np.int64),
                  "ngram_range": np.array([1, 2], dtype=np.int64),
                  "score_chars": np.array(SCORE_CHARS, dtype=np.int64)}
        buf = io.BytesIO()
        savez_fixed(buf, **arrays)  # fixed timestamps: same model, same bytes
        return buf.getvalue()

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

    @classmethod
    def from_bytes(cls, blob: bytes, where: str = "quality classifier") -> "QualityModel":
        try:
            with np.load(io.BytesIO(blob), allow_pickle=False) as z:
                if int(z["format"]) != FORMAT:
                    raise GlassroomError(f"{where}: classifier format {int(z['format'])}, this glassroom reads "
                                         f"{FORMAT}; rebuild the dataset")
                if int(z["word_features"]) != WORD_FEATURES or z["ngram_range"].tolist() != [1, 2]:
                    raise GlassroomError(f"{where}: hashed with other feature sizes; rebuild the dataset")
                index, value, intercept = z["coef_index"], z["coef_value"], float(z["intercept"])
                temperature = float(z["temperature"])
        except GlassroomError:
            raise
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
            raise GlassroomError(f"{where}: not a glassroom quality classifier ({type(exc).__name__}); "
                                 f"rebuild the dataset") from None
        n = WORD_FEATURES
        if index.ndim != 1 or index.shape != value.shape or (len(index) and (index.min() < 0 or index.max() >= n)) \
                or not np.all(np.isfinite(value)) or not math.isfinite(intercept) \
                or not (math.isfinite(temperature) and temperature > 0):
            raise GlassroomError(f"{where}: damaged classifier weights; rebuild the dataset")
        coef = np.zeros(n, dtype=np.float64)
        coef[index] = value
        return cls(coef=coef, intercept=intercept, temperature=temperature)

    @classmethod
    def load(cls, path: str | Path) -> "QualityModel":
        path = Path(path)
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise GlassroomError(f"{path}: cannot read the quality classifier ({exc.strerror}); rebuild the dataset") from None
        return cls.from_bytes(blob, str(path))


_CACHE: dict[bytes, QualityModel] = {}


def score_batch(blob: bytes, texts: list[str]) -> np.ndarray:
    """P(positive) in [0, 1] per text as float32 (a top-level function for executor tasks; the model
    is parsed once per process and blob)."""
    key = hashlib.blake2b(blob, digest_size=16).digest()
    model = _CACHE.get(key)
    if model is None:
        _CACHE.clear()
        model = _CACHE[key] = QualityModel.from_bytes(blob)
    return model.scores(list(texts))


# --- the training set ------------------------------------------------------------------------------------

def training_set(sample: list[dict], cfg) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, dict]:
    """(texts, label 1/0, kind index into KINDS, held out?, composition) built from `sample` (see module doc)."""
    if not isinstance(sample, list) or not all(isinstance(d, dict) and isinstance(d.get("text"), str)
                                               and isinstance(d.get("domain"), str) for d in sample):
        raise GlassroomError("quality: the training sample must be a list of {'text', 'domain'} documents")
    domains = sorted({d["domain"] for d in sample})
    positive_domains = list(cfg.positive_domains) or domains
    missing = [d for d in positive_domains if d not in domains]
    if missing:
        raise GlassroomError(f"recipe quality.positive_domains: no kept documents in {', '.join(missing)} "
                             f"(domains with documents: {', '.join(domains) or 'none'}); fix the list or leave it empty")
    seed = int(cfg.seed)
    texts = [d["text"] for d in sample]
    boiler = boilerplate_lines(texts)
    held = [_key(seed, "doc", i, t[:256]) % 1000 < HELDOUT * 1000 for i, t in enumerate(texts)]
    if len(texts) >= 2 and all(held):
        held[0] = False
    if len(texts) >= 2 and not any(held):
        held[-1] = True

    positives: list[tuple[str, bool, int]] = []  # (text, held out, document)
    licences: dict[str, None] = {}
    for i, doc in enumerate(sample):
        kept = []
        for w in windows(doc["text"]):
            if licence_block(w):
                for para in _PARAGRAPH.split(w):
                    if licence_block(para):
                        licences.setdefault(para.strip(), None)
                    else:
                        kept.append(para)
                continue
            kept.append(w)
        if doc["domain"] not in positive_domains:
            continue
        clean = "\n".join(line for line in "\n\n".join(kept).split("\n") if line.strip() not in boiler)
        ws = [w for w in windows(clean) if len(w) >= MIN_WINDOW_CHARS // 2]
        if len(ws) > WINDOWS_PER_DOC:
            ws = [ws[int(j * len(ws) / WINDOWS_PER_DOC)] for j in range(WINDOWS_PER_DOC)]
        positives += [(w, held[i], i) for w in ws]
    if len(positives) < 4 or len({p[2] for p in positives}) < 2:
        raise GlassroomError(f"quality: the sample gives {len(positives)} text windows from "
                             f"{len({p[2] for p in positives})} documents of {', '.join(positive_domains)}; the "
                             f"classifier needs at least 4 from 2 documents: add data, or set quality.enabled: false")
    if not any(p[1] for p in positives) or all(p[1] for p in positives):  # both sides need positives
        first_doc = positives[0][2]
        positives = [(t, d != first_doc, d) for t, _, d in positives]

    n_pos = len(positives)
    lic = sorted(licences, key=lambda t: _key(seed, "licence", t))[: n_pos // 8]
    boil_windows: list[tuple[str, bool]] = []  # 1-6 repeated lines each; lines held out by a hash of the line
    sides = [sorted((t for t in boiler if (_key(seed, "held", t) % 1000 < HELDOUT * 1000) == h),
                    key=lambda t: _key(seed, "boiler", t)) for h in (False, True)]
    brng = np.random.default_rng([seed, 0xB0])
    for h, lines in zip((False, True), sides):
        if not lines:
            continue
        share = (1 - HELDOUT) if not h else HELDOUT
        for _ in range(min(int(n_pos // 8 * share), 4 * len(lines))):
            pick = brng.choice(len(lines), size=min(len(lines), int(brng.integers(1, 7))), replace=False)
            boil_windows.append(("\n".join(lines[int(i)] for i in sorted(pick)), h))
    n_garbled = n_pos - len(lic) - len(boil_windows)
    rng = np.random.default_rng([seed, 0x71])
    order = rng.permutation(n_pos)[:n_garbled]
    rows: list[tuple[str, int, int, bool]] = [(t, 1, 0, h) for t, h, _ in positives]
    rows += [(garble(positives[j][0], int(k % 3), rng), 0, 1, positives[j][1]) for k, j in enumerate(order)]
    rows += [(t, 0, 2, _key(seed, "held", t) % 1000 < HELDOUT * 1000) for t in lic]
    rows += [(t, 0, 3, h) for t, h in boil_windows]
    notes = []
    if not lic:
        notes.append("no licence or copyright blocks in the sample: no licence negatives")
    if not boil_windows:
        notes.append("no lines repeated across documents in the sample: no boilerplate negatives")
    composition = {
        "documents": len(sample), "positive_domains": positive_domains,
        "windows": {k: sum(1 for r in rows if r[2] == i) for i, k in enumerate(KINDS)},
        "heldout_windows": {k: sum(1 for r in rows if r[2] == i and r[3]) for i, k in enumerate(KINDS)},
        "licence_blocks_found": len(licences), "boilerplate_lines_found": len(boiler), "notes": notes,
    }
    return ([r[0] for r in rows], np.array([r[1] for r in rows], dtype=np.int8),
            np.array([r[2] for r in rows], dtype=np.int8), np.array([r[3] for r in rows], dtype=bool), composition)


def _fit(x, y) -> tuple[np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression  # lazy: sklearn loads only when this runs

    if len(set(y.tolist())) < 2:
        raise GlassroomError("quality: the training set has one class only; add data or set quality.enabled: false")
    # Fitted on the columns the training set uses only (the same optimum: with L2 an unused feature's
    # weight is 0), so lbfgs works on tens of thousands of weights instead of 2^20.
    used = np.unique(x.indices)
    clf = LogisticRegression(C=C, solver="lbfgs", max_iter=100, tol=1e-4)
    clf.fit(x[:, used], y)
    coef = np.zeros(x.shape[1], dtype=np.float64)
    coef[used] = clf.coef_[0]
    return coef, float(clf.intercept_[0])


def train(sample: list[dict], cfg) -> tuple[QualityModel, dict]:
    """Fit the classifier on a training set built from `sample`; (model, info for manifest["quality"])."""
    texts, y, kind, held, composition = training_set(sample, cfg)
    x = _features(texts)
    fit_rows = np.flatnonzero(~held)
    coef, intercept = _fit(x[fit_rows], y[fit_rows])
    z = x[fit_rows] @ coef + intercept
    # The fitted margins are large (C = 100): scaled by their spread, confident documents keep distinct
    # float32 scores instead of all rounding to 1.0 (and tying in the top bucket). Same sign, same order.
    model = QualityModel(coef=coef, intercept=intercept, temperature=round(max(1.0, float(np.std(z))), 6))
    test = np.flatnonzero(held)
    accuracy, by_kind = None, {}
    if len(test):
        pred = model.scores([texts[i] for i in test]) >= 0.5
        right = pred == (y[test] == 1)
        accuracy = round(float(right.mean()), 4)
        for i, k in enumerate(KINDS):
            sel = kind[test] == i
            if sel.any():
                by_kind[k] = round(float(right[sel].mean()), 4)
    info = {
        "method": f"logistic regression (lbfgs, L2, C={C:g}) over hashed word n-grams",
        "features": "lowercased \\w+ word 1-2-grams, scikit-learn HashingVectorizer (no sign flip, L2-normalised)",
        "n_features": WORD_FEATURES,
        "score_chars": SCORE_CHARS,
        "seed": int(cfg.seed),
        "training_set": composition,
        "heldout_accuracy": accuracy,
        "heldout_accuracy_by_kind": by_kind,
    }  # no timings: the manifest is deterministic
    return model, info


# --- buckets ---------------------------------------------------------------------------------------------

def cutoffs(scores, buckets: int) -> list[float]:
    """Equal-count cutoffs (buckets - 1 of them, ascending) for one domain's scores.

    Sorted scores s[0..n): cutoff j is s[ceil(j * n / buckets)], so the document of rank r lands in
    bucket floor(r * buckets / n) when scores are distinct. Ties go up together (a bucket can hold more
    or fewer documents). When ceil(j * n / buckets) reaches n (fewer documents than buckets) the cutoff
    is 1.0000001, above every score, and that bucket stays empty; with no documents the cutoffs are j/buckets.
    """
    if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 2:
        raise GlassroomError(f"quality: buckets must be an integer of at least 2, got {buckets!r}")
    s = np.sort(np.asarray(scores, dtype=np.float32), kind="stable")
    n = len(s)
    if n == 0:
        return [float(np.float32(j / buckets)) for j in range(1, buckets)]
    if not np.all(np.isfinite(s)):
        raise GlassroomError("quality: a score is not a finite number; scores must lie in [0, 1]")
    above = float(np.nextafter(np.float32(1.0), np.float32(2.0)))
    out = []
    for j in range(1, buckets):
        r = -(-j * n // buckets)
        out.append(float(s[r]) if r < n else above)
    return out


def assign(scores, cuts) -> np.ndarray:
    """Bucket per score: the number of cutoffs at or below it (int8, 0 = lowest quality)."""
    c = np.asarray(cuts, dtype=np.float32)
    if len(c) > 1 and np.any(np.diff(c) < 0):
        raise GlassroomError(f"quality: cutoffs must be ascending, got {list(cuts)}")
    return np.searchsorted(c, np.asarray(scores, dtype=np.float32), side="right").astype(np.int8)


# --- benchmark -------------------------------------------------------------------------------------------

def benchmark(texts: list[str], seed: int = 0) -> dict:
    """Train on (up to 2000 of) `texts` and score all of them in one process: documents/s and MB/s."""
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if len(texts) < 2:
        raise GlassroomError("quality benchmark: give at least 2 non-empty texts")
    step = max(1, len(texts) // 2000)
    sample = [{"text": t, "domain": "bench"} for t in texts[::step][:2000]]
    started = time.perf_counter()
    model, info = train(sample, QualityConfig(seed=seed))
    trained = time.perf_counter() - started
    blob = model.to_bytes()
    _CACHE.clear()
    started = time.perf_counter()
    for first in range(0, len(texts), 256):
        score_batch(blob, texts[first: first + 256])
    seconds = max(time.perf_counter() - started, 1e-9)
    mb = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
    return {"documents": len(texts), "mb": round(mb, 3), "train_seconds": round(trained, 3),
            "training_windows": sum(info["training_set"]["windows"].values()),
            "heldout_accuracy": info["heldout_accuracy"], "score_seconds": round(seconds, 3),
            "docs_per_s": round(len(texts) / seconds, 1), "mb_per_s": round(mb / seconds, 3)}
