"""`glassroom eval` and `glassroom data tasks` from the command line: scores stored at the
checkpoint's step and replaced on a second run, a store written while another writer holds it,
and every mistake one line with exit code 2 (nothing written)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from downstream_helpers import dataset_with_tasks, glassroom, glassroom_here, train_here, train_run
from hf_helpers import OFFLINE
from train_helpers import run_train

from glassroom.observe.store import StoreReader, StoreWriter

pytestmark = pytest.mark.slow  # every test here reads runs this module trains


@pytest.fixture(scope="module")
def dataset(tiny_dataset, tmp_path_factory) -> Path:
    return dataset_with_tasks(tiny_dataset, tmp_path_factory.mktemp("ds") / "tiny")


@pytest.fixture(scope="module")
def run(dataset, tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("runs") / "run", dataset)


@pytest.mark.slow
def test_glassroom_eval_on_a_run_stores_at_the_checkpoints_step_and_replaces(run):
    result = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_prose,glassroom_bpb_code", "--step", "8", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["step"] == 8 and out["items"] == 2
    again = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_code", "--step", "8", "--json")
    assert again.returncode == 0, again.stderr
    with StoreReader(run) as reader:
        steps, values = reader.series("downstream/glassroom_bpb_code/bits_per_byte")
        prose = reader.series("downstream/glassroom_bpb_prose/bits_per_byte")
        events = [e for e in reader.events() if e["kind"] == "downstream"]
    assert steps.tolist() == [8] and values[0] == pytest.approx(out["scores"]["glassroom_bpb_code"]["bits_per_byte"])
    assert prose[0].tolist() == [8] and prose[1][0] == pytest.approx(out["scores"]["glassroom_bpb_prose"]["bits_per_byte"])
    assert [(e["step"], e["data"]["checkpoint"]) for e in events] == [(8, "step_0000008")] * 2
    # The newest checkpoint by default, scored at its step: equal to the trainer's bpb there.
    newest = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_docs", "--json")
    assert newest.returncode == 0 and json.loads(newest.stdout)["step"] == 12
    with StoreReader(run) as reader:
        task, trainer = (reader.latest(n) for n in ("downstream/glassroom_bpb_docs/bits_per_byte", "eval/docs/bpb"))
    assert task[0] == trainer[0] == 12 and abs(task[1] - trainer[1]) < 1e-3


@pytest.mark.parametrize("args, says", [
    (["--tasks", "glassroom_nope"], "unknown task 'glassroom_nope'"),
    (["--tasks", "glassroom_bpb_prose", "--tasks-dir", "/nonexistent/tasks"], "/nonexistent/tasks: no tasks folder"),
    (["--tasks", "glassroom_bpb_prose", "--step", "5"], "no checkpoint at step 5"),
    (["--tasks", ",", ], "give at least one task name"),
    (["--tasks", "glassroom_bpb_prose", "--limit", "0"], "--limit: must be at least 1"),
    (["--tasks", "glassroom_bpb,glassroom_bpb_code"], "Duplicate task 'glassroom_bpb_code'"),
    (["--tasks", "lambada_openai", "--limit", "1"], "cannot load the data of lambada_openai"),  # a hub task, offline
])
@pytest.mark.slow
def test_eval_mistakes_are_one_line_exit_2(run, args, says):
    result = glassroom_here("eval", str(run), *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and says in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_a_damaged_checkpoint_is_one_line(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    data = next((copy / "checkpoints" / "step_0000008").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:-7] + b"garbage")
    result = glassroom("eval", str(copy), "--tasks", "glassroom_bpb_prose", "--step", "8")  # through python -m glassroom
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "step_0000008" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_eval_tasks_mistakes_are_refused_before_the_run_starts(dataset, tmp_path):
    out = tmp_path / "r"
    result = train_here(out, dataset, "train.eval_tasks=[glassroom_nope]")
    assert result.returncode == 2 and "train.eval_tasks: unknown task 'glassroom_nope'" in result.stderr
    assert not out.exists()
    bare = tmp_path / "bare"
    shutil.copytree(dataset, bare, ignore=shutil.ignore_patterns("tasks"))
    result = run_train(out, bare, "train.eval_tasks=[glassroom_bpb]", env=OFFLINE)
    assert result.returncode == 2 and "glassroom data tasks" in result.stderr and not out.exists()


@pytest.mark.parametrize("tasks, says", [
    ("[glassroom_mc, glassroom_mc_prose]", "train.eval_tasks: Duplicate task 'glassroom_mc_prose'"),
    ("[lambada_openai]", "train.eval_tasks: cannot load the data of lambada_openai"),  # offline: known at start
])
def test_eval_tasks_lm_eval_refuses_are_known_before_the_run_starts(dataset, tmp_path, tasks, says):
    """Not at the first checkpoint, after RUN_DIR was made and steps were paid for."""
    out = tmp_path / "r"
    result = train_here(out, dataset, f"train.eval_tasks={tasks}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and not out.exists()


@pytest.mark.parametrize("args, says", [
    (["--choices", "1"], "--choices: must be at least 2, got 1"),
    (["--seq-len", "0"], "--seq-len: must be at least 1, got 0"),
    (["--items", "0"], "--items: must be at least 1, got 0"),
])
def test_data_tasks_mistakes_are_one_line_and_leave_tasks_alone(dataset, args, says):
    before = (dataset / "tasks" / "manifest.json").read_bytes()
    result = glassroom_here("data", "tasks", str(dataset), *args)
    assert result.returncode == 2 and result.stderr.strip() == f"error: {says}", result.stderr
    assert (dataset / "tasks" / "manifest.json").read_bytes() == before
    assert not [p.name for p in dataset.iterdir() if p.name.startswith(".tasks")]


def test_data_tasks_needs_a_dataset(tmp_path):
    result = glassroom_here("data", "tasks", str(tmp_path))
    assert result.returncode == 2 and "not a built dataset" in result.stderr and "Traceback" not in result.stderr


def test_scores_wait_for_another_writer_and_join_the_journal(run, tmp_path):
    """A trainer holding the store's write lock (a transaction in progress) delays the scores; it
    does not lose them or break the journal's digest chain."""
    from glassroom.downstream.run import store_results
    from glassroom.observe import journal

    copy = Path(shutil.copytree(run, tmp_path / "run"))
    live = StoreWriter(copy)
    live.conn.execute("BEGIN IMMEDIATE")
    live.conn.execute("INSERT OR REPLACE INTO artifacts VALUES ('x', 0, '1')")
    releaser = threading.Timer(1.0, lambda: live.conn.execute("COMMIT"))
    releaser.start()
    start = time.perf_counter()
    store_results(copy, 12, {"glassroom_mc_code": {"acc": 0.5}}, checkpoint="step_0000012")
    waited = time.perf_counter() - start
    live.event("note", "the trainer goes on", 12)
    live.close()
    assert waited >= 0.9
    with StoreReader(copy) as reader:
        assert reader.latest("downstream/glassroom_mc_code/acc") == (12, 0.5)
        assert [e["kind"] for e in reader.events()][-2:] == ["downstream", "note"]
        assert journal.verify_chain(reader.conn)["ok"]


