"""`glassroom serve`: the read-only live dashboard over every run below a folder (Starlette + uvicorn).

Pages: `/` (run list), `/runs/<run>` (one run's charts, events, config), `/compare?run=a&run=b`
(several runs on one chart), `/incidents` (every run's incidents). Atom feeds: `/feed.atom` (the lab)
and `/feed.atom?run=ID` (glassroom.web.feeds); search: `/api/search?q=` (glassroom.web.search).
JSON API under `/api/`; live updates as Server-Sent Events from
`/api/stream` (one stream per page; the store is polled every 0.25 s, so a new point reaches the
page well within 2 s of its commit). Series views come from the stores' multi-resolution tiles
(glassroom.observe.tiles through glassroom.web.data), the run list from the writers' counters, cached
for every open tab (glassroom.web.run_list). Ladders (`/ladders`, glassroom.web.ladder_page) and data
atlases (`/atlas`, glassroom.web.atlas_page) have their own pages.

Safety: GET and HEAD only (anything else gets 405); a run is named by its id from the run list,
never by a path, and every file is opened only when it resolves (symlinks followed) inside DIR, so
nothing outside DIR (or under it but not a run store) can be read; static files come only from the
frontend folder; a malformed query gets 400, an unknown run 404, a run whose store cannot be read
503 with one line. Only Host headers on an exact allow-list are answered (421 otherwise: no DNS
rebinding); one request may ask for a bounded amount of work (MAX_RAW_NAMES, data.MAX_NAMES,
MAX_WORK); every response carries a Content-Security-Policy. Text is redacted in glassroom.web.data.
Bound to a non-loopback address, runs and notes marked private are hidden. Never imports torch.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sqlite3
import time
from pathlib import Path
from typing import Optional

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from glassroom.observe.lab_index import LabIndex
from glassroom.observe.redact import redact_text
from glassroom.observe.runs import store_error
from glassroom.web import data, feeds, run_list, site_chain
from glassroom.web import search as search_mod
from glassroom.web.atlas_page import atlas_routes
from glassroom.web.ladder_page import ladder_routes
from glassroom.web.views import FRONTEND, SECURITY_HEADERS, render_page

POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}
MAX_RAW_NAMES = 2_000        # name= parameters in one query, repeats included
MAX_WORK = 1_000_000         # distinct names x points in one series request
REQUEST_SECONDS = 20.0       # a series request that takes longer than this is cut off with 503
MAX_STREAMS = 64             # live streams open at once (one per open page)
STREAM_THREADS = 4           # worker threads the live streams' store polls share (the API keeps the rest)


class CountedStream(StreamingResponse):
    """A stream whose place among the open streams was taken before the endpoint returned; the
    place is given back when the response ends however it ends (finished, client gone, cancelled),
    also when its body was never started."""

    def __init__(self, content, release, **kwargs):
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `127.0.0.1:8080` -> `127.0.0.1`, `[::1]:80` -> `[::1]`.
    A port that is not digits (`127.0.0.1:8080@evil.com`, `localhost:abc`) leaves the header whole,
    so it matches no allowed name."""
    header = header.strip().lower()
    if header.startswith("["):
        name, _, rest = header.partition("]")
        return name + "]" if rest == "" or (rest.startswith(":") and rest[1:].isdigit()) else header
    if header.count(":") == 1:
        name, port = header.split(":")
        return name if port.isdigit() else header
    return header


def is_loopback_name(name: str) -> bool:
    """`localhost`, `::1`, `[::1]`, or an exact dotted quad in 127.0.0.0/8 (not `127.evil.com`)."""
    if name in LOOPBACK_HOSTS:
        return True
    parts = name.split(".")
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return False
    try:
        return ipaddress.IPv4Address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts(bind: str, extra: tuple[str, ...] = ()) -> set[str]:
    """Host header names answered: the loopback names, the bound address, `extra` (`--allow-host`),
    and on a wildcard bind (0.0.0.0, ::) this machine's name and addresses."""
    names = set(LOOPBACK_HOSTS) | {bind.lower()} | {e.lower() for e in extra}
    if ":" in bind and not bind.startswith("["):
        names.add(f"[{bind.lower()}]")
    if bind in WILDCARD_HOSTS:
        try:
            hostname = socket.gethostname()
            names |= {hostname.lower(), socket.getfqdn().lower()}
            for info in socket.getaddrinfo(hostname, None):
                addr = info[4][0]
                names.add(f"[{addr}]" if ":" in addr else addr)
        except OSError:
            pass
    return {n for n in names if n and n not in WILDCARD_HOSTS}


