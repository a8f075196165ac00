"""Incidents: an anomaly (or any step of a run) opened as an incident, followed up and resolved, kept
as journal events of kind "incident" in the run store (append-only, hash-chained like every event).

    open     text = the title,      data = {"incident": "inc-N", "action": "open", "title", "anomaly": id|None}
    update   text = the update,     data = {"incident": ID, "action": "update"}
    resolve  text = the write-up,   data = {"incident": ID, "action": "resolve", "resolution": text}

IDs are "inc-1", "inc-2", ... per run, given out inside the write transaction (two `glassroom
incident open` at once get different IDs; a resolve races no other resolve). `fold(events)` turns
the events into one record per incident, the view the dashboard, the feeds and `incident list` show;
the frontend folds the same events the same way. Events that do not follow the shape above (written
by hand, or an update for an unknown ID) are ignored by fold. Never imports torch.
"""

from __future__ import annotations

import math
import re
import sqlite3
from pathlib import Path
from typing import Any, Optional

from glassroom.errors import GlassroomError
from glassroom.observe.redact import redact_event

KIND = "incident"
ACTIONS = ("open", "update", "resolve")
MAX_TITLE_CHARS = 300        # a title is one line on charts, lists and feed entries
MAX_TEXT_CHARS = 20_000      # an update or a write-up, like a note
MAX_STEP = 2**62
ID_RE = re.compile(r"^inc-([1-9][0-9]{0,17})$")


def _data(event: dict) -> Optional[dict]:
    data = event.get("data")
    if event.get("kind") != KIND or not isinstance(data, dict):
        return None
    if data.get("action") not in ACTIONS or not isinstance(data.get("incident"), str):
        return None
    return data


