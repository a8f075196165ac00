"""The run list's summaries, cached per run and shared by every open tab of `glassroom serve`.

Each run-list tab asks for every run's summary once a second (server.py's stream). A run's summary
(observe.runs.summarize) changes only when its store does, so it is kept with a cheap change probe:
the size, mtime_ns, ctime_ns and inode of store.sqlite and store.sqlite-wal (every commit in WAL mode
writes the -wal file). Twenty tabs over 200 runs cost 400 stat() calls a second, not 4,000 store
reads. The age (`age_s`, `stale`) is worked out again from `updated` at each call. An entry is also
read again after MAX_AGE_S, in case two commits of the same size land within one mtime tick.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterable, Optional

from glassroom.observe.run_folder import STORE_FILE
from glassroom.observe.runs import mark_stalled, summarize

MAX_AGE_S = 10.0
MAX_ENTRIES = 20_000


def probe(run_dir: Path) -> tuple:
    """What changes whenever the store does: (size, mtime_ns, ctime_ns, inode) of the store and its WAL."""
    out = []
    for name in (STORE_FILE, STORE_FILE + "-wal"):
        try:
            st = os.stat(Path(run_dir) / name)
            # an empty WAL (a read-only reader leaves one) holds nothing: the same as none
            # ctime too: a store copied over in place with its old mtime kept (cp -p) changes it
            out.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) if st.st_size else None)
        except OSError:
            out.append(None)
    return tuple(out)


class RunList:
    """Summaries of many runs, read again only for the runs whose store changed."""

    def __init__(self, max_age_s: float = MAX_AGE_S):
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[tuple, float, dict]] = {}

    def summary(self, run_id: str, run_dir: Path, now: Optional[float] = None) -> dict:
        now = time.time() if now is None else now
        key = (run_id, str(Path(run_dir).absolute()))
        seen = probe(run_dir)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == seen and time.monotonic() - hit[1] < self.max_age_s:
            out = dict(hit[2])
        else:
            out = summarize(run_id, run_dir, now)
            with self._lock:
                if len(self._cache) >= MAX_ENTRIES:
                    self._cache.clear()
                self._cache[key] = (seen, time.monotonic(), dict(out))
        updated = out.get("updated")
        out["age_s"] = None if not updated else max(0.0, now - updated)
        mark_stalled(out)
        return out

    def summaries(self, runs: Iterable[tuple[str, Path]], now: Optional[float] = None) -> list[dict]:
        """Summaries of (run id, run folder) pairs, in the order given."""
        now = time.time() if now is None else now
        return [self.summary(run_id, run_dir, now) for run_id, run_dir in runs]


SHARED = RunList()   # one cache for the whole process: every tab, every request


def summaries(runs: Iterable[tuple[str, Path]], now: Optional[float] = None) -> list[dict]:
    return SHARED.summaries(runs, now)
