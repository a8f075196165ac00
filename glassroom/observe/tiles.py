"""Multi-resolution series tiles and the writer's counters, kept inside a run's store.sqlite.

Why: a chart of a long run shows ~1,500 buckets of (first step, min, max); reading a million raw
rows to draw them took 0.7 s. The store keeps, per metric name, precomputed tiles at 6 resolutions,
so any view of any range is answered from at most ~8 x points rows.

Layout (tables next to observe/store.py's; PRAGMA user_version = TILE_VERSION once they exist):
- tiles(name_id, level, bucket, first_step, last_step, min, max, last, count, newest): level k
  (1..LEVELS = 6) covers steps [bucket * 8**k, (bucket + 1) * 8**k); `bucket = step >> 3k` (floor,
  so negative steps work). min/max over the finite values (null when none), `last` the value at
  last_step (null for a NaN row), `count` the raw rows, `newest` the newest write time. Level 0 is
  the raw `metrics` table. Only buckets holding rows exist, so sparse series (evals every 100 steps)
  cost what they hold.
- tile_dirty(name_id, bucket): level-1 buckets whose raw rows changed, filled by SQLite triggers on
  every INSERT, REPLACE and DELETE on `metrics`, whoever writes (an older glassroom too). The
  writer recomputes exactly those buckets, and their parents level by level, at each flush in the
  same transaction as the rows (`apply_dirty`), and empties the table; so committed state never has
  dirty rows unless a writer that knows nothing of tiles wrote them. Readers then use the raw path.
- series_counters(name_id, rows, first_step, last_step, last_value, newest, vector_last) and
  run_counters(rows, newest, events, anomalies): what run lists and live streams ask for, instead
  of COUNT(*) and MAX() over every row. Metric counters follow the top level's tiles; vector_last
  and the event counters are kept by triggers.

Upgrade: a store made before tiles (user_version 0) is upgraded once, by the first StoreWriter or
StoreReader that opens it, in one BEGIN IMMEDIATE transaction that checks the version again inside
(two upgraders never double-count). A reader that cannot write (read-only file or folder, a lock
held past the busy timeout) reads the raw rows, which is correct and slower.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Optional

import numpy as np

from glassroom.observe.buckets import BRANCH, LEVELS, SHIFT, bucket_index, downsample, fold

# Buckets (observe/buckets.py): a tile of level k covers 8**k steps, bucket = step >> (SHIFT * k); the
# widest, LEVELS = 6, 8**6 = 262,144 steps (a run of 10M steps has 38 of them; each level more costs
# every commit ~10%, and views never need it).
TILE_VERSION = 1
FAR = 2**62                 # steps beyond +-FAR are not read (as StoreReader.series)
UPGRADE_BUSY_SECONDS = 5.0  # a reader waits this long for a live writer's lock, then reads raw

TILE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tiles (
        name_id INTEGER NOT NULL, level INTEGER NOT NULL, bucket INTEGER NOT NULL,
        first_step INTEGER NOT NULL, last_step INTEGER NOT NULL, min REAL, max REAL, last REAL,
        count INTEGER NOT NULL, newest REAL NOT NULL,
        PRIMARY KEY (name_id, level, bucket)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS tile_dirty (
        name_id INTEGER NOT NULL, bucket INTEGER NOT NULL, PRIMARY KEY (name_id, bucket)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS series_counters (
        name_id INTEGER PRIMARY KEY, rows INTEGER NOT NULL DEFAULT 0, first_step INTEGER,
        last_step INTEGER, last_value REAL, newest REAL, vector_last INTEGER)""",
    """CREATE TABLE IF NOT EXISTS run_counters (
        id INTEGER PRIMARY KEY CHECK (id = 1), rows INTEGER NOT NULL, newest REAL NOT NULL,
        events INTEGER NOT NULL, anomalies INTEGER NOT NULL)""",
    f"""CREATE TRIGGER IF NOT EXISTS metrics_tiles_insert AFTER INSERT ON metrics BEGIN
        INSERT OR IGNORE INTO tile_dirty VALUES (NEW.name_id, NEW.step >> {SHIFT}); END""",
    f"""CREATE TRIGGER IF NOT EXISTS metrics_tiles_delete AFTER DELETE ON metrics BEGIN
        INSERT OR IGNORE INTO tile_dirty VALUES (OLD.name_id, OLD.step >> {SHIFT}); END""",
    f"""CREATE TRIGGER IF NOT EXISTS metrics_tiles_update AFTER UPDATE ON metrics BEGIN
        INSERT OR IGNORE INTO tile_dirty VALUES (OLD.name_id, OLD.step >> {SHIFT});
        INSERT OR IGNORE INTO tile_dirty VALUES (NEW.name_id, NEW.step >> {SHIFT}); END""",
    """CREATE TRIGGER IF NOT EXISTS vectors_counter_insert AFTER INSERT ON vectors BEGIN
        INSERT INTO series_counters (name_id, vector_last) VALUES (NEW.name_id, NEW.step)
        ON CONFLICT (name_id) DO UPDATE SET vector_last = MAX(IFNULL(vector_last, NEW.step), NEW.step); END""",
    """CREATE TRIGGER IF NOT EXISTS vectors_counter_delete AFTER DELETE ON vectors BEGIN
        UPDATE series_counters SET vector_last = (SELECT MAX(step) FROM vectors WHERE name_id = OLD.name_id)
        WHERE name_id = OLD.name_id; END""",
    """CREATE TRIGGER IF NOT EXISTS events_counter_insert AFTER INSERT ON events BEGIN
        UPDATE run_counters SET events = events + 1, anomalies = anomalies + (NEW.kind = 'anomaly')
        WHERE id = 1; END""",
    """CREATE TRIGGER IF NOT EXISTS events_counter_delete AFTER DELETE ON events BEGIN
        UPDATE run_counters SET events = events - 1, anomalies = anomalies - (OLD.kind = 'anomaly')
        WHERE id = 1; END""",
)

