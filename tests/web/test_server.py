"""`glassroom serve` as a user meets it: a real uvicorn server on 127.0.0.1 and a free port, over
run stores written with StoreWriter. Safety (GET/HEAD only, no path escapes, 4xx for bad queries,
loopback Host only), the JSON API, the live stream, redaction, CLI errors, and no torch import."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time

import pytest

from cli_helpers import glassroom_in_process
from glassroom.observe.store import StoreWriter
from web_helpers import REPO, write_run
import random
import re
import string
from pathlib import Path

from starlette.testclient import TestClient

from glassroom.observe.incidents import open_incident
from glassroom.web.server import create_app


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "hero", steps=1200, config={"train": {"lr": 1e-3}, "wandb": {"api_key": "wb-SECRET-123"},
                                               "hf_token": "hf_SECRETSECRETSECRET1234", "env": {"HOME": "/root"}})
    write_run(root / "ladder" / "rung-1", steps=400, seed=1, state="finished")
    (root / "outside.txt").write_text("not a run")
    return root


def request(server, method: str, path: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    """A raw request: the path goes out exactly as written (no client-side normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest(method, path, skip_host=bool(headers and "Host" in headers), skip_accept_encoding=True)
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, dict(resp.getheaders())


def get_json(server, path: str):
    status, body, _ = request(server, "GET", path)
    assert status == 200, (path, status, body[:200])
    return json.loads(body)


def test_run_list_names_every_run_with_latest_values(server):
    runs = {r["id"]: r for r in get_json(server, "/api/runs")["runs"]}
    assert set(runs) == {"hero", "ladder/rung-1"}
    assert runs["hero"]["state"] == "running" and runs["hero"]["step"] == 1200
    assert runs["ladder/rung-1"]["state"] == "finished"
    assert 2.0 < runs["hero"]["latest"]["loss"] < 4.0
    assert runs["hero"]["anomalies"] == 0 and runs["hero"]["events"] > 3


def test_pages_and_static_files_are_served(server):
    for path in ("/", "/runs/hero", "/runs/ladder/rung-1", "/compare?run=hero&run=ladder/rung-1",
                 "/static/vendor/uPlot.iife.min.js", "/static/pages.js", "/static/style.css"):
        status, body, _ = request(server, "GET", path)
        assert status == 200, path
        assert body
    status, body, _ = request(server, "HEAD", "/runs/hero")
    assert status == 200 and body == b""
    status, body, _ = request(server, "GET", "/static/vendor/uPlot.iife.min.js")
    assert body.startswith(b"/*! https://github.com/leeoniya/uPlot")   # the MIT header is kept


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("path", ["/", "/api/runs", "/api/series?run=hero&name=train/loss", "/nowhere"])
def test_only_get_and_head(server, method, path):
    status, _, headers = request(server, method, path)
    assert status == 405
    assert headers.get("allow") == "GET, HEAD"


@pytest.mark.parametrize("path", [
    "/static/../../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/static//etc/passwd",
    "/runs/../../etc/passwd",
    "/runs/%2e%2e/outside.txt",
    "/runs//etc",
    "/api/series?run=/etc/passwd&name=x",
    "/api/series?run=../hero&name=train/loss",
    "/api/series?run=hero/../ladder/rung-1&name=train/loss",
    "/api/run?run=%2Fetc",
    "/api/run?run=outside.txt",
    "/api/run?run=.",
    "/api/vectors?run=C:%5CWindows&name=x",
])
def test_no_path_escapes(server, path):
    status, body, _ = request(server, "GET", path)
    assert status in (400, 404), (path, status)
    assert b"root:" not in body and b"not a run" not in body


@pytest.mark.parametrize("query", [
    "/api/series?run=hero&name=train/loss&points=abc",
    "/api/series?run=hero&name=train/loss&points=1",
    "/api/series?run=hero&name=train/loss&points=99999999",
    "/api/series?run=hero&name=train/loss&points=nan",
    "/api/series?run=hero&name=train/loss&start=10&end=5",
    "/api/series?run=hero&name=train/loss&start=1e999",
    "/api/series?run=hero&name=train/loss&start=%ff%fe",
    "/api/series?run=hero",
    "/api/series?name=train/loss",
    "/api/series?run=hero&run=hero&name=train/loss",
    "/api/vectors?run=hero",
    "/api/events?run=hero&after=-1",
    "/api/run",
    "/compare",
    "/compare?run=nope",
    "/api/stream?run=nope",
    "/api/series?run=hero&" + "&".join(f"name=n{i}" for i in range(401)),
])
def test_malformed_queries_get_4xx_and_server_survives(server, query):
    status, body, _ = request(server, "GET", query)
    assert 400 <= status < 500, (query, status, body[:200])
    assert get_json(server, "/api/runs")["runs"]


def test_dns_rebinding_host_is_refused_on_loopback(server):
    status, _, _ = request(server, "GET", "/api/runs", headers={"Host": "attacker.example:8080"})
    assert status == 421
    assert request(server, "GET", "/api/runs", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_series_are_downsampled_and_keep_the_last_point(server):
    full = get_json(server, "/api/series?run=hero&name=train/loss&points=50")["series"]["train/loss"]
    assert full["n"] == 1200 and len(full["steps"]) <= 51
    assert full["steps"][-1] == 1200 and full["min"][-1] == full["max"][-1]
    zoom = get_json(server, "/api/series?run=hero&name=train/loss&start=100&end=199&points=500")["series"]["train/loss"]
    assert zoom["steps"] == list(range(100, 200)) and zoom["min"] == zoom["max"]   # detail on zoom
    vec = get_json(server, "/api/vectors?run=hero&name=moe/layer_1/tokens_per_expert&points=20")
    assert vec["width"] == 8 and 1 < len(vec["steps"]) <= 20 and len(vec["values"][0]) == 8


def test_run_meta_has_events_and_redacted_config(server):
    meta = get_json(server, "/api/run?run=hero")
    assert "train/loss" in meta["names"] and "moe/layer_3/bias" in meta["vector_names"]
    assert [e["kind"] for e in meta["events"]][0] == "start"
    text = json.dumps(meta)
    assert "SECRET" not in text and "/root" not in text
    assert meta["config"]["wandb"]["api_key"] == "<redacted>" and meta["config"]["train"]["lr"] == 1e-3


def test_stream_delivers_a_new_point_within_two_seconds(server, lab):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/api/stream?run=ladder/rung-1")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/event-stream")

    def next_event():
        kind, data = None, None
        while True:
            line = resp.fp.readline().decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and kind:
                return kind, data

    assert next_event()[0] == "hello"
    with StoreWriter(lab / "ladder" / "rung-1") as w:
        w.log(401, {"train/loss": 1.2345})
        w.flush()
        written = time.monotonic()
        w.event("note", "hello from the test", 401)
    series, events = {}, []
    while "train/loss" not in series or not events:   # one poll may see the event before the point
        kind, data = next_event()
        assert kind == "update" and data["run"] == "ladder/rung-1"
        if "train/loss" in data["series"] and "train/loss" not in series:
            latency = time.monotonic() - written
        series.update(data["series"])
        events += data["events"]
    assert series["train/loss"] == {"steps": [401], "values": [1.2345]}
    assert latency < 2.0
    assert events[-1]["text"] == "hello from the test"
    conn.close()


def test_dashboard_never_imports_torch(lab, tmp_path):
    code = f"""
import sys, urllib.request
from glassroom.cli import build_parser
from glassroom.web.server import create_app
from glassroom.web.publish import publish
from glassroom.web import data
build_parser()
create_app({str(lab)!r})
publish({str(lab)!r}, {str(tmp_path / 'site')!r})
with data.StoreReader({str(lab / 'hero')!r}) as r:
    data.series_payload(r, ['train/loss'])
assert 'torch' not in sys.modules, 'torch was imported'
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def run_cli(*args, timeout=30):
    """Through `python -m glassroom`: the one-line error and exit code as a user's shell gets them."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def run_here(*args, timeout=30):
    """The same command in the test process (the process itself is not what is checked)."""
    return glassroom_in_process(*args, cwd=REPO)


@pytest.mark.slow
def test_cli_errors_are_one_line(tmp_path, lab):
    out = run_cli("serve", str(tmp_path / "missing"))
    assert out.returncode == 2 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        out = run_here("serve", str(lab), "--port", str(busy.getsockname()[1]))
    assert out.returncode == 2 and "in use" in out.stderr and out.stderr.count("\n") == 1
    out = run_here("serve", str(lab), "--port", "70000")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    for bad in ("soon", "0", "-5", "nan"):
        out = run_here("publish", str(lab), "--out", str(tmp_path / "site"), "--watch", bad)
        assert out.returncode == 2 and "--watch" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    (tmp_path / "notasite").mkdir()
    (tmp_path / "notasite" / "thesis.tex").write_text("precious")
    out = run_cli("publish", str(lab), "--out", str(tmp_path / "notasite"))
    assert out.returncode == 2 and "holds thesis.tex" in out.stderr
    assert (tmp_path / "notasite" / "thesis.tex").read_text() == "precious"




BAD_HOSTS = ["127.attacker.example", "127.0.0.1.nip.io", "127.evil.com", "attacker.example", "localhost.evil.com",
             "127.1", "0x7f.0.0.1", ""]


GOOD_HOSTS = ["127.0.0.1:8080", "localhost", "[::1]:8080"]


WRITE_METHODS = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"]


@pytest.fixture(scope="module")
def app_and_paths(tmp_path_factory):
    """The dashboard app over a small lab, and one concrete path for every route the app declares."""
    from starlette.routing import Mount, Route

    from glassroom.web.server import create_app
    from web_helpers import write_run

    lab = tmp_path_factory.mktemp("routes")
    write_run(lab / "hero", steps=60)
    app = create_app(lab)
    inner = app.app  # MethodAndHostGuard wraps the Starlette app
    paths = []
    for route in inner.routes:
        if isinstance(route, Mount):
            paths.append(route.path + "/style.css")
        else:
            assert isinstance(route, Route), route
            assert set(route.methods or ()) <= {"GET", "HEAD"}, (route.path, route.methods)
            path = re.sub(r"\{[^}]+\}", "hero", route.path)
            paths.append(path + ("?run=nope" if path == "/api/stream" else "?run=hero"))
    assert len(paths) >= 14 and "/api/events?run=hero" in paths and "/static/style.css" in paths
    return app, paths


def _client(app):
    from starlette.testclient import TestClient

    return TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False)


