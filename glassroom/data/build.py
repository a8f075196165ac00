"""Orchestrates a data build: recipe -> sources -> clean -> tokenizer -> shards, manifest and stats.

Everything is built in a temporary folder beside DIR and renamed into place at the end, so a build
that fails (a missing source, a domain left empty, Ctrl-C) never damages an existing dataset.
Cleaned documents are staged as JSONL in that folder, so memory holds one batch of text at a time
(plus the dedup hashes and the MinHash LSH index).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from glassroom.data import clean as cleaning
from glassroom.data.progress import Progress
from glassroom.data.recipe import Recipe, recipe_dict, recipe_hash
from glassroom.data.shards import SPLITS, ShardWriter, write_json
from glassroom.data.sources import SourceReport, check_source, iter_source
from glassroom.data.tokenizer import (
    EOS_TOKEN, copy_tokenizer, encode_documents, eos_id, load_tokenizer,
    save_tokenizer, token_dtype, train_tokenizer,
)
from glassroom.errors import GlassroomError

FORMAT = "glassroom-dataset/1"
BATCH_BYTES = 1_000_000  # text per cleaning task sent to a worker


def _batches(docs, limit: int = BATCH_BYTES):
    batch, size = [], 0
    for doc in docs:
        batch.append(doc)
        size += len(doc["text"])
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _pool(workers: int):
    """A process pool (fork on Linux: workers inherit imported modules), or None for one worker."""
    if workers <= 1:
        return None
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # the workers never use tokenizers
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn").Pool(workers)


def _cleaned(batches, recipe: Recipe, pool, workers: int):
    """cleaning.clean_batch over `batches`, in order, in the pool with bounded look-ahead."""
    if pool is None:
        for batch in batches:
            yield from cleaning.clean_batch(batch, recipe.clean, recipe.dedup)
        return
    pending: deque = deque()
    for batch in batches:
        pending.append(pool.apply_async(cleaning.clean_batch, (batch, recipe.clean, recipe.dedup)))
        if len(pending) >= 2 * workers:
            yield from pending.popleft().get()
    while pending:
        yield from pending.popleft().get()


def _extract_to_file(src, domain: str, path: Path) -> SourceReport:
    """Run one source's extractor, writing its documents as JSONL; runs in an extraction worker."""
    report = SourceReport(src.label)
    with open(path, "w", encoding="utf-8") as fh:
        for doc in iter_source(src, domain, report):
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return report


def _check_out(out: Path, force: bool) -> None:
    if out.exists():
        if not out.is_dir():
            raise GlassroomError(f"{out}: exists and is not a folder; choose another --out")
        if not force:
            raise GlassroomError(f"{out}: already exists; pass --force to replace it or choose another --out")
        if any(out.iterdir()) and not (out / "manifest.json").is_file():
            raise GlassroomError(f"{out}: exists and is not a glassroom dataset; not replacing it (choose another --out)")
    if not out.parent.exists():
        raise GlassroomError(f"{out.parent}: no such folder for --out")


