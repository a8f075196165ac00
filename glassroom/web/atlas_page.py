"""The data atlas pages, for `glassroom serve` (routes) and `glassroom publish` (static copies).

A dataset is any folder below the served root that holds manifest.json; its atlas is
DATA_DIR/atlas/atlas.json, written by `glassroom data atlas`. Datasets are named by their path
relative to the root (`data/demo`), found by a bounded walk that skips hidden folders and the
insides of datasets and runs, and looked up only in that list: a request never turns into a path.

Served (mounted by glassroom.web.server):
  /atlas                     the list of datasets and whether each has an atlas
  /atlas/<dataset>           one dataset's atlas page (frontend/atlas.html, atlas.js, atlas.css)
  /api/atlas/list            that list as JSON
  /api/atlas?dataset=<id>    the dataset's atlas.json
  /api/atlas/docs?dataset=<id>&collection=C&page=N&q=TEXT&from=M
                             the document browser: one page of a collection's documents
                             (glassroom.web.atlas_docs, atlas_docs_serve; docs/data-browser.md)
Published (publish_atlases): SITE/atlas/index.html, SITE/atlas/datasets.json,
SITE/atlas/d/<dataset>/index.html and SITE/atlas/d/<dataset>/atlas.json, each written under a temporary
name and renamed, and the browser's pages under SITE/atlas/d/<dataset>/docs/ (atlas_docs_serve.publish_docs);
the scripts and style sheets go to SITE/static/ like the dashboard's.
Every file (manifest.json, atlas/atlas.json) is read only when it resolves inside the root after
symlinks (glassroom.observe.runs.inside); one that leads elsewhere counts as absent. Every string
in an atlas (document excerpts, source names, terms) is treated as corpus text: token shapes, URL
credentials and private keys in it are redacted (glassroom.observe.redact.redact_text with pairs=False) before they are served or published.
This module never imports torch.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Optional

from glassroom.folders import replace_file
from glassroom.observe.redact import redact_text
from glassroom.observe.run_folder import CHECKPOINTS_DIR
from glassroom.observe.runs import find_folders, inside
from glassroom.web.atlas_docs import BrowseError
from glassroom.web.atlas_docs_serve import Browser, parse_request, publish_docs
from glassroom.web.views import FRONTEND, render_page

MAX_DEPTH = 5
SKIP_DIRS = {"node_modules", "shards", CHECKPOINTS_DIR, "atlas", "site", "__pycache__"}
MAX_MANIFEST_BYTES = 16 * 1024 * 1024    # a manifest is a few KB; anything this big is not one
MAX_ATLAS_BYTES = 256 * 1024 * 1024      # an atlas of 20,000 sampled documents is a few MB


def find_datasets(root: str | Path) -> dict[str, Path]:
    """{relative id: folder} of every dataset (a folder with manifest.json) below root, root included;
    a dataset's own folders hold no datasets, and one whose path looks like a secret is not shown."""
    def is_dataset(folder: Path) -> bool:
        manifest = inside(root, folder / "manifest.json")
        return manifest is not None and manifest.is_file()

    return find_folders(root, is_dataset, SKIP_DIRS, MAX_DEPTH, enter_matches=False)


def atlas_file(root: Path, folder: Path) -> Optional[Path]:
    """DATA_DIR/atlas/atlas.json when it exists and resolves inside `root`, else None."""
    path = inside(root, folder / "atlas" / "atlas.json")
    return path if path is not None and path.is_file() else None


