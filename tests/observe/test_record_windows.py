"""The record's format 2 (glassroom/observe/record.py): window digests, which windows stand after a
resume, rows claimed by a later downstream event, and an older store verified with what it has."""

from __future__ import annotations

import json
from pathlib import Path

from glassroom.observe import record
from glassroom.observe.store import StoreReader, StoreWriter


def ev(id_, step, kind, data=None):
    return (id_, step, kind, None if data is None else json.dumps(data))


def window(after, to, rows=0, sha="x"):
    return {"record": {"after": after, "to": to, "rows": rows, "sha256": sha}}


def test_the_window_digest_is_canonical_over_name_step_value():
    rows = [("a", 1, 1.5), ("a", 2, None), ("b", 1, 2)]
    assert record.window_digest(rows) == record.window_digest([("a", 1, 1.5), ("a", 2, None), ("b", 1, 2.0)])
    assert record.window_digest(rows) != record.window_digest([("a", 1, 1.5), ("a", 2, 0.0), ("b", 1, 2.0)])
    assert record.window_digest([]) == record.window_digest(())


def test_a_resume_supersedes_the_windows_that_end_after_its_step():
    events = [ev(1, 0, "start"), ev(2, 4, "checkpoint", window(None, 4)), ev(3, 8, "checkpoint", window(4, 8)),
              ev(4, 4, "resume"), ev(5, 8, "checkpoint", window(4, 8)), ev(6, 8, "end", window(8, 8))]
    standing, superseded = record.standing_windows(events)
    assert [w["event"] for w in standing] == [2, 5, 6] and [w["event"] for w in superseded] == [3]


def write_run(run_dir: Path, end_rows: int = 0) -> None:
    """A format-2 store as the trainer writes it: start, rows, a checkpoint window at 4, an end window."""
    with StoreWriter(run_dir) as w:
        w.event("start", "started", 0, {"record": {"format": record.FORMAT,
                                                   "measure": {"eval_sequences": 4, "precision": "auto", "seq_len": 32}}})
        for s in range(1, 7):
            w.log(s, {"train/loss": 5.0 - 0.1 * s})
        w.flush()
        w.event("checkpoint", "saved step_4", 4, {"path": "step_4", "record": record.close_window(w, 4)})
        w.event("end", "finished", 6, {"record": record.close_window(w, 6)})


def test_a_trainer_like_store_verifies_and_a_later_downstream_row_is_claimed(tmp_path):
    write_run(tmp_path / "run")
    result = record.verify_record(tmp_path / "run")
    assert result["ok"] and result["windows"] == 2 and result["chained_rows"] == 6 and result["format"] == 2
    with StoreWriter(tmp_path / "run") as w:   # `glassroom eval` at step 4, after its window closed
        w.log(4, {"downstream/arc/acc": 0.25})
        w.event("downstream", "downstream at step 4", 4, {"scores": {"arc": {"acc": 0.25}}})
    assert record.verify_record(tmp_path / "run")["ok"]


def test_rows_after_the_last_window_are_counted_not_failed(tmp_path):
    write_run(tmp_path / "run")
    with StoreWriter(tmp_path / "run") as w:
        w.log(7, {"train/loss": 4.0})
    result = record.verify_record(tmp_path / "run")
    assert result["ok"] and result["tail_rows"] == 1


def test_an_older_store_verifies_with_what_it_has_and_says_what_it_lacks(tmp_path):
    with StoreWriter(tmp_path / "old") as w:
        w.event("start", "started", 0)
        w.log(1, {"train/loss": 5.0})
        w.event("end", "finished", 1)
    result = record.verify_record(tmp_path / "old")
    assert result["ok"] and result["format"] == 1
    assert any("metric windows" in lack for lack in result["lacks"])


def test_settings_changed_at_a_resume_are_said_for_an_unsealed_run_and_fail_a_sealed_one(tmp_path):
    write_run(tmp_path / "run")
    with StoreWriter(tmp_path / "run") as w:
        w.event("resume", "resumed", 6, {"record": {"measure": {"eval_sequences": 8, "precision": "auto", "seq_len": 32}}})
    result = record.verify_record(tmp_path / "run")
    assert result["ok"] and result["changes"] == ["resume event 4: eval_sequences 4 at start, 8 at resume"]
    evidence = [(e[0], e[1], e[2], e[3], e[4], e[5], None) for e in _events(tmp_path / "run")]
    problem, _ = record.check_measure(evidence, {"hero": {}}, tmp_path / "run")
    assert problem == "the run changed how it measures at resume event 4: eval_sequences 4 at start, 8 at resume"


def _events(run_dir: Path) -> list[tuple]:
    with StoreReader(run_dir) as reader:
        return [row[:6] for row in reader.record_evidence()["events"]]