def test_every_route_refuses_every_method_but_get_and_head(app_and_paths):
    app, paths = app_and_paths
    with _client(app) as client:
        for path in paths:
            assert client.get(path).status_code not in (405, 421), path  # the path reaches its route
            for method in WRITE_METHODS:
                response = client.request(method, path)
                assert response.status_code == 405, (method, path, response.status_code)
                assert response.headers.get("allow") == "GET, HEAD", (method, path)


def test_every_route_refuses_foreign_host_headers(app_and_paths):
    app, paths = app_and_paths
    with _client(app) as client:
        for path in paths:
            for host in BAD_HOSTS:
                response = client.get(path, headers={"host": host})
                assert response.status_code == 421, (host, path, response.status_code)
                assert "default-src 'self'" in response.headers["content-security-policy"]
            for host in GOOD_HOSTS:
                assert client.get(path, headers={"host": host}).status_code not in (405, 421), (host, path)




TOKEN = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


def make_run(run_dir: Path, notes=(), private=()) -> Path:
    with StoreWriter(run_dir) as w:
        for s in range(1, 4):
            w.log(s, {"train/loss": float(s)})
        for i, text in enumerate(notes):
            w.event("note", text, i)
        for text in private:
            w.event("note", text, 2, {"private": True})
        w.set_status("finished", 3)
    return run_dir


