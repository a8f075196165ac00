"""`glassroom incident open/update/resolve/list`: incidents as chained journal events, folded into one
record each; one-line errors with exit 2; concurrent writers (a training run, several commands) all
land in one valid chain with distinct IDs."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from glassroom.cli import main
from glassroom.observe import journal
from glassroom.observe.incidents import fold
from glassroom.observe.store import StoreReader, StoreWriter

REPO = Path(__file__).resolve().parents[2]


def make_run(run_dir: Path, steps: int = 50) -> Path:
    with StoreWriter(run_dir) as w:
        w.event("start", "started", 0)
        for s in range(1, steps + 1):
            w.log(s, {"train/loss": 3.0 - s / 100})
        w.event("anomaly", "loss +9 sigma at step 30", 30, {"metric": "train/loss", "step": 30})
        w.event("eval", "eval at step 40", 40)
        w.set_status("running", steps)
    return run_dir


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["incident", *[str(a) for a in argv]])
    out = capsys.readouterr()
    return code, out.out, out.err


def incidents_of(run_dir: Path) -> list[dict]:
    with StoreReader(run_dir) as r:
        return fold(r.events())


def test_open_update_resolve_list(tmp_path, capsys):
    run = make_run(tmp_path / "lab" / "hero")
    other = make_run(tmp_path / "lab" / "rung-1")
    code, out, _ = cli(capsys, "open", run, "--step", 35, "loss spike after the data switch")
    assert code == 0 and out.startswith("inc-1 opened") and "at step 35" in out
    # from an anomaly: its step is the default, and the anomaly's id is kept
    with StoreReader(run) as r:
        anomaly_id = next(e["id"] for e in r.events() if e["kind"] == "anomaly")
    code, out, _ = cli(capsys, "open", run, "--anomaly", anomaly_id, "the step-30 spike")
    assert code == 0 and out.startswith("inc-2 opened") and "at step 30" in out
    assert cli(capsys, "update", run, "inc-1", "same shard as the step-30 spike")[0] == 0
    assert cli(capsys, "resolve", run, "1", "a shard of minified JS; dropped from the mixture")[0] == 0
    assert cli(capsys, "update", run, "inc-1", "the rerun is clean")[0] == 0   # after resolving: allowed
    assert cli(capsys, "open", other, "--step", 0, "first")[0] == 0            # IDs are per run: inc-1 again

    one, two = incidents_of(run)
    assert one["id"] == "inc-1" and one["step"] == 35 and one["status"] == "resolved"
    assert one["resolution"] == "a shard of minified JS; dropped from the mixture"
    assert [u["text"] for u in one["updates"]] == ["same shard as the step-30 spike", "the rerun is clean"]
    assert one["opened"] <= one["resolved"] and one["anomaly"] is None and one["title"].startswith("loss spike")
    assert two == {**two, "id": "inc-2", "step": 30, "status": "open", "resolved": None, "resolution": None,
                   "updates": [], "anomaly": anomaly_id}
    with StoreReader(run) as r:   # the raw events follow the shared contract
        events = [e for e in r.events() if e["kind"] == "incident"]
    assert events[0]["text"] == "loss spike after the data switch" and events[0]["step"] == 35
    assert events[0]["data"] == {"incident": "inc-1", "action": "open", "title": "loss spike after the data switch",
                                 "anomaly": None}
    resolve = next(e for e in events if e["data"]["action"] == "resolve")
    assert resolve["step"] == 35 and resolve["data"]["resolution"] == resolve["text"]

    code, out, _ = cli(capsys, "list", tmp_path / "lab")
    lines = out.splitlines()
    assert lines[0].split() == ["run", "id", "step", "status", "title"]
    assert [line.split()[:4] for line in lines[1:]] == [["hero", "inc-1", "35", "resolved"], ["hero", "inc-2", "30", "open"],
                                                       ["rung-1", "inc-1", "0", "open"]]
    code, out, _ = cli(capsys, "list", run, "--json")
    rows = json.loads(out)["incidents"]
    assert code == 0 and [(r["run"], r["id"]) for r in rows] == [("hero", "inc-1"), ("hero", "inc-2")]
    with sqlite3.connect(run / "store.sqlite") as conn:
        assert journal.verify_chain(conn)["ok"]


def test_errors_are_one_line_and_exit_2(tmp_path, capsys):
    run = make_run(tmp_path / "hero")
    (tmp_path / "empty").mkdir()
    assert cli(capsys, "open", run, "--step", 5, "a real one")[0] == 0
    assert cli(capsys, "resolve", run, "inc-1", "done")[0] == 0
    with StoreReader(run) as r:
        eval_id = next(e["id"] for e in r.events() if e["kind"] == "eval")
        before = len(r.events())
    cases = [
        (("open", tmp_path / "nope", "--step", 1, "t"), "no such folder"),
        (("open", tmp_path / "empty", "--step", 1, "t"), "not a run"),
        (("open", run, "--step", -1, "t"), "must be 0 or more"),
        (("open", run, "--step", "1.5", "t"), "whole number"),
        (("open", run, "--step", "ten", "t"), "whole number"),
        (("open", run, "--step", 1, "   "), "title is empty"),
        (("open", run, "--step", 1, "x" * 301), "more than 300"),
        (("open", run, "title without a step"), "--step S"),
        (("open", run, "--anomaly", eval_id, "t"), "not an anomaly"),
        (("open", run, "--anomaly", 9999, "t"), "no event 9999"),
        (("open", run, "--anomaly", "abc", "t"), "--anomaly"),
        (("resolve", run, "inc-1", "again"), "already resolved"),
        (("resolve", run, "inc-9", "x"), "no such incident"),
        (("update", run, "bogus", "x"), "not an incident ID"),
        (("update", run, "inc-1", "  "), "update is empty"),
        (("list", tmp_path / "empty"), "no runs"),
        (("list", tmp_path / "nope"), "no such folder"),
        ((), "give an action"),
    ]
    for argv, said in cases:
        code, out, err = cli(capsys, *argv)
        assert code == 2, argv
        assert err.count("\n") == 1 and err.startswith("error: ") and said in err, (argv, err)
        assert "Traceback" not in err and out == ""
    assert "glassroom incident update" in cli(capsys, "resolve", run, "inc-1", "again")[2]   # says what to do instead
    assert not (tmp_path / "nope").exists() and not (tmp_path / "empty" / "store.sqlite").exists()
    with StoreReader(run) as r:
        assert len(r.events()) == before   # nothing was written by a refused command


def test_cli_process_prints_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "glassroom", "incident", "open", str(tmp_path), "--step", "3", "x"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a run" in proc.stderr


WRITER = """
import sys, time
from glassroom.observe.store import StoreWriter
w = StoreWriter(sys.argv[1], flush_rows=20, flush_seconds=0.05)
for s in range(100, 400):
    w.log(s, {"train/loss": 1.0 + s / 1000})
    if s % 10 == 0:
        w.event("eval", f"eval at step {s}", s)
    time.sleep(0.002)
