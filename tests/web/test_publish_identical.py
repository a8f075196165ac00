"""`glassroom publish` is a function of the lab: the same lab published twice gives the same bytes in
every file (but the export's time and generation name, tests/publish_lab.py TIMED), and what the
site's charts read (overview and tile chunks) is what the live store's reader returns for the same
range and resolution."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from glassroom.observe.buckets import downsample
from glassroom.observe import lab_index as lab_index_mod
from glassroom.observe.runs import find_runs
from glassroom.observe.store import StoreReader
from glassroom.web import feeds as feeds_mod, ladder_view as ladder_view_mod, lineage as lineage_mod
from glassroom.web.publish import SERIES_POINTS, publish
from publish_lab import make_lab, manifest


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return make_lab(tmp_path_factory.mktemp("identical") / "lab")


@pytest.mark.slow
def test_publishing_the_same_lab_twice_gives_the_same_bytes(lab, tmp_path):
    first = publish(lab, tmp_path / "a")
    second = publish(lab, tmp_path / "b")
    again = publish(lab, tmp_path / "a")   # a re-export into the same site
    one = manifest(tmp_path / "a", again["generation"])
    two = manifest(tmp_path / "b", second["generation"])
    # the re-exported site also keeps the previous generation: compare the files both have
    assert {k: v for k, v in one.items() if first["generation"] not in k} == two
    assert any("/chunks/" in k for k in two) and any(k.startswith("ladders/") for k in two)


def _floats(values) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


@pytest.mark.slow
def test_site_chunks_are_the_store_readers_buckets(lab, tmp_path):
    site_dir = tmp_path / "site"
    site = publish(lab, site_dir)
    gen = site_dir / "data" / site["generation"]
    meta = json.loads((gen / "runs" / "runs" / "hero" / "meta.json").read_text())
    checked = set()
    with StoreReader(lab / "runs" / "hero") as reader:
        for name, rel in meta["files"].items():
            payload = json.loads((gen / "runs" / "runs" / "hero" / rel).read_text())
            raw_steps, raw_values = reader.series(name)
            steps, mins, maxs = downsample(raw_steps, raw_values, SERIES_POINTS)
            assert payload["steps"] == steps.tolist() and payload["n"] == len(raw_steps), name
            np.testing.assert_array_equal(_floats(payload["min"]), mins)
            np.testing.assert_array_equal(_floats(payload["max"]), maxs)
            if "tiles" not in payload:
                continue
            for level in payload["tiles"]["levels"]:
                k = round(math.log(level["width"], 8))
                got = [json.loads((site_dir / "data" / "chunks" / f"{c[3]}.json").read_text()) for c in level["chunks"]]
                first, lo, hi = reader.buckets(name, k)
                assert sum((c["steps"] for c in got), []) == first.tolist(), (name, k)
                np.testing.assert_array_equal(_floats(sum((c["values" if k == 0 else "min"] for c in got), [])), lo)
                np.testing.assert_array_equal(_floats(sum((c["values" if k == 0 else "max"] for c in got), [])), hi)
                checked.add((name, k))
    assert {("probe/long", 0), ("probe/long", 1)} <= checked   # the raw level and the width-8 level


def test_a_publish_walks_the_lab_once_and_opens_each_runs_store_once(lab, tmp_path, monkeypatch):
    """Runs are found once and every part of the export (pages, summaries, feeds, incidents, search,
    chains, ladder pages, lineage checks of a private base) reads a run through one store reader."""
    import glassroom.observe.runs as runs_mod
    import glassroom.observe.store as store_mod
    import glassroom.web.publish as publish_mod

    opened, walks = Counter(), []
    real_init, real_find = store_mod.StoreReader.__init__, runs_mod.find_runs

    def counting_init(self, run_dir):
        opened[Path(run_dir).resolve()] += 1
        real_init(self, run_dir)

    def counting_find(*args, **kwargs):
        walks.append(args)
        return real_find(*args, **kwargs)

    monkeypatch.setattr(store_mod.StoreReader, "__init__", counting_init)
    for module in (runs_mod, publish_mod, feeds_mod, lineage_mod, lab_index_mod, ladder_view_mod):
        monkeypatch.setattr(module, "find_runs", counting_find, raising=False)
    site = publish(lab, tmp_path / "site")
    assert len(walks) == 1
    assert {"runs/sft", "runs/sft-private"} <= set(site["runs"])   # runs whose base the lineage checks read
    assert opened and set(opened.values()) == {1}, {p.name: n for p, n in opened.items() if n > 1}
    assert {p.resolve() for p in find_runs(lab).values()} <= set(opened)


@pytest.mark.xfail(strict=True, reason="the published overview is downsample() of the raw rows; the live full "
                   "view of a series over 8 x SERIES_POINTS points is cut along the store's tiles (bucket edges up "
                   "to one tile apart, observe/tiles.view). Making them one changes the published bytes.")
def test_published_overview_is_the_live_full_view(lab, tmp_path):
    site = publish(lab, tmp_path / "site")
    gen = tmp_path / "site" / "data" / site["generation"] / "runs" / "runs" / "hero"
    meta = json.loads((gen / "meta.json").read_text())
    payload = json.loads((gen / meta["files"]["probe/long"]).read_text())
    with StoreReader(lab / "runs" / "hero") as reader:
        steps, _, _, n = reader.view("probe/long", points=SERIES_POINTS)   # the live API's full view
    assert payload["steps"] == steps.tolist() and payload["n"] == n
