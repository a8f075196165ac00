"""Permalinks and the compare page's compute axes in headless Chromium: a permalink restores the range,
scrolls to its chart and marks its point (the planted spike's value in the readout); zooming and
clicking rewrite the hash; "link" copies a URL that reopens the same view; garbage hashes are harmless;
the compare page by tokens and by FLOPs places each run where its tokens_seen (or step x tokens per
step) and FLOPs per token put it, zooms and appends live in those units; the same in the published site."""

from __future__ import annotations

import json
import urllib.request

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.publish import publish
from web_helpers import Chromium, StaticSiteServer, chromium_path, write_run

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)"),
    pytest.mark.browser,
]

SPIKE = 1200
MODEL = {"vocab_size": 1024, "d_model": 56, "n_layers": 4, "n_heads": 7, "max_seq_len": 128, "n_kv_heads": 7,
         "head_dim": 8, "d_ff": 224}
TRAIN = {"seq_len": 128, "batch_size": 24, "lr": 3e-3}   # 3,072 tokens per step


def tokens_seen(step: int) -> float:
    """Not step x 3072: the batch doubles at step 200, so a page that ignores the series is caught."""
    return 3072.0 * step if step <= 200 else 3072.0 * 200 + 6144.0 * (step - 200)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "hero", steps=2000, spike_at=SPIKE, state="finished")
    write_run(root / "tok", steps=400, seed=1, config={"model": MODEL, "train": TRAIN}, state="running")
    with StoreWriter(root / "tok") as w:
        for s in range(1, 401):
            w.log(s, {"data/tokens_seen": tokens_seen(s)})
    write_run(root / "perstep", steps=300, seed=2, config={"model": MODEL, "train": TRAIN}, state="finished")
    write_run(root / "plain", steps=300, seed=3, state="finished")   # no model, no batch: off the compute axes
    return root


@pytest.fixture(scope="module")
def browser():
    with Chromium(width=1440, height=900) as c:
        yield c


CHART = "GR.charts.find(c => c.title === {title!r})"


def fresh(browser, url):
    """A full page load even when only the hash differs from the page open now (navigate, then reload:
    no about:blank in between, whose cached pages would keep their live streams open)."""
    browser.eval("window.__old = true")
    browser.send("Page.navigate", {"url": url}, session=True)
    browser.wait_for(f"!window.__old || location.href === {url!r}", timeout=30)
    if browser.eval("window.__old === true"):   # only the hash changed: the same document
        browser.send("Page.reload", {"ignoreCache": False}, session=True)
    browser.wait_for("!window.__old && window.GR && GR.ready === true", timeout=30)
    assert browser.eval("location.href") == url


def click(browser, title: str, fraction: float) -> None:
    """A real mouse click (move, press, release) at `fraction` of a chart's plot width."""
    rect = browser.eval(f"(() => {{ const r = {CHART.format(title=title)}.u.over.getBoundingClientRect();"
                        " return [r.left, r.top, r.width, r.height]; })()")
    x, y = rect[0] + rect[2] * fraction, rect[1] + rect[3] / 2
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}, session=True)


