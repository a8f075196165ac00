"""Planted secrets of every shape (tests/secret_shapes.py: seeded random instances in every position)
through the real outputs: every file `glassroom publish` writes, and a `glassroom serve` on 127.0.0.1
(the API routes, /api/stream, the Atom feeds, search). Secrets sit in a run's config, notes, events,
metric names and in run folder names (`exp-hf_...`, `sweep_ghp_...`, `run-sk-proj-...`): no 12
characters in a row of any of them may come out; the controls must; a run whose folder holds a
secret is published and served under its public id, and its links resolve."""

from __future__ import annotations

import http.client
import json
import random
from urllib.parse import quote

import pytest

from glassroom.observe.redact import public_name
from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from secret_shapes import HARMLESS_CONFIG, TOKENS, controls, planted
from web_helpers import Server, write_run

SEED = 7
PLANTED = planted(SEED, 1)
RNG = random.Random(SEED)
FOLDER_TOKENS = [TOKENS["hf"](RNG), TOKENS["github"](RNG), TOKENS["openai_proj"](RNG)]
FOLDERS = [f"runs/exp-{FOLDER_TOKENS[0][0]}", f"runs/sweep_{FOLDER_TOKENS[1][0]}", f"runs/run-{FOLDER_TOKENS[2][0]}"]
METRIC_TOKEN = TOKENS["openai_proj"](RNG)
SECRETS = [secret for *_, secret in PLANTED] + [s for _, s in FOLDER_TOKENS] + [METRIC_TOKEN[1]]
CONTROLS = controls(SEED, 3)
COMMIT, DIGEST = CONTROLS["commit sha"][0], CONTROLS["sha256"][0]
WINDOW = 12


def scanner(secrets: list[str]):
    """A function text -> the secrets any WINDOW characters in a row of which are in text."""
    owner: dict[str, str] = {}
    for secret in secrets:
        w = min(WINDOW, len(secret))
        for i in range(len(secret) - w + 1):
            owner[secret[i:i + w]] = secret
    sizes = sorted({len(k) for k in owner})

    def scan(text: str) -> set[str]:
        return {owner[text[j:j + n]] for n in sizes for j in range(len(text) - n + 1) if text[j:j + n] in owner}

    return scan


