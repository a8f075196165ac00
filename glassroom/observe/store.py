"""The run store: metrics, vectors, events and artifacts of one run, in SQLite (WAL) in RUN_DIR.

One writer (the training process, rank 0) and any number of readers (the dashboard, `glassroom
metrics`, tests), also while training writes. No torch import here: the dashboard reads this
module alone.

Layout (RUN_DIR/store.sqlite):
- names(id, name): metric names (`train/loss`, `eval/prose/bpb`, ...), interned.
- metrics(name_id, step, value, time): one scalar per (name, step). A resumed run that logs a step
  again replaces the value, so a curve continues cleanly after a restart.
- vectors(name_id, step, value): a JSON list per (name, step), e.g. tokens per expert of a layer.
- events(id, time, step, kind, text, data, digest): start, resume, checkpoint, eval, anomaly, note, end,
  error; `digest` chains each event to the one before (journal.py).
- artifacts(name, time, value): JSON documents such as the resolved config, status, prediction.
- tiles, tile_dirty, series_counters, run_counters (observe/tiles.py, PRAGMA user_version 1): per
  metric, min/max/last/count tiles at 6 resolutions (8**k steps), kept at each flush in the same
  transaction as the rows (triggers on `metrics` mark the changed buckets), so a chart of any
  range reads a few thousand rows (`StoreReader.view`); and counters (rows, last step and value,
  newest write, events, anomalies) so run lists and live streams never count rows. A store made
  before them is upgraded once by the first writer or reader that opens it; a reader that cannot
  write reads the raw rows.

The writer buffers metric rows and commits them in batches (every `flush_rows` rows or
`flush_seconds`: 8,000 rows or 1 s; each commit also rewrites the tiles of every series it
touched, so fewer, larger commits cost less), so logging stays a small fraction of a training
step; events and artifacts commit at once. What was committed survives a SIGKILL of the writer; close() commits the rest.
The trainer flushes before each checkpoint, so no checkpoint is visible while rows of its steps
are only buffered, and a resumed run calls discard_after(step) for the steps it redoes.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.observe import journal, tiles
from glassroom.observe.buckets import LEVELS, SHIFT, bucket_of, downsample, finite, fold
from glassroom.observe.run_folder import STORE_FILE, store_path
from glassroom.observe.store_journal import JournalQueries

WRITE_ONCE_ARTIFACTS = ("prediction",)  # ladder/predict.py's preregister; docs/ladder.md

SCHEMA = """
CREATE TABLE IF NOT EXISTS names (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
    name_id INTEGER NOT NULL, step INTEGER NOT NULL, value REAL, time REAL NOT NULL,
    PRIMARY KEY (name_id, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    name_id INTEGER NOT NULL, step INTEGER NOT NULL, value TEXT NOT NULL, time REAL NOT NULL,
    PRIMARY KEY (name_id, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, step INTEGER,
    kind TEXT NOT NULL, text TEXT NOT NULL, data TEXT, digest TEXT);
CREATE TABLE IF NOT EXISTS artifacts (name TEXT PRIMARY KEY, time REAL NOT NULL, value TEXT NOT NULL);
"""


def _finite_or_none(value: float) -> Optional[float]:
    value = float(value)
    return value if math.isfinite(value) else None


def storable(text: str) -> str:
    """`text` as SQLite can store it: lone surrogates (undecodable bytes that Python kept) become U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def event_data(data: Optional[str]) -> Any:
    """An event's data column parsed; data that cannot be read (broken, or nested too deep for json)
    might be a private note's, so it reads as private: a public view leaves the event out."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return {"private": True, "unreadable": True}


def write_failure(path: Path, exc: sqlite3.DatabaseError, nothing: str = "nothing was written") -> Exception:
    """A failed write to a run store (`glassroom note`, `glassroom incident`) as one line for the user:
    busy, read-only or damaged; `nothing` says what was left undone."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return GlassroomError(f"{path}: busy (another process held it for over 30 s); {nothing}, try again")
    if isinstance(exc, sqlite3.OperationalError) and "readonly" in text:
        return GlassroomError(f"{path}: cannot be written ({exc}); {nothing}")
    return GlassroomError(f"{path}: cannot be read ({exc}); the run store is damaged, {nothing}")


def has_journal(path: Path) -> bool:
    """Whether the SQLite file at `path` has an events table (an empty file or another program's
    database does not: a write would make it look like a run). A file SQLite cannot open read-only
    is left to the writer, which reports what is wrong with it."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone()
            return found is not None
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return True



class StoreWriter(JournalQueries):
    """Appends to a run's store. Use as a context manager, or call close()."""

    def __init__(self, run_dir: str | Path, flush_rows: int = 8000, flush_seconds: float = 1.0):
        self.path = store_path(run_dir)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        journal.migrate(self.conn)  # events.digest for stores made before the chained journal
        tiles.ensure(self.conn)     # tiles and counters: built once for an older store
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._name_ids: dict[str, int] = dict(
            (name, id_) for id_, name in self.conn.execute("SELECT id, name FROM names")
        )
        self._rows: list[tuple[int, int, Optional[float], float]] = []
        self._vectors: list[tuple[int, int, str, float]] = []
        self._last_flush = time.monotonic()
        self._status_extra: dict[str, Any] = {}
        self._last_beat = float("-inf")

    # ------------------------------------------------------------------ writing

    def _name_id(self, name: str) -> int:
        id_ = self._name_ids.get(name)
        if id_ is None:
            self.conn.execute("INSERT OR IGNORE INTO names (name) VALUES (?)", (name,))
            id_ = self.conn.execute("SELECT id FROM names WHERE name = ?", (name,)).fetchone()[0]
            self._name_ids[name] = id_
        return id_

    def log(self, step: int, values: dict[str, float], when: Optional[float] = None) -> None:
        """Buffer scalar metrics for `step`; NaN and Inf are stored as null (a gap in the chart)."""
        now = time.time() if when is None else when
        for name, value in values.items():
            self._rows.append((self._name_id(name), int(step), _finite_or_none(value), now))
        self._maybe_flush()

    def log_vector(self, step: int, name: str, values: Iterable[float]) -> None:
        """Buffer a vector metric (a list of numbers) for `step`."""
        data = json.dumps([_finite_or_none(v) for v in values])
        self._vectors.append((self._name_id(name), int(step), data, time.time()))
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        pending = len(self._rows) + len(self._vectors)
        if pending >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Commit buffered rows in one transaction."""
        if self._rows or self._vectors:
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                # Dirty buckets before our rows: a tile-unaware writer (an older glassroom) changed rows,
                # maybe deleted some, since our last commit; then a tile may have to go.
                foreign = self.conn.execute("SELECT EXISTS (SELECT 1 FROM tile_dirty)").fetchone()[0]
                self.conn.executemany("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?)", self._rows)
                self.conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)", self._vectors)
                tiles.apply_dirty(self.conn, removed=bool(foreign))   # the buckets these rows touched, same transaction
            self._rows, self._vectors = [], []
        self._last_flush = time.monotonic()

    def discard_after(self, step: int) -> int:
        """Delete the metric and vector rows of steps after `step` (buffered ones too); returns how many
        were committed. A resumed run calls this with its checkpoint's step: it redoes those steps and
        logs them again. Events are never deleted (the journal is append-only)."""
        self._rows = [row for row in self._rows if row[1] <= step]
        self._vectors = [row for row in self._vectors if row[1] <= step]
        self.flush()
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            removed = self.conn.execute("DELETE FROM metrics WHERE step > ?", (int(step),)).rowcount
            removed += self.conn.execute("DELETE FROM vectors WHERE step > ?", (int(step),)).rowcount
            tiles.apply_dirty(self.conn)
        return removed

    @contextlib.contextmanager
    def transaction(self):
        """One write transaction (BEGIN IMMEDIATE .. COMMIT, ROLLBACK on any exception): what event()
        and set_artifact() write inside it is committed together or not at all. Buffered rows are
        committed before it begins."""
        self.flush()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def has_artifact(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM artifacts WHERE name = ?", (name,)).fetchone() is not None

    def has_event(self, kind: str) -> bool:
        return self.conn.execute("SELECT 1 FROM events WHERE kind = ?", (kind,)).fetchone() is not None

    def metric_extent(self) -> tuple[int, Optional[int]]:
        """(committed metric rows, their first step; None when there are none)."""
        count, first = self.conn.execute("SELECT COUNT(*), MIN(step) FROM metrics").fetchone()
        return int(count), first

    def first_event(self, kinds: tuple[str, ...]) -> Optional[tuple[int, str, Optional[int]]]:
        """(id, kind, step) of the oldest event of `kinds`, or None."""
        return self.conn.execute(f"SELECT id, kind, step FROM events WHERE kind IN ({','.join('?' * len(kinds))}) "
                                 "ORDER BY id LIMIT 1", tuple(kinds)).fetchone()

    def journal_from(self, step: int) -> list[tuple[str, int]]:
        """(kind, step) of every event at `step` or later, oldest first."""
        rows = self.conn.execute("SELECT kind, step FROM events WHERE step >= ? ORDER BY id", (int(step),))
        return [(kind, int(at)) for kind, at in rows]

    def event(self, kind: str, text: str, step: Optional[int] = None, data: Any = None) -> int:
        """Record an event now (buffered metrics are committed first, so the order holds). Text that is
        not valid Unicode (a non-UTF-8 byte on the command line) is stored with U+FFFD in its place."""
        kind, text = storable(kind), storable(text)
        self.flush()
        # Chained to the previous event's digest (journal.py), in one write transaction.
        # A signal (Ctrl-C, SIGTERM under glassroom train) raises between any two bytecodes: BEGIN and
        # COMMIT sit inside the try, so an interrupted write never leaves a transaction open that
        # would swallow the `stopped` event after it. An event already inserted is kept.
        own = not self.conn.in_transaction
        id_ = None
        try:
            if own:
                self.conn.execute("BEGIN IMMEDIATE")
            id_ = journal.append_event(self.conn, time.time(), step, kind, text,
                                       None if data is None else json.dumps(data))
            if own:
                self.conn.execute("COMMIT")
        except BaseException:
            if own and self.conn.in_transaction:
                self.conn.execute("COMMIT" if id_ is not None else "ROLLBACK")
            raise
        return id_

    def set_artifact(self, name: str, value: Any) -> None:
        """Write (or replace) an artifact; the sealed "prediction" is written once and never replaced."""
        if name in WRITE_ONCE_ARTIFACTS:
            try:
                self.conn.execute("INSERT INTO artifacts VALUES (?, ?, ?)", (name, time.time(), json.dumps(value)))
            except sqlite3.IntegrityError:
                raise GlassroomError(f"{self.path}: artifact {name!r} is sealed and never replaced "
                                     "(preregister into a new run folder instead)") from None
            return
        self.conn.execute(
            "INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?)", (name, time.time(), json.dumps(value))
        )

    def set_status(self, state: str, step: int, **extra: Any) -> None:
        """The run's state (running, finished, failed) and last step, for run lists; `updated` is the
        heartbeat (observe/runs.py reads a running run silent for `stall_after_s` as stalled)."""
        self.flush()
        self.set_artifact("status", {"state": state, "step": int(step), "updated": time.time(),
                                     **self._status_extra, **extra})

    def set_stall_after(self, seconds: float) -> None:
        """Seconds of silence after which this run, while running, reads as stalled."""
        self._status_extra["stall_after_s"] = float(seconds)

    def beat(self, step: int, every: float = 10.0) -> None:
        """The run is alive at `step`: its running status rewritten, at most once per `every` seconds."""
        now = time.monotonic()
        if now - self._last_beat >= every:
            self._last_beat = now
            self.set_status("running", step)

    def close(self) -> None:
        self.flush()
        self.conn.close()

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StoreReader(JournalQueries):
    """Reads a run's store, also while a writer appends. Read-only: never changes the file."""

    def __init__(self, run_dir: str | Path):
        self.path = store_path(run_dir)
        if not self.path.exists():
            raise FileNotFoundError(f"{Path(run_dir)}: no run store ({STORE_FILE}) here")
        # as_uri() percent-encodes the path: a folder named "run#2" or "what?" is not read as a URI's
        # fragment or query (which opened another, empty database)
        uri = f"{self.path.absolute().as_uri()}?mode=ro"
        self.conn = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
        # Tiles and counters usable (an older store is upgraded here, once, when the file is writable)
        self.tiled = tiles.ensure_for_reader(self.path, self.conn)

    def _current(self) -> bool:
        """Tiles and counters match the committed rows now (a writer from before tiles may have
        added rows since this reader opened: then the raw rows are read)."""
        if not self.tiled:
            return False
        try:
            return tiles.is_current(self.conn)
        except sqlite3.Error:
            return False

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def names(self) -> list[str]:
        """Names that have scalar values, sorted."""
        if self._current():
            return [r[0] for r in self.conn.execute(
                "SELECT name FROM names WHERE id IN (SELECT name_id FROM series_counters WHERE rows > 0) ORDER BY name")]
        rows = self.conn.execute(
            "SELECT name FROM names WHERE id IN (SELECT DISTINCT name_id FROM metrics) ORDER BY name"
        )
        return [r[0] for r in rows]

    def vector_names(self) -> list[str]:
        if self._current():
            return [r[0] for r in self.conn.execute(
                "SELECT name FROM names WHERE id IN (SELECT name_id FROM series_counters "
                "WHERE vector_last IS NOT NULL) ORDER BY name")]
        rows = self.conn.execute(
            "SELECT name FROM names WHERE id IN (SELECT DISTINCT name_id FROM vectors) ORDER BY name"
        )
        return [r[0] for r in rows]

    def _id(self, name: str) -> Optional[int]:
        row = self.conn.execute("SELECT id FROM names WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def series(self, name: str, start: Optional[int] = None, end: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
        """Steps (int64) and values (float64, NaN where none) of `name` in [start, end], by step."""
        id_ = self._id(name)
        if id_ is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        lo = -(2**62) if start is None else max(-(2**62), int(start))
        hi = 2**62 if end is None else min(2**62, int(end))
        cursor = self.conn.execute(
            "SELECT step, IFNULL(value, 'NaN') FROM metrics WHERE name_id = ? AND step BETWEEN ? AND ? ORDER BY step",
            (id_, lo, hi),
        )
        data = np.fromiter(cursor, dtype=[("step", np.int64), ("value", np.float64)])
        return data["step"], data["value"]

    def view(self, name: str, start: Optional[int] = None, end: Optional[int] = None,
             points: int = 1500) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(steps, mins, maxs, n): `name` over [start, end] in at most `points` buckets (and the
        newest point), as downsample() shows the raw rows; `n` = raw points in the range. From the
        tiles (a few thousand rows at most), else from the raw rows."""
        points = max(1, int(points))
        own = not self.conn.in_transaction
        if own:   # one snapshot: counters, tiles and edge rows from the same commit of a live writer
            self.conn.execute("BEGIN")
        try:
            id_ = self._id(name)
            if id_ is not None and self._current():
                return tiles.view(self.conn, id_, start, end, points, lambda lo, hi: self.series(name, lo, hi))
            steps, values = self.series(name, start, end)
            s, lo, hi = downsample(steps, values, points)
            return s, lo, hi, int(len(steps))
        finally:
            if own and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def buckets(self, name: str, level: int, start: Optional[int] = None,
                end: Optional[int] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first step, min, max) of each aligned bucket of `level` (8**level steps, observe/buckets.py)
        holding rows of `name` in [start, end] (whole buckets), NaN where a bucket has no finite value;
        level 0 is the raw points. From the tiles (levels 1..LEVELS of a current store), else folded
        from the raw rows: the same numbers either way."""
        level = int(level)
        lo = -tiles.FAR if start is None else max(-tiles.FAR, int(start))
        hi = tiles.FAR if end is None else min(tiles.FAR, int(end))
        own = not self.conn.in_transaction
        if own:
            self.conn.execute("BEGIN")
        try:
            id_ = self._id(name)
            if id_ is not None and 1 <= level <= LEVELS and self._current():
                items = tiles.bucket_rows(self.conn, id_, level, bucket_of(lo, level), bucket_of(hi, level))
                return items["first"], items["min"], items["max"]
            steps, values = self.series(name, None if start is None else bucket_of(lo, level) << (SHIFT * level),
                                        None if end is None else ((bucket_of(hi, level) + 1) << (SHIFT * level)) - 1)
            clean = finite(values)
            return fold(bucket_of(steps, level), steps, clean, clean)
        finally:
            if own and self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def name_id(self, name: str) -> Optional[int]:
        """The id the store gave `name` (None when it holds no such series)."""
        return self._id(name)

    def name_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM names").fetchone()[0])

    def name_ids(self) -> list[tuple[int, str]]:
        """(id, name) of every name the store knows."""
        return list(self.conn.execute("SELECT id, name FROM names"))

    def max_event_id(self) -> int:
        return int(self.conn.execute("SELECT IFNULL(MAX(id), 0) FROM events").fetchone()[0])

    def max_step(self, name_id: int, vectors: bool = False) -> Optional[int]:
        """The newest step of series `name_id` (its vectors with `vectors`), from the (name, step) index."""
        table = "vectors" if vectors else "metrics"
        return self.conn.execute(f"SELECT MAX(step) FROM {table} WHERE name_id = ?", (name_id,)).fetchone()[0]

    def rows_after(self, name_id: int, step: int, limit: int,
                   vectors: bool = False) -> list[tuple[int, Any]]:
        """Up to `limit` (step, value) rows of series `name_id` after `step`, by step: scalar values
        (None for a gap) or, with `vectors`, the vectors' JSON text."""
        table = "vectors" if vectors else "metrics"
        return self.conn.execute(f"SELECT step, value FROM {table} WHERE name_id = ? AND step > ? "
                                 "ORDER BY step LIMIT ?", (name_id, step, limit)).fetchall()

    def vector_extent(self, name_id: int, lo: int, hi: int) -> tuple[Optional[int], Optional[int]]:
        """(first, last) step of the vectors of `name_id` in [lo, hi]."""
        return self.conn.execute("SELECT MIN(step), MAX(step) FROM vectors WHERE name_id = ? AND step BETWEEN ? AND ?",
                                 (name_id, lo, hi)).fetchone()

    def first_vector(self, name_id: int, lo: int, hi: int) -> Optional[tuple[int, list]]:
        """(step, vector) of the first vector row of `name_id` in [lo, hi], found by the index."""
        row = self.conn.execute("SELECT step, value FROM vectors WHERE name_id = ? AND step BETWEEN ? AND ? "
                                "ORDER BY step LIMIT 1", (name_id, lo, hi)).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def counters(self) -> Optional[dict[int, tuple[int, Optional[int], Optional[int]]]]:
        """name id -> (rows, last step, last vector step) as the writer keeps them; None when this
        store has no current counters (read the rows instead)."""
        if not self._current():
            return None
        rows = self.conn.execute("SELECT name_id, rows, last_step, vector_last FROM series_counters")
        return {id_: (count, last, vlast) for id_, count, last, vlast in rows}

    def event_counts(self) -> tuple[int, int]:
        """(events, anomalies) in the journal."""
        if self._current():
            row = self.conn.execute("SELECT events, anomalies FROM run_counters WHERE id = 1").fetchone()
            if row is not None:
                return int(row[0]), int(row[1])
        row = self.conn.execute("SELECT COUNT(*), SUM(kind = 'anomaly') FROM events").fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    def latest(self, name: str) -> Optional[tuple[int, float]]:
        id_ = self._id(name)
        if id_ is None:
            return None
        if self._current():
            row = self.conn.execute("SELECT last_step, last_value FROM series_counters WHERE name_id = ? AND rows > 0",
                                    (id_,)).fetchone()
            return None if row is None else (int(row[0]), float("nan") if row[1] is None else float(row[1]))
        row = self.conn.execute(
            "SELECT step, value FROM metrics WHERE name_id = ? ORDER BY step DESC LIMIT 1", (id_,)
        ).fetchone()
        return None if row is None else (int(row[0]), float("nan") if row[1] is None else float(row[1]))

    def vectors(self, name: str, start: Optional[int] = None, end: Optional[int] = None) -> list[tuple[int, list]]:
        id_ = self._id(name)
        if id_ is None:
            return []
        lo = -(2**62) if start is None else max(-(2**62), int(start))
        hi = 2**62 if end is None else min(2**62, int(end))
        rows = self.conn.execute(
            "SELECT step, value FROM vectors WHERE name_id = ? AND step BETWEEN ? AND ? ORDER BY step",
            (id_, lo, hi),
        )
        return [(int(step), json.loads(value)) for step, value in rows]

    def events(self, after_id: int = 0, kinds: Optional[list[str]] = None) -> list[dict]:
        rows = self.conn.execute(
            "SELECT id, time, step, kind, text, data FROM events WHERE id > ? ORDER BY id", (after_id,)
        )
        out = []
        for id_, when, step, kind, text, data in rows:
            if kinds and kind not in kinds:
                continue
            out.append({"id": id_, "time": when, "step": step, "kind": kind, "text": text,
                        "data": None if data is None else json.loads(data)})
        return out

    def _contains(self, q: str) -> tuple[str, tuple]:
        """A SQL condition on a `{col}` column that holds for every row whose text, lower-cased, holds
        `q` (lower case): instr(lower()) for ASCII; a Python function otherwise (SQLite's lower()
        folds ASCII only)."""
        if q.isascii():
            return "instr(lower({col}), ?) > 0", (q,)
        self.conn.create_function("gr_contains", 2, lambda text, sub: isinstance(text, str) and sub in text.lower(),
                                  deterministic=True)
        return "gr_contains({col}, ?)", (q,)

    def metric_names_containing(self, q: Optional[str], limit: int) -> list[str]:
        """Names with scalar rows whose lower-cased name holds `q` (every name when None), sorted,
        at most `limit` (search)."""
        cond, args = ("1", ()) if q is None else self._contains(q)
        rows = self.conn.execute(
            f"SELECT name FROM names WHERE {cond.format(col='name')} AND EXISTS (SELECT 1 FROM metrics "
            "WHERE name_id = names.id) ORDER BY name LIMIT ?", (*args, int(limit)))
        return [r[0] for r in rows]

    def event_rows(self, kinds: Optional[tuple[str, ...]] = None, limit: int = 1_000, before: Optional[int] = None,
                   containing: Optional[str] = None, text_chars: Optional[int] = None) -> list[dict]:
        """Up to `limit` events, newest first: of `kinds`, with id below `before`, whose lower-cased
        text holds `containing` (each when given). Texts are cut at `text_chars` characters in SQLite
        (a hostile multi-megabyte text is never loaded whole; SQLite's length() and substr() stop at a
        NUL character, so a text with one early on is read whole); a text that is not text reads "";
        data as event_data() reads it."""
        where, args = [], []
        if kinds is not None:
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args += kinds
        if before is not None:
            where.append("id < ?")
            args.append(before)
        if containing is not None:
            cond, more = self._contains(containing)
            where.append(cond.format(col="text"))
            args += more
        text = "text" if text_chars is None else \
            f"CASE WHEN length(text) > {int(text_chars)} THEN substr(text, 1, {int(text_chars)}) ELSE text END"
        rows = self.conn.execute(f"SELECT id, time, step, kind, {text}, data FROM events"
                                 f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY id DESC LIMIT ?",
                                 (*args, int(limit)))
        return [{"id": i, "time": t, "step": s, "kind": k, "text": x if isinstance(x, str) else "",
                 "data": event_data(d)} for i, t, s, k, x, d in rows]

    def artifact(self, name: str) -> Any:
        row = self.conn.execute("SELECT value FROM artifacts WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def status(self) -> dict:
        return self.artifact("status") or {"state": "unknown", "step": 0}

    def max_metric_id(self) -> tuple[int, float]:
        """(number of scalar rows, newest write time): from the counters, else counted."""
        if self._current():
            row = self.conn.execute("SELECT rows, newest FROM run_counters WHERE id = 1").fetchone()
            if row is not None:
                return int(row[0]), float(row[1])
        row = self.conn.execute("SELECT COUNT(*), IFNULL(MAX(time), 0) FROM metrics").fetchone()
        return int(row[0]), float(row[1])
