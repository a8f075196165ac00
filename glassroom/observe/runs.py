"""Read-only views over many runs: find the runs below a folder, summarise each, read its config.

Used by the dashboard (`glassroom serve`) and the static site (`glassroom publish`); never writes and
never imports torch. A run is a folder holding `store.sqlite`; its id is its path relative to the
folder being watched (`hero`, `ladders/l1/rung-2`), or its own folder name when the watched folder is
itself a run. Config values whose keys look like secrets are redacted before anyone sees them.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path
from typing import Any, Optional

from glassroom.observe.store import STORE_FILE, StoreReader

# Folders never searched for runs: checkpoints can hold thousands of files, and hidden folders
# (.git, .cache) or installed front-end packages hold no runs.
SKIP_DIRS = {"checkpoints", "node_modules", "__pycache__"}

# Values on the run list, in this order (the first one present of each tuple is shown).
SUMMARY_METRICS = {
    "loss": ("train/loss",),
    "eval_bpb": ("eval/macro/bpb",),
    "lr": ("train/lr",),
    "tokens_per_s": ("throughput/tokens_per_s",),
    "mfu": ("throughput/mfu",),
}

REDACTED = "<redacted>"
_SECRET_WORDS = {
    "token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "apikey", "credential",
    "credentials", "auth", "authorization", "cookie", "key", "keys", "privatekey", "accesskey",
    "secretkey", "bearer", "signature", "dsn",
}
# Whole sections that hold the machine's environment are never shown.
_ENV_KEYS = {"env", "environ", "environment", "env_vars", "envvars"}
# Values that are secrets whatever their key is called (API tokens of well-known services).
_SECRET_VALUE = re.compile(
    r"^(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
    r"|xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----.*)$",
    re.S,
)


def find_runs(root: str | Path, max_depth: int = 6) -> dict[str, Path]:
    """Run id -> run folder for every run at or below `root` (symlinked folders are not followed)."""
    root = Path(root)
    runs: dict[str, Path] = {}
    if (root / STORE_FILE).is_file():
        runs[root.resolve().name or "run"] = root
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        if here != root and STORE_FILE in filenames:
            runs[here.relative_to(root).as_posix()] = here
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not d.startswith(".") and len(here.parts) - base_depth < max_depth
        )
    return runs


def key_is_secret(key: Any) -> bool:
    """True for keys like `api_key`, `hf_token`, `wandbApiKey`, `db-password`, `secret`."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key)).lower()
    parts = [p for p in re.split(r"[^a-z0-9]+", text) if p]
    if any(p in _SECRET_WORDS for p in parts):
        return True
    joined = "".join(parts)
    return any(w in joined for w in ("apikey", "accesskey", "secretkey", "privatekey", "password", "passwd"))


def redact(value: Any, key: Any = None) -> Any:
    """A copy of a config tree with secret-looking values replaced by `<redacted>`."""
    if key is not None and str(key).lower() in _ENV_KEYS:
        return REDACTED
    if key is not None and key_is_secret(key) and not isinstance(value, (dict, list)):
        return REDACTED if value not in (None, "") else value
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and _SECRET_VALUE.match(value.strip()):
        return REDACTED
    return value


def read_config(run_dir: str | Path) -> tuple[Any, str]:
    """The run's resolved config (config.yaml, else the store's `config` artifact), redacted, as
    (tree, YAML text). (None, "") when there is none; a broken file is reported, not raised."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    tree: Any = None
    if path.is_file():
        try:
            tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
            return None, f"# config.yaml could not be read: {type(exc).__name__}"
    else:
        try:
            with StoreReader(run_dir) as reader:
                tree = reader.artifact("config")
        except Exception:
            tree = None
    if tree is None:
        return None, ""
    tree = redact(tree)
    return tree, yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _finite(x: Optional[float]) -> Optional[float]:
    return x if x is not None and math.isfinite(x) else None


def summarize(run_id: str, run_dir: Path, now: Optional[float] = None) -> dict:
    """Status and latest values of one run, for the run list."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {"id": run_id, "state": "unknown", "step": None, "updated": None, "age_s": None}
    try:
        with StoreReader(run_dir) as reader:
            status = reader.status()
            out["state"] = str(status.get("state", "unknown"))
            out["step"] = status.get("step")
            updated = status.get("updated")
            count, newest = reader.max_metric_id()
            last_write = max(float(updated or 0), newest)
            out["updated"] = last_write or None
            out["age_s"] = None if not last_write else max(0.0, now - last_write)
            out["points"] = count
            latest: dict[str, Any] = {}
            for key, names in SUMMARY_METRICS.items():
                for name in names:
                    got = reader.latest(name)
                    if got is not None:
                        latest[key] = _finite(got[1])
                        if key == "loss":   # the status is written at events; the loss every step
                            out["step"] = max(int(out["step"] or 0), got[0])
                        break
            out["latest"] = latest
            events = reader.conn.execute(
                "SELECT COUNT(*), SUM(kind = 'anomaly') FROM events").fetchone()
            out["events"], out["anomalies"] = int(events[0] or 0), int(events[1] or 0)
    except Exception as exc:  # a half-created or foreign file must not break the run list
        out["state"] = "unreadable"
        out["error"] = f"{type(exc).__name__}: {exc}"
    # A run that says it is running but has not written for 5 minutes is probably dead.
    out["stale"] = out["state"] == "running" and (out["age_s"] or 0) > 300
    return out