def test_a_limit_that_cuts_a_task_short_prints_the_scores_and_stores_nothing(run):
    """--limit 3 of 12 items is not the checkpoint's score: it must not replace the whole one."""
    whole = glassroom_here("eval", str(run), "--tasks", "glassroom_mc_prose", "--step", "8", "--json")
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["stored"] is True
    with StoreReader(run) as reader:
        before = reader.series("downstream/glassroom_mc_prose/acc_norm")
        events = len(reader.events())
    part = glassroom_here("eval", str(run), "--tasks", "glassroom_mc_prose", "--step", "8", "--limit", "3", "--json")
    assert part.returncode == 0, part.stderr
    out = json.loads(part.stdout)
    assert out["items"] == 3 and out["stored"] is False and "glassroom_mc_prose" in out["scores"]
    assert "not stored" in part.stderr and "3 of glassroom_mc_prose's 12 items" in part.stderr
    with StoreReader(run) as reader:
        after = reader.series("downstream/glassroom_mc_prose/acc_norm")
        assert len(reader.events()) == events
    assert after[0].tolist() == before[0].tolist() and after[1].tolist() == before[1].tolist()
    # A limit above the task's size scores it whole: stored.
    big = glassroom_here("eval", str(run), "--tasks", "glassroom_mc_prose", "--step", "8", "--limit", "1000", "--json")
    assert big.returncode == 0 and json.loads(big.stdout)["stored"] is True


def test_bpb_tasks_scored_with_another_window_than_written_say_so_and_are_not_stored(run):
    same = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_prose", "--step", "8")
    assert same.returncode == 0 and "not comparable" not in same.stderr and "not stored" not in same.stderr
    with StoreReader(run) as reader:
        before = reader.series("downstream/glassroom_bpb_prose/bits_per_byte")
    other = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_prose", "--step", "8", "--max-length", "64")
    assert other.returncode == 0, other.stderr
    assert "written for windows of 32 tokens and are scored with --max-length 64: not comparable" in other.stderr
    assert "not stored in" in other.stderr and "--max-length 64 is not the run's train.seq_len 32" in other.stderr
    with StoreReader(run) as reader:
        after = reader.series("downstream/glassroom_bpb_prose/bits_per_byte")
    assert after[0].tolist() == before[0].tolist() and after[1].tolist() == before[1].tolist()


