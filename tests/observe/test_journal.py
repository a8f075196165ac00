"""The run's journal as a hash chain (glassroom/observe/journal.py): each event's digest covers every
column of the event, so changing any single field of any journaled event, its step included, makes
verification fail; the untouched chain verifies."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from glassroom.observe import journal
from glassroom.observe.store import StoreWriter, store_path

# Events as the trainer, `glassroom note` and incidents write them: with and without a step, with
# and without data, a step of 0, a large step, non-ASCII text.
EVENTS = [
    ("start", "started", 0, {"config": {"seed": 0}}),
    ("note", "a note with no step", None, None),
    ("checkpoint", "saved step_0000004", 4, {"path": "step_0000004"}),
    ("anomaly", "loss +9.1 sigma at step 7", 7, {"metric": "train/loss", "step": 7, "value": 9.5}),
    ("note", "naïve ünïcode, no data", 12, None),
    ("eval", "eval at step 2**40", 2**40, {"scores": [1.5, 2.25]}),
    ("end", "finished", 12, {"steps": 12}),
]


@pytest.fixture(scope="module")
def journaled(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("journal") / "run"
    with StoreWriter(run) as writer:
        for kind, text, step, data in EVENTS:
            writer.event(kind, text, step, data)
    return run


def columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name, declared type) of every column of the events table but the digest itself."""
    return [(row[1], row[2].upper()) for row in conn.execute("PRAGMA table_info(events)") if row[1] != "digest"]


def changed(name: str, declared: str, value, free_id: int):
    """Another value of the same kind for one field: what an edit of the file could write there."""
    if name == "id":
        return free_id                      # a free id: the primary key cannot repeat another event's
    if value is None:
        return {"INTEGER": 5, "REAL": 1.0}.get(declared, json.dumps({"added": True}) if name == "data" else "x")
    if isinstance(value, int):
        return value + 1                    # e.g. the event moved to the next step
    if isinstance(value, float):
        return value + 0.25
    if name == "data":
        return json.dumps({**json.loads(value), "added": True})
    return value + "!"


def test_the_untouched_journal_verifies(journaled):
    with closing(sqlite3.connect(store_path(journaled))) as conn:
        check = journal.verify_chain(conn)
        head = journal.head(conn)
    assert check["ok"] and check["problem"] is None
    assert check["chained"] == len(EVENTS) and check["legacy"] == 0 and check["head"] == head != ""


def test_changing_any_single_field_of_any_journaled_event_breaks_the_chain(journaled):
    """Every column of the events table (read from the table itself, so a column added later is
    covered too), in the first, a middle and the newest event: each change alone fails verification."""
    with closing(sqlite3.connect(store_path(journaled))) as conn:
        fields = columns(conn)
        ids = [row[0] for row in conn.execute("SELECT id FROM events ORDER BY id")]
    assert {name for name, _ in fields} >= {"id", "time", "step", "kind", "text", "data"}
    tried = 0
    for name, declared in fields:
        for event_id in ids:
            with closing(sqlite3.connect(store_path(journaled))) as source, closing(sqlite3.connect(":memory:")) as conn:
                source.backup(conn)   # a private copy of the journal to edit
                (value,) = conn.execute(f"SELECT {name} FROM events WHERE id = ?", (event_id,)).fetchone()
                new = changed(name, declared, value, free_id=max(ids) + 100)
                assert new != value
                conn.execute(f"UPDATE events SET {name} = ? WHERE id = ?", (new, event_id))
                check = journal.verify_chain(conn)
            assert not check["ok"] and check["problem"], (name, event_id, value, new)
            tried += 1
    assert tried == len(fields) * len(EVENTS)


@pytest.mark.parametrize("step", [None, 0, 1, 2**40])
def test_an_event_moved_to_another_step_no_longer_verifies(tmp_path, step):
    """The step is part of what the digest covers: the same event said to have happened at any other
    step (or at none) is an edit."""
    with StoreWriter(tmp_path / "run") as writer:
        writer.event("start", "started", 0)
        event_id = writer.event("note", "the note", step, {"why": "moved"})
        writer.event("end", "finished", 3)
    for other in (None, 0, 1, 2, 2**40, -1):
        if other == step:
            continue
        with closing(sqlite3.connect(store_path(tmp_path / "run"), isolation_level=None)) as conn:
            conn.execute("UPDATE events SET step = ? WHERE id = ?", (other, event_id))
            check = journal.verify_chain(conn)
            assert not check["ok"] and f"event {event_id} (note" in check["problem"], (step, other)
            conn.execute("UPDATE events SET step = ? WHERE id = ?", (step, event_id))
            assert journal.verify_chain(conn)["ok"]


def test_each_digest_is_the_documented_hash_of_the_one_before_and_the_event(tmp_path):
    """digest_n = sha256(digest_{n-1} + JSON [id, time, step, kind, text, data] with sorted keys and no
    spaces), digest_0 the empty string: computed here with hashlib, so a store written by another
    version (or checked by an outside tool) verifies the same way. (The store is written here, not by
    the module's fixture, so the mutation check maps this test to the digest's code.)"""
    import hashlib

    with StoreWriter(tmp_path / "run") as writer:
        for kind, text, step, data in EVENTS:
            writer.event(kind, text, step, data)
    previous = ""
    with closing(sqlite3.connect(store_path(tmp_path / "run"))) as conn:
        rows = conn.execute("SELECT id, time, step, kind, text, data, digest FROM events ORDER BY id").fetchall()
    for id_, when, step, kind, text, data, digest in rows:
        content = json.dumps([id_, float(when), step, kind, text, data], sort_keys=True, separators=(",", ":"))
        assert digest == hashlib.sha256((previous + content).encode("utf-8")).hexdigest(), id_
        previous = digest
