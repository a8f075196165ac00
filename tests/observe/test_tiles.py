"""Multi-resolution tiles (observe/tiles.py) against the raw rows: every tile equals what its raw rows
give after many flushes of varied sizes, re-logged steps and discard_after; a view of any range
shows each raw extreme in the bucket that holds it, the raw count and the newest point exactly; an
old store is upgraded once by a reader, two readers at once do not double-count, and a reader that
cannot write (or a tile-unaware writer's new rows) falls back to the raw rows."""

from __future__ import annotations

import sqlite3
import threading
import time

import numpy as np
import pytest

from glassroom.observe import tiles
from glassroom.observe.store import SCHEMA, StoreReader, StoreWriter, downsample, store_path
from glassroom.web.data import series_payload
from tiles_helpers import assert_tiles_match_raw

FAR = 2**62


def assert_view_matches_raw(reader: StoreReader, name: str, start, end, points: int) -> None:
    """The tiled view against the raw rows: buckets partition the raw points in order, each with the
    exact min and max of its raw points; n and the newest point exact; at most points + 1 entries."""
    steps, mins, maxs, n = reader.view(name, start, end, points)
    raw_steps, raw_values = reader.series(name, start, end)
    assert n == len(raw_steps)
    assert len(steps) <= points + 1
    if not len(raw_steps):
        assert len(steps) == 0
        return
    if len(raw_steps) <= points:   # few points: exactly the raw path
        want = downsample(raw_steps, raw_values, points)
        np.testing.assert_array_equal(steps, want[0])
        np.testing.assert_array_equal(mins, want[1])
        return
    assert steps[-1] == raw_steps[-1]
    np.testing.assert_array_equal(mins[-1:], raw_values[-1:])
    np.testing.assert_array_equal(maxs[-1:], raw_values[-1:])
    body = steps[:-1]
    assert body[0] == raw_steps[0] and np.all(np.diff(body) > 0) and np.isin(body, raw_steps).all()
    edges = np.searchsorted(raw_steps, body)
    for j, lo in enumerate(edges):
        hi = edges[j + 1] if j + 1 < len(edges) else len(raw_steps)
        chunk = raw_values[lo:hi]
        if np.isnan(chunk).all():
            assert np.isnan(mins[j]) and np.isnan(maxs[j])
        else:
            assert mins[j] == np.nanmin(chunk) and maxs[j] == np.nanmax(chunk), (name, start, end, points, j)


def random_ranges(rng, lo: int, hi: int, count: int):
    yield None, None
    yield lo, hi
    for _ in range(count):
        a, b = sorted(int(x) for x in rng.integers(lo - 10, hi + 10, 2))
        yield a, b
        yield a, a + int(rng.integers(0, 50))


def write(run, rng, steps, name="loss", flush_sizes=(1, 7, 300, 5000)):
    """Log `steps` of `name` with NaN gaps and spikes, committing in flushes of varied sizes."""
    values = rng.normal(0, 1, len(steps))
    values[rng.random(len(steps)) < 0.03] = np.nan
    values[rng.random(len(steps)) < 0.002] = 1e6
    with StoreWriter(run, flush_rows=10**9, flush_seconds=1e9) as w:
        i = 0
        while i < len(steps):
            size = int(rng.choice(flush_sizes))
            for s, v in zip(steps[i:i + size].tolist(), values[i:i + size].tolist()):
                w.log(s, {name: v})
            w.flush()
            i += size


def test_tiles_follow_raw_rows_through_flushes_relogs_and_discards(tmp_path):
    rng = np.random.default_rng(1)
    run = tmp_path / "run"
    write(run, rng, np.arange(-300, 6000))                    # dense, negative steps
    write(run, rng, np.arange(0, 6000, 100), name="eval")     # sparse: every 100 steps
    write(run, rng, np.array([-FAR + 5, -10**15, 3, 10**12, FAR - 7]), name="huge")
    assert_tiles_match_raw(run)
    write(run, rng, rng.integers(-300, 6000, 400))            # a resumed run logs steps again
    with StoreWriter(run) as w:
        assert w.discard_after(4321) > 0                       # ...after redoing from a checkpoint
        w.log(4321, {"loss": float("nan")})
        w.log(4400, {"loss": -7.0, "eval": 2.0})
    assert_tiles_match_raw(run)
    with StoreReader(run) as reader:
        assert reader.tiled
        for name, lo, hi in (("loss", -300, 4400), ("eval", 0, 4400), ("huge", -FAR, FAR)):
            for start, end in random_ranges(rng, lo, hi, 12):
                for points in (2, 5, 64, 1500):
                    assert_view_matches_raw(reader, name, start, end, points)
        assert reader.view("nope", None, None, 100)[3] == 0
        assert reader.latest("loss") == (4400, -7.0)


