"""Incidents, feeds and search in headless Chromium, as a watcher sees them: an incident opened with the
CLI while the run page is open appears on the charts (a red flag at its step, green once resolved) and
in the Incidents box without a reload; the journal offers the command that opens an anomaly as an
incident; the lab-wide incidents page lists it (open first, linked to the run page at its step) and
picks up a new one live; the published site shows the same; the search box finds metrics and events
live and published; feed links and <link rel="alternate"> point at feeds that answer."""

from __future__ import annotations

import pytest

from cli_helpers import glassroom_in_process
from glassroom.observe.store import StoreReader
from glassroom.web.publish import publish
from web_helpers import REPO, StaticSiteServer, chromium_path, write_run

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)"),
    pytest.mark.browser,
]

SPIKE = 700
TITLE = "loss spike <b>x</b> & friends"


def glassroom(*args: str) -> str:
    """`glassroom ARGS` in the test process (the served page, in its own process, is what is checked)."""
    out = glassroom_in_process(*args, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "hero", steps=1500, spike_at=SPIKE, state="running")
    write_run(root / "other", steps=400, seed=1, state="finished")
    return root


LOSS = "GR.charts.find(c => c.title === 'Loss')"
# Pixels of a colour in a 7-px column around a step of the Loss chart's plot.
PIXELS = """(() => {{ const u = """ + LOSS + """.u, x = Math.round(u.valToPos({step}, 'x', true));
  const px = u.ctx.getImageData(x - 3, u.bbox.top, 7, u.bbox.height).data; let n = 0;
  for (let i = 0; i < px.length; i += 4) if ({test}) n++; return n; }})()"""
# The incident's translucent band (alpha 0.15 on the transparent plot): red while open, green once
# resolved; the anomaly's marker is a solid line, so it is neither.
RED = "px[i] > 200 && px[i + 1] < 60 && px[i + 2] < 60 && px[i + 3] > 25 && px[i + 3] < 55"
GREEN = "px[i] < 60 && px[i + 1] > 140 && px[i + 2] < 100 && px[i + 3] > 25 && px[i + 3] < 55"


def test_incident_live_on_charts_box_and_page(lab, server, browser):
    with StoreReader(lab / "hero") as r:
        anomaly = next(e for e in r.events() if e["kind"] == "anomaly")
    browser.navigate(f"{server.url}/runs/hero")
    # The journal offers the command that opens the anomaly as an incident.
    commands = browser.eval("[...document.querySelectorAll('#events code.command')].map(c => c.textContent)")
    assert commands == [f'glassroom incident open hero --step {SPIKE} --anomaly {anomaly["id"]} "title"']
    assert browser.eval("document.getElementById('incidents').hidden")
    # The run's feed is linked, for people and for feed readers.
    assert browser.eval("document.getElementById('run-feed').getAttribute('href')") == "/feed.atom?run=hero"
    assert browser.eval("document.querySelector('link[rel=alternate][type=\"application/atom+xml\"]').getAttribute('href')") == "/feed.atom?run=hero"
    assert browser.eval("fetch('/feed.atom?run=hero').then(r => r.status + ' ' + r.headers.get('content-type'))").startswith("200 application/atom+xml")

    browser.eval(f"GR.zoomAll([{SPIKE - 50}, {SPIKE + 50}])")
    browser.wait_for(f"{LOSS}.u.scales.x.min === {SPIKE - 50}", timeout=5)
    assert browser.eval(PIXELS.format(step=SPIKE, test=RED)) == 0   # the anomaly's marker is no incident
    out = glassroom("incident", "open", str(lab / "hero"), "--step", str(SPIKE), "--anomaly", str(anomaly["id"]), TITLE)
    assert "inc-1" in out
    browser.wait_for("GR.incidents.length === 1 && !document.getElementById('incidents').hidden", timeout=5)
    box = browser.eval("document.getElementById('incidents').textContent")
    assert "open" in box and "inc-1" in box and TITLE in box and f"anomaly #{anomaly['id']}" in box
    assert browser.eval("document.querySelector('#incidents b') === null")   # text, never HTML
    browser.wait_for(PIXELS.format(step=SPIKE, test=RED) + " > 400", timeout=5)   # the red flag on the chart
    assert browser.eval("document.getElementById('events').textContent").count("inc-1 open") == 1

    glassroom("incident", "update", str(lab / "hero"), "inc-1", "looking at shard 3")
    glassroom("incident", "resolve", str(lab / "hero"), "inc-1", "a shard of minified JS; dropped")
    browser.wait_for("GR.incidents[0].status === 'resolved'", timeout=5)
    box = browser.eval("document.getElementById('incidents').textContent")
    assert "resolved" in box and "a shard of minified JS; dropped" in box and "looking at shard 3" in box
    browser.wait_for(PIXELS.format(step=SPIKE, test=GREEN) + " > 400", timeout=5)
    assert browser.eval(PIXELS.format(step=SPIKE, test=RED)) == 0
    # A click on the incident zooms to it and marks its step.
    browser.eval("document.querySelector('#incidents a').click()")
    browser.wait_for(f"GR.mark === {SPIKE} && {LOSS}.u.scales.x.min < {SPIKE} && {LOSS}.u.scales.x.max > {SPIKE}", timeout=5)

    # The lab-wide page: open first, each linked to its run page at its step; a new one appears live.
    browser.navigate(f"{server.url}/incidents")
    assert browser.eval("document.getElementById('incident-list').children.length") == 1
    glassroom("incident", "open", str(lab / "other"), "--step", "300", "eval loss left the band")
    browser.wait_for("document.getElementById('incident-list').children.length === 2", timeout=15)
    items = browser.eval("[...document.querySelectorAll('#incident-list > li')].map(li => [li.className, li.querySelector('a').getAttribute('href'), li.textContent])")
    assert items[0][0] == "inc-item open" and items[0][1] == "/runs/other#start=280&end=320&point=300"
    assert items[1][0] == "inc-item resolved" and items[1][1] == f"/runs/hero#start={SPIKE - 35}&end={SPIKE + 35}&point={SPIKE}"
    assert TITLE in items[1][2] and "a shard of minified JS" in items[1][2]
    assert browser.eval("document.getElementById('incident-count').textContent") == "1 open · 1 resolved"
    # Following the link lands on the run page at that point.
    browser.eval("location.href = document.querySelectorAll('#incident-list a')[1].href")
    browser.wait_for(f"window.GR && GR.ready && GR.mark === {SPIKE} && {LOSS}.u.scales.x.min === {SPIKE - 35}", timeout=15)