def test_an_undecodable_byte_in_an_incident_title_leaves_every_page_readable(tmp_path):
    # Before: the event's text got U+FFFD but its data kept a lone surrogate: /api/incidents and the
    # run page answered 500 from then on.
    import os

    root = tmp_path / "lab"
    run = make_run(root / "hero")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable.encode(), b"-m", b"glassroom", b"incident", b"open", bytes(run), b"--step", b"2",
                           b"bad \xff byte"], capture_output=True, timeout=60, env=env)   # the byte through argv
    assert proc.returncode == 0, proc.stderr
    # In-process, the argument as Python decodes argv (surrogateescape).
    proc = glassroom_in_process("incident", "resolve", run, "1", os.fsdecode(b"it was \xfe"))
    assert proc.returncode == 0, proc.stderr
    app = create_app(root, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        incidents = client.get("/api/incidents")
        page = client.get("/api/run", params={"run": "hero"})
    assert incidents.status_code == 200 and page.status_code == 200
    [one] = incidents.json()["incidents"]
    assert one["title"] == "bad \ufffd byte" and one["resolution"] == "it was \ufffd"


def test_run_pages_show_a_huge_note_bounded_and_a_hand_written_kind_redacted(tmp_path, capsys):
    from glassroom.cli import main
    from glassroom.web.data import run_meta

    root = tmp_path / "lab"
    run = make_run(root / "hero", notes=["y" * (20_000 - 8) + " ghp_" + TOKEN + " " + "z" * 5_000_000])
    with StoreWriter(run) as w:   # a kind no glassroom writes, holding a token
        w.event("ghp_" + TOKEN, "hand-written", 2)
    open_incident(run, "\x1b[2J\x1b[31mred\rtitle", step=2)
    meta = run_meta("hero", run, root=root, public=True)
    note = next(e for e in meta["events"] if e["kind"] == "note")
    assert len(note["text"]) == 20_000 and note["text"].endswith("…")   # not 5 MB to every page
    assert TOKEN[:8] not in json.dumps(meta)                            # the token across the cut went whole
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        found = client.get("/api/search", params={"q": "hand-written"}).json()["events"]
        streamed = client.get("/api/events", params={"run": "hero"}).json()["events"]
    assert found and TOKEN[:8] not in json.dumps(found) and TOKEN[:8] not in json.dumps(streamed)
    assert main(["incident", "list", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "\x1b" not in listed and "\r" not in listed and "red title" in listed.replace("  ", " ")




RNG = random.Random()


ALNUM = string.ascii_letters + string.digits


def rand(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


PRIVATE_MARK = "private-marker-" + rand(ALNUM, 12)


def request_2(server, path: str, host: str | None = None, method: str = "GET") -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest(method, path, skip_host=host is not None, skip_accept_encoding=True)
    if host is not None and host != "-":
        conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, {k.lower(): v for k, v in resp.getheaders()}


def run_cli_2(*args, timeout=60):
    return glassroom_in_process(*args, cwd=REPO)


def one_line_error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr


def test_serve_and_publish_bad_inputs_are_one_line(tmp_path):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    lab = write_run(tmp_path / "lab" / "r", steps=10).parent
    assert "is not a folder" in one_line_error(run_cli_2("serve", str(afile)))
    assert "is not a folder" in one_line_error(run_cli_2("publish", str(afile), "--out", str(tmp_path / "s")))
    one_line_error(run_cli_2("serve", "", "--port", "8"))
    one_line_error(run_cli_2("publish", "", "--out", str(tmp_path / "s")))
    assert "--out is empty" in one_line_error(run_cli_2("publish", str(lab), "--out", ""))
    one_line_error(run_cli_2("serve", str(lab), "--port", "0"))
    one_line_error(run_cli_2("serve", str(lab), "--port", "http"))
    one_line_error(run_cli_2("serve", str(lab), "--allow-host", "evil.com:80/x"))
    one_line_error(run_cli_2("serve", str(lab), "--host", "no-such-host.invalid"))
    assert "folder above it" in one_line_error(run_cli_2("publish", str(lab), "--out", str(lab)))
    assert "folder above it" in one_line_error(run_cli_2("publish", str(lab / "r"), "--out", str(lab)))
    one_line_error(run_cli_2("publish", str(lab), "--out", str(afile)))
    assert afile.read_text() == "x"
    for bad in ("0", "-1"):
        one_line_error(run_cli_2("publish", str(lab), "--out", str(tmp_path / "s"), "--watch", bad))
    out = run_cli_2("publish", str(lab), "--out", str(lab / "site"))   # a site inside DIR is fine
    assert out.returncode == 0 and (lab / "site" / "site.json").is_file()
    out = run_cli_2("publish", str(lab), "--out", str(lab / "site"))   # and re-exporting it does not find itself
    assert out.returncode == 0 and json.loads((lab / "site" / "site.json").read_text())["runs"] == ["r"]


def test_the_live_stream_redacts_and_hides_private_notes_when_public(tmp_path):
    from glassroom.web.data import Cursor

    run = write_run(tmp_path / "r", steps=10)
    secret = "hf_" + rand(ALNUM, 30)
    public, owner = Cursor("r", run, public=True), Cursor("r", run)
    with StoreWriter(run) as w:
        w.event("note", f"hidden {PRIVATE_MARK}", 10, {"private": True})
        w.event("note", f"shown with {secret}", 10)
    seen = public.poll()["events"]
    assert [e["text"] for e in seen] == ["shown with <redacted>"]
    assert [e["text"] for e in owner.poll()["events"]] == [f"hidden {PRIVATE_MARK}", "shown with <redacted>"]
    public.close(), owner.close()


def test_host_allow_list():
    from glassroom.web.server import allowed_hosts, host_name, is_loopback_name

    assert host_name("127.0.0.1:8080") == "127.0.0.1" and host_name("[::1]:80") == "[::1]" and host_name("::1") == "::1"
    for good in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"):
        assert is_loopback_name(good), good
    for bad in ("127.evil.com", "127.0.0.1.nip.io", "127.1", "0177.0.0.1", "127.0.0.256", "localhost.evil.com", ""):
        assert not is_loopback_name(bad), bad
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "lab.example.org" in allowed_hosts("10.1.2.3", ("Lab.Example.org",))
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0") and "10.1.2.3" not in allowed_hosts("127.0.0.1")


def test_live_streams_at_once_are_bounded(tmp_path):
    import threading

    import uvicorn

    from glassroom.web.server import create_app
    from web_helpers import free_port

    run = write_run(tmp_path / "lab" / "r", steps=10)
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(run.parent, max_streams=2), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 20
        while not srv.started and time.time() < deadline:
            time.sleep(0.05)
        target = type("S", (), {"port": port})()

        def open_stream():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/stream?run=r")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.readline().startswith(b"event: hello")
            return conn

        first, second = open_stream(), open_stream()
        status, body, _ = request_2(target, "/api/stream?run=r")
        assert status == 503 and "live pages are open" in json.loads(body)["error"]
        first.close()
        deadline = time.time() + 10   # the closed page's stream ends at its next write or poll
        while request_2(target, "/api/runs")[0] == 200 and time.time() < deadline:
            with StoreWriter(run) as w:
                w.event("note", "wake the stream", 10)
            try:
                third = open_stream()
                break
            except AssertionError:
                time.sleep(0.2)
        else:
            pytest.fail("a closed stream did not free its place")
        second.close(), third.close()
    finally:
        srv.should_exit = True
        thread.join(10)




def client(root: Path) -> TestClient:
    return TestClient(create_app(root), base_url="http://127.0.0.1:8080", raise_server_exceptions=False)


def run_note(*args: str) -> subprocess.CompletedProcess:
    return glassroom_in_process("note", *args)


@pytest.mark.parametrize("host", ["127.0.0.1:8080@evil.com", "localhost:abc", "[::1]x", "localhost:80:evil"])
def test_a_host_header_with_junk_after_the_name_is_refused(tmp_path, host):
    with StoreWriter(tmp_path / "r") as w:
        w.log(1, {"train/loss": 1.0})
    c = client(tmp_path)
    assert c.get("/api/runs", headers={"host": host}).status_code == 421
    assert c.get("/api/runs", headers={"host": "127.0.0.1:8080"}).status_code == 200   # the control


def test_a_journal_nested_too_deep_is_one_line_in_the_api_and_the_stream(tmp_path):
    import sqlite3

    run = tmp_path / "r"
    with StoreWriter(run) as w:
        w.log(1, {"train/loss": 1.0})

    def plant_deep_event():   # an edited database: event data nested 100,000 deep, in one statement (the
        # stream polls every 0.25 s: an event written first and edited after may be read before the edit)
        conn = sqlite3.connect(run / "store.sqlite")
        conn.execute("INSERT INTO events (time, step, kind, text, data) VALUES (?, 1, 'note', 'deep', ?)",
                     (time.time(), "[" * 100_000 + "]" * 100_000))
        conn.commit()
        conn.close()

    c = client(tmp_path)
    deadline = time.monotonic() + 60   # a stream that never reports the error fails here instead of hanging
    with c.stream("GET", "/api/stream?run=r") as s:
        body, planted = "", False
        for chunk in s.iter_text():
            body += chunk
            if "event: hello" in body and not planted:
                plant_deep_event()
                planted = True
            if "event: error" in body or time.monotonic() > deadline:
                break
    assert planted and "event: error" in body and "cannot be shown (RecursionError" in body, body[-300:]
    r = c.get("/api/run?run=r")
    assert r.status_code == 500 and "\n" not in r.json()["error"] and r.json()["error"].startswith("run r: cannot be shown")


def test_a_public_stream_stops_when_its_run_is_marked_private(tmp_path):
    run = tmp_path / "r"
    with StoreWriter(run) as w:
        w.log(1, {"train/loss": 1.0})
    app = create_app(tmp_path, loopback_only=False, hosts={"127.0.0.1"})
    c = TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False)
    with c.stream("GET", "/api/stream?run=r") as s:
        body, marked = "", False
        for chunk in s.iter_text():
            body += chunk
            if "event: hello" in body and not marked:
                assert run_note(str(run), "--private-run").returncode == 0
                with StoreWriter(run) as w:
                    w.log(2, {"train/loss": 0.5})
                marked = True
            if marked and ("event: error" in body or "event: update" in body):
                break
    assert "run r was marked private" in body
    assert '"train/loss"' not in body.split("event: hello", 1)[1]   # the new point was never sent
    assert c.get("/api/run?run=r").status_code == 404
