"""The ladder pages for `glassroom serve` (routes) and `glassroom publish` (static copies); what they
draw is built in glassroom.web.ladder_view (its docstring says what a page shows and where each part
comes from).

Served (mounted by glassroom.web.server): /ladders (the list), /ladders/<id> (one ladder),
/api/ladders, /api/ladder?id=<id>. Published (publish_ladders): SITE/ladders/index.html,
SITE/ladders/ladders.json, SITE/ladders/l/<id>/index.html and .../ladder.json.
Ladders are looked up only in the list find_ladders makes: a request never becomes a path. Public
servers and the published site neither link nor read runs marked private. Never imports torch.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Optional

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file
from glassroom.observe.lab_index import LabIndex, shown_runs
from glassroom.observe.readers import StoreReaders
from glassroom.observe.redact import redact_text
from glassroom.web.ladder_view import cannot_show, find_ladders, hero_runs, ladder_summary, ladder_view  # noqa: F401 (find_ladders, ladder_view: also used from here)
from glassroom.web.views import FRONTEND, render_page

PAGE_FILES = ("ladder.js", "ladder.css")


def render(page_boot: dict) -> str:
    return render_page("ladder", page_boot)


# ---- served ----

class _Ladders:
    """The ladder list and the runs it may link to, re-walked at most every 5 s."""

    def __init__(self, root: Path, public: bool, index: Optional[LabIndex] = None):
        self.root, self.public = root, public
        self.index = LabIndex(root, public) if index is None else index   # the server's run index
        self._lock, self._at = threading.Lock(), 0.0
        self._found: dict[str, Path] = {}
        self._runs: dict[str, Path] = {}
        self._heroes: list = []

    def state(self) -> tuple[dict, dict, list]:
        with self._lock:
            if time.monotonic() - self._at > 5.0:
                self._found = find_ladders(self.root)
                self._runs = self.index.runs()
                self._heroes = hero_runs(self.root, self._runs)
                self._at = time.monotonic()
            return dict(self._found), dict(self._runs), list(self._heroes)

    def get(self, ladder_id: str) -> Path:
        from starlette.exceptions import HTTPException

        found = self.state()[0]
        if ladder_id not in found:
            with self._lock:
                self._at = 0.0
            found = self.state()[0]
        if ladder_id not in found:
            raise HTTPException(404, f"no ladder {redact_text(ladder_id[:200])!r} below the served folder")
        return found[ladder_id]

    def view(self, ladder_id: str) -> dict:
        folder = self.get(ladder_id)
        _, runs, heroes = self.state()
        return ladder_view(ladder_id, folder, self.root, self.public, runs, heroes)

    def listing(self) -> dict:
        found, runs, heroes = self.state()
        out = []
        for ladder_id, folder in sorted(found.items()):
            try:
                out.append(ladder_summary(ladder_id, folder, self.root,
                                          ladder_view(ladder_id, folder, self.root, self.public, runs, heroes)))
            except Exception as exc:   # one unreadable ladder must not break the list
                out.append(ladder_summary(ladder_id, folder, self.root, error=cannot_show(ladder_id, exc)))
        return {"root": redact_text(self.root.resolve().name), "ladders": out}


def ladder_routes(root: str | Path, public: bool = False, index: Optional[LabIndex] = None) -> list:
    """Starlette routes for the ladder pages and JSON below `root` (read-only); `index`: the server's
    run index (else one of their own)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    ladders = _Ladders(Path(root), public, index)
    no_cache = {"Cache-Control": "no-cache"}

    async def index_page(request: Request):
        return HTMLResponse(render({"mode": "live", "base": "/", "page": "ladder-index"}), headers=no_cache)

    async def ladder_page(request: Request):
        # /ladders/ is the list, as SITE/ladders/ is in the published copy; /ladders/?ladder=. is a
        # ladder at the served folder itself (a path ending in /. would be folded away by the browser)
        ladder_id = request.path_params["ladder"].strip("/") or request.query_params.get("ladder", "")
        if not ladder_id:
            return await index_page(request)
        await run_in_threadpool(ladders.get, ladder_id)
        return HTMLResponse(render({"mode": "live", "base": "/", "page": "ladder", "ladder": ladder_id}), headers=no_cache)

    async def api_list(request: Request):
        return JSONResponse(await run_in_threadpool(ladders.listing), headers=no_cache)

    async def api_ladder(request: Request):
        values = request.query_params.getlist("id")
        if len(values) != 1 or not values[0] or len(values[0]) > 1000:
            raise HTTPException(400, "expected exactly one id= parameter (a ladder id from /api/ladders)")
        ladder_id = values[0]
        await run_in_threadpool(ladders.get, ladder_id)
        try:
            body = await run_in_threadpool(ladders.view, ladder_id)
        except HTTPException:
            raise
        except Exception as exc:
            raise HTTPException(503, cannot_show(ladder_id, exc)) from None
        return JSONResponse(body, headers=no_cache)

    return [
        Route("/ladders", index_page),
        Route("/ladders/{ladder:path}", ladder_page),
        Route("/api/ladders", api_list),
        Route("/api/ladder", api_ladder),
    ]


