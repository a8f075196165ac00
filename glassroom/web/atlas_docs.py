"""The document browser behind the data atlas: read the documents of a cluster, a quality bucket,
a domain x quality cell, a duplicate cluster or a decontaminated document, paged and searchable.

Collections of a dataset (names as the API takes them):
  all                   every document the atlas sampled (atlas.json points), in point order
  cluster:<j>           the sampled documents of topic cluster j
  quality:<q>           the sampled documents in quality bucket q (atlas.json "quality" present)
  cell:<domain>:<q>     the sampled documents of that domain in bucket q
  duplicates            DIR/removed/duplicates.jsonl: one entry per duplicate cluster, the kept
                        document and the removed ones with their Jaccard
  contaminated          DIR/removed/contaminated.jsonl: documents removed or flagged for sharing
                        long n-grams with evaluation text, the leaked n-grams marked in the text
A sampled document's text is decoded from the dataset's shard with its tokenizer (`tokenizers`,
never torch): the whole document, cut at DOC_CHARS characters (the cut marked with "…").
Removed documents are read from the records the build kept (as many as the recipe's `examples`).

Safety, as the rest of the dashboard (glassroom.web.server): a dataset is named by its id from
the atlas list, never by a path; every file (atlas.json, manifest, shards, tokenizer, removed/*.jsonl)
is opened only when it resolves inside the served root; every string that leaves this module
(texts, ids, sources, domains, n-grams) goes through redact_text(pairs=False) first, and search
runs on the redacted text, so a secret in a document can neither be read nor found by searching for
it. Work per request is bounded: PAGE_SIZE documents decoded for a page; a search scans at most
SCAN_DOCS documents or SCAN_CHARS characters from `from=` on and says where it stopped, and the
page offers to search on from there. Bad input is a BrowseError (400/404/503) with one line.

Serving it: the live server's request parsing and per-dataset cache (`parse_request`, `Browser`)
and the published static copy (`publish_docs`) are glassroom/web/atlas_docs_serve.py's.
This module never imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

import numpy as np

from glassroom.data.mixture import Dataset
from glassroom.data.shards import shard_paths
from glassroom.data.tokenizer import load_tokenizer
from glassroom.errors import GlassroomError
from glassroom.observe.redact import redact_text
from glassroom.observe.runs import inside

PAGE_SIZE = 20
DOC_CHARS = 65_536            # a document's text is cut here (live)
SCAN_DOCS = 2_000             # documents one search request reads at most
SCAN_CHARS = 4_000_000        # characters one search request reads at most (redaction: ~2-4 MB/s)
MAX_ATLAS_BYTES = 256 * 1024 * 1024
MAX_REMOVED_BYTES = 4 * 1024 * 1024 * 1024   # removed/*.jsonl bigger than this is not read
MAX_RECORD_BYTES = 16 * 1024 * 1024          # one record (line) bigger than this is shown as unreadable
MAX_RECORDS = 100_000         # records of a removed/*.jsonl listed at most
MAX_MEMBERS = 50              # removed documents shown per duplicate cluster
MAX_LIST = 20                 # n-grams and evaluation sources shown per contaminated document
MAX_MARKS = 200               # highlighted spans per document
MAX_CLUSTERS = 100_000        # an atlas.json claiming more clusters or quality buckets is damaged
MAX_BUCKETS = 100
TEXT_CACHE_BYTES = 48 * 1024 * 1024
CUT = "…"
SPLITS = ("train", "validation")   # glassroom.data.shards.SPLITS, without importing the data package here
REMOVED = {"duplicates": "removed/duplicates.jsonl", "contaminated": "removed/contaminated.jsonl"}
PAGE_RE = re.compile(r"[0-9]{1,9}")


class BrowseError(Exception):
    """A request the browser cannot answer: HTTP status and one line."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def shown_field(value: Any, limit: int = 1000) -> str:
    """A short string field (id, domain, source) as shown: str, cut, redacted."""
    return redact_text(str(value)[:limit], pairs=False)