def test_permalink_restores_the_view_and_follows_it(server, browser):
    fresh(browser, f"{server.url}/runs/hero#chart=train/grad_norm&start={SPIKE - 10}&end={SPIKE + 10}&point={SPIKE}")
    loss = CHART.format(title="Loss")
    browser.wait_for(f"{loss}.u.scales.x.min === {SPIKE - 10} && {loss}.raw['hero|train/loss'][0][0] === {SPIKE - 10}", timeout=10)
    assert browser.eval(f"{loss}.u.scales.x.max") == SPIKE + 10
    assert browser.eval(f"{CHART.format(title='Learning rate')}.u.scales.x.min") == SPIKE - 10   # every chart
    # The point is marked: the readout gives the planted spike's value at that step.
    assert browser.eval("GR.mark") == SPIKE
    marked = browser.eval(f"{loss}.marked")
    assert marked["x"] == SPIKE and marked["value"] > 7.0
    assert f"at step {SPIKE} (marked)" in browser.eval(f"{loss}.readout.textContent")
    # Scrolled to the named chart (Gradient norm is below the fold at 900 px).
    browser.wait_for(f"(() => {{ const r = {CHART.format(title='Gradient norm')}.card.getBoundingClientRect();"
                     " return r.top >= 0 && r.bottom <= innerHeight; })()", timeout=5)
    assert browser.eval("scrollY") > 0
    browser.wait_for("GR.permalink.settled", timeout=5)   # no more scrolling back to the linked chart

    # Zooming rewrites the hash, keeping the chart and the point.
    browser.eval("GR.zoomAll([1000, 1400])")
    assert browser.eval("location.hash") == f"#chart=train%2Fgrad_norm&start=1000&end=1400&point={SPIKE}"
    browser.wait_for(f"{loss}.u.scales.x.min === 1000", timeout=5)
    # A click on a chart marks the step under the cursor and names that chart.
    browser.eval(f"{loss}.card.scrollIntoView({{block: 'center'}})")
    click(browser, "Loss", 0.25)
    browser.wait_for("GR.mark !== 1200", timeout=5)
    mark = browser.eval("GR.mark")
    assert 1050 <= mark <= 1150, mark
    assert browser.eval("location.hash") == f"#chart=train%2Floss&start=1000&end=1400&point={mark}"
    assert browser.eval(f"{loss}.u.scales.x.min") == 1000   # a click is not a zoom

    # "link" copies a permalink to its chart; opening it shows the same range and point.
    browser.eval(f"{CHART.format(title='Learning rate')}.card.querySelector('button.link').click()")
    browser.wait_for("GR.lastCopied && GR.lastCopied.includes('chart=train%2Flr')", timeout=5)
    link = browser.eval("GR.lastCopied")
    assert link.startswith(f"{server.url}/runs/hero#") and "start=1000&end=1400" in link and f"point={mark}" in link
    fresh(browser, link)
    browser.wait_for(f"{loss}.u.scales.x.min === 1000 && GR.mark === {mark}", timeout=10)
    assert browser.eval("GR.activeChart") == "train/lr"

    # A hash typed into the address bar (hashchange) applies at once, no reload.
    browser.eval("window.__same = 1; location.hash = '#start=1500&end=1600&point=1550'")
    browser.wait_for(f"{loss}.u.scales.x.min === 1500 && GR.mark === 1550", timeout=5)
    assert browser.eval("window.__same") == 1
    # Double-click resets: the range leaves the hash.
    browser.eval(f"{loss}.u.over.dispatchEvent(new MouseEvent('dblclick', {{bubbles: true}}))")
    browser.wait_for("GR.zoom === null && !location.hash.includes('start=')", timeout=5)


GARBAGE = ["#start=abc&end=1e999&point=NaN", "#start=500&end=100&point=-", "#start=5&end=5",
           "#chart=nope&point=99999999999999999999999999", "#%E0%A4%A&&&==", "#x=flops&start=-1e400&end=1e401",
           "#chart=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E&start=0x10&end=0b11", "#" + "start=1&" * 3000,
           "#point=1e3&start=Infinity&end=-Infinity", "#chart=" + "a" * 5000]


def test_garbage_hashes_are_harmless(server, browser):
    for i, hash_ in enumerate(GARBAGE):
        browser.console.clear()
        fresh(browser, f"{server.url}/runs/hero?i={i}{hash_}")
        assert browser.eval("document.getElementById('error').hidden"), hash_
        assert browser.eval("GR.zoom") is None, hash_
        assert browser.eval("GR.charts.length") > 5
        assert not [c for c in browser.console if "exceptionDetails" in c or "Uncaught" in c], (hash_, browser.console)
        assert browser.eval("document.querySelector('#charts img') === null")
    # The run page has no compute axis: x=flops does not let 1e20 through as a step.
    fresh(browser, f"{server.url}/runs/hero?k#x=flops&start=1.5&end=1e20")
    assert browser.eval("GR.zoom") is None and browser.eval("document.getElementById('error').hidden")
    # A compare link to a range past any run (1e30 tokens): drawn, no refused request.
    fresh(browser, f"{server.url}/compare?run=tok&run=hero#x=tokens&start=1e29&end=1e30&point=5e29")
    assert browser.eval("GR.zoom") == [1e29, 1e30] and browser.eval("document.getElementById('error').hidden")
    # A number past a safe step is dropped; 1e3 is a plain number and counts.
    fresh(browser, f"{server.url}/runs/hero?j#point=1e3&start=900&end=1e20")
    assert browser.eval("GR.mark") == 1000 and browser.eval("GR.zoom") is None


def api(server, path):
    with urllib.request.urlopen(server.url + path, timeout=10) as r:
        return json.loads(r.read())


