"""Server-side downsampling as the dashboard uses it: a planted one-step spike (up or down) stays
visible at every zoom level and bucket count, the last point is kept exactly, and a zoomed range
returns the raw points. Runs over a real SQLite store."""

from __future__ import annotations

import numpy as np
import pytest

from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web.data import series_payload, vector_payload

N = 100_000
SPIKE_UP, SPIKE_DOWN = 61_234, 7_777


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    rng = np.random.default_rng(0)
    steps = np.arange(1, N + 1)
    loss = 2.0 + 5.0 * np.exp(-steps / 5000) + rng.normal(0, 0.02, N)
    loss[SPIKE_UP - 1] = 40.0
    loss[SPIKE_DOWN - 1] = -3.0
    with StoreWriter(run, flush_rows=200_000) as w:
        for s, v in zip(steps.tolist(), loss.tolist()):
            w.log(s, {"train/loss": v})
        for s in range(10, 1001, 10):
            w.log_vector(s, "moe/layer_0/tokens_per_expert", [s, 2 * s, 0, 1])
    with StoreReader(run) as r:
        yield r


def windows():
    """Zoom windows around the spike from the whole run down to 10 steps, at several offsets."""
    yield None, None
    for width in (50_000, 10_000, 3_000, 1_000, 300, 100, 10):
        for offset in (0, width // 3, width - 1):
            start = max(1, SPIKE_UP - offset)
            yield start, start + width - 1


@pytest.mark.parametrize("points", [2, 7, 100, 640, 1500, 4000])
def test_spike_survives_every_zoom_level(reader, points):
    for start, end in windows():
        s = series_payload(reader, ["train/loss"], start, end, points)["series"]["train/loss"]
        assert len(s["steps"]) <= points + 1
        assert max(s["max"]) == 40.0, (start, end, points)
        i = s["max"].index(40.0)
        nxt = s["steps"][i + 1] if i + 1 < len(s["steps"]) else SPIKE_UP + 1
        assert s["steps"][i] <= SPIKE_UP <= nxt   # in the bucket that holds the spike


@pytest.mark.parametrize("points", [3, 100, 1500])
def test_downward_spike_and_last_point_survive(reader, points):
    s = series_payload(reader, ["train/loss"], None, None, points)["series"]["train/loss"]
    assert min(s["min"]) == -3.0
    last_step, last_value = reader.latest("train/loss")
    assert s["steps"][-1] == last_step == N and s["min"][-1] == s["max"][-1] == last_value


def test_zoom_returns_raw_detail(reader):
    s = series_payload(reader, ["train/loss"], SPIKE_UP - 50, SPIKE_UP + 49, 1500)["series"]["train/loss"]
    assert s["steps"] == list(range(SPIKE_UP - 50, SPIKE_UP + 50)) and s["n"] == 100
    assert s["min"] == s["max"] and s["max"][50] == 40.0


def test_missing_series_is_empty_not_an_error(reader):
    s = series_payload(reader, ["nope"], None, None, 100)["series"]["nope"]
    assert s == {"steps": [], "min": [], "max": [], "n": 0}


def test_vectors_average_per_bucket(reader):
    v = vector_payload(reader, "moe/layer_0/tokens_per_expert", points=10)
    assert v["width"] == 4 and len(v["steps"]) <= 10
    first = v["values"][0]
    assert first[1] == pytest.approx(2 * first[0]) and first[2] == 0 and first[3] == 1
    assert v["steps"][0] == 10


def test_the_published_overview_keeps_the_last_bucket_and_each_step_in_exactly_one_bucket(tmp_path):
    """`glassroom publish` writes each series' overview (at most SERIES_POINTS buckets and the newest
    point): for generated lengths, the newest step's value is exact, the buckets partition the series
    (each step in exactly one, with the exact min and max of its steps) and their min and max are the
    series'. The largest and smallest values sit in the last bucket, so leaving it out shows."""
    import json

    from glassroom.web.publish import SERIES_POINTS, publish

    rng = np.random.default_rng(4)
    series = {}
    for length in (SERIES_POINTS - 1, SERIES_POINTS + 1, SERIES_POINTS + 777, 3 * SERIES_POINTS + 5, 12_345):
        steps = int(rng.integers(0, 100)) + np.cumsum(rng.integers(1, 4, length))
        values = rng.normal(0, 1, length)
        values[-2], values[-3] = 50.0, -50.0
        series[f"loss/{length}"] = (steps, values)
    run = tmp_path / "lab" / "run"
    with StoreWriter(run, flush_rows=10**6, flush_seconds=3600) as w:
        for name, (steps, values) in series.items():
            for s, v in zip(steps.tolist(), values.tolist()):
                w.log(s, {name: v})
        w.set_status("finished", int(max(s[-1] for s, _ in series.values())))
    site = tmp_path / "site"
    publish(tmp_path / "lab", site)
    generation = json.loads((site / "site.json").read_text())["generation"]
    folder = site / "data" / generation / "runs" / "run"
    files = json.loads((folder / "meta.json").read_text())["files"]
    for name, (steps, values) in series.items():
        overview = json.loads((folder / files[name]).read_text())
        got, mins, maxs = np.array(overview["steps"]), np.array(overview["min"]), np.array(overview["max"])
        assert overview["n"] == len(steps) and len(got) == len(mins) == len(maxs) <= SERIES_POINTS + 1
        assert got[-1] == steps[-1] and mins[-1] == maxs[-1] == values[-1], name
        assert maxs.max() == 50.0 and mins.min() == -50.0, name
        if len(steps) <= SERIES_POINTS:
            assert got.tolist() == steps.tolist() and mins.tolist() == values.tolist()
            continue
        body = got[:-1]
        assert body[0] == steps[0] and np.all(np.diff(body) > 0) and np.isin(body, steps).all(), name
        # buckets of equal width from the first step, as many as SERIES_POINTS fit over the series
        width = -(-(int(steps[-1]) - int(steps[0]) + 1) // SERIES_POINTS)
        bucket = (steps - steps[0]) // width
        assert body.tolist() == steps[np.r_[True, bucket[1:] != bucket[:-1]]].tolist(), name
        edges = np.searchsorted(steps, body)
        ends = np.r_[edges[1:], len(steps)]   # the last bucket runs to the newest step
        for j, (a, b) in enumerate(zip(edges, ends)):
            assert mins[j] == values[a:b].min() and maxs[j] == values[a:b].max(), (name, j)