def build_dataset(recipe: Recipe, out: str | Path, *, force: bool = False, workers: int | None = None,
                  recipe_file: str | None = None, log: TextIO | None = None, progress_interval: float = 5.0) -> dict:
    """Build the dataset of `recipe` into folder `out`; returns the manifest."""
    log = log if log is not None else sys.stderr
    out = Path(out).resolve()
    _check_out(out, force)
    for domain, dcfg in recipe.domains.items():
        for i, src in enumerate(dcfg.sources):
            check_source(src, f"domains.{domain}.sources[{i}] ({src.label})")
    workers = max(1, workers or os.cpu_count() or 1)
    tmp = out.parent / f".{out.name}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        manifest = _build(recipe, tmp, workers, recipe_file, log, progress_interval)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _swap_into_place(tmp: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _build(recipe: Recipe, tmp: Path, workers: int, recipe_file: str | None, log: TextIO, interval: float) -> dict:
    started = time.monotonic()
    stats = cleaning.Stats()
    staging = tmp / "staging"
    staging.mkdir()

    # 1. Extract and clean, in recipe order (dedup keeps the first copy it sees).
    cleaner = cleaning.Cleaner(recipe.clean, recipe.dedup, recipe.split, stats)
    reports: dict[str, list[SourceReport]] = {}
    kept: dict[str, list[tuple[float, float, int]]] = {}  # domain -> (split score, sample key, bytes)
    caps = [s.max_bytes for d in recipe.domains.values() for s in d.sources]
    progress = Progress("clean", total=sum(caps) if all(caps) else None, interval=interval, stream=log)
    # Sources are extracted in parallel (each to a JSONL file in staging) ahead of cleaning, which
    # consumes them in recipe order so that dedup decisions do not depend on timing.
    with contextlib.ExitStack() as stack:
        extract_pool = _pool(workers)
        clean_pool = _pool(workers)
        for p in (extract_pool, clean_pool):
            if p is not None:
                stack.enter_context(p)
        extracted = {}
        for domain, dcfg in recipe.domains.items():
            for i, src in enumerate(dcfg.sources):
                path = staging / f"raw-{domain}-{i}.jsonl"
                if extract_pool is not None:
                    extracted[domain, i] = extract_pool.apply_async(_extract_to_file, (src, domain, path))
        for domain, dcfg in recipe.domains.items():
            reports[domain] = [SourceReport(src.label) for src in dcfg.sources]
            kept[domain] = []

            def docs(domain=domain, dcfg=dcfg):
                for i, src in enumerate(dcfg.sources):
                    path = staging / f"raw-{domain}-{i}.jsonl"
                    job = extracted.get((domain, i))
                    reports[domain][i] = job.get() if job is not None else _extract_to_file(src, domain, path)
                    with open(path, encoding="utf-8") as fh:
                        for line in fh:
                            yield json.loads(line)
                    path.unlink()

            with open(staging / f"{domain}.jsonl", "w", encoding="utf-8") as fh:
                for item in _cleaned(_batches(docs()), recipe, clean_pool, workers):
                    progress.update(item.raw_bytes, note=domain)
                    if not cleaner.accept(item):
                        continue
                    doc = item.doc
                    score = cleaning.split_score(doc["id"], recipe.split.seed)
                    sample_key = cleaning.split_score(doc["id"], recipe.split.seed + 1_000_003)
                    kept[domain].append((score, sample_key, item.nbytes))
                    fh.write(json.dumps({"id": doc["id"], "source": doc["source"], "text": doc["text"], "bytes": item.nbytes}) + "\n")
    progress.finish(f"{sum(len(v) for v in kept.values())} documents kept")
    _report_skipped(reports, stats, log)
    cutoffs = _split(recipe, kept, stats)

    # 2. Tokenizer: trained on a domain-balanced sample of train documents, or loaded.
    tok_info = _tokenizer(recipe, tmp, staging, kept, cutoffs, log)
    tok = load_tokenizer(tmp / "tokenizer.json")
    vocab_size = tok.get_vocab_size()
    dtype = token_dtype(vocab_size)

    # 3. Encode into shards.
    total = sum(b for rows in kept.values() for _, _, b in rows)
    progress = Progress("tokenize", total=total, interval=interval, stream=log)
    domains = {}
    for domain, dcfg in recipe.domains.items():
        source_index = {src.label: i for i, src in enumerate(dcfg.sources)}
        writers = {split: ShardWriter(tmp, domain, split, dtype) for split in SPLITS}
        with open(staging / f"{domain}.jsonl", encoding="utf-8") as fh:
            rows = (json.loads(line) for line in fh)
            for batch in _batches(rows, 4 * BATCH_BYTES):
                for split in SPLITS:
                    part = [d for d in batch if _is_validation(d["id"], recipe, cutoffs[domain]) == (split == "validation")]
                    if part:
                        ids, offsets = encode_documents(tok, [d["text"] for d in part], dtype)
                        writers[split].add(ids, offsets, part, source_index)
                progress.update(sum(d["bytes"] for d in batch), note=domain)
        entry = {"sources": [_source_entry(src, rep) for src, rep in zip(dcfg.sources, reports[domain])]}
        for split, writer in writers.items():
            info = writer.close()
            info["bytes_per_token"] = round(info["bytes"] / info["tokens"], 4) if info["tokens"] else None
            info.update({f"{k}_file": str(p.relative_to(tmp)) for k, p in writer.paths.items()})
            entry[split] = info
        domains[domain] = entry
        t = stats.entry("tokenize", domain)
        for split in SPLITS:
            t["docs_in"] += entry[split]["documents"]
            t["bytes_in"] += entry[split]["bytes"]
            t[f"{split}_tokens"] = entry[split]["tokens"]
        t["docs_out"], t["bytes_out"] = t["docs_in"], t["bytes_in"]
    progress.finish()
    shutil.rmtree(staging)

    manifest = {
        "format": FORMAT,
        "name": recipe.name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(time.monotonic() - started, 1),
        "dtype": dtype.name,
        "tokenizer": {**tok_info, "file": "tokenizer.json", "vocab_size": vocab_size,
                      "eos_id": eos_id(tok), "eos_token": EOS_TOKEN},
        "domains": domains,
        "totals": {split: {k: sum(d[split][k] for d in domains.values()) for k in ("documents", "tokens", "bytes")} for split in SPLITS},
        "recipe_file": recipe_file,
        "recipe_hash": recipe_hash(recipe),
        "recipe": recipe_dict(recipe),
    }
    write_json(tmp / "stats.json", {"stages": list(cleaning.STAGES), **stats.to_json()})
    write_json(tmp / "manifest.json", manifest)
    return manifest


