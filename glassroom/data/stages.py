"""The build's middle stages over the staged corpus: dedup, decontamination, quality.

Each works on build indices (documents that passed the filters, numbered in recipe order) and on a
`Corpus` that reads any document back from the one staging file by index. The global decisions
run in the driver (dedup's candidate verification and clusters, the common-phrase rule, the
classifier's training and bucket cutoffs); the per-document work (n-gram scan, scoring) is mapped
on the executor in index order, so the result never depends on the executor. The functions of
glassroom/data/dedup.py, decontam.py and quality.py are used exactly as docs/data-build.md says.
The tokenizer stage (trained on a domain-balanced sample, or loaded) and the choice of encoder
(the tiktoken mirror when a sample shows it gives `tokenizers`' ids) are here too.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from glassroom.data import clean as cleaning
from glassroom.data import decontam, eval_files, fast_tokens, quality
from glassroom.data.conversation_sources import tokenizer_texts
from glassroom.data.executor import Executor
from glassroom.data.recipe import Recipe
from glassroom.data.tokenizer import copy_tokenizer, load_tokenizer, save_tokenizer, train_tokenizer

STAGES = ("extract", "normalize", "filter", "exact_dedup", "fuzzy_dedup", "split", "decontaminate", "quality",
          "tokenize")
BATCH_BYTES = 1_000_000  # text per executor task
CHECK_DOCS, CHECK_BYTES = 256, 4_000_000  # the tiktoken mirror is checked on this much of the tokenizer sample


class Stats(cleaning.Stats):
    """stats.json: per stage and domain, docs/bytes in and out and removals by reason."""

    def __init__(self) -> None:
        self.data = {s: {} for s in STAGES}


class Corpus:
    """The staged documents (JSONL rows with id, source, text, bytes) by build index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = open(path, "wb")
        self.pos = 0
        self.offsets: list[int] = []
        self.domain: list[str] = []
        self.nbytes: list[int] = []
        self.ids: list[str] = []
        self.sources: list[str] = []
        self._read = None

    def append(self, row: dict, domain: str) -> int:
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
        self.offsets.append(self.pos)
        self.pos += len(line)
        self.fh.write(line)
        self.domain.append(domain)
        self.nbytes.append(row["bytes"])
        self.ids.append(row["id"])
        self.sources.append(row["source"])
        return len(self.offsets) - 1

    def close_writing(self) -> None:
        self.fh.close()

    def rows(self, indices) -> list[dict]:
        if self._read is None:
            self._read = open(self.path, "rb")
        out = []
        for i in indices:
            self._read.seek(self.offsets[i])
            out.append(json.loads(self._read.readline()))
        return out

    def texts_of(self, indices) -> list[str]:
        return [r["text"] for r in self.rows(indices)]

    def doc_info(self, i: int) -> dict:
        return {"id": self.ids[i], "domain": self.domain[i], "source": self.sources[i]}

    def meta(self, indices) -> list[dict]:
        """id, source and bytes of each document (no text read)."""
        return [{"id": self.ids[i], "source": self.sources[i], "bytes": self.nbytes[i]} for i in indices]

    def batches(self, indices, limit: int = BATCH_BYTES):
        """`indices` in runs of about `limit` bytes of text."""
        batch, size = [], 0
        for i in indices:
            batch.append(i)
            size += self.nbytes[i]
            if size >= limit:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def close(self) -> None:
        if self._read is not None:
            self._read.close()
            self._read = None


def write_jsonl(path: Path, records) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


