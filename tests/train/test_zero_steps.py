"""`train.steps: 0`: the initial model (a fresh init, or `init.from`) evaluated and checkpointed as
step 0, so an imported model is scored before any training, and exported unchanged; a later
--resume with more steps continues from that checkpoint exactly like a run that never stopped."""

from __future__ import annotations

import numpy as np

from glassroom.observe.store import StoreReader
from train_helpers import losses, run_train, run_train_here
import pytest

SETS = ("train.eval_every=2", "train.checkpoint_every=2", "train.warmup_steps=0")


@pytest.mark.slow
def test_zero_steps_evaluates_and_checkpoints_step_0_then_resumes_exactly(tiny_dataset, tmp_path):
    zero = tmp_path / "zero"
    result = run_train_here(zero, tiny_dataset, "train.steps=0", *SETS)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (zero / "checkpoints").iterdir() if p.name.startswith("step_")] == ["step_0000000"]
    with StoreReader(zero) as reader:
        assert reader.latest("eval/macro/loss")[0] == 0 and reader.status()["state"] == "finished"
        assert reader.series("train/loss")[0].size == 0  # nothing trained
    again = run_train_here(zero, tiny_dataset, "train.steps=0", *SETS, resume=True)  # nothing left to do
    assert again.returncode == 0, again.stderr
    resumed = run_train_here(zero, tiny_dataset, "train.steps=4", *SETS, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    straight = tmp_path / "straight"
    assert run_train_here(straight, tiny_dataset, "train.steps=4", *SETS).returncode == 0
    assert np.array_equal(losses(zero), losses(straight)) and len(losses(zero)) == 4


def test_negative_steps_is_one_line(tiny_dataset, tmp_path):
    result = run_train(tmp_path / "run", tiny_dataset, "train.steps=-1")
    assert result.returncode == 2 and "train.steps: must be zero or more, got -1" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_muon_resumes_with_the_schedules_lr(tiny_dataset, tmp_path):
    """Muon + AdamW (one combined optimizer): after a resume the schedule's lr reaches both again
    (it stayed at the checkpoint's lr: the combined optimizer kept the groups load_state_dict
    replaced), from a step-0 checkpoint and after a kill alike."""
    sets = ("train.optimizer=muon", "train.steps=6", *SETS)
    straight = tmp_path / "straight"
    assert run_train_here(straight, tiny_dataset, *sets).returncode == 0
    killed = tmp_path / "killed"
    assert run_train(killed, tiny_dataset, *sets, env={"GLASSROOM_FAULTS": "kill@3"}).returncode != 0
    assert run_train_here(killed, tiny_dataset, *sets, resume=True).returncode == 0
    zero = tmp_path / "zero"
    assert run_train_here(zero, tiny_dataset, "train.optimizer=muon", "train.steps=0", *SETS).returncode == 0
    assert run_train_here(zero, tiny_dataset, *sets, resume=True).returncode == 0
    assert np.array_equal(losses(killed), losses(straight)) and np.array_equal(losses(zero), losses(straight))