def dataset_summary(ds_id: str, folder: Path, root: Optional[Path] = None) -> dict:
    """One line of the dataset list: name, size, and the atlas's k, method and date if there is one."""
    root = folder if root is None else root
    entry: dict[str, Any] = {"id": ds_id, "name": folder.name, "atlas": False}
    try:
        path = inside(root, folder / "manifest.json")
        if path is None:
            raise OSError("manifest.json is outside the served folder")
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError("manifest.json is too big")
        manifest = json.loads(path.read_text(encoding="utf-8"))
        entry.update(name=redact_text(str(manifest.get("name", folder.name))), domains=[redact_text(str(d), pairs=False) for d in manifest.get("domains", {})],
                     train_tokens=manifest.get("totals", {}).get("train", {}).get("tokens"))
    except (OSError, ValueError, AttributeError, TypeError):
        entry["unreadable"] = True
    atlas = atlas_file(root, folder)
    if atlas is not None:
        entry.update(atlas=True, atlas_bytes=atlas.stat().st_size, atlas_modified=atlas.stat().st_mtime)
    return entry


def _redact_excerpts(node: Any, depth: int = 0) -> Any:
    """The atlas with every string in it (excerpts, hover texts, source names and paths, topic
    terms, keys) passed through redact_text without its key=value rule (corpus text is prose and
    code, not configs)."""
    if depth > 100:
        return None
    if isinstance(node, dict):
        return {(redact_text(k, pairs=False) if isinstance(k, str) else k): _redact_excerpts(v, depth + 1)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_redact_excerpts(v, depth + 1) for v in node]
    if isinstance(node, str):
        return redact_text(node, pairs=False)
    return node


def atlas_bytes(path: Path) -> bytes:
    """atlas.json as served and published: its excerpts redacted. ValueError when it is bigger
    than MAX_ATLAS_BYTES (it is read whole)."""
    size = path.stat().st_size
    if size > MAX_ATLAS_BYTES:
        raise ValueError(f"{size:,} bytes, more than the {MAX_ATLAS_BYTES:,} an atlas may have")
    return json.dumps(_redact_excerpts(json.loads(path.read_text(encoding="utf-8")))).encode("utf-8")


def render(page_boot: dict) -> str:
    """frontend/atlas.html with its boot data and base URL filled in, as the dashboard's pages are
    (a static page also gets the Content-Security-Policy meta tag)."""
    return render_page("atlas", page_boot)


class _Datasets:
    """The dataset list, re-walked at most every 5 s."""

    def __init__(self, root: Path):
        self.root, self._lock, self._at, self._found = root, threading.Lock(), 0.0, {}

    def all(self) -> dict[str, Path]:
        with self._lock:
            if time.monotonic() - self._at > 5.0:
                self._found, self._at = find_datasets(self.root), time.monotonic()
            return dict(self._found)

    def get(self, ds_id: str) -> Path:
        from starlette.exceptions import HTTPException

        found = self.all()
        if ds_id not in found:
            with self._lock:
                self._at = 0.0
            found = self.all()
        if ds_id not in found:
            raise HTTPException(404, f"no dataset {redact_text(ds_id[:200], pairs=False)!r} below the served folder")
        return found[ds_id]


