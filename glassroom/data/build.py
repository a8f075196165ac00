"""Orchestrates a data build: recipe -> sources -> clean -> dedup -> split -> decontaminate -> quality
-> tokenizer -> shards, manifest, stats and build.json (docs/data-build.md).

Everything is built in a temporary folder beside DIR (`.DIR.building-<pid>`) and renamed into place
at the end, so a build that fails (a missing source, a domain left empty, Ctrl-C, a lost Ray
cluster) never damages an existing dataset; DIR's safety rules live in staging.py. Per-document
work runs on an executor (executor.py: a local process pool or Ray) in input order; the global
stages (dedup, split, decontamination's common phrases, the quality classifier and cutoffs, the
tokenizer) run here, in the driver (stages.py). Every document that passes the filters gets a
build index (recipe order) and is staged once in `staging/docs.jsonl`, read back by index.

Determinism: everything under DIR except build.json (time, executor, workers) and the ownership
manifest (glassroom.folders.OWNED, which holds build.json's sha256) is a function of the
recipe and the sources: the same bytes from a local build with any --workers and from a Ray build.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

import numpy as np

from glassroom.data import clean as cleaning, fast_tokens
from glassroom.data.chat import ChatTemplate
from glassroom.data.conversation_sources import SKIP_REASONS, encode_chat
from glassroom.data.dedup import Deduplicator
from glassroom.data.executor import Executor, make_executor
from glassroom.data.progress import Progress
from glassroom.data.recipe import Recipe, recipe_dict, recipe_hash
from glassroom.data.shards import SPLITS, ShardWriter, write_json
from glassroom.data.sources import SourceReport, iter_source
from glassroom.data.stages import (
    BATCH_BYTES, choose_encoder as _encoder, Corpus, decontaminate, quality_scores, Stats,
    tokenizer_stage as _tokenizer, write_jsonl)
from glassroom.data.staging import (  # noqa: F401  (re-exported: readers import them from here)
    COMMAND, FORMAT, FORMAT_RE, check_out, check_parent, check_sources, clear_stale,
    build_lock, dataset_format, require_dataset,
)
from glassroom.data.tokenizer import EOS_TOKEN, eos_id, load_tokenizer, save_tokenizer, token_dtype
from glassroom.errors import GlassroomError
from glassroom.folders import swap_into_place, write_owned

TOKENIZE_BATCH_BYTES = 4 * BATCH_BYTES


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


def _extract_to_file(src, domain: str, path: Path) -> SourceReport:
    """Run one source's extractor, writing its documents as JSONL; an executor task."""
    report = SourceReport(src.label)
    with open(path, "w", encoding="utf-8") as fh:
        for doc in iter_source(src, domain, report):
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return report


def build_dataset(recipe: Recipe, out: str | Path, *, force: bool = False, workers: int | None = None,
                  recipe_file: str | None = None, log: TextIO | None = None, progress_interval: float = 5.0,
                  ray: str | None = None) -> dict:
    """Build the dataset of `recipe` into folder `out` (on Ray at `ray`: `local` or an address);
    returns the manifest."""
    log = log if log is not None else sys.stderr
    try:
        out = Path(out).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise GlassroomError(f"{out}: cannot be resolved ({exc}); choose another --out") from None
    if len(os.fsencode(f".{out.name}.building-{2**32}")) > 255:
        raise GlassroomError(f"{out.name[:40]}...: the --out folder name is too long ({len(os.fsencode(out.name))} bytes); "
                             "choose a name under 220 bytes")
    try:
        check_parent(out)
        check_out(out, force)  # early, before sources are read; again under the lock
    except OSError as exc:
        raise GlassroomError(f"{out}: cannot be checked as --out ({exc.strerror}); choose another --out") from None
    check_sources(recipe, out)
    if recipe.decontaminate.enabled and recipe.task == "pretrain":  # before hours of extraction, not after
        for i, f in enumerate(recipe.decontaminate.files):
            if not Path(f).expanduser().exists():
                raise GlassroomError(f"decontaminate.files[{i}]: {f}: no such file or folder; give evaluation text "
                                     "(.txt, .jsonl, .json or a folder of them) or remove it from the recipe")
    if recipe.tokenizer.path:
        base_tok = load_tokenizer(recipe.tokenizer.path)  # a bad tokenizer.json is refused before any text is read
        if recipe.task != "pretrain":  # and one the chat template cannot use (never changed on disk)
            try:
                ChatTemplate.for_tokenizer(base_tok)
            except GlassroomError as exc:
                raise GlassroomError(f"tokenizer {recipe.tokenizer.path}: {exc}") from None
    with build_lock(out):
        clear_stale(out, log)
        check_out(out, force)
        with make_executor(workers, ray) as ex:  # Ray missing or unreachable: an error before DIR is touched
            tmp = out.parent / f".{out.name}.building-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                tmp.mkdir()
            except OSError as exc:
                raise GlassroomError(f"{out.parent}: cannot create the build folder ({exc.strerror}); "
                                     "choose an --out in a folder you can write") from None
            try:
                manifest = _build(recipe, tmp, ex, recipe_file, log, progress_interval)
                write_owned(tmp, COMMAND)   # last: every file of the build; --force later replaces only these
                check_out(out, force)   # again just before the swap: nothing put in DIR since is ever deleted
                swap_into_place(tmp, out)
            except OSError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
                    raise GlassroomError(f"{out}: the build could not write ({exc.strerror}: {exc.filename}); "
                                         "nothing was replaced") from None
                raise
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    return manifest