w.set_status("finished", 399)
w.close()
"""

OPENER = """
import sys
from glassroom.observe.incidents import open_incident, update_incident
for i in range(5):
    got = open_incident(sys.argv[1], f"{sys.argv[2]} {i}", step=i)
    update_incident(sys.argv[1], got["incident"], "looking")
"""


def test_a_training_writer_and_incident_commands_at_once_keep_one_chain(tmp_path):
    run = make_run(tmp_path / "hero")
    env_cmd = [sys.executable, "-c"]
    procs = [subprocess.Popen([*env_cmd, WRITER, str(run)], cwd=REPO),
             subprocess.Popen([*env_cmd, OPENER, str(run), "a"], cwd=REPO),
             subprocess.Popen([*env_cmd, OPENER, str(run), "b"], cwd=REPO)]
    for p in procs:
        assert p.wait(120) == 0
    found = incidents_of(run)
    assert sorted(i["id"] for i in found) == sorted(f"inc-{n}" for n in range(1, 11))   # distinct IDs, none lost
    assert all(len(i["updates"]) == 1 for i in found)
    with sqlite3.connect(run / "store.sqlite") as conn:
        check = journal.verify_chain(conn)
        evals = conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'eval'").fetchone()[0]
    assert check["ok"], check["problem"]
    assert evals == 1 + 30   # the writer's events all landed too
    with StoreReader(run) as r:
        assert r.status()["state"] == "finished"


def test_fold_ignores_events_glassroom_never_writes():
    events = [
        {"id": 1, "time": 1.0, "step": 5, "kind": "incident", "text": "t", "data": {"incident": "inc-1", "action": "open",
                                                                                   "title": "t", "anomaly": None}},
        {"id": 2, "time": 2.0, "step": 5, "kind": "incident", "text": "x", "data": "not a dict"},
        {"id": 3, "time": 3.0, "step": 5, "kind": "incident", "text": "x", "data": {"incident": "inc-7", "action": "update"}},
        {"id": 4, "time": 4.0, "step": 5, "kind": "incident", "text": "x", "data": {"incident": "inc-1", "action": "delete"}},
        {"id": 5, "time": 5.0, "step": 5, "kind": "note", "text": "x", "data": {"incident": "inc-1", "action": "resolve"}},
        {"id": 6, "time": 6.0, "step": 9, "kind": "incident", "text": "again", "data": {"incident": "inc-1", "action": "open",
                                                                                      "anomaly": "5"}},
        {"id": 7, "time": 7.0, "step": 5, "kind": "incident", "text": "w", "data": {"incident": "inc-1", "action": "resolve",
                                                                                   "resolution": "w"}},
        {"id": 8, "time": 8.0, "step": 5, "kind": "incident", "text": "w2", "data": {"incident": "inc-1", "action": "resolve"}},
    ]
    (only,) = fold(events)
    assert only["step"] == 5 and only["status"] == "resolved" and only["resolution"] == "w" and only["resolved"] == 7.0
    assert only["updates"] == [] and only["anomaly"] is None


def test_note_and_incident_say_busy_or_damaged_in_one_line_and_write_nothing(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    holder = sqlite3.connect(run / "store.sqlite", timeout=0, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")   # another process holds the store past the wait
    try:
        import glassroom.observe.store as store_mod
        slow = store_mod.sqlite3.connect

        def quick(*a, **k):   # wait 0.2 s instead of 30 s for the lock
            return slow(*a, **{**k, "timeout": 0.2})

        store_mod.sqlite3.connect = quick
        try:
            for argv in (["incident", "open", run, "--step", "30", "spike"], ["note", run, "looked at it"]):
                code = main([str(a) for a in argv])
                err = capsys.readouterr().err.strip()
                assert code == 2 and "busy" in err and "try again" in err and "\n" not in err, err
        finally:
            store_mod.sqlite3.connect = slow
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [e["kind"] for e in StoreReader(run).events()].count("note") == 0
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "store.sqlite").write_bytes(b"not a database, " * 100)
    for argv, nothing in ((["incident", "open", damaged, "--step", "3", "spike"], "nothing was written"),
                          (["note", damaged, "looked"], "nothing was added")):
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "damaged" in err and nothing in err and "\n" not in err, err
    assert (damaged / "store.sqlite").read_bytes() == b"not a database, " * 100


def newest_step_sources(tmp_path: Path):
    """Runs whose newest step comes from each thing newest_step reads, at generated steps: (run, first
    logged step, newest step)."""
    import random

    rng = random.Random(7)
    for i, source in enumerate(("metrics", "vector", "status", "event", "metrics")):
        first = rng.randint(0, 20)
        newest = first + rng.randint(1, 5000)
        run = tmp_path / f"{source}-{i}"
        with StoreWriter(run) as w:
            w.event("start", "started", first)
            w.log(first, {"train/loss": 3.0})
            w.log(first + (newest - first) // 2, {"train/loss": 2.5})
            if source == "metrics":
                w.log(newest, {"eval/loss": 2.0})
            elif source == "vector":
                w.log_vector(newest, "moe/layer_1/tokens_per_expert", [1, 2])
            elif source == "event":
                w.event("checkpoint", "saved", newest)
            w.set_status("running", newest if source == "status" else first)
        yield run, first, newest


def test_an_incident_may_be_opened_at_the_first_and_the_newest_step_and_not_beyond(tmp_path):
    """The newest step the run has logged (in its series, vectors, status or journal) is a step it has
    reached: an incident there is accepted, as at its first step and at 0; one step later is refused
    with a one-line error naming the newest step, and nothing is written."""
    from glassroom.errors import GlassroomError
    from glassroom.observe.incidents import open_incident

    for run, first, newest in newest_step_sources(tmp_path):
        for step in (newest, first, 0):
            opened = open_incident(run, f"at step {step}", step=step)
            assert opened["step"] == step, (run.name, step)
        before = incidents_of(run)
        for beyond in (newest + 1, newest + 1000):
            with pytest.raises(GlassroomError) as refused:
                open_incident(run, "too far", step=beyond)
            message = str(refused.value)
            assert "\n" not in message and f"--step {beyond}: beyond the run" in message, message
            assert f"whose newest step is {newest}" in message and f"0 to {newest}" in message, message
        assert [i["step"] for i in before] == [newest, first, 0] and incidents_of(run) == before




def make_run_2(run_dir: Path, notes=(), private=()) -> Path:
    with StoreWriter(run_dir) as w:
        for s in range(1, 4):
            w.log(s, {"train/loss": float(s)})
        for i, text in enumerate(notes):
            w.event("note", text, i)
        for text in private:
            w.event("note", text, 2, {"private": True})
        w.set_status("finished", 3)
    return run_dir


def test_incident_open_refuses_a_step_beyond_the_run_and_a_store_that_is_no_run(tmp_path, capsys):
    from glassroom.cli import main
    from glassroom.observe.store import StoreReader

    run = make_run_2(tmp_path / "hero")   # steps 1..3, status step 3
    with StoreWriter(run) as w:
        w.event("eval", "eval at step 7", 7)   # an event further on counts as reached
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "store.sqlite").write_bytes(b"")
    (tmp_path / "other").mkdir()
    with sqlite3.connect(tmp_path / "other" / "store.sqlite") as conn:   # another program's database
        conn.execute("CREATE TABLE t (a)")
    for argv, said in ((["open", str(run), "--step", "8", "t"], "beyond the run"),
                       (["open", str(run), "--step", str(2**62), "t"], "newest step is 7"),
                       (["open", str(tmp_path / "empty"), "--step", "0", "t"], "not a run store"),
                       (["open", str(tmp_path / "other"), "--step", "0", "t"], "not a run store")):
        code = main(["incident", *argv])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and said in err, (argv, err)
    assert (tmp_path / "empty" / "store.sqlite").stat().st_size == 0   # nothing written into either
    with sqlite3.connect(tmp_path / "other" / "store.sqlite") as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["t"]
    assert main(["incident", "open", str(run), "--step", "7", "at the last step reached"]) == 0
    with StoreReader(run) as r:
        assert [e["step"] for e in r.events() if e["kind"] == "incident"] == [7]


def test_incident_on_a_read_only_store_says_read_only_in_one_line(tmp_path, capsys, monkeypatch):
    # Before: on a read-only disk the message said the store was damaged. (A test run as root can
    # write through file modes, so the read-only disk is played by os.access.)
    import os

    from glassroom.cli import main
    from glassroom.observe.store import StoreReader

    run = make_run_2(tmp_path / "hero")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if mode == os.W_OK and str(p).startswith(str(run))
                        else real(p, mode, *a, **k))
    assert main(["incident", "open", str(run), "--step", "1", "t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "read-only" in err and "damaged" not in err
    monkeypatch.setattr(os, "access", real)
    with StoreReader(run) as r:
        assert not [e for e in r.events() if e["kind"] == "incident"]


@pytest.mark.parametrize("argv, said", [(["resolve", "RUN", "²", "x"], "not an incident ID"),
                                        (["update", "RUN", "inc-²", "x"], "not an incident ID"),
                                        (["open", "RUN", "--anomaly", "²", "t"], "--anomaly")])
def test_unicode_digits_in_ids_are_one_line_errors(tmp_path, capsys, argv, said):
    # Before: "²".isdigit() is true and int("²") raised: a traceback and exit 1.
    from glassroom.cli import main

    run = make_run_2(tmp_path / "hero")
    code = main(["incident", *[str(run) if a == "RUN" else a for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err
