"""Atom feeds for watchers (glassroom.web.feeds): served live (/feed.atom, /feed.atom?run=ID) and
written by publish; parsed by feedparser without complaint; every kind of entry with a permalink at
its step; private notes and private runs out of public feeds; secrets redacted; XML-hostile text
escaped; the same entry ids live and published; the lab-wide incidents live and published."""

from __future__ import annotations

import json
from pathlib import Path

import feedparser
import pytest
from starlette.testclient import TestClient

from glassroom.observe.incidents import open_incident, resolve_incident, update_incident
from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from glassroom.web.server import create_app
from web_helpers import write_run

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
PRIVATE = "private: ask ops about node 7"
HOSTILE = "]]> <x> & \x01 \"quoted\" 'single'"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("feeds") / "lab"
    hero = write_run(root / "runs" / "hero", steps=400, every=50, eval_every=100, spike_at=200, state="finished")
    with StoreWriter(hero) as w:
        w.event("prediction", "eval/macro/loss left the predicted band at step 300: 5.1 against 4.9", 300,
                {"deviation": 3.4})
        w.event("checkpoint", "saved step_0000400", 400, {"path": "step_0000400"})
        w.event("note", PRIVATE, 310, {"private": True})
        w.event("note", f"rotated the key, old one was {SECRET}", 320)
        w.event("note", HOSTILE, 330)
        w.event("end", "finished at step 400", 400)
    got = open_incident(hero, "loss spike at 200", step=200)
    update_incident(hero, got["incident"], "same shard as before")
    resolve_incident(hero, got["incident"], f"a shard of minified JS <script>; token {SECRET}")
    scratch = write_run(root / "runs" / "scratch", steps=100, every=50, eval_every=50)
    with StoreWriter(scratch) as w:
        w.set_artifact("visibility", {"private": True})
    open_incident(scratch, "private run's incident", step=3)
    return root


def parse(text: str):
    feed = feedparser.parse(text)
    assert feed.bozo == 0, feed.get("bozo_exception")
    return feed


def kinds(feed) -> set[str]:
    return {e.tags[0].term for e in feed.entries}


def test_live_feeds_parse_and_carry_every_kind_with_permalinks(lab):
    app = create_app(lab, loopback_only=False, hosts={"lab.example.org"})   # a public server
    with TestClient(app, base_url="http://lab.example.org") as client:
        response = client.get("/feed.atom")
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/atom+xml")
        assert "content-security-policy" in response.headers
        whole = parse(response.text)
        one = parse(client.get("/feed.atom?run=runs/hero").text)
        assert client.get("/feed.atom?run=runs/scratch").status_code == 404   # private run: not there at all
        assert client.get("/feed.atom?run=nope").status_code == 404
        assert client.get("/feed.atom?run=a&run=b").status_code == 400
        assert client.post("/feed.atom").status_code == 405
        incidents = client.get("/api/incidents").json()["incidents"]
    assert kinds(one) == {"anomaly", "note", "prediction", "checkpoint", "end", "incident"}
    assert {e.id for e in one.entries} <= {e.id for e in whole.entries}
    body = "\n".join(e.title + e.content[0].value for e in whole.entries)
    assert PRIVATE not in body and "private run's incident" not in body and "scratch" not in body
    assert SECRET not in body and "<redacted>" in body
    hostile = next(e for e in one.entries if "]]>" in e.content[0].value)
    assert hostile.content[0].value == HOSTILE.replace("\x01", "")   # escaped, round-trips, bar a control char
    spike = next(e for e in one.entries if e.tags[0].term == "anomaly")
    assert spike.link == "http://lab.example.org/runs/runs/hero#point=200&start=150&end=250"
    assert spike.title.startswith("runs/hero: anomaly at step 200 — ")
    resolved = next(e for e in one.entries if e.title.startswith("runs/hero: incident inc-1 resolved"))
    assert "loss spike at 200" in resolved.title and "<script>" in resolved.content[0].value
    assert spike.id.startswith("tag:glassroom,2026:lab/runs/hero/event/")
    assert len({e.id for e in whole.entries}) == len(whole.entries)
    updated = [e.updated for e in whole.entries]
    assert updated == sorted(updated, reverse=True) and updated[0].endswith("Z")
    assert [(i["run"], i["id"], i["status"]) for i in incidents] == [("runs/hero", "inc-1", "resolved")]
    assert SECRET not in json.dumps(incidents)

    owner = create_app(lab)   # on the loopback the owner sees private notes and runs
    with TestClient(owner, base_url="http://127.0.0.1") as client:
        assert PRIVATE in client.get("/feed.atom?run=runs/hero").text
        assert client.get("/feed.atom?run=runs/scratch").status_code == 200


