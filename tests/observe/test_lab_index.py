"""The runs a page may show (observe/lab_index.py) and one reader per run for a pass (observe/readers.py)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from glassroom.observe.lab_index import RELIST_S, LabIndex, shown_runs
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.runs import VISIBILITY
from glassroom.observe.store import StoreWriter


def _run(path, private=False, loss=1.0):
    with StoreWriter(path) as w:
        w.log(1, {"train/loss": loss})
        if private:
            w.set_artifact(VISIBILITY, {"private": True})
    return path


def test_public_views_leave_out_private_and_unreadable_runs_and_secret_ids(tmp_path):
    _run(tmp_path / "open")
    _run(tmp_path / "hidden", private=True)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "store.sqlite").write_bytes(b"not a database" * 100)
    _run(tmp_path / ("run-ghp_" + "A1b2" * 9))
    public, local = shown_runs(tmp_path, public=True), shown_runs(tmp_path, public=False)
    assert "open" in public and "hidden" not in public and "broken" not in public
    assert {"open", "hidden", "broken"} <= set(local)
    assert not any("ghp_" in run_id for run_id in local)   # shown under its public id, never its path
    assert any(run_id.startswith("run-redacted-") for run_id in local)


def test_the_served_index_finds_a_new_run_at_once_and_drops_one_marked_private_since(tmp_path):
    _run(tmp_path / "a")
    index = LabIndex(tmp_path, public=True, max_age=3600)
    assert set(index.runs()) == {"a"}
    _run(tmp_path / "b")
    assert set(index.runs()) == {"a"}         # the cached list...
    time.sleep(RELIST_S + 0.1)
    assert index.find("b") == tmp_path / "b"   # ...but asking for a run it lacks re-finds (twice a second at most)
    assert index.find("nope") is None
    with StoreWriter(tmp_path / "a") as w:
        w.set_artifact(VISIBILITY, {"private": True})
    assert index.find("a") is None             # still listed in the cache, not shown


def test_a_pass_reads_each_run_through_one_reader_whatever_path_names_it(tmp_path):
    run = _run(tmp_path / "r")
    with StoreReaders() as readers:
        with reading(run, readers) as first:
            pass
        with reading(tmp_path / "." / "r", readers) as second:
            assert second is first and second.latest("train/loss") == (1, 1.0)   # still open
        assert readers.opened == 1
    with pytest.raises(sqlite3.ProgrammingError):
        first.latest("train/loss")   # closed with the pass
    with reading(run) as alone:   # without a pass: its own reader, closed at the end
        assert alone is not first