def _cut_text(text: str, limit: int) -> tuple[str, bool]:
    """Redact first, then cut (a secret across the cut is never half shown); a cut is marked with …."""
    # Redaction reads 4,096 characters past the cut (every token shape is shorter; a private key
    # block running past it is redacted to the end of what is read).
    text = redact_text(text[: limit + 4096], pairs=False)
    if len(text) > limit:
        return text[:limit].rstrip() + CUT, True
    return text, False


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def utf16_marks(text: str, spans: list[tuple[int, int]]) -> list[list[int]]:
    """Character spans as [start, end] in UTF-16 code units (what JavaScript strings count)."""
    if text.isascii():
        return [[a, b] for a, b in spans]
    units = np.cumsum([0] + [2 if ord(c) > 0xFFFF else 1 for c in text])
    return [[int(units[a]), int(units[b])] for a, b in spans]


def ngram_spans(text: str, ngrams: list[str]) -> list[tuple[int, int]]:
    """Where the leaked n-grams (lowercased \\w+ words joined by spaces) occur in text, case and the
    characters between words aside; merged, at most MAX_MARKS."""
    spans = []
    for gram in ngrams:
        words = re.findall(r"\w+", gram.lower())
        if not words:
            continue
        pattern = re.compile(r"(?<!\w)" + r"\W+".join(re.escape(w) for w in words) + r"(?!\w)", re.IGNORECASE)
        for m in pattern.finditer(text):
            spans.append((m.start(), m.end()))
            if len(spans) >= 4 * MAX_MARKS:
                break
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged[:MAX_MARKS]


def doc_matches(doc: dict, q: str) -> bool:
    """The search rule (the same in atlas-docs.js): q, lowercased, inside a text or an id, lowercased."""
    if doc.get("kind") == "duplicates":
        return any(doc_matches(d, q) for d in [doc.get("kept") or {}, *doc.get("removed", [])])
    return q in (doc.get("text") or "").lower() or q in (doc.get("id") or "").lower()


# ---- reading records ---------------------------------------------------------------------------

def _clean_member(x: Any, limit: int) -> dict:
    x = x if isinstance(x, dict) else {}
    text, cut = _cut_text(x.get("text") if isinstance(x.get("text"), str) else "", limit)
    out = {"index": _int(x.get("index")), "id": shown_field(x.get("id", "")), "domain": shown_field(x.get("domain", "")),
           "source": shown_field(x.get("source", "")), "text": text, "cut": cut}
    if "reason" in x:
        out["reason"] = shown_field(x.get("reason"), 100)
    if "jaccard" in x:
        out["jaccard"] = _num(x.get("jaccard"))
    return out


def clean_record(kind: str, record: Any, n: int, limit: int = DOC_CHARS) -> dict:
    """One line of removed/<kind>.jsonl as the browser shows it: known fields only, typed, every
    string redacted, texts cut at `limit`."""
    if not isinstance(record, dict):
        return {"kind": kind, "n": n, "error": f"record {n + 1} is not a JSON object"}
    if kind == "duplicates":
        removed = record.get("removed") if isinstance(record.get("removed"), list) else []
        return {"kind": kind, "n": n, "cluster": _int(record.get("cluster")),
                "kept": _clean_member(record.get("kept"), limit),
                "removed": [_clean_member(x, limit) for x in removed[:MAX_MEMBERS]], "removed_total": len(removed)}
    out = _clean_member(record, limit)
    grams = record.get("ngrams") if isinstance(record.get("ngrams"), list) else []
    sources = record.get("eval_sources") if isinstance(record.get("eval_sources"), list) else []
    out.update(kind=kind, n=n, action=shown_field(record.get("action", ""), 40), matches=_int(record.get("matches")),
               eval_sources=[shown_field(s, 300) for s in sources[:MAX_LIST]],
               ngrams=[shown_field(g, 2000) for g in grams[:MAX_LIST]])
    out["marks"] = utf16_marks(out["text"], ngram_spans(out["text"], out["ngrams"]))
    return out


