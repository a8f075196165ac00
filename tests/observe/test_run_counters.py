"""The writer's counters (observe/tiles.py) stand in for counting rows: run summaries equal the
COUNT-based ones, the live Cursor sends exactly what it sent when it asked every series each poll,
and the run list (web/run_list.py) reads a store again only when it changed."""

from __future__ import annotations

import time

import pytest

from glassroom.observe import runs as runs_mod
from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web import data, run_list


def raw_only(monkeypatch):
    """Readers that ignore tiles and counters: the path every store took before them."""
    monkeypatch.setattr(StoreReader, "_current", lambda self: False)


def test_summary_equals_the_counted_one(tmp_path, monkeypatch):
    run = tmp_path / "run"
    with StoreWriter(run, flush_rows=7) as w:
        for s in range(1, 300):
            w.log(s, {"train/loss": 3.0 - s / 100, "train/lr": 1e-3, "eval/macro/bpb": float("nan")})
            if s % 50 == 0:
                w.event("anomaly", f"spike at {s}", s)
                w.log_vector(s, "moe/layer_0/tokens_per_expert", [1, 2])
        w.event("note", "hello", 10)
        w.discard_after(250)
        w.log(251, {"train/loss": float("inf")})
        w.set_status("running", 251)
    with StoreReader(run) as reader:
        assert reader.tiled
        counters = reader.counters()
        fast = (reader.names(), reader.vector_names(), reader.max_metric_id(), reader.event_counts(),
                reader.latest("train/loss"), reader.latest("eval/macro/bpb"), reader.latest("nope"))
    now = time.time()
    got = runs_mod.summarize("run", run, now)
    assert counters and got["points"] == 251 + 250 + 250 and got["events"] == 6 and got["anomalies"] == 5
    raw_only(monkeypatch)
    with StoreReader(run) as reader:
        assert reader.counters() is None
        slow = (reader.names(), reader.vector_names(), reader.max_metric_id(), reader.event_counts(),
                reader.latest("train/loss"), reader.latest("eval/macro/bpb"), reader.latest("nope"))
    assert repr(fast) == repr(slow)   # repr: NaN == NaN
    assert repr(runs_mod.summarize("run", run, now)) == repr(got)


def script(run):
    """A run as the trainer writes it, one poll apart: rows, vectors, events, a new name, a secret
    name, a resume that discards and re-logs steps, a burst over Cursor.MAX_NEW."""
    w = StoreWriter(run, flush_rows=10**9, flush_seconds=1e9)
    yield
    for s in range(1, 40):
        w.log(s, {"train/loss": 1.0 / s, "train/lr": 0.1})
    w.flush()
    yield
    w.log_vector(40, "moe/layer_0/tokens_per_expert", [1.0, 3.0])
    w.log(40, {"eval/macro/bpb": 1.5, "secret/sk-abcdefghijklmnopqrstuvwx": 1.0})
    w.event("eval", "evaluated", 40)
    w.flush()
    yield
    yield   # nothing new
    w.discard_after(30)
    w.log(31, {"train/loss": 9.0})
    w.flush()
    yield
    for s in range(41, 60):
        w.log(s, {"train/loss": float("nan") if s == 45 else 2.0})
    w.set_status("running", 59)
    yield
    for s in range(60, 60 + data.Cursor.MAX_NEW + 10):
        w.log(s, {"train/lr": 0.01})
    w.flush()
    yield
    w.log(6000, {"train/loss": 0.5})
    w.event("anomaly", "spike", 6000)
    w.close()
    yield


def test_cursor_sends_what_it_sent_before_counters(tmp_path, monkeypatch):
    run = tmp_path / "run"
    steps = script(run)
    next(steps)
    fast = data.Cursor("run", run)
    slow = data.Cursor("run", run)
    slow.reader.tiled = False   # this one asks every series, every poll, as before
    try:
        assert fast.reader.counters() is not None and slow.reader.counters() is None
        polls = 0
        for _ in steps:
            a, b = fast.poll(), slow.poll()
            if a is not None:
                a["status"].pop("updated", None), b["status"].pop("updated", None)
            assert a == b
            polls += a is not None
        assert polls >= 5
    finally:
        fast.close()
        slow.close()


def test_cursor_opened_mid_run_starts_where_the_counters_say(tmp_path):
    run = tmp_path / "run"
    with StoreWriter(run) as w:
        for s in range(10):
            w.log(s, {"a": float(s)})
        w.log_vector(3, "v", [1.0])
    cursor = data.Cursor("run", run)
    try:
        assert cursor.poll() is None
        with StoreWriter(run) as w:
            w.log(10, {"a": 10.0})
            w.log_vector(4, "v", [2.0])
        update = cursor.poll()
        assert update["series"] == {"a": {"steps": [10], "values": [10.0]}}
        assert update["vectors"] == {"v": {"steps": [4], "count": 1}}
    finally:
        cursor.close()


@pytest.mark.parametrize("tiled", [True, False])
def test_a_resumed_run_that_logs_its_steps_again_makes_open_pages_reload(tmp_path, tiled):
    """A resume discards the steps after its checkpoint and logs them again with other values: an open
    page is told to reload (it would otherwise keep the old values), then gets the new rows; also for
    a series that began after the checkpoint, and for a store read without counters."""
    run = tmp_path / "run"
    with StoreWriter(run) as w:
        for s in range(1, 101):
            w.log(s, {"train/loss": 5.0})
            w.log_vector(s, "moe/layer_0/tokens_per_expert", [1.0, 2.0])
        w.log(80, {"eval/macro/bpb": 2.0})   # the first eval, after the checkpoint
    cursor = data.Cursor("run", run)
    cursor.reader.tiled = tiled
    try:
        assert cursor.poll() is None
        with StoreWriter(run) as w:   # the resume: back to the checkpoint at step 60
            w.discard_after(60)
        update = cursor.poll()
        assert update["reload"] is True and update["series"] == {}
        assert cursor.poll() is None   # told once
        with StoreWriter(run) as w:
            for s in range(61, 64):
                w.log(s, {"train/loss": 4.0})
            w.log(62, {"eval/macro/bpb": 1.5})
        update = cursor.poll()
        assert update["reload"] is False
        assert update["series"] == {"train/loss": {"steps": [61, 62, 63], "values": [4.0, 4.0, 4.0]},
                                    "eval/macro/bpb": {"steps": [62], "values": [1.5]}}
    finally:
        cursor.close()


