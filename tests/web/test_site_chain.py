"""The record's head in a published site (glassroom/web/site_chain.py): chain.json, site.json's heads
and the feed entry agree and are read back as saved copies; a site checked on its own finds an
edited head or an edited published event, and counts a redacted one as not checkable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from glassroom.web.site_chain import NotACopy, saved_anchors, verify_site


@pytest.fixture
def site(tmp_path) -> Path:
    run = tmp_path / "lab" / "runs" / "a"
    with StoreWriter(run) as w:
        w.event("start", "started", 0)
        w.log(1, {"train/loss": 3.0})
        w.event("note", "rotated HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789", 1)
        w.event("note", "private: ask ops", 1, {"private": True})
        w.event("end", "finished at step 1", 1)
    publish(tmp_path / "lab", tmp_path / "site")
    return tmp_path / "site"


def test_chain_json_site_json_and_the_feed_hold_the_same_head(site):
    chain = json.loads((site / "runs" / "runs" / "a" / "chain.json").read_text())
    assert chain["head"]["id"] == 4 and chain["head"]["kind"] == "end"
    assert chain["events"][2] == [3, chain["events"][2][1], None, None]   # the private note: its digest only
    assert json.loads((site / "site.json").read_text())["chains"] == {"runs/a": chain["head"]}
    for saved in (site / "runs" / "runs" / "a" / "feed.atom", site / "feed.atom", site / "site.json", site):
        (anchor,) = saved_anchors(saved)
        assert anchor["run"] == "runs/a" and anchor["head"]["digest"] == chain["head"]["digest"], saved


def test_a_site_verifies_and_counts_the_redacted_event(site):
    result = verify_site(site)
    assert result["ok"] and result["runs"] == 1 and result["events_redacted"] == 1 and result["events_checked"] == 2


def test_an_edited_head_or_published_event_is_found(site):
    data = json.loads((site / "site.json").read_text())
    meta_file = site / "data" / data["generation"] / "runs" / "runs" / "a" / "meta.json"
    meta = json.loads(meta_file.read_text())
    next(e for e in meta["events"] if e["kind"] == "end")["text"] = "finished at step 9"
    meta_file.write_text(json.dumps(meta))
    assert "published event 4 (end) does not match its digest" in verify_site(site)["problem"]
    data["chains"]["runs/a"]["digest"] = "0" * 64
    (site / "site.json").write_text(json.dumps(data))
    assert "site.json's head and chain.json's disagree" in verify_site(site)["problem"]


def test_what_is_no_saved_copy_is_refused(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "x.json", tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(NotACopy):
            saved_anchors(path)
