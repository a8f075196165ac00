"""The build's fast encoder (glassroom/data/fast_tokens.py): a tiktoken mirror of the trained
byte-level BPE gives exactly `tokenizers`' ids on real text of all five domains' kinds, and falls
back to `tokenizers` for a tokenizer it cannot mirror or that a sample shows it gets wrong."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest

from glassroom.data import fast_tokens
from glassroom.data.tokenizer import EOS_TOKEN, train_tokenizer

TRICKY = [
    "plain <|endoftext|> in text, twice<|endoftext|><|endoftext|>",
    "tabs\t\tand   spaces   \n\n\n   trailing   ",
    "ünïcödé façade naïve – “quotes” — ① ² ½ 日本語のテキスト 한국어 Ελληνικά русский العربية 🙂👍🏽",
    "numbers 1234567890 ١٢٣٤ 12.5e-3 0x1F; it's we'll they're I'M 'S",
    "def f(x):\n    return {'a': [1, 2]}  # comment\r\n\tfunc main() { fmt.Println(\"hi\") }",
    "\u00a0nbsp\u2009thin\u200bzero-width\ufeffbom",
    "",
    " ",
]


def real_texts(max_per_source: int = 150_000) -> list[str]:
    """A few MB of the installed corpora: one or two sources of each demo domain (man pages left out: slow)."""
    from glassroom.data.recipe import load_recipe
    from glassroom.data.sources import SourceReport, iter_source

    recipe = load_recipe("experiments/data-demo.yaml")
    texts = []
    for domain, dcfg in recipe.domains.items():
        for src in [s for s in dcfg.sources if s.kind != "man"][:4]:
            src = dataclasses.replace(src, max_bytes=max_per_source)
            try:
                texts.extend(d["text"] for d in iter_source(src, domain, SourceReport(src.label)))
            except Exception:  # a corpus not installed on this machine: the others still cover the domain kinds
                continue
    return texts


@pytest.fixture(scope="module")
def corpus():
    texts = real_texts()
    assert sum(len(t.encode()) for t in texts) > 2_000_000, "the installed corpora are missing (scripts/install-corpora.sh)"
    tok = train_tokenizer(texts[::3], 4096)
    return tok, texts + TRICKY


@pytest.mark.slow
def test_mirror_gives_the_ids_of_encode_batch_on_real_text(corpus):
    tok, texts = corpus
    m, why = fast_tokens.mirror(tok)
    assert m is not None, why
    want = tok.encode_batch(texts, add_special_tokens=False)
    got = m.encode(texts)
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g.tolist() != w.ids]
    assert bad == [], f"{len(bad)} of {len(texts)} documents differ, first {texts[bad[0]][:80]!r}"
    assert fast_tokens.check(m, tok, texts) == ""
    # The literal special-token text is ordinary text: never the EOS id.
    eos = tok.token_to_id(EOS_TOKEN)
    assert eos not in got[len(texts) - len(TRICKY)].tolist()


@pytest.mark.slow
def test_encode_batch_task_matches_tokenizers_with_eos_after_each_document(corpus):
    tok, texts = corpus
    sample = texts[:40] + TRICKY
    eos = tok.token_to_id(EOS_TOKEN)
    fast = fast_tokens.encode_batch(("tiktoken", tok.to_str()), sample, "uint16")
    slow = fast_tokens.encode_batch(("tokenizers", tok.to_str()), sample, "uint16")
    assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
    ids, offsets = fast
    assert len(offsets) == len(sample) + 1 and offsets[-1] == len(ids) and ids.dtype == np.uint16
    assert (ids == eos).sum() == len(sample) and all(ids[o - 1] == eos for o in offsets[1:])
    want = [e.ids for e in tok.encode_batch(sample, add_special_tokens=False)]
    assert ids.tolist() == [t for w in want for t in w + [eos]]


def test_tokenizers_it_cannot_mirror_are_named_with_the_reason(corpus):
    from tokenizers import Tokenizer, normalizers

    tok, _ = corpus
    lowered = Tokenizer.from_str(tok.to_str())
    lowered.normalizer = normalizers.Lowercase()
    m, why = fast_tokens.mirror(lowered)
    assert m is None and "normalizer" in why
    spec = json.loads(tok.to_str())
    spec["added_tokens"].append({"id": len(spec["model"]["vocab"]), "content": "hello", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False, "special": False})
    m, why = fast_tokens.mirror(Tokenizer.from_str(json.dumps(spec)))
    assert m is None and "non-special added tokens" in why
    wordlevel = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
        "post_processor": None, "decoder": None,
        "added_tokens": [{"id": 0, "content": EOS_TOKEN, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "model": {"type": "WordLevel", "vocab": {EOS_TOKEN: 0, "a": 1, "[UNK]": 2}, "unk_token": "[UNK]"}}))
    m, why = fast_tokens.mirror(wordlevel)
    assert m is None and "not BPE" in why


def _abc_tokenizer():
    """A byte-level BPE whose merges (a b, b c, a bc) make tiktoken and tokenizers disagree on "abc":
    tokenizers merges a+b first and has no rule ab+c, tiktoken joins ab and c because "abc" is a token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {EOS_TOKEN: 0, **{ch: i + 1 for i, ch in enumerate(sorted(alphabet))}}
    for t in ("ab", "bc", "abc"):
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("b", "c"), ("a", "bc")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS_TOKEN])
    return tok


def test_a_mirror_that_disagrees_on_the_sample_falls_back_to_tokenizers():
    from glassroom.data.build import _encoder

    tok = _abc_tokenizer()
    m, why = fast_tokens.mirror(tok)
    assert m is not None, why  # the shape is mirrorable...
    assert "differently" in fast_tokens.check(m, tok, ["xyz", "abc abc"])  # ...but the ids are not the same

    class Corpus:
        nbytes = [3, 7]

        def texts_of(self, indices):
            return [["xyz", "abc abc"][i] for i in indices]

    log = io.StringIO()
    entry = _encoder(tok, Corpus(), [0, 1], log)
    assert entry["kind"] == "tokenizers" and "differently" in entry["reason"]
    assert "encoding with tokenizers, not the faster tiktoken mirror" in log.getvalue()
    ids, _ = fast_tokens.encode_batch(("tokenizers", tok.to_str()), ["abc"], "uint16")
    assert ids.tolist() == [tok.token_to_id("ab"), tok.token_to_id("c"), 0]
    # A clean sample keeps the mirror.
    assert _encoder(tok, Corpus(), [0], io.StringIO())["kind"] == "tiktoken"
