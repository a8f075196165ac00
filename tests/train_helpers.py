"""Helpers for the training tests: run `glassroom train` as a user would, read what it stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from glassroom.observe.store import StoreReader

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "train-tiny.yaml"


def train_cmd(out: Path, dataset: Path, *sets: str, resume: bool = False, config: Path = TINY) -> list[str]:
    cmd = [sys.executable, "-m", "glassroom", "train", str(config), "--out", str(out), "--quiet",
           "--set", f"data.path={dataset}"]
    for item in sets:
        cmd += ["--set", item]
    return cmd + (["--resume"] if resume else [])


def run_train(out: Path, dataset: Path, *sets: str, resume: bool = False, env: dict | None = None,
              config: Path = TINY) -> subprocess.CompletedProcess:
    return subprocess.run(train_cmd(out, dataset, *sets, resume=resume, config=config), cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def losses(run_dir: Path, name: str = "train/loss") -> np.ndarray:
    with StoreReader(run_dir) as reader:
        return reader.series(name)[1]
