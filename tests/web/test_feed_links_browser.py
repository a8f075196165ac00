"""In headless Chromium: feed and search links of a run whose id holds `#`,
`%`, a space and non-ASCII letters open that run's page at the linked step, live and published."""

from __future__ import annotations

from urllib.parse import urlsplit

import feedparser
import pytest

from glassroom.observe.incidents import open_incident
from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from web_helpers import StaticSiteServer, chromium_path

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)"),
    pytest.mark.browser,
]

RUN = "odd/we#ird 50%25 ü"
STEP = 120


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    with StoreWriter(root / RUN) as w:
        for s in range(1, 301):
            w.log(s, {"train/loss": 3.0 - s / 200})
        w.event("anomaly", "loss spike noted by the detector", STEP, {"metric": "train/loss"})
        w.set_status("finished", 300)
    open_incident(root / RUN, "odd run spike", step=STEP)
    return root


def opened_at(browser, url: str) -> None:
    browser.navigate(url)
    browser.wait_for(f"window.GR && GR.ready && GR.mark === {STEP} && GR.boot.runs[0] === {RUN!r}", timeout=20)
    assert browser.eval("GR.zoom && GR.zoom[0] < %d && GR.zoom[1] > %d" % (STEP, STEP))
    assert browser.eval("document.getElementById('error').hidden")


def test_feed_and_search_links_of_an_odd_run_id_open_its_page_at_the_step(lab, server, browser, tmp_path):
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/feed.atom") as response:
        feed = feedparser.parse(response.read())
    assert feed.bozo == 0 and {e.tags[0].term for e in feed.entries} == {"anomaly", "incident", "chain"}
    link = urlsplit(next(e.link for e in feed.entries if e.tags[0].term == "anomaly"))
    opened_at(browser, f"{server.url}{link.path}#{link.fragment}")

    browser.navigate(f"{server.url}/?q=odd%20run%20spike")
    browser.wait_for("GR.searchResult && GR.searchResult.events === 1", timeout=10)
    href = browser.eval("document.querySelector('#search-results a').href")
    opened_at(browser, href)

    site = tmp_path / "site"
    publish(lab, site)
    feed = feedparser.parse((site / "feed.atom").read_text(encoding="utf-8"))
    with StaticSiteServer(site) as url:
        for entry in feed.entries:
            opened_at(browser, f"{url}/{entry.link}")
        own = browser.eval("document.getElementById('run-feed').href")
        assert browser.eval(f"fetch({own!r}).then(r => r.status)") == 200
        browser.navigate(f"{url}/index.html?q=ODD%20RUN")
        browser.wait_for("GR.searchResult && GR.searchResult.events === 1", timeout=10)
        opened_at(browser, browser.eval("document.querySelector('#search-results a').href"))
