"""Read-only views over many runs: find the runs below a folder, summarise each, read its config.

Used by the dashboard (`glassroom serve`) and the static site (`glassroom publish`); never writes and
never imports torch. A run is a folder holding `store.sqlite`; its id is its path relative to the
folder being watched (`hero`, `ladders/l1/rung-2`), or its own folder name when the watched folder is
itself a run; a path that holds a secret (`runs/exp-hf_...`) gives the id `runs/exp-redacted-<8 hex>`
(glassroom.observe.redact.public_name), the same at every export, so every URL, file name and feed
shows that and every route finds the run by it. Every file is opened only when it resolves inside the watched folder (`inside`), and
configs are read with the bounded YAML reader and redacted (glassroom.observe.redact; `redact`,
`key_is_secret` and REDACTED are re-exported here) before anyone sees them.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from pathlib import Path
from typing import Any, Optional

from glassroom import yaml_io
from glassroom.observe.redact import REDACTED, key_is_secret, public_name, redact, redact_text  # noqa: F401 (re-exported)
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.run_folder import CHECKPOINTS_DIR, STORE_FILE, config_path

# Folders never searched for runs: checkpoints can hold thousands of files, and hidden folders
# (.git, .cache) or installed front-end packages hold no runs.
SKIP_DIRS = {CHECKPOINTS_DIR, "node_modules", "__pycache__"}

# Values on the run list, in this order (the first one present of each tuple is shown).
SUMMARY_METRICS = {
    "loss": ("train/loss",),
    "eval_bpb": ("eval/macro/bpb",),
    "lr": ("train/lr",),
    "tokens_per_s": ("throughput/tokens_per_s",),
    "mfu": ("throughput/mfu",),
}

# Config trees bigger than this once YAML aliases are expanded are not shown (a few hundred bytes
# of aliases can stand for gigabytes of JSON).
MAX_CONFIG_CHARS = 2_000_000
VISIBILITY = "visibility"   # store artifact {"private": bool}, set by `glassroom note --private-run`


def inside(root: str | Path, path: str | Path) -> Optional[Path]:
    """`path` with every symlink resolved, when that lies inside `root` (also resolved) and exists;
    else None. Every file the dashboard or the site opens goes through this, so a symlink in the
    served folder that points elsewhere is treated as absent."""
    try:
        base = Path(root).resolve(strict=True)
        real = Path(path).resolve(strict=True)
    except (OSError, RuntimeError):   # missing, a symlink loop, unreadable
        return None
    return real if real.is_relative_to(base) else None


def _is_store(root: Path, folder: Path) -> bool:
    path = inside(root, folder / STORE_FILE)
    return path is not None and path.is_file()


def find_runs(root: str | Path, max_depth: int = 6) -> dict[str, Path]:
    """Run id -> run folder for every run at or below `root`. Symlinked folders are not followed,
    and a run whose store.sqlite is a symlink that leaves `root` is not a run here. The id is the
    folder's path with any secret in it replaced (public_name)."""
    root = Path(root)
    runs: dict[str, Path] = {}

    def add(path: str, folder: Path) -> None:
        run_id = public_name(path)
        if run_id in runs:   # a folder already named like another's public id
            run_id = "redacted-" + hashlib.sha256(path.encode()).hexdigest()[:16]
        runs[run_id] = folder

    if _is_store(root, root):
        add(root.resolve().name or "run", root)
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        if here != root and STORE_FILE in filenames and _is_store(root, here):
            add(here.relative_to(root).as_posix(), here)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not d.startswith(".") and len(here.parts) - base_depth < max_depth
        )
    return runs


def find_folders(root: str | Path, matches, skip: set[str], max_depth: int,
                 enter_matches: bool) -> dict[str, Path]:
    """{id relative to root (`.` for root): folder} of the folders below `root` (root included) for
    which `matches(folder)` is true, by a walk that follows no symlink, enters no run (a folder with
    store.sqlite), hidden folder or folder named in `skip`, goes at most `max_depth` deep, and enters a
    matching folder only with `enter_matches`. Ids that look like secrets are left out (an id is in
    every URL). The dashboard's dataset and ladder pages find their folders with it."""
    root = Path(root)
    found: dict[str, Path] = {}

    def walk(folder: Path, depth: int) -> None:
        if (folder / STORE_FILE).exists():
            return
        if inside(root, folder) is not None and matches(folder):
            found[folder.relative_to(root).as_posix() if folder != root else "."] = folder
            if not enter_matches:
                return
        if depth >= max_depth:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for child in children:
            if not child.name.startswith(".") and child.name not in skip:
                walk(child, depth + 1)

    if root.is_dir():
        walk(root, 0)
    return {i: p for i, p in found.items() if not looks_secret(i)}