class RecordFile:
    """A JSON-lines file read by line number: an index of line starts is built once (per size and
    modification time), then one record is one seek and one read."""

    def __init__(self, path: Path):
        self.path = path
        st = path.stat()
        if st.st_size > MAX_REMOVED_BYTES:
            raise BrowseError(503, f"{path.name}: {st.st_size:,} bytes, more than the {MAX_REMOVED_BYTES:,} the browser reads")
        self.key = (st.st_size, st.st_mtime_ns)
        starts, ends, pos = [], [], 0
        with open(path, "rb") as fh:
            line_start = 0
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                for m in re.finditer(b"\n", chunk):
                    end = pos + m.start()
                    if end > line_start:
                        starts.append(line_start)
                        ends.append(end)
                    line_start = end + 1
                pos += len(chunk)
                if len(starts) >= MAX_RECORDS:   # a build keeps `examples` (1,000) records; more is not shown
                    del starts[MAX_RECORDS:], ends[MAX_RECORDS:]
                    line_start = pos
                    break
            if pos > line_start:
                starts.append(line_start)
                ends.append(pos)
        self.starts, self.ends = starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def record(self, i: int) -> Any:
        size = self.ends[i] - self.starts[i]
        if size > MAX_RECORD_BYTES:
            return None
        with open(self.path, "rb") as fh:
            fh.seek(self.starts[i])
            line = fh.read(size)
        try:
            return json.loads(line.decode("utf-8", errors="replace"))
        except ValueError:
            return None


# ---- one dataset ---------------------------------------------------------------------------------

def source_version(root: Path, folder: Path) -> tuple:
    """(size, modification time) of atlas.json, manifest.json and removed/*.jsonl (None when absent)."""
    out = []
    for rel in ("atlas/atlas.json", "manifest.json", *REMOVED.values()):
        path = inside(root, Path(folder) / rel)
        try:
            st = path.stat() if path is not None else None
        except OSError:
            st = None
        out.append((st.st_size, st.st_mtime_ns) if st else None)
    return tuple(out)


