"""Decontamination on real text (stdlib sources as training documents, licence text as evaluation text):
planted leaks found, n-1 word runs not, common phrases dropped, Bloom false positives never reported,
hashes stable across processes, evaluation files read or refused on one line."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from data_helpers import stdlib_files
from glassroom.data import decontam, eval_files, ngrams
from glassroom.data.recipe import DecontaminateConfig
from glassroom.errors import GlassroomError

CFG = DecontaminateConfig()  # ngram 13, common_docs 10, eval_coverage 0.3, train_coverage 0.5
ANY = replace(CFG, eval_coverage=1e-9)  # any leaked n-gram is contamination (GPT-3's rule): the n-gram mechanics alone
LICENCE = Path("/usr/share/common-licenses/GPL-3")


def eval_text() -> str:
    return LICENCE.read_text()


def train_texts(n: int = 12) -> list[str]:
    return [p.read_text() for p in stdlib_files("email")[:n]]


def eval_words(start: int, count: int) -> list[str]:
    """`count` consecutive words of the licence (original case, as \\w+ runs), from word `start`."""
    return ngrams.WORDS.findall(eval_text())[start: start + count]


def plant(doc: str, words: list[str], at: float = 0.5) -> str:
    cut = doc.find("\n", int(len(doc) * at))
    return doc[:cut] + "\n# " + " ".join(words) + "\n" + doc[cut:]


def scan(index, texts):
    return decontam.scan_batch(index.to_bytes(), texts)


def reader(texts):
    """decide()'s texts_of over a list of texts."""
    return lambda positions: [texts[k] for k in positions]


def exact_leaks(text: str, evals: list[str], n: int) -> set[tuple[str, ...]]:
    """The slow, obviously right answer: the n-word tuples a text shares with the evaluation texts."""
    grams = set()
    for e in evals:
        w = ngrams.words_of(e)
        grams.update(tuple(w[i: i + n]) for i in range(len(w) - n + 1))
    w = ngrams.words_of(text)
    return {tuple(w[i: i + n]) for i in range(len(w) - n + 1)} & grams


def test_planted_passage_found_and_n_minus_1_runs_are_not():
    docs = train_texts(6)
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    passage = eval_words(400, 30)
    leaked = plant(docs[0], passage)
    # the same licence words, but never 13 in a row: runs of 12 (and shorter) split by a word of our own
    runs = [eval_words(600 + 13 * k, 12) for k in range(6)] + [eval_words(800, 7), eval_words(900, 1)]
    near_miss = plant(docs[1], [w for run in runs for w in run + ["zyxwv"]])
    exactly_n = plant(docs[2], eval_words(1000, 13))  # the boundary: one 13-word run is a leak
    texts = [leaked, near_miss, exactly_n] + docs[3:]
    hits = scan(index, texts)
    verdict = decontam.decide(index, hits, ANY, reader(texts))
    assert verdict.contaminated.tolist() == [True, False, True] + [False] * 3
    assert verdict.matches[0] == 30 - 13 + 1 and verdict.matches[2] == 1
    # by the default rule these passages cover too little of the licence (5,600 words) or of their file: kept
    verdict = decontam.decide(index, hits, CFG, reader(texts))
    assert not verdict.contaminated.any() and verdict.overlapping.tolist() == [True, False, True] + [False] * 3
    for text, h in zip(texts, hits):  # hashes agree with the tuple-set answer, one per distinct n-gram
        assert len(h) == len(exact_leaks(text, [eval_text()], 13))
        assert np.all(np.diff(h.astype(np.float64)) >= 0) and len(np.unique(h)) == len(h)
    # one word changed in the middle of the 30: two runs of 14 and 15 words remain, 2 + 3 n-grams
    changed = passage[:14] + ["qqqq"] + passage[15:]
    one = [plant(docs[0], changed)]
    assert decontam.decide(index, scan(index, one), CFG, reader(one)).matches.tolist() == [5]


