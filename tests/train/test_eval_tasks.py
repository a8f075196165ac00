"""train.eval_tasks and a kill in the middle of the task evaluation (SIGKILL from inside lm-eval at
step 8, before its checkpoint): --resume gives the store of the run never interrupted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from downstream_helpers import WINDOWS, dataset_with_tasks, train_run
from hf_helpers import OFFLINE
from train_helpers import ROOT, assert_same_store, run_train_here, train_cmd

from glassroom.observe.store import StoreReader

SETS = (f"train.eval_sequences={WINDOWS}", "model.max_seq_len=128",
        "train.eval_tasks=[glassroom_bpb_prose, glassroom_mc_prose]")

# glassroom train, with the task evaluation's second call SIGKILLed half-way: the first task scored
# (its loglikelihoods computed), nothing of the second yet.
KILLER = """
import os, signal, sys
import glassroom.downstream.adapter as adapter
from glassroom.cli import main
calls = {"n": 0}
original = adapter.GlassroomLM.loglikelihood_rolling
def killing(self, requests, disable_tqdm=False):
    out = original(self, requests, disable_tqdm)
    calls["n"] += 1
    if calls["n"] == 2:  # step 8's evaluation, mid-way
        os.kill(os.getpid(), signal.SIGKILL)
    return out
adapter.GlassroomLM.loglikelihood_rolling = killing
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_kill_inside_the_task_evaluation_resumes_to_the_uninterrupted_store(tiny_dataset, tmp_path):
    dataset = dataset_with_tasks(tiny_dataset, tmp_path / "data")
    reference = train_run(tmp_path / "reference", dataset, SETS[-1])
    out = tmp_path / "killed"
    cmd = train_cmd(out, dataset, *SETS)
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLER, *cmd[3:]], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env=env)
    assert killed.returncode == -9, killed.stderr
    with StoreReader(out) as reader:
        assert [e["step"] for e in reader.events() if e["kind"] == "downstream"] == [4]
    resumed = run_train_here(out, dataset, *SETS, resume=True, env={**OFFLINE, "OMP_NUM_THREADS": "1"})
    assert resumed.returncode == 0, resumed.stderr
    assert_same_store(out, reference)
    with StoreReader(out) as reader:
        assert [e["step"] for e in reader.events() if e["kind"] == "downstream"] == [4, 8, 12]
