"""The names of the files in a run's folder (RUN_DIR), and small path helpers: the one place that
spells them. Stdlib only, never imports torch or the store, so training, the store, the dashboard,
the ladder and the commands all import it.

RUN_DIR/
  config.yaml         the resolved config the run started with (train/run_dir.py writes it)
  store.sqlite        the run store: metrics, vectors, events, artifacts (observe/store.py), with
                      SQLite's store.sqlite-wal, -shm and -journal beside it while it is open
  tokenizer.json      the tokenizer the run trained with, copied from its dataset at the start
  checkpoints/        step_<n>/ checkpoints (train/checkpoint.py)

What a ladder's folder holds (spec.yaml, rungs/, prediction.json, ...) is the ladder's
(glassroom/ladder/rungs.py), not a run folder's.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.yaml"
STORE_FILE = "store.sqlite"
STORE_SIDECARS = ("wal", "shm", "journal")   # SQLite's files beside the store: store.sqlite-wal, ...
RUN_TOKENIZER = "tokenizer.json"
CHECKPOINTS_DIR = "checkpoints"


def config_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CONFIG_FILE


def store_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / STORE_FILE


def tokenizer_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / RUN_TOKENIZER


def checkpoints_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def is_store_file(name: str) -> bool:
    """`name` is the store or one of SQLite's files beside it."""
    return name == STORE_FILE or (name.startswith(STORE_FILE + "-") and name[len(STORE_FILE) + 1:] in STORE_SIDECARS)


def has_store(run_dir: str | Path) -> bool:
    return store_path(run_dir).is_file()


def has_config(run_dir: str | Path) -> bool:
    return config_path(run_dir).is_file()