def test_a_checkpoint_pruned_while_it_is_read_is_chosen_again(run, tmp_path, monkeypatch, capsys):
    """A live trainer's retention removes the newest checkpoint just as eval reads it: eval takes the
    newest one left and scores that step, no traceback."""
    import glassroom.train.run_folder as hf_load
    from glassroom.cli import main

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    original, calls = hf_load.run_state, []

    def pruned_first(found):
        calls.append(found.step)
        if len(calls) == 1:
            shutil.rmtree(found.checkpoint)  # what the trainer's retention does
        return original(found)

    monkeypatch.setattr(hf_load, "run_state", pruned_first)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    code = main(["eval", str(copy), "--tasks", "glassroom_bpb_prose", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert calls == [12, 8] and json.loads(out.out)["step"] == 8 and "Traceback" not in out.err


@pytest.mark.slow
def test_a_pruned_checkpoint_prints_no_traceback_from_the_checkpoint_reader(run, tmp_path):
    """As a user sees it (no pytest log capture): DCP logs each failed read with a traceback on the
    root logger; eval's output stays its own."""
    import os
    import subprocess
    import sys

    from train_helpers import ROOT

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    script = ("import shutil, sys, glassroom.train.run_folder as h\nfrom glassroom.cli import main\n"
              "orig, calls = h.run_state, []\n"
              "def pruned_first(found):\n    calls.append(1)\n"
              "    if len(calls) == 1:\n        shutil.rmtree(found.checkpoint)\n    return orig(found)\n"
              "h.run_state = pruned_first\n"
              f"sys.exit(main(['eval', {str(copy)!r}, '--tasks', 'glassroom_bpb_prose']))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert "(step 8)" in result.stdout and "Traceback" not in result.stderr and "metadata" not in result.stderr


@pytest.mark.slow
def test_a_run_whose_dataset_has_no_tasks_still_takes_names_lm_eval_ships(tiny_dataset, tmp_path):
    """The dataset's tasks/ is needed for glassroom's tasks only: a hub task goes to lm-eval (here
    offline, so its data cannot be fetched: that is the one line), a glassroom task asks for tasks/."""
    assert not (tiny_dataset / "tasks").exists()
    out = tmp_path / "run"
    trained = run_train(out, tiny_dataset, "train.steps=4", env={**OFFLINE, "OMP_NUM_THREADS": "1"})
    assert trained.returncode == 0, trained.stderr
    hub = glassroom_here("eval", str(out), "--tasks", "lambada_openai", "--limit", "1")
    assert hub.returncode == 2 and "cannot load the data of lambada_openai" in hub.stderr, hub.stderr
    local = glassroom_here("eval", str(out), "--tasks", "glassroom_mc")
    assert local.returncode == 2 and "no tasks folder; write it with glassroom data tasks" in local.stderr


def test_tasks_written_from_another_build_of_the_data_say_so(run, dataset, tmp_path):
    """--tasks-dir of another dataset (here: the run's own tasks with another build recorded)."""
    other = tmp_path / "tasks"
    shutil.copytree(dataset / "tasks", other)
    manifest = json.loads((other / "manifest.json").read_text())
    own = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_prose", "--step", "8", "--tasks-dir", str(other))
    assert own.returncode == 0 and "another build" not in own.stderr, own.stderr
    manifest["dataset_build"]["recipe_hash"] = "sha256:" + "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = glassroom_here("eval", str(run), "--tasks", "glassroom_bpb_prose", "--step", "8", "--tasks-dir", str(other))
    assert result.returncode == 0, result.stderr
    assert "was written from another build of the data than the run's" in result.stderr


@pytest.mark.slow
def test_eval_output_is_the_scores_without_lm_evals_noise(run, tmp_path):
    """Run outside a git checkout: no progress bars, no `fatal: not a git repository` from lm-eval's
    environment report; stdout is the scores."""
    import os
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "glassroom", "eval", str(run), "--tasks", "glassroom_mc_prose",
                             "--step", "8"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1",
                                 "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert result.returncode == 0, result.stderr
    assert "it/s" not in result.stderr and "%|" not in result.stderr and "fatal" not in result.stderr, result.stderr
    assert "glassroom_mc_prose" in result.stdout and "acc" in result.stdout
