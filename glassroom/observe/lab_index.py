"""The runs of a lab folder that a page may show: the one run index of `glassroom serve` (its run
pages, feeds, search and ladder pages all list runs through one LabIndex, re-found at most every
2 s so a new run shows up without a restart) and of `glassroom publish` (`shown_runs`, once per
export, each store read through the export's StoreReaders).

Shown: every run find_runs finds (ids with any secret in the folder path replaced), less ids that
still look like a secret; on a public server and in publish, less runs marked private and runs whose
store cannot be read (they might be private).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

from glassroom.observe.readers import StoreReaders
from glassroom.observe.runs import find_runs, is_private, looks_secret

MAX_AGE_S = 2.0   # a served list is re-found when older than this
RELIST_S = 0.5    # or, asked for a run it does not hold, when older than this


def _shown(run_dir: Path, readers: Optional[StoreReaders]) -> bool:
    try:
        return not is_private(run_dir, readers)
    except Exception:   # an unreadable store might be private: not shown
        return False


def shown_runs(root: str | Path, public: bool, readers: Optional[StoreReaders] = None) -> dict[str, Path]:
    """{run id: folder} of the runs below `root` a page may show or link to (module docstring)."""
    runs = {i: p for i, p in find_runs(root).items() if not looks_secret(i)}
    if public:
        runs = {i: p for i, p in runs.items() if _shown(p, readers)}
    return runs


class LabIndex:
    """shown_runs of one served folder, kept for MAX_AGE_S; thread-safe (the server's handlers run in
    a thread pool)."""

    def __init__(self, root: str | Path, public: bool, max_age: float = MAX_AGE_S):
        self.root, self.public, self.max_age = Path(root), public, max_age
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._runs: dict[str, Path] = {}

    def runs(self) -> dict[str, Path]:
        with self._lock:
            if time.monotonic() - self._at > self.max_age:
                self._runs = shown_runs(self.root, self.public)
                self._at = time.monotonic()
            return dict(self._runs)

    def find(self, run_id: str) -> Optional[Path]:
        """The run's folder, or None. An id not in the list re-finds it (at most twice a second: a run
        just created shows up); a public index checks the run is still not private (marked since)."""
        runs = self.runs()
        if run_id not in runs:
            with self._lock:
                if time.monotonic() - self._at > RELIST_S:
                    self._at = -float("inf")
            runs = self.runs()
        folder = runs.get(run_id)
        if folder is None or (self.public and not _shown(folder, None)):
            return None
        return folder