def test_case_and_punctuation_do_not_hide_a_leak_and_the_example_shows_it():
    docs = train_texts(2)
    passage = eval_words(2000, 20)
    shouted = plant(docs[0], [w.upper() + "," for w in passage])
    index = decontam.EvalIndex.build(CFG, [("validation:prose", "a short one"), ("file:GPL-3", eval_text())])
    assert index.sources[0] == {"name": "validation:prose", "documents": 1, "short_documents": 1, "ngrams": 0}
    hits = scan(index, [shouted, docs[1]])
    verdict = decontam.decide(index, hits, ANY, reader([shouted, docs[1]]))
    assert verdict.contaminated.tolist() == [True, False]
    rec = decontam.example_record({"index": 7, "id": "email/x.py", "domain": "code", "source": "stdlib"},
                                  shouted, verdict.leaked(0), index, "remove")
    assert rec["action"] == "removed" and rec["matches"] == 8 and rec["eval_sources"] == ["file:GPL-3"]
    assert rec["ngrams"] == [", ".join(w.upper() for w in passage)]  # the passage as the document has it
    assert (rec["index"], rec["id"], rec["domain"], rec["source"]) == (7, "email/x.py", "code", "stdlib")
    assert rec["text"] == shouted
    json.dumps(rec, ensure_ascii=False)
    flagged = decontam.example_record({"id": "y"}, shouted + "é" * 70_000, verdict.leaked(0), index, "flag")
    assert flagged["action"] == "flagged" and flagged["text"].endswith("…")
    assert decontam.example_record({}, shouted, verdict.leaked(0), index, "removed")["action"] == "removed"
    with pytest.raises(ValueError):
        decontam.example_record({}, shouted, verdict.leaked(0), index, "delete")
    assert len(flagged["text"].encode()) <= decontam.EXAMPLE_BYTES + 3


def test_empty_inputs_and_odd_text():
    empty = decontam.EvalIndex.build(CFG, [("validation:x", "too short to count")])
    assert len(empty.hashes) == 0 and empty.sources[0]["short_documents"] == 1
    assert [len(h) for h in scan(empty, train_texts(2) + [""])] == [0, 0, 0]
    assert decontam.scan_batch(empty.to_bytes(), []) == []
    verdict = decontam.decide(empty, [], CFG, reader([]))
    assert len(verdict.contaminated) == 0 and verdict.summary([])["documents_removed"] == 0
    none = decontam.EvalIndex.build(CFG, [])
    assert none.sources == [] and scan(none, ["a b c d e f g h i j k l m n"])[0].size == 0
    # a lone surrogate (a JSON escape) in a leaked document: the record is still valid UTF-8 JSON
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    odd = "\ud800 " + " ".join(eval_words(10, 13)) + " \udfff tail"
    hits = scan(index, [odd])
    rec = decontam.example_record({"id": "odd"}, odd, hits[0], index, "remove")
    assert rec["matches"] == 1 and rec["text"].startswith("? ")
    json.dumps(rec, ensure_ascii=False).encode("utf-8")