def _expanded_chars(tree: Any, limit: int) -> int:
    """About how many characters `tree` takes as JSON with shared parts (YAML aliases) written out
    in full, counted on the shared graph (each distinct object once), stopping past `limit`."""
    sizes: dict[int, int] = {}

    def size(node: Any, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > 100:
            return limit + 1
        if isinstance(node, dict):
            total = 2 + sum(size(k, depth + 1) + size(v, depth + 1) + 2 for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            total = 2 + sum(size(v, depth + 1) + 1 for v in node)
        else:
            total = len(str(node)) + 2
        total = min(total, limit + 1)
        sizes[key] = total
        return total

    return size(tree, 0)


def _jsonable(node: Any, depth: int = 0) -> Any:
    """A YAML tree as plain JSON values: dates as ISO text, bytes (`!!binary`) as their size, sets
    as lists, NaN/Inf as text, non-string keys as text (JSON has none of these)."""
    import datetime

    if depth > 200:
        return None
    if isinstance(node, dict):
        return {(k if isinstance(k, str) else str(k)): _jsonable(v, depth + 1) for k, v in node.items()}
    if isinstance(node, (list, tuple, set, frozenset)):
        items = sorted(node, key=str) if isinstance(node, (set, frozenset)) else node
        return [_jsonable(v, depth + 1) for v in items]
    if isinstance(node, float) and not math.isfinite(node):
        return str(node)
    if isinstance(node, (datetime.date, datetime.datetime, datetime.time)):
        return node.isoformat()
    if isinstance(node, (bytes, bytearray)):
        return f"<{len(node)} bytes>"
    if node is None or isinstance(node, (str, int, float, bool)):
        return node
    return str(node)


def looks_secret(name: str) -> bool:
    """True when a name shown as it is (a metric name, a ladder's or dataset's folder) holds something
    the redaction would remove (`ghp_...`, `secret/sk-...`): such a series or folder is not shown at
    all. (Runs are shown under their public id instead: find_runs.)"""
    return isinstance(name, str) and redact_text(name) != name


def read_config(run_dir: str | Path, root: str | Path | None = None,
                readers: Optional[StoreReaders] = None) -> tuple[Any, str]:
    """The run's resolved config (config.yaml, else the store's `config` artifact), redacted, as
    (tree, YAML text). (None, "") when there is none; a broken, oversized or alias-bomb file is
    reported in the text, never raised. With `root`, a config.yaml that resolves outside it (a
    symlink out of the served folder) is treated as absent."""
    import yaml

    run_dir = Path(run_dir)
    path = inside(root if root is not None else run_dir, config_path(run_dir))
    tree: Any = None
    if path is not None and path.is_file():
        try:
            tree = yaml_io.load_file(path)
        except (yaml.YAMLError, yaml_io.YamlLimitError) as exc:
            return None, f"# config.yaml could not be read: {yaml_io.describe_error(exc)}"
        except (UnicodeDecodeError, OSError, ValueError, RecursionError) as exc:
            return None, f"# config.yaml could not be read: {type(exc).__name__}"
    else:
        try:
            with reading(run_dir, readers) as reader:
                tree = reader.artifact("config")
        except Exception:
            tree = None
    if tree is None:
        return None, ""
    chars = _expanded_chars(tree, MAX_CONFIG_CHARS)
    if chars > MAX_CONFIG_CHARS:
        return None, (f"# config.yaml could not be read: refused: more than {MAX_CONFIG_CHARS:,} characters "
                      "once its aliases are expanded")
    tree = redact(_jsonable(tree))
    return tree, yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, allow_unicode=True)


def store_error(exc: BaseException) -> str:
    """A run store that cannot be read, in words: `store unreadable: file is not a database`."""
    text = str(exc).strip() or type(exc).__name__
    return f"store unreadable: {text}"


def is_private(run_dir: str | Path, readers: Optional[StoreReaders] = None) -> bool:
    """True when the run was marked private (`glassroom note RUN_DIR --private-run`)."""
    with reading(run_dir, readers) as reader:
        value = reader.artifact(VISIBILITY)
    return bool(isinstance(value, dict) and value.get("private"))


def event_is_private(event: dict) -> bool:
    """A note added with `glassroom note --private`: kept out of the published site."""
    data = event.get("data")
    return isinstance(data, dict) and data.get("private") is True


def _finite(x: Optional[float]) -> Optional[float]:
    return x if x is not None and math.isfinite(x) else None


def summarize(run_id: str, run_dir: Path, now: Optional[float] = None, readers: Optional[StoreReaders] = None) -> dict:
    """Status and latest values of one run, for the run list: from the counters the writer keeps
    (observe/tiles.py), never by counting rows (a store without counters is counted)."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {"id": run_id, "state": "unknown", "step": None, "updated": None, "age_s": None}
    try:
        with reading(run_dir, readers) as reader:
            status = reader.status()
            out["state"] = str(status.get("state", "unknown"))
            out["step"] = status.get("step")
            if isinstance(status.get("stall_after_s"), (int, float)) and status["stall_after_s"] > 0:
                out["stall_after_s"] = float(status["stall_after_s"])
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
            out["events"], out["anomalies"] = reader.event_counts()
            visibility = reader.artifact(VISIBILITY)
            out["private"] = bool(isinstance(visibility, dict) and visibility.get("private"))
    except Exception as exc:  # a half-created or foreign file must not break the run list
        out["state"] = "unreadable"
        out["error"] = store_error(exc)
    mark_stalled(out)
    return out


STALL_AFTER_S = 300.0   # a run's train.stall_after when its status does not say (runs before the heartbeat)


def mark_stalled(summary: dict) -> dict:
    """`stale` and `stalled_since_step`: a run still marked running whose heartbeat (its status or
    newest row, `age_s`) is older than its stall_after_s is stalled since the last step it wrote."""
    limit = summary.get("stall_after_s") or STALL_AFTER_S
    summary["stale"] = summary.get("state") == "running" and (summary.get("age_s") or 0) > limit
    summary["stalled_since_step"] = summary.get("step") if summary["stale"] else None
    return summary
