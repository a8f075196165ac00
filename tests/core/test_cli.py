"""Tests of glassroom/cli.py."""

from __future__ import annotations

import sys



def test_a_user_error_is_written_in_one_piece(monkeypatch, tmp_path):
    """Under torchrun (python -u) every rank reports a launch mistake at once: the line must reach
    stderr in one write, or two ranks' lines interleave ("error: ...error: ...", then a blank line)."""
    from glassroom import cli

    class Recorder:
        def __init__(self):
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    recorder = Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    missing = tmp_path / "missing.yaml"
    assert cli.main(["train", str(missing), "--out", str(tmp_path / "out")]) == 2
    assert len(recorder.writes) == 1, recorder.writes
    assert recorder.writes[0].startswith("error: ") and recorder.writes[0].endswith("\n")
    assert recorder.writes[0].count("\n") == 1
