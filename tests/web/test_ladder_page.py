"""The ladder page (glassroom/web/ladder_page.py, frontend/ladder.js): a real small ladder (rungs written
with StoreWriter from the curve law, the hero's prediction made and preregistered by the ladder code),
its payload checked against fit.py's formula and the sealed prediction, the routes' errors, privacy
on public servers and in publish, hostile ladder folders, and one Chromium test, live and published."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from glassroom.ladder.fit import fit_endpoints, predict_interval
from glassroom.ladder.predict import backtest, make_prediction, preregister
from glassroom.ladder.rungs import load_rungs
from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web.ladder_page import find_ladders, ladder_view, publish_ladders
from glassroom.web.publish import publish
from ladder_helpers import write_ladder
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path

FAST = {"fit": {"bootstrap": 40, "momentum": 0.999}}
FIT = "ladders/demo-fit-1234"
HERO_VALUES = {100: 5.2, 200: 4.6, 300: 4.3}   # the hero is at step 300 of 567


def _make_lab(root: Path) -> dict:
    ladder = root / FIT
    spec, rungs, hero = write_ladder(ladder, noise=0.001, seed=0, spec_overrides=FAST)
    prediction = make_prediction(ladder, hero.config)
    # The lab was moved since the ladder ran: prediction.json names the rungs' old folders.
    for r in prediction["rungs"]:
        r["run_dir"] = "/gone/elsewhere/lab/" + FIT + "/rungs/" + Path(r["run_dir"]).name
    (ladder / "prediction.json").write_text(json.dumps(prediction))
    (ladder / "backtest.json").write_text(json.dumps(backtest(ladder)))
    hero_dir = root / "runs" / "hero"
    preregister(hero_dir, prediction)
    with StoreWriter(hero_dir) as w:
        for step, value in HERO_VALUES.items():
            w.log(step, {prediction["metric"]: value, "train/loss": value + 0.1})
    # A ladder run without --hero: spec.yaml + ladder.json listing the same rungs; fitted by the page.
    plain = root / "ladders" / "plain"
    plain.mkdir(parents=True)
    shutil.copy(ladder / "spec.yaml", plain / "spec.yaml")
    names = sorted(p.name for p in (ladder / "rungs").iterdir())
    (plain / "ladder.json").write_text(json.dumps({"rungs": [f"../demo-fit-1234/rungs/{n}" for n in names]}))
    # A damaged ladder: must not break the others.
    broken = root / "ladders" / "broken"
    (broken / "rungs").mkdir(parents=True)
    (broken / "spec.yaml").write_text("name: broken\n")
    (broken / "prediction.json").write_text("{not json")
    return {"prediction": prediction, "names": names, "hero": hero}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    return root, _make_lab(root)


@pytest.mark.slow
def test_payload_is_the_ladder_the_commands_wrote(lab):
    root, made = lab
    prediction = made["prediction"]
    assert set(find_ladders(root)) == {FIT, "ladders/plain", "ladders/broken"}
    view = ladder_view(FIT, root / FIT, root)
    json.dumps(view, allow_nan=False)   # plain JSON: no NaN
    # The rungs: compute, final value, held-out mark, linked to their runs although the lab moved.
    assert [r["name"] for r in view["rungs"]] == [r["name"] for r in sorted(prediction["rungs"], key=lambda r: r["flops"])]
    for shown, rec in zip(view["rungs"], sorted(prediction["rungs"], key=lambda r: r["flops"])):
        assert shown["flops"] == rec["flops"] and shown["params"] == rec["params"]
        assert shown["final"] == rec["final"][prediction["metric"]]
        assert shown["run"] == f"{FIT}/rungs/{Path(rec['run_dir']).name}"
    held = json.loads((root / FIT / "backtest.json").read_text())["held_out"]
    assert [r["name"] for r in view["rungs"] if r["held_out"]] == [held]
    # The law: E + A*C^-alpha with the recorded parameters, from the smallest rung to past the hero.
    p = prediction["endpoint_check"]["law"]["params"]
    xs, mean = np.array(view["curve"]["flops"]), np.array(view["curve"]["mean"])
    assert np.allclose(mean, p["E"] + p["A"] * xs ** -p["alpha"], rtol=1e-12)
    assert xs[0] == pytest.approx(min(r["flops"] for r in prediction["rungs"]))
    assert xs[-1] >= 1.5 * prediction["endpoint_check"]["compute"]
    assert np.allclose(np.diff(np.log(xs)), np.log(xs[1] / xs[0]))   # log-uniform
    # Its band: the bootstrap of the same fit (fit_endpoints with the recorded settings and seed).
    lo, hi = np.array(view["curve"]["lo"]), np.array(view["curve"]["hi"])
    assert np.all(lo <= mean + 1e-12) and np.all(mean <= hi + 1e-12) and np.all(hi - lo > 0)
    s = prediction["settings"]
    C = [r["flops"] for r in prediction["rungs"]]
    L = [r["final"][prediction["metric"]] for r in prediction["rungs"]]
    fit = fit_endpoints(C, L, None, s["bootstrap"], s["noise_floor"], prediction["confidence"], s["seed"])
    _, want_lo, want_hi = predict_interval(fit, {"C": xs[[0, -1]]}, prediction["confidence"])
    assert [lo[0], lo[-1]] == pytest.approx(want_lo.tolist()) and [hi[0], hi[-1]] == pytest.approx(want_hi.tolist())
    # The hero: its compute, the sealed preregistered prediction, and its latest value.
    with StoreReader(root / "runs" / "hero") as reader:
        sealed = reader.artifact("prediction")
    hero = view["hero"]
    assert hero["run"] == "runs/hero" and hero["source"] == "the hero run's sealed prediction"
    assert hero["predicted"] == sealed["final_loss"] and hero["interval"] == sealed["final_interval"]
    assert hero["seal"] == sealed["seal"]["digest"]
    assert hero["flops"] == prediction["endpoint_check"]["compute"]
    assert hero["actual"] == {"step": 300, "value": pytest.approx(4.3), "final": False, "steps": 567}
    assert view["backtest"]["held_out"] == held


@pytest.mark.slow
def test_a_ladder_without_prediction_is_fitted_as_ladder_fit_does(lab):
    root, made = lab
    view = ladder_view("ladders/plain", root / "ladders" / "plain", root)
    rungs = load_rungs(root / FIT)
    fit = fit_endpoints([r.flops for r in rungs], [r.final("eval/macro/loss") for r in rungs], None, 40, 0.003, 0.95, 0)
    assert view["law"]["params"] == pytest.approx(fit.params)
    assert view["source"] == "fitted here" and view["hero"] is None and view["curve"]["lo"] is not None
    assert [r["run"] for r in view["rungs"]] == [f"{FIT}/rungs/{r.run_dir.name}" for r in rungs]


def test_the_served_folder_itself_is_a_ladder(lab):
    root, made = lab
    from starlette.testclient import TestClient

    from glassroom.web.server import create_app

    client = TestClient(create_app(root / FIT, hosts={"testserver"}))
    assert [d["id"] for d in client.get("/api/ladders").json()["ladders"]] == ["."]
    view = client.get("/api/ladder", params={"id": "."}).json()
    assert sorted(r["run"] for r in view["rungs"]) == [f"rungs/{n}" for n in made["names"]]   # linked inside this folder
    assert view["hero"]["run"] is None and view["hero"]["source"] == "prediction.json"   # the hero is not below it
    page = client.get("/ladders/", params={"ladder": "."})
    assert page.status_code == 200 and '"ladder": "."' in page.text
    assert '"page": "ladder-index"' in client.get("/ladders/").text


def test_ladder_pages_never_import_torch(lab):
    """Both paths, the recorded fit and the one fitted here (rungs' configs, parameter counts), as serve runs them."""
    import subprocess

    root, _ = lab
    code = ("import sys; from pathlib import Path; from glassroom.web.ladder_page import ladder_view, find_ladders\n"
            f"root = Path({str(root)!r})\n"
            f"for i in ({FIT!r}, 'ladders/plain'): assert ladder_view(i, find_ladders(root)[i], root)['law']['params']\n"
            "assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def _get(url: str) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_routes_answer_and_refuse_in_one_line(lab):
    root, _ = lab
    with Server(root) as s:
        code, body, _ = _get(f"{s.url}/api/ladders")
        listing = {d["id"]: d for d in json.loads(body)["ladders"]}
        assert code == 200 and listing[FIT]["rungs"] == 4 and listing[FIT]["actual"] == pytest.approx(4.3)
        assert "prediction.json" in listing["ladders/broken"]["error"] and "\n" not in listing["ladders/broken"]["error"]
        code, body, _ = _get(f"{s.url}/api/ladder?id={FIT}")
        assert code == 200 and json.loads(body)["hero"]["run"] == "runs/hero"
        code, body, _ = _get(f"{s.url}/api/ladder?id=ladders/broken")
        assert code == 503 and "ladders/broken" in json.loads(body)["error"]
        for query, want in (("id=ladders/nope", 404), ("id=../../etc", 404), ("", 400), ("id=", 400),
                            (f"id={FIT}&id={FIT}", 400), ("id=" + "x" * 2000, 400)):
            code, body, _ = _get(f"{s.url}/api/ladder?{query}")
            assert code == want, query
            assert "\n" not in json.loads(body)["error"]
        code, body, headers = _get(f"{s.url}/ladders/{FIT}")
        assert code == 200 and b"static/ladder.js" in body and "script-src 'self'" in headers["content-security-policy"]
        assert _get(f"{s.url}/ladders/ladders/nope")[0] == 404
        assert _get(f"{s.url}/ladders/")[0] == 200 and _get(f"{s.url}/ladders")[0] == 200
        req = urllib.request.Request(f"{s.url}/api/ladders", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:   # a POST is never answered
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 405


@pytest.mark.slow
def test_a_private_hero_is_not_shown_publicly_or_published(tmp_path):
    root = tmp_path / "lab"
    made = _make_lab(root)
    with StoreWriter(root / "runs" / "hero") as w:
        w.set_artifact("visibility", {"private": True})
    public = ladder_view(FIT, root / FIT, root, public=True)
    assert public["hero"]["run"] is None and public["hero"]["actual"] is None
    assert public["hero"]["source"] == "prediction.json"   # the ladder's own file, not the private run
    assert public["hero"]["predicted"] == made["prediction"]["final_loss"]
    assert "runs/hero" not in json.dumps(public)
    assert ladder_view(FIT, root / FIT, root)["hero"]["run"] == "runs/hero"   # a loopback server shows it

    from starlette.testclient import TestClient

    from glassroom.web.server import create_app

    client = TestClient(create_app(root, public=True, hosts={"testserver"}))
    body = client.get("/api/ladder", params={"id": FIT}).text
    assert "runs/hero" not in body and json.loads(body)["hero"]["actual"] is None
    assert "runs/hero" not in client.get("/api/ladders").text

    site = tmp_path / "site"
    publish(root, site)
    files = {p.relative_to(site / "ladders").as_posix(): p for p in (site / "ladders").rglob("*") if p.is_file()}
    assert f"l/{FIT}/ladder.json" in files and f"l/{FIT}/index.html" in files and "ladders.json" in files
    assert "l/ladders/broken/index.html" not in files   # listed with its error, no page
    for path in files.values():
        assert "runs/hero" not in path.read_text()
    published = json.loads(files[f"l/{FIT}/ladder.json"].read_text())
    assert published["hero"]["actual"] is None and all(r["run"] for r in published["rungs"])


@pytest.mark.slow
def test_hostile_ladder_folders(tmp_path):
    root = tmp_path / "lab"
    _make_lab(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "spec.yaml").write_text("name: outside\n")
    (outside / "rungs").mkdir()
    os.symlink(outside, root / "ladders" / "linked")                 # a symlinked folder is not followed
    secret = root / "ladders" / "ghp_abcdefghijklmnopqrstuvwxyz0123456789"   # an id that looks like a secret
    secret.mkdir()
    shutil.copy(root / FIT / "spec.yaml", secret / "spec.yaml")
    (secret / "rungs").mkdir()
    # prediction.json with NaN/inf and text where numbers go; a ladder.json that lists a folder outside DIR.
    odd = root / "ladders" / "odd"
    shutil.copytree(root / FIT, odd, ignore=shutil.ignore_patterns("rungs"))
    p = json.loads((odd / "prediction.json").read_text())
    p["final_interval"], p["final_loss"] = [float("nan"), "x"], float("nan")
    p["rungs"][0]["final"][p["metric"]] = float("inf")
    (odd / "prediction.json").write_text(json.dumps(p))
    away = root / "ladders" / "away"
    away.mkdir()
    shutil.copy(root / FIT / "spec.yaml", away / "spec.yaml")
    shutil.copytree(root / FIT / "rungs", outside / "rungs-copy")
    (away / "ladder.json").write_text(json.dumps({"rungs": [str(q) for q in sorted((outside / "rungs-copy").iterdir())]
                                                  + ["/nowhere/at/all"]}))
    found = find_ladders(root)
    assert "ladders/linked" not in found and not any("ghp_" in i for i in found)
    view = ladder_view("ladders/odd", odd, root)
    text = json.dumps(view, allow_nan=False)
    # the hero's sealed prediction is below DIR: the page shows its numbers and says prediction.json disagrees
    assert view["hero"]["source"] == "the hero run's sealed prediction" and view["hero"]["predicted"] is not None
    assert any("prediction.json disagrees with the hero run's sealed prediction (final_interval, final_loss" in n
               for n in view["notes"])
    assert len([r for r in view["rungs"] if r["final"] is None]) == 1
    assert "NaN" not in text
    with pytest.raises(Exception) as exc:
        ladder_view("ladders/away", away, root)
    assert "not below the served folder" in str(exc.value)
    many = root / "ladders" / "many"   # a prediction.json with far more rungs than a ladder has: refused, bounded work
    shutil.copytree(odd, many)
    p["rungs"] = p["rungs"] * 60
    (many / "prediction.json").write_text(json.dumps(p))
    with pytest.raises(ValueError, match="240 rungs, more than the 200"):
        ladder_view("ladders/many", many, root)
    # Wrong types where numbers and objects go: drawn from what is usable, or one line naming the field.
    p = json.loads((root / FIT / "prediction.json").read_text())
    p.update(confidence=7, endpoint_check={**p["endpoint_check"], "compute": -5})
    p["rungs"][1]["flops"] = "lots"
    (many / "prediction.json").write_text(json.dumps(p))
    view = ladder_view("ladders/many", many, root)
    assert view["hero"]["flops"] is None and view["confidence"] == 0.95 and view["hero"]["confidence"] == 0.95
    assert [r["flops"] is None for r in view["rungs"]].count(True) == 1 and min(view["curve"]["flops"]) > 0
    for bad in ({"endpoint_check": []}, {"endpoint_check": {"law": {"params": [1, 2]}}}, {"rungs": "x"}, {"metric": 3}):
        (many / "prediction.json").write_text(json.dumps({**p, **bad}))
        with pytest.raises(ValueError, match="prediction.json: .*rerun `glassroom ladder run --hero`"):
            ladder_view("ladders/many", many, root)
    site = tmp_path / "site"
    publish(root, site)   # one unreadable ladder does not stop the others
    listing = {d["id"]: d for d in json.loads((site / "ladders" / "ladders.json").read_text())["ladders"]}
    assert "error" in listing["ladders/away"] and "error" in listing["ladders/broken"] and "error" not in listing[FIT]
    assert not (site / "ladders" / "l" / "ladders" / "away").exists()
    # A second publish after a ladder is gone drops its page; a symlinked SITE/ladders is refused.
    shutil.rmtree(root / "ladders" / "odd")
    publish(root, site)
    assert not (site / "ladders" / "l" / "ladders" / "odd" / "index.html").exists()
    assert (site / "ladders" / "l" / FIT / "index.html").exists()
    other = tmp_path / "site2"
    publish(root, other)
    shutil.rmtree(other / "ladders")
    os.symlink(outside, other / "ladders")
    from glassroom.errors import GlassroomError
    before = (other / "site.json").read_text()
    with pytest.raises(GlassroomError, match="ladders is a symbolic link"):
        publish(root, other)
    assert (other / "site.json").read_text() == before
    with pytest.raises(GlassroomError, match="symbolic link"):
        publish_ladders(root, other)
    assert not any((outside / n).exists() for n in ("ladders.json", "index.html"))


# What the chart drew: point counts from uPlot's data, and pixels read back from its canvas.
DRAWN = """JSON.stringify({rungs: LADDER.rungPoints, held: LADDER.heldOutPoints, law: LADDER.lawPoints,
  band: LADDER.bandPoints, hero: LADDER.heroPoints, actual: LADDER.actualPoints, bar: LADDER.heroBar, error: LADDER.error || null})"""
RED_AT_BAR = """(() => { const u = LADDER.u, b = LADDER.heroBar, r = devicePixelRatio;
  const d = u.ctx.getImageData(Math.round(b.x * r) - 1, Math.round(b.top * r), 3, Math.round((b.bottom - b.top) * r)).data;
  let rows = 0; for (let y = 0; y < d.length / 12; y++) { let red = false;
    for (let i = y * 12; i < y * 12 + 12; i += 4) if (d[i] > 180 && d[i + 1] < 90 && d[i + 2] < 90) red = true;
    if (red) rows++; }
  return rows / (d.length / 12); })()"""
BLUE_ON_LAW = """(() => { const u = LADDER.u, r = devicePixelRatio; let n = 0;
  for (const c of LADDER.view.curve.flops.filter((_, i) => i % 20 === 5)) {
    const x = Math.round(u.valToPos(c, 'x', true)), y = Math.round(u.valToPos(LADDER.lawAt(c), 'y', true));
    const d = u.ctx.getImageData(x - 2, y - 2, 5, 5).data;
    for (let i = 0; i < d.length; i += 4) if (d[i + 2] > 180 && d[i] < 90) { n++; break; } }
  return n; })()"""


def _check_chart(browser, url: str) -> None:
    browser.navigate(url, ready="window.LADDER && LADDER.ready === true")
    drawn = json.loads(browser.eval(DRAWN))
    assert drawn["error"] is None
    assert drawn["rungs"] == 3 and drawn["held"] == 1 and drawn["law"] == 160 and drawn["band"] == 160
    assert drawn["hero"] == 1 and drawn["bar"]["bottom"] - drawn["bar"]["top"] > 5
    assert browser.eval(RED_AT_BAR) > 0.6          # the hero's interval is on the canvas, where it belongs
    assert browser.eval(BLUE_ON_LAW) == 8          # and the law line passes where L(C) says
    links = browser.eval("[...document.querySelectorAll('#rungs a')].map(a => a.getAttribute('href'))")
    assert len(links) >= 4


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_chart_draws_rungs_law_and_hero_band_live_and_published(lab, tmp_path):
    root, _ = lab
    site = tmp_path / "site"
    publish(root, site)
    with Chromium(width=1300, height=1000) as browser:
        with Server(root) as s:
            browser.navigate(f"{s.url}/", ready="window.GR && GR.ready === true")
            assert browser.eval("document.getElementById('nav-ladders').getAttribute('href')") == "/ladders/"
            _check_chart(browser, f"{s.url}/ladders/{FIT}")
            assert browser.eval("LADDER.actualPoints") == 1
            browser.eval("document.getElementById('y-log').click()")   # log y: the same marks, redrawn
            assert browser.eval("LADDER.u.scales.y.distr") == 3 and browser.eval("LADDER.rungPoints") == 3
            assert browser.eval(RED_AT_BAR) > 0.6 and browser.eval(BLUE_ON_LAW) == 8
            with StoreWriter(root / "runs" / "hero") as w:   # the hero finishes: the open page follows
                w.log(567, {"eval/macro/loss": 4.05})
            browser.wait_for("LADDER.view.hero.actual.final === true", timeout=20)
            assert browser.eval("LADDER.actualPoints") == 1 and browser.eval("LADDER.u.scales.y.distr") == 3
            assert "step 567" in browser.eval("document.querySelector('#rungs tr.hero').textContent")
            links = browser.eval("[...document.querySelectorAll('#rungs a')].map(a => a.getAttribute('href'))")
            assert "/runs/runs/hero" in links and f"/runs/{FIT}/rungs/" in links[0]
            browser.navigate(f"{s.url}/ladders/", ready="window.LADDER && LADDER.ready === true")
            assert browser.eval("LADDER.count") == 3
        with StaticSiteServer(site) as url:
            browser.navigate(f"{url}/ladders/index.html", ready="window.LADDER && LADDER.ready === true")
            href = browser.eval(f"[...document.querySelectorAll('#ladders a')].find(a => a.textContent === {FIT!r}).getAttribute('href')")
            _check_chart(browser, f"{url}/ladders/{href}")
            links = browser.eval("[...document.querySelectorAll('#rungs a')].map(a => a.getAttribute('href'))")
            assert "../../../../runs/runs/hero/index.html" in links
            assert urllib.request.urlopen(f"{url}/ladders/" + href.replace("index.html", "").rstrip("/") + "/../../../../runs/runs/hero/index.html").status == 200
