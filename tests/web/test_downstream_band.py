"""The preregistered downstream bands on a hero's run page, in headless Chromium, live and published:
a task the prediction has a band for gets a chart of its own drawn over the band, with the readout
saying where its newest score stands against it and the seal's digest under it; a task without a
band, or a damaged band, keeps only its metric's chart."""

from __future__ import annotations

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path, write_prediction, write_run

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)"),
    pytest.mark.browser,
]

CHECKPOINTS = (100, 200, 300, 400)
CHART = "GR.charts.find(c => c.title === {title!r})"
BANDED = "Downstream: mc_prose accuracy, predicted"
SEAL = "ab" * 32


def band(steps, mean, half):
    return {"steps": steps, "mean": mean, "lo": [m - half for m in mean], "hi": [m + half for m in mean]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "hero", steps=400, moe_layers=(), state="finished")
    with StoreWriter(root / "hero") as w:
        for i, step in enumerate(CHECKPOINTS):
            w.log(step, {"downstream/glassroom_mc_prose/acc": 0.25 + 0.1 * i, "downstream/glassroom_mc_code/acc": 0.3,
                         "downstream/glassroom_bpb_prose/bits_per_byte": 3.0 - 0.3 * i})
    steps = [50, 150, 250, 350, 400]
    scores = {
        "glassroom_mc_prose/acc": {"predicted": 0.6, "lower": 0.5, "upper": 0.7, "link": {"form": "sigmoid"},
                                   "at_steps": band(steps, [0.2, 0.3, 0.4, 0.5, 0.6], 0.1)},
        # damaged: one value short; no chart of its own, and the page still draws
        "glassroom_bpb_prose/bits_per_byte": {"predicted": 2.0, "lower": 1.9, "upper": 2.1, "link": {"form": "linear"},
                                              "at_steps": {**band(steps, [3.0, 2.8, 2.5, 2.2, 2.0], 0.1), "lo": [1]}},
    }
    write_prediction(root / "hero", 400, metric="eval/macro/loss", confidence=0.95,
                     downstream={"confidence": 0.95, "scores": scores}, seal={"digest": SEAL})
    return root


@pytest.fixture(scope="module")
def browser():
    with Chromium(width=1280, height=900) as c:
        yield c


def check_bands(browser) -> None:
    titles = [t for t in browser.eval("GR.charts.map(c => c.title)") if t.startswith("Downstream")]
    assert titles == ["Downstream: accuracy", BANDED, "Downstream: bits per byte"]
    chart = CHART.format(title=BANDED)
    assert browser.eval(f"{chart}.lines.map(l => l.name)") == ["downstream/glassroom_mc_prose/acc"]
    # Series: step, the task, then predicted mean, hi, lo; the band's steps and the scores' are joined.
    assert browser.eval(f"{chart}.u.data[0]") == [50, 100, 150, 200, 250, 300, 350, 400]
    assert browser.eval(f"{chart}.u.data[2].filter(v => v != null)") == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6])
    assert browser.eval(f"{chart}.u.data[3].filter(v => v != null)") == pytest.approx([0.3, 0.4, 0.5, 0.6, 0.7])
    readout = browser.eval(f"{chart}.readout.textContent")
    assert "downstream/glassroom_mc_prose/acc 0.5500 at step 400" in readout and "predicted 0.6000" in readout
    assert "inside the band" in readout
    assert browser.eval(f"{chart}.deviation.lo") == pytest.approx(0.5)
    assert browser.eval(f"{chart}.card.querySelector('.seal code').textContent") == SEAL


def test_run_page_draws_the_downstream_band(lab, browser):
    with Server(lab) as server:
        browser.navigate(f"{server.url}/runs/hero")
        assert browser.eval("document.getElementById('error').hidden")
        check_bands(browser)


def test_published_site_draws_the_downstream_band(lab, browser, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    with StaticSiteServer(site) as url:
        browser.navigate(f"{url}/runs/hero/index.html")
        check_bands(browser)
