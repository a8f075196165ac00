"""Language identification of sampled documents (glassroom.data.languages): real text in the
languages the corpora hold is named right, and shares per group add up, name the largest first and
sum the rest as other."""

from __future__ import annotations

import numpy as np
import pytest

from glassroom.data import languages
from glassroom.data.recipe import SourceConfig
from glassroom.data.sources import iter_source

# Sources whose every document is in one language (the handbook translations are not: some pages are English).
ONE_LANGUAGE = {
    "en": {"kind": "fortunes", "name": "fortunes-en", "exclude": ["off"]},
    "de": {"kind": "fortunes", "name": "fortunes-de", "path": "/usr/share/games/fortunes/de"},
    "it": {"kind": "fortunes", "name": "fortunes-it", "path": "/usr/share/games/fortunes/it"},
    "es": {"kind": "fortunes", "name": "fortunes-es", "path": "/usr/share/games/fortunes/es"},
    "ru": {"kind": "fortunes", "name": "fortunes-ru", "path": "/usr/share/games/fortunes/ru"},
    "fr": {"kind": "man", "lang": "fr"},
}


@pytest.mark.parametrize("code", list(ONE_LANGUAGE))
def test_documents_of_one_language_are_named_by_it(code):
    docs = [d["text"] for d in iter_source(SourceConfig(**ONE_LANGUAGE[code], chunk_bytes=2048, max_docs=40), "x")]
    if len(docs) < 20:
        pytest.skip(f"{code}: not installed (scripts/install-corpora.sh)")
    found = languages.identify(docs)
    assert np.mean([f == code for f in found]) >= 0.9, sorted(set(found))


def test_identify_reports_progress_and_keeps_order():
    ticks = []
    texts = ["Der Hund schläft unter dem Tisch, und die Katze sitzt auf dem Stuhl."] * 3 + \
            ["The dog sleeps under the table and the cat sits on the chair."] * 2
    assert languages.identify(texts, ticks.append) == ["de"] * 3 + ["en"] * 2
    assert sum(ticks) == 5


@pytest.mark.parametrize("text", ["", "   \n\t", "\x00\x00", "🙂" * 50, "1234 5678 = 42;", "--- *** ---"])
def test_text_without_a_letter_has_no_language(text):
    assert languages.identify([text, "Ceci est une phrase en français."]) == [languages.UNDETERMINED, "fr"]


@pytest.mark.parametrize("seed", range(8))
def test_shares_by_group_sum_to_one_largest_first(seed):
    rng = np.random.default_rng(seed)
    codes = ["en", "de", "fr", "es", "it", "ru", "ja", "nl"]
    n = int(rng.integers(1, 300))
    langs = list(rng.choice(codes, n, p=rng.dirichlet(np.ones(len(codes)))))
    groups = rng.integers(0, 4, n)
    weights = rng.uniform(0.5, 3.0, n)
    names = ["a", "b", "c", "d"]
    shares = languages.shares_by_group(langs, groups, weights, names)
    assert set(shares) == {names[g] for g in np.unique(groups)}   # a group without members is left out
    for g, name in enumerate(names):
        if name not in shares:
            continue
        got = shares[name]
        assert sum(got.values()) == pytest.approx(1.0)
        named = [v for code, v in got.items() if code != languages.OTHER]
        assert len(named) <= languages.TOP and named == sorted(named, reverse=True)
        members = groups == g
        for code, v in got.items():
            if code != languages.OTHER:
                expect = weights[members & (np.asarray(langs) == code)].sum() / weights[members].sum()
                assert v == pytest.approx(expect)
        assert (languages.OTHER in got) == (len({langs[i] for i in np.flatnonzero(members)}) > languages.TOP)


def test_describe_names_the_largest_languages():
    assert languages.describe({"en": 0.5, "de": 0.3, "fr": 0.195, "other": 0.005}) == "en 50%, de 30%, fr 20%"
    assert languages.describe({"en": 0.995, "km": 0.005}) == "en 100%"   # under 1%: not named
    assert languages.describe({}) == ""
