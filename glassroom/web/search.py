"""Search across runs by metric name and event text, for `glassroom serve` (GET /api/search?q=) and
the published site (data/<generation>/search.json, filtered in the page).

A match is a case-insensitive substring of a metric name (scalar series, as StoreReader.names, less
names that hold a secret) or of an event's text as the outside sees it: redacted, private notes out
when public, a private base run named nowhere (glassroom.web.views.shown). The store is asked with
SQL (`instr(lower(text), q)`) so only candidate rows reach Python; each candidate is redacted and
checked again, so a search never finds an event by a secret the page does not show. A query that
could match inside the `<redacted>` marker itself (it holds `<`, `>` or is part of the word) scans
the newest SCAN_EVENTS events of each run instead. Non-ASCII letters are compared case-folded in
Python (SQLite's lower() knows ASCII only). At most MAX_HITS metrics and MAX_HITS events per query
(`truncated` says when more matched). Never imports torch.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.redact import REDACTED
from glassroom.observe.runs import looks_secret
from glassroom.observe.store import StoreReader
from glassroom.web.views import EVENT_TEXT_CHARS, run_is_private, shown

MAX_HITS = 200
MAX_QUERY_CHARS = 200
SCAN_EVENTS = 5_000           # events of one run read for a query SQL cannot narrow down
SITE_EVENTS = 1_000           # newest events per run in the published search.json
BUDGET_SECONDS = 5.0          # a search still running after this stops, with truncated: true


def check_query(q: Optional[str]) -> str:
    """The query, or ValueError with one line (empty, too long)."""
    if q is None or not q.strip():
        raise ValueError("q: give 1 to 200 characters to search for")
    if len(q) > MAX_QUERY_CHARS:
        raise ValueError(f"q: {len(q)} characters, more than the {MAX_QUERY_CHARS} a search may have")
    return q


def _needs_scan(q: str) -> bool:
    """True when `q` could match text that spans or lies inside a `<redacted>` marker."""
    marker = REDACTED.lower()
    return "<" in q or ">" in q or q in marker


def _run_hits(run_id: str, run_dir: Path, q: str, root: Optional[Path], public: bool,
              want_names: int, want_events: int) -> tuple[list[dict], list[dict], bool]:
    """(metric hits, event hits, more) of one run, at most want_names + 1 / want_events + 1 looked at."""
    names: list[dict] = []
    events: list[dict] = []
    more = False
    with StoreReader(run_dir) as reader:
        if public and run_is_private(reader):
            return names, events, more
        if want_names > 0:
            found = [n for n in reader.metric_names_containing(q, want_names + 1 + 50) if not looks_secret(n)]
            more |= len(found) > want_names
            names = [{"run": run_id, "name": n} for n in found[:want_names]]
        if want_events > 0:
            candidates = reader.event_rows(limit=SCAN_EVENTS, containing=None if _needs_scan(q) else q,
                                           text_chars=EVENT_TEXT_CHARS)
            for event in shown(candidates, reader, run_dir, root, public):
                if q in (event.get("text") or "").lower():
                    if len(events) == want_events:
                        more = True
                        break
                    events.append({"run": run_id, "id": event["id"], "step": _json_safe(event.get("step")),
                                   "kind": event["kind"], "text": event["text"]})
    return names, events, more


def _json_safe(value):
    """A value as it was, but a float JSON cannot carry (1e999 in a hand-edited store) is None."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def search(runs: dict[str, Path], q: str, public: bool, root: Optional[Path] = None,
           budget_s: float = BUDGET_SECONDS) -> dict:
    """{"q", "metrics": [{"run", "name"}], "events": [{"run", "id", "step", "kind", "text"}], "truncated"}
    over `runs` (id -> folder), runs in id order, events newest first within a run. A run whose store
    cannot be read is skipped; past `budget_s` seconds the search stops with `truncated`."""
    q = check_query(q)
    deadline = time.monotonic() + budget_s
    needle = q.lower()
    metrics: list[dict] = []
    events: list[dict] = []
    truncated = False
    for run_id, run_dir in sorted(runs.items()):
        want_names, want_events = MAX_HITS - len(metrics), MAX_HITS - len(events)
        if (want_names <= 0 and want_events <= 0) or time.monotonic() > deadline:
            truncated = True
            break
        try:
            names, hits, more = _run_hits(run_id, run_dir, needle, root, public, want_names, want_events)
        except Exception:   # unreadable, or hostile content that cannot be shown: the other runs still are
            continue
        metrics += names
        events += hits
        truncated |= more
    return {"q": q, "metrics": metrics, "events": events, "truncated": truncated}


def site_index(runs: dict[str, Path], root: Optional[Path] = None, readers: Optional[StoreReaders] = None,
               found: Optional[dict[str, Path]] = None) -> dict:
    """The published site's search.json: {"runs": {run_id: {"names": [...], "events": [{"id", "step",
    "kind", "text"}]}}}, the public view, the newest SITE_EVENTS events of each run."""
    out: dict[str, dict] = {}
    for run_id, run_dir in sorted(runs.items()):
        try:
            with reading(run_dir, readers) as reader:
                names = [n for n in reader.metric_names_containing(None, 1_000_000) if not looks_secret(n)]
                events = shown(reader.event_rows(limit=SITE_EVENTS, text_chars=EVENT_TEXT_CHARS), reader, run_dir, root, True,
                               found, readers)
        except Exception:
            continue
        out[run_id] = {"names": names,
                       "events": [{"id": e["id"], "step": _json_safe(e.get("step")), "kind": e["kind"], "text": e["text"]}
                                  for e in events]}
    return {"runs": out}

