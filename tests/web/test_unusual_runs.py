"""Tests of glassroom/web/server.py."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from glassroom.observe.redact import public_name
from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from glassroom.web.server import create_app



RNG = random.Random()


ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "Zq" + "".join(RNG.choice(alphabet) for _ in range(n))


def site_text(site: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in site.rglob("*") if p.is_file())


def client(root: Path) -> TestClient:
    return TestClient(create_app(root), base_url="http://127.0.0.1:8080", raise_server_exceptions=False)


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "lab"
    token_name = "sk-" + rand(40)
    run = root / "runs" / "a"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("when: 2024-01-01\nstamp: 2024-01-01 10:00:00\nblob: !!binary aGVsbG8=\n"
                                     "tags: !!set {x, y}\n2024-02-02: k\nlr: .nan\nmodel: tiny\n")
    with StoreWriter(run) as w:
        w.event("start", "started", 0)
        for s in range(1, 6):
            w.log(s, {"train/loss": 3.0 - s * 0.1, f"secret/{token_name}": 1.0})
        w.log_vector(5, f"moe/{token_name}", [1.0, 2.0])
    folder_token = "ghp_" + rand(36)
    with StoreWriter(root / "runs" / folder_token) as w:
        w.log(1, {"train/loss": 1.0})
    return root, token_name, folder_token


def test_secret_in_a_metric_or_folder_name_never_leaves(lab, tmp_path):
    root, token_name, folder_token = lab
    public = public_name(f"runs/{folder_token}")
    assert public.startswith("runs/redacted-") and public == public_name(f"runs/{folder_token}")
    logs: list[str] = []
    site = tmp_path / "site"
    publish(root, site, log=logs.append)
    text = site_text(site)
    assert token_name not in text and folder_token not in text
    assert folder_token not in "\n".join(logs)
    meta = json.loads(next(site.rglob("runs/runs/a/meta.json")).read_text())
    assert meta["names"] == ["train/loss"] and meta["vector_names"] == []
    # the run whose folder holds a token is published under its public id, and links to it work
    assert (site / "runs" / public / "index.html").is_file()
    assert json.loads(next(site.rglob(f"runs/{public}/meta.json")).read_text())["id"] == public
    assert public in json.loads((site / "site.json").read_text())["runs"]

    c = client(root)
    bodies = [c.get("/api/runs").text, c.get("/api/run?run=runs/a").text, c.get(f"/api/run?run={public}").text]
    assert c.get(f"/runs/runs/{folder_token}").status_code == 404
    assert c.get(f"/runs/{public}").status_code == 200 and c.get(f"/api/run?run={public}").status_code == 200
    assert public in bodies[0]
    for body in bodies:
        assert token_name not in body and folder_token not in body


def test_secret_metric_name_is_not_streamed(lab):
    from glassroom.web.data import Cursor

    root, token_name, _ = lab
    cursor = Cursor("runs/a", root / "runs" / "a")
    try:
        with StoreWriter(root / "runs" / "a") as w:
            w.log(6, {"train/loss": 2.0, f"secret/{token_name}": 2.0})
        update = cursor.poll()
    finally:
        cursor.close()
    assert update is not None and "train/loss" in update["series"]
    assert token_name not in json.dumps(update)


def test_config_with_yaml_dates_binary_sets_and_nan_is_shown_not_a_500(lab, tmp_path):
    root, _, _ = lab
    r = client(root).get("/api/run?run=runs/a")
    assert r.status_code == 200, r.text
    config = r.json()["config"]
    assert config["when"] == "2024-01-01" and config["blob"] == "<5 bytes>" and config["tags"] == ["x", "y"]
    assert config["lr"] == "nan" and config["2024-02-02"] == "k"
    logs: list[str] = []
    publish(root, tmp_path / "site", log=logs.append)
    assert not any("skipped runs/a" in m for m in logs), logs
    meta = json.loads(next((tmp_path / "site").rglob("runs/runs/a/meta.json")).read_text())
    assert "when: '2024-01-01'" in meta["config_text"]