def test_published_feeds_match_live_and_leave_private_things_out(lab, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    whole = parse((site / "feed.atom").read_text(encoding="utf-8"))
    one = parse((site / "runs" / "runs" / "hero" / "feed.atom").read_text(encoding="utf-8"))
    assert not (site / "runs" / "runs" / "scratch").exists()
    assert kinds(one) == {"anomaly", "note", "prediction", "checkpoint", "end", "incident"}
    text = (site / "feed.atom").read_text(encoding="utf-8") + json.dumps([e.content[0].value for e in one.entries])
    assert PRIVATE not in text and SECRET not in text and "scratch" not in text
    spike = next(e for e in one.entries if e.tags[0].term == "anomaly")
    assert spike.link == "index.html#point=200&start=150&end=250"   # relative to the run's feed file
    assert (site / "runs" / "runs" / "hero" / spike.link.split("#")[0]).is_file()
    assert next(e for e in whole.entries if e.tags[0].term == "anomaly").link == \
        "runs/runs/hero/index.html#point=200&start=150&end=250"
    app = create_app(lab, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        live = parse(client.get("/feed.atom?run=runs/hero").text)
        live_incidents = client.get("/api/incidents").json()
    assert [e.id for e in live.entries] == [e.id for e in one.entries]   # same ids: a reader sees no duplicates
    assert [e.title for e in live.entries] == [e.title for e in one.entries]
    generation = json.loads((site / "site.json").read_text())["generation"]
    published = json.loads((site / "data" / generation / "incidents.json").read_text())
    assert published == live_incidents

    # the run is marked private afterwards: its feed leaves the site with its page on the next export
    with StoreWriter(lab / "runs" / "hero") as w:
        w.set_artifact("visibility", {"private": True})
    try:
        publish(lab, site)
        assert not (site / "runs" / "runs" / "hero" / "feed.atom").exists()
        assert "runs/hero" not in (site / "feed.atom").read_text(encoding="utf-8")
        generation = json.loads((site / "site.json").read_text())["generation"]
        assert json.loads((site / "data" / generation / "incidents.json").read_text()) == {"incidents": []}
    finally:
        with StoreWriter(lab / "runs" / "hero") as w:
            w.set_artifact("visibility", {"private": False})


def test_a_damaged_store_leaves_the_lab_feed_whole(lab, tmp_path):
    import shutil

    root = tmp_path / "lab"
    shutil.copytree(lab / "runs" / "hero", root / "hero")
    (root / "broken").mkdir()
    (root / "broken" / "store.sqlite").write_bytes(b"not a database at all" * 100)
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        feed = parse(client.get("/feed.atom").text)
        assert feed.entries and all("broken" not in e.link for e in feed.entries)
        response = client.get("/feed.atom?run=broken")
        assert response.status_code == 503 and "cannot be read" in response.text and "Traceback" not in response.text
        assert client.get("/api/incidents").status_code == 200


def test_hostile_events_never_break_feeds_incidents_or_search(tmp_path):
    import sqlite3

    root = tmp_path / "lab"
    with StoreWriter(root / "bad") as w:
        w.log(1, {"train/loss": 1.0})
        w.event("incident", "t", 1, {"incident": 5, "action": "open"})                    # not glassroom's shape
        w.event("incident", "deep", 1, json.loads("[" * 500 + "]" * 500))               # too deep to redact
        w.event("incident", "t2", 2, {"incident": "inc-1", "action": "open", "title": ["x"], "anomaly": True})
        w.event("anomaly", "\x00\x01\ud800 bad chars", 3)
    with sqlite3.connect(root / "bad" / "store.sqlite") as conn:
        conn.execute("INSERT INTO events (time, step, kind, text, data) VALUES ('notatime', 'abc', 'note', 'weird', '{no')")
        conn.execute("INSERT INTO events (time, step, kind, text, data) VALUES (1e300, 5, 'end', 'far', ?)",
                     ("[" * 100_000 + "]" * 100_000,))
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        for path in ("/feed.atom", "/feed.atom?run=bad"):
            feed = parse(client.get(path).text)
            assert {e.tags[0].term for e in feed.entries} == {"incident", "anomaly", "note", "end"}
            assert any(e.content[0].value == "\ufffd bad chars" for e in feed.entries)   # control chars dropped
            weird = next(e for e in feed.entries if e.content[0].value == "weird")
            assert weird.updated == "1970-01-01T00:00:00Z" and weird.link == "http://127.0.0.1/runs/bad"
        incidents = client.get("/api/incidents").json()["incidents"]
        assert [(i["id"], i["title"], i["anomaly"]) for i in incidents] == [("inc-1", "t2", None)]
        assert client.get("/api/search?q=weird").json()["events"][0]["step"] == "abc"
        assert client.get("/api/search?q=%00").status_code == 200