class _Timer:
    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.stages: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.stages[name] = round(now - self.last, 2)
        self.last = now


def _build(recipe: Recipe, tmp: Path, ex: Executor, recipe_file: str | None, log: TextIO, interval: float) -> dict:
    timer = _Timer()
    given = recipe
    chat = recipe.task != "pretrain"
    if chat:  # conversations are not dropped for being short; dedup is exact only; no decontamination nor quality
        recipe = dataclasses.replace(
            recipe, clean=dataclasses.replace(recipe.clean, min_bytes=1),
            dedup=dataclasses.replace(recipe.dedup, fuzzy=False),
            quality=dataclasses.replace(recipe.quality, enabled=False),
            decontaminate=dataclasses.replace(recipe.decontaminate, enabled=False))

    stats = Stats()
    staging = tmp / "staging"
    staging.mkdir()
    corpus = Corpus(staging / "docs.jsonl")
    dd = Deduplicator(recipe.dedup)
    reports: dict[str, list[SourceReport]] = {}
    score: list[float] = []  # per build index: split score, sample key, forced split
    sample_key: list[float] = []
    forced: list[str | None] = []
    caps = [s.max_bytes for d in recipe.domains.values() for s in d.sources]
    progress = Progress("clean", total=sum(caps) if all(caps) else None, interval=interval, stream=log)

    # 1. Extract (every source at once, on the executor) and clean (in recipe order, ordered batches).
    extracted = {(domain, i): ex.submit(_extract_to_file, src, domain, staging / f"raw-{domain}-{i}.jsonl")
                 for domain, dcfg in recipe.domains.items() for i, src in enumerate(dcfg.sources)}
    for domain, dcfg in recipe.domains.items():
        reports[domain] = [SourceReport(src.label) for src in dcfg.sources]

        def docs(domain=domain, dcfg=dcfg):
            for i in range(len(dcfg.sources)):
                path = staging / f"raw-{domain}-{i}.jsonl"
                reports[domain][i] = extracted[domain, i].get()
                _check_not_empty(reports[domain][i], domain, i)
                with open(path, encoding="utf-8") as fh:
                    for line in fh:
                        yield json.loads(line)
                path.unlink()

        tasks = ((batch, recipe.clean, recipe.dedup) for batch in _batches(docs()))
        for part in ex.map(cleaning.clean_batch, tasks):
            for item in part:
                progress.update(item.raw_bytes, note=domain)
                if not cleaning.record_filter(stats, item):
                    continue
                doc = item.doc
                row = {"id": doc["id"], "source": doc["source"], "text": doc["text"], "bytes": item.nbytes}
                row.update({k: doc[k] for k in ("chat", "split") if k in doc})
                i = corpus.append(row, domain)
                dd.add(i, item.digest, item.signature)
                score.append(cleaning.split_score(doc["id"], recipe.split.seed))
                sample_key.append(cleaning.split_score(doc["id"], recipe.split.seed + 1_000_003))
                forced.append(doc.get("split"))
    corpus.close_writing()
    progress.finish(f"{len(score)} documents passed the filters")
    _report_skipped(reports, stats, log)
    timer.lap("extract_clean")

    # 2. Dedup: one global pass (exact, then MinHash LSH candidates verified, clusters, smallest index kept).
    result = dd.finish(corpus.texts_of)
    kept_rows: dict[str, list] = {d: [] for d in recipe.domains}
    kept_index: dict[str, list[int]] = {d: [] for d in recipe.domains}
    for i in range(len(score)):
        domain, nbytes = corpus.domain[i], corpus.nbytes[i]
        decision = result.decision(i)
        stats.record_in("exact_dedup", domain, nbytes)
        if decision is not None and decision[0] == "exact_duplicate":
            stats.record_removed("exact_dedup", domain, "exact_duplicate", nbytes)
            continue
        stats.record_out("exact_dedup", domain, nbytes)
        stats.record_in("fuzzy_dedup", domain, nbytes)
        if decision is not None:
            stats.record_removed("fuzzy_dedup", domain, "near_duplicate", nbytes)
            continue
        stats.record_out("fuzzy_dedup", domain, nbytes)
        kept_rows[domain].append((score[i], sample_key[i], nbytes, forced[i]))
        kept_index[domain].append(i)
    dups = write_jsonl(tmp / "removed" / "duplicates.jsonl",
                       result.example_records(corpus.doc_info, corpus.texts_of, recipe.dedup.examples))
    dedup_entry = {**dd.manifest_entry(), "examples_file": "removed/duplicates.jsonl" if dups else None}
    print(f"dedup: {len(result.clusters)} duplicate clusters, {result.removed()} documents removed", file=log)
    timer.lap("dedup")

    # 3. Split by the hash of the id; 4. decontaminate train against the evaluation text.
    cutoffs = _split(recipe, kept_rows, stats)
    split_of: dict[int, str] = {}
    for domain, indices in kept_index.items():
        for i in indices:
            split_of[i] = forced[i] or ("validation" if score[i] < cutoffs[domain] else "train")
    train = [i for i in sorted(split_of) if split_of[i] == "train"]
    validation = [i for i in sorted(split_of) if split_of[i] == "validation"]
    decontam_entry, removed, flags = decontaminate(recipe, corpus, train, validation, ex, tmp, log)
    for i in sorted(split_of):
        d, n = corpus.domain[i], corpus.nbytes[i]
        stats.record_in("decontaminate", d, n)
        if i in removed:
            stats.record_removed("decontaminate", d, "contaminated", n)
            del split_of[i]
        else:
            stats.record_out("decontaminate", d, n)
    for domain in recipe.domains:
        if not any(split_of.get(i) == "train" for i in kept_index[domain]):
            raise GlassroomError(f"domain {domain}: every train document shares {recipe.decontaminate.ngram}-word "
                                 "n-grams with evaluation text; set decontaminate.action: flag or check decontaminate.files")
    train = [i for i in train if i not in removed]
    kept = sorted(split_of)
    timer.lap("decontaminate")

    # 5. Quality: a classifier trained on a sample of train documents scores every kept document.
    quality_entry, qscore, bucket = quality_scores(recipe, corpus, train, kept, dict(enumerate(sample_key)),
                                                   ex, tmp, log)
    for i in kept:
        d, n = corpus.domain[i], corpus.nbytes[i]
        stats.passthrough("quality", d, n)
        if quality_entry is not None:
            counts = stats.entry("quality", d).setdefault("buckets", [0] * recipe.quality.buckets)
            counts[bucket[i]] += 1
    timer.lap("quality")

    # 6. Tokenizer: trained on a domain-balanced sample of train documents, or loaded; the fast encoder checked.
    tok_info, sample = _tokenizer(recipe, tmp, corpus, train, sample_key, log)
    tok = load_tokenizer(tmp / "tokenizer.json")
    template = None
    if chat:  # the template tokens are appended when missing (ids after every existing id)
        before, before_json = tok.get_vocab_size(), tok.to_str()
        try:
            template = ChatTemplate.for_tokenizer(tok)
        except GlassroomError as exc:
            raise GlassroomError(f"tokenizer {recipe.tokenizer.path or '(trained)'}: {exc}") from None
        if tok.to_str() != before_json:  # tokens appended, or template tokens made special
            save_tokenizer(tok, tmp / "tokenizer.json")
            tok_info["added_tokens"] = {t: tok.token_to_id(t) for t in ("<|im_start|>", "<|im_end|>")
                                        if tok.token_to_id(t) >= before}
            if "sha256" in tok_info:
                tok_info["sha256"] = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
    else:
        tok_info["encoder"] = _encoder(tok, corpus, sample, log)
    vocab_size = tok.get_vocab_size()
    dtype = token_dtype(vocab_size)
    timer.lap("tokenizer")

    # 7. Encode into shards: per domain and split, documents ordered by quality bucket (q0 first), then index.
    spec = (tok_info.get("encoder", {}).get("kind", "tokenizers"), tok.to_str())
    progress = Progress("tokenize", total=sum(corpus.nbytes[i] for i in kept), interval=interval, stream=log)
    domains = {}
    for domain, dcfg in recipe.domains.items():
        source_index = {src.label: i for i, src in enumerate(dcfg.sources)}
        chat_counts: dict[str, dict] = {}
        entry = {"sources": [_source_entry(src, rep) for src, rep in zip(dcfg.sources, reports[domain])]}
        for split in SPLITS:
            writer = ShardWriter(tmp, domain, split, dtype, with_mask=chat)
            order = sorted((bucket.get(i, -1), i) for i in kept_index[domain] if split_of.get(i) == split)
            order = [i for _, i in order]
            batches = list(corpus.batches(order, TOKENIZE_BATCH_BYTES))
            if chat:
                for b in batches:
                    part = corpus.rows(b)
                    ids, offsets, mask, written, counts = encode_chat(template, part, dtype)
                    writer.add(ids, offsets, written, source_index, mask)
                    total_counts = chat_counts.setdefault(split, dict.fromkeys(counts, 0))
                    for k, v in counts.items():
                        total_counts[k] += v
                    progress.update(sum(corpus.nbytes[i] for i in b), note=domain)
            else:
                encoded = ex.map(fast_tokens.encode_batch, ((spec, corpus.texts_of(b), dtype.name) for b in batches))
                for b, (ids, offsets) in zip(batches, encoded):
                    rows = [{"id": r["id"], "source": r["source"], "bytes": r["bytes"], "flags": flags.get(i, 0),
                             **({"quality": qscore[i], "bucket": bucket[i]} if i in bucket else {})}
                            for i, r in zip(b, corpus.meta(b))]
                    writer.add(ids, offsets, rows, source_index)
                    progress.update(sum(corpus.nbytes[i] for i in b), note=domain)
            info = writer.close()
            info["bytes_per_token"] = round(info["bytes"] / info["tokens"], 4) if info["tokens"] else None
            info.update({f"{k}_file": str(p.relative_to(tmp)) for k, p in writer.paths.items()})
            if quality_entry is not None:
                info["cells"] = _cells(writer, recipe.quality.buckets)
            entry[split] = info
        if chat:
            entry["chat"] = _chat_entry(chat_counts)
            stats.entry("tokenize", domain)["chat"] = entry["chat"]
        domains[domain] = entry
        t = stats.entry("tokenize", domain)
        for split in SPLITS:
            t["docs_in"] += entry[split]["documents"]
            t["bytes_in"] += entry[split]["bytes"]
            t[f"{split}_tokens"] = entry[split]["tokens"]
        t["docs_out"], t["bytes_out"] = t["docs_in"], t["bytes_in"]
    progress.finish()
    corpus.close()
    shutil.rmtree(staging)
    timer.lap("tokenize")

    manifest = {
        "format": FORMAT,
        "name": recipe.name,
        "dtype": dtype.name,
        "tokenizer": {**tok_info, "file": "tokenizer.json", "vocab_size": vocab_size,
                      "eos_id": eos_id(tok), "eos_token": EOS_TOKEN},
        **({"task": recipe.task, "chat_template": template.to_dict()} if chat else {}),
        "domains": domains,
        "totals": {split: {k: sum(d[split][k] for d in domains.values()) for k in ("documents", "tokens", "bytes")} for split in SPLITS},
        "dedup": dedup_entry,
        "decontamination": decontam_entry,
        "quality": quality_entry,
        "recipe_file": recipe_file,
        "recipe_hash": recipe_hash(given),
        "recipe": recipe_dict(given),
    }
    write_json(tmp / "stats.json", {"stages": list(stats.data), **stats.to_json()})
    write_json(tmp / "manifest.json", manifest)
    write_json(tmp / "build.json", {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    "seconds": round(time.monotonic() - timer.started, 1), "executor": ex.name,
                                    "workers": ex.workers, "stages": timer.stages})
    return manifest


