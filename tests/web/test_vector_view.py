"""Vector views (expert-load heatmaps, router-bias trajectories) of long runs read a bounded number
of rows: at most web.data.VECTOR_SAMPLES per bucket, evenly spread, found through the index."""

from __future__ import annotations

import json

import pytest

from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web import data

NAME = "moe/layer_0/tokens_per_expert"


def write_vectors(run, rows):
    with StoreWriter(run, flush_rows=10**6, flush_seconds=1e9) as w:
        for step, vector in rows:
            w.log_vector(step, NAME, vector)


def view(run, monkeypatch=None, samples=None, **kw):
    """The payload and how many stored vectors were decoded to make it."""
    if samples is not None:
        monkeypatch.setattr(data, "VECTOR_SAMPLES", samples)
    decoded = []
    loads = json.loads

    def counting(text, *a, **k):
        decoded.append(1)
        return loads(text, *a, **k)

    json.loads = counting
    try:
        with StoreReader(run) as reader:
            return data.vector_payload(reader, NAME, **kw), len(decoded)
    finally:
        json.loads = loads


def test_a_long_run_is_read_by_samples_and_keeps_each_buckets_level(tmp_path, monkeypatch):
    # 20,000 steps; the vector is constant inside each of the 100 buckets the view makes, so the
    # sampled mean must equal the mean over every row; the newest row (a spike) is read too.
    rows = [(s, [float(s // 200), 2.0 * (s // 200), 1.0]) for s in range(20_000)]
    rows[-1] = (19_999, [99.0, 198.0, 1000.0])
    write_vectors(tmp_path / "run", rows)
    sampled, decoded = view(tmp_path / "run", points=100)
    assert decoded <= 100 * data.VECTOR_SAMPLES + 1   # not 20,000 rows
    full, decoded_all = view(tmp_path / "run", monkeypatch, samples=10**9, points=100)
    assert decoded_all == 20_000
    assert sampled["steps"] == full["steps"] == list(range(0, 20_000, 200)) and sampled["width"] == 3
    assert [v[:2] for v in sampled["values"][:-1]] == [v[:2] for v in full["values"][:-1]]
    assert sampled["values"][-1][2] > 1.0   # the newest row's spike is in the last bucket's mean


def test_sparse_vectors_are_all_read_and_short_ranges_are_exact(tmp_path, monkeypatch):
    rows = [(s, [float(s % 7), 1.0]) for s in range(0, 1_000_000, 1_000)]   # every 1,000 steps
    write_vectors(tmp_path / "run", rows)
    sampled, _ = view(tmp_path / "run", points=300)
    full, _ = view(tmp_path / "run", monkeypatch, samples=10**9, points=300)
    assert sampled == full   # each row is the first of its slice: nothing is left out
    zoom, _ = view(tmp_path / "run", start=10_000, end=20_000, points=300)
    assert zoom["steps"] == list(range(10_000, 20_001, 1_000))


@pytest.mark.parametrize("start,end", [(None, None), (5, 5), (-(2**63), 2**63), (10**12, 10**13)])
def test_odd_ranges(tmp_path, start, end):
    write_vectors(tmp_path / "run", [(s, [1.0]) for s in range(0, 5_000)] + [(2**61, [3.0])])
    got, _ = view(tmp_path / "run", start=start, end=end, points=50)
    if start == 10**12:
        assert got["steps"] == []
    elif start == 5:
        assert got["steps"] == [5] and got["values"] == [[1.0]]
    else:
        assert got["steps"][0] == 0 and got["values"][-1] == [3.0] and len(got["steps"]) <= 51
