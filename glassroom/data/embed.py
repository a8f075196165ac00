"""Document embeddings for the atlas, offline: no model download, unit-length float32 rows.

Two methods, chosen with `glassroom data atlas --method`:

  fast    hashed word TF-IDF (sublinear tf) reduced by truncated SVD to 32 dimensions, plus five
          typographic features (shares of non-ASCII letters, code symbols, digits, indented lines and
          capitals; standardised, weight STYLE_WEIGHT). No model; the vectors adapt to the corpus
          itself. The typographic part is what keeps one domain of many languages, or of two
          programming languages, together: their words share nothing, their look does.
          Cost: hashing is stateless and streams; the SVD is fitted on a subsample of at most
          SVD_FIT_DOCS documents (on the MAX_WORDS most widespread words that occur in two or more documents) and applied to all.
  better  the fast vectors joined with wordllama's static embeddings (a 16 MB model shipped inside
          the `wordllama` wheel: 256 dimensions, loaded from its own package folder with downloads
          disabled), each half unit-length. wordllama adds meaning (synonyms, related words)
          that a bag of this corpus's words lacks; it costs a second pass over the text.

docs/data-atlas.md has the measured purity and documents/s of both on the demo corpus.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from glassroom.errors import GlassroomError

METHODS = ("fast", "better")
HASH_FEATURES = 2 ** 20
SVD_DIMS = 32
STYLE_WEIGHT = 0.2   # measured on the demo corpus (k=5, seeds 0-4): 0 gives purity 0.66-0.87, 0.2 gives 0.80-0.88
SVD_FIT_DOCS = 5_000
MAX_WORDS = 50_000
BATCH = 1_000
TOKEN_PATTERN = r"(?u)\b\w\w+\b"   # words and identifiers; digits too, so code and tables keep their shape


def describe(method: str) -> str:
    return {
        "fast": f"hashed word TF-IDF + truncated SVD ({SVD_DIMS} dims) and 5 typographic features, fitted on this corpus",
        "better": f"the fast vectors ({SVD_DIMS} + 5 dims) joined with wordllama static embeddings (256 dims)",
    }[method]


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def tfidf_svd(texts: list[str], seed: int, tick: Callable[[int], None]) -> np.ndarray:
    """Hashed word counts -> sublinear TF-IDF -> truncated SVD -> unit rows (len(texts), <= SVD_DIMS)."""
    import scipy.sparse as sp
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    hasher = HashingVectorizer(n_features=HASH_FEATURES, alternate_sign=False, norm=None,
                               token_pattern=TOKEN_PATTERN, dtype=np.float32)
    parts = []
    for start in range(0, len(texts), BATCH):
        parts.append(hasher.transform(texts[start: start + BATCH]))
        tick(len(parts[-1].indptr) - 1)
    counts = sp.vstack(parts).tocsr()
    # Keep the words seen in at least two documents: the rest cannot shape a direction shared by documents,
    # and dropping them makes the SVD's dense factors a few tens of thousands of rows instead of a million.
    # Of those, the MAX_WORDS most widespread: the SVD's cost grows with the columns, its top directions hardly do.
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    keep = np.flatnonzero(df >= 2) if (df >= 2).sum() >= 2 else np.flatnonzero(df >= 1)
    if len(keep) > MAX_WORDS:
        keep = np.sort(keep[np.argsort(-df[keep], kind="stable")[:MAX_WORDS]])
    counts = counts[:, keep]
    tfidf = TfidfTransformer(sublinear_tf=True).fit_transform(counts).astype(np.float32)
    dims = min(SVD_DIMS, tfidf.shape[0] - 1, tfidf.shape[1] - 1)
    if dims < 1:   # one or two documents, or no shared words: nothing to reduce
        return _normalize(tfidf.toarray()[:, :max(1, tfidf.shape[1])])
    rng = np.random.default_rng(seed)
    fit_rows = np.sort(rng.choice(tfidf.shape[0], SVD_FIT_DOCS, replace=False)) if tfidf.shape[0] > SVD_FIT_DOCS else slice(None)
    svd = TruncatedSVD(dims, algorithm="randomized", n_iter=4, random_state=seed).fit(tfidf[fit_rows])
    return _normalize(svd.transform(tfidf))


CODE_SYMBOLS = np.frombuffer("{}()[];=<>_*#/\\|&$@".encode("utf-32-le"), dtype=np.uint32)


def typographic(texts: list[str]) -> np.ndarray:
    """Five shares per text (non-ASCII, code symbols, digits, indented lines, capitals), standardised."""
    rows = np.zeros((len(texts), 5), dtype=np.float64)
    for i, t in enumerate(texts):
        c = np.frombuffer(t[:4000].encode("utf-32-le"), dtype=np.uint32)   # the look of a text shows in its start
        if len(c) == 0:
            continue
        starts = np.concatenate([[0], np.flatnonzero(c[:-1] == 10) + 1])
        rows[i] = ((c > 127).mean(), np.isin(c, CODE_SYMBOLS).mean(), ((c >= 48) & (c <= 57)).mean(),
                   np.isin(c[starts], (32, 9)).mean(), ((c >= 65) & (c <= 90)).mean())
    std = rows.std(axis=0)
    return ((rows - rows.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def fast_vectors(texts: list[str], seed: int, tick: Callable[[int], None]) -> np.ndarray:
    return _normalize(np.hstack([tfidf_svd(texts, seed, tick), STYLE_WEIGHT * typographic(texts)]))


def load_wordllama():
    """wordllama's model from its own wheel, never from the network (its plain load() would look for
    `tokenizer/`, but the wheel ships `tokenizers/`, and then download)."""
    import os
    from pathlib import Path

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise GlassroomError("--method better needs the wordllama package (pip install wordllama); or use --method fast") from None
    try:
        return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    except Exception as exc:   # a broken install: say so in one line
        raise GlassroomError(f"--method better: could not load wordllama's bundled model ({type(exc).__name__}: {exc}); "
                             f"reinstall wordllama or use --method fast") from None


_MODEL = None


def prepare(method: str) -> None:
    """Import the libraries and load the model now, so embedding timings count embedding only."""
    global _MODEL
    import sklearn.decomposition  # noqa: F401
    import sklearn.feature_extraction.text  # noqa: F401

    if method == "better" and _MODEL is None:
        _MODEL = load_wordllama()


def wordllama_vectors(texts: list[str], tick: Callable[[int], None]) -> np.ndarray:
    prepare("better")
    model = _MODEL
    out = []
    for start in range(0, len(texts), BATCH):
        out.append(np.asarray(model.embed(texts[start: start + BATCH], norm=True), dtype=np.float32))
        tick(len(out[-1]))
    return _normalize(np.vstack(out))


def embed(texts: list[str], method: str, seed: int = 0, tick: Callable[[int], None] = lambda n: None) -> np.ndarray:
    """Unit-length float32 vectors, one row per text; deterministic for a given seed."""
    if method not in METHODS:
        raise GlassroomError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")
    if method == "fast":
        return fast_vectors(texts, seed, tick)
    half = lambda n: tick(n / 2)  # noqa: E731  two passes share the progress line
    lexical = fast_vectors(texts, seed, half)
    semantic = wordllama_vectors(texts, half)
    return _normalize(np.hstack([lexical, semantic]))