def test_planted_spike_visible_at_every_zoom(tmp_path):
    n, spike = 200_000, 123_457
    values = np.sin(np.arange(n) / 1000.0)
    values[spike] = 50.0
    with StoreWriter(tmp_path, flush_rows=50_000) as w:
        for s, v in enumerate(values.tolist()):
            w.log(s, {"train/loss": v})
    with StoreReader(tmp_path) as reader:
        assert reader.tiled
        for width in (n, 50_000, 10_000, 2_000, 300, 20):
            for offset in (0, width // 3, width - 1):
                start = max(0, spike - offset)
                for points in (3, 100, 1500):
                    s = series_payload(reader, ["train/loss"], start, start + width - 1, points)["series"]["train/loss"]
                    top = int(np.argmax(s["max"]))
                    assert s["max"][top] == 50.0 and s["steps"][top] <= spike
                    assert top + 1 == len(s["steps"]) or s["steps"][top + 1] >= spike   # in the bucket holding it
        # the view reads tiles, not the 200k rows: a whole-run view touches a few thousand rows at most
        items = tiles._items(reader.conn, reader._id("train/loss"), 0, n - 1, 2)
        assert len(items) < tiles.BRANCH * 1500


def old_store(run, rows=3000, events=5):
    """A store as glassroom wrote it before tiles: the old schema, user_version 0."""
    run.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(store_path(run))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO names VALUES (?, ?)", [(1, "train/loss"), (2, "eval/macro/bpb")])
    rng = np.random.default_rng(3)
    conn.executemany("INSERT INTO metrics VALUES (1, ?, ?, ?)",
                     [(s, None if s % 50 == 7 else float(v), 1000.0 + s) for s, v in enumerate(rng.normal(size=rows))])
    conn.executemany("INSERT INTO metrics VALUES (2, ?, ?, 1.0)", [(s, 1.5) for s in range(0, rows, 100)])
    conn.executemany("INSERT INTO events (time, step, kind, text) VALUES (1.0, ?, ?, 'x')",
                     [(i, "anomaly" if i % 2 else "note") for i in range(events)])
    conn.commit()
    conn.close()


def test_reader_upgrades_an_old_store_once(tmp_path):
    old_store(tmp_path)
    with StoreReader(tmp_path) as reader:
        assert reader.tiled and tiles.version(reader.conn) == tiles.TILE_VERSION
        assert reader.max_metric_id() == (3030, 3999.0) and reader.event_counts() == (5, 2)
        assert_view_matches_raw(reader, "train/loss", None, None, 300)
    assert_tiles_match_raw(tmp_path)
    with StoreWriter(tmp_path) as w:   # a resumed old run writes on, tiles kept
        w.log(3000, {"train/loss": 9.0})
        w.event("anomaly", "spike", 3000)
    assert_tiles_match_raw(tmp_path)
    with StoreReader(tmp_path) as reader:
        assert reader.event_counts() == (6, 3)


def test_two_readers_upgrading_at_once_do_not_double_count(tmp_path):
    old_store(tmp_path, rows=20_000)
    results = []
    barrier = threading.Barrier(3)

    def open_reader():
        barrier.wait()
        with StoreReader(tmp_path) as reader:
            results.append((reader.tiled, reader.max_metric_id()))

    threads = [threading.Thread(target=open_reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[1][0] for r in results if r[0]] and all(r[1][0] == 20_200 for r in results)
    assert_tiles_match_raw(tmp_path)


def test_reader_that_cannot_write_reads_raw_and_changes_nothing(tmp_path, monkeypatch):
    old_store(tmp_path)

    def read_only(path):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(tiles, "_open_writable", read_only)
    with StoreReader(tmp_path) as reader:
        assert not reader.tiled and reader.counters() is None
        steps, mins, maxs, n = reader.view("train/loss", 100, 2900, 50)
        want = downsample(*reader.series("train/loss", 100, 2900), 50)
        np.testing.assert_array_equal(steps, want[0])
        np.testing.assert_array_equal(maxs, want[2])
        assert n == 2801 and reader.max_metric_id() == (3030, 3999.0) and reader.event_counts() == (5, 2)
        assert reader.latest("eval/macro/bpb") == (2900, 1.5)
    with sqlite3.connect(store_path(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'tiles'").fetchall()


def test_rows_from_a_tile_unaware_writer_are_never_hidden(tmp_path):
    """A training process started with an older glassroom keeps writing after the dashboard upgraded
    its store: its rows are marked dirty by the triggers; readers read raw until a writable open
    folds them in."""
    with StoreWriter(tmp_path) as w:
        for s in range(1000):
            w.log(s, {"loss": 1.0})
    reader = StoreReader(tmp_path)
    try:
        with sqlite3.connect(store_path(tmp_path)) as old_writer:   # no tiles code: plain inserts
            old_writer.executemany("INSERT OR REPLACE INTO metrics VALUES (1, ?, 5.0, 2.0)", [(s,) for s in range(990, 1100)])
        assert reader.counters() is None                     # the open reader notices at once
        steps, mins, maxs, n = reader.view("loss", None, None, 10)
        assert n == 1100 and steps[-1] == 1099 and maxs.max() == 5.0
        assert reader.latest("loss") == (1099, 5.0) and reader.max_metric_id()[0] == 1100
    finally:
        reader.close()
    with StoreReader(tmp_path) as again:                      # a new reader folds the rows in
        assert again.tiled and again.counters() is not None
    assert_tiles_match_raw(tmp_path)


def test_segments_cover_the_range_exactly():
    rng = np.random.default_rng(5)
    for _ in range(300):
        a = int(rng.integers(-10**7, 10**7))
        b = a + int(rng.integers(0, 10**6))
        level = int(rng.integers(0, tiles.LEVELS + 1))
        covered = []
        for k, lo, hi in tiles.segments(a, b, level):
            covered.append((lo, hi) if k == 0 else (lo << (tiles.SHIFT * k), ((hi + 1) << (tiles.SHIFT * k)) - 1))
        assert covered[0][0] == a and covered[-1][1] == b
        assert all(covered[i][1] + 1 == covered[i + 1][0] for i in range(len(covered) - 1))
        assert len(covered) <= 2 * (tiles.BRANCH - 1) * tiles.LEVELS + 1


@pytest.mark.parametrize("bad", ["not a database at all" * 100, ""])
def test_damaged_store_does_not_break_opening(tmp_path, bad):
    store_path(tmp_path).write_text(bad)
    reader = StoreReader(tmp_path)   # raises later, on reading, as before (the server answers 503)
    try:
        assert not reader.tiled
    finally:
        reader.close()


def test_hand_edited_rows_do_not_break_tiles(tmp_path):
    """Text where numbers belong (a tampered store, as `glassroom ladder verify` tests make): tiles
    count such a value as a gap and such a time as 0; nothing raises."""
    with StoreWriter(tmp_path) as w:
        for s in range(5000):
            w.log(s, {"loss": float(s % 7)})
    with sqlite3.connect(store_path(tmp_path)) as conn:
        conn.execute("UPDATE metrics SET time = 'yesterday' WHERE step = 3")
        conn.execute("UPDATE metrics SET value = 'lots' WHERE step = 4000")
    with StoreReader(tmp_path) as reader:
        assert reader.tiled
        steps, mins, maxs, n = reader.view("loss", 10, 4990, 100)
        assert n == 4981 and np.nanmax(maxs) == 6.0 and np.nanmin(mins) == 0.0
        assert reader.max_metric_id()[0] == 5000


@pytest.mark.parametrize("drop", ["DROP TABLE tiles", "DROP TRIGGER metrics_tiles_insert", "DROP TABLE run_counters"])
def test_writer_rebuilds_what_a_hand_edit_removed(tmp_path, drop, monkeypatch):
    with StoreWriter(tmp_path) as w:
        for s in range(300):
            w.log(s, {"loss": float(s)})
        w.event("note", "hi", 1)
    with sqlite3.connect(store_path(tmp_path)) as conn:
        conn.execute(drop)
    with monkeypatch.context() as m:         # a reader that cannot write reads the raw rows
        m.setattr(tiles, "_open_writable", lambda path: (_ for _ in ()).throw(sqlite3.OperationalError("read-only")))
        with StoreReader(tmp_path) as reader:
            assert not reader.tiled
            assert reader.latest("loss") == (299, 299.0) and reader.event_counts() == (1, 0)
            assert reader.view("loss", None, None, 10)[3] == 300
    with StoreReader(tmp_path) as reader:   # one that can rebuilds them
        assert reader.tiled and reader.latest("loss") == (299, 299.0) and reader.event_counts() == (1, 0)
    with StoreWriter(tmp_path) as w:        # a writer builds the tiles again
        w.log(300, {"loss": 1.0})
    assert_tiles_match_raw(tmp_path)
    with StoreReader(tmp_path) as reader:
        assert reader.tiled and reader.event_counts() == (1, 0)


def test_interrupted_upgrade_changes_nothing(tmp_path, monkeypatch):
    """Ctrl-C (or a kill) in the middle of an upgrade: the transaction rolls back, the store stays
    as it was and is upgraded by the next open."""
    old_store(tmp_path)

    def interrupted(conn, removed=True):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(tiles, "apply_dirty", interrupted)
        with pytest.raises(KeyboardInterrupt):
            StoreWriter(tmp_path)
    with sqlite3.connect(store_path(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'tiles'").fetchall()
        assert conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 3030
    with StoreReader(tmp_path) as reader:
        assert reader.tiled and reader.max_metric_id()[0] == 3030
    assert_tiles_match_raw(tmp_path)


def test_odd_view_arguments(tmp_path):
    with StoreWriter(tmp_path) as w:
        for s in range(100):
            w.log(s, {"loss": float(s)})
    with StoreReader(tmp_path) as reader:
        assert reader.view("loss", 50, 10, 10)[3] == 0                      # start after end: empty
        assert reader.view("loss", -10**30, 10**30, 10)[3] == 100           # far beyond int64: clamped
        reader.tiled = False
        assert reader.view("loss", -10**30, 10**30, 10)[3] == 100           # the raw path too
        steps, mins, maxs, n = reader.view("loss", None, None, 0)           # no buckets asked: one
        assert n == 100 and len(steps) <= 2 and maxs.max() == 99.0


def test_live_writers_and_upgrading_readers_do_not_deadlock(tmp_path):
    """An old-style writer (no tiles code) commits rows while readers open the store and upgrade it
    or fold its rows in: nobody fails or waits past the busy timeout, and the tiles end up exact."""
    old_store(tmp_path, rows=2000)
    stop = threading.Event()
    errors = []

    def old_writer():
        conn = sqlite3.connect(store_path(tmp_path), timeout=30, isolation_level=None)
        step = 2000
        try:
            while not stop.is_set():
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT OR REPLACE INTO metrics VALUES (1, ?, 1.0, 5.0)", [(s,) for s in range(step, step + 50)])
                conn.execute("COMMIT")
                step += 50
        except Exception as exc:   # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=old_writer)
    thread.start()
    try:
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            with StoreReader(tmp_path) as reader:
                reader.conn.execute("BEGIN")   # the view and the raw rows from one snapshot
                steps, mins, maxs, n = reader.view("train/loss", None, None, 100)
                assert n == len(reader.series("train/loss")[0]) and maxs.max() > 1.0
                reader.conn.execute("COMMIT")
    finally:
        stop.set()
        thread.join()
    assert not errors
    with StoreReader(tmp_path) as reader:
        assert reader.tiled
    assert_tiles_match_raw(tmp_path)


def test_a_series_spanning_more_than_int64_is_bucketed_exactly(tmp_path):
    """Steps at both ends (-2**62 and 2**62: a difference of 2**63, past int64): every view, from
    the tiles and from the raw rows, keeps each extreme in its bucket (was an OverflowError, or
    buckets out of order from a wrapped subtraction)."""
    steps = np.r_[np.arange(-FAR, -FAR + 2000), np.arange(FAR - 2000, FAR + 1)]
    values = np.random.default_rng(5).normal(size=len(steps))
    with StoreWriter(tmp_path, flush_rows=777) as w:
        for s, v in zip(steps.tolist(), values.tolist()):
            w.log(s, {"span": v})
        for s in (-FAR, -FAR + 1, 0, FAR - 1, FAR):
            w.log_vector(s, "experts", [float(s > 0), 1.0])
    with StoreReader(tmp_path) as reader:
        from glassroom.web.data import vector_payload
        got = vector_payload(reader, "experts", points=2)   # vectors are bucketed the same way
        assert got["steps"] == [-FAR, FAR - 1] and got["values"] == [[0.0, 1.0], [1.0, 1.0]]
        for tiled in (True, False):
            reader.tiled = tiled
            for start, end in ((None, None), (-FAR, FAR), (-2**63, 2**63 - 1), (-FAR + 3, FAR - 3)):
                for points in (1, 2, 64, 1500):
                    assert_view_matches_raw(reader, "span", start, end, points)


def test_rows_deleted_by_a_tile_unaware_writer_while_a_writer_is_open(tmp_path):
    """An older glassroom deletes rows (its resume redoes steps 51..) while this writer is open:
    the next flush drops the emptied tiles too (it kept them: the run list said step 100, loss 100
    forever, and views drew points that no longer exist)."""
    w = StoreWriter(tmp_path, flush_rows=10**9, flush_seconds=1e9)
    for s in range(1, 101):
        w.log(s, {"loss": float(s)})
    w.flush()
    with sqlite3.connect(store_path(tmp_path)) as old:
        old.execute("DELETE FROM metrics WHERE step > 50")
    w.log(51, {"loss": -1.0})
    w.flush()
    w.close()
    assert_tiles_match_raw(tmp_path)
    with StoreReader(tmp_path) as reader:
        assert reader.latest("loss") == (51, -1.0) and reader.view("loss", None, None, 10)[3] == 51


def generated_series(rng, length: int) -> tuple[np.ndarray, np.ndarray]:
    """`length` increasing steps from a random start with random gaps, values with NaN gaps, and the
    range's largest and smallest value planted near its end (in the last bucket of most views)."""
    steps = int(rng.integers(-50, 50)) + np.cumsum(rng.integers(1, 4, length))
    values = rng.normal(0, 1, length)
    values[rng.random(length) < 0.02] = np.nan
    if length >= 3:
        values[-2], values[-3] = 50.0 + rng.random(), -50.0 - rng.random()
    return steps.astype(np.int64), values


@pytest.mark.parametrize("seed", [0, 1])
def test_every_view_keeps_the_last_bucket_and_each_step_in_exactly_one_bucket(tmp_path, seed):
    """For generated series lengths and point budgets, from the tiles or the raw rows (whichever the
    reader uses for that range): the newest step's value is shown exactly, the buckets partition the
    range (each step in exactly one, each with the exact min and max of its steps), so the min and max
    over the buckets are the range's; the last bucket is never left out."""
    rng = np.random.default_rng(seed)
    lengths = (1, 2, 9, 64, 700, 5_000, 23_456)
    series = {f"s{n}": generated_series(rng, n) for n in lengths}
    with StoreWriter(tmp_path / "run", flush_rows=10**9, flush_seconds=1e9) as w:
        for name, (steps, values) in series.items():
            for s, v in zip(steps.tolist(), values.tolist()):
                w.log(s, {name: v})
    with StoreReader(tmp_path / "run") as reader:
        for name, (steps, values) in series.items():
            ranges = [(None, None), (int(steps[0]), int(steps[-1]))]
            if len(steps) > 4:
                a, b = sorted(int(x) for x in rng.choice(steps, 2, replace=False))
                ranges.append((a, b))
            for points in (1, 2, 3, 7, 64, 500, 1500, 4000):
                for start, end in ranges:
                    assert_view_matches_raw(reader, name, start, end, points)
                    got, mins, maxs, n = reader.view(name, start, end, points)
                    keep = (steps >= (start if start is not None else -FAR)) & (steps <= (end if end is not None else FAR))
                    raw_steps, raw_values = steps[keep], values[keep]
                    assert n == len(raw_steps) and len(got) == len(mins) == len(maxs)
                    assert got[-1] == raw_steps[-1], (name, start, end, points)
                    np.testing.assert_array_equal([mins[-1], maxs[-1]], [raw_values[-1]] * 2)
                    if not np.isnan(raw_values).all():
                        assert np.nanmax(maxs) == np.nanmax(raw_values), (name, start, end, points)
                        assert np.nanmin(mins) == np.nanmin(raw_values), (name, start, end, points)
                    if n > points:   # downsampled: at most `points` buckets, then the newest point
                        assert len(got) <= points + 1


def test_aligned_buckets_hold_every_step_once_up_to_the_last(tmp_path):
    """StoreReader.buckets at each level against the plain grouping step // 8**level: the same buckets
    in order, the last one included, each with its first step and the min and max of its values."""
    rng = np.random.default_rng(5)
    steps, values = generated_series(rng, 9_999)
    with StoreWriter(tmp_path / "run", flush_rows=10**9, flush_seconds=1e9) as w:
        for s, v in zip(steps.tolist(), values.tolist()):
            w.log(s, {"loss": v})
    with StoreReader(tmp_path / "run") as reader:
        for level in range(0, 5):
            want: dict[int, list] = {}
            for s, v in zip(steps.tolist(), values.tolist()):
                b = want.setdefault(s // 8**level, [s, np.nan, np.nan])
                if np.isfinite(v):
                    b[1], b[2] = np.fmin(b[1], v), np.fmax(b[2], v)
            got = reader.buckets("loss", level)
            expected = np.array([want[k] for k in sorted(want)])
            assert len(got[0]) == len(expected), level
            np.testing.assert_array_equal(got[0], expected[:, 0].astype(np.int64))
            np.testing.assert_array_equal(got[1], expected[:, 1])
            np.testing.assert_array_equal(got[2], expected[:, 2])