_ITEM = [("first", np.int64), ("last_step", np.int64), ("min", np.float64), ("max", np.float64),
         ("last", np.float64), ("count", np.int64), ("newest", np.float64)]

# A value or time that is not a finite number (only a hand-edited store has one) counts as a gap / 0.
_FINITE = "CASE WHEN typeof({v}) IN ('real', 'integer') AND {v} - {v} = 0 THEN {v} END"
_TIME = "CASE WHEN typeof({v}) IN ('real', 'integer') THEN {v} ELSE 0 END"


# ------------------------------------------------------------------ state probes

def version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def is_current(conn: sqlite3.Connection) -> bool:
    """Tiles and counters exist and match every committed raw row."""
    if version(conn) < TILE_VERSION:
        return False
    return conn.execute("SELECT EXISTS (SELECT 1 FROM tile_dirty)").fetchone()[0] == 0


# ------------------------------------------------------------------ writing (inside a write transaction)
# All in SQL (aggregates over index ranges): no row passes through Python.

def _children(level: int, alias: str) -> tuple[str, str]:
    """(table, condition): the rows one level down that make up tile (k.name_id, k.bucket) of `level`."""
    span = f"BETWEEN k.bucket * {BRANCH} AND k.bucket * {BRANCH} + {BRANCH - 1}"
    if level == 1:
        return f"metrics {alias}", f"{alias}.name_id = k.name_id AND {alias}.step {span}"
    return f"tiles {alias}", f"{alias}.name_id = k.name_id AND {alias}.level = {level - 1} AND {alias}.bucket {span}"


def _recompute(conn: sqlite3.Connection, level: int, removed: bool) -> None:
    """Rebuild the tiles of `level` listed in temp.tile_keys from the level below (raw rows for
    level 1); with `removed` (rows were deleted), a bucket left with no rows loses its tile."""
    table, on = _children(level, "c")
    last_table, last_on = _children(level, "l")
    if level == 1:
        value, when = _FINITE.format(v="c.value"), _TIME.format(v="c.time")
        columns = f"MIN(c.step), MAX(c.step), MIN({value}), MAX({value}), COUNT(*), MAX({when})"
        last = f"SELECT {_FINITE.format(v='l.value')} FROM {last_table} WHERE {last_on} ORDER BY l.step DESC LIMIT 1"
    else:
        columns = "MIN(c.first_step), MAX(c.last_step), MIN(c.min), MAX(c.max), SUM(c.count), MAX(c.newest)"
        last = f"SELECT l.last FROM {last_table} WHERE {last_on} ORDER BY l.bucket DESC LIMIT 1"
    conn.execute(
        "INSERT OR REPLACE INTO tiles (name_id, level, bucket, first_step, last_step, min, max, count, newest, last) "
        f"SELECT k.name_id, {level}, k.bucket, {columns}, ({last}) "
        f"FROM temp.tile_keys k JOIN {table} ON {on} WHERE k.level = {level} GROUP BY k.name_id, k.bucket")
    if removed:
        conn.execute(
            "DELETE FROM tiles WHERE (name_id, level, bucket) IN (SELECT k.name_id, k.level, k.bucket "
            f"FROM temp.tile_keys k WHERE k.level = {level} AND NOT EXISTS (SELECT 1 FROM {table} WHERE {on}))")


