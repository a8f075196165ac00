"""Downstream scores on the dashboard and the published site, in headless Chromium: a "Downstream"
section with a chart per metric and a line per task, drawn as points at the evaluated checkpoints
joined by lines; scores of a task that first appear while the page is open get their chart live."""

from __future__ import annotations

import shutil

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path, write_run

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)"),
    pytest.mark.browser,
]

CHECKPOINTS = (100, 200, 300, 400)
CHART = "GR.charts.find(c => c.title === {title!r})"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "run", steps=400, moe_layers=(), state="finished")
    with StoreWriter(root / "run") as w:
        for i, step in enumerate(CHECKPOINTS):
            w.log(step, {"downstream/glassroom_mc_prose/acc": 0.25 + 0.1 * i, "downstream/glassroom_mc_code/acc": 0.3 + 0.05 * i,
                         "downstream/glassroom_mc_prose/acc_norm": 0.3 + 0.1 * i,
                         "downstream/glassroom_bpb_prose/bits_per_byte": 3.0 - 0.3 * i})
    return root


@pytest.fixture(scope="module")
def browser():
    with Chromium(width=1280, height=900) as c:
        yield c


def check_downstream_charts(browser) -> None:
    titles = browser.eval("GR.charts.map(c => c.title)")
    assert ["Downstream: accuracy", "Downstream: accuracy (length-normalised)", "Downstream: bits per byte"] == \
        [t for t in titles if t.startswith("Downstream")]
    acc = CHART.format(title="Downstream: accuracy")
    assert browser.eval(f"{acc}.lines.map(l => l.label)") == ["mc_code", "mc_prose"]
    assert browser.eval(f"{acc}.u.data[0]") == list(CHECKPOINTS)
    assert browser.eval(f"{acc}.u.data[2]") == pytest.approx([0.25, 0.35, 0.45, 0.55])
    assert browser.eval(f"{acc}.u.series.slice(1).every(s => s.points.show !== false)")   # points, joined by lines
    assert browser.eval(f"{CHART.format(title='Downstream: bits per byte')}.u.data[1][3]") == pytest.approx(2.1)
    assert "Other metrics" not in browser.eval("[...document.querySelectorAll('h2')].map(h => h.textContent)")


def test_dashboard_draws_downstream_and_a_new_task_appears_live(lab, browser, tmp_path):
    lab = shutil.copytree(lab, tmp_path / "lab")
    with Server(lab) as server:
        browser.navigate(f"{server.url}/runs/run")
        check_downstream_charts(browser)
        with StoreWriter(lab / "run") as w:
            w.log(400, {"downstream/hellaswag/acc": 0.26})
            w.flush()
            browser.wait_for(f"{CHART.format(title='Downstream: accuracy')}.lines.length === 3", timeout=10)
        assert browser.eval(f"{CHART.format(title='Downstream: accuracy')}.lines.map(l => l.label)") == ["mc_code", "mc_prose", "hellaswag"]


def test_published_site_draws_downstream(lab, browser, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    with StaticSiteServer(site) as url:
        browser.navigate(f"{url}/runs/run/index.html")
        check_downstream_charts(browser)
