"""Tests of glassroom/web/atlas_page.py."""

from __future__ import annotations

import json
import random
import string



def test_damaged_or_oversized_atlases_are_one_line_and_never_read_whole(tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    from glassroom.web import atlas_page
    from glassroom.web.server import create_app

    root = tmp_path / "lab"
    for name, text in (("big", json.dumps({"clusters": [], "points": {"text": ["x" * 5000]}})), ("bad", "{not json")):
        (root / "data" / name / "atlas").mkdir(parents=True)
        (root / "data" / name / "manifest.json").write_text(json.dumps({"name": name}))
        (root / "data" / name / "atlas" / "atlas.json").write_text(text)
    monkeypatch.setattr(atlas_page, "MAX_ATLAS_BYTES", 4000)
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        for name, why in (("big", "more than the 4,000 an atlas may have"), ("bad", "Expecting property name")):
            r = client.get(f"/api/atlas?dataset=data/{name}")
            assert r.status_code == 503 and why in r.json()["error"] and "\n" not in r.json()["error"], r.text
    site = tmp_path / "site"
    assert atlas_page.publish_atlases(root, site) == []
    listed = {d["id"]: d["atlas"] for d in json.loads((site / "atlas" / "datasets.json").read_text())["datasets"]}
    assert listed == {"data/big": False, "data/bad": False}




RNG = random.Random()


ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "Zq" + "".join(RNG.choice(alphabet) for _ in range(n))


def test_atlas_source_names_and_terms_are_redacted(tmp_path):
    from glassroom.web.atlas_page import atlas_bytes

    pw, tok = rand(12), "hf_" + rand(30)
    path = tmp_path / "atlas.json"
    path.write_text(json.dumps({"sources": [{"name": f"https://u:{pw}@mirror.example.org/c"}],
                                "clusters": [{"terms": [tok, "theorem"], "excerpts": [{"text": "plain"}]}]}))
    body = atlas_bytes(path).decode()
    assert pw not in body and tok not in body
    assert "mirror.example.org" in body and "theorem" in body
