"""`glassroom publish`: the static site's files, redaction of secrets, no environment variables, and
atomic re-exports (a reader following site.json always finds a complete generation)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from glassroom.errors import GlassroomError
from glassroom.observe.runs import key_is_secret, redact
from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish, watch
from web_helpers import write_prediction, write_run
import random
import sqlite3
import string
import subprocess
import sys

from starlette.testclient import TestClient

from glassroom.web.server import create_app

SECRETS = {"wandb": {"api_key": "wb-0123456789-secret"}, "hf_token": "hf_ABCDEFGHIJKLMNOPQRSTUV",
           "db": {"password": "hunter2-pw", "url": "postgres://x"}, "awsSecretAccessKey": "aws-SEKRIT",
           "notes": "sk-abcdefghijklmnopqrstuvwxyz012345", "env": {"PATH": "/usr/bin"},
           "train": {"lr": 0.001, "tokens": "18.75T", "max_tokens_per_batch": 4096},
           "data": {"tokenizer": "bpe-32k", "sort_key": "length"}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "hero", steps=800, config=SECRETS)
    write_prediction(root / "hero", 800)
    write_run(root / "ladder" / "rung-1", steps=300, seed=1, state="finished")
    return root


def all_text(site: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in site.rglob("*") if p.is_file())


def test_site_layout(lab, tmp_path):
    site_dir = tmp_path / "site"
    site = publish(lab, site_dir)
    assert set(site["runs"]) == {"hero", "ladder/rung-1"}
    for rel in ("index.html", "compare.html", "runs/hero/index.html", "runs/ladder/rung-1/index.html",
                "static/vendor/uPlot.iife.min.js", "static/vendor/uPlot.min.css", "static/vendor/uPlot.LICENSE",
                "static/pages.js", "site.json"):
        assert (site_dir / rel).is_file(), rel
    gen = site_dir / "data" / site["generation"]
    runs = json.loads((gen / "runs.json").read_text())["runs"]
    assert {r["id"] for r in runs} == {"hero", "ladder/rung-1"}
    meta = json.loads((gen / "runs" / "hero" / "meta.json").read_text())
    loss = json.loads((gen / "runs" / "hero" / meta["files"]["train/loss"]).read_text())
    assert loss["n"] == 800 and loss["steps"][-1] == 800
    assert meta["artifacts"]["prediction"]["steps"][0] == 0
    assert "moe/layer_1/tokens_per_expert" in meta["vector_files"]
    page = (site_dir / "runs" / "ladder" / "rung-1" / "index.html").read_text()
    assert '"base": "../../../"' in page and 'src="../../../static/pages.js"' in page
    assert not list(site_dir.rglob("node_modules")) and not list(site_dir.rglob("*.tmp-*"))


def test_secrets_and_environment_never_published(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSROOM_TEST_SENTINEL", "env-value-must-not-leak-42")
    site_dir = tmp_path / "site"
    site = publish(lab, site_dir)
    text = all_text(site_dir)
    for leaked in ("wb-0123456789-secret", "hf_ABCDEFGHIJKLMNOPQRSTUV", "hunter2-pw", "aws-SEKRIT",
                   "sk-abcdefghijklmnopqrstuvwxyz012345", "/usr/bin", "env-value-must-not-leak-42"):
        assert leaked not in text, leaked
    meta = json.loads((site_dir / "data" / site["generation"] / "runs" / "hero" / "meta.json").read_text())
    cfg = meta["config"]
    assert cfg["train"] == {"lr": 0.001, "tokens": "18.75T", "max_tokens_per_batch": 4096}   # not secrets
    assert cfg["data"]["tokenizer"] == "bpe-32k" and cfg["db"]["url"] == "postgres://x"
    assert cfg["db"]["password"] == "<redacted>" and cfg["env"] == "<redacted>"
    assert "hf_token: <redacted>" in meta["config_text"]


@pytest.mark.parametrize("key,secret", [("api_key", True), ("apiKey", True), ("HF_TOKEN", True), ("token", True),
    ("db-password", True), ("client_secret", True), ("private_key", True), ("auth", True), ("tokens", False),
    ("tokenizer", False), ("max_tokens", False), ("lr", False), ("n_experts", False), ("keyframe", False)])
def test_secret_keys(key, secret):
    assert key_is_secret(key) is secret
    assert (redact({key: "v"})[key] == "<redacted>") is secret


@pytest.mark.slow
def test_reexport_is_atomic_for_readers(lab, tmp_path):
    site_dir = tmp_path / "site"
    publish(lab, site_dir)
    errors, reads = [], [0]
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                site = json.loads((site_dir / "site.json").read_text())
                gen = site_dir / "data" / site["generation"]
                runs = json.loads((gen / "runs.json").read_text())
                for r in runs["runs"]:
                    meta = json.loads((gen / "runs" / r["id"] / "meta.json").read_text())
                    json.loads((gen / "runs" / r["id"] / meta["files"]["train/loss"]).read_text())
                reads[0] += 1
            except Exception as exc:   # a half-written or missing file
                errors.append(repr(exc))

    t = threading.Thread(target=reader)
    t.start()
    with StoreWriter(lab / "ladder" / "rung-1") as w:
        for i in range(4):
            w.log(300 + i + 1, {"train/loss": 2.0})
            w.flush()
            watch(lab, site_dir, interval=0.0, log=lambda m: None, rounds=1)
    stop.set()
    t.join()
    assert not errors, errors[:3]
    assert reads[0] > 3
    gens = [p.name for p in (site_dir / "data").iterdir()]
    assert len(gens) == 2 and all(g.startswith("g") for g in gens)   # the current one and the one before
    site = json.loads((site_dir / "site.json").read_text())
    meta = json.loads((site_dir / "data" / site["generation"] / "runs" / "ladder" / "rung-1" / "meta.json").read_text())
    assert meta["status"]["step"] == 300 and meta["summary"]["points"] > 0
    loss = json.loads((site_dir / "data" / site["generation"] / "runs" / "ladder" / "rung-1" / meta["files"]["train/loss"]).read_text())
    assert loss["steps"][-1] == 304   # the re-export followed the run


def test_refuses_a_folder_that_is_not_a_site(lab, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    with pytest.raises(GlassroomError, match="holds keep.txt, and no valid .glassroom-manifest.json"):
        publish(lab, tmp_path / "mine")
    with pytest.raises(GlassroomError, match="no such folder"):
        publish(tmp_path / "missing", tmp_path / "site")




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


def test_a_private_note_whose_data_cannot_be_parsed_stays_private(tmp_path):
    # Before: feeds and search read unparseable data as "no data", so as a public note.
    root = tmp_path / "lab"
    run = make_run(root / "hero", notes=["a public note"], private=["PRIVATE-DEEP plan", "PRIVATE-BROKEN plan"])
    with sqlite3.connect(run / "store.sqlite") as conn:
        conn.execute("UPDATE events SET data = ? WHERE text LIKE 'PRIVATE-DEEP%'",
                     ('{"private": true, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",))
        conn.execute("UPDATE events SET data = ? WHERE text LIKE 'PRIVATE-BROKEN%'", ('{"private": true, ',))
    app = create_app(root, loopback_only=False, hosts={"lab.example.org"})
    with TestClient(app, base_url="http://lab.example.org") as client:
        texts = [client.get(u).text for u in ("/feed.atom", "/feed.atom?run=hero", "/api/incidents")]
        found = client.get("/api/search", params={"q": "plan"}).json()
        assert "a public note" in texts[1]
    assert found["events"] == [] and not any("PRIVATE-" in t for t in texts)
    site = tmp_path / "site"
    publish(root, site)
    assert "PRIVATE-" not in site_texts(site)




RNG = random.Random()


ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "Zq" + "".join(RNG.choice(alphabet) for _ in range(n))


def site_text(site: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in site.rglob("*") if p.is_file())


def run_note(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", "note", *args], capture_output=True, text=True, timeout=120)


def test_a_run_marked_private_after_publishing_is_gone_from_the_site(tmp_path):
    root, site = tmp_path / "lab", tmp_path / "site"
    mark = rand(16)
    for name in ("keep", "hide"):
        with StoreWriter(root / name) as w:
            w.log(1, {"train/loss": 1.0})
            w.event("note", f"{name} {mark}", 1)
    publish(root, site)
    assert (site / "runs" / "hide" / "index.html").is_file()
    assert run_note(str(root / "hide"), "--private-run").returncode == 0
    publish(root, site)
    assert not (site / "runs" / "hide").exists()
    assert f"hide {mark}" not in site_text(site)          # not in the previous generation either
    assert f"keep {mark}" in site_text(site) and (site / "runs" / "keep" / "index.html").is_file()


def test_publish_refuses_a_site_whose_folders_are_symlinks_and_writes_nothing_through_them(tmp_path):
    from glassroom.errors import GlassroomError

    root, site, elsewhere = tmp_path / "lab", tmp_path / "site", tmp_path / "elsewhere"
    with StoreWriter(root / "r") as w:
        w.log(1, {"train/loss": 1.0})
    publish(root, site)
    elsewhere.mkdir()
    (elsewhere / "pages.js").write_text("mine")
    for part in ("static", "runs"):
        moved = site / part
        import shutil
        shutil.rmtree(moved)
        moved.symlink_to(elsewhere, target_is_directory=True)
        with pytest.raises(GlassroomError, match=f"{part} is a symbolic link"):
            publish(root, site)
        moved.unlink()
    assert (elsewhere / "pages.js").read_text() == "mine" and sorted(p.name for p in elsewhere.iterdir()) == ["pages.js"]
