"""`glassroom serve`: the read-only live dashboard over every run below a folder (Starlette + uvicorn).

Pages: `/` (run list), `/runs/<run>` (one run's charts, events, config), `/compare?run=a&run=b`
(several runs on one chart). JSON API under `/api/`; live updates as Server-Sent Events from
`/api/stream` (one stream per page; the store is polled every 0.25 s, so a new point reaches the
page well within 2 s of its commit). Series are downsampled here (glassroom.web.data).

Safety: GET and HEAD only (anything else gets 405); a run is named by its id from the run list,
never by a path, so nothing outside DIR (or under it but not a run store) can be read; static files
come only from the frontend folder; a malformed query gets 400 and an unknown run 404. Bound to
127.0.0.1 by default, and then only Host headers naming the loopback are answered (no DNS
rebinding). This module never imports torch.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Optional

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from glassroom.observe.runs import find_runs, summarize
from glassroom.web import data
from glassroom.web.atlas_page import atlas_routes

FRONTEND = Path(__file__).parent / "frontend"
POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def render_page(page: str, boot: dict) -> str:
    """A frontend page with its boot data (mode, base URL, run ids) filled in, safely escaped."""
    text = (FRONTEND / f"{page}.html").read_text(encoding="utf-8")
    payload = json.dumps(boot).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    base = boot.get("base", "/").replace('"', "%22").replace("<", "%3C")
    return text.replace("{{BOOT}}", payload).replace("{{BASE}}", base)


class MethodAndHostGuard:
    """GET and HEAD only (405 otherwise); on a loopback bind, only loopback Host headers (421)."""

    def __init__(self, app, loopback_only: bool):
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            if scope["method"] not in ("GET", "HEAD"):
                response = PlainTextResponse("read-only: GET and HEAD only", 405, headers={"Allow": "GET, HEAD"})
                return await response(scope, receive, send)
            if self.loopback_only:
                host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
                name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
                if name not in LOOPBACK_HOSTS and not name.startswith("127."):
                    return await PlainTextResponse("unknown host", 421)(scope, receive, send)
        await self.app(scope, receive, send)


class Runs:
    """The runs below DIR, re-listed at most every 2 s (a new run shows up without a restart)."""

    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._at = 0.0
        self._runs: dict[str, Path] = {}

    def all(self) -> dict[str, Path]:
        with self._lock:
            if time.monotonic() - self._at > 2.0:
                self._runs = find_runs(self.root)
                self._at = time.monotonic()
            return dict(self._runs)

    def get(self, run_id: str) -> Path:
        runs = self.all()
        if run_id not in runs:
            with self._lock:   # maybe it was just created (re-list at most twice a second)
                self._at = min(self._at, time.monotonic() - 1.5)
            runs = self.all()
        if run_id not in runs:
            raise HTTPException(404, f"no run {run_id!r} below the served folder")
        return runs[run_id]


def _int_param(request: Request, key: str, default: Optional[int], lo: int, hi: int) -> Optional[int]:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if raw.lstrip("+-").isdigit() else int(float(raw))
    except (ValueError, OverflowError):   # "abc", "nan", "1e999", "inf"
        value = None
    if value is None or not lo <= value <= hi:
        raise HTTPException(400, f"{key}: expected an integer in [{lo}, {hi}], got {raw[:40]!r}")
    return value


def _range(request: Request) -> tuple[Optional[int], Optional[int]]:
    start = _int_param(request, "start", None, -(2**62), 2**62)
    end = _int_param(request, "end", None, -(2**62), 2**62)
    if start is not None and end is not None and start > end:
        raise HTTPException(400, "start must not be after end")
    return start, end


def _one(request: Request, key: str) -> str:
    values = request.query_params.getlist(key)
    if len(values) != 1 or not values[0]:
        raise HTTPException(400, f"expected exactly one {key}= parameter")
    return values[0]


def create_app(root: str | Path, loopback_only: bool = True) -> Starlette:
    root = Path(root)
    runs = Runs(root)

    def page(name: str, **boot):
        return HTMLResponse(render_page(name, {"mode": "live", "base": "/", "page": name, **boot}),
                            headers={"Cache-Control": "no-cache"})

    async def index(request: Request):
        return page("index")

    async def run_page(request: Request):
        run_id = request.path_params["run"]
        runs.get(run_id)
        return page("run", runs=[run_id])

    async def compare_page(request: Request):
        ids = request.query_params.getlist("run")
        if not 1 <= len(ids) <= 12:
            raise HTTPException(400, "compare takes 1 to 12 run= parameters")
        for run_id in ids:
            runs.get(run_id)
        return page("compare", runs=ids)

    def api(fn):
        async def endpoint(request: Request):
            payload = await run_in_threadpool(fn, request)
            return JSONResponse(payload, headers={"Cache-Control": "no-cache"})
        return endpoint

    def list_runs(request: Request):
        now = time.time()
        return {"root": root.resolve().name, "generated": now,
                "runs": [summarize(i, p, now) for i, p in sorted(runs.all().items())]}

    def run_meta(request: Request):
        run_id = _one(request, "run")
        return data.run_meta(run_id, runs.get(run_id))

    def series(request: Request):
        run_dir = runs.get(_one(request, "run"))
        names = [n for n in request.query_params.getlist("name") if n]
        if not 1 <= len(names) <= data.MAX_NAMES:
            raise HTTPException(400, f"give 1 to {data.MAX_NAMES} name= parameters")
        start, end = _range(request)
        points = _int_param(request, "points", data.DEFAULT_POINTS, 2, data.MAX_POINTS)
        with data.StoreReader(run_dir) as reader:
            return data.series_payload(reader, names, start, end, points)

    def vectors(request: Request):
        run_dir = runs.get(_one(request, "run"))
        name = _one(request, "name")
        start, end = _range(request)
        points = _int_param(request, "points", 400, 2, 5000)
        with data.StoreReader(run_dir) as reader:
            return data.vector_payload(reader, name, start, end, points)

    def events(request: Request):
        run_dir = runs.get(_one(request, "run"))
        after = _int_param(request, "after", 0, 0, 2**62)
        with data.StoreReader(run_dir) as reader:
            return {"events": data.events_payload(reader, after)}

    async def stream(request: Request):
        ids = request.query_params.getlist("run")
        if len(ids) > 12:
            raise HTTPException(400, "a stream follows at most 12 runs")
        dirs = [(i, runs.get(i)) for i in ids]
        return StreamingResponse(_events(dirs), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _events(dirs):
        """One page's stream: `hello` once the cursors are set (the page loads its data after that,
        so nothing falls between), then `update` messages, or `runs` summaries on the run list."""
        cursors = await run_in_threadpool(lambda: [data.Cursor(i, p) for i, p in dirs])
        try:
            yield f"event: hello\ndata: {json.dumps({'runs': [c.run_id for c in cursors], 'time': time.time()})}\n\n"
            last_sent, last_summary = time.monotonic(), ""
            while True:
                if cursors:
                    updates = await run_in_threadpool(lambda: [u for u in (c.poll() for c in cursors) if u])
                    for update in updates:
                        yield f"event: update\ndata: {json.dumps(update)}\n\n"
                        last_sent = time.monotonic()
                    await asyncio.sleep(POLL_SECONDS)
                else:
                    listing = await run_in_threadpool(list_runs, None)
                    # Ages tick every second; send when anything else changed, or every 10 s.
                    key = json.dumps([{k: v for k, v in r.items() if k != "age_s"} for r in listing["runs"]])
                    if key != last_summary or time.monotonic() - last_sent > 10:
                        yield f"event: runs\ndata: {json.dumps(listing)}\n\n"
                        last_summary, last_sent = key, time.monotonic()
                    await asyncio.sleep(1.0)
                if time.monotonic() - last_sent > KEEPALIVE_SECONDS:
                    yield ": keepalive\n\n"
                    last_sent = time.monotonic()
        finally:
            for c in cursors:
                c.close()

    async def not_found(request: Request, exc: HTTPException):
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, exc.status_code)
        return PlainTextResponse(f"{exc.status_code}: {exc.detail}", exc.status_code)

    routes = [
        Route("/", index),
        Route("/runs/{run:path}", run_page),
        Route("/compare", compare_page),
        Route("/api/runs", api(list_runs)),
        Route("/api/run", api(run_meta)),
        Route("/api/series", api(series)),
        Route("/api/vectors", api(vectors)),
        Route("/api/events", api(events)),
        Route("/api/stream", stream),
        *atlas_routes(root),
        Mount("/static", StaticFiles(directory=FRONTEND, follow_symlink=False), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    return MethodAndHostGuard(app, loopback_only)


def serve(root: str | Path, host: str = "127.0.0.1", port: int = 8080, log_level: str = "warning") -> None:
    """Run the dashboard until interrupted (the command checks DIR and the port first)."""
    import uvicorn

    loopback = host in LOOPBACK_HOSTS or host.startswith("127.")
    uvicorn.run(create_app(root, loopback_only=loopback), host=host, port=port, log_level=log_level,
                timeout_graceful_shutdown=1, access_log=False)