def test_run_list_reads_a_store_again_only_when_it_changed(tmp_path, monkeypatch):
    runs = {}
    for i in range(3):
        runs[f"r{i}"] = tmp_path / f"r{i}"
        with StoreWriter(runs[f"r{i}"]) as w:
            w.log(1, {"train/loss": 2.0})
            w.set_status("running", 1)
    calls = []
    real = run_list.summarize
    monkeypatch.setattr(run_list, "summarize", lambda *a: calls.append(a[0]) or real(*a))
    cache = run_list.RunList()
    now = time.time()
    first = cache.summaries(sorted(runs.items()), now)
    for _ in range(20):   # twenty tabs, one read each
        again = cache.summaries(sorted(runs.items()), now + 400)
    assert sorted(calls) == ["r0", "r1", "r2"]
    assert [r["age_s"] for r in again] == pytest.approx([r["age_s"] + 400 for r in first])
    assert all(r["stale"] for r in again) and not any(r["stale"] for r in first)
    with StoreWriter(runs["r1"]) as w:   # one run writes: only it is read again
        w.log(2, {"train/loss": 1.0})
    got = cache.summaries(sorted(runs.items()))
    assert calls[3:] == ["r1"] and got[1]["latest"]["loss"] == 1.0 and got[1]["step"] == 2
    (runs["r2"] / "store.sqlite").unlink()   # a run that vanished: unreadable, never a crash
    assert cache.summaries([("r2", runs["r2"])])[0]["state"] == "unreadable"


def test_run_list_sees_a_store_replaced_in_place_and_is_never_older_than_max_age(tmp_path, monkeypatch):
    """A store copied over another in place with the old mtime kept (cp -p: same inode, same size,
    same mtime) is read again at once (its ctime changed); a change the probe cannot see at all is
    shown after max_age_s; a store replaced by a rename (new inode) too."""
    import os
    import shutil

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for run, value in ((a, 2.0), (b, 9.0), (c, 5.0)):
        with StoreWriter(run) as w:
            w.log(1, {"train/loss": value})
            w.set_status("running", 1)
    assert os.stat(a / "store.sqlite").st_size == os.stat(b / "store.sqlite").st_size
    cache = run_list.RunList(max_age_s=0.5)
    assert cache.summary("a", a)["latest"]["loss"] == 2.0
    st = os.stat(a / "store.sqlite")
    time.sleep(0.02)   # past one clock tick of the file system
    shutil.copyfile(b / "store.sqlite", a / "store.sqlite")
    os.utime(a / "store.sqlite", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.summary("a", a)["latest"]["loss"] == 9.0
    os.replace(c / "store.sqlite", a / "store.sqlite")   # another store renamed over it
    assert cache.summary("a", a)["latest"]["loss"] == 5.0
    monkeypatch.setattr(run_list, "probe", lambda run_dir: ("same",))   # a change no probe sees: at most max_age_s old
    assert cache.summary("a", a)["latest"]["loss"] == 5.0
    with StoreWriter(a) as w:
        w.log(2, {"train/loss": 1.0})
    assert cache.summary("a", a)["latest"]["loss"] == 5.0
    time.sleep(0.6)
    assert cache.summary("a", a)["latest"]["loss"] == 1.0


@pytest.mark.parametrize("stall_after", [5.0, 60.0, 3600.0])
def test_a_running_run_reads_stalled_once_its_heartbeat_is_older_than_its_stall_after(tmp_path, stall_after):
    with StoreWriter(tmp_path) as w:
        w.set_stall_after(stall_after)
        w.log(41, {"train/loss": 2.0})
        w.beat(41)
        w.beat(42)  # within 10 s of the last beat: not written
    with StoreReader(tmp_path) as r:
        beat, step = r.status()["updated"], r.status()["step"]
    assert step == 41  # the second beat came too soon to be written
    cache = run_list.RunList()
    for now, stalled in ((beat + stall_after * 0.9, False), (beat + stall_after * 1.1, True)):
        for summary in (runs_mod.summarize("r", tmp_path, now), cache.summary("r", tmp_path, now)):
            assert summary["stale"] is stalled and summary["stall_after_s"] == stall_after
            assert summary["stalled_since_step"] == (41 if stalled else None)
    with StoreWriter(tmp_path) as w:   # a run that ended is never stalled, however old
        w.set_status("finished", 41)
    assert not runs_mod.summarize("r", tmp_path, beat + 10 * stall_after)["stale"]


def test_a_store_without_a_stall_setting_uses_the_default(tmp_path):
    with StoreWriter(tmp_path) as w:
        w.log(3, {"train/loss": 2.0})
        w.set_status("running", 3)
    with StoreReader(tmp_path) as r:
        beat = r.status()["updated"]
    assert not runs_mod.summarize("r", tmp_path, beat + runs_mod.STALL_AFTER_S - 1)["stale"]
    assert runs_mod.summarize("r", tmp_path, beat + runs_mod.STALL_AFTER_S + 1)["stalled_since_step"] == 3