def _is_validation(doc_id: str, recipe: Recipe, cutoff: float) -> bool:
    return cleaning.split_score(doc_id, recipe.split.seed) < cutoff


_SKIPPED = {
    "malformed_jsonl": "malformed JSONL lines",
    "missing_text_field": "records without the text field",
    "unreadable_file": "unreadable files",
    "unrenderable_man_page": "man pages that did not render",
}


def _report_skipped(reports: dict[str, list[SourceReport]], stats: cleaning.Stats, log: TextIO) -> None:
    for domain, reps in reports.items():
        for rep in reps:
            for reason, n in rep.skipped.items():
                what = _SKIPPED.get(reason, reason.replace("_", " ") + " items")
                print(f"warning: source {rep.label} ({domain}): skipped {n} {what} (first at {rep.examples[reason]})", file=log)
                skipped = stats.entry("extract", domain).setdefault("skipped", {})
                skipped[reason] = skipped.get(reason, 0) + n


def _split(recipe: Recipe, kept: dict, stats: cleaning.Stats) -> dict[str, float]:
    cutoffs = {}
    for domain, rows in kept.items():
        if len(rows) < 2:
            removed = {}
            for stage in ("filter", "exact_dedup", "fuzzy_dedup"):
                for reason, r in stats.entry(stage, domain)["removed"].items():
                    removed[reason] = removed.get(reason, 0) + r["docs"]
            read = stats.entry("extract", domain)["docs_in"]
            why = ", ".join(f"{k} {v}" for k, v in sorted(removed.items())) or "nothing removed"
            raise GlassroomError(
                f"domain {domain}: {len(rows)} document{'s' if len(rows) != 1 else ''} left after cleaning "
                f"({read} read; removed: {why}); a domain needs at least 2 (one held out): add sources or relax recipe.clean"
            )
        cutoff = cleaning.validation_cutoff([(r[0], r[2]) for r in rows], recipe.split.validation_fraction)
        cutoffs[domain] = cutoff
        entry = stats.entry("split", domain)
        for score, _, nbytes in rows:
            split = "validation" if score < cutoff else "train"
            entry["docs_in"] += 1
            entry["bytes_in"] += nbytes
            entry["docs_out"] += 1
            entry["bytes_out"] += nbytes
            entry[f"{split}_docs"] = entry.get(f"{split}_docs", 0) + 1
            entry[f"{split}_bytes"] = entry.get(f"{split}_bytes", 0) + nbytes
    return cutoffs


def _tokenizer(recipe: Recipe, tmp: Path, staging: Path, kept: dict, cutoffs: dict, log: TextIO) -> dict:
    cfg = recipe.tokenizer
    if cfg.path:
        load_tokenizer(cfg.path)  # validates it
        copy_tokenizer(cfg.path, tmp / "tokenizer.json")
        digest = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
        return {"origin": "loaded", "loaded_from": cfg.path, "sha256": digest}
    per_domain = cfg.sample_bytes // len(kept)
    chosen: dict[str, set[int]] = {}
    for domain, rows in kept.items():
        order = sorted((key, i) for i, (score, key, _) in enumerate(rows) if score >= cutoffs[domain])
        budget, picked = per_domain, set()
        for _, i in order:
            if budget <= 0:
                break
            picked.add(i)
            budget -= rows[i][2]
        chosen[domain] = picked
    sampled = {"bytes": 0, "documents": 0}

    def texts():
        for domain in kept:
            with open(staging / f"{domain}.jsonl", encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    if i in chosen[domain]:
                        doc = json.loads(line)
                        sampled["bytes"] += doc["bytes"]
                        sampled["documents"] += 1
                        yield doc["text"]

    print(f"tokenizer: training byte-level BPE, vocabulary {cfg.vocab_size}, on up to {cfg.sample_bytes / 1e6:.1f} MB "
          "of train documents", file=log, flush=True)
    start = time.monotonic()
    tok = train_tokenizer(texts(), cfg.vocab_size, cfg.min_frequency)
    save_tokenizer(tok, tmp / "tokenizer.json")
    seconds = time.monotonic() - start
    print(f"tokenizer: trained byte-level BPE, vocabulary {tok.get_vocab_size()}, on {sampled['bytes'] / 1e6:.1f} MB "
          f"({sampled['documents']} train documents, up to {per_domain / 1e6:.1f} MB per domain) in {seconds:.1f} s", file=log)
    return {"origin": "trained", "model": "byte-level BPE", "trained_on_bytes": sampled["bytes"], "trained_on_documents": sampled["documents"]}


def _source_entry(src, report: SourceReport) -> dict:
    return {"name": src.label, "kind": src.kind, "documents": report.docs, "bytes": report.bytes,
            "skipped": dict(report.skipped)}