SCAN = scanner(SECRETS)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted") / "lab"
    texts = [text for _, _, text, _ in PLANTED]
    config = {**HARMLESS_CONFIG, "code": {"commit": COMMIT}, "digest": DIGEST, "notes": texts,
              "train": {"lr": 3e-3, "steps": 40}}
    hero = write_run(root / "runs" / "hero", steps=40, every=10, eval_every=20, config=config, state="finished")
    with StoreWriter(hero) as w:
        for i in range(0, len(texts), 40):
            w.event("note", "rotated the keys:\n" + "\n".join(texts[i:i + 40]), 10 + i // 40)
        w.event("note", "controls: " + " ".join([COMMIT, DIGEST, *CONTROLS["uuid"], *CONTROLS["urls"][:5]]), 39)
        w.log(40, {f"custom/run-{METRIC_TOKEN[0]}/loss": 1.0, "eval/macro/loss": 2.0})
    for folder in FOLDERS:
        run = write_run(root / folder, steps=20, every=10, eval_every=10, state="finished")
        with StoreWriter(run) as w:
            w.event("note", f"started in {run.name}; commit {COMMIT}", 5)
    return root


def test_the_public_ids_hold_no_secret():
    for folder, (token, _) in zip(FOLDERS, FOLDER_TOKENS):
        public = public_name(folder)
        assert token not in public and public.startswith(folder.split("-")[0].split("_")[0])
        assert "redacted-" in public


@pytest.fixture(scope="module")
def site(lab, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    return out, publish(lab, out)


def test_no_planted_secret_in_any_published_file(site):
    out, info = site
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 20
    for path in files:
        if path.suffix in (".js", ".css", ".html") and "runs" not in path.parts:
            continue   # the dashboard's own code, copied from the package
        text = path.read_text(encoding="utf-8", errors="replace")
        assert not SCAN(text), (str(path.relative_to(out)), sorted(SCAN(text))[:2])
        for folder in FOLDERS:
            assert folder not in text and folder not in str(path)


def test_published_site_keeps_controls_and_links_the_redacted_runs(site):
    out, info = site
    publics = [public_name(f) for f in FOLDERS]
    assert set(publics) <= set(info["runs"]) and "runs/hero" in info["runs"]
    runs_json = json.loads((out / "data" / info["generation"] / "runs.json").read_text())
    assert {r["id"] for r in runs_json["runs"]} >= {*publics, "runs/hero"}
    for public in publics:
        assert (out / "runs" / public / "index.html").is_file()
        assert (out / "runs" / public / "feed.atom").is_file()
        meta = json.loads((out / "data" / info["generation"] / "runs" / public / "meta.json").read_text())
        assert meta["id"] == public and COMMIT in json.dumps(meta)
    meta = json.loads((out / "data" / info["generation"] / "runs" / "runs" / "hero" / "meta.json").read_text())
    assert meta["config"]["model"] == HARMLESS_CONFIG["model"] and meta["config"]["eval"] == HARMLESS_CONFIG["eval"]
    assert meta["config"]["code"]["commit"] == COMMIT and meta["config"]["digest"] == DIGEST
    assert "eval/macro/loss" in meta["names"] and not any("custom/run-" in n for n in meta["names"])
    notes = [e["text"] for e in meta["events"] if e["text"].startswith("rotated the keys")]
    assert len(notes) >= 10 and all("<redacted>" in t for t in notes)   # shown, redacted, not dropped
    feed = (out / "feed.atom").read_text()
    assert all(quote(p) in feed for p in publics)


def request(server, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read().decode("utf-8", "replace")
    conn.close()
    return resp.status, body


def read_stream(server, path: str, until: str, on_hello=None, timeout: float = 20) -> str:
    """The raw server-sent events of `path` up to and including the first `until` event (`on_hello`
    runs once the `hello` event has come)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    lines: list[str] = []
    kind = None
    try:
        while True:
            line = resp.readline().decode("utf-8", "replace")
            if not line:
                break
            lines.append(line)
            if line.startswith("event: "):
                kind = line[7:].strip()
            elif line == "\n" and kind:
                if kind == "hello" and on_hello:
                    on_hello()
                if kind == until:
                    break
                kind = None
    finally:
        conn.close()
    return "".join(lines)


@pytest.fixture(scope="module")
def server(lab):
    with Server(lab) as srv:
        yield srv


def test_no_planted_secret_in_any_api_route_stream_feed_or_search(server, lab):
    publics = [public_name(f) for f in FOLDERS]
    ids = ["runs/hero", *publics]
    paths = ["/api/runs", "/api/incidents", "/feed.atom", "/api/search?q=rotated", "/api/search?q=redacted",
             "/api/search?q=custom", "/api/search?q=" + quote(SECRETS[0][:8])]
    for run_id in ids:
        q = quote(run_id, safe="")
        paths += [f"/runs/{run_id}", f"/api/run?run={q}", f"/api/events?run={q}", f"/feed.atom?run={q}",
                  f"/api/series?run={q}&name=train/loss"]
    for path in paths:
        status, body = request(server, path)
        assert status == 200, (path, status, body[:200])
        assert not SCAN(body), (path, sorted(SCAN(body))[:2])
        for folder in FOLDERS:
            assert folder not in body, path
    listing = read_stream(server, "/api/stream", until="runs")
    assert not SCAN(listing) and all(p in listing for p in publics)
    for run_id, folder in (("runs/hero", "runs/hero"), (publics[0], FOLDERS[0])):
        fresh = planted(SEED + 1, 1)[::9]

        def write(folder=folder, fresh=fresh):
            with StoreWriter(lab / folder) as w:
                w.event("note", "live:\n" + "\n".join(text for _, _, text, _ in fresh), 41)
                w.log(41, {"train/loss": 1.0, f"custom/run-{METRIC_TOKEN[0]}/loss": 1.0})

        body = read_stream(server, f"/api/stream?run={quote(run_id, safe='')}", until="update", on_hello=write)
        assert "event: update" in body and "live:" in body, body[-300:]
        assert not scanner([secret for *_, secret in fresh] + SECRETS)(body), run_id
    # the controls and the redacted runs come through
    listed = {r["id"] for r in json.loads(request(server, "/api/runs")[1])["runs"]}
    assert listed >= set(ids)
    meta = json.loads(request(server, "/api/run?run=runs/hero")[1])
    assert meta["config"]["model"] == HARMLESS_CONFIG["model"] and meta["config"]["code"]["commit"] == COMMIT
    events = request(server, "/api/events?run=runs/hero")[1]
    assert COMMIT in events and DIGEST in events and CONTROLS["uuid"][0] in events
    found = json.loads(request(server, "/api/search?q=" + COMMIT[:16])[1])
    assert {e["run"] for e in found["events"]} >= {"runs/hero", *publics}
    for public in publics:
        assert request(server, f"/api/run?run={quote(public, safe='')}")[0] == 200
