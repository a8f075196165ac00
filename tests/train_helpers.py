"""Helpers for the training tests: run `glassroom train` as a user would, read what it stored."""

from __future__ import annotations

import hashlib
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


def tree_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder` (hidden ones and the store's -wal/-shm included), by path."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and not p.is_symlink()}


def losses(run_dir: Path, name: str = "train/loss") -> np.ndarray:
    with StoreReader(run_dir) as reader:
        return reader.series(name)[1]


TIMING = ("throughput/",)  # metrics that measure the machine, not the run: they differ between runs


def store_contents(run_dir: Path) -> dict:
    """What a run's store says about the run, timing aside: every series (steps and values), every
    vector, and the kinds of the journal's events in order, with the resume's own events (resume, restarted) left out."""
    with StoreReader(run_dir) as reader:
        series = {name: tuple(map(list, reader.series(name))) for name in reader.names()
                  if not name.startswith(TIMING)}
        vectors = {name: reader.vectors(name) for name in reader.vector_names()}
        kinds = [e["kind"] for e in reader.events() if e["kind"] not in ("resume", "restarted", "checkpoint_damaged")]
    return {"series": series, "vectors": vectors, "kinds": kinds}


def train_counters(run_dir: Path) -> dict:
    """The counters the newest checkpoint carries (trainer.json's train_state): tokens seen, tokens
    per domain, skipped steps and the observers' state (the anomaly detector's history, ...)."""
    import json

    newest = sorted((run_dir / "checkpoints").glob("step_*/trainer.json"))[-1]
    return json.loads(newest.read_text())["train_state"]


def assert_same_store(run: Path, reference: Path, kinds: bool = True, counters: bool = True) -> None:
    """The store as store_contents reads it, and (counters) the newest checkpoint's counters."""
    if counters:
        got_counters, want_counters = train_counters(run), train_counters(reference)
        assert got_counters["tokens_by_domain"] == want_counters["tokens_by_domain"]
        assert got_counters["extra"] == want_counters["extra"]  # the anomaly detector's state
        assert got_counters == want_counters
    got, want = store_contents(run), store_contents(reference)
    assert sorted(got["series"]) == sorted(want["series"])
    for name, (steps, values) in want["series"].items():
        assert got["series"][name][0] == steps, name
        np.testing.assert_array_equal(got["series"][name][1], values, err_msg=name)
    assert got["vectors"] == want["vectors"]
    if kinds:
        assert got["kinds"] == want["kinds"]


def run_train_here(out: Path, dataset: Path, *sets: str, resume: bool = False, env: dict | None = None,
                   config: Path = TINY) -> subprocess.CompletedProcess:
    """run_train's `glassroom train` run in this process (cli_helpers.glassroom_in_process): the same
    exit code, stdout and stderr, without a new interpreter's torch import. For runs whose process is
    not itself under test: no kill drill (GLASSROOM_FAULTS=kill...), no signal, no torchrun."""
    from cli_helpers import glassroom_in_process

    return glassroom_in_process(*train_cmd(out, dataset, *sets, resume=resume, config=config)[3:], env=env)


def trained_here(out: Path, dataset: Path, *sets: str) -> Path:
    """`out`, a run trained to the end by run_train_here (asserting it exited 0)."""
    result = run_train_here(out, dataset, *sets)
    assert result.returncode == 0, result.stderr
    return out
