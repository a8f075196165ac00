"""Serving the document browser whose collections glassroom/web/atlas_docs.py reads: live requests and
the published static copy.

`parse_request` turns a query of /api/atlas/docs into (dataset, collection, page, q, from), a BrowseError
(400) with one line for anything malformed; `Browser` keeps the live server's DatasetDocs per dataset
version (at most 8 datasets).

`publish_docs` writes the same collections for the static site: point documents once, in pages of
each cluster (SITE/atlas/d/<dataset>/docs/cluster-<j>-<p>.json; the other point collections are
rebuilt in the page from atlas.json's points), the removed records as duplicates-<p>.json and
contaminated-<p>.json, and index.json with the counts; texts there are cut at STATIC_DOC_CHARS.
This module never imports torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from glassroom.folders import swap_into_place
from glassroom.web.atlas_docs import (
    CUT,
    PAGE_RE,
    PAGE_SIZE,
    REMOVED,
    BrowseError,
    DatasetDocs,
    shown_field,
    source_version,
)

STATIC_DOC_CHARS = 8_192      # a document's text is cut here in the published copy (live: atlas_docs.DOC_CHARS)
MAX_QUERY_CHARS = 200
FORMAT = "glassroom-atlas-docs/1"


# ---- request parsing (live) ----------------------------------------------------------------------

def parse_request(params) -> tuple[str, str, int, str, int]:
    """(dataset, collection, page, q, from) from a query's parameters (a starlette QueryParams or a
    dict of lists); BrowseError 400 with one line for anything malformed."""
    def one(name: str, required: bool, default: str = "") -> str:
        values = params.getlist(name) if hasattr(params, "getlist") else params.get(name, [])
        if len(values) > 1:
            raise BrowseError(400, f"expected at most one {name}= parameter")
        if not values or values[0] == "":
            if required:
                raise BrowseError(400, f"expected a {name}= parameter")
            return default
        return values[0]

    dataset, collection = one("dataset", True), one("collection", False, "all")
    if len(collection) > 300:
        raise BrowseError(400, "collection=: longer than 300 characters")
    q = one("q", False)
    if len(q) > MAX_QUERY_CHARS:
        raise BrowseError(400, f"q=: the search text is longer than {MAX_QUERY_CHARS} characters")
    if "\x00" in q:
        raise BrowseError(400, "q=: the search text holds a NUL character")
    numbers = []
    for name, default in (("page", "1"), ("from", "0")):
        raw = one(name, False, default)
        if not PAGE_RE.fullmatch(raw):
            raise BrowseError(400, f"{name}=: expected a whole number of at most 9 digits, got {shown_field(raw, 40)!r}")
        numbers.append(int(raw))
    if numbers[0] < 1:
        raise BrowseError(400, "page=: pages are numbered from 1")
    return dataset, collection, numbers[0], q.strip(), numbers[1]


class Browser:
    """The live server's browser over every dataset below root: DatasetDocs cached per dataset
    version (at most 8 datasets kept)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[tuple, DatasetDocs]] = OrderedDict()

    def dataset(self, ds_id: str, folder: Path) -> DatasetDocs:
        version = source_version(self.root, folder)
        with self._lock:
            hit = self._cache.get(ds_id)
            if hit is not None and hit[0] == version:
                self._cache.move_to_end(ds_id)
                return hit[1]
        docs = DatasetDocs(self.root, folder, ds_id)
        with self._lock:
            self._cache[ds_id] = (version, docs)
            while len(self._cache) > 8:
                self._cache.popitem(last=False)
        return docs


# ---- the published copy --------------------------------------------------------------------------

def publish_docs(root: Path, folder: Path, ds_id: str, dest: Path) -> int:
    """Write dest/docs/ (see the module doc) for one dataset; returns its bytes. The folder is built
    beside the old one and swapped in; when atlas.json, the manifest and removed/*.jsonl are what the
    published index.json was made from (sizes and modification times), nothing is rewritten."""
    docs = DatasetDocs(root, folder, ds_id)
    final = dest / "docs"
    stamp = [FORMAT, PAGE_SIZE, STATIC_DOC_CHARS, list(docs.version())]
    try:   # unchanged since the last publish (publish --watch runs this every round): keep it
        old_index = json.loads((final / "index.json").read_text(encoding="utf-8"))
        if old_index.get("source") == json.loads(json.dumps(stamp)):
            return sum(f.stat().st_size for f in final.iterdir())
    except (OSError, ValueError, AttributeError):
        pass
    tmp = dest / f".docs.tmp-{os.getpid()}"
    if dest.is_dir():   # what an interrupted publish left behind
        for left in dest.glob(".docs.*"):
            shutil.rmtree(left, ignore_errors=True)
    tmp.mkdir(parents=True)
    written = 0

    def put(name: str, data: Any) -> None:
        nonlocal written
        body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        (tmp / name).write_bytes(body)
        written += len(body)

    def static(doc: dict) -> dict:
        """A live document entry with its texts cut at STATIC_DOC_CHARS (marks kept inside)."""
        doc = dict(doc)
        for key in ("kept",):
            if isinstance(doc.get(key), dict):
                doc[key] = static(doc[key])
        if "removed" in doc:
            doc["removed"] = [static(x) for x in doc["removed"]]
        text = doc.get("text")
        if isinstance(text, str) and len(text) > STATIC_DOC_CHARS:
            doc["text"] = text[:STATIC_DOC_CHARS].rstrip() + CUT
            doc["cut"] = True
            if "marks" in doc:
                units = len(doc["text"].encode("utf-16-le")) // 2 - 1
                doc["marks"] = [[a, min(b, units)] for a, b in doc["marks"] if a < units]
        return doc

    index: dict[str, Any] = {"format": FORMAT, "page_size": PAGE_SIZE, "text_chars": STATIC_DOC_CHARS,
                             "collections": {}, "clusters": {}, "source": stamp}
    try:
        try:
            have = docs.collections()
        except BrowseError:
            have = {}
        if docs.points is not None:
            for j in range(docs.k):
                members = [int(i) for i in docs.members(f"cluster:{j}")]
                pages = max(1, math.ceil(len(members) / PAGE_SIZE))
                index["clusters"][str(j)] = {"total": len(members), "pages": pages}
                for p in range(pages):
                    put(f"cluster-{j}-{p + 1}.json", [static(d) for d in docs.point_docs(members[p * PAGE_SIZE: (p + 1) * PAGE_SIZE])])
        for kind in REMOVED:
            f = docs._record_file(kind)
            if f is None:
                continue
            pages = max(1, math.ceil(len(f) / PAGE_SIZE))
            index["collections"][kind] = {"total": len(f), "pages": pages}
            for p in range(pages):
                put(f"{kind}-{p + 1}.json", [static(d) for d in docs.records(kind, list(range(p * PAGE_SIZE, min(len(f), (p + 1) * PAGE_SIZE))))])
        for name, total in have.items():
            if name not in REMOVED:
                index["collections"][name] = {"total": total, "pages": max(1, math.ceil(total / PAGE_SIZE))}
        put("index.json", index)
        swap_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return written