class MethodAndHostGuard:
    """GET and HEAD only (405 otherwise); only Host headers on the allow-list (421); the security
    headers (Content-Security-Policy, nosniff, no referrer, no framing) on every response."""

    def __init__(self, app, hosts: set[str]):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_secured(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse("read-only: GET and HEAD only", 405, headers={"Allow": "GET, HEAD"})
            return await response(scope, receive, send_secured)
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        name = host_name(host)
        if name not in self.hosts and not is_loopback_name(name):
            return await PlainTextResponse("unknown host", 421)(scope, receive, send_secured)
        await self.app(scope, receive, send_secured)


class Runs:
    """The server's runs: its LabIndex (shared with the ladder pages), a missing run as a 404."""

    def __init__(self, index: LabIndex):
        self.index = index

    def all(self) -> dict[str, Path]:
        return self.index.runs()

    def get(self, run_id: str) -> Path:
        folder = self.index.find(run_id)
        if folder is None:   # never there, gone, or marked private since
            raise HTTPException(404, f"no run {redact_text(run_id[:200])!r} below the served folder")
        return folder


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


def _distinct(request: Request, key: str, most: int) -> list[str]:
    """The distinct non-empty values of a repeated parameter, in order; 400 past `most` distinct
    ones or MAX_RAW_NAMES in all (so repeating one name hundreds of times costs nothing)."""
    raw = request.query_params.getlist(key)
    if len(raw) > MAX_RAW_NAMES:
        raise HTTPException(400, f"at most {MAX_RAW_NAMES} {key}= parameters in one request")
    values = list(dict.fromkeys(v for v in raw if v))
    if not 1 <= len(values) <= most:
        raise HTTPException(400, f"give 1 to {most} distinct {key}= parameters")
    return values


def _cannot_show(run_id: str, exc: BaseException) -> str:
    """One line for an unexpected failure while reading a run (a journal nested too deep, ...)."""
    return f"run {redact_text(run_id)}: cannot be shown ({type(exc).__name__}: {redact_text(str(exc))[:200]})"


class StoreUnreadable(HTTPException):
    """A run whose store.sqlite cannot be read (corrupt, truncated, not a database): 503, one line."""

    def __init__(self, run_id: str, exc: BaseException):
        super().__init__(503, f"run {run_id}: store.sqlite cannot be read: {store_error(exc).split(': ', 1)[1]}")


def create_app(root: str | Path, loopback_only: bool = True, hosts: set[str] | None = None,
               public: bool | None = None, max_streams: int = MAX_STREAMS) -> Starlette:
    """The dashboard app over `root`. `hosts`: the Host names answered besides the loopback ones
    (default: loopback only). `public` (default: not loopback_only) hides private runs and notes.
    At most `max_streams` live streams at once (503 past that): a stream's place is counted and taken
    in the request's first step, before anything is awaited, so a burst cannot pass the limit; the
    streams poll their stores on STREAM_THREADS threads of their own, so they never queue the API."""
    root = Path(root)
    open_streams = [0]
    stream_threads = anyio.CapacityLimiter(STREAM_THREADS)

    async def in_stream_thread(fn, *args):
        return await anyio.to_thread.run_sync(fn, *args, limiter=stream_threads)

    def release_stream():
        open_streams[0] -= 1
    public = (not loopback_only) if public is None else public
    lab_index = LabIndex(root, public=public)   # one run index for every route, the ladder pages' too
    runs = Runs(lab_index)

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
        ids = _distinct(request, "run", 12)
        for run_id in ids:
            runs.get(run_id)
        return page("compare", runs=ids)

    def api(fn):
        async def endpoint(request: Request):
            try:
                payload = await run_in_threadpool(fn, request)
            except (sqlite3.DatabaseError, OSError) as exc:   # a damaged store: one line, no traceback
                raise StoreUnreadable(request.query_params.get("run", "?")[:200], exc) from None
            except HTTPException:
                raise
            except Exception as exc:   # anything else unexpected: one line, never a traceback in the log
                raise HTTPException(500, _cannot_show(request.query_params.get("run", "?")[:200], exc)) from None
            return JSONResponse(payload, headers={"Cache-Control": "no-cache"})
        return endpoint

    def list_runs(request: Request):
        now = time.time()
        return {"root": redact_text(root.resolve().name), "generated": now,
                "runs": run_list.summaries(sorted(runs.all().items()), now)}   # cached, shared by all tabs

    def run_meta(request: Request):
        run_id = _one(request, "run")
        return data.run_meta(run_id, runs.get(run_id), root=root, public=public)

    def chain(request: Request):
        """The run's chain and head, as the published SITE/runs/<run>/chain.json holds them."""
        run_id = _one(request, "run")
        found = site_chain.run_chain(runs.get(run_id), run_id)
        if found is None:
            raise HTTPException(404, f"run {redact_text(run_id[:200])!r} has no chained event yet")
        return found

    def series(request: Request):
        run_dir = runs.get(_one(request, "run"))
        names = _distinct(request, "name", data.MAX_NAMES)
        start, end = _range(request)
        points = _int_param(request, "points", data.DEFAULT_POINTS, 2, data.MAX_POINTS)
        if len(names) * points > MAX_WORK:
            raise HTTPException(400, f"{len(names)} names x {points} points is more than {MAX_WORK:,}; "
                                     "ask for fewer names or points")
        started = time.monotonic()
        out: dict = {}
        with data.StoreReader(run_dir) as reader:
            for name in names:
                if time.monotonic() - started > REQUEST_SECONDS:
                    raise HTTPException(503, f"this request asks for too much at once (over {REQUEST_SECONDS:g} s); "
                                             "ask for fewer names or a shorter range")
                out.update(data.series_payload(reader, [name], start, end, points)["series"])
        return {"series": out, "start": start, "end": end, "points": points}

    def lab_name() -> str:
        return redact_text(root.resolve().name)

    def feed(request: Request) -> str:
        """Atom 1.0: the whole lab's newest entries, or one run's (?run=ID); absolute links."""
        base = str(request.base_url)
        if "run" in request.query_params:
            run_id = _one(request, "run")
            return feeds.run_feed(run_id, runs.get(run_id), root, public, base, lab_name())
        return feeds.lab_feed(runs.all(), root, public, base, lab_name())

    async def feed_atom(request: Request):
        try:
            text = await run_in_threadpool(feed, request)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StoreUnreadable(request.query_params.get("run", "?")[:200], exc) from None
        except HTTPException:
            raise
        except Exception as exc:
            raise HTTPException(500, _cannot_show(request.query_params.get("run", "?")[:200], exc)) from None
        return Response(text, media_type="application/atom+xml; charset=utf-8", headers={"Cache-Control": "no-cache"})

    def incidents(request: Request):
        return {"incidents": feeds.lab_incidents(runs.all(), root, public)}

    async def incidents_page(request: Request):
        if not (FRONTEND / "incidents.html").is_file():
            raise HTTPException(404, "the incidents page is not installed (frontend/incidents.html); see /api/incidents")
        return page("incidents")

    def search(request: Request):
        raw = request.query_params.getlist("q")
        if len(raw) > 1:
            raise HTTPException(400, "expected at most one q= parameter")
        try:
            q = search_mod.check_query(raw[0] if raw else None)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return search_mod.search(runs.all(), q, public, root=root)

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
            return {"events": data.events_payload(reader, after, public=public)}

    async def stream(request: Request):
        raw = request.query_params.getlist("run")
        if len(raw) > MAX_RAW_NAMES:
            raise HTTPException(400, f"at most {MAX_RAW_NAMES} run= parameters in one request")
        ids = list(dict.fromkeys(i for i in raw if i))
        if len(ids) > 12:
            raise HTTPException(400, "a stream follows at most 12 runs")
        if open_streams[0] >= max_streams:   # no await since the request began: the check and the
            raise HTTPException(503, f"{open_streams[0]} live pages are open, the most this server follows at once; "
                                     "close some and reload")
        dirs = [(i, runs.get(i)) for i in ids]
        open_streams[0] += 1                 # place taken here, given back by CountedStream
        return CountedStream(_closing(_events(dirs)), release_stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def _open_cursors(dirs) -> tuple[list, str]:
        cursors: list = []
        for run_id, run_dir in dirs:
            try:
                cursors.append(data.Cursor(run_id, run_dir, public=public, root=root))
            except (sqlite3.DatabaseError, OSError) as exc:
                for c in cursors:
                    c.close()
                return [], StoreUnreadable(run_id, exc).detail
            except Exception as exc:   # anything else: one error event, never a traceback
                for c in cursors:
                    c.close()
                return [], _cannot_show(run_id, exc)
        return cursors, ""

    def _poll(cursors) -> tuple[list, str]:
        updates = []
        for c in cursors:
            try:
                update = c.poll()
            except (sqlite3.DatabaseError, OSError) as exc:
                return updates, StoreUnreadable(c.run_id, exc).detail
            except data.RunMadePrivate as exc:   # a public server stops following it at once
                return updates, str(exc)
            except Exception as exc:
                return updates, _cannot_show(c.run_id, exc)
            if update:
                updates.append(update)
        return updates, ""

    async def _closing(events):
        try:
            async for message in events:
                yield message
        finally:
            await events.aclose()

    async def _events(dirs):
        """One page's stream: `hello` once the cursors are set (the page loads its data after that,
        so nothing falls between), then `update` messages, or `runs` summaries on the run list.
        A run store that cannot be read ends the stream with one `error` event (the page then stops
        reconnecting and shows the message)."""
        cursors, failed = await in_stream_thread(_open_cursors, dirs)
        if failed:
            yield f"retry: 60000\nevent: error\ndata: {json.dumps({'error': failed})}\n\n"
            return
        try:
            yield f"event: hello\ndata: {json.dumps({'runs': [c.run_id for c in cursors], 'time': time.time()})}\n\n"
            last_sent, last_summary = time.monotonic(), ""
            while True:
                if cursors:
                    updates, failed = await in_stream_thread(_poll, cursors)
                    for update in updates:
                        yield f"event: update\ndata: {json.dumps(update)}\n\n"
                        last_sent = time.monotonic()
                    if failed:
                        yield f"retry: 60000\nevent: error\ndata: {json.dumps({'error': failed})}\n\n"
                        return
                    await asyncio.sleep(POLL_SECONDS)
                else:
                    listing = await in_stream_thread(list_runs, None)
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
        Route("/api/chain", api(chain)),
        Route("/api/series", api(series)),
        Route("/api/vectors", api(vectors)),
        Route("/api/events", api(events)),
        Route("/api/stream", stream),
        Route("/api/incidents", api(incidents)),
        Route("/api/search", api(search)),
        Route("/incidents", incidents_page),
        Route("/feed.atom", feed_atom),
        *atlas_routes(root),
        *ladder_routes(root, public=public, index=lab_index),
        Mount("/static", StaticFiles(directory=FRONTEND, follow_symlink=False), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    return MethodAndHostGuard(app, hosts if hosts is not None else set(LOOPBACK_HOSTS))


def serve(root: str | Path, host: str = "127.0.0.1", port: int = 8080, log_level: str = "warning",
          allow_hosts: tuple[str, ...] = ()) -> None:
    """Run the dashboard until interrupted (the command checks DIR and the port first)."""
    import uvicorn

    loopback = is_loopback_name(host.lower())
    app = create_app(root, loopback_only=loopback, hosts=allowed_hosts(host, allow_hosts))
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=1, access_log=False)

