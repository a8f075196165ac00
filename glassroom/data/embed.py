"""Document embeddings for the atlas, offline: no model download, unit-length float32 rows.

Two methods, chosen with `glassroom data atlas --method` (default DEFAULT_METHOD):

  fast    three blocks, each unit-length, joined and normalised: hashed word TF-IDF (sublinear tf)
          reduced by truncated SVD to 32 dimensions (what a text is about); a function-word profile
          (the square-rooted shares of the sample's 200 most widespread words: the, of, und, de,
          return, self, ... what a text is written in, whatever its topic; weight PROFILE_WEIGHT);
          seven typographic features (shares of non-ASCII letters, code symbols, digits, indented
          lines, capitals, English function words, lines ending in code punctuation; standardised,
          weight STYLE_WEIGHT). No model; the vectors adapt to the corpus itself.
          Cost: hashing is stateless and streams; the SVD is fitted on a subsample of at most
          SVD_FIT_DOCS documents (on the MAX_WORDS most widespread words that occur in two or more documents) and applied to all.
  better  the fast vectors joined with wordllama's static embeddings (a 16 MB model shipped inside
          the `wordllama` wheel: 256 dimensions, loaded from its own package folder with downloads
          disabled), each half unit-length. wordllama adds meaning (synonyms, related words, the
          same subject in two languages' subword tokens) that a bag of this corpus's words lacks.
          Its vectors are the mean of the text's token embeddings, as wordllama's own `embed`
          computes them, but as one sparse (texts x vocabulary) count matrix times the embedding
          matrix instead of padded batches of token rows: 1.7-2.4x faster (bench/atlas.py --parts), equal within 1e-6.

docs/data-atlas.md has the measured purity and documents/s of both: `better` is the default since it
clusters the domains of corpora it was not chosen on better, at over 1,000 documents/s on 2 cores.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from glassroom.errors import GlassroomError

METHODS = ("fast", "better")
DEFAULT_METHOD = "better"
HASH_FEATURES = 2 ** 20
SVD_DIMS = 32
STYLE_WEIGHT = 0.35  # chosen on the demo corpus only (k=5, seeds 0-2, with the profile): 0.2 gives 0.895, 0.35 0.917, 0.5 0.849
SVD_FIT_DOCS = 5_000
FUNCTION_WORDS = 200   # words of the function-word profile
PROFILE_WEIGHT = 1.0   # chosen on the demo corpus only (k=5, seeds 0-2): 0 gives 0.89-0.93, 0.5 and 1.0 give 0.895-0.917
MAX_WORDS = 50_000
BATCH = 1_000
TOKEN_PATTERN = r"(?u)\b\w\w+\b"   # words and identifiers; digits too, so code and tables keep their shape


WINDOWS = 4          # spread windows a long document is embedded from


def spread_windows(length: int, budget: int, parts: int = WINDOWS) -> list[tuple[int, int]]:
    """[lo, hi) ranges of at most `budget` units in all out of `length`: the whole when it fits, else
    `parts` equal windows evenly spread from the start to the end (the first at 0, the last ending
    at `length`), so a long document is read from its middle and end too, not only its opening
    (a licence header, a title page, a table of contents)."""
    if budget <= 0:
        return []
    if length <= budget:
        return [(0, length)]
    parts = max(1, min(parts, budget))
    width = budget // parts
    starts = [round(i * (length - width) / max(parts - 1, 1)) for i in range(parts)]
    return [(s, s + width) for s in starts]


def spread_text(text: str, budget: int, parts: int = WINDOWS) -> str:
    """The characters of `text` in spread_windows, joined by newlines."""
    return "\n".join(text[lo:hi] for lo, hi in spread_windows(len(text), budget, parts))


def describe(method: str) -> str:
    return {
        "fast": (f"hashed word TF-IDF + truncated SVD ({SVD_DIMS} dims), a {FUNCTION_WORDS}-word function-word profile "
                 f"and {STYLE_FEATURES} typographic features, fitted on this corpus; {WINDOWS} spread windows of long documents"),
        "better": (f"the fast vectors ({SVD_DIMS} + {FUNCTION_WORDS} + {STYLE_FEATURES} dims) joined with wordllama "
                   "static embeddings (256 dims)"),
    }[method]


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def function_profile(counts, top: int = None) -> np.ndarray:
    """Each text's profile over the `top` words found in the most texts of the sample (a corpus's
    most widespread words are its function words: the, of, und, de, return, self, ...): their share
    of the text's words, square-rooted (Hellinger), unit rows. What a text is written in and how
    (a language, a kind of code, prose or a definition), whatever it is about."""
    top = FUNCTION_WORDS if top is None else top
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    cols = np.sort(np.argsort(-df, kind="stable")[:top])
    totals = np.asarray(counts.sum(axis=1)).ravel()
    prof = np.sqrt(counts[:, cols].toarray() / np.maximum(totals, 1)[:, None])
    return _normalize(prof.astype(np.float32))


def tfidf_svd(texts: list[str], seed: int, tick: Callable[[int], None], profile: list | None = None) -> np.ndarray:
    """Hashed word counts -> sublinear TF-IDF -> truncated SVD -> unit rows (len(texts), <= SVD_DIMS).
    With `profile` (a list), the texts' function_profile is appended to it."""
    import scipy.sparse as sp
    from sklearn.decomposition import TruncatedSVD  # lazy: sklearn loads only when this runs
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    hasher = HashingVectorizer(n_features=HASH_FEATURES, alternate_sign=False, norm=None,
                               token_pattern=TOKEN_PATTERN, dtype=np.float32)
    parts = []
    for start in range(0, len(texts), BATCH):
        parts.append(hasher.transform(texts[start: start + BATCH]))
        tick(len(parts[-1].indptr) - 1)
    counts = sp.vstack(parts).tocsr()
    if profile is not None:
        profile.append(function_profile(counts))
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
LINE_END = np.frombuffer(";{}):,".encode("utf-32-le"), dtype=np.uint32)


