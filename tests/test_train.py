"""`glassroom train` end to end on the tiny real dataset: resume, torchrun, NaN, the run store."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glassroom.observe.store import StoreReader
from train_helpers import ROOT, assert_same_store, losses, run_train, train_cmd


@pytest.fixture(scope="module")
def reference_run(tiny_dataset, tmp_path_factory) -> Path:
    """An uninterrupted 12-step MoE run that other tests compare against."""
    out = tmp_path_factory.mktemp("runs") / "reference"
    result = run_train(out, tiny_dataset)
    assert result.returncode == 0, result.stderr
    return out


def test_run_store_has_the_metrics_events_and_evaluations(reference_run):
    with StoreReader(reference_run) as reader:
        names = set(reader.names())
        for name in ("train/loss", "train/lr", "train/grad_norm", "throughput/tokens_per_s", "throughput/mfu",
                     "data/tokens/prose", "data/tokens/docs", "data/tokens/code", "eval/macro/bpb",
                     "eval/prose/bpb", "moe/layer_1/imbalance", "moe/layer_1/entropy", "norm/param/total",
                     "norm/grad/experts", "norm/update/router_bias", "norm/param/layer_1"):
            assert name in names, name
        steps, values = reader.series("train/loss")
        assert list(steps) == list(range(1, 13)) and np.isfinite(values).all()
        assert len(reader.vectors("moe/layer_1/tokens_per_expert")) == 12
        kinds = [e["kind"] for e in reader.events()]
        assert kinds[0] == "start" and kinds[-1] == "end"
        assert kinds.count("checkpoint") == 3 and kinds.count("eval") == 2
        assert reader.status()["state"] == "finished"
        # Tokens per domain add up to every token trained on.
        total = sum(reader.latest(f"data/tokens/{d}")[1] for d in ("prose", "docs", "code"))
        assert total == 12 * 8 * 32
        bpb = reader.latest("eval/prose/bpb")[1]
        assert 1.0 < bpb < 5.0
    saved = (reference_run / "config.yaml").read_text()
    assert "micro_batch_size: 4" in saved and "moe:" in saved


def test_sigkill_then_resume_continues_bit_for_bit(tiny_dataset, reference_run, tmp_path):
    out = tmp_path / "killed"
    # SIGKILL planted right after step 4's checkpoint is renamed into place: no timing race.
    killed = run_train(out, tiny_dataset, env={"GLASSROOM_FAULTS": "kill_after_checkpoint@4"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(losses(out)) == 4  # it really was interrupted, with every row of the visible checkpoint
    resumed = run_train(out, tiny_dataset, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    np.testing.assert_array_equal(losses(out), losses(reference_run))
    np.testing.assert_array_equal(losses(out, "eval/macro/bpb"), losses(reference_run, "eval/macro/bpb"))
    assert_same_store(out, reference_run)
    with StoreReader(out) as reader:
        assert any(e["kind"] == "resume" for e in reader.events())


def test_torchrun_two_processes_fsdp2_match_one_process(tiny_dataset, reference_run, tmp_path):
    out = tmp_path / "fsdp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "glassroom",
           *train_cmd(out, tiny_dataset)[3:], "--set", "train.parallel=fsdp"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = losses(reference_run), losses(out)
    assert len(two) == 12
    # Same global batch, same data: the curves agree within bf16/reduction-order noise.
    np.testing.assert_allclose(two, one, rtol=1e-3)
    assert (out / "checkpoints" / "step_0000012").exists()


def test_nan_steps_are_skipped_and_recorded(tiny_dataset, tmp_path):
    out = tmp_path / "nan"
    result = run_train(out, tiny_dataset, "train.steps=6", env={"GLASSROOM_FAULTS": "nan@3"})
    assert result.returncode == 0, result.stderr
    with StoreReader(out) as reader:
        skips = [e for e in reader.events() if e["kind"] == "skip"]
        assert [e["step"] for e in skips] == [3]
        assert "not finite" in skips[0]["text"]
        values = reader.series("train/loss")[1]
        assert np.isnan(values[2]) and np.isfinite(values[3:]).all()


def test_too_many_nan_steps_stop_the_run_with_its_checkpoint_intact(tiny_dataset, tmp_path):
    out = tmp_path / "nans"
    env = {"GLASSROOM_FAULTS": "nan@5,nan@6,nan@7"}
    result = run_train(out, tiny_dataset, "train.max_bad_steps=3", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: stopped at step 7: 3 steps in a row")
    assert "step_0000004" in lines[-1]
    assert (out / "checkpoints" / "step_0000004" / "trainer.json").exists()
    with StoreReader(out) as reader:
        assert reader.status()["state"] == "failed"


def test_the_store_is_read_by_another_process_while_training(tiny_dataset, tmp_path):
    out = tmp_path / "live"
    process = subprocess.Popen(train_cmd(out, tiny_dataset, "train.steps=40", "train.checkpoint_every=100"),
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reader_script = (
        "import sys, time; from glassroom.observe.store import StoreReader\n"
        "seen = []\n"
        "deadline = time.time() + 300\n"
        "while time.time() < deadline:\n"
        "    try:\n"
        "        with StoreReader(sys.argv[1]) as r:\n"
        "            seen.append(len(r.series('train/loss')[0])); state = r.status()['state']\n"
        "    except FileNotFoundError:\n"
        "        state = 'absent'\n"
        "    if state in ('finished', 'failed'): break\n"
        "    time.sleep(0.2)\n"
        "print(seen)\n"
    )
    observed = subprocess.run([sys.executable, "-c", reader_script, str(out)], capture_output=True, text=True,
                              timeout=400)
    process.wait(timeout=300)
    assert process.returncode == 0, process.stderr.read()
    counts = json.loads(observed.stdout)
    partial = [c for c in counts if 0 < c < 40]
    assert partial, f"the reader never saw a run in progress: {counts}"
    assert counts == sorted(counts) and counts[-1] == 40


def test_resume_with_an_incompatible_config_is_a_clear_error(reference_run, tiny_dataset, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(reference_run, out)
    result = run_train(out, tiny_dataset, "model.d_model=128", resume=True)
    assert result.returncode == 2
    assert "cannot resume with a different model.d_model (64 -> 128)" in result.stderr
    again = run_train(out, tiny_dataset)
    assert again.returncode == 2 and "already holds a run" in again.stderr


@pytest.mark.parametrize("setting,message", [
    ("train.micro_batch_size=3", "train.micro_batch_size: 3 does not divide batch_size (8)"),
    ("train.seq_len=128", "train.seq_len: 128 is longer than model.max_seq_len (64)"),
    ("train.lrr=1", "train.lrr: unknown key (did you mean lr?)"),
    ("data.weights={prose: -1}", "data.weights.prose: must be zero or more"),
    ("train.device=tpu", "train.device: 'tpu' is not one of cpu, cuda, auto"),
])
def test_bad_run_configs_are_one_line_errors(tiny_dataset, tmp_path, setting, message):
    result = run_train(tmp_path / "bad", tiny_dataset, setting)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert not (tmp_path / "bad").exists()


def test_missing_dataset_is_a_clear_error(tmp_path):
    result = run_train(tmp_path / "run", tmp_path / "no-such-data")
    assert result.returncode == 2 and "not a built dataset" in result.stderr


def glassroom(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_metrics_runs_and_note_commands(reference_run, tmp_path):
    listing = glassroom("metrics", str(reference_run))
    assert listing.returncode == 0 and "train/loss" in listing.stdout
    series = json.loads(glassroom("metrics", str(reference_run), "--name", "train/loss").stdout)
    assert [s for s, _ in series] == list(range(1, 13))
    assert [v for _, v in series] == list(losses(reference_run))
    wrong = glassroom("metrics", str(reference_run), "--name", "train/los")
    assert wrong.returncode == 2 and "did you mean train/loss" in wrong.stderr
    runs = glassroom("runs", str(reference_run.parent))
    assert runs.returncode == 0
    assert any(line.split()[:3] == ["reference", "finished", "12"] for line in runs.stdout.splitlines())
    copy = tmp_path / "noted"
    shutil.copytree(reference_run, copy)
    noted = glassroom("note", str(copy), "loss looks fine; continuing")
    assert noted.returncode == 0
    with StoreReader(copy) as reader:
        notes = [e for e in reader.events() if e["kind"] == "note"]
        assert [(n["step"], n["text"]) for n in notes] == [(12, "loss looks fine; continuing")]
        assert reader.status()["state"] == "finished"
    for args in (["note", str(tmp_path), "x"], ["note", str(copy), "  "], ["runs", str(tmp_path / "none")],
                 ["metrics", str(tmp_path)]):
        result = glassroom(*args)
        assert result.returncode == 2 and result.stderr.startswith("error: "), args
    a_file = tmp_path / "a.txt"
    a_file.write_text("not runs\n")
    result = glassroom("runs", str(a_file))
    assert result.returncode == 2 and result.stderr == f"error: {a_file}: is a file, not a folder; give the folder that holds the runs\n"