class DatasetDocs:
    """The collections of one dataset (its atlas points and removed records), with a small cache of
    decoded, redacted texts. Built per (atlas.json, manifest.json) version; thread-safe."""

    def __init__(self, root: Path, folder: Path, ds_id: str):
        self.root, self.folder, self.ds_id = Path(root), Path(folder), ds_id
        self._lock = threading.Lock()
        self._texts: OrderedDict[int, tuple[str, bool]] = OrderedDict()
        self._text_bytes = 0
        self._dataset = None
        self._tokenizer = None
        self._ids: dict[tuple[int, int], list[str]] = {}
        self._shards: dict[tuple[int, int], Any] = {}
        self._records: dict[str, RecordFile] = {}
        self.atlas_path = inside(root, self.folder / "atlas" / "atlas.json")
        self.points = None
        if self.atlas_path is not None and self.atlas_path.is_file():
            self._load_atlas(self.atlas_path)

    def version(self) -> tuple:
        """What, when it changes, makes this object stale."""
        return source_version(self.root, self.folder)

    def _bad_atlas(self, what: str) -> BrowseError:
        return BrowseError(503, f"dataset {shown_field(self.ds_id, 200)!r}: atlas/atlas.json {what}; "
                                f"rebuild it with glassroom data atlas {shown_field(self.ds_id, 200)}")

    def _load_atlas(self, path: Path) -> None:
        if path.stat().st_size > MAX_ATLAS_BYTES:
            raise self._bad_atlas(f"is bigger than {MAX_ATLAS_BYTES:,} bytes")
        try:
            atlas = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise self._bad_atlas("cannot be read as JSON") from None
        if not isinstance(atlas, dict) or not isinstance(atlas.get("points"), dict) or not isinstance(atlas.get("domains"), list):
            raise self._bad_atlas("has no points or domains")
        self.domains = [str(d) for d in atlas["domains"]]
        self.shown_domains = [shown_field(d, 200) for d in self.domains]
        sources = atlas.get("sources") if isinstance(atlas.get("sources"), list) else []
        self.sources = [shown_field(s.get("name", "") if isinstance(s, dict) else s, 300) for s in sources]
        clusters = atlas.get("clusters") if isinstance(atlas.get("clusters"), list) else []
        self.k = _int(atlas.get("k")) if atlas.get("k") is not None else len(clusters)
        if self.k is None or not 1 <= self.k <= MAX_CLUSTERS:
            raise self._bad_atlas(f"has k={shown_field(atlas.get('k'), 40)}, not a number of clusters from 1 to {MAX_CLUSTERS:,}")
        quality = atlas.get("quality") if isinstance(atlas.get("quality"), dict) else None
        self.buckets = _int(quality.get("buckets")) if quality else None
        if quality and (self.buckets is None or not 1 <= self.buckets <= MAX_BUCKETS):
            raise self._bad_atlas(f"has quality buckets={shown_field(quality.get('buckets'), 40)}, not a number from 1 to {MAX_BUCKETS}")
        pts = atlas["points"]
        if not all(key in pts for key in ("split", "doc", "domain", "cluster")):
            self.points = None   # an atlas from before the browser: only the removed collections
            self.stale_atlas = True
            return
        self.stale_atlas = False
        try:
            cols = {key: np.asarray(pts[key], dtype=np.int64) for key in ("split", "doc", "domain", "cluster")}
            n = len(cols["doc"])
            for key in ("source", "tokens"):
                cols[key] = np.asarray(pts[key], dtype=np.int64) if isinstance(pts.get(key), list) else np.full(n, -1)
            q = pts.get("quality") if isinstance(pts.get("quality"), list) else [None] * n
            cols["quality"] = np.asarray([v if _int(v) is not None else -1 for v in q], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise self._bad_atlas("has points that are not whole numbers") from None
        if any(c.ndim != 1 or len(c) != n for c in cols.values()):
            raise self._bad_atlas("has point columns of different lengths")
        if n and ((cols["split"] < 0).any() or (cols["split"] >= len(SPLITS)).any() or (cols["doc"] < 0).any()
                  or (cols["domain"] < 0).any() or (cols["domain"] >= len(self.domains)).any()
                  or (cols["cluster"] < 0).any() or (cols["cluster"] >= max(self.k, 1)).any()):
            raise self._bad_atlas("has points out of range (domain, split, document or cluster)")
        ids = pts.get("id") if isinstance(pts.get("id"), list) and len(pts["id"]) == n else None
        self.point_ids = [str(v) for v in ids] if ids is not None else None
        self.points = cols

    # -- collections --

    def collections(self) -> dict[str, int]:
        """{name: documents} of every collection this dataset has (removed ones: records)."""
        out: dict[str, int] = {}
        if self.points is not None:
            P = self.points
            out["all"] = len(P["doc"])
            for j, c in enumerate(np.bincount(P["cluster"], minlength=self.k)):
                out[f"cluster:{j}"] = int(c)
            if self.buckets:
                for q in range(self.buckets):
                    out[f"quality:{q}"] = int((P["quality"] == q).sum())
                for d, name in enumerate(self.shown_domains):
                    for q in range(self.buckets):
                        out[f"cell:{name}:{q}"] = int(((P["domain"] == d) & (P["quality"] == q)).sum())
        for kind in REMOVED:
            f = self._record_file(kind)
            if f is not None:
                out[kind] = len(f)
        return out

    def members(self, name: str) -> np.ndarray:
        """Point indices of a point collection, ascending; BrowseError 404 naming what exists."""
        if self.points is None:
            if getattr(self, "stale_atlas", False):
                raise BrowseError(404, f"dataset {shown_field(self.ds_id, 200)!r}: its atlas was made before the document browser; "
                                       f"rebuild it with glassroom data atlas {shown_field(self.ds_id, 200)}")
            raise BrowseError(404, f"dataset {shown_field(self.ds_id, 200)!r} has no atlas yet; run: glassroom data atlas {shown_field(self.ds_id, 200)}")
        P = self.points
        kind, _, rest = name.partition(":")
        if name == "all":
            return np.arange(len(P["doc"]))
        if kind == "cluster" and PAGE_RE.fullmatch(rest) and int(rest) < self.k:
            return np.flatnonzero(P["cluster"] == int(rest))
        if kind in ("quality", "cell") and not self.buckets:
            raise BrowseError(404, f"dataset {shown_field(self.ds_id, 200)!r} has no quality buckets (its atlas has no quality section)")
        if kind == "quality" and PAGE_RE.fullmatch(rest) and int(rest) < self.buckets:
            return np.flatnonzero(P["quality"] == int(rest))
        if kind == "cell":
            domain, _, q = rest.rpartition(":")
            if domain in self.shown_domains and PAGE_RE.fullmatch(q) and int(q) < self.buckets:
                return np.flatnonzero((P["domain"] == self.shown_domains.index(domain)) & (P["quality"] == int(q)))
        have = f"cluster:0..{self.k - 1}" + (f", quality:0..{self.buckets - 1}, cell:<domain>:<bucket>" if self.buckets else "")
        raise BrowseError(404, f"no collection {shown_field(name, 100)!r} in dataset {shown_field(self.ds_id, 200)!r} (it has all, {have}"
                               f"{''.join(', ' + k for k in REMOVED if self._record_file(k) is not None)})")

    def _record_file(self, kind: str) -> Optional[RecordFile]:
        path = inside(self.root, self.folder / REMOVED[kind])
        if path is None or not path.is_file():
            return None
        st = path.stat()
        with self._lock:
            f = self._records.get(kind)
            if f is None or f.key != (st.st_size, st.st_mtime_ns):
                f = self._records[kind] = RecordFile(path)
            return f

    # -- documents --

    def _data(self):
        """(Dataset, tokenizer) of this folder, opened once; every file checked to lie inside root."""
        with self._lock:
            if self._dataset is None:
                for rel in ("manifest.json", "tokenizer.json"):
                    if inside(self.root, self.folder / rel) is None:
                        raise BrowseError(503, f"dataset {shown_field(self.ds_id, 200)!r}: {rel} is missing or outside the served folder")
                try:
                    ds = Dataset(self.folder)
                    tok = load_tokenizer(self.folder / "tokenizer.json")
                except GlassroomError as exc:
                    raise BrowseError(503, shown_field(str(exc).replace(str(self.root), "DIR"), 400)) from None
                self._dataset, self._tokenizer = ds, tok
            return self._dataset, self._tokenizer

    def _shard(self, d: int, s: int):
        """The shard of domain d, split s, or None when it cannot be read or leaves the root (cached)."""
        if (d, s) not in self._shards:
            self._shards[(d, s)] = self._open_shard(d, s)
        return self._shards[(d, s)]

    def _open_shard(self, d: int, s: int):
        ds, _ = self._data()
        if self.domains[d] not in ds.manifest["domains"]:
            return None
        for path in shard_paths(self.folder, self.domains[d], SPLITS[s]).values():
            if os.path.lexists(path) and inside(self.root, path) is None:
                return None
        try:
            return ds.shard(self.domains[d], SPLITS[s])
        except GlassroomError:
            return None

    def _doc_id(self, i: int, shard, d: int, s: int, doc: int) -> str:
        if self.point_ids is not None:
            return self.point_ids[i]
        key = (d, s)
        if key not in self._ids:
            path = inside(self.root, shard.paths["ids"])
            try:
                self._ids[key] = path.read_text(encoding="utf-8", errors="replace").splitlines() if path else []
            except OSError:
                self._ids[key] = []
        ids = self._ids[key]
        return ids[doc] if doc < len(ids) else f"{SPLITS[s]}#{doc}"

    def texts(self, points: list[int]) -> list[tuple[str, bool]]:
        """(redacted text cut at DOC_CHARS, cut?) of each point, decoded in one batch (cached)."""
        P = self.points
        out: dict[int, tuple[str, bool]] = {}
        with self._lock:
            for i in points:
                if i in self._texts:
                    self._texts.move_to_end(i)
                    out[i] = self._texts[i]
        todo = [i for i in points if i not in out]
        if todo:
            _, tok = self._data()
            seqs, owners = [], []
            for i in todo:
                d, s, doc = int(P["domain"][i]), int(P["split"][i]), int(P["doc"][i])
                shard = self._shard(d, s)
                if shard is None or doc >= shard.n_docs:
                    out[i] = ("", False)
                    continue
                lo, hi = int(shard.doc_offsets[doc]), int(shard.doc_offsets[doc + 1]) - 1
                take = min(hi - lo, 2 * DOC_CHARS)
                seqs.append(np.asarray(shard.tokens[lo: lo + take]).tolist())
                owners.append((i, take < hi - lo))
            for (i, longer), text in zip(owners, tok.decode_batch(seqs) if seqs else []):
                shown, cut = _cut_text(text, DOC_CHARS)
                out[i] = (shown, cut or longer)
            with self._lock:
                for i in todo:
                    self._texts[i] = out[i]
                    self._text_bytes += len(out[i][0])
                while self._text_bytes > TEXT_CACHE_BYTES and self._texts:
                    _, (t, _) = self._texts.popitem(last=False)
                    self._text_bytes -= len(t)
        return [out[i] for i in points]

    def point_docs(self, points: list[int]) -> list[dict]:
        """The documents of these atlas points: metadata and text."""
        P = self.points
        docs = []
        for i, (text, cut) in zip(points, self.texts(points)):
            d, s, doc = int(P["domain"][i]), int(P["split"][i]), int(P["doc"][i])
            shard = self._shard(d, s)
            missing = shard is None or doc >= shard.n_docs
            src = int(P["source"][i])
            entry = {"kind": "document", "n": int(i), "id": shown_field(self._doc_id(i, shard, d, s, doc) if not missing else f"{SPLITS[s]}#{doc}"),
                     "domain": self.shown_domains[d], "split": SPLITS[s], "doc": doc,
                     "source": self.sources[src] if 0 <= src < len(self.sources) else "",
                     "cluster": int(P["cluster"][i]), "quality": int(P["quality"][i]) if P["quality"][i] >= 0 else None,
                     "score": None, "tokens": int(P["tokens"][i]) if P["tokens"][i] >= 0 else None,
                     "bytes": None, "text": text, "cut": cut}
            if missing:
                entry["error"] = "this document is not in the dataset's shard (the atlas is older than the dataset); rebuild the atlas"
            else:
                entry["bytes"] = int(shard.doc_bytes[doc])
                if shard.doc_quality is not None and math.isfinite(float(shard.doc_quality[doc])):
                    entry["score"] = round(float(shard.doc_quality[doc]), 4)
            docs.append(entry)
        return docs

    def records(self, kind: str, numbers: list[int], limit: int = DOC_CHARS) -> list[dict]:
        f = self._record_file(kind)
        out = []
        for n in numbers:
            rec = f.record(n)
            out.append(clean_record(kind, rec, n, limit) if rec is not None else
                       {"kind": kind, "n": n, "error": f"record {n + 1} of {REMOVED[kind]} is not readable JSON (or over {MAX_RECORD_BYTES:,} bytes)"})
        return out

    # -- a page --

    def page(self, collection: str, page: int = 1, q: str = "", start: int = 0) -> dict:
        """One page of a collection, optionally only the documents whose redacted text or id
        contains q (case aside), scanning from member `start` within the request's budget."""
        if collection in REMOVED:
            f = self._record_file(collection)
            if f is None:
                raise BrowseError(404, f"dataset {shown_field(self.ds_id, 200)!r} has no {REMOVED[collection]} (nothing was "
                                       f"removed, or an older glassroom built it before builds kept removed/ records); "
                                       f"rebuild it with glassroom data build")
            total_members = len(f)

            def fetch(numbers):
                return self.records(collection, numbers)

            numbers = list(range(total_members))
        else:
            members = self.members(collection)
            total_members = len(members)
            fetch = self.point_docs
            numbers = [int(i) for i in members]
        out: dict[str, Any] = {"dataset": shown_field(self.ds_id, 200), "collection": shown_field(collection, 200), "page_size": PAGE_SIZE}
        if not q:
            pages = max(1, math.ceil(total_members / PAGE_SIZE))
            if page > pages:
                raise BrowseError(404, f"page {page} of {shown_field(collection, 100)}: it has {pages} page{'s' if pages != 1 else ''}")
            chosen = numbers[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
            out.update(total=total_members, page=page, pages=pages, docs=fetch(chosen))
            return out
        if start > total_members:
            raise BrowseError(404, f"from={start}: {shown_field(collection, 100)} has {total_members} documents")
        needle = q.lower()
        hits, scanned, chars, pos = [], 0, 0, start
        while pos < total_members and scanned < SCAN_DOCS and chars < SCAN_CHARS:
            batch = numbers[pos: pos + min(PAGE_SIZE, SCAN_DOCS - scanned)]
            for doc in fetch(batch):
                chars += len(doc.get("text") or "") + sum(len(x.get("text") or "") for x in doc.get("removed", []))
                chars += len((doc.get("kept") or {}).get("text") or "")
                if doc_matches(doc, needle):
                    hits.append(doc)
            scanned += len(batch)
            pos += len(batch)
        pages = max(1, math.ceil(len(hits) / PAGE_SIZE))
        if page > pages:
            raise BrowseError(404, f"page {page} of the search in {shown_field(collection, 100)}: it has {pages} page{'s' if pages != 1 else ''}")
        out.update(total=len(hits), page=page, pages=pages, docs=hits[(page - 1) * PAGE_SIZE: page * PAGE_SIZE],
                   q=redact_text(q, pairs=False),
                   scan={"from": start, "to": pos, "of": total_members, "complete": start == 0 and pos >= total_members})
        return out
