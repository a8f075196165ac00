"""The run's journal as a hash chain: each event's digest covers its content and the digest before it.

    digest_n = sha256(digest_{n-1} + canonical([id, time, step, kind, text, data]))

digest_0 is the empty string; `canonical` is JSON with sorted keys and no spaces, `data` the JSON
text exactly as stored. StoreWriter.event appends through `append_event` inside one transaction, so
the chain is serialised across writers (the trainer, `glassroom note`, preregistration).

A store written before the `digest` column existed is migrated (ALTER TABLE ADD COLUMN); its older
events keep a null digest and the chain starts at the first event that has one. After that every
event must carry one.

What the chain proves, and what it cannot (docs/ladder.md, "The sealed prediction"): editing,
inserting or deleting an event in the middle breaks it; whoever can write the file can also
recompute every digest after an edit, or drop the newest events. An outside copy of the head
(published in the site's chain.json, site.json and feeds: glassroom/web/site_chain.py) is what
catches that: `glassroom verify --against` (glassroom/observe/anchor.py, docs/verify.md).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any, Optional


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: the bytes every digest here is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_digest(previous: str, id_: int, time: float, step: Optional[int], kind: str, text: str,
                 data: Optional[str]) -> str:
    """The chained digest of one event row (`data` as the stored JSON text, or None)."""
    return sha256_hex((previous or "") + canonical([int(id_), float(time), step, kind, text, data]))


def has_digest_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "digest" for row in conn.execute("PRAGMA table_info(events)"))


def migrate(conn: sqlite3.Connection) -> None:
    """Add the events.digest column to a store made before it existed (no-op otherwise)."""
    if not has_digest_column(conn):
        try:
            conn.execute("ALTER TABLE events ADD COLUMN digest TEXT")
        except sqlite3.OperationalError as exc:  # another writer added it meanwhile
            if "duplicate column" not in str(exc):
                raise


def head(conn: sqlite3.Connection) -> str:
    """The digest of the newest chained event, or '' when the chain has not started."""
    row = conn.execute("SELECT digest FROM events WHERE digest IS NOT NULL ORDER BY id DESC LIMIT 1").fetchone()
    return row[0] if row else ""


def append_event(conn: sqlite3.Connection, time: float, step: Optional[int], kind: str, text: str,
                 data: Optional[str]) -> int:
    """Insert one event with its chained digest; the caller holds a write transaction (BEGIN IMMEDIATE),
    so nothing can be appended between reading the head and writing the row. Returns the event id."""
    previous = head(conn)
    step = None if step is None else int(step)
    cursor = conn.execute("INSERT INTO events (time, step, kind, text, data) VALUES (?, ?, ?, ?, ?)",
                          (time, step, kind, text, data))
    id_ = int(cursor.lastrowid)
    conn.execute("UPDATE events SET digest = ? WHERE id = ?",
                 (event_digest(previous, id_, time, step, kind, text, data), id_))
    return id_


def verify_chain(conn: sqlite3.Connection) -> dict:
    """Walk the events in id order. Returns {"ok", "problem" (one line or None), "chained" (events
    checked), "legacy" (events before the chain starts), "head" (the last digest)}."""
    if not has_digest_column(conn):
        count = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        return {"ok": True, "problem": None, "chained": 0, "legacy": int(count), "head": ""}
    previous, started, chained, legacy, last_id = "", False, 0, 0, None
    rows = conn.execute("SELECT id, time, step, kind, text, data, digest FROM events ORDER BY id")
    for id_, when, step, kind, text, data, digest in rows:
        where = f"event {id_} ({kind}{'' if step is None else f', step {step}'})"
        if digest is None:
            if started:
                return _broken(f"{where} has no digest: it was inserted outside glassroom", chained, legacy, previous)
            legacy += 1
            last_id = id_
            continue
        if last_id is not None and id_ != last_id + 1:
            gone = f"event {last_id + 1}" if id_ == last_id + 2 else f"events {last_id + 1}-{id_ - 1}"
            return _broken(f"{gone} removed from the journal (the chain skips from event {last_id} to {id_})",
                           chained, legacy, previous)
        expected = event_digest(previous, id_, when, step, kind, text, data)
        if digest != expected:
            return _broken(f"{where} was edited, or an event before it was removed or rewritten "
                           "(its digest no longer follows from its content and the chain)", chained, legacy, previous)
        previous, started, last_id = digest, True, id_
        chained += 1
    return {"ok": True, "problem": None, "chained": chained, "legacy": legacy, "head": previous}


def _broken(problem: str, chained: int, legacy: int, previous: str) -> dict:
    return {"ok": False, "problem": problem, "chained": chained, "legacy": legacy, "head": previous}
