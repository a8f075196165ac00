"""Shared setup for the downstream tests: the `glassroom` CLI offline, a copy of the tiny dataset
with its lm-eval tasks written, and a tiny run trained on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from cli_helpers import glassroom_in_process
from hf_helpers import OFFLINE
from train_helpers import ROOT, run_train, train_cmd

SEQ_LEN, WINDOWS = 32, 32


def glassroom(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"})


def glassroom_here(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`glassroom ARGS` offline in the test process, for checks where the process is not under test."""
    return glassroom_in_process(*args, cwd=cwd, env=OFFLINE)


def train_here(out: Path, dataset: Path, *sets: str) -> subprocess.CompletedProcess:
    """`glassroom train` (as run_train gives it) offline in the test process: for runs refused at start."""
    return glassroom_in_process(*train_cmd(out, dataset, *sets)[3:], env=OFFLINE)


def dataset_with_tasks(tiny_dataset: Path, out: Path) -> Path:
    """A copy of the tiny dataset with its tasks written through the CLI (12 items, seed 3)."""
    shutil.copytree(tiny_dataset, out)
    result = glassroom_here("data", "tasks", str(out), "--seq-len", str(SEQ_LEN), "--windows", str(WINDOWS),
                       "--items", "12", "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "glassroom_mc_prose" in result.stdout
    return out


def train_run(out: Path, dataset: Path, *sets: str) -> Path:
    """The tiny MoE trained 12 steps (checkpoints at 4, 8, 12; the last two kept), with
    eval_sequences = the tasks' windows and room for 128 tokens."""
    result = run_train(out, dataset, f"train.eval_sequences={WINDOWS}", "model.max_seq_len=128", *sets,
                       env={**OFFLINE, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    return out