def number(value: Any) -> Any:
    """A step or a time as JSON can carry it: an int or a finite float, else None (a hand-edited
    store can hold 1e999, which would make the whole list unreadable as JSON)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def fold(events: list[dict]) -> list[dict]:
    """One record per incident, in the order they were opened:
    {"id", "step", "title", "status": "open"|"resolved", "opened": time, "resolved": time|None,
     "resolution": str|None, "updates": [{"time", "text"}], "anomaly": event id|None}."""
    out: dict[str, dict] = {}
    for event in sorted(events, key=lambda e: e.get("id") or 0):
        data = _data(event)
        if data is None:
            continue
        iid, action = data["incident"], data["action"]
        text = _clean(event.get("text")) if isinstance(event.get("text"), str) else ""
        if action == "open":
            if iid in out:
                continue   # an ID opened twice (never written by glassroom): the first one counts
            title = _clean(data.get("title")) if isinstance(data.get("title"), str) else text
            anomaly = data.get("anomaly")
            out[iid] = {"id": iid, "step": number(event.get("step")), "title": title, "status": "open",
                        "opened": number(event.get("time")), "resolved": None, "resolution": None, "updates": [],
                        "anomaly": anomaly if isinstance(anomaly, int) and not isinstance(anomaly, bool) else None}
            continue
        record = out.get(iid)
        if record is None:
            continue
        if action == "update":
            record["updates"].append({"time": number(event.get("time")), "text": text})
        elif record["status"] == "open":   # resolve; a second resolve (never written by glassroom) is ignored
            resolution = data.get("resolution")
            record.update(status="resolved", resolved=number(event.get("time")),
                          resolution=_clean(resolution) if isinstance(resolution, str) else text)
    return list(out.values())


def normalize_id(raw: str) -> str:
    """`inc-3` or `3` -> `inc-3`; anything else is a GlassroomError."""
    text = str(raw).strip()
    if text.isascii() and text.isdigit() and len(text) <= 18:   # ("²".isdigit() is true, int("²") an error)
        text = f"inc-{int(text)}"
    if not ID_RE.match(text):
        raise GlassroomError(f"{str(raw)[:60]!r}: not an incident ID; IDs look like inc-1, inc-2 "
                             "(`glassroom incident list RUN_DIR` shows them)")
    return text


def parse_step(raw: Any) -> int:
    """A step given on the command line: an integer in 0..2**62."""
    text = str(raw).strip()
    try:
        step = int(text)
    except ValueError:
        raise GlassroomError(f"--step: expected a whole number of steps (0 or more), got {text[:40]!r}") from None
    if step < 0:
        raise GlassroomError(f"--step: must be 0 or more, got {step}")
    if step > MAX_STEP:
        raise GlassroomError(f"--step: must be at most {MAX_STEP}, got {step}")
    return step


def _clean(text: Any) -> str:
    """Text as the store and a JSON answer can carry it: an undecodable byte of the command line
    (a lone surrogate) becomes U+FFFD, in the event's data as in its text (a surrogate left in the
    data made every page that lists incidents answer 500)."""
    from glassroom.observe.store import storable  # lazy: numpy loads only when this runs

    return storable(str(text or ""))


def _one_line(text: str, what: str, most: int) -> str:
    text = " ".join(_clean(text).split())
    if not text:
        raise GlassroomError(f"incident: the {what} is empty; say in a few words what happened")
    if len(text) > most:
        raise GlassroomError(f"incident: the {what} has {len(text):,} characters, more than {most:,}; "
                             "shorten it and put the details in an update")
    return text


def _text(text: str, what: str) -> str:
    text = _clean(text).strip()
    if not text:
        raise GlassroomError(f"incident: the {what} is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise GlassroomError(f"incident: the {what} has {len(text):,} characters, more than the "
                             f"{MAX_TEXT_CHARS:,} allowed; link to a file instead")
    return text


def run_store(run_dir: str | Path) -> Path:
    """The store of the run folder `run_dir`, or a GlassroomError that says what is wrong."""
    from glassroom.observe.store import has_journal, store_path  # lazy: numpy loads only when this runs

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise GlassroomError(f"{run_dir}: no such folder; give the folder of a run")
    if not run_dir.is_dir():
        raise GlassroomError(f"{run_dir}: not a folder; give the folder of a run")
    path = store_path(run_dir)
    if not path.is_file():
        raise GlassroomError(f"{run_dir}: not a run (no store.sqlite); give the folder of a run")
    if path.stat().st_size == 0 or not has_journal(path):
        raise GlassroomError(f"{path}: not a run store (no journal in it); give the folder of a run "
                             "(nothing was written)")
    return path


def _write(run_dir: str | Path, build) -> tuple[dict, int]:
    """Open the run's store, and inside one write transaction read its incidents, let `build(writer,
    incidents)` check the request and return (kind-less event: text, step, data), append it.
    Returns (the event's data, its id). SQLite problems become one-line GlassroomErrors."""
    from glassroom.observe.store import StoreWriter, write_failure  # lazy: numpy loads only when this runs

    path = run_store(run_dir)
    import os

    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):   # a read-only file, folder or disk
        raise GlassroomError(f"{path}: read-only (the file, its folder or its disk), so no incident can be "
                             "written; run this where the run's folder is writable (nothing was written)")
    try:
        writer = StoreWriter(run_dir)
        try:
            with writer.transaction():
                incidents = {i["id"]: i for i in fold(writer.journal_events(KIND))}
                text, step, data = build(writer, incidents)
                event_id = writer.event(KIND, text, step, data)
        finally:
            writer.conn.close()   # nothing buffered; the run's status is left alone
    except sqlite3.DatabaseError as exc:
        raise write_failure(path, exc) from None
    return data, event_id


def _known(incidents: dict) -> str:
    if not incidents:
        return "this run has no incidents yet"
    return "its incidents: " + ", ".join(list(incidents)[:20]) + (" ..." if len(incidents) > 20 else "")


def open_incident(run_dir: str | Path, title: str, step: Any = None, anomaly: Any = None) -> dict:
    """Append an `open` event; returns its data ({"incident", "action", "title", "anomaly"}) plus
    "step" and "event". `step` defaults to the anomaly's step when `anomaly` (an event id) is given."""
    title = _one_line(title, "title", MAX_TITLE_CHARS)
    step = None if step is None else parse_step(step)
    anomaly_id = None
    if anomaly is not None:
        raw = str(anomaly).strip()
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= MAX_STEP:
            raise GlassroomError(f"--anomaly: expected the id of an anomaly event (a number, as on the run page "
                                 f"or in `glassroom metrics RUN_DIR --events`), got {raw[:40]!r}")
        anomaly_id = int(raw)
    if step is None and anomaly_id is None:
        raise GlassroomError("incident open: give --step S (the step it happened at) or --anomaly EVENT_ID")

    def build(store, incidents):
        nonlocal step
        if anomaly_id is not None:
            found = store.journal_events(event_id=anomaly_id)
            if not found or found[0]["kind"] != "anomaly":
                what = (f"no event {anomaly_id} in {run_dir}" if not found else
                        f"event {anomaly_id} of {run_dir} is a {found[0]['kind']!r} event, not an anomaly")
                raise GlassroomError(f"--anomaly {anomaly_id}: {what}; give the id of one of its anomalies "
                                     f"({_anomaly_ids(store)})")
            if step is None:
                step = found[0]["step"] if found[0]["step"] is not None else 0
        newest = store.newest_step(KIND)
        if step > newest:
            raise GlassroomError(f"--step {step}: beyond the run {run_dir}, whose newest step is {newest}; "
                                 f"give a step it has reached (0 to {newest})")
        numbers = [int(ID_RE.match(i).group(1)) for i in incidents if ID_RE.match(i)]
        iid = f"inc-{max(numbers, default=0) + 1}"
        data = {"incident": iid, "action": "open", "title": title, "anomaly": anomaly_id}
        return title, step, data

    data, event_id = _write(run_dir, build)
    return {**data, "step": step, "event": event_id}


def _anomaly_ids(store) -> str:
    ids = [str(i) for i in store.event_ids("anomaly", 21)]
    if not ids:
        return "it has none"
    return "its anomalies: " + ", ".join(ids[:20]) + (" ..." if len(ids) > 20 else "")


def _follow_up(run_dir: str | Path, raw_id: str, text: str, action: str) -> dict:
    iid = normalize_id(raw_id)
    text = _text(text, "write-up" if action == "resolve" else "update")
    holder: dict = {}

    def build(store, incidents):
        record = incidents.get(iid)
        if record is None:
            raise GlassroomError(f"{iid}: no such incident in {run_dir}; {_known(incidents)}")
        if action == "resolve" and record["status"] == "resolved":
            raise GlassroomError(f"{iid}: already resolved; add to it with "
                                 f"`glassroom incident update {run_dir} {iid} \"text\"`")
        holder["step"] = record["step"]
        data = {"incident": iid, "action": action}
        if action == "resolve":
            data["resolution"] = text
        return text, record["step"], data

    data, event_id = _write(run_dir, build)
    return {**data, "step": holder.get("step"), "event": event_id}


def resolve_incident(run_dir: str | Path, incident_id: str, text: str) -> dict:
    """Append a `resolve` event (the write-up: what it was); an incident is resolved once."""
    return _follow_up(run_dir, incident_id, text, "resolve")


def update_incident(run_dir: str | Path, incident_id: str, text: str) -> dict:
    """Append an `update` event (open or resolved incidents alike)."""
    return _follow_up(run_dir, incident_id, text, "update")


def redacted(event: dict) -> dict:
    """An event as shown outside (glassroom.observe.redact.redact_event); one whose data is nested too
    deep to redact (never written by glassroom) is shown without its data."""
    try:
        return redact_event(event)
    except RecursionError:
        return redact_event({**event, "data": None})


def read_incidents(run_dir: str | Path) -> list[dict]:
    """The folded incidents of one run as shown outside (events redacted)."""
    from glassroom.observe.store import StoreReader  # lazy: numpy loads only when this runs

    with StoreReader(run_dir) as reader:
        events = reader.journal_events(KIND)
    return fold([redacted(e) for e in events])
