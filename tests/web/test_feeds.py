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
import sqlite3

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
    assert kinds(one) == {"anomaly", "note", "prediction", "checkpoint", "end", "incident", "chain"}
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
    assert kinds(one) == {"anomaly", "note", "prediction", "checkpoint", "end", "incident", "chain"}
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
            assert {e.tags[0].term for e in feed.entries} == {"incident", "anomaly", "note", "end", "chain"}
            assert any(e.content[0].value == "\ufffd bad chars" for e in feed.entries)   # control chars dropped
            weird = next(e for e in feed.entries if e.content[0].value == "weird")
            assert weird.updated == "1970-01-01T00:00:00Z" and weird.link == "http://127.0.0.1/runs/bad"
        incidents = client.get("/api/incidents").json()["incidents"]
        assert [(i["id"], i["title"], i["anomaly"]) for i in incidents] == [("inc-1", "t2", None)]
        assert client.get("/api/search?q=weird").json()["events"][0]["step"] == "abc"
        assert client.get("/api/search?q=%00").status_code == 200




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


def site_texts(site: Path) -> str:
    generation = json.loads((site / "site.json").read_text())["generation"]
    parts = [(site / "feed.atom").read_text(encoding="utf-8")]
    parts += [p.read_text(encoding="utf-8") for p in (site / "runs").rglob("feed.atom")]
    parts += [(site / "data" / generation / n).read_text(encoding="utf-8") for n in ("search.json", "incidents.json")]
    return "\n".join(parts)


def test_feeds_search_and_incidents_never_show_a_token_split_by_a_control_character(tmp_path):
    root = tmp_path / "lab"
    run = make_run(root / "hero", notes=["ctl gh\x01p_" + TOKEN, "ansi \x1b[31mghp_" + TOKEN + "\x1b[0m"])
    open_incident(run, "title gh\x01p_" + TOKEN, step=2)
    resolve_incident(run, "inc-1", "write-up AK\x01IAABCDEFGHIJKLMNOP")
    app = create_app(root, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        feed = client.get("/feed.atom?run=hero").text
        incidents = json.dumps(client.get("/api/incidents").json())
        hits = [client.get("/api/search", params={"q": q}).json() for q in ("p_a1b2", TOKEN[4:14], "IAABCD")]
    assert feedparser.parse(feed).bozo == 0
    assert "ghp_" + TOKEN[:6] not in feed and "AKIAABCD" not in feed and "&lt;redacted&gt;" in feed
    assert "AKIAABCD" not in incidents.replace("\\u0001", "") and TOKEN not in incidents.replace("\\u0001", "")
    assert all(h["events"] == [] for h in hits)
    site = tmp_path / "site"
    publish(root, site)
    text = site_texts(site).replace("\\u0001", "").replace("\x01", "")
    assert "ghp_" + TOKEN[:6] not in text and "AKIAABCD" not in text


def test_the_redaction_cache_is_bounded_by_characters_too(monkeypatch):
    # Before: only the number of texts was bounded, so long texts (tracebacks) grew it to gigabytes.
    from glassroom.web import views

    monkeypatch.setattr(views, "_TEXTS", {})
    monkeypatch.setattr(views, "_cached_chars", [0])
    monkeypatch.setattr(views, "MAX_CACHED_CHARS", 1_000_000)
    for i in range(400):
        text = f"error {i}: " + "x y " * 1_000 + f" ghp_{TOKEN}"
        assert views.redacted_text(text).endswith(" <redacted>")
        assert sum(len(k) + len(v) for k, v in views._TEXTS.items()) <= 1_000_000
    assert views._TEXTS   # still a cache


def test_a_run_marked_private_leaves_feeds_search_and_incidents_at_once(tmp_path):
    # Before: the server's list of runs is kept 2 s, and the lab feed, search and incidents used it as is.
    root = tmp_path / "lab"
    run = make_run(root / "hero", notes=["the plan"])
    with StoreWriter(run) as w:
        w.log(4, {"train/plan_norm": 1.0})
    open_incident(run, "plan incident", step=2)
    app = create_app(root, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        assert "the plan" in client.get("/feed.atom").text   # listed, and cached for 2 s
        with StoreWriter(run) as w:
            w.set_artifact("visibility", {"private": True})
        feed = client.get("/feed.atom").text
        found = client.get("/api/search", params={"q": "plan"}).json()
        incidents = client.get("/api/incidents").json()["incidents"]
    assert "hero" not in feed and found["metrics"] == [] and found["events"] == [] and incidents == []
    owner = create_app(root)   # the owner on the loopback still sees it
    with TestClient(owner, base_url="http://127.0.0.1") as client:
        assert client.get("/api/search", params={"q": "plan"}).json()["events"]


def test_a_huge_event_text_is_shown_bounded_by_feeds_search_and_incidents(tmp_path):
    # Before: every request redacted the whole text (a 5 MB note: seconds each) and search sent it whole.
    root = tmp_path / "lab"
    long_tail = "lorem ipsum " * 400_000   # 4.8 MB
    cut_secret = "x" * (20_000 - 10) + " ghp_" + TOKEN   # a token across the 20,000-character cut
    run = make_run(root / "hero", notes=["huge " + long_tail, cut_secret])
    open_incident(run, "huge write-up", step=1)
    resolve_incident(run, "inc-1", "w" * 19_950 + " ghp_" + TOKEN)
    with sqlite3.connect(run / "store.sqlite") as conn:   # a hand-edited incident with a 5 MB title
        conn.execute("UPDATE events SET data = json_set(data, '$.title', ?) WHERE kind = 'incident' "
                     "AND json_extract(data, '$.action') = 'open'", ("t" * 5_000_000,))
    app = create_app(root, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        feed = client.get("/feed.atom?run=hero").text
        found = client.get("/api/search", params={"q": "huge"}).json()
        incidents = client.get("/api/incidents").json()["incidents"]
    assert len(feed) < 200_000 and found["events"] and all(len(e["text"]) <= 20_000 for e in found["events"])
    assert len(incidents[0]["title"]) == 20_000 and len(incidents[0]["resolution"]) <= 20_000
    for text in (feed, json.dumps(found), json.dumps(incidents)):
        assert "ghp_" + TOKEN[:6] not in text and "ghp_" not in text.replace("<redacted>", "")