def test_search_and_feed_links_live(server, browser):
    browser.navigate(f"{server.url}/?q=minified")
    browser.wait_for("GR.searchResult && GR.searchResult.events === 1", timeout=5)
    hrefs = browser.eval("[...document.querySelectorAll('#search-results a')].map(a => a.getAttribute('href'))")
    assert hrefs == [f"/runs/hero#start={SPIKE - 35}&end={SPIKE + 35}&point={SPIKE}"]
    assert browser.eval("document.getElementById('lab-feed').getAttribute('href')") == "/feed.atom"
    assert browser.eval("document.getElementById('to-incidents').getAttribute('href')") == "/incidents"
    # Metric names link to the run page scrolled to that metric's chart.
    browser.eval("const i = document.querySelector('#search input'); i.value = 'GRAD_NORM'; document.querySelector('#search button').click()")
    browser.wait_for("GR.searchResult && GR.searchResult.metrics === 2", timeout=5)
    hrefs = browser.eval("[...document.querySelectorAll('#search-results a')].map(a => a.getAttribute('href'))")
    assert hrefs == ["/runs/hero#chart=train%2Fgrad_norm", "/runs/other#chart=train%2Fgrad_norm"]
    browser.eval("document.querySelector('#search input').value = 'x'.repeat(201); document.querySelector('#search button').click()")
    assert "at most 200" in browser.eval("document.getElementById('search-results').textContent")


def test_published_site_shows_incidents_and_search(lab, browser, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    with StaticSiteServer(site) as url:
        browser.navigate(f"{url}/incidents.html")
        items = browser.eval("[...document.querySelectorAll('#incident-list > li')].map(li => [li.className, li.querySelector('a').getAttribute('href')])")
        assert items == [["inc-item open", "./runs/other/index.html#start=280&end=320&point=300"],
                         ["inc-item resolved", f"./runs/hero/index.html#start={SPIKE - 35}&end={SPIKE + 35}&point={SPIKE}"]]
        browser.navigate(f"{url}/runs/hero/index.html#start={SPIKE - 35}&end={SPIKE + 35}")
        browser.wait_for(f"{LOSS}.u.scales.x.min === {SPIKE - 35} && GR.incidents.length === 1", timeout=10)
        assert TITLE in browser.eval("document.getElementById('incidents').textContent")
        assert browser.eval("document.querySelectorAll('#events code.command').length") == 0   # a live-only hint
        browser.wait_for(PIXELS.format(step=SPIKE, test=GREEN) + " > 400", timeout=5)
        feed = browser.eval("document.getElementById('run-feed').getAttribute('href')")
        assert feed == "../../runs/hero/feed.atom"
        assert browser.eval(f"fetch({feed!r}).then(r => r.status)") == 200
        browser.navigate(f"{url}/index.html?q=MINIFIED")
        browser.wait_for("GR.searchResult && GR.searchResult.events === 1", timeout=5)
        assert browser.eval("document.querySelector('#search-results a').getAttribute('href')") == \
            f"./runs/hero/index.html#start={SPIKE - 35}&end={SPIKE + 35}&point={SPIKE}"
        assert browser.eval("document.getElementById('to-incidents').getAttribute('href')") == "./incidents.html"
        assert browser.eval("fetch(document.getElementById('lab-feed').href).then(r => r.status)") == 200