def test_common_phrase_in_more_than_common_docs_documents_is_not_a_leak():
    docs = train_texts(12)
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    header = eval_words(100, 20)  # a licence header pasted into many files
    rare = eval_words(3000, 20)
    texts = [plant(d, header) for d in docs[:11]] + [plant(docs[11], rare)]
    verdict = decontam.decide(index, scan(index, texts), ANY, reader(texts))
    assert verdict.contaminated.tolist() == [False] * 11 + [True]  # 11 > common_docs (10): common
    assert len(verdict.common) == 20 - 13 + 1
    # hits given unsorted with repeats count once per document: 6 documents (12 hits each) stay under 10
    raw = [np.concatenate([h[::-1], h]) for h in scan(index, texts[:6])]
    assert decontam.decide(index, raw, ANY, reader(texts[:6])).contaminated.tolist() == [True] * 6
    summary = verdict.summary(["code"] * 6 + ["docs"] * 6)
    assert summary["common_phrases_dropped"] == 8 and summary["documents_removed"] == 1
    assert summary["documents_with_common_phrases_only"] == 11 and summary["documents_scanned"] == 12
    assert summary["domains"] == {"code": {"scanned": 6, "removed": 0, "overlapping_kept": 0, "ngrams": 0},
                                  "docs": {"scanned": 6, "removed": 1, "overlapping_kept": 0, "ngrams": 8}}
    assert summary["bloom"]["items"] == len(index.hashes) and summary["bloom"]["fp_rate_expected"] <= 0.001
    # at exactly common_docs documents it is still a leak; a flag summary says flagged
    verdict = decontam.decide(index, scan(index, texts[1:]), replace(ANY, action="flag"), reader(texts[1:]))
    assert verdict.contaminated.all() and verdict.summary()["documents_flagged"] == 11


def test_bloom_false_positives_never_become_leaks():
    docs = [p.read_text() for p in stdlib_files("json") + stdlib_files("email")]
    evals = [eval_text()]
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", evals[0])], fp_rate=0.5)
    assert index.bloom.bits < len(index.hashes) * 3  # a tiny filter (26 bits an item at 0.1%)
    texts = [plant(docs[0], eval_words(50, 16))] + docs[1:]
    every = np.concatenate([ngrams.ngram_hashes(t, 13) for t in texts])
    maybe = index.bloom.contains(every)
    assert maybe.sum() > 1000  # the filter lets through many n-grams that are not evaluation text
    hits = scan(index, texts)
    assert [len(h) for h in hits] == [len(exact_leaks(t, evals, 13)) for t in texts] == [4] + [0] * (len(texts) - 1)
    # and the filter never misses: every evaluation n-gram is in it
    assert index.bloom.contains(index.hashes).all()


def test_bloom_filter_sizing_and_round_trip():
    rng = np.random.default_rng(0)
    items = rng.integers(0, 2**64 - 1, 50_000, dtype=np.uint64)
    bloom = ngrams.BloomFilter.sized(len(items))
    bloom.add(items)
    assert bloom.contains(items).all()
    others = rng.integers(0, 2**64 - 1, 400_000, dtype=np.uint64)
    assert bloom.contains(others).mean() < ngrams.FP_RATE  # measured, not just predicted
    again = ngrams.BloomFilter.from_bytes(bloom.to_bytes())
    assert np.array_equal(again.contains(others), bloom.contains(others)) and again.items == bloom.items
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    back = decontam.EvalIndex.from_bytes(index.to_bytes())
    assert np.array_equal(back.hashes, index.hashes) and back.sources == index.sources
    assert index.to_bytes() == back.to_bytes()  # deterministic bytes
    with pytest.raises(ValueError):
        decontam.EvalIndex.from_bytes(b"not an index")


def test_batches_equal_texts_one_by_one_and_words_equal_the_regex():
    texts = train_texts(5) + ["", "two words", "Ünïcode ΟΔΟΣ straße x_y 123 naïve café\u0301 日本語 𝔘𝔫𝔦 a-b " * 4]
    for t in texts:
        assert len(ngrams.ngram_hashes(t, 3)) == max(len(ngrams.words_of(t)) - 2, 0)
        words = ngrams.words_of(t)  # equal words hash equal, distinct words differently
        hashes, _ = ngrams._words_hashed(t.lower())
        assert len(hashes) == len(words)
        assert len(set(zip(words, hashes.tolist()))) == len(set(words)) == len(set(hashes.tolist()))
    flat, doc = ngrams.batch_ngram_hashes(texts, 13)
    for i, t in enumerate(texts):
        assert np.array_equal(flat[doc == i], ngrams.ngram_hashes(t, 13))
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    planted = [plant(t, eval_words(70 * i, 14 + i)) for i, t in enumerate(texts)]
    together = scan(index, planted)
    alone = [scan(index, [t])[0] for t in planted]
    backwards = scan(index, planted[::-1])[::-1]
    assert [h.tolist() for h in together] == [h.tolist() for h in alone] == [h.tolist() for h in backwards]
    assert [len(h) for h in together] == [2 + i for i in range(len(texts))]
    assert pickle.loads(pickle.dumps(decontam.scan_batch)) is decontam.scan_batch  # an executor can ship it


