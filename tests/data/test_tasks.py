"""`glassroom data tasks` at its edges: a choice count that would never finish, what a killed run
left beside DATASET/tasks, a window longer than the validation split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from downstream_helpers import glassroom, glassroom_here
from glassroom.data.tasks import _clean_stale


@pytest.fixture()
def dataset(tiny_dataset, tmp_path) -> Path:
    out = tmp_path / "data"
    shutil.copytree(tiny_dataset, out)
    return out


@pytest.mark.parametrize("choices", ["27", "1000000"])
def test_a_choice_count_beyond_26_is_one_line_not_a_search_that_never_ends(dataset, choices):
    run = glassroom if choices == "27" else glassroom_here   # one through python -m glassroom
    result = run("data", "tasks", str(dataset), "--choices", choices, "--items", "1000000")
    assert result.returncode == 2 and result.stderr.startswith("error: --choices: at most 26")
    assert result.stderr.count("\n") == 1 and not (dataset / "tasks").exists()


def test_what_a_killed_run_left_is_cleaned_and_26_choices_work(dataset):
    dead = 999_999_999  # above any pid Linux gives out
    junk = dataset / f".tasks-tmp-{dead}"
    junk.mkdir()
    (junk / "half.jsonl").write_text("{")
    result = glassroom_here("data", "tasks", str(dataset), "--seq-len", "32", "--windows", "2", "--items", "3",
                       "--choices", "26", "--json")
    assert result.returncode == 0, result.stderr
    assert not junk.exists() and sorted(p.name for p in dataset.iterdir() if p.name.startswith(".tasks")) == []
    manifest = json.loads(result.stdout)
    assert manifest["tasks"]["glassroom_mc_prose"]["choices"] == 26


def test_a_kill_mid_swap_puts_the_old_tasks_back(tmp_path):
    old = tmp_path / ".tasks-old-999999999"
    old.mkdir()
    (old / "manifest.json").write_text("{}")
    tmp = tmp_path / ".tasks-tmp-999999999"
    tmp.mkdir()
    other = tmp_path / ".tasks-tmp-notapid"
    other.mkdir()
    _clean_stale(tmp_path)
    assert (tmp_path / "tasks" / "manifest.json").read_text() == "{}"
    assert not old.exists() and not tmp.exists() and other.exists()


def test_a_window_longer_than_the_split_is_noted_with_the_right_length(dataset):
    result = glassroom_here("data", "tasks", str(dataset), "--seq-len", "100000000", "--items", "3")
    assert result.returncode == 0, result.stderr
    assert "prose: no bits-per-byte task (fewer than --seq-len 100000000 validation tokens)" in result.stderr


@pytest.mark.slow
def test_build_force_replaces_a_dataset_with_its_tasks_but_not_a_tasks_folder_with_other_files(dataset, tmp_path):
    """DIR/tasks is derived from the dataset: --force replaces it with the dataset it describes. A
    tasks/ holding anything data tasks does not write is still refused, and left as it was."""
    from train_helpers import ROOT

    made = glassroom_here("data", "tasks", str(dataset), "--seq-len", "32", "--windows", "2", "--items", "3")
    assert made.returncode == 0, made.stderr
    (dataset / "tasks" / "__pycache__").mkdir()
    (dataset / "tasks" / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"")
    recipe = ROOT / "experiments" / "data-tiny.yaml"
    mine = dataset / "tasks" / "my-notes.txt"
    mine.write_text("keep me")
    refused = glassroom_here("data", "build", str(recipe), "--out", str(dataset), "--force")
    assert refused.returncode == 2 and "holds tasks/" in refused.stderr and "did not write" in refused.stderr
    assert mine.read_text() == "keep me"
    mine.unlink()
    rebuilt = glassroom_here("data", "build", str(recipe), "--out", str(dataset), "--force")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert not (dataset / "tasks").exists() and (dataset / "manifest.json").is_file()


def test_two_writers_at_once_leave_one_whole_tasks_folder_and_one_line(tmp_path, monkeypatch):
    """Another `data tasks` renames its folder into place between this one's two renames."""
    import os

    import glassroom.data.tasks as tasks
    from glassroom.errors import GlassroomError

    final, new = tmp_path / "tasks", tmp_path / ".tasks-tmp-1"
    final.mkdir()
    (final / "manifest.json").write_text("old")
    new.mkdir()
    (new / "manifest.json").write_text("mine")
    real, calls = os.replace, []

    def racing(src, dst):
        real(src, dst)
        calls.append(dst)
        if len(calls) == 1:  # ours moved aside the old folder; the other writer's lands now
            final.mkdir()
            (final / "manifest.json").write_text("theirs")

    monkeypatch.setattr(tasks.os, "replace", racing)
    with pytest.raises(GlassroomError, match="another glassroom data tasks wrote it at the same time"):
        tasks._replace(final, new)
    assert (final / "manifest.json").read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tasks-tmp-1", "tasks"]  # write_tasks removes its tmp
