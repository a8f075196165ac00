"""`glassroom serve` and `glassroom publish` over a lab that holds real mistakes: secrets of every
shape planted in configs, notes and events (random values made here), private runs and notes,
symlinks out of the lab for every kind of file, a corrupt run store, a YAML alias bomb, hostile Host
headers and oversized requests. Nothing planted may reach the site or any response; controls must."""

from __future__ import annotations

import http.client
import json
import os
import random
import string
import subprocess
import sys
import time

import pytest
import yaml

from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from web_helpers import REPO, Chromium, Server, chromium_path, write_prediction, write_run

RNG = random.Random()
ALNUM = string.ascii_letters + string.digits


def rand(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def make_secrets() -> dict[str, str]:
    """Fresh secret values, one per shape; each must vanish everywhere."""
    return {
        "wandb": rand("0123456789abcdef", 40), "hf": "hf_" + rand(ALNUM, 34), "openai": "sk-proj-" + rand(ALNUM, 40),
        "anthropic": "sk-ant-api03-" + rand(ALNUM, 50), "github": "ghp_" + rand(ALNUM, 36),
        "github_pat": "github_pat_" + rand(ALNUM, 50), "slack": "xoxb-" + rand(string.digits, 12) + "-" + rand(ALNUM, 20),
        "aws_id": "AKIA" + rand(string.ascii_uppercase + string.digits, 16),
        "aws_secret": rand(ALNUM + "/+", 39) + "Z",
        "jwt": "eyJ" + rand(ALNUM, 16) + ".eyJ" + rand(ALNUM, 24) + "." + rand(ALNUM, 30),
        "pem": rand(ALNUM, 60), "url_pw": rand(ALNUM, 14), "db_pw": rand(ALNUM, 12), "auth_pass": rand(ALNUM, 12),
        "cli_key": rand(ALNUM, 26), "note_key": "hf_" + rand(ALNUM, 30), "event_key": "sk-" + rand(ALNUM, 36),
        "query_token": rand(ALNUM, 22),
    }


SECRETS = make_secrets()
S = SECRETS
DIGEST = rand("0123456789abcdef", 64)
COMMIT = rand("0123456789abcdef", 40)
PRIVATE_MARK = "private-marker-" + rand(ALNUM, 12)
OUTSIDE_MARK = "outside-marker-" + rand(ALNUM, 12)
CONTROLS = ["https://huggingface.co/meta-llama/Llama-3-8B", "meta-llama/Llama-3-8B", COMMIT, DIGEST,
            "tokens_per_step", "max_tokens", "/data/corpora/prose", "db.internal:5432/runs"]

CONFIG = {
    "model": {"name": "meta-llama/Llama-3-8B", "d_model": 64},
    "train": {"lr": 1e-3, "tokens_per_step": 4096, "max_tokens": 128, "data": "/data/corpora/prose"},
    "wandb": {"project": "lab", "api_key": S["wandb"]},
    "auth": {"user": "bob", "pass": S["auth_pass"]},
    "launcher": {
        "command": f"WANDB_API_KEY={S['wandb']} HF_TOKEN={S['hf']} torchrun train.py --api-key {S['cli_key']}",
        "env": [f"HF_TOKEN={S['hf']}", "PATH=/usr/bin"],
        "args": [f"OPENAI_API_KEY={S['openai']}", "--api-key", S["cli_key"], "--steps", "10"],
        "repo": f"https://bob:{S['url_pw']}@git.example.org/lab.git",
        "home": "https://huggingface.co/meta-llama/Llama-3-8B",
    },
    "services": [{"name": "db", "url": f"postgres://runs:{S['db_pw']}@db.internal:5432/runs"},
                 {"name": "slack", "hook": f"posting with {S['slack']} to #runs"}],
    "notes": f"used {S['aws_id']} and aws secret {S['aws_secret']} and {S['github']} and {S['github_pat']} "
             f"and {S['anthropic']} and jwt {S['jwt']}",
    "ssh": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{S['pem']}\n-----END OPENSSH PRIVATE KEY-----",
    "callback": f"https://example.org/hook?access_token={S['query_token']}&run=1",
    "code": {"commit": COMMIT},
}

ALIAS_BOMB = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""


def wide_alias_bomb() -> str:
    """Few nodes, huge once expanded: one 200 KB string aliased 2,000 times (400 MB as JSON)."""
    return "big: &s " + "x" * 200_000 + "\nrefs: [" + ",".join(["*s"] * 2000) + "]\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    root, outside = base / "lab", base / "outside"
    outside.mkdir()
    # The hero: every secret shape in its config, in a note, in an event; a sealed prediction.
    write_run(root / "hero", steps=300, config=CONFIG)
    write_prediction(root / "hero", 300, metric="train/loss",
                     seal={"digest": DIGEST, "created": 1.7e9, "commit": COMMIT})
    with StoreWriter(root / "hero") as w:
        w.event("note", f"rotated the key: HF_TOKEN={S['note_key']} (old one was {S['hf']})", 150)
        w.event("anomaly", f"loss spike while {S['event_key']} was in the env", 160, {"auth": S["event_key"], "step": 160})
        w.event("note", f"{PRIVATE_MARK}: ask ops about node 7", 170, {"private": True})
    # A run marked private.
    write_run(root / "scratch", steps=50, config={"train": {"lr": 1e-3}, "marker": PRIVATE_MARK})
    with StoreWriter(root / "scratch") as w:
        w.set_artifact("visibility", {"private": True})
    # Symlinks out of the lab, one per kind of file.
    write_run(outside / "foreign", steps=20, config={"marker": OUTSIDE_MARK})
    (root / "linked-store").mkdir()
    os.symlink(outside / "foreign" / "store.sqlite", root / "linked-store" / "store.sqlite")
    write_run(root / "linked-config", steps=20, config={"train": {"lr": 1e-3}})
    (outside / "config.yaml").write_text(yaml.safe_dump({"marker": OUTSIDE_MARK, "api_key": "x"}))
    (root / "linked-config" / "config.yaml").unlink()
    os.symlink(outside / "config.yaml", root / "linked-config" / "config.yaml")
    atlas = {"clusters": [{"id": 0, "terms": [OUTSIDE_MARK], "excerpts": []}], "points": {"x": [], "y": [], "text": []}}
    (outside / "atlas").mkdir()
    (outside / "atlas" / "atlas.json").write_text(json.dumps(atlas))
    (outside / "manifest.json").write_text(json.dumps({"name": OUTSIDE_MARK}))
    (root / "data" / "linked-atlas").mkdir(parents=True)
    (root / "data" / "linked-atlas" / "manifest.json").write_text(json.dumps({"name": "linked-atlas"}))
    os.symlink(outside / "atlas", root / "data" / "linked-atlas" / "atlas")
    (root / "data" / "linked-file").mkdir(parents=True)
    (root / "data" / "linked-file" / "manifest.json").write_text(json.dumps({"name": "linked-file"}))
    (root / "data" / "linked-file" / "atlas").mkdir()
    os.symlink(outside / "atlas" / "atlas.json", root / "data" / "linked-file" / "atlas" / "atlas.json")
    (root / "data" / "linked-manifest").mkdir(parents=True)
    os.symlink(outside / "manifest.json", root / "data" / "linked-manifest" / "manifest.json")
    # A real dataset whose atlas excerpts carry a token.
    (root / "data" / "real").mkdir(parents=True)
    (root / "data" / "real" / "manifest.json").write_text(json.dumps({"name": "real", "domains": {"code": {}}}))
    (root / "data" / "real" / "atlas").mkdir()
    (root / "data" / "real" / "atlas" / "atlas.json").write_text(json.dumps(
        {"clusters": [{"id": 0, "terms": ["code"], "excerpts": [{"id": "d1", "text": f"client = Client('{S['github']}')"}]}],
         "points": {"x": [0.0], "y": [0.0], "text": [f"token {S['openai']} in code"]}}))
    # A corrupt store and an alias-bomb config.
    (root / "broken").mkdir()
    (root / "broken" / "store.sqlite").write_bytes(RNG.randbytes(8192))
    write_run(root / "bomb", steps=20, config={"x": 1})
    (root / "bomb" / "config.yaml").write_text(ALIAS_BOMB)
    write_run(root / "widebomb", steps=20, config={"x": 1})
    (root / "widebomb" / "config.yaml").write_text(wide_alias_bomb())
    return root


def request(server, path: str, host: str | None = None, method: str = "GET") -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest(method, path, skip_host=host is not None, skip_accept_encoding=True)
    if host is not None and host != "-":
        conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, {k.lower(): v for k, v in resp.getheaders()}


def read_sse(server, path: str, until, timeout: float = 15) -> list[tuple[str, dict]]:
    """Server-sent events from `path` until `until(events)` is true or the stream ends."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    events, kind, data = [], None, None
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            try:
                line = resp.readline()   # chunked framing decoded; b"" when the stream ends
            except TimeoutError:
                break
            if not line:
                break
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and kind:
                events.append((kind, data))
                kind = None
                if until(events):
                    break
    finally:
        conn.close()
    return events


def assert_clean(text: str, where: str) -> None:
    for name, value in SECRETS.items():
        assert value not in text, f"{name} leaked into {where}"
    assert OUTSIDE_MARK not in text, f"a file outside the lab was read into {where}"


# ------------------------------------------------------------------------------------ publish

@pytest.fixture(scope="module")
def site(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    log: list[str] = []
    info = publish(lab, out, log=log.append)
    return out, info, log


def test_published_site_holds_no_planted_secret_and_keeps_the_controls(site):
    out, info, _ = site
    files = [p for p in out.rglob("*") if p.is_file()]
    for path in files:
        assert_clean(path.read_text(errors="replace"), str(path.relative_to(out)))
        assert PRIVATE_MARK not in path.read_text(errors="replace"), path
    meta = json.loads((out / "data" / info["generation"] / "runs" / "hero" / "meta.json").read_text())
    text = json.dumps(meta)
    for control in CONTROLS:
        assert control in text, control
    assert meta["artifacts"]["prediction"]["seal"]["digest"] == DIGEST
    assert meta["config"]["train"] == CONFIG["train"] and meta["config"]["auth"] == "<redacted>"
    assert meta["config"]["launcher"]["args"][2] == "<redacted>" and meta["config"]["launcher"]["args"][3] == "--steps"
    texts = [e["text"] for e in meta["events"]]
    assert any("HF_TOKEN=<redacted>" in t for t in texts) and any("loss spike while <redacted>" in t for t in texts)
    atlas = (out / "atlas" / "d" / "data" / "real" / "atlas.json").read_text()
    assert "client = Client('<redacted>')" in atlas


def test_private_runs_and_notes_are_left_out_of_the_site(site):
    out, info, log = site
    assert "scratch" not in info["runs"] and not (out / "runs" / "scratch").exists()
    assert not (out / "data" / info["generation"] / "runs" / "scratch").exists()
    assert any("scratch" in line and "private" in line for line in log)
    meta = json.loads((out / "data" / info["generation"] / "runs" / "hero" / "meta.json").read_text())
    assert not any(e["kind"] == "note" and PRIVATE_MARK in e["text"] for e in meta["events"])
    assert sum(e["kind"] == "note" for e in meta["events"]) == 2   # the run's own note and the rotated-key one


def test_publish_never_follows_symlinks_out_of_the_lab(site):
    out, info, _ = site
    assert "linked-store" not in info["runs"]
    meta = json.loads((out / "data" / info["generation"] / "runs" / "linked-config" / "meta.json").read_text())
    assert meta["config"] is None or "marker" not in meta["config"]   # the outside config.yaml is absent
    datasets = json.loads((out / "atlas" / "datasets.json").read_text())["datasets"]
    by_id = {d["id"]: d for d in datasets}
    assert "data/linked-manifest" not in by_id
    assert by_id["data/linked-atlas"]["atlas"] is False and by_id["data/linked-file"]["atlas"] is False
    assert not (out / "atlas" / "d" / "data" / "linked-atlas").exists()
    assert not (out / "atlas" / "d" / "data" / "linked-file").exists()


def test_publish_survives_the_corrupt_store_and_the_alias_bombs(site):
    out, info, log = site
    assert "broken" not in info["runs"]
    assert any(line.startswith("skipped broken: store unreadable:") for line in log), log
    for run in ("bomb", "widebomb"):
        meta_file = out / "data" / info["generation"] / "runs" / run / "meta.json"
        meta = json.loads(meta_file.read_text())
        assert meta["config"] is None
        assert meta["config_text"].startswith("# config.yaml could not be read: refused"), meta["config_text"][:200]
        assert meta_file.stat().st_size < 200_000
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert total < 20_000_000


# ------------------------------------------------------------------------------------ serve

API_ROUTES = ["/", "/runs/hero", "/compare?run=hero&run=linked-config", "/atlas", "/atlas/data/real",
              "/api/runs", "/api/run?run=hero", "/api/events?run=hero", "/api/series?run=hero&name=train/loss",
              "/api/vectors?run=hero&name=moe/layer_1/tokens_per_expert", "/api/atlas/list",
              "/api/atlas?dataset=data/real", "/api/run?run=linked-config", "/api/run?run=bomb",
              "/api/run?run=widebomb", "/static/pages.js"]


def test_no_planted_secret_in_any_api_response_or_the_stream(server, lab):
    for path in API_ROUTES:
        status, body, headers = request(server, path)
        assert status == 200, (path, status, body[:200])
        assert_clean(body.decode("utf-8", "replace"), path)
        assert len(body) < 2_000_000, path
    meta = json.loads(request(server, "/api/run?run=hero")[1])
    text = json.dumps(meta)
    for control in CONTROLS:
        assert control in text, control
    # The run list stream, then the hero's stream with a new secret-bearing note arriving live.
    listing = read_sse(server, "/api/stream", until=lambda evs: any(k == "runs" for k, _ in evs))
    assert_clean(json.dumps(listing), "the run list stream")
    fresh = "ghp_" + rand(ALNUM, 36)

    def wrote_note(evs):
        if evs and evs[-1][0] == "hello":
            with StoreWriter(lab / "hero") as w:
                w.event("note", f"new token {fresh} and password={fresh[4:]}", 299)
        return any(k == "update" and d["events"] for k, d in evs)

    events = read_sse(server, "/api/stream?run=hero", until=wrote_note)
    text = json.dumps(events)
    assert fresh not in text and fresh[4:] not in text
    note = [e for k, d in events if k == "update" for e in d["events"]][-1]
    assert note["text"] == "new token <redacted> and password=<redacted>"


def test_serve_never_follows_symlinks_out_of_the_lab(server):
    runs = {r["id"] for r in json.loads(request(server, "/api/runs")[1])["runs"]}
    assert "linked-store" not in runs and "hero" in runs
    assert request(server, "/api/run?run=linked-store")[0] == 404
    meta = json.loads(request(server, "/api/run?run=linked-config")[1])
    assert meta["config"] is None and meta["config_text"] == ""
    datasets = {d["id"]: d for d in json.loads(request(server, "/api/atlas/list")[1])["datasets"]}
    assert "data/linked-manifest" not in datasets
    assert datasets["data/linked-atlas"]["atlas"] is False and datasets["data/linked-file"]["atlas"] is False
    for ds in ("data/linked-atlas", "data/linked-file", "data/linked-manifest"):
        status, body, _ = request(server, f"/api/atlas?dataset={ds}")
        assert status == 404 and OUTSIDE_MARK.encode() not in body, ds


BAD_HOSTS = ["127.evil.com", "127.attacker.example", "127.0.0.1.nip.io", "attacker.example", "localhost.evil.com",
             "127.0.0.1.evil.com:80", "0x7f.0.0.1", "127.1", "127.0.0.1:8080:80", ""]


@pytest.mark.parametrize("path", ["/", "/runs/hero", "/api/runs", "/api/run?run=hero", "/api/stream?run=hero",
                                  "/atlas", "/api/atlas/list", "/static/pages.js", "/nowhere"])
def test_only_exact_loopback_hosts_are_answered(server, path):
    for host in BAD_HOSTS:
        status, _, headers = request(server, path, host=host)
        assert status == 421, (path, host, status)
        assert "default-src 'self'" in headers["content-security-policy"]
    if path != "/api/stream?run=hero":
        for host in (f"127.0.0.1:{server.port}", "localhost", f"[::1]:{server.port}", "127.0.0.2"):
            assert request(server, path, host=host)[0] in (200, 404), (path, host)


def test_every_response_carries_a_content_security_policy(server):
    for path, method in (("/", "GET"), ("/runs/hero", "GET"), ("/api/runs", "GET"), ("/static/style.css", "GET"),
                         ("/api/run?run=nope", "GET"), ("/api/run?run=broken", "GET"), ("/", "POST")):
        status, _, headers = request(server, path, method=method)
        csp = headers.get("content-security-policy", "")
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "'unsafe-inline'" not in csp, (path, status)
        assert headers.get("x-content-type-options") == "nosniff"


def test_one_request_asks_for_bounded_work(server):
    status, body, _ = request(server, "/api/series?run=hero&" + "&".join(["name=train/loss"] * 900))
    assert status == 200 and list(json.loads(body)["series"]) == ["train/loss"]
    assert request(server, "/api/series?run=hero&" + "&".join(["name=a"] * 2001))[0] == 400
    many = "&".join(f"name=n{i}" for i in range(100))
    assert request(server, f"/api/series?run=hero&{many}&points=20000")[0] == 400
    assert request(server, "/compare?" + "&".join(["run=hero"] * 50))[0] == 200
    assert request(server, "/api/stream?" + "&".join(["run=x"] * 2001))[0] == 400


def test_alias_bombs_are_reported_on_the_page_not_expanded(server):
    for run in ("bomb", "widebomb"):
        status, body, _ = request(server, f"/api/run?run={run}")
        meta = json.loads(body)
        assert status == 200 and meta["config"] is None and len(body) < 200_000
        assert meta["config_text"].startswith("# config.yaml could not be read: refused"), meta["config_text"][:200]


def test_a_corrupt_store_is_one_clear_error_everywhere(lab, tmp_path):
    root = tmp_path / "lab"
    write_run(root / "good", steps=20)
    (root / "broken").mkdir()
    (root / "broken" / "store.sqlite").write_bytes(RNG.randbytes(4096))
    with Server(root) as srv:
        rows = {r["id"]: r for r in json.loads(request(srv, "/api/runs")[1])["runs"]}
        assert rows["broken"]["state"] == "unreadable"
        assert rows["broken"]["error"] == "store unreadable: file is not a database"
        assert rows["good"]["state"] == "running"
        for _ in range(3):   # the page retries: each answer is one line, and no traceback is logged
            for path in ("/api/run?run=broken", "/api/series?run=broken&name=train/loss", "/api/events?run=broken",
                         "/api/vectors?run=broken&name=x"):
                status, body, _ = request(srv, path)
                assert status == 503, (path, status)
                assert json.loads(body) == {"error": "run broken: store.sqlite cannot be read: file is not a database"}
        assert request(srv, "/runs/broken")[0] == 200   # the page itself loads and says so (browser test)
        events = read_sse(srv, "/api/stream?run=broken", until=lambda evs: False, timeout=10)
        assert events == [("error", {"error": "run broken: store.sqlite cannot be read: file is not a database"})]
        srv.stop()
        log = srv.proc.stdout.read()
    assert "Traceback" not in log and "Exception" not in log, log[-2000:]


def run_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "glassroom", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def one_line_error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr


def test_note_on_a_corrupt_store_exits_2_and_changes_nothing(lab):
    before = (lab / "broken" / "store.sqlite").read_bytes()
    err = one_line_error(run_cli("note", str(lab / "broken"), "hello"))
    assert "store.sqlite" in err and "damaged" in err
    one_line_error(run_cli("note", str(lab / "broken"), "--private-run"))
    assert (lab / "broken" / "store.sqlite").read_bytes() == before


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_pages_under_the_csp_show_the_seal_and_an_unreadable_store(server):
    with Chromium() as browser:
        browser.navigate(f"{server.url}/runs/hero")
        digest = browser.eval("document.getElementById('seal-digest').textContent")
        assert digest == DIGEST
        assert browser.eval("[...document.querySelectorAll('.card .seal code')].map(c => c.textContent)") == [DIGEST]
        assert browser.eval("GR.charts.length") > 3   # charts drew under the Content-Security-Policy
        browser.navigate(f"{server.url}/runs/broken")
        assert browser.eval("document.getElementById('error').textContent") == \
            "run broken: store.sqlite cannot be read: file is not a database"
        browser.navigate(f"{server.url}/")
        row = browser.eval("[...document.querySelectorAll('#runs tbody tr')].find(tr => tr.textContent.includes('broken')).textContent")
        assert "store unreadable: file is not a database" in row
        assert not any("Content Security Policy" in line for line in browser.console), browser.console[-3:]


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_the_published_run_page_shows_the_seal(site):
    from web_helpers import StaticSiteServer

    out, _, _ = site
    with StaticSiteServer(out) as url:
        page = (out / "runs" / "hero" / "index.html").read_text()
        assert '<meta http-equiv="Content-Security-Policy"' in page
        with Chromium() as browser:
            browser.navigate(f"{url}/runs/hero/index.html")
            assert browser.eval("GR.source.live") is False
            assert browser.eval("document.getElementById('seal-digest').textContent") == DIGEST
            assert browser.eval("[...document.querySelectorAll('.card .seal code')].map(c => c.textContent)") == [DIGEST]
            assert browser.eval("GR.charts.length") > 3


def test_a_server_on_another_address_hides_private_runs_and_notes(lab):
    from starlette.testclient import TestClient

    from glassroom.web.server import allowed_hosts, create_app

    hosts = allowed_hosts("0.0.0.0", ("lab.example.org",))
    app = create_app(lab, loopback_only=False, hosts=hosts)
    with TestClient(app, base_url="http://lab.example.org") as client:
        runs = {r["id"] for r in client.get("/api/runs").json()["runs"]}
        assert "hero" in runs and "scratch" not in runs and "broken" not in runs   # unreadable: maybe private
        assert client.get("/api/run?run=scratch").status_code == 404
        assert client.get("/runs/scratch").status_code == 404
        for path in ("/api/run?run=hero", "/api/events?run=hero"):
            body = client.get(path).text
            assert PRIVATE_MARK not in body and "rotated the key" in body
        assert client.get("/api/runs", headers={"Host": "127.evil.com"}).status_code == 421
        assert client.get("/api/runs", headers={"Host": "elsewhere.example.org"}).status_code == 421
    loopback = create_app(lab)   # on the loopback the owner sees everything, private marked as such
    with TestClient(loopback, base_url="http://127.0.0.1") as client:
        rows = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert rows["scratch"]["private"] is True and rows["hero"]["private"] is False
        assert PRIVATE_MARK in client.get("/api/events?run=hero").text


def test_published_atlas_pages_carry_the_policy(site):
    out, _, _ = site
    for page in (out / "atlas" / "index.html", out / "atlas" / "d" / "data" / "real" / "index.html", out / "index.html"):
        text = page.read_text()
        assert '<meta http-equiv="Content-Security-Policy" content="default-src ' + "'self'; script-src 'self'" in text, page
        assert "<script>" not in text   # no inline script: the boot data is a JSON block
