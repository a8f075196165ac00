"""Tests of glassroom/commands/note.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli_helpers import glassroom_in_process
from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web.publish import publish

from web_helpers import REPO, write_run



def run_cli(*args, timeout=60):
    """Through `python -m glassroom`: what a user's shell gets."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def run_here(*args):
    """The same command in the test process (the process itself is not what is checked)."""
    return glassroom_in_process(*args, cwd=REPO)


def one_line_error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr
    return out.stderr


def test_note_marks_a_run_or_a_note_private(tmp_path):
    run = write_run(tmp_path / "lab" / "r", steps=20)
    out = run_cli("note", str(run), "--private", "only for us")
    assert out.returncode == 0 and "private note" in out.stdout
    out = run_here("note", str(run), "--private-run")
    assert out.returncode == 0 and "private" in out.stdout
    site = publish(tmp_path / "lab", tmp_path / "site")
    assert site["runs"] == []
    out = run_here("note", str(run), "--public-run")
    assert out.returncode == 0 and "public" in out.stdout
    site = publish(tmp_path / "lab", tmp_path / "site")
    meta = json.loads((tmp_path / "site" / "data" / site["generation"] / "runs" / "r" / "meta.json").read_text())
    assert site["runs"] == ["r"] and not any("only for us" in e["text"] for e in meta["events"])
    one_line_error(run_cli("note", str(run), "--private"))
    one_line_error(run_here("note", str(run), "--private", "  "))
    one_line_error(run_here("note", str(run), "text", "--private", "text"))
    one_line_error(run_here("note", str(run)))




def run_note(*args: str) -> subprocess.CompletedProcess:
    return glassroom_in_process("note", *args)


def test_note_refuses_a_step_past_sqlite_and_huge_text(tmp_path):
    run = tmp_path / "run"
    with StoreWriter(run) as w:
        w.log(1, {"train/loss": 1.0})
    for args in (["x", "--step", str(2**70)], ["y" * 30_000]):
        r = run_note(str(run), *args)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr
    with StoreReader(run) as reader:
        assert [e for e in reader.events() if e["kind"] == "note"] == []
    assert run_note(str(run), "ok", "--step", "7").returncode == 0


def test_note_on_a_store_locked_past_the_wait_says_busy_and_adds_nothing(tmp_path, monkeypatch):
    import sqlite3

    from glassroom.commands import note

    run = tmp_path / "run"
    with StoreWriter(run) as w:
        w.log(1, {"train/loss": 1.0})
    holder = sqlite3.connect(run / "store.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, **{**k, "timeout": 0.2}))
    args = type("A", (), {"run_dir": str(run), "text": "hello", "private": None, "step": None,
                          "private_run": False, "public_run": False})()
    from glassroom.errors import GlassroomError
    with pytest.raises(GlassroomError, match="busy"):
        note.run(args)
    holder.execute("ROLLBACK")
    holder.close()
    monkeypatch.undo()
    with StoreReader(run) as reader:
        assert [e for e in reader.events() if e["kind"] == "note"] == []