def test_a_very_long_word_and_a_long_text_hash_like_short_ones(monkeypatch):
    long_word = "ab12" * 50_000  # 200,000 word characters in one \\w+ run (a hex blob)
    text = f"start {long_word} middle " + " ".join(eval_words(0, 40)) + f" {long_word} end"
    h = ngrams.ngram_hashes(text, 3)
    words = ngrams.words_of(text)
    assert len(h) == len(words) - 2
    assert h[0] != h[1] and ngrams.ngram_hashes(f"x {long_word} y", 3).tolist() == \
        ngrams.ngram_hashes(f"X {long_word.upper()} Y", 3).tolist()
    index = decontam.EvalIndex.build(CFG, [("file:GPL-3", eval_text())])
    assert len(scan(index, [text])[0]) == 40 - 13 + 1
    # hashed in pieces (cut after a non-word character; a word longer than a piece taken whole): same hashes
    whole = ngrams.ngram_hashes(text, 13).tolist()
    mixed = text + " " + eval_text()
    for piece in (7, 1000, 150_000):
        monkeypatch.setattr(ngrams, "PIECE", piece)
        assert ngrams.ngram_hashes(text, 13).tolist() == whole
        assert ngrams.ngram_hashes(mixed, 13).tolist()[: len(whole)] == whole
    monkeypatch.undo()
    assert len(ngrams.ngram_hashes(mixed, 13)) == len(ngrams.words_of(mixed)) - 12


