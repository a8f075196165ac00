"""What sits beside a step's output: status, the step's identity and resolved config, its progress.

Files in `<workspace>/<kind>/<name>-<version>/`, each written whole or not at all (temporary name,
fsync, rename):

  step.json        name, kind, version, function, canonical config (what the version hashes),
                   resolved config (inputs as paths), dependencies with their versions and outputs
  status.json      state (running, done, failed, interrupted), attempt, times, host, error
  progress.json    the running step's own progress (done, total, unit, rate), written by the step
  provenance.json  how the output was produced (provenance.py); present once the step is done
  result.json      the function's return value, when it returned one
  log.txt          the step's stdout and stderr, every attempt appended
  .spec.json       what the current attempt's process was asked to do (experiment, version, lease)
  .lease           the lock of the run executing the step (lock.py)

Only `status.json` with state "done" makes an output reusable.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)

DONE, RUNNING, FAILED, INTERRUPTED = "done", "running", "failed", "interrupted"
STATUS, STEP, PROGRESS, PROVENANCE, RESULT, LOG = (
    "status.json", "step.json", "progress.json", "provenance.json", "result.json", "log.txt",
)
SPEC = ".spec.json"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file so that readers see the old content or the new, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs are meant to be read
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)   # not folders.replace_file: a unique mkstemp name (concurrent writers), mode, fsync
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: str | Path) -> dict | None:
    """The JSON object in a file, or None when it is absent or unreadable (a torn file cannot occur)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_status(output: Path) -> dict | None:
    return read_json(Path(output) / STATUS)


def is_done(output: Path) -> bool:
    status = read_status(output)
    return bool(status and status.get("state") == DONE)


def write_status(output: Path, state: str, **fields: Any) -> dict:
    """Replace status.json, keeping the start time and attempt of the current attempt."""
    previous = read_status(output) or {}
    status = {
        "state": state,
        "attempt": fields.pop("attempt", previous.get("attempt", 1)),
        "started": fields.pop("started", previous.get("started")),
        "updated": time.time(),
        "host": socket.gethostname(),
    }
    for key in ("executor", "worker_pid"):
        if key in previous:
            status[key] = previous[key]
    status.update(fields)
    if state in (DONE, FAILED, INTERRUPTED) and status.get("started"):
        status.setdefault("finished", time.time())
        status["duration_s"] = round(status["finished"] - status["started"], 3)
    atomic_write_json(Path(output) / STATUS, status)
    return status


def describe_status(output: Path) -> tuple[str, dict | None]:
    """(state as the dry run lists it, status.json) for a step's output folder."""
    status = read_status(output)
    if status is None:
        return "to run", None
    return status.get("state", "to run"), status