def decontaminate(recipe: Recipe, corpus: Corpus, train: list[int], validation: list[int], ex: Executor,
                  tmp: Path, log: TextIO) -> tuple[dict | None, set[int], dict[int, int]]:
    """(manifest entry or None, indices removed, shard flags per index) of the decontamination stage over the
    train documents `train`; evaluation text is the validation documents and the recipe's files. Flags:
    decontam.FLAG_CONTAMINATED for a contaminated document kept by action: flag, decontam.FLAG_OVERLAP for one
    that shares n-grams below the coverage thresholds (kept either way)."""
    cfg = recipe.decontaminate
    if not cfg.enabled:
        return None, set(), {}

    def eval_texts():
        if cfg.validation:
            for batch in corpus.batches(validation):
                for i, text in zip(batch, corpus.texts_of(batch)):
                    yield f"validation:{corpus.domain[i]}", text
        yield from eval_files.file_texts(cfg.files)

    index = decontam.EvalIndex.build(cfg, eval_texts())
    blob = index.to_bytes()
    hits: list[np.ndarray] = []
    for part in ex.map(decontam.scan_batch, ((blob, corpus.texts_of(b)) for b in corpus.batches(train))):
        hits.extend(part)
    verdict = decontam.decide(index, hits, cfg, lambda ks: corpus.texts_of([train[k] for k in ks]))
    summary = verdict.summary([corpus.domain[i] for i in train])
    bad = [train[k] for k in np.flatnonzero(verdict.contaminated)]
    action = "removed" if cfg.action == "remove" else "flagged"
    flags = {train[k]: decontam.FLAG_OVERLAP for k in np.flatnonzero(verdict.overlapping)}
    if cfg.action == "flag":
        flags.update(dict.fromkeys(bad, decontam.FLAG_CONTAMINATED))

    def records():
        shown = np.flatnonzero(verdict.contaminated).tolist() + np.flatnonzero(verdict.overlapping).tolist()
        for k in shown[: cfg.examples]:
            i = train[int(k)]
            info = {"index": i, **corpus.doc_info(i)}
            yield decontam.example_record(info, corpus.texts_of([i])[0], verdict.leaked(int(k)), index,
                                          action if verdict.contaminated[k] else "kept", verdict.coverage_of(int(k)))

    written = write_jsonl(tmp / "removed" / "contaminated.jsonl", records())
    summary["examples_file"] = "removed/contaminated.jsonl" if written else None
    print(f"decontaminate: {len(bad)} of {len(train)} train documents {action}, {int(verdict.overlapping.sum())} kept "
          f"that share less ({cfg.ngram}-word n-grams: a passage of {cfg.eval_passage:.0%} of an evaluation text, "
          f"{cfg.eval_coverage:.0%} of one covered, or {cfg.train_coverage:.0%} of the document; "
          f"{len(index.sources)} evaluation sources)", file=log)
    return summary, (set(bad) if cfg.action == "remove" else set()), flags


def quality_scores(recipe: Recipe, corpus: Corpus, train: list[int], kept: list[int], sample_key: dict[int, float],
                   ex: Executor, tmp: Path, log: TextIO) -> tuple[dict | None, dict[int, float], dict[int, int]]:
    """(manifest entry or None, score per index, bucket per index) of the quality stage over `kept`;
    the classifier learns from at most sample_docs train documents, chosen by their sample key."""
    cfg = recipe.quality
    if not cfg.enabled:
        return None, {}, {}

    chosen = sorted(sorted(train, key=lambda i: (sample_key[i], i))[: cfg.sample_docs])
    sample = [{"text": t, "domain": corpus.domain[i]} for i, t in zip(chosen, corpus.texts_of(chosen))]
    model, info = quality.train(sample, cfg)
    (tmp / "quality").mkdir(exist_ok=True)
    model.save(tmp / "quality" / "classifier.npz")
    blob = model.to_bytes()
    scores: dict[int, float] = {}
    for batch, part in zip(list(corpus.batches(kept)),
                           ex.map(quality.score_batch, ((blob, corpus.texts_of(b)) for b in corpus.batches(kept)))):
        scores.update(zip(batch, (float(s) for s in np.asarray(part, dtype=np.float32))))
    train_set = set(train)
    cutoffs, buckets = {}, {}
    for domain in recipe.domains:
        mine = [i for i in kept if corpus.domain[i] == domain]
        ref = np.asarray([scores[i] for i in mine if i in train_set] or [scores[i] for i in mine], dtype=np.float32)
        cut = quality.cutoffs(ref, cfg.buckets)
        cutoffs[domain] = [float(c) for c in np.asarray(cut, dtype=np.float64)]
        assigned = quality.assign(np.asarray([scores[i] for i in mine], dtype=np.float32), cut)
        buckets.update(zip(mine, (int(b) for b in assigned)))
    digest = hashlib.sha256((tmp / "quality" / "classifier.npz").read_bytes()).hexdigest()
    entry = {**info, "file": "quality/classifier.npz", "sha256": digest, "buckets": cfg.buckets, "cutoffs": cutoffs}
    acc = info.get("heldout_accuracy")
    print(f"quality: classifier trained on {len(sample)} train documents"
          + (f", held-out accuracy {acc:.3f}" if isinstance(acc, (int, float)) else "")
          + f"; {len(kept)} documents scored into {cfg.buckets} buckets per domain", file=log)
    return entry, scores, buckets