def test_compare_by_tokens_and_flops(server, browser, lab):
    fpt = api(server, "/api/run?run=tok")["compute"]["flops_per_token"]
    assert fpt and fpt > 1e5
    loss = CHART.format(title="Loss by tokens")
    fresh(browser, f"{server.url}/compare?run=tok&run=perstep&run=plain#x=tokens")
    browser.wait_for(f"{loss} && {loss}.raw['tok|train/loss'] && {loss}.raw['perstep|train/loss']", timeout=10)
    note = browser.eval("document.getElementById('axis-note').textContent")
    assert "plain" in note and "tokens" in note and "tok:" not in note
    assert browser.eval(f"{loss}.lines.map(l => l.run)") == ["tok", "perstep"]
    xs = browser.eval(f"{loss}.raw['tok|train/loss'][0]")
    assert xs[0] == tokens_seen(1) and xs[-1] == tokens_seen(400)   # from the series, not step x 3072
    per = browser.eval(f"{loss}.raw['perstep|train/loss'][0]")
    assert per[0] == 3072 and per[-1] == 3072 * 300                  # step x tokens per step
    assert browser.eval(f"{loss}.u.scales.x.max") == pytest.approx(tokens_seen(400), rel=1e-6)
    assert "tokens" in browser.eval(f"{loss}.readout.textContent")

    # Zoom in token units: each run fetches the steps inside, drawn at their tokens.
    lo, hi = tokens_seen(250), tokens_seen(260)
    browser.eval(f"GR.zoomAll([{lo}, {hi}])")
    browser.wait_for(f"{loss}.u.scales.x.min === {lo} && {loss}.raw['tok|train/loss'][0].length < 40", timeout=10)
    zx = browser.eval(f"{loss}.raw['tok|train/loss'][0]")
    assert [tokens_seen(s) for s in range(249, 262)] == zx
    assert browser.eval("location.hash") == f"#start={int(lo)}&end={int(hi)}&x=tokens"

    # Live: a new step and its tokens arrive; the point is placed at its tokens.
    browser.eval("GR.zoomAll(null)")
    browser.wait_for(f"{loss}.raw['tok|train/loss'][0].length > 300", timeout=10)
    with StoreWriter(lab / "tok") as w:
        w.log(401, {"train/loss": 3.0, "data/tokens_seen": tokens_seen(401)})
    browser.wait_for(f"{loss}.raw['tok|train/loss'][0].includes({tokens_seen(401)})", timeout=5)

    # FLOPs: tokens x FLOPs per token; the switch puts the axis in the hash.
    browser.eval("document.querySelector('#xaxis button[data-x=flops]').click()")
    flops = CHART.format(title="Loss by FLOPs")
    browser.wait_for(f"GR.ready && {flops} && {flops}.raw['tok|train/loss']", timeout=10)
    assert browser.eval("location.hash") == "#x=flops"
    fx = browser.eval(f"{flops}.raw['tok|train/loss'][0]")
    assert fx[0] == pytest.approx(tokens_seen(1) * fpt) and fx[-1] == pytest.approx(tokens_seen(401) * fpt)
    assert browser.eval(f"{flops}.raw['perstep|train/loss'][0].slice(-1)[0]") == pytest.approx(3072 * 300 * fpt)
    # FLOPs run to 1e20 and more: ticks and readouts in T up to 1e15 (900B, 1T, 1.1T read on one
    # axis), then in powers of ten, never 20-digit numbers.
    assert browser.eval(f"GR.ticks({flops}.u, [9e11, 1e12, 2.5e12, 1e15, 3.25e20], 0, 50, 5e11)") == \
        ["900B", "1T", "2.5T", "1e15", "3.25e20"]
    assert browser.eval("GR.fmt(2.4234e18)") == "2.42e18"
    # A permalink in FLOPs units reopens the same view; a mark is kept in those units.
    view = f"#start={fx[100]}&end={fx[200]}&point={fx[150]}&x=flops"
    fresh(browser, f"{server.url}/compare?run=tok&run=perstep{view}")
    browser.wait_for(f"{flops} && {flops}.u.scales.x.min === {fx[100]}", timeout=10)
    assert browser.eval("GR.mark") == pytest.approx(fx[150])
    assert "(marked)" in browser.eval(f"{flops}.readout.textContent")
    browser.eval("document.querySelector('#xaxis button[data-x=step]').click()")
    browser.wait_for(f"GR.ready && {CHART.format(title='Loss')} && !location.hash.includes('x=')", timeout=10)
    assert browser.eval("GR.zoom") is None and browser.eval("GR.mark") is None


def test_published_site_keeps_permalinks_and_compute_axes(lab, browser, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    loss = CHART.format(title="Loss")
    with StaticSiteServer(site) as url:
        fresh(browser, f"{url}/runs/hero/index.html#chart=train/loss&start={SPIKE - 5}&end={SPIKE + 5}&point={SPIKE}")
        browser.wait_for(f"{loss}.u.scales.x.min === {SPIKE - 5} && {loss}.marked && {loss}.marked.value > 7", timeout=10)
        assert browser.eval("GR.source.live") is False and browser.eval("GR.mark") == SPIKE
        browser.eval("GR.zoomAll([100, 200])")
        assert browser.eval("location.hash") == f"#chart=train%2Floss&start=100&end=200&point={SPIKE}"
        tokens = CHART.format(title="Loss by tokens")
        fresh(browser, f"{url}/compare.html?run=tok&run=plain#x=tokens")
        browser.wait_for(f"{tokens} && {tokens}.raw['tok|train/loss']", timeout=10)
        xs = browser.eval(f"{tokens}.raw['tok|train/loss'][0]")
        assert xs[0] == tokens_seen(1) and xs[-1] == tokens_seen(401)
        assert "plain" in browser.eval("document.getElementById('axis-note').textContent")