def _update_counters(conn: sqlite3.Connection) -> None:
    """series_counters of the names in temp.tile_keys from their top-level tiles; run_counters from
    series_counters."""
    conn.execute(
        "INSERT INTO series_counters (name_id, rows, first_step, last_step, last_value, newest) "
        "SELECT n.name_id, IFNULL(SUM(t.count), 0), MIN(t.first_step), MAX(t.last_step), "
        f"(SELECT l.last FROM tiles l WHERE l.name_id = n.name_id AND l.level = {LEVELS} ORDER BY l.bucket DESC LIMIT 1), "
        f"MAX(t.newest) FROM (SELECT DISTINCT name_id FROM temp.tile_keys WHERE level = {LEVELS}) n "
        f"LEFT JOIN tiles t ON t.name_id = n.name_id AND t.level = {LEVELS} WHERE true GROUP BY n.name_id "
        "ON CONFLICT (name_id) DO UPDATE SET rows = excluded.rows, first_step = excluded.first_step, "
        "last_step = excluded.last_step, last_value = excluded.last_value, newest = excluded.newest")
    conn.execute("UPDATE run_counters SET rows = (SELECT IFNULL(SUM(rows), 0) FROM series_counters), "
                 "newest = (SELECT IFNULL(MAX(newest), 0) FROM series_counters) WHERE id = 1")