def _cells(writer: ShardWriter, buckets: int) -> list[dict]:
    """Per quality bucket, the contiguous range of documents and tokens it fills in the shard."""
    b = np.asarray(writer.doc_bucket, dtype=np.int64)
    offsets, nbytes = writer.doc_offsets, np.asarray(writer.doc_bytes, dtype=np.int64)
    out = []
    for q in range(buckets):
        first, end = int(np.searchsorted(b, q, "left")), int(np.searchsorted(b, q, "right"))
        out.append({"bucket": q, "documents": end - first, "tokens": int(offsets[end] - offsets[first]),
                    "bytes": int(nbytes[first:end].sum()), "doc_range": [first, end],
                    "token_range": [int(offsets[first]), int(offsets[end])]})
    return out


def _check_not_empty(report: SourceReport, domain: str, i: int) -> None:
    """A source that gave no text at all is a mistake in the recipe (an empty folder, a file of
    malformed lines, the wrong text_field): one line naming it, before the tokenizer runs."""
    if report.bytes > 0:
        return
    skipped = ", ".join(f"{_SKIPPED.get(k, k.replace('_', ' '))} {n} (first at {report.examples[k]})"
                        for k, n in sorted(report.skipped.items()))
    raise GlassroomError(f"domains.{domain}.sources[{i}] ({report.label}): gave no text ({report.docs} documents, "
                         f"0 bytes{'; skipped: ' + skipped if skipped else ''}); check its path and fields in the recipe")