ENGLISH = frozenset("the of and to a in is that it for was on with as be by this are or not from at which "
                    "you he his have an but had were they their its can if will".split())
WORD = re.compile(r"\w+")
STYLE_FEATURES = 7


def typographic(texts: list[str]) -> np.ndarray:
    """STYLE_FEATURES shares per text, standardised over the texts: non-ASCII characters, code symbols,
    digits, indented lines, capitals, English function words among the words (the, of, and, ...:
    high in English prose and documentation, near zero in code and in other languages) and lines
    that end in code punctuation (`;`, `{`, `}`, `)`, `:`, `,`)."""
    rows = np.zeros((len(texts), STYLE_FEATURES), dtype=np.float64)
    for i, t in enumerate(texts):
        t = t[:4000]
        c = np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32)
        if len(c) == 0:
            continue
        starts = np.concatenate([[0], np.flatnonzero(c[:-1] == 10) + 1])
        ends = np.concatenate([np.flatnonzero(c == 10) - 1, [len(c) - 1]])
        words = WORD.findall(t.lower())
        rows[i] = ((c > 127).mean(), np.isin(c, CODE_SYMBOLS).mean(), ((c >= 48) & (c <= 57)).mean(),
                   np.isin(c[starts], (32, 9)).mean(), ((c >= 65) & (c <= 90)).mean(),
                   sum(w in ENGLISH for w in words) / max(len(words), 1),
                   np.isin(c[ends[ends >= 0]], LINE_END).mean() if (ends >= 0).any() else 0.0)
    std = rows.std(axis=0)
    return ((rows - rows.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def fast_vectors(texts: list[str], seed: int, tick: Callable[[int], None]) -> np.ndarray:
    profile: list = []
    words = tfidf_svd(texts, seed, tick, profile)
    return _normalize(np.hstack([words, PROFILE_WEIGHT * profile[0], STYLE_WEIGHT * typographic(texts)]))


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


_MODEL = None   # (tokenizer without padding, float32 embedding matrix), loaded once


def prepare(method: str) -> None:
    """Import the libraries and load the model now, so embedding timings count embedding only."""
    global _MODEL
    # lazy: sklearn loads only when this runs
    import sklearn.decomposition  # noqa: F401
    # lazy: sklearn loads only when this runs
    import sklearn.feature_extraction.text  # noqa: F401

    if method == "better" and _MODEL is None:
        from tokenizers import Tokenizer

        model = load_wordllama()
        tokenizer = Tokenizer.from_str(model.tokenizer.to_str())   # a copy: wordllama's own pads every batch
        tokenizer.no_padding()
        tokenizer.no_truncation()
        _MODEL = (tokenizer, np.ascontiguousarray(model.embedding, dtype=np.float32))


def token_counts(tokenizer, texts: list[str], vocab: int):
    """(texts x vocab) CSR matrix of token counts, and each text's number of tokens."""
    import scipy.sparse as sp  # lazy: scipy loads only when this runs

    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
    ids = np.fromiter((i for e in encoded for i in e.ids), dtype=np.int64, count=int(lengths.sum()))
    np.clip(ids, 0, vocab - 1, out=ids)   # as wordllama does: an id past the matrix is its last row
    counts = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, np.concatenate([[0], np.cumsum(lengths)])),
                           shape=(len(encoded), vocab))
    counts.sum_duplicates()
    return counts, lengths


def wordllama_vectors(texts: list[str], tick: Callable[[int], None]) -> np.ndarray:
    """Mean token embedding of each text (wordllama's average pooling), unit rows."""
    prepare("better")
    tokenizer, matrix = _MODEL
    out = []
    for start in range(0, len(texts), BATCH):
        counts, lengths = token_counts(tokenizer, texts[start: start + BATCH], matrix.shape[0])
        out.append(np.asarray(counts @ matrix) / np.maximum(lengths, 1)[:, None].astype(np.float32))
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