def test_hashes_are_the_same_in_another_process():
    text = train_texts(1)[0]
    code = ("import sys, json; from glassroom.data import ngrams; "
            "print(json.dumps(ngrams.ngram_hashes(sys.stdin.read(), 13).tolist()))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == ngrams.ngram_hashes(text, 13).tolist()
    # and pinned: a change of the hash would be a change of what every dataset's manifest means
    assert ngrams.ngram_hashes("one two three", 2).tolist() == PINNED


PINNED = [9104775509995939445, 1275725435993836736]


def test_benchmark_agrees_with_the_baseline():
    docs = train_texts(8)
    docs[3] = plant(docs[3], eval_words(5, 40))
    got = decontam.benchmark(docs, [("file:GPL-3", eval_text())], CFG)
    assert got["agree"] and got["documents"] == 8 and got["documents_with_hits"] == 1
    assert got["scan_docs_per_s"] > 0 and got["baseline_docs_per_s"] > 0 and got["eval_ngrams"] > 5000


# --- evaluation files ------------------------------------------------------------------------------------


def test_file_texts_reads_txt_jsonl_json_and_folders(tmp_path):
    (tmp_path / "a.txt").write_text("whole file as one text\nsecond line")
    records = [{"query": "first question", "choices": ["yes", {"deep": ["nested answer"]}], "label": 2},
               {"query": "second question", "gold": None}]
    (tmp_path / "b.jsonl").write_text("\ufeff" + "\n".join(json.dumps(r) for r in records) + "\n\n")  # with a BOM
    (tmp_path / "c.json").write_text(json.dumps({"items": records}))
    folder = tmp_path / "tasks"
    (folder / "sub").mkdir(parents=True)
    (folder / "z.txt").write_text("zed")
    (folder / "sub" / "y.json").write_text('["why"]')
    (folder / "ignored.yaml").write_text("task: x")
    (folder / ".hidden.txt").write_text("hidden")
    (folder / "empty.txt").write_text("")
    got = list(eval_files.file_texts([str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"), str(tmp_path / "c.json"),
                                    str(folder)]))
    assert got == [(f"file:{tmp_path / 'a.txt'}", "whole file as one text\nsecond line"),
                   *[(f"file:{tmp_path / 'b.jsonl'}", t) for t in
                     ["first question", "yes", "nested answer", "second question"]],
                   *[(f"file:{tmp_path / 'c.json'}", t) for t in
                     ["first question", "yes", "nested answer", "second question"]],
                   (f"file:{folder / 'sub' / 'y.json'}", "why"), (f"file:{folder / 'z.txt'}", "zed")]


@pytest.mark.parametrize("setup, expect", [
    (lambda p: p / "missing.txt", "does not exist"),
    (lambda p: (p / "empty.txt").write_text("  \n") and p / "empty.txt", "has no text"),
    (lambda p: (p / "latin1.txt").write_bytes("café".encode("latin-1")) and p / "latin1.txt", "is not UTF-8"),
    (lambda p: (p / "bad.jsonl").write_text('{"a": "ok"}\n{broken\n') and p / "bad.jsonl", "bad.jsonl:2 is not a JSON"),
    (lambda p: (p / "bad.json").write_text("{") and p / "bad.json", "is not valid JSON"),
    (lambda p: (p / "numbers.json").write_text("[1, 2, 3]") and p / "numbers.json", "has no text"),
    (lambda p: (p / "deep.json").write_text("[" * 100_000 + "]" * 100_000) and p / "deep.json", "nested too deeply"),
    (lambda p: (p / "nothing").mkdir() or (p / "nothing" / "x.yaml").write_text("a: b") and p / "nothing",
     "has no .txt, .jsonl or .json files"),
    (lambda p: (p / "blank").mkdir() or (p / "blank" / "x.txt").write_text("") or p / "blank", "have no text"),
    (lambda p: Path("/dev/null"), "not a regular file"),
    (lambda p: (p / "bom.txt").write_bytes(b"\xef\xbb\xbf") and p / "bom.txt", "has no text"),
])
def test_file_texts_bad_inputs_are_one_line_errors(tmp_path, setup, expect):
    (tmp_path / "fine.txt").write_text("fine evaluation text")
    target = setup(tmp_path)
    with pytest.raises(GlassroomError) as exc:
        list(eval_files.file_texts([str(tmp_path / "fine.txt"), str(target)]))
    msg = str(exc.value)
    assert msg.startswith("decontaminate.files[1]: ") and expect in msg and "\n" not in msg, msg


def test_file_texts_checks_every_input_before_giving_text(tmp_path):
    (tmp_path / "fine.txt").write_text("fine")
    texts = eval_files.file_texts([str(tmp_path / "fine.txt"), str(tmp_path / "nope")])
    with pytest.raises(GlassroomError, match=r"files\[1\]"):
        next(texts)


def test_check_files_and_the_file_size_bound(tmp_path, monkeypatch):
    (tmp_path / "ok.txt").write_text("x" * 100)
    eval_files.check_files([str(tmp_path / "ok.txt"), str(tmp_path)])
    with pytest.raises(GlassroomError, match=r"^decontaminate.files\[1\]: .*nope does not exist"):
        eval_files.check_files([str(tmp_path / "ok.txt"), str(tmp_path / "nope")])
    monkeypatch.setattr(eval_files, "MAX_FILE_BYTES", 50)
    with pytest.raises(GlassroomError, match=r"^decontaminate.files\[0\]: .*ok.txt is 0.0 GiB, more than"):
        list(eval_files.file_texts([str(tmp_path / "ok.txt")]))


def test_file_texts_bounds_a_huge_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(eval_files, "MAX_FILES", 3)
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text("x")
    with pytest.raises(GlassroomError, match=r"more than 3 evaluation files"):
        list(eval_files.file_texts([str(tmp_path)]))