def _chat_entry(counts: dict[str, dict]) -> dict:
    """Conversation statistics of one domain: per split and in all, with the assistant token share."""
    out = {}
    for split in SPLITS:
        c = dict(counts.get(split) or {"conversations": 0, "pairs": 0, "turns": 0, "tokens": 0, "assistant_tokens": 0})
        c["assistant_share"] = round(c["assistant_tokens"] / c["tokens"], 4) if c["tokens"] else None
        out[split] = c
    return out


_SKIPPED = {
    "malformed_jsonl": "malformed JSONL lines",
    "missing_text_field": "records without the text field",
    "unreadable_file": "unreadable files",
    "unrenderable_man_page": "man pages that did not render",
    "no_assistant_turn": "conversations without an assistant message",
    "last_not_assistant": "conversations whose last message is not the assistant's",
    "no_assistant_answer": "preference pairs whose answer does not end with an assistant message",
    "identical_pair": "preference pairs whose chosen and rejected answers are the same",
}
assert set(SKIP_REASONS) <= set(_SKIPPED)


def _report_skipped(reports: dict[str, list[SourceReport]], stats: Stats, log: TextIO) -> None:
    for domain, reps in reports.items():
        for rep in reps:
            for reason, n in rep.skipped.items():
                what = _SKIPPED.get(reason, reason.replace("_", " ") + " items")
                print(f"warning: source {rep.label} ({domain}): skipped {n} {what} (first at {rep.examples[reason]})", file=log)
                skipped = stats.entry("extract", domain).setdefault("skipped", {})
                skipped[reason] = skipped.get(reason, 0) + n


