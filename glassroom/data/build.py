"""Orchestrates a data build: recipe -> sources -> clean -> tokenizer -> shards, manifest and stats.

Everything is built in a temporary folder beside DIR (`.DIR.building-<pid>`) and renamed into place
at the end, so a build that fails (a missing source, a domain left empty, Ctrl-C) never damages an
existing dataset. Cleaned documents are staged as JSONL in that folder, so memory holds one batch
of text at a time (plus the dedup hashes and the MinHash LSH index).

Safety rules for DIR (docs/data-build.md): a build holds an exclusive lock (`.DIR.lock`, flock)
for its whole run, so a second build to the same DIR is refused; under that lock, folders left
beside DIR by builds that were killed are removed (or, for a kill mid-swap, put back); `--force`
replaces only a folder whose manifest.json says it is a glassroom dataset; DIR and the source
folders may not contain one another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from glassroom.data import clean as cleaning
from glassroom.data.chat import ChatTemplate
from glassroom.data.conversation_sources import SKIP_REASONS, encode_chat, tokenizer_texts
from glassroom.data.progress import Progress
from glassroom.data.recipe import Recipe, recipe_dict, recipe_hash
from glassroom.data.shards import SPLITS, ShardWriter, write_json
from glassroom.data.sources import SourceReport, check_source, iter_source, source_roots
from glassroom.data.tokenizer import (
    EOS_TOKEN, copy_tokenizer, encode_documents, eos_id, load_tokenizer,
    save_tokenizer, token_dtype, train_tokenizer,
)
from glassroom.errors import GlassroomError
from glassroom.folders import swap_into_place

FORMAT = "glassroom-dataset/1"  # manifest.json's marker; `glassroom-dataset/<N>` for later versions
FORMAT_RE = re.compile(r"glassroom-dataset/[0-9]+")
BATCH_BYTES = 1_000_000  # text per cleaning task sent to a worker
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_LOCK_FD: int | None = None  # the build lock's descriptor, closed in forked workers


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


def _close_lock_in_worker() -> None:
    """Pool initializer: a forked worker drops its copy of the lock descriptor, so workers orphaned
    by a killed build do not keep DIR locked (the parent's copy still holds the lock)."""
    if _LOCK_FD is not None:
        with contextlib.suppress(OSError):
            os.close(_LOCK_FD)


def _pool(workers: int):
    """A process pool (fork on Linux: workers inherit imported modules), or None for one worker."""
    if workers <= 1:
        return None
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # the workers never use tokenizers
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn").Pool(workers, _close_lock_in_worker)


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


# What a build (and `data atlas`) writes at the top of DIR: --force replaces a dataset holding nothing else.
DATASET_ENTRIES = frozenset({"manifest.json", "stats.json", "tokenizer.json", "shards", "atlas"})


def dataset_format(folder: str | Path) -> str | None:
    """The format marker of `folder`'s manifest.json (`glassroom-dataset/1`) when the folder is a
    glassroom dataset; None for anything else (no manifest, a symlinked one, another program's)."""
    manifest = Path(folder) / "manifest.json"
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    fmt = data.get("format") if isinstance(data, dict) else None
    if isinstance(fmt, str) and FORMAT_RE.fullmatch(fmt) and isinstance(data.get("domains"), dict):
        return fmt
    return None


def require_dataset(folder: str | Path) -> Path:
    """`folder` as a Path when it is a built glassroom dataset; a one-line GlassroomError otherwise.
    For commands that read a dataset (mixture, atlas) before they touch it."""
    path = Path(folder)
    try:
        if not path.exists():
            raise GlassroomError(f"{folder}: no such folder; give a dataset built with glassroom data build")
        if not path.is_dir():
            raise GlassroomError(f"{folder}: is a file, not a dataset folder; give a folder built with glassroom data build")
        if not (path / "manifest.json").exists():
            raise GlassroomError(f"{folder}: not a built dataset (no manifest.json); run glassroom data build first")
    except OSError as exc:
        raise GlassroomError(f"{str(folder)[:80]}: cannot be read as a dataset ({exc.strerror}); give a folder built "
                             "with glassroom data build") from None
    if dataset_format(path) is None:
        raise GlassroomError(f"{folder}: manifest.json is not a glassroom dataset manifest (no \"format\": "
                             f"\"{FORMAT}\"); give a folder built with glassroom data build")
    return path


def _check_parent(out: Path) -> None:
    if not out.name:
        raise GlassroomError(f"{out}: --out cannot be the root folder; choose a new folder")
    if not out.parent.exists():
        raise GlassroomError(f"{out.parent}: no such folder for --out")
    if not out.parent.is_dir():
        raise GlassroomError(f"{out.parent}: is a file, not a folder for --out")


def _check_out(out: Path, force: bool) -> None:
    """DIR may be new, an empty folder, or (with --force) a glassroom dataset; nothing else."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() and not out.exists():
        raise GlassroomError(f"{out}: is a broken symbolic link; remove it or choose another --out")
    if not out.is_dir():
        raise GlassroomError(f"{out}: exists and is not a folder; choose another --out")
    try:
        empty = not any(out.iterdir())
    except OSError as exc:
        raise GlassroomError(f"{out}: cannot be read ({exc.strerror}); choose another --out") from None
    if empty:
        return
    if dataset_format(out) is None:
        raise GlassroomError(f"{out}: holds files and is not a glassroom dataset (no manifest.json with "
                             f"\"format\": \"{FORMAT}\"); not replacing it, even with --force: choose another --out")
    if not force:
        raise GlassroomError(f"{out}: already exists; pass --force to replace it or choose another --out")
    from glassroom.downstream.tasks import written_here  # DIR/tasks of `data tasks`: derived from the dataset

    foreign = sorted(p.name for p in out.iterdir()
                     if p.name not in DATASET_ENTRIES and not (p.name == "tasks" and written_here(p)))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise GlassroomError(f"{out}: is a glassroom dataset but also holds {shown}, which a build does not "
                             "write; not replacing it, even with --force: move them out or choose another --out")


def _check_sources(recipe: Recipe, out: Path) -> None:
    """Every source is there to read, and none reads from inside DIR nor DIR from inside a source
    folder (a rebuild would read its own output, and --force would delete the source)."""
    for domain, dcfg in recipe.domains.items():
        for i, src in enumerate(dcfg.sources):
            where = f"domains.{domain}.sources[{i}] ({src.label})"
            for root, recursive in source_roots(src):  # first: a source at / would take long to list
                try:
                    root = root.resolve()
                except (OSError, RuntimeError):
                    continue
                if root.is_relative_to(out):
                    raise GlassroomError(f"{where}: reads {root}, which is inside --out {out}; "
                                         "choose an --out outside the sources")
                if recursive and out.is_relative_to(root):
                    raise GlassroomError(f"{where}: --out {out} is inside the source folder {root}, which the "
                                         "source reads; choose an --out outside the sources")
            check_source(src, where)


def _read_lock_pid(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
    return "unknown"


@contextlib.contextmanager
def build_lock(out: Path):
    """Hold `.DIR.lock` (fcntl.flock, exclusive) beside DIR for the whole build; a GlassroomError
    naming the holder's pid when another build holds it. The file is removed on release; a holder
    re-checks after locking that the path still names the file it locked, so removal cannot let
    two builds in."""
    global _LOCK_FD
    path = out.parent / f".{out.name}.lock"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise GlassroomError(f"{path}: cannot create or open the build lock ({exc.strerror}); choose an --out "
                                 f"in a folder you can write, or remove {path.name} if it is not a lock file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_lock_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise GlassroomError(f"another build (pid {holder}) is writing {out}; wait for it to finish "
                                     "or choose another --out") from None
            raise GlassroomError(f"{path}: cannot lock ({exc.strerror}); choose an --out on a local disk") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed it on release: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _LOCK_FD = fd
        yield
    finally:
        _LOCK_FD = None
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _clear_stale(out: Path, log: TextIO) -> None:
    """Under the lock, remove what killed builds left beside DIR: `.DIR.building-<pid>` (a build
    killed before it finished) and `.DIR.old-<pid>` (a previous dataset whose removal was cut
    short). A build killed between its two renames leaves DIR missing and `.DIR.old-<pid>` holding
    the previous dataset: that one is put back as DIR. No live build can own these folders: every
    build to DIR holds the lock we now hold."""
    pattern = re.compile(re.escape(f".{out.name}.") + r"(building|old)-([0-9]+)")
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or int(m[2]) == os.getpid() or entry.is_symlink() or not entry.is_dir():
            continue
        if m[1] == "old" and not out.exists() and not out.is_symlink():
            os.rename(entry, out)
            print(f"note: put back {out}: a build (pid {m[2]}) was killed while replacing it", file=log)
            continue
        shutil.rmtree(entry, ignore_errors=True)
        print(f"note: removed {entry.name}, left by a build (pid {m[2]}) that did not finish", file=log)


def build_dataset(recipe: Recipe, out: str | Path, *, force: bool = False, workers: int | None = None,
                  recipe_file: str | None = None, log: TextIO | None = None, progress_interval: float = 5.0) -> dict:
    """Build the dataset of `recipe` into folder `out`; returns the manifest."""
    log = log if log is not None else sys.stderr
    try:
        out = Path(out).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise GlassroomError(f"{out}: cannot be resolved ({exc}); choose another --out") from None
    if len(os.fsencode(f".{out.name}.building-{2**32}")) > 255:
        raise GlassroomError(f"{out.name[:40]}...: the --out folder name is too long ({len(os.fsencode(out.name))} bytes); "
                             "choose a name under 220 bytes")
    try:
        _check_parent(out)
        _check_out(out, force)  # early, before sources are read; again under the lock
    except OSError as exc:
        raise GlassroomError(f"{out}: cannot be checked as --out ({exc.strerror}); choose another --out") from None
    _check_sources(recipe, out)
    if recipe.tokenizer.path:
        base_tok = load_tokenizer(recipe.tokenizer.path)  # a bad tokenizer.json is refused before any text is read
        if recipe.task != "pretrain":  # and one the chat template cannot use (never changed on disk)
            try:
                ChatTemplate.for_tokenizer(base_tok)
            except GlassroomError as exc:
                raise GlassroomError(f"tokenizer {recipe.tokenizer.path}: {exc}") from None
    workers = max(1, workers or os.cpu_count() or 1)
    with build_lock(out):
        _clear_stale(out, log)
        _check_out(out, force)
        tmp = out.parent / f".{out.name}.building-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
        except OSError as exc:
            raise GlassroomError(f"{out.parent}: cannot create the build folder ({exc.strerror}); "
                                 "choose an --out in a folder you can write") from None
        try:
            manifest = _build(recipe, tmp, workers, recipe_file, log, progress_interval)
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


def _build(recipe: Recipe, tmp: Path, workers: int, recipe_file: str | None, log: TextIO, interval: float) -> dict:
    started = time.monotonic()
    given = recipe
    chat = recipe.task != "pretrain"
    if chat:  # conversations are not dropped for being short, and dedup is exact only (docs/data-build.md)
        recipe = dataclasses.replace(recipe, clean=dataclasses.replace(recipe.clean, min_bytes=1),
                                     dedup=dataclasses.replace(recipe.dedup, fuzzy=False))
    stats = cleaning.Stats()
    staging = tmp / "staging"
    staging.mkdir()

    # 1. Extract and clean, in recipe order (dedup keeps the first copy it sees).
    cleaner = cleaning.Cleaner(recipe.clean, recipe.dedup, recipe.split, stats)
    reports: dict[str, list[SourceReport]] = {}
    kept: dict[str, list[tuple[float, float, int, str | None]]] = {}  # domain -> (split score, sample key, bytes, forced split)
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
                    _check_not_empty(reports[domain][i], domain, i)
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
                    kept[domain].append((score, sample_key, item.nbytes, doc.get("split")))
                    row = {"id": doc["id"], "source": doc["source"], "text": doc["text"], "bytes": item.nbytes}
                    row.update({k: doc[k] for k in ("chat", "split") if k in doc})
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    progress.finish(f"{sum(len(v) for v in kept.values())} documents kept")
    _report_skipped(reports, stats, log)
    cutoffs = _split(recipe, kept, stats)

    # 2. Tokenizer: trained on a domain-balanced sample of train documents, or loaded.
    tok_info = _tokenizer(recipe, tmp, staging, kept, cutoffs, log)
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
    vocab_size = tok.get_vocab_size()
    dtype = token_dtype(vocab_size)

    # 3. Encode into shards.
    total = sum(row[2] for rows in kept.values() for row in rows)
    progress = Progress("tokenize", total=total, interval=interval, stream=log)
    domains = {}
    for domain, dcfg in recipe.domains.items():
        source_index = {src.label: i for i, src in enumerate(dcfg.sources)}
        writers = {split: ShardWriter(tmp, domain, split, dtype, with_mask=chat) for split in SPLITS}
        chat_counts: dict[str, dict] = {}
        with open(staging / f"{domain}.jsonl", encoding="utf-8") as fh:
            rows = (json.loads(line) for line in fh)
            for batch in _batches(rows, 4 * BATCH_BYTES):
                for split in SPLITS:
                    part = [d for d in batch if _is_validation(d, recipe, cutoffs[domain]) == (split == "validation")]
                    if part and chat:
                        ids, offsets, mask, written, counts = encode_chat(template, part, dtype)
                        writers[split].add(ids, offsets, written, source_index, mask)
                        total_counts = chat_counts.setdefault(split, dict.fromkeys(counts, 0))
                        for k, v in counts.items():
                            total_counts[k] += v
                    elif part:
                        ids, offsets = encode_documents(tok, [d["text"] for d in part], dtype)
                        writers[split].add(ids, offsets, part, source_index)
                progress.update(sum(d["bytes"] for d in batch), note=domain)
        entry = {"sources": [_source_entry(src, rep) for src, rep in zip(dcfg.sources, reports[domain])]}
        for split, writer in writers.items():
            info = writer.close()
            info["bytes_per_token"] = round(info["bytes"] / info["tokens"], 4) if info["tokens"] else None
            info.update({f"{k}_file": str(p.relative_to(tmp)) for k, p in writer.paths.items()})
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
    shutil.rmtree(staging)

    manifest = {
        "format": FORMAT,
        "name": recipe.name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(time.monotonic() - started, 1),
        "dtype": dtype.name,
        "tokenizer": {**tok_info, "file": "tokenizer.json", "vocab_size": vocab_size,
                      "eos_id": eos_id(tok), "eos_token": EOS_TOKEN},
        **({"task": recipe.task, "chat_template": template.to_dict()} if chat else {}),
        "domains": domains,
        "totals": {split: {k: sum(d[split][k] for d in domains.values()) for k in ("documents", "tokens", "bytes")} for split in SPLITS},
        "recipe_file": recipe_file,
        "recipe_hash": recipe_hash(given),
        "recipe": recipe_dict(given),
    }
    write_json(tmp / "stats.json", {"stages": list(cleaning.STAGES), **stats.to_json()})
    write_json(tmp / "manifest.json", manifest)
    return manifest


def _check_not_empty(report: SourceReport, domain: str, i: int) -> None:
    """A source that gave no text at all is a mistake in the recipe (an empty folder, a file of
    malformed lines, the wrong text_field): one line naming it, before the tokenizer runs."""
    if report.bytes > 0:
        return
    skipped = ", ".join(f"{_SKIPPED.get(k, k.replace('_', ' '))} {n} (first at {report.examples[k]})"
                        for k, n in sorted(report.skipped.items()))
    raise GlassroomError(f"domains.{domain}.sources[{i}] ({report.label}): gave no text ({report.docs} documents, "
                         f"0 bytes{'; skipped: ' + skipped if skipped else ''}); check its path and fields in the recipe")


def _is_validation(doc: dict, recipe: Recipe, cutoff: float) -> bool:
    """A source's `split:` decides; otherwise the hash of the document id against the domain's cutoff."""
    if doc.get("split"):
        return doc["split"] == "validation"
    return cleaning.split_score(doc["id"], recipe.split.seed) < cutoff


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
        free = [(r[0], r[2]) for r in rows if not r[3]]
        cutoff = cleaning.validation_cutoff(free, recipe.split.validation_fraction) if free else 0.0
        cutoffs[domain] = cutoff
        splits = [r[3] or ("validation" if r[0] < cutoff else "train") for r in rows]
        for need in SPLITS:
            if need not in splits:
                raise GlassroomError(f"domain {domain}: no documents in {need} ({len(rows)} kept, their sources set "
                                     f"split:); give one source split: {need} or leave split: out to hash-split")
        entry = stats.entry("split", domain)
        for (score, _, nbytes, _forced), split in zip(rows, splits):
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
        order = sorted((row[1], i) for i, row in enumerate(rows)
                       if (row[3] or ("validation" if row[0] < cutoffs[domain] else "train")) == "train")
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
    return info


def _source_entry(src, report: SourceReport) -> dict:
    return {"name": src.label, "kind": src.kind, "documents": report.docs, "bytes": report.bytes,
            "skipped": dict(report.skipped)}
