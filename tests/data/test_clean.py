"""Cleaning stages on real text: normalisation, each quality filter, MinHash near-duplicate detection."""

from __future__ import annotations

import unicodedata

import pytest

from data_helpers import near_copy, stdlib_files
from glassroom.data.clean import Signer, normalize, quality_reason, split_score, validation_cutoff
from glassroom.data.recipe import CleanConfig

CFG = CleanConfig()


def real_text(n=3):
    return [p.read_text() for p in stdlib_files("json")[:n]]


def test_normalize_nfc_newlines_and_trailing_space():
    decomposed = unicodedata.normalize("NFD", "café naïve")
    assert normalize(f"\n\n{decomposed}  \r\nsecond\rthird \n\n") == "café naïve\nsecond\nthird"


def test_real_stdlib_text_passes_every_filter():
    for text in real_text():
        assert quality_reason(text, len(text.encode()), CFG) is None


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t[:40], "too_short"),
    (lambda t: t * 400, "too_long"),
    (lambda t: t.replace("e", "\x00"), "garbled"),
    (lambda t: " ".join(str(ord(c)) for c in t[:2000]), "few_letters"),
    (lambda t: (t.replace("\n", " ") + " ") * 3, "long_lines"),
    (lambda t: "\n".join([t.split("\n")[5] + " repeated line"] * 200), "repetitive"),
])
def test_each_filter_names_its_reason(mutate, reason):
    text = mutate(real_text(1)[0])
    assert quality_reason(text, len(text.encode()), CFG) == reason


def test_minhash_finds_near_copies_and_not_different_files():
    signer = Signer(128, 5)
    texts = [p.read_text() for p in stdlib_files("email") if p.stat().st_size > 4000][:6]
    for text in texts:
        a, b = signer.signatures([text, near_copy(text)])
        assert (a == b).mean() > 0.8  # the share of equal values estimates the Jaccard
    for x, y in zip(texts, texts[1:]):
        assert (signer.signature(x) == signer.signature(y)).mean() < 0.3


def test_split_is_stable_and_every_domain_gets_validation():
    assert split_score("doc-1", 0) == split_score("doc-1", 0) != split_score("doc-1", 1)
    scores = [split_score(f"doc-{i}", 0) for i in range(10_000)]
    assert 0.018 < sum(s < 0.02 for s in scores) / len(scores) < 0.022
    few = [(0.5, 100), (0.7, 100), (0.9, 100)]
    cutoff = validation_cutoff(few, 0.02)
    assert sum(s < cutoff for s, _ in few) == 1
    # Held-out documents below the fraction that hold too few bytes are topped up by the next scores.
    rows = [(0.001, 10), (0.5, 1000), (0.6, 1000), (0.7, 1000)]
    assert sum(s < validation_cutoff(rows, 0.02) for s, _ in rows) == 2
    # Many documents: exactly the hash rule.
    rows = [(s, 1000) for s in scores]
    cutoff = validation_cutoff(rows, 0.02)
    assert sum(s < cutoff for s, _ in rows) == sum(s < 0.02 for s in scores)
