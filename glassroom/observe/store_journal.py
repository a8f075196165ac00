"""The run store's reads of its journal and of what the journal vouches for: the queries a writer
(inside its transaction) and a reader both make, the raw evidence `glassroom ladder verify` checks
(seal_evidence) and the rows `glassroom verify` recomputes the record from (record_evidence,
metric_rows). Split from store.py by role; StoreWriter and StoreReader inherit JournalQueries.
Torch-free, numpy-free.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Optional

from glassroom.observe import journal


class JournalQueries:
    """Reads of the journal that a writer (inside its transaction) and a reader both make."""

    conn: sqlite3.Connection

    def journal_events(self, kind: Optional[str] = None, event_id: Optional[int] = None) -> list[dict]:
        """Events (of `kind`, or the one with `event_id`) oldest first, texts whole; data that cannot
        be parsed reads None."""
        where, args = ("id = ?", (event_id,)) if event_id is not None else ("kind = ?", (kind,))
        rows = self.conn.execute(f"SELECT id, time, step, kind, text, data FROM events WHERE {where} ORDER BY id", args)
        out = []
        for id_, when, step, kind_, text, data in rows:
            try:
                parsed = None if data is None else json.loads(data)
            except (ValueError, RecursionError):
                parsed = None
            out.append({"id": id_, "time": when, "step": step, "kind": kind_, "text": text, "data": parsed})
        return out

    def event_ids(self, kind: str, limit: int) -> list[int]:
        """Ids of the oldest `limit` events of `kind`."""
        rows = self.conn.execute("SELECT id FROM events WHERE kind = ? ORDER BY id LIMIT ?", (kind, limit))
        return [r[0] for r in rows]

    def newest_step(self, ignore_kind: str) -> int:
        """The newest step the run has reached: its status, its series (each by its index) and its
        events (less those of `ignore_kind`); 0 for none."""
        steps = [0]
        row = self.conn.execute("SELECT value FROM artifacts WHERE name = 'status'").fetchone()
        try:
            status = json.loads(row[0]) if row else None
        except (ValueError, RecursionError):
            status = None
        if isinstance(status, dict) and isinstance(status.get("step"), int) and not isinstance(status["step"], bool):
            steps.append(status["step"])
        for table in ("metrics", "vectors"):
            rows = self.conn.execute(f"SELECT (SELECT MAX(step) FROM {table} WHERE name_id = names.id) FROM names")
            steps += [r[0] for r in rows if isinstance(r[0], int)]
        row = self.conn.execute("SELECT MAX(step) FROM events WHERE kind != ?", (ignore_kind,)).fetchone()
        steps.append(row[0] if row and isinstance(row[0], int) else 0)
        return max(steps)

    def seal_evidence(self) -> dict:
        """What observe/prediction.verify_run checks, read raw in one snapshot (the store may have been
        edited, tables removed): {"tables": names, "prediction": (time, value) of the artifact or None,
        "events": [(id, time, step, kind, data)], "digests": {id: digest} of prediction events (None
        without the digest column), "chain": journal.verify_chain, "metrics": (first time, rows, rows
        whose time is not a number)}; the last four are None when the events or metrics table is gone."""
        own = not self.conn.in_transaction
        if own:
            self.conn.execute("BEGIN")
        try:
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            out: dict[str, Any] = {"tables": tables, "prediction": None, "events": None, "digests": None,
                                   "chain": None, "metrics": None}
            if "artifacts" in tables:
                out["prediction"] = self.conn.execute(
                    "SELECT time, value FROM artifacts WHERE name = 'prediction'").fetchone()
            if "events" not in tables or "metrics" not in tables:
                return out
            out["events"] = self.conn.execute("SELECT id, time, step, kind, data FROM events ORDER BY id").fetchall()
            if journal.has_digest_column(self.conn):
                out["digests"] = dict(self.conn.execute("SELECT id, digest FROM events WHERE kind = 'prediction'"))
            out["chain"] = journal.verify_chain(self.conn)
            out["metrics"] = self.conn.execute(
                "SELECT MIN(time), COUNT(*), SUM(typeof(time) NOT IN ('real', 'integer')) FROM metrics").fetchone()
            return out
        finally:
            if own and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def record_windows(self) -> list[tuple[int, Optional[int], str, Optional[str]]]:
        """(id, step, kind, data text) of the events that bound metric windows (start, resume,
        checkpoint, end), oldest first: what the trainer reads to close the next window."""
        return self.conn.execute("SELECT id, step, kind, data FROM events WHERE kind IN "
                                 "('start', 'resume', 'checkpoint', 'end') ORDER BY id").fetchall()

    def metric_rows(self, after: Optional[int], to: int) -> list[tuple[str, int, Optional[float]]]:
        """(name, step, value) of every scalar row with after < step <= to (every step <= to when
        `after` is None), sorted by name then step: the canonical order a window digest is taken in."""
        lo = -(2**62) if after is None else int(after) + 1
        return self.conn.execute(
            "SELECT names.name, metrics.step, metrics.value FROM metrics JOIN names ON names.id = metrics.name_id "
            "WHERE metrics.step BETWEEN ? AND ? ORDER BY names.name, metrics.step", (lo, int(to))).fetchall()

    def record_evidence(self) -> dict:
        """What observe/record.verify_record checks, in one snapshot: {"tables", "events": [(id, time,
        step, kind, text, data, digest)] (digest None without the column), "chain": journal.verify_chain,
        "rows": every (name, step, value) sorted by name and step, "prediction": the artifact's JSON
        text or None}. "events", "chain" and "rows" are None when their table is gone."""
        own = not self.conn.in_transaction
        if own:
            self.conn.execute("BEGIN")
        try:
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            out: dict[str, Any] = {"tables": tables, "events": None, "chain": None, "rows": None, "prediction": None}
            if "artifacts" in tables:
                row = self.conn.execute("SELECT value FROM artifacts WHERE name = 'prediction'").fetchone()
                out["prediction"] = row[0] if row else None
            if "events" in tables:
                digest = "digest" if journal.has_digest_column(self.conn) else "NULL"
                out["events"] = self.conn.execute(f"SELECT id, time, step, kind, text, data, {digest} FROM events "
                                                  "ORDER BY id").fetchall()
                out["chain"] = journal.verify_chain(self.conn)
            if "metrics" in tables and "names" in tables:
                out["rows"] = self.conn.execute(
                    "SELECT names.name, metrics.step, metrics.value FROM metrics JOIN names ON names.id = "
                    "metrics.name_id ORDER BY names.name, metrics.step").fetchall()
            return out
        finally:
            if own and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def chain_rows(self) -> list[tuple[int, float, Optional[int], str, Optional[str], str]]:
        """(id, time, step, kind, data text, digest) of every chained event, oldest first: what a
        published chain.json lists and a saved copy is compared by ([] without the digest column)."""
        if not journal.has_digest_column(self.conn):
            return []
        return self.conn.execute("SELECT id, time, step, kind, data, digest FROM events WHERE digest IS NOT NULL "
                                 "ORDER BY id").fetchall()

    def chain_tail(self) -> list[tuple[int, float, Optional[int], str, Optional[str], str]]:
        """chain_rows() of the newest chained event only ([] when none): the head, read cheaply."""
        if not journal.has_digest_column(self.conn):
            return []
        return self.conn.execute("SELECT id, time, step, kind, data, digest FROM events WHERE digest IS NOT NULL "
                                 "ORDER BY id DESC LIMIT 1").fetchall()
