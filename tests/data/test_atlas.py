"""The data atlas on a real built dataset (KJV prose, Python docs, stdlib code): clusters follow the
domains, the file's shape and shares, determinism, sampling modes, fine-to-coarse, one-line errors,
and the page in headless Chromium (map pixels and drawn points, the cluster list, hover, the colour
toggle, 20,000 points) served live and from the published static copy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from glassroom.data.atlas import build_atlas, purity
from glassroom.errors import GlassroomError
from web_helpers import REPO, Chromium, chromium_path, free_port

K = 3  # the tiny dataset's domains


@pytest.fixture(scope="module")
def dataset(tiny_dataset, tmp_path_factory) -> Path:
    """A private copy of the tiny dataset (the atlas writes into it), with the fast atlas at k=3."""
    root = tmp_path_factory.mktemp("atlas-root")
    out = root / "data" / "tiny"
    shutil.copytree(tiny_dataset, out)
    build_atlas(out, k=K, sample=20_000, log=open("/dev/null", "w"))
    return out


@pytest.fixture(scope="module")
def atlas(dataset) -> dict:
    return json.loads((dataset / "atlas" / "atlas.json").read_text(encoding="utf-8"))


def test_clusters_separate_the_domains(atlas):
    assert atlas["domain_purity"] >= 0.9, atlas["domain_purity"]
    # Each domain's documents land mostly in one cluster, a different one per domain.
    pts = atlas["points"]
    main = {}
    for d in range(len(atlas["domains"])):
        labels = np.array(pts["cluster"])[np.array(pts["domain"]) == d]
        main[d] = np.bincount(labels, minlength=K).argmax()
    assert len(set(main.values())) == K


def test_json_shape_and_shares(atlas, tiny_dataset):
    manifest = json.loads((tiny_dataset / "manifest.json").read_text())
    n_docs = sum(e[s]["documents"] for e in manifest["domains"].values() for s in ("train", "validation"))
    assert atlas["format"] == "glassroom-atlas/1" and atlas["k"] == K
    assert atlas["sampling"]["sampled"] == n_docs  # fewer documents than --sample: all of them
    assert atlas["domains"] == list(manifest["domains"])
    pts = atlas["points"]
    assert {len(v) for v in pts.values()} == {n_docs}
    assert max(map(abs, pts["x"] + pts["y"])) <= 1.2
    assert sum(c["doc_share"] for c in atlas["clusters"]) == pytest.approx(1.0)
    assert sum(c["token_share"] for c in atlas["clusters"]) == pytest.approx(1.0)
    assert [c["token_share"] for c in atlas["clusters"]] == sorted((c["token_share"] for c in atlas["clusters"]), reverse=True)
    assert sum(c["documents"] for c in atlas["clusters"]) == n_docs
    # Token shares are real token counts: the clusters' tokens add up to the dataset's tokens.
    total = sum(e[s]["tokens"] - e[s]["documents"] for e in manifest["domains"].values() for s in ("train", "validation"))
    assert sum(pts["tokens"]) == total
    for c in atlas["clusters"]:
        assert len(c["terms"]) >= 5 and all(isinstance(t, str) and t for t in c["terms"])
        assert 1 <= len(c["excerpts"]) <= 5 and all(x["text"] for x in c["excerpts"])
        sims = [x["similarity"] for x in c["excerpts"]]
        assert sims == sorted(sims, reverse=True)
        assert sum(c["domains"].values()) == pytest.approx(1.0)
        assert all(x["domain"] in atlas["domains"] for x in c["excerpts"])
    # The bible cluster speaks like the bible; the code cluster like Python.
    terms = {next(iter(c["domains"])): set(c["terms"]) for c in atlas["clusters"]}
    assert terms["prose"] & {"unto", "lord", "shall", "thou", "thy", "thee", "god"}
    assert terms["code"] & {"self", "def", "return", "import", "none"}
    # Languages: every sampled document's, and each domain's and cluster's shares (the tiny dataset is English).
    assert atlas["languages"]["identifier"] == "py3langid" and set(atlas["languages"]["by_domain"]) == set(atlas["domains"])
    for shares in [*atlas["languages"]["by_domain"].values(), *(c["languages"] for c in atlas["clusters"])]:
        assert sum(shares.values()) == pytest.approx(1.0)
    assert next(iter(atlas["languages"]["by_domain"]["prose"])) == "en" and pts["language"].count("en") >= 0.9 * n_docs
    # Funnel, mixture and tokenizer come from the build.
    assert atlas["funnel"]["stages"][0] == "extract" and set(atlas["funnel"]["extract"]) == set(atlas["domains"])
    assert atlas["tokenizer"]["vocab_size"] == manifest["tokenizer"]["vocab_size"]
    mix = atlas["mixture"]["domains"]
    assert sum(r["weight"] for r in mix.values()) == pytest.approx(1.0)
    assert all(r["epochs"] == pytest.approx(1.0) for r in mix.values())  # natural weights, one pass


def test_deterministic_for_a_seed(dataset):
    log = open("/dev/null", "w")
    a = build_atlas(dataset, k=K, sample=120, seed=7, write=False, log=log)
    b = build_atlas(dataset, k=K, sample=120, seed=7, write=False, log=log)
    c = build_atlas(dataset, k=K, sample=120, seed=8, write=False, log=log)
    strip = lambda x: {k: v for k, v in x.items() if k not in ("created", "timings")}  # noqa: E731
    assert strip(a) == strip(b)
    assert a["points"]["tokens"] != c["points"]["tokens"]  # another seed, another sample


def test_per_domain_sampling_and_mixture(dataset):
    atlas = build_atlas(dataset, k=K, sample=60, sampling="per-domain", write=False, log=open("/dev/null", "w"),
                        weights={"prose": 1, "code": 3}, total_tokens=2e6)
    assert atlas["sampling"]["sampled_by_domain"] == {"prose": 20, "docs": 20, "code": 20}
    # Shares are estimates for the whole corpus: prose has ~4x the documents of docs, so its share of
    # documents is about 4x, though the sample holds as many of each.
    share = {d: sum(c["doc_share"] * c["domains"].get(d, 0) for c in atlas["clusters"]) for d in atlas["domains"]}
    assert share["prose"] > 2 * share["docs"]
    mix = atlas["mixture"]
    assert mix["domains"]["docs"]["weight"] == 0 and mix["domains"]["code"]["weight"] == pytest.approx(0.75)
    assert mix["domains"]["code"]["tokens"] == pytest.approx(1.5e6)


def test_water_filling_gives_small_domains_all_they_have(dataset):
    atlas = build_atlas(dataset, k=K, sample=150, sampling="per-domain", write=False, log=open("/dev/null", "w"))
    by = atlas["sampling"]["sampled_by_domain"]
    pop = atlas["sampling"]["population"]
    assert by["docs"] == pop["docs"] and by["code"] == pop["code"]  # 37 and 46 documents: all taken
    assert sum(by.values()) == 150


def test_fine_to_coarse(dataset):
    atlas = build_atlas(dataset, k=K, fine=40, write=False, log=open("/dev/null", "w"))
    assert atlas["fine"] == 40 and atlas["k"] == K
    assert atlas["domain_purity"] >= 0.85


def test_purity():
    assert purity(np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1])) == 1.0
    assert purity(np.array([0, 0, 0, 0]), np.array([0, 0, 1, 1])) == 0.5


@pytest.mark.skipif(__import__("importlib").util.find_spec("wordllama") is None, reason="wordllama not installed")
def test_better_method_offline(dataset, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    atlas = build_atlas(dataset, k=K, method="better", write=False, log=open("/dev/null", "w"))
    assert atlas["method"]["dimensions"] == 32 + 200 + 7 + 256   # words, function-word profile, typographic, wordllama
    assert atlas["domain_purity"] >= 0.85


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "glassroom", "data", "atlas", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=300)


@pytest.mark.slow
def test_cli_writes_and_prints(dataset, tmp_path):
    out = tmp_path / "tiny"
    shutil.copytree(dataset, out)
    shutil.rmtree(out / "atlas")
    r = _cli(out, "--k", "3", "--sample", "100", "--sampling", "per-domain")
    assert r.returncode == 0, r.stderr
    assert "3 clusters of 100 sampled documents (per-domain, better)" in r.stdout   # the default method
    assert "atlas: embed (better)" in r.stderr
    assert json.loads((out / "atlas" / "atlas.json").read_text())["sampling"]["sampled"] == 100
    assert [p.name for p in (out / "atlas").iterdir()] == ["atlas.json"]  # no temporary left behind


@pytest.mark.parametrize("args, message", [
    (["{empty}"], "not a built dataset (no manifest.json)"),
    (["{data}", "--k", "500"], "--k 500 is more than the "),
    (["{data}", "--k", "5", "--sample", "4"], "--k 5 is more than the 4 sampled documents"),
    (["{data}", "--sample", "0"], "--sample: must be at least 1"),
    (["{data}", "--k", "0"], "--k: must be at least 1"),
    (["{data}", "--k", "5", "--fine", "5"], "--fine"),
    (["{data}", "--weights", "prose=1,poetry=2"], "no domain 'poetry'"),
])
def test_cli_errors_are_one_line(dataset, tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    before = (dataset / "atlas" / "atlas.json").read_bytes()
    r = _cli(*[a.format(empty=tmp_path / "empty", data=dataset) for a in args])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert (dataset / "atlas" / "atlas.json").read_bytes() == before  # nothing already written is lost


def test_empty_dataset_is_an_error(dataset, tmp_path):
    empty = tmp_path / "empty"
    shutil.copytree(dataset, empty)
    for shard in (empty / "shards").glob("*/*.idx.npz"):
        np.savez(shard, doc_offsets=np.zeros(1, np.int64), doc_bytes=np.zeros(0, np.int64), doc_source=np.zeros(0, np.int32))
    for tokens in (empty / "shards").glob("*/*.bin"):
        tokens.write_bytes(b"")
    manifest = json.loads((empty / "manifest.json").read_text())
    for splits in manifest["domains"].values():   # a consistent empty dataset, not a damaged one
        for split in splits.values():
            if isinstance(split, dict) and "tokens" in split:
                split["tokens"] = 0
    (empty / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GlassroomError, match="no documents to sample"):
        build_atlas(empty, k=3, write=False, log=open("/dev/null", "w"))
    r = _cli(empty, "--k", "3")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: ")


# ---- the page ----------------------------------------------------------------------------------

class AtlasServer:
    """The atlas routes mounted in a small Starlette app (as glassroom serve mounts them), on uvicorn."""

    def __init__(self, root: Path):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount
        from starlette.staticfiles import StaticFiles

        from glassroom.web.atlas_page import FRONTEND, atlas_routes

        app = Starlette(routes=[*atlas_routes(root), Mount("/static", StaticFiles(directory=FRONTEND), name="static")])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.05)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(dataset):
    s = AtlasServer(dataset.parents[1])
    yield s
    s.stop()


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except urllib.error.URLError:   # not listening yet
        return None, b""


def test_routes(server, atlas):
    status, body = _get(server.url + "/api/atlas/list")
    listing = json.loads(body)
    assert status == 200 and [d["id"] for d in listing["datasets"]] == ["data/tiny"] and listing["datasets"][0]["atlas"]
    status, body = _get(server.url + "/api/atlas?dataset=data/tiny")
    assert status == 200 and json.loads(body)["clusters"] == atlas["clusters"]
    assert _get(server.url + "/atlas/data/tiny")[0] == 200
    for bad in ("/atlas/data/nope", "/api/atlas?dataset=../../etc", "/api/atlas?dataset=data/tiny/shards", "/atlas/..%2F..%2Fetc"):
        assert _get(server.url + bad)[0] == 404, bad
    assert _get(server.url + "/api/atlas")[0] == 400


needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")

# Non-white pixels and distinct colours inside the map canvas.
MAP_PIXELS = """(() => { const c = document.getElementById('map'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0; const colours = new Set();
  for (let i = 0; i < d.length; i += 4) if (d[i] < 245 || d[i + 1] < 245 || d[i + 2] < 245) { ink++; colours.add(d[i] + ',' + d[i + 1] + ',' + d[i + 2]); }
  return [ink, colours.size]; })()"""


def _check_page(browser, url, atlas, shots: Path | None = None):
    browser.navigate(url, ready="window.ATLAS && ATLAS.ready === true", timeout=30)
    n = len(atlas["points"]["x"])
    assert browser.eval("ATLAS.error || null") is None
    assert browser.eval("ATLAS.drawn") == n
    ink, colours = browser.eval(MAP_PIXELS)
    assert ink > n * 2 and colours >= K, (ink, colours)
    items = browser.eval("[...document.querySelectorAll('#clusters li.cluster')].map(li => li.querySelector('.terms').textContent)")
    assert len(items) == K and all(items)
    assert items[0].split(" · ")[:3] == atlas["clusters"][0]["terms"][:3]
    assert browser.eval("document.querySelectorAll('#funnel tr').length") == 1 + len(atlas["domains"])
    assert browser.eval("document.querySelectorAll('#mixture tr').length") == 1 + len(atlas["domains"])
    assert browser.eval("document.querySelectorAll('#languages tr').length") == 1 + len(atlas["domains"])
    assert browser.eval("document.querySelector('#languages td:nth-child(2)').textContent").startswith("en ")
    assert str(atlas["tokenizer"]["vocab_size"]) in browser.eval("document.getElementById('tok-readout').textContent").replace(",", "")
    # Colour by domain: the pixels change; back to clusters.
    before = browser.eval("document.getElementById('map').toDataURL()")
    browser.eval("ATLAS.setMode('domain'); ATLAS.drawNow(); 0")
    assert browser.eval("document.getElementById('map').toDataURL()") != before
    assert browser.eval("document.querySelectorAll('#map-legend .key').length") == len(atlas["domains"])
    browser.eval("ATLAS.setMode('cluster'); ATLAS.drawNow(); 0")
    # Hover a point: the card shows that document's excerpt.
    i = int(np.argmax(atlas["points"]["tokens"]))
    x, y = browser.eval(f"ATLAS.project({i})")
    browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=True)
    browser.wait_for("!document.getElementById('tip').hidden", timeout=5)
    hovered = browser.eval("ATLAS.hovered")
    assert browser.eval("document.querySelector('#tip .tip-text').textContent") == atlas["points"]["text"][hovered]
    # Pick a cluster in the list: only its points keep their colour.
    browser.eval("document.querySelector('#clusters li.cluster[data-id=\"1\"]').click(); ATLAS.drawNow(); 0")
    assert browser.eval("ATLAS.selected") == 1
    assert browser.eval("ATLAS.drawn") == n
    if shots:
        browser.eval("ATLAS.select(1); ATLAS.drawNow(); 0")
        browser.screenshot(shots)
    else:
        browser.eval("ATLAS.select(1); 0")


@pytest.mark.browser
@needs_chromium
def test_page_live(server, atlas, tmp_path):
    with Chromium(width=1440, height=1000) as browser:
        _check_page(browser, server.url + "/atlas/data/tiny", atlas, tmp_path / "atlas.png")
        assert (tmp_path / "atlas.png").stat().st_size > 20_000
        browser.navigate(server.url + "/atlas", ready="window.ATLAS && ATLAS.ready === true")
        assert browser.eval("[...document.querySelectorAll('#datasets a')].map(a => a.textContent)") == ["data/tiny"]


@pytest.mark.browser
@needs_chromium
def test_page_draws_20000_points(server, dataset, atlas, tmp_path):
    """A map of 20,000 points: every one drawn, the frame time printed (a timing is not asserted)."""
    big_root = tmp_path / "big"
    big = big_root / "data" / "tiny"
    shutil.copytree(dataset, big)
    rng = np.random.default_rng(0)
    pts = atlas["points"]
    pick = rng.integers(0, len(pts["x"]), 20_000)
    jitter = rng.normal(0, 0.02, (20_000, 2))
    blown = {key: [v[i] for i in pick] for key, v in pts.items()}
    blown["x"] = [round(float(pts["x"][i] + j), 4) for i, j in zip(pick, jitter[:, 0])]
    blown["y"] = [round(float(pts["y"][i] + j), 4) for i, j in zip(pick, jitter[:, 1])]
    (big / "atlas" / "atlas.json").write_text(json.dumps({**atlas, "points": blown}))
    s = AtlasServer(big_root)
    try:
        with Chromium(width=1440, height=1000) as browser:
            browser.navigate(s.url + "/atlas/data/tiny", ready="window.ATLAS && ATLAS.ready === true", timeout=60)
            assert browser.eval("ATLAS.drawn") == 20_000
            ms = browser.eval("(() => { const t = []; for (let i = 0; i < 10; i++) { const t0 = performance.now(); ATLAS.drawNow(); t.push(performance.now() - t0); } return t.sort((a, b) => a - b)[5]; })()")
            print(f"20,000-point map: median full redraw {ms:.1f} ms")
            ink, _ = browser.eval(MAP_PIXELS)
            assert ink > 20_000
    finally:
        s.stop()


@pytest.mark.browser
@needs_chromium
def test_published_static_copy(dataset, atlas, tmp_path):
    from glassroom.web.atlas_page import publish_atlases

    site = tmp_path / "site"
    assert publish_atlases(dataset.parents[1], site) == ["data/tiny"]
    assert (site / "static" / "atlas.js").is_file() and (site / "atlas" / "d" / "data" / "tiny" / "atlas.json").is_file()
    shutil.copytree(REPO / "glassroom" / "web" / "frontend", site / "static", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("node_modules", "*.html", "package*.json"))  # style.css, as publish() copies
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while _get(f"http://127.0.0.1:{port}/atlas/index.html")[0] != 200:
            assert time.time() < deadline
            time.sleep(0.1)
        with Chromium(width=1440, height=1000) as browser:
            browser.navigate(f"http://127.0.0.1:{port}/atlas/index.html", ready="window.ATLAS && ATLAS.ready === true")
            links = browser.eval("[...document.querySelectorAll('#datasets a')].map(a => a.href)")
            assert len(links) == 1
            _check_page(browser, links[0], atlas)
    finally:
        proc.terminate()
        proc.wait(10)
