"""A run's folder: created for a new run, checked before a resume, holding the resolved config.

`--resume` continues only when the settings that shape the model, the data stream and the optimizer
state are the ones the run started with (RESUME_FIXED); the number of steps, the schedule, the
evaluation and checkpoint intervals and what is observed may change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from glassroom.errors import GlassroomError

CONFIG_FILE = "config.yaml"
RESUME_FIXED = ("model", "data.path", "data.weights", "train.batch_size", "train.seq_len", "train.seed",
                "train.optimizer")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(saved: dict, current: dict, keys=RESUME_FIXED) -> list[str]:
    """'key (old -> new)' for every setting under `keys` that differs."""
    a, b = _flatten(saved), _flatten(current)
    diffs = []
    for key in sorted(set(a) | set(b)):
        if any(key == k or key.startswith(k + ".") for k in keys) and a.get(key) != b.get(key):
            diffs.append(f"{key} ({a.get(key)!r} -> {b.get(key)!r})")
    return diffs


def saved_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise GlassroomError(f"{run_dir}: nothing to resume (no {CONFIG_FILE}); start it without --resume")
    return yaml.safe_load(path.read_text())


def prepare_run_dir(run_dir: Path, cfg, resume: bool, is_main: bool, barrier=lambda: None) -> str:
    """'new' or 'resumed'; writes RUN_DIR/config.yaml (resolved config) on the main rank. Under
    torchrun every rank checks first and `barrier` holds the write until all have checked."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise GlassroomError(f"--out {run_dir}: is a file, not a folder")
    current = cfg.to_dict()
    if resume:
        saved = saved_config(run_dir)
        diffs = config_differences(saved, current)
        if diffs:
            raise GlassroomError(
                f"{run_dir}: cannot resume with a different {', '.join(diffs[:4])}"
                f"{' and more' if len(diffs) > 4 else ''}; train into a new --out instead"
            )
        state = "resumed"
    else:
        # A store without a config is a run not yet started: it may hold a preregistered prediction.
        if (run_dir / CONFIG_FILE).exists():
            raise GlassroomError(
                f"--out {run_dir}: already holds a run; add --resume to continue it, or choose a new folder"
            )
        state = "new"
    barrier()
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / f".{CONFIG_FILE}.tmp"
        tmp.write_text(yaml.safe_dump(current, sort_keys=False))
        os.replace(tmp, run_dir / CONFIG_FILE)
    return state