# ---- published ----

def _dump(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), allow_nan=False).encode("utf-8")


def publish_ladders(root: str | Path, site_dir: str | Path, published_runs: Optional[set[str]] = None,
                    log=lambda m: None, runs: Optional[dict[str, Path]] = None,
                    readers: Optional[StoreReaders] = None) -> list[str]:
    """Static copies of every ladder below `root` into SITE/ladders/; returns the ladder ids published.
    Run links go only to `published_runs` (default: the runs publish would export: not private, no
    secret-looking ids); a ladder that cannot be read is listed with its one-line error and no page.
    `runs`: {id: folder} of the runs publish exported (found once by publish), instead of a new walk."""
    root, site = Path(root), Path(site_dir)
    out = site / "ladders"
    if out.is_symlink():
        raise GlassroomError(f"--out {site}: ladders is a symbolic link; a site's folders must be its own "
                             "(remove the link or give a new folder)")
    if runs is None:
        runs = shown_runs(root, public=True)
    if published_runs is not None:
        runs = {i: p for i, p in runs.items() if i in published_runs}
    heroes = hero_runs(root, runs, readers)
    published, summaries = [], []
    for ladder_id, folder in sorted(find_ladders(root).items()):
        dest = out / "l" / (ladder_id if ladder_id != "." else "_root")
        try:
            view = ladder_view(ladder_id, folder, root, True, runs, heroes, readers)
            body = _dump(view)
        except Exception as exc:
            line = cannot_show(ladder_id, exc)
            log(f"ladder page skipped: {line}")
            summaries.append(ladder_summary(ladder_id, folder, root, error=line))
            continue
        replace_file(dest / "ladder.json", body)
        depth = len(dest.relative_to(site).parts)
        replace_file(dest / "index.html", render({"mode": "static", "base": "../" * depth, "page": "ladder",
                                              "ladder": ladder_id, "data": "ladder.json"}).encode("utf-8"))
        entry = ladder_summary(ladder_id, folder, root, view)
        entry["href"] = dest.relative_to(out).as_posix() + "/index.html"
        summaries.append(entry)
        published.append(ladder_id)
    replace_file(out / "ladders.json", _dump({"root": redact_text(root.resolve().name), "ladders": summaries}))
    replace_file(out / "index.html", render({"mode": "static", "base": "../", "page": "ladder-index",
                                         "data": "ladders.json"}).encode("utf-8"))
    for name in PAGE_FILES:
        replace_file(site / "static" / name, (FRONTEND / name).read_bytes())
    stale = out / "l"
    if stale.is_dir():   # ladders removed (or now unreadable) since the last publish
        keep = {(stale / (i if i != "." else "_root")).resolve() for i in published}
        for page in list(stale.rglob("index.html")):
            if page.parent.resolve() not in keep:
                for name in ("index.html", "ladder.json"):
                    (page.parent / name).unlink(missing_ok=True)
    return published