def apply_dirty(conn: sqlite3.Connection, removed: bool = True) -> bool:
    """Recompute the tiles and counters of every dirty bucket, level by level; empties tile_dirty.
    Call inside the write transaction that changed the rows; `removed=False` only when no row was
    deleted since the last call (then no tile can become empty). True when there was anything to do."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM tile_dirty)").fetchone()[0]:
        return False
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS tile_keys (level INTEGER NOT NULL, name_id INTEGER NOT NULL, "
                 "bucket INTEGER NOT NULL, PRIMARY KEY (level, name_id, bucket)) WITHOUT ROWID")
    conn.execute("DELETE FROM temp.tile_keys")
    conn.execute("INSERT INTO temp.tile_keys SELECT 1, name_id, bucket FROM tile_dirty")
    conn.execute("DELETE FROM tile_dirty")
    for level in range(1, LEVELS + 1):
        if level > 1:
            conn.execute(f"INSERT OR IGNORE INTO temp.tile_keys SELECT {level}, name_id, bucket >> {SHIFT} "
                         f"FROM temp.tile_keys WHERE level = {level - 1}")
        _recompute(conn, level, removed)
    _update_counters(conn)
    return True


def _build(conn: sqlite3.Connection) -> None:
    """Tiles and counters for every row of a store that has none (inside a write transaction)."""
    for statement in TILE_SCHEMA:
        conn.execute(statement)
    for table in ("tiles", "tile_dirty", "series_counters", "run_counters"):
        conn.execute(f"DELETE FROM {table}")
    conn.execute("INSERT INTO run_counters SELECT 1, 0, 0, COUNT(*), IFNULL(SUM(kind = 'anomaly'), 0) FROM events")
    conn.execute("INSERT INTO series_counters (name_id, vector_last) SELECT name_id, MAX(step) FROM vectors "
                 "GROUP BY name_id")
    conn.execute(f"INSERT OR IGNORE INTO tile_dirty SELECT name_id, step >> {SHIFT} FROM metrics")
    apply_dirty(conn)
    conn.execute(f"PRAGMA user_version = {TILE_VERSION}")


def _complete(conn: sqlite3.Connection) -> bool:
    """Every table and trigger of TILE_SCHEMA is there (a hand-edited store may have dropped one)."""
    names = [statement.split(" EXISTS ", 1)[1].split()[0] for statement in TILE_SCHEMA]
    found = conn.execute(f"SELECT COUNT(*) FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})",
                         names).fetchone()[0]
    return found == len(names)


def ensure(conn: sqlite3.Connection) -> bool:
    """Bring `conn`'s store (a writable connection in autocommit mode) up to date: build the tiles of
    an old store once, fold in rows a tile-unaware writer added. True when it changed anything."""
    try:
        if is_current(conn) and _complete(conn):
            return False
    except sqlite3.OperationalError:   # a table is missing: built again below
        pass
    conn.execute("BEGIN IMMEDIATE")
    try:
        changed = False
        if version(conn) < TILE_VERSION or not _complete(conn):   # checked again under the write lock
            _build(conn)
            changed = True
        elif apply_dirty(conn):
            changed = True
        conn.execute("COMMIT")
        return changed
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _open_writable(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=UPGRADE_BUSY_SECONDS, isolation_level=None)


def ensure_for_reader(path: Path, conn: sqlite3.Connection) -> bool:
    """For a read-only connection `conn` on `path`: True when its tiles can be used, upgrading the
    store once through a short-lived writable connection when needed. Any failure (not writable,
    locked, damaged) returns False: the reader then reads raw rows."""
    try:
        if is_current(conn) and _complete(conn):
            return True
        if not path.is_file():
            return False
        writer = _open_writable(path)
        try:
            ensure(writer)
        finally:
            writer.close()
        return is_current(conn) and _complete(conn)
    except (sqlite3.Error, OSError, ValueError, TypeError, OverflowError):   # never fails the reader
        return False


# ------------------------------------------------------------------ reading

def segments(a: int, b: int, level: int) -> list[tuple[int, int, int]]:
    """[a, b] cut into whole tiles, coarsest first where they fit: (level, first bucket, last
    bucket), in step order; level 0 entries are raw step ranges (at most BRANCH - 1 steps each side)."""
    out: list[tuple[int, int, int]] = []

    def cut(lo: int, hi: int, k: int) -> None:
        if lo > hi:
            return
        if k == 0:
            out.append((0, lo, hi))
            return
        width = 1 << (SHIFT * k)
        first, last = -((-lo) // width), (hi + 1) // width - 1
        if first > last:
            cut(lo, hi, k - 1)
            return
        cut(lo, first * width - 1, k - 1)
        out.append((k, first, last))
        cut((last + 1) * width, hi, k - 1)

    cut(a, b, level)
    return out


def bucket_rows(conn: sqlite3.Connection, name_id: int, level: int, first: int, last: int) -> np.ndarray:
    """The tiles of `level` (1..LEVELS) with buckets first..last, in order, as _ITEM rows (NaN for null)."""
    rows = conn.execute(
        "SELECT first_step, last_step, IFNULL(min, 'NaN'), IFNULL(max, 'NaN'), IFNULL(last, 'NaN'), count, "
        "newest FROM tiles WHERE name_id = ? AND level = ? AND bucket BETWEEN ? AND ? ORDER BY bucket",
        (name_id, level, first, last))
    return np.fromiter(rows, dtype=_ITEM)


def _items(conn: sqlite3.Connection, name_id: int, a: int, b: int, level: int) -> np.ndarray:
    parts = []
    for k, lo, hi in segments(a, b, level):
        if k == 0:
            value = "CASE WHEN typeof(value) IN ('real', 'integer') THEN value ELSE 'NaN' END"
            rows = conn.execute(
                f"SELECT step, step, {value}, {value}, {value}, 1, 0 "
                "FROM metrics WHERE name_id = ? AND step BETWEEN ? AND ? ORDER BY step", (name_id, lo, hi))
            parts.append(np.fromiter(rows, dtype=_ITEM))
        else:
            parts.append(bucket_rows(conn, name_id, k, lo, hi))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=_ITEM)


def view(conn: sqlite3.Connection, name_id: int, start: Optional[int], end: Optional[int], points: int,
         raw) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(steps, mins, maxs, n) of a series over [start, end] in at most `points` buckets (plus the
    newest point, exact), as observe.store.downsample gives from the raw rows: each bucket's first
    step and the min and max of every raw value in it, so a one-step spike shows at every zoom.
    Buckets are unions of whole tiles, so their edges may sit up to one tile from downsample's.
    `raw(lo, hi)` reads raw (steps, values), used for small ranges and ranges of few points."""
    empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0), 0)
    row = conn.execute("SELECT rows, first_step, last_step FROM series_counters WHERE name_id = ?", (name_id,)).fetchone()
    if row is None or not row[0]:
        return empty
    a = max(-FAR if start is None else int(start), int(row[1]), -FAR)
    b = min(FAR if end is None else int(end), int(row[2]), FAR)
    if a > b:
        return empty
    per_bucket = -(-(b - a + 1) // max(1, points))
    level = min(LEVELS, (per_bucket.bit_length() - 1) // SHIFT)   # at most ~BRANCH x points tiles in [a, b]
    if level > 0:
        items = _items(conn, name_id, a, b, level)
        n = int(items["count"].sum())
        if n > points:
            lo, hi = int(items["first"][0]), int(items["last_step"][-1])
            width = max(1, -(-(hi - lo + 1) // points))
            firsts, mins, maxs = fold(bucket_index(items["first"], lo, width), items["first"], items["min"], items["max"])
            last = items["last"][-1]
            return (np.r_[firsts, hi], np.r_[mins, last], np.r_[maxs, last], n)
    steps, values = raw(a, b)
    s, lo_, hi_ = downsample(steps, values, points)
    return s, lo_, hi_, int(len(steps))
