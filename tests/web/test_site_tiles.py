"""The published site's tiles (glassroom/web/site_tiles.py, frontend/sitetiles.js): every level's chunks
put back together equal the raw min/max per bucket, re-exports write only the chunks that changed and
delete those no kept generation references, a reader of the previous generation keeps finding its
chunks, a run marked private leaves none behind, and in Chromium a one-step spike is drawn at every
zoom level with the raw points themselves at the deepest."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.folders import folder_files, record_owned, write_owned
from glassroom.observe.runs import VISIBILITY
from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web import publish as publish_mod
from glassroom.web import site_tiles
from glassroom.web.publish import publish, watch


@pytest.fixture
def small_tiles(monkeypatch):
    """Overviews of 100 buckets and chunks of 500: several levels and chunks from a few thousand points."""
    monkeypatch.setattr(publish_mod, "SERIES_POINTS", 100)
    monkeypatch.setattr(site_tiles, "CHUNK", 500)


def write_series(run_dir: Path, series: dict[str, tuple[list[int], list[float]]]) -> None:
    with StoreWriter(run_dir, flush_rows=100_000, flush_seconds=3600) as w:
        rows: dict[int, dict] = {}
        for name, (steps, values) in series.items():
            for s, v in zip(steps, values):
                rows.setdefault(int(s), {})[name] = v
        for s in sorted(rows):
            w.log(s, rows[s])
        w.set_status("running", max(rows))


def site_series(site: Path, run: str, name: str) -> tuple[dict, str]:
    gen = json.loads((site / "site.json").read_text())["generation"]
    meta = json.loads((site / "data" / gen / "runs" / run / "meta.json").read_text())
    return json.loads((site / "data" / gen / "runs" / run / meta["files"][name]).read_text()), gen


def chunk_files(site: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (site / "data" / "chunks").iterdir()}


def referenced(overview: dict) -> set[str]:
    return {f"{c[3]}.json" for level in overview["tiles"]["levels"] for c in level["chunks"]}


def expected_buckets(steps, values, width):
    """Per aligned bucket (step // width): its first step, and min and max of its finite values
    (None when it has none), computed the slow, obvious way."""
    out: dict[int, list] = {}
    for s, v in zip(steps, values):
        b = out.setdefault(s // width, [s, None, None])
        if v is not None and math.isfinite(v):
            b[1] = v if b[1] is None else min(b[1], v)
            b[2] = v if b[2] is None else max(b[2], v)
    return [out[k] for k in sorted(out)]


def test_chunks_put_back_together_equal_raw_min_max_per_bucket(tmp_path, small_tiles):
    rng = np.random.default_rng(3)
    # Negative and irregular steps, a gap, NaN and infinities, a spike; and a sparse series (every
    # 10 steps) whose width-8 level would repeat its raw points.
    steps = list(range(-40, 6000)) + list(range(9000, 9400)) + [2**40]
    values = [float(v) for v in rng.normal(2.0, 0.1, len(steps))]
    values[100], values[101], values[3000] = float("nan"), float("inf"), 50.0
    sparse = list(range(0, 40_000, 10))
    write_series(tmp_path / "lab" / "run", {"train/loss": (steps, values),
                                           "eval/loss": (sparse, [1.0 + s * 1e-5 for s in sparse]),
                                           "short": ([1, 2, 3], [1.0, 2.0, 3.0])})
    site = tmp_path / "site"
    publish(tmp_path / "lab", site)

    short, _ = site_series(site, "run", "short")
    assert "tiles" not in short and short["steps"] == [1, 2, 3]   # the overview is the raw series

    loss, _ = site_series(site, "run", "train/loss")
    tiles = loss["tiles"]
    assert tiles["last"] == [2**40, values[-1]] and loss["n"] == len(steps)
    widths = [lv["width"] for lv in tiles["levels"]]
    assert widths[0] == 1 and len(widths) >= 3 and all(b == a * 8 ** round(math.log(b / a, 8)) for a, b in zip(widths, widths[1:]))
    for level in tiles["levels"]:
        w = level["width"]
        got_steps, got_min, got_max = [], [], []
        for first, last, count, key in level["chunks"]:
            chunk = json.loads((site / "data" / "chunks" / f"{key}.json").read_text())
            assert chunk["steps"][0] == first and chunk["steps"][-1] == last and len(chunk["steps"]) == count
            assert count <= 500
            got_steps += chunk["steps"]
            got_min += chunk["values"] if w == 1 else chunk["min"]
            got_max += chunk["values"] if w == 1 else chunk["max"]
        want = expected_buckets(steps, values, w)
        assert got_steps == [b[0] for b in want], w
        assert got_min == [b[1] for b in want] and got_max == [b[2] for b in want], w
        if w == 1:
            assert got_steps == steps
        assert len(want) > 100   # a level exists only while finer than the overview
    for level in tiles["levels"]:   # the spike (step 2960) is the max of its bucket at every level
        chunks = [json.loads((site / "data" / "chunks" / f"{c[3]}.json").read_text()) for c in level["chunks"]]
        at = [(s, m) for ch in chunks for s, m in zip(ch["steps"], ch.get("max") or ch["values"]) if s <= 2960]
        assert at[-1][1] == 50.0, level["width"]

    sparse_tiles = site_series(site, "run", "eval/loss")[0]["tiles"]
    counts = [sum(c[2] for c in lv["chunks"]) for lv in sparse_tiles["levels"]]
    assert counts[0] == 4000 and 8 not in [lv["width"] for lv in sparse_tiles["levels"]]
    assert all(b <= a // 2 for a, b in zip(counts, counts[1:]))


def test_reexports_reuse_chunks_and_drop_unreferenced_ones_while_readers_follow(tmp_path, small_tiles):
    lab = tmp_path / "lab"
    steps = list(range(1, 20_001))
    write_series(lab / "run", {"train/loss": (steps, [2.0 + math.sin(s / 50) for s in steps])})
    site = tmp_path / "site"
    publish(lab, site)
    first, gen1 = site_series(site, "run", "train/loss")
    before = chunk_files(site)
    assert set(before) == referenced(first) and len(before) > 40

    errors, reads, stop = [], [0], threading.Event()

    def reader():   # follows site.json and reads every chunk its generation's index names
        while not stop.is_set():
            try:
                overview, _ = site_series(site, "run", "train/loss")
                for name in referenced(overview):
                    json.loads((site / "data" / "chunks" / name).read_text())
                reads[0] += 1
            except Exception as exc:
                errors.append(repr(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        with StoreWriter(lab / "run") as w:
            w.log(20_001, {"train/loss": 9.0})
        publish(lab, site)
        second, gen2 = site_series(site, "run", "train/loss")
        after = chunk_files(site)
        new = set(after) - set(before)
        # only the last chunk of each level changed: each other file is the very same file, untouched
        assert 0 < len(new) <= len(second["tiles"]["levels"])
        assert all(after[n] == before[n] for n in set(before) & set(after))
        # the previous generation is kept for readers still on it, with every chunk it names
        assert (site / "data" / gen1).is_dir() and referenced(first) <= set(after)

        with StoreWriter(lab / "run") as w:
            w.log(20_002, {"train/loss": 9.5})
        watch(lab, site, interval=0.0, log=lambda m: None, rounds=2)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert reads[0] > 0
    third, gen3 = site_series(site, "run", "train/loss")
    kept = chunk_files(site)
    assert not (site / "data" / gen1).exists()
    gens = sorted(p.name for p in (site / "data").iterdir() if p.name.startswith("g"))
    assert gen3 in gens and len(gens) == 2
    previous = site_series_at(site, gens[0], "run", "train/loss")
    assert set(kept) == referenced(third) | referenced(previous)   # nothing else left behind
    assert referenced(first) - referenced(third) - referenced(previous)   # gen1's own last chunks went
    assert not [p for p in (site / "data" / "chunks").iterdir() if ".tmp-" in p.name]


def site_series_at(site: Path, gen: str, run: str, name: str) -> dict:
    meta = json.loads((site / "data" / gen / "runs" / run / "meta.json").read_text())
    return json.loads((site / "data" / gen / "runs" / run / meta["files"][name]).read_text())


def test_a_run_marked_private_leaves_no_chunk_behind(tmp_path, small_tiles):
    lab = tmp_path / "lab"
    steps = list(range(1, 3001))
    write_series(lab / "open", {"train/loss": (steps, [1.0 + s * 1e-4 for s in steps])})
    write_series(lab / "secret-run", {"train/loss": (steps, [7.0 + s * 1e-3 for s in steps])})
    site = tmp_path / "site"
    publish(lab, site)
    private_chunks = referenced(site_series(site, "secret-run", "train/loss")[0])
    open_chunks = referenced(site_series(site, "open", "train/loss")[0])
    assert private_chunks and not private_chunks & open_chunks
    assert private_chunks <= set(chunk_files(site))

    with StoreWriter(lab / "secret-run") as w:
        w.set_artifact(VISIBILITY, {"private": True})
    publish(lab, site, log=lambda m: None)
    left = set(chunk_files(site))
    assert not private_chunks & left and open_chunks <= left
    text = "".join(p.read_text() for p in (site / "data").rglob("*.json"))
    assert "secret-run" not in text and "7.0003" not in text


def test_hostile_sites_and_manifests(tmp_path, small_tiles):
    lab = tmp_path / "lab"
    steps = list(range(1, 1001))
    write_series(lab / "run", {"train/loss": (steps, [float(s) for s in steps])})
    site = tmp_path / "site"
    publish(lab, site)
    before = set(chunk_files(site))

    # a manifest that cannot be read: no chunk is deleted that round (a reader may still need it)
    gen = json.loads((site / "site.json").read_text())["generation"]
    (site / "data" / gen / site_tiles.MANIFEST).write_text("{not json")
    with StoreWriter(lab / "run") as w:
        w.log(1001, {"train/loss": 0.0})
    with pytest.raises(GlassroomError, match=f"data/{gen}/chunks.json was changed since glassroom publish wrote it"):
        publish(lab, site)   # edited since the publish wrote it: not the site's own any more
    record_owned(site, "publish", [f"data/{gen}/{site_tiles.MANIFEST}"])   # as if damaged by the disk
    notes = []
    publish(lab, site, log=notes.append)
    assert before <= set(chunk_files(site)) and any("cannot be read" in n for n in notes)

    # data/chunks replaced by a link to somewhere else: refused before anything is written there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chunks = site / "data" / "chunks"
    os.rename(chunks, tmp_path / "moved")
    chunks.symlink_to(elsewhere)
    with pytest.raises(GlassroomError, match="data/chunks is a symbolic link"):
        publish(lab, site)
    assert not any(elsewhere.iterdir())


def test_interrupted_exports_leave_nothing_behind_and_empty_series_publish(tmp_path, small_tiles):
    lab = tmp_path / "lab"
    steps = list(range(1, 1001))
    write_series(lab / "run", {"train/loss": (steps, [float(s) for s in steps]),
                               "train/nan": (steps, [float("nan")] * len(steps))})
    site = tmp_path / "site"
    publish(lab, site)
    nan, _ = site_series(site, "run", "train/nan")
    assert nan["n"] == 1000 and set(nan["min"]) == {None}
    for name in referenced(nan):   # a series with no finite value still has its tiles, all null
        chunk = json.loads((site / "data" / "chunks" / name).read_text())
        assert set(chunk.get("values") or chunk["min"]) == {None}
    # what a killed export leaves: its manifest "in progress" (written before its first file), a
    # half-written chunk and chunks no generation got to reference
    write_owned(site, "publish", folder_files(site), state="in progress")
    chunks = site / "data" / "chunks"
    (chunks / ".0123456789abcdef0123456789abcdef.tmp-99999").write_text('{"steps": [1, 2')
    (chunks / ("f" * 32 + ".json")).write_text("{}")
    (chunks / "README.txt").write_text("not ours")   # a file that is not a chunk is left alone
    publish(lab, site)
    left = {p.name for p in chunks.iterdir()}
    assert ".0123456789abcdef0123456789abcdef.tmp-99999" not in left and "f" * 32 + ".json" not in left
    assert "README.txt" in left and referenced(site_series(site, "run", "train/loss")[0]) <= left


SPIKE_STEP, SPIKE = 123_457, 9.0
LOSS_CHART = "GR.charts.find(c => c.lines.some(l => l.name === 'train/loss'))"


def drawn(browser) -> tuple[list, list]:
    """The loss line as the chart draws it (uPlot's data, one line)."""
    return browser.eval(f"(() => {{ const c = {LOSS_CHART}; const i = 1 + c.lines.findIndex(l => l.name === 'train/loss'); "
                        "return [c.u.data[0], c.u.data[i]]; })()")


@pytest.mark.skipif(__import__("web_helpers").chromium_path() is None, reason="chromium not installed")
def zoom_in_on_the_spike(browser, n: int, values: np.ndarray, spike_value: float) -> None:
    """Full view, then 10%, 1% and 0.1% of the run around the spike: the spike is drawn every time,
    with detail (not the overview's few points), and the deepest zoom draws the raw points."""
    xs, ys = drawn(browser)
    assert max(y for y in ys if y is not None) == spike_value and len(xs) > 400   # full view
    for fraction in (0.1, 0.01, 0.001):
        half = int(n * fraction / 2)
        a, b = SPIKE_STEP - half, SPIKE_STEP + half
        browser.eval(f"GR.zoomAll([{a}, {b}])")
        browser.wait_for(f"(() => {{ const z = {LOSS_CHART}.zoom; return z && z[0] === {a} && z[1] === {b}; }})()", timeout=20)
        browser.wait_for(f"(() => {{ const x = {LOSS_CHART}.u.data[0]; return x.length && x[0] >= {a - 1} && x[x.length - 1] <= {b + 1}; }})()", timeout=20)
        xs, ys = drawn(browser)
        inside = [(x, y) for x, y in zip(xs, ys) if a - 1 <= x <= b + 1 and y is not None]
        assert max(y for _, y in inside) == spike_value, fraction
        assert len(inside) >= min(b - a + 1, 400), (fraction, len(inside))   # detail, not the overview's ~20 points
        if fraction == 0.001:   # the deepest zoom draws the raw points themselves
            assert [x for x, _ in inside] == list(range(a, b + 1))
            assert [y for _, y in inside] == pytest.approx(values[a - 1:b].tolist(), rel=0, abs=0)


@pytest.mark.browser
def test_published_spike_is_drawn_at_every_zoom_and_the_deepest_shows_raw_points(tmp_path):
    from web_helpers import Chromium, Server, StaticSiteServer

    n = 200_000
    steps = np.arange(1, n + 1)
    values = 2.0 + 3.0 * np.exp(-steps / 20_000) + np.random.default_rng(0).normal(0, 0.02, n)
    values[SPIKE_STEP - 1] += SPIKE   # one step, far above the noise
    with StoreWriter(tmp_path / "lab" / "run", flush_rows=250_000, flush_seconds=3600) as w:
        for s, v in zip(steps.tolist(), values.tolist()):
            w.log(s, {"train/loss": v})
        w.set_status("finished", n)
    site = tmp_path / "site"
    publish(tmp_path / "lab", site)
    spike_value = float(values[SPIKE_STEP - 1])

    with Chromium(width=1280, height=900) as browser, StaticSiteServer(site) as url:
        browser.navigate(f"{url}/runs/run/index.html")
        zoom_in_on_the_spike(browser, n, values, spike_value)
        # careless views: reversed or outside the run, no points, a bucket with no finite value
        odd = browser.eval("""(async () => {
          const m = await GR.source.meta('run'), gen = GR.source.site().generation;
          const ov = await GR.siteTiles.json(`${GR.boot.base}data/${gen}/runs/run/${m.files['train/loss']}`);
          const view = (a, b, p) => GR.siteSeries(ov, a, b, p, `${GR.boot.base}data/chunks/`);
          const r = [await view(500, 100, 800), await view(1e9, 2e9, 800), await view(null, null, 0), await view(-50, 10, NaN)];
          const red = GR.siteReduce({steps: [1, 2, 3, 4], min: [null, 1, null, 3], max: [null, 5, null, 4]}, 2);
          return r.map((x) => [x.steps.length, x.n]).concat([[red.steps, red.min, red.max]]);
        })()""")
        assert odd[0] == [0, 0] and odd[1] == [0, 0]
        assert 0 < odd[2][0] <= 3 and odd[2][1] == n   # 0 points asked: 2 buckets, and the newest point
        assert odd[3] == [10, 10]                      # clipped to the run's first step: raw points 1..10
        assert odd[4] == [[1, 3], [1, 3], [5, 4]]
        chunks = browser.eval("performance.getEntriesByType('resource').map(e => e.name).filter(u => u.includes('/data/chunks/'))")
        assert 0 < len(chunks) <= 24, chunks   # only the chunks covering each range (and its two ends), each once
        # Ranges that start or end mid-tile, the spike just outside them: as the server's view, no
        # value of a step outside the range, n exact, the range's newest point exact (the edge
        # buckets once held steps beyond the range: a spike drawn where there is none).
        ranges = [(SPIKE_STEP + 1, SPIKE_STEP + 40_000), (SPIKE_STEP - 30_001, SPIKE_STEP - 1),
                  (SPIKE_STEP - 5003, SPIKE_STEP - 1), (SPIKE_STEP + 1, SPIKE_STEP + 9_999), (7, n - 5)]
        got = browser.eval(f"""(async () => {{
          const m = await GR.source.meta('run'), gen = GR.source.site().generation;
          const ov = await GR.siteTiles.json(`${{GR.boot.base}}data/${{gen}}/runs/run/${{m.files['train/loss']}}`);
          const out = [], real = GR.siteTiles.json, asked = [];
          for (const [a, b] of {json.dumps(ranges)}) for (const p of [7, 300, 1500])
            out.push([a, b, p, await GR.siteSeries(ov, a, b, p, `${{GR.boot.base}}data/chunks/`)]);
          GR.siteTiles.json = (url) => {{ asked.push(url); return real(url); }};
          try {{ await GR.siteSeries(ov, null, null, 1500, `${{GR.boot.base}}data/chunks/`); }}
          finally {{ GR.siteTiles.json = real; }}
          return [out, asked];
        }})()""")
        got, asked = got
        assert asked == []   # the full view: the overview alone, no chunk
        for a, b, p, view in got:
            raw = values[a - 1:b]
            assert view["n"] == len(raw) and len(view["steps"]) <= p + 1, (a, b, p)
            assert view["steps"][0] == a and view["steps"][-1] == b and view["max"][-1] == raw[-1], (a, b, p)
            body = np.array(view["steps"][:-1])
            edges = np.r_[body - a, len(raw)]
            want = [(raw[i:j].min(), raw[i:j].max()) for i, j in zip(edges[:-1], edges[1:])]
            assert list(zip(view["min"][:-1], view["max"][:-1])) == want, (a, b, p)
        errors = [m for m in browser.console if "error" in m.lower() and "favicon" not in m]
        assert not errors, errors[-3:]
        # Live: the same zooms on `glassroom serve`, answered from the store's tiles
        with StoreReader(tmp_path / "lab" / "run") as reader:
            assert reader.tiled and reader.view("train/loss", points=1500)[3] == n
        with Server(tmp_path / "lab") as server:
            browser.navigate(f"{server.url}/runs/run")
            zoom_in_on_the_spike(browser, n, values, spike_value)
            browser.eval("GR.zoomAll(null)")
            with StoreWriter(tmp_path / "lab" / "run") as w:   # a new spike, live, on the full view
                w.log(n + 1, {"train/loss": spike_value + 1})
            browser.wait_for(f"{LOSS_CHART}.u.data[0].includes({n + 1})", timeout=20)
            assert max(y for y in drawn(browser)[1] if y is not None) == spike_value + 1


def test_a_chunk_that_cannot_be_written_stops_the_export_and_keeps_the_site(tmp_path, small_tiles, monkeypatch):
    """A folder where a chunk file goes, or a full disk: one line naming the chunk, the export stops
    and the site keeps serving its last generation with every run (it once skipped the run as
    'store unreadable' and published a site without it)."""
    import errno

    lab = tmp_path / "lab"
    steps = list(range(1, 3001))
    write_series(lab / "run", {"train/loss": (steps, [1.0 + s * 1e-4 for s in steps])})
    site = tmp_path / "site"
    publish(lab, site)
    before = (site / "site.json").read_text()
    key = sorted(referenced(site_series(site, "run", "train/loss")[0]))[0]
    (site / "data" / "chunks" / key).unlink()
    (site / "data" / "chunks" / key).mkdir()
    with pytest.raises(GlassroomError, match=f"cannot write data/chunks/{key}.*nothing was switched") as got:
        publish(lab, site)
    assert "\n" not in str(got.value) and (site / "site.json").read_text() == before
    (site / "data" / "chunks" / key).rmdir()

    real = Path.write_text

    def full(self, *a, **k):
        if ".tmp-" in self.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    with monkeypatch.context() as m, pytest.raises(GlassroomError, match="No space left on device"):
        m.setattr(Path, "write_text", full)
        publish(lab, site)
    assert (site / "site.json").read_text() == before and json.loads(before)["runs"] == ["run"]
    assert not [p for p in (site / "data").rglob("*") if ".tmp-" in p.name]
    publish(lab, site)   # fixed: the next export works and writes the missing chunk again
    assert key in {p.name for p in (site / "data" / "chunks").iterdir()}