def tokenizer_stage(recipe: Recipe, tmp: Path, corpus: Corpus, train: list[int], sample_key: list[float],
               log: TextIO) -> tuple[dict, list[int]]:
    """(manifest tokenizer entry, the train indices it was trained on: a domain-balanced sample by sample key)."""
    cfg = recipe.tokenizer
    per_domain = cfg.sample_bytes // len(recipe.domains)
    chosen: list[int] = []
    for domain in recipe.domains:
        budget = per_domain
        for i in sorted((i for i in train if corpus.domain[i] == domain), key=lambda i: (sample_key[i], i)):
            if budget <= 0:
                break
            chosen.append(i)
            budget -= corpus.nbytes[i]
    chosen.sort()
    if cfg.path:
        load_tokenizer(cfg.path)  # validates it
        copy_tokenizer(cfg.path, tmp / "tokenizer.json")
        digest = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
        return {"origin": "loaded", "loaded_from": cfg.path, "sha256": digest}, chosen
    sampled = {"bytes": 0, "documents": 0}

    def texts():
        for b in corpus.batches(chosen):
            for doc in corpus.rows(b):
                sampled["bytes"] += doc["bytes"]
                sampled["documents"] += 1
                if "chat" in doc:  # the messages' text, not the template markers
                    yield from tokenizer_texts(doc["chat"])
                else:
                    yield doc["text"]

    print(f"tokenizer: training byte-level BPE, vocabulary {cfg.vocab_size}, on up to {cfg.sample_bytes / 1e6:.1f} MB "
          "of train documents", file=log, flush=True)
    start = time.monotonic()
    tok = train_tokenizer(texts(), cfg.vocab_size, cfg.min_frequency)
    save_tokenizer(tok, tmp / "tokenizer.json")
    seconds = time.monotonic() - start
    filled = tok.get_vocab_size()
    print(f"tokenizer: trained byte-level BPE, vocabulary {filled}, on {sampled['bytes'] / 1e6:.1f} MB "
          f"({sampled['documents']} train documents, up to {per_domain / 1e6:.1f} MB per domain) in {seconds:.1f} s", file=log)
    info = {"origin": "trained", "model": "byte-level BPE", "trained_on_bytes": sampled["bytes"],
            "trained_on_documents": sampled["documents"], "vocab_size_asked": cfg.vocab_size}
    if filled < cfg.vocab_size:
        # BPE stops when no pair is seen min_frequency times: the corpus is too small for the vocabulary.
        warning = f"vocabulary {cfg.vocab_size} asked, the corpus filled {filled:,}"
        print(f"warning: {warning} (add text, raise tokenizer.sample_bytes, or lower tokenizer.vocab_size or "
              "min_frequency); a model's vocab_size should match the dataset's", file=log)
        info["warnings"] = [warning]
    return info, chosen


def choose_encoder(tok, corpus: Corpus, sample: list[int], log: TextIO) -> dict:
    """Which encoder writes the shards: the tiktoken mirror when it gives `tokenizers`' ids on a
    sample of the tokenizer's training documents, else `tokenizers` (the reason logged)."""
    m, why = fast_tokens.mirror(tok)
    checked, size = [], 0
    for i in sample:
        if len(checked) >= CHECK_DOCS or size >= CHECK_BYTES:
            break
        checked.append(i)
        size += corpus.nbytes[i]
    if m is not None:
        why = fast_tokens.check(m, tok, corpus.texts_of(checked))
    if m is not None and not why:
        return {"kind": "tiktoken", "checked_documents": len(checked), "checked_bytes": size}
    print(f"tokenize: encoding with tokenizers, not the faster tiktoken mirror: {why}", file=log)
    return {"kind": "tokenizers", "checked_documents": len(checked) if m is not None else 0, "reason": why}
