"""Atlas purity on a real corpus of unlike sources: five domains, each of one to four sources read with the build's own extractors and cut at 8 KB as a recipe's chunk_bytes would
(prose: English fortunes; reference: GCIDE past the demo's part; docs: the English Debian Handbook
and man sections 2, 3, 7; code: C headers and Perl modules; multilingual: the German and Polish
Debian Handbook, Italian fortunes, Spanish man pages), embedded as the atlas embeds them (spread
windows) and clustered at k = 5. The target is 0.85 for seeds 0, 1 and 2.

Domains of several unlike sources are what makes this corpus hard: word statistics of this corpus
alone (method fast, the atlas's embedding before wordllama was joined by default) score 0.74-0.79
here; the default, 0.93. These are the sources of bench/atlas.py's corpus a, which the default was
chosen on, at a third of its size: the test guards what was chosen; the bench's corpora c and d and
its random corpora are the evidence on text nothing was chosen on.

The handbook translations are partial: py3langid calls 21% of the German pages and 75% of the
Polish ones English. Those pages are English documentation, so they are left out before scoring,
as bench/atlas.py does (docs/data-atlas.md)."""

from __future__ import annotations

import numpy as np
import pytest

from glassroom.data import cluster, embed, languages
from glassroom.data.atlas import purity
from glassroom.data.recipe import SourceConfig
from glassroom.data.sources import iter_source

HANDBOOK = "/usr/share/doc/debian-handbook/html/{}/*.html"
DOMAINS = {
    "prose": [{"kind": "fortunes", "name": "fortunes-en", "exclude": ["off"]}],
    "reference": [{"kind": "dictd", "names": ["gcide"], "skip": 4_000_000}],
    "docs": [{"kind": "files", "name": "handbook-en", "path": HANDBOOK.format("en-US"), "format": "html"},
             {"kind": "man", "sections": "2,3,7"}],
    "code": [{"kind": "files", "name": "c-headers", "path": "/usr/include/**/*.h"},
             {"kind": "files", "name": "perl-modules", "path": "/usr/share/perl/5.36.0/**/*.pm"}],
    "multilingual": [{"kind": "files", "name": "handbook-de", "path": HANDBOOK.format("de-DE"), "format": "html"},
                     {"kind": "files", "name": "handbook-pl", "path": HANDBOOK.format("pl-PL"), "format": "html"},
                     {"kind": "fortunes", "name": "fortunes-it", "path": "/usr/share/games/fortunes/it"},
                     {"kind": "man", "lang": "es"}],
}
DOMAIN_BYTES = 800_000
TARGET = 0.85


def read_source(spec: dict, limit: int) -> list[str]:
    spec = dict(spec)
    skip = spec.pop("skip", 0)
    texts, seen = [], 0
    for doc in iter_source(SourceConfig(**spec, chunk_bytes=8192, max_bytes=skip + limit), "x"):
        seen += len(doc["text"].encode())
        if seen > skip and len(doc["text"].strip()) >= 64:
            texts.append(embed.spread_text(doc["text"], 512 * 3))
    return texts


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for d, (domain, sources) in enumerate(DOMAINS.items()):
        for spec in sources:
            docs = read_source(spec, DOMAIN_BYTES // len(sources))
            if len(docs) < 10:
                pytest.skip(f"{spec.get('name') or spec['kind']}: not installed (scripts/install-corpora.sh)")
            if domain == "multilingual":
                docs = [t for t, lang in zip(docs, languages.identify(docs)) if lang != "en"]
            texts += docs
            labels += [d] * len(docs)
    return texts, np.asarray(labels)


def scores(corpus, method: str) -> list[float]:
    texts, labels = corpus
    vectors = embed.embed(texts, method, seed=0)
    return [purity(cluster.spherical_kmeans(vectors, len(DOMAINS), seed=s)[0], labels) for s in range(3)]


def test_default_embedding_keeps_unlike_sources_of_a_domain_together(corpus):
    assert min(scores(corpus, embed.DEFAULT_METHOD)) >= TARGET


def test_corpus_tells_word_statistics_alone_from_the_default(corpus):
    """The corpus must be able to fail an embedding: word statistics alone (the atlas's embedding
    before wordllama was joined by default) stay well under the target on it."""
    assert max(scores(corpus, "fast")) < TARGET


def test_pooled_wordllama_vectors_equal_wordllama_embed(corpus):
    texts = corpus[0][::7]
    reference = embed.load_wordllama().embed(texts, norm=True)
    assert np.abs(embed.wordllama_vectors(texts, lambda n: None) - reference).max() < 1e-5


def test_spread_windows():
    assert embed.spread_windows(10, 20) == [(0, 10)]
    assert embed.spread_windows(100, 20) == [(0, 5), (32, 37), (63, 68), (95, 100)]   # start, middle, end
    assert embed.spread_windows(100, 20, parts=1) == [(0, 20)]
    assert embed.spread_windows(7, 0) == [] and embed.spread_windows(0, 5) == [(0, 0)]
    assert embed.spread_windows(1000, 3, parts=4) == [(0, 1), (500, 501), (999, 1000)]
    text = "LICENSE " * 50 + "body " * 1000
    assert embed.spread_text(text, 400).count("body") >= 55 and text[:400].count("body") == 0   # a licence header no longer fills the window
