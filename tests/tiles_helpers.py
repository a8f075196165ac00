"""Helpers shared by tests (moved out of test_tiles.py, which other tests imported)."""

from __future__ import annotations
import sqlite3

from glassroom.observe import tiles
from glassroom.observe.store import store_path


def expected_tiles(conn) -> dict:
    """Every tile recomputed from the raw rows, in plain Python: (name_id, level, bucket) -> row."""
    out = {}
    rows = conn.execute("SELECT name_id, step, value, time FROM metrics ORDER BY name_id, step").fetchall()
    for level in range(1, tiles.LEVELS + 1):
        groups: dict = {}
        for name_id, step, value, when in rows:
            groups.setdefault((name_id, level, step >> (tiles.SHIFT * level)), []).append((step, value, when))
        for key, items in groups.items():
            finite = [v for _, v, _ in items if v is not None]
            out[key] = (items[0][0], items[-1][0], min(finite) if finite else None, max(finite) if finite else None,
                        items[-1][1], len(items), max(w for _, _, w in items))
    return out


def assert_tiles_match_raw(run) -> None:
    with sqlite3.connect(store_path(run)) as conn:
        got = {(r[0], r[1], r[2]): tuple(r[3:]) for r in conn.execute("SELECT * FROM tiles")}
        assert got == expected_tiles(conn)
        assert conn.execute("SELECT COUNT(*) FROM tile_dirty").fetchone()[0] == 0
        for name_id, rows, first, last, last_value in conn.execute(
                "SELECT name_id, rows, first_step, last_step, last_value FROM series_counters"):
            raw = conn.execute("SELECT COUNT(*), MIN(step), MAX(step) FROM metrics WHERE name_id = ?", (name_id,)).fetchone()
            assert (rows, first, last) == (raw[0], raw[1], raw[2])
            if rows:
                assert last_value == conn.execute("SELECT value FROM metrics WHERE name_id = ? AND step = ?",
                                                  (name_id, last)).fetchone()[0]
        total = conn.execute("SELECT COUNT(*), IFNULL(MAX(time), 0) FROM metrics").fetchone()
        assert conn.execute("SELECT rows, newest FROM run_counters").fetchone() == total
