"""Dedup pieces and edges: the MinHash signatures (their definition, an unbiased estimate of the Jaccard,
the same in another process), the derived banding, short/wordless/huge documents, exact vs near reasons,
duplicates.jsonl records, the manifest entry, the streaming Cleaner path and the benchmark."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from data_helpers import STDLIB
from dedup_helpers import copy_at, distinct_documents, run, whitespace_copy
from glassroom.data import dedup
from glassroom.data.clean import Cleaned, Cleaner, Signer, Stats, clean_batch
from glassroom.data.ngrams import ngram_hashes
from glassroom.data.recipe import CleanConfig, DedupConfig, SplitConfig
from glassroom.errors import ConfigError


@pytest.fixture(scope="module")
def docs():
    return distinct_documents(40, min_words=400)


# Texts whose signatures are pinned: literal strings, so the same on every machine.
PINNED_TEXTS = ["The quick brown fox jumps over the lazy dog, then the dog sleeps in the sun all day long.",
                "def f(x):\n    return x + 1  # a little code, then more words for shingles of five",
                "Ünïcode wörds ändern nichts: ΟΔΟΣ οδός, 日本語の文章 also count as words here",
                "two words", "!!! ???", ""]
PINNED_SHA256 = "c6781f42e712a45410bba61b28a226d5d6446195426da52319339f09db8e716e"


def _pair_at(rng: random.Random, n: int, shared: int) -> tuple[str, str]:
    """Two texts of n distinct words each, `shared` of them in both: one-word shingles of Jaccard shared / (2n - shared)."""
    common = [f"s{rng.getrandbits(48):x}" for _ in range(shared)]
    a = common + [f"a{rng.getrandbits(48):x}" for _ in range(n - shared)]
    b = common + [f"b{rng.getrandbits(48):x}" for _ in range(n - shared)]
    rng.shuffle(a)
    rng.shuffle(b)
    return " ".join(a), " ".join(b)


def test_each_signature_value_is_the_minimum_of_its_slot_function_over_the_shingle_set():
    signer = Signer(64, 5)
    texts = [STDLIB.joinpath("textwrap.py").read_text()[:20_000], "Hello World", "a b c d e", "!!! ???"] + PINNED_TEXTS
    for text in texts:
        shingles = dedup.shingle_set(text, 5)
        if not shingles:
            assert (signer.signature(text) == Signer.EMPTY).all()
            continue
        hashes = np.concatenate([ngram_hashes(s, len(s.split(" "))) for s in shingles])
        assert len(hashes) == len(shingles) == len(set(hashes.tolist()))  # one 64-bit hash per shingle, no collision
        assert (signer.signature(text) == signer.permuted(hashes).min(axis=0)).all()
    # a batch gives each text the signature it has alone, also across chunk and group edges
    alone = np.stack([signer.signature(t) for t in texts])
    small = Signer(64, 5)
    small.CHUNK, small.GROUP_CHARS = 100, 3000
    assert (signer.signatures(texts) == alone).all() and (small.signatures(texts) == alone).all()
    assert signer.signatures([]).shape == (0, 64)
    a, b = dedup.slot_constants(64)
    assert (a & np.uint64(1)).all() and len(set(a.tolist())) == len(set(b.tolist())) == 64
    assert not set(np.concatenate([a, b]).tolist()) & set(np.concatenate(dedup.slot_constants(64, seed=2)).tolist())


@pytest.mark.parametrize("jaccard, n, shared", [(0.3, 130, 60), (0.5, 300, 200), (0.8, 90, 80)])
def test_share_of_equal_signature_values_is_an_unbiased_estimate_of_the_jaccard(jaccard, n, shared):
    rng = random.Random(int(jaccard * 10))
    pairs = [_pair_at(rng, n, shared) for _ in range(400)]
    assert dedup.jaccard(dedup.shingle_set(pairs[0][0], 1), dedup.shingle_set(pairs[0][1], 1)) == pytest.approx(jaccard)
    signer = Signer(128, 1)
    a, b = signer.signatures([x for x, _ in pairs]), signer.signatures([y for _, y in pairs])
    equal = a == b
    # the mean over 400 x 128 values within 4 standard errors of the Jaccard
    assert abs(equal.mean() - jaccard) < 4 * math.sqrt(jaccard * (1 - jaccard) / equal.size), equal.mean()
    # slots independent: per pair, the count of equal values varies as a binomial's (variance within 4 SE of it)
    ratio = equal.sum(axis=1).var(ddof=1) / (128 * jaccard * (1 - jaccard))
    assert 1 - 4 * math.sqrt(2 / 399) < ratio < 1 + 4 * math.sqrt(2 / 399), ratio
    # and a band of 7 rows agrees with probability J^7, as the banding's catch probability assumes
    same_band = dedup.band_hashes(a, 18, 7) == dedup.band_hashes(b, 18, 7)
    p = jaccard ** 7
    assert abs(same_band.mean() - p) < 4 * math.sqrt(p * (1 - p) / same_band.size) + 1e-9, (same_band.mean(), p)


def test_five_word_shingle_signatures_estimate_the_true_jaccard_of_near_copies():
    rng = random.Random(3)
    signer = Signer(128, 5)
    originals, copies = [], []
    for _ in range(300):
        words = [f"w{rng.getrandbits(32):x}" for _ in range(200)]
        originals.append(" ".join(words))
        for pos in rng.sample(range(200), rng.randrange(2, 30)):
            words[pos] = f"new{rng.getrandbits(32):x}"
        copies.append(" ".join(words))
    js = np.array([dedup.jaccard(dedup.shingle_set(x, 5), dedup.shingle_set(y, 5)) for x, y in zip(originals, copies)])
    equal = (signer.signatures(originals) == signer.signatures(copies)).mean(axis=1)
    assert js.min() < 0.5 < 0.8 < js.max()
    z = (equal - js).sum() / math.sqrt((js * (1 - js)).sum() / 128)
    assert abs(z) < 4, z


def test_signatures_are_the_same_in_another_process_and_on_every_machine():
    texts = PINNED_TEXTS + [STDLIB.joinpath("textwrap.py").read_text()]
    here = Signer(128, 5).signatures(texts)
    code = ("import json, sys; from glassroom.data.dedup import Signer; "
            "sys.stdout.write(Signer(128, 5).signatures(json.load(sys.stdin)).tobytes().hex())")
    other = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert bytes.fromhex(other) == here.tobytes()
    pinned = Signer(128, 5).signatures(PINNED_TEXTS)
    assert pinned.dtype == np.uint64 and pinned.shape == (len(PINNED_TEXTS), 128)
    assert hashlib.sha256(pinned.astype("<u8").tobytes()).hexdigest() == PINNED_SHA256


def test_the_build_signs_a_batch_as_it_signs_each_document_alone(docs):
    batch = [{"id": str(i), "domain": "d", "source": "s", "text": t} for i, t in enumerate(docs[:6] + ["tiny", docs[7]])]
    out = clean_batch(batch, CleanConfig(), DedupConfig())
    signer = Signer(128, 5)
    assert [item.reason for item in out].count("too_short") == 1
    for item in out:
        if item.reason is None:
            assert item.signature.base is None  # its own array, not a view of the batch's
            assert (item.signature == signer.signature(item.doc["text"])).all()
        else:
            assert item.signature is None


def test_banding_reaches_recall_at_the_threshold_within_num_perm():
    assert dedup.choose_bands(0.8, 128, 0.95) == (18, 7)  # datasketch's 9 x 13 caught 0.40 at 0.8
    for threshold in (0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99):
        for num_perm in (16, 64, 128, 256):
            for recall in (0.5, 0.95, 0.99):
                try:
                    bands, rows = dedup.choose_bands(threshold, num_perm, recall)
                except ConfigError as exc:
                    assert "dedup.num_perm" in str(exc) and "\n" not in str(exc)
                    continue
                assert bands * rows <= num_perm
                assert dedup.catch_probability(threshold, bands, rows) >= recall
                if num_perm == 64:  # the rows of the cheapest banding reaching the margin, else recall (brute force)
                    for aim in (dedup.margin_recall(recall), recall):
                        options = [(dedup._below_area(threshold, b, r), r) for r in range(1, 65)
                                   for b in range(1, 64 // r + 1) if dedup.catch_probability(threshold, b, r) >= aim]
                        if options:
                            break
                    assert min(options)[1] == rows and bands == 64 // rows
    curve = dedup.curve(0.8, 18, 7)
    assert [j for j, _ in curve] == [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert [p for _, p in curve] == sorted(p for _, p in curve) and curve[-1][1] == 1.0


def test_unreachable_recall_names_num_perm_and_a_value_that_works():
    with pytest.raises(ConfigError, match=r"^dedup\.num_perm: 128 .* raise dedup\.num_perm to 299$"):
        dedup.choose_bands(0.01, 128, 0.95)
    assert dedup.catch_probability(0.01, *dedup.choose_bands(0.01, 299, 0.95)) >= 0.95
    with pytest.raises(ConfigError, match="raise recipe.dedup.threshold or lower recipe.dedup.recall"):
        DedupConfig(threshold=0.001).check("recipe.dedup")
    DedupConfig(threshold=0.001, fuzzy=False).check("recipe.dedup")  # no banding without fuzzy dedup


def test_short_wordless_and_one_word_changes_follow_the_true_jaccard():
    twenty = " ".join(f"word{i}" for i in range(20))
    texts = [
        "Hello World", "hello   WORLD",  # one 2-word shingle each, the same: J = 1
        "Hello there",  # a different short text: J = 0
        "!!! ???", "... ---", "!!! ???",  # no words: never near copies, exact copies still removed
        twenty,
        twenty.replace("word19", "other"),  # last word: 1 of 16 shingles changes, J = 15/17
        twenty.replace("word10", "other"),  # a middle word: 5 shingles change, J = 11/21
    ]
    result = run(texts, DedupConfig())
    got = [result.decision(i) for i in range(len(texts))]
    assert got[0] is None and got[1] == ("near_duplicate", 0, 1.0) and got[2] is None
    assert got[3] is None and got[4] is None and got[5] == ("exact_duplicate", 3, 1.0)
    assert got[6] is None and got[7] == ("near_duplicate", 6, pytest.approx(15 / 17)) and got[8] is None
    assert dedup.shingle_set("!!! ???", 5) == frozenset() and dedup.jaccard(frozenset(), frozenset()) == 0.0
    assert run([], DedupConfig()).clusters == [] and run(["only one"], DedupConfig()).clusters == []


def test_huge_document_and_its_near_copy():
    parts, size = [], 0
    for path in sorted(STDLIB.glob("*.py")):
        parts.append(path.read_text(errors="replace"))
        size += len(parts[-1])
        if size > 1_500_000:
            break
    huge = "\n".join(parts)
    words = huge.split(" ")
    copy = " ".join(w if i % 400 else "CHANGED" for i, w in enumerate(words))
    texts = [huge, parts[0], copy]
    result = run(texts, DedupConfig())
    reason, canonical, jac = result.decision(2)
    assert (reason, canonical) == ("near_duplicate", 0) and 0.8 <= jac < 1.0
    records = list(result.example_records(lambda i: {"id": f"d{i}", "domain": "code", "source": "s"},
                                          lambda idx: [texts[i] for i in idx], 10))
    assert len(records) == 1
    kept = records[0]["kept"]["text"]
    assert kept.endswith("…") and len(kept.encode()) <= 64 * 1024 and huge.startswith(kept[:-1])


def test_exact_and_near_reasons_records_and_manifest(docs):
    a, b = docs[0], docs[1]
    near = copy_at(b, 0.9, random.Random(2))
    texts = [a, b, a, whitespace_copy(b), near, near, docs[2]]
    result = run(texts, DedupConfig())
    assert result.clusters == [[0, 2], [1, 3, 4, 5]]
    assert result.decision(2) == ("exact_duplicate", 0, 1.0)
    assert result.decision(3) == ("near_duplicate", 1, 1.0)
    assert result.decision(4)[:2] == ("near_duplicate", 1)
    # an exact copy of a removed near copy is an exact duplicate, with the canonical's Jaccard
    assert result.decision(5) == ("exact_duplicate", 1, result.decision(4)[2])
    info = lambda i: {"id": f"doc-{i}", "domain": "prose" if i % 2 else "code", "source": "src"}  # noqa: E731
    records = list(result.example_records(info, lambda idx: [texts[i] for i in idx], 1))
    assert records == [{"cluster": 0,
                        "kept": {"index": 0, "id": "doc-0", "domain": "code", "source": "src", "text": a},
                        "removed": [{"index": 2, "id": "doc-2", "domain": "code", "source": "src",
                                     "reason": "exact_duplicate", "jaccard": 1.0, "text": a}]}]
    assert len(list(result.example_records(info, lambda idx: [texts[i] for i in idx], 1000))) == 2
    assert list(result.example_records(info, lambda idx: [texts[i] for i in idx], 0)) == []
    entry = result.dd.manifest_entry()
    assert json.dumps(entry, sort_keys=True) == json.dumps(run(texts, DedupConfig()).dd.manifest_entry(),
                                                           sort_keys=True)
    assert (entry["bands"], entry["rows"], entry["clusters"]) == (18, 7, 2)
    assert (entry["exact_duplicates"], entry["near_duplicates"]) == (2, 2)
    assert entry["curve"][4] == [0.8, entry["catch_probability"]] and "exact Jaccard" in entry["verification"]
    # exact off: identical copies are near duplicates (J = 1); fuzzy off: only exact copies go
    no_exact = run(texts, DedupConfig(exact=False))
    assert no_exact.decision(2) == ("near_duplicate", 0, 1.0) and no_exact.clusters == result.clusters
    no_fuzzy = run(texts, DedupConfig(fuzzy=False))
    assert no_fuzzy.clusters == [[0, 2], [4, 5]] and no_fuzzy.decision(3) is None
    assert "bands" not in no_fuzzy.dd.manifest_entry()
    dd = dedup.Deduplicator(DedupConfig(fuzzy=False))
    dd.add(1, b"x", None)
    dd.add(1, b"y", None)
    with pytest.raises(ValueError, match="build index 1 added twice"):
        dd.finish(lambda idx: [])
    with pytest.raises(ValueError, match="build index 3 has no MinHash signature"):
        dedup.Deduplicator(DedupConfig()).add(3, b"x", None)
    with pytest.raises(ValueError, match="texts_of returned 0 texts for 3 indices"):
        run(texts, DedupConfig()).dd.finish(lambda idx: [])


def test_a_large_group_sharing_every_band_is_one_cluster(docs):
    base = docs[3]
    texts = [base.replace(" ", " " * (1 + i % 3)) + "\n" * (i // 3) for i in range(450)] + docs[4:8]
    result = run(texts, DedupConfig())
    assert result.clusters == [list(range(450))]


def test_streaming_cleaner_removes_verified_copies_only(docs):
    rng = random.Random(4)
    texts = [docs[0], docs[0], copy_at(docs[0], 0.85, rng), copy_at(docs[1], 0.7, rng), docs[1], docs[2]]
    cfg = DedupConfig()
    signer = Signer(cfg.num_perm, cfg.shingle_words)
    stats = Stats()
    cleaner = Cleaner(CleanConfig(), cfg, SplitConfig(), stats)
    kept = []
    for i, text in enumerate(texts):
        item = Cleaned({"id": str(i), "domain": "d", "text": text}, len(text), len(text), None,
                       hashlib.blake2b(text.encode(), digest_size=16).digest(), signer.signature(text))
        kept.append(cleaner.accept(item))
    assert kept == [True, False, False, True, True, True]
    data = stats.to_json()
    assert data["exact_dedup"]["d"]["removed"]["exact_duplicate"]["docs"] == 1
    assert data["fuzzy_dedup"]["d"]["removed"]["near_duplicate"]["docs"] == 1


def test_benchmark_reports_speed(docs):
    texts = docs[:20] + [docs[0]]
    out = dedup.benchmark(texts, DedupConfig())
    assert out["documents"] == 21 and out["removed"] == 1 and out["docs_per_second"] > 0
    assert set(out) >= {"signature_seconds", "dedup_seconds", "candidate_pairs", "verified_pairs", "bands", "rows"}
