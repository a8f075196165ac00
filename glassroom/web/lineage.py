"""The run page's Lineage panel: what a run started from (the store artifact `lineage`, written by a
run with `init.from`: {"base", "base_step", "base_kind", "task", "data"}), with the base matched to a
run the dashboard or the site shows, so the page can link to it.

`base` is the init.from path as the run was started with it (absolute, or relative to the folder
`glassroom train` ran in, which the server cannot know): it is tried as given, then against the
served folder, its parent and the run's own folders; the first candidate that is a run below the
served folder (or inside one: a checkpoint folder) is the link. A base that is a run hidden from
the outside (marked private, or a folder name that looks like a secret) is shown as "a private run",
never by its path, on a public page: nor anywhere else on that page (`hidden_base`, `scrub`: the
start event's text "sft from <path>", its data, and the config's init.from say "a private run" too).
Every value goes through the same redaction as the rest of the page. Never imports torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from glassroom.observe.readers import StoreReaders
from glassroom.observe.redact import redact
from glassroom.observe.runs import find_runs, is_private, looks_secret

FIELDS = ("base", "base_step", "base_kind", "task", "data")
PRIVATE_BASE = "a private run"


def _candidates(base: str, run_dir: Path, root: Path) -> list[Path]:
    try:   # `~nosuchuser/x` (no such home) or a NUL byte, from an old or foreign store: not a path here
        path = Path(base).expanduser()
        path.resolve()
    except (OSError, RuntimeError, ValueError):
        return []
    if path.is_absolute():
        return [path]
    return [Path.cwd() / path, root / path, root.parent / path, run_dir.parent / path, run_dir.parent.parent / path]


def base_run(base: str, run_dir: Path, root: Path,
             found: Optional[dict[str, Path]] = None) -> Optional[tuple[str, Path]]:
    """(run id, run folder) of the run below `root` that `base` names, or None. `found`: the runs
    below root when the caller has them (publish), else root is walked."""
    runs = {}
    for run_id, folder in (find_runs(root) if found is None else found).items():
        try:
            runs[folder.resolve()] = run_id
        except (OSError, RuntimeError):
            continue
    try:
        own = run_dir.resolve()
    except (OSError, RuntimeError):
        own = None
    for candidate in _candidates(base, run_dir, root):
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        for folder in (real, *real.parents):
            if folder in runs:
                if folder == own:   # a run naming itself (or its own checkpoint) as its base: no link
                    return None
                return runs[folder], folder
    return None


def _hidden(run_id: str, folder: Path, public: bool, readers: Optional[StoreReaders] = None) -> bool:
    try:
        return looks_secret(run_id) or (public and is_private(folder, readers))
    except Exception:   # a store that cannot be read might be private: treat it so
        return public


def hidden_base(lineage: Any, run_dir: Path, root: Optional[Path], public: bool,
                runs: Optional[dict[str, Path]] = None, readers: Optional[StoreReaders] = None) -> list[str]:
    """The texts that name a base run hidden from this page (the path as given, the run's folder),
    longest first; [] when the base is shown or is no run below `root`. `runs`: every run below root,
    private ones too (publish's find_runs), else root is walked; `readers`: publish's store readers."""
    base = lineage.get("base") if isinstance(lineage, dict) else None
    if not isinstance(base, str) or not base or root is None:
        return []
    found = base_run(base, Path(run_dir), Path(root), runs)
    if found is None or not _hidden(found[0], found[1], public, readers):
        return []
    return sorted({base, str(found[1])}, key=len, reverse=True)


def scrub(value: Any, texts: list[str]) -> Any:
    """`value` (JSON-like) with each of `texts` inside its strings (a whole path, or a path's start:
    `<base>/checkpoints`) replaced by "a private run"."""
    if not texts:
        return value
    pattern = re.compile(r"(?<![\w.~/-])(?:" + "|".join(re.escape(t) for t in texts) + r")(?![\w.~-])")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return pattern.sub(PRIVATE_BASE, v)
        if isinstance(v, dict):
            return {walk(k) if isinstance(k, str) else k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(value)


def lineage_view(lineage: Any, run_dir: Path, root: Optional[Path], public: bool,
                 runs: Optional[dict[str, Path]] = None, readers: Optional[StoreReaders] = None) -> Optional[dict]:
    """The panel's data: the artifact's fields, plus `base_run` (a run id to link to, or None)."""
    if not isinstance(lineage, dict):
        return None
    out = {key: lineage.get(key) for key in FIELDS}
    out["base_run"] = None
    base = out["base"]
    if isinstance(base, str) and base and root is not None:
        found = base_run(base, Path(run_dir), Path(root), runs)
        if found is not None:
            run_id, folder = found
            if _hidden(run_id, folder, public, readers):
                out["base"] = PRIVATE_BASE
            else:
                out["base_run"] = run_id
    return redact(out)
