"""A run's folder: created for a new run, checked before a resume, holding the resolved config.

`--resume` continues only when the settings that shape the model, the data stream and the optimizer
state are the ones the run started with (RESUME_FIXED); the number of steps, the schedule, the
evaluation and checkpoint intervals and what is observed may change.

`glassroom train --out` takes, for a new run, a folder that does not exist, an empty one, or one
holding only a run store without a config (a run not yet started, e.g. with a preregistered
prediction); any other folder is refused (`check_new_run_dir`). `before_start` records what the folder held, so that `undo_start` can remove what a start
that failed before its first step created, and nothing else.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from glassroom import yaml_io
from glassroom.errors import GlassroomError
from glassroom.folders import replace_file
from glassroom.observe.run_folder import CONFIG_FILE, RUN_TOKENIZER, STORE_FILE, is_store_file

RESUME_FIXED = ("model", "data.path", "data.weights", "train.batch_size", "train.seq_len", "train.seed",
                "train.optimizer", "init", "train.task", "train.overlong")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


# Model options added after runs already existed, with the value that reproduces those runs: a saved
# config without the key is read as having this value (a run written before they existed still resumes).
ADDED_DEFAULTS = {"model.norm_eps": 1e-6, "model.rope_scaling": None,
                  "model.moe.norm_topk_prob": None, "model.moe.routed_scale": 1.0,
                  "train.task": "pretrain", "train.overlong": "truncate",
                  "observe.sample_prompts": [], "observe.sample_tokens": 64}


def config_differences(saved: dict, current: dict, keys=RESUME_FIXED) -> list[str]:
    """'key (old -> new)' for every setting under `keys` that differs."""
    a, b = _flatten(saved), _flatten(current)
    for flat in (a, b):
        for key, value in ADDED_DEFAULTS.items():
            section = key.rsplit(".", 1)[0]
            if key not in flat and any(k.startswith(section + ".") for k in flat):
                flat[key] = value
    diffs = []
    for key in sorted(set(a) | set(b)):
        if any(key == k or key.startswith(k + ".") for k in keys) and a.get(key) != b.get(key):
            diffs.append(f"{key} ({a.get(key)!r} -> {b.get(key)!r})")
    return diffs


def saved_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise GlassroomError(f"{run_dir}: nothing to resume (no {CONFIG_FILE}); start it without --resume")
    try:
        saved = yaml_io.load_file(path)
    except (yaml.YAMLError, yaml_io.YamlLimitError, UnicodeDecodeError) as exc:
        what = "not text" if isinstance(exc, UnicodeDecodeError) else yaml_io.describe_error(exc)
        raise GlassroomError(f"{path}: {what}; the run's saved config is damaged") from None
    if not isinstance(saved, dict):
        raise GlassroomError(f"{path}: not a mapping of sections; the run's saved config is damaged")
    return saved


def check_new_run_dir(run_dir: Path) -> None:
    """A one-line error unless `run_dir` may receive a new run (see the module doc)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise GlassroomError(f"--out {run_dir}: is a file, not a folder")
    if not run_dir.is_dir():
        parent = run_dir.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise GlassroomError(f"--out {run_dir}: {parent} is a file, not a folder; choose another path")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise GlassroomError(f"--out {run_dir}: cannot create folders in {parent} (permission denied)")
        return
    # A store without a config is a run not yet started: it may hold a preregistered prediction.
    if (run_dir / CONFIG_FILE).exists():
        raise GlassroomError(
            f"--out {run_dir}: already holds a run; add --resume to continue it, or choose a new folder"
        )
    others = sorted(p.name for p in run_dir.iterdir() if not is_store_file(p.name) and p.name != f".{CONFIG_FILE}.tmp")
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise GlassroomError(
            f"--out {run_dir}: exists and is not a run folder (it holds {shown}); choose a new or empty folder"
        )


@dataclass(frozen=True)
class StartRecord:
    """What RUN_DIR held before a start: enough to remove what the start created, and only that."""

    run_dir: Path
    created_from: Optional[Path]  # the highest folder of run_dir's path that did not exist yet
    existing: frozenset[str]  # names inside run_dir before the start (empty when it did not exist)


def before_start(run_dir: Path) -> StartRecord:
    run_dir = Path(run_dir).absolute()
    if run_dir.is_dir():
        return StartRecord(run_dir, None, frozenset(p.name for p in run_dir.iterdir()))
    top = run_dir
    while not top.parent.exists() and top.parent != top.parent.parent:
        top = top.parent
    return StartRecord(run_dir, top, frozenset())


def undo_start(record: StartRecord) -> None:
    """Remove what a failed start created in RUN_DIR (the folder itself if it made it); best effort,
    never touching anything that was there before. A pre-existing store keeps its -wal/-shm files."""
    run_dir = record.run_dir
    if not run_dir.is_dir():
        return
    if record.created_from is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
        folder = run_dir.parent
        while record.created_from in (folder, *folder.parents) and folder.is_dir():
            try:
                folder.rmdir()  # only while empty: another process may have written beside us
            except OSError:
                break
            folder = folder.parent
        return
    keep_store = STORE_FILE in record.existing
    for path in run_dir.iterdir():
        if path.name in record.existing or (keep_store and is_store_file(path.name)):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


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
        # Only the one rule here: callers inside glassroom (a ladder's rung in its pipeline step folder)
        # train into folders of their own; `glassroom train` applies check_new_run_dir to --out first.
        if (run_dir / CONFIG_FILE).exists():
            raise GlassroomError(
                f"--out {run_dir}: already holds a run; add --resume to continue it, or choose a new folder"
            )
        state = "new"
    barrier()
    if is_main:
        try:
            replace_file(run_dir / CONFIG_FILE, yaml.safe_dump(current, sort_keys=False))
            _keep_tokenizer(run_dir, cfg)
        except OSError as exc:
            raise GlassroomError(f"--out {run_dir}: cannot write {CONFIG_FILE} ({exc.strerror or exc})") from None
    return state


def _keep_tokenizer(run_dir: Path, cfg) -> None:
    """A copy of the dataset's tokenizer.json as this run started with it (RUN_TOKENIZER): export and
    glassroom.load use it, so a dataset rebuilt or moved later cannot hand the model another one."""
    kept = run_dir / RUN_TOKENIZER
    source = Path(os.path.expanduser(str(cfg.data.path))) / "tokenizer.json"
    if kept.exists() or not source.is_file():
        return
    replace_file(kept, source.read_bytes())


def lock_run_dir(run_dir: Path) -> int:
    """Create RUN_DIR if needed and hold an exclusive lock on it for this process's training (an
    open descriptor of the folder, released by close_run_lock or when the process ends, even by
    SIGKILL): a second `glassroom train` into the same folder, new or --resume, is refused in one
    line instead of both writing its store and checkpoints."""
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise GlassroomError(f"--out {run_dir}: cannot create or open the folder ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise GlassroomError(f"--out {run_dir}: another glassroom train is writing this run now; wait for it "
                             "to end (or stop it) before starting or resuming it again") from None
    return fd


def close_run_lock(fd: Optional[int]) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