def _split(recipe: Recipe, kept: dict, stats: Stats) -> dict[str, float]:
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
        free = [(r[0], r[2]) for r in rows if not r[3]]
        cutoff = cleaning.validation_cutoff(free, recipe.split.validation_fraction) if free else 0.0
        cutoffs[domain] = cutoff
        splits = [r[3] or ("validation" if r[0] < cutoff else "train") for r in rows]
        for need in SPLITS:
            if need not in splits:
                raise GlassroomError(f"domain {domain}: no documents in {need} ({len(rows)} kept, their sources set "
                                     f"split:); give one source split: {need} or leave split: out to hash-split")
        entry = stats.entry("split", domain)
        for (_score, _, nbytes, _forced), split in zip(rows, splits):
            entry["docs_in"] += 1
            entry["bytes_in"] += nbytes
            entry["docs_out"] += 1
            entry["bytes_out"] += nbytes
            entry[f"{split}_docs"] = entry.get(f"{split}_docs", 0) + 1
            entry[f"{split}_bytes"] = entry.get(f"{split}_bytes", 0) + nbytes
    return cutoffs



def _source_entry(src, report: SourceReport) -> dict:
    return {"name": src.label, "kind": src.kind, "documents": report.docs, "bytes": report.bytes,
            "skipped": dict(report.skipped)}