def atlas_routes(root: str | Path) -> list:
    """Starlette routes for the atlas pages and JSON of every dataset below `root` (read-only).
    The page's script and style come from the dashboard's /static mount (frontend/)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    root = Path(root)
    datasets = _Datasets(root)
    no_cache = {"Cache-Control": "no-cache"}

    def listing() -> dict:
        return {"root": redact_text(root.resolve().name),
                "datasets": [dataset_summary(i, p, root) for i, p in sorted(datasets.all().items())]}

    async def index_page(request: Request):
        return HTMLResponse(render({"mode": "live", "base": "/", "page": "atlas-index"}), headers=no_cache)

    async def dataset_page(request: Request):
        ds_id = request.path_params["dataset"].strip("/") or "."
        await run_in_threadpool(datasets.get, ds_id)
        return HTMLResponse(render({"mode": "live", "base": "/", "page": "atlas", "dataset": ds_id}), headers=no_cache)

    async def api_list(request: Request):
        return JSONResponse(await run_in_threadpool(listing), headers=no_cache)

    browser = Browser(root)

    async def api_docs(request: Request):
        try:
            ds_id, collection, page, q, start = parse_request(request.query_params)
        except BrowseError as exc:
            raise HTTPException(exc.status, exc.message) from None
        folder = await run_in_threadpool(datasets.get, ds_id)

        def answer() -> bytes:
            return json.dumps(browser.dataset(ds_id, folder).page(collection, page, q, start), ensure_ascii=False).encode("utf-8")

        try:
            body = await run_in_threadpool(answer)
        except BrowseError as exc:
            raise HTTPException(exc.status, exc.message) from None
        except (OSError, ValueError) as exc:
            raise HTTPException(503, f"dataset {redact_text(ds_id[:200], pairs=False)!r}: its documents cannot be read "
                                     f"({type(exc).__name__}); rebuild it") from None
        return Response(body, media_type="application/json", headers=no_cache)

    async def api_atlas(request: Request):
        values = request.query_params.getlist("dataset")
        if len(values) != 1 or not values[0]:
            raise HTTPException(400, "expected exactly one dataset= parameter")
        folder = await run_in_threadpool(datasets.get, values[0])
        path = atlas_file(root, folder)
        if path is None:
            raise HTTPException(404, f"dataset {values[0]!r} has no atlas yet; run: glassroom data atlas {values[0]}")
        try:
            body = await run_in_threadpool(atlas_bytes, path)
        except (OSError, ValueError) as exc:
            raise HTTPException(503, f"dataset {values[0]!r}: atlas/atlas.json cannot be read ({exc}); "
                                     f"rebuild it with glassroom data atlas {values[0]}") from None
        return Response(body, media_type="application/json", headers=no_cache)

    return [
        Route("/atlas", index_page),
        Route("/atlas/{dataset:path}", dataset_page),
        Route("/api/atlas/list", api_list),
        Route("/api/atlas/docs", api_docs),
        Route("/api/atlas", api_atlas),
    ]


def publish_atlases(root: str | Path, site_dir: str | Path) -> list[str]:
    """Static copies of every dataset's atlas below `root` into SITE/atlas/; returns the dataset ids
    published (datasets without an atlas are listed but get no page)."""
    root, site = Path(root), Path(site_dir)
    found = find_datasets(root)
    out = site / "atlas"
    published = []
    summaries = []
    for ds_id, folder in sorted(found.items()):
        entry = dataset_summary(ds_id, folder, root)
        summaries.append(entry)
        path = atlas_file(root, folder) if entry["atlas"] else None
        if path is None:
            continue
        try:
            body = atlas_bytes(path)
        except (OSError, ValueError):   # a damaged atlas: listed, no page
            entry["atlas"] = False
            continue
        dest = out / "d" / ds_id if ds_id != "." else out / "d" / "_root"
        replace_file(dest / "atlas.json", body)
        try:
            entry["docs_bytes"] = publish_docs(root, folder, ds_id, dest)
        except (BrowseError, OSError, ValueError):   # the atlas page is still published, without documents
            shutil.rmtree(dest / "docs", ignore_errors=True)
        depth = len(dest.relative_to(site).parts)
        replace_file(dest / "index.html", render({"mode": "static", "base": "../" * depth, "page": "atlas", "dataset": ds_id,
                                              "data": "atlas.json"}).encode("utf-8"))
        entry["href"] = dest.relative_to(out).as_posix() + "/"
        published.append(ds_id)
    replace_file(out / "datasets.json", json.dumps({"root": redact_text(root.resolve().name), "datasets": summaries}).encode("utf-8"))
    replace_file(out / "index.html", render({"mode": "static", "base": "../", "page": "atlas-index", "data": "datasets.json"}).encode("utf-8"))
    for name in ("atlas.js", "atlas.css", "atlas-docs.js", "atlas-docs.css"):
        replace_file(site / "static" / name, (FRONTEND / name).read_bytes())
    stale = out / "d"
    if stale.is_dir():   # datasets that were removed since the last publish
        keep = {((out / "d" / i) if i != "." else out / "d" / "_root").resolve() for i in published}
        for page in stale.rglob("index.html"):
            if page.parent.resolve() not in keep:
                shutil.rmtree(page.parent, ignore_errors=True)
    return published
