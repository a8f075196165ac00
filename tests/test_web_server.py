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

from glassroom.observe.store import StoreWriter
from web_helpers import REPO, write_run


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
    return subprocess.run([sys.executable, "-m", "glassroom", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def test_cli_errors_are_one_line(tmp_path, lab):
    out = run_cli("serve", str(tmp_path / "missing"))
    assert out.returncode == 2 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        out = run_cli("serve", str(lab), "--port", str(busy.getsockname()[1]))
    assert out.returncode == 2 and "in use" in out.stderr and out.stderr.count("\n") == 1
    out = run_cli("serve", str(lab), "--port", "70000")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    for bad in ("soon", "0", "-5", "nan"):
        out = run_cli("publish", str(lab), "--out", str(tmp_path / "site"), "--watch", bad)
        assert out.returncode == 2 and "--watch" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    (tmp_path / "notasite").mkdir()
    (tmp_path / "notasite" / "thesis.tex").write_text("precious")
    out = run_cli("publish", str(lab), "--out", str(tmp_path / "notasite"))
    assert out.returncode == 2 and "not a glassroom site" in out.stderr
    assert (tmp_path / "notasite" / "thesis.tex").read_text() == "precious"
