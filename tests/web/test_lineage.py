"""The run page's Lineage and Samples panels, on the live dashboard and the published site (headless
Chromium): the base run linked when the pages show it (its path otherwise, "a private run" when it is
hidden), the fixed prompts' answers per checkpoint with a step picker, newest first, model output
shown as text (never HTML) and redacted like any journal text."""

from __future__ import annotations

import shutil

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.data import run_meta
from glassroom.web.publish import publish
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path, write_run

HOSTILE = "<img src=x onerror='window.pwned = 1'><b>bold?</b> export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123"
PROMPTS = ["What does ls do?", "Define: ephemeral"]
SAMPLES = {0: ["the the the", "of of"], 100: ["lists files", HOSTILE], 200: ["ls lists directory contents", "lasting a short time"]}


def write_lineage(run_dir, base, **extra):
    lineage = {"base": str(base), "base_step": 200, "base_kind": "run", "task": "sft", "data": "lab/data/chat", **extra}
    with StoreWriter(run_dir) as w:
        w.set_artifact("lineage", lineage)
    return lineage


def write_samples(run_dir, samples=SAMPLES):
    with StoreWriter(run_dir) as w:
        for step, texts in samples.items():
            w.event("samples", f"samples at step {step}", step,
                    {"samples": [{"prompt": p, "text": t} for p, t in zip(PROMPTS, texts)]})


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "base", steps=200, moe_layers=(), state="finished")
    write_run(root / "sft", steps=200, moe_layers=(), state="finished", seed=1)
    write_lineage(root / "sft", (root / "base").resolve())
    write_samples(root / "sft")
    return root


def test_lineage_links_a_known_run_and_keeps_other_paths(lab, tmp_path, monkeypatch):
    meta = run_meta("sft", lab / "sft", root=lab)
    lin = meta["artifacts"]["lineage"]
    assert lin["base_run"] == "base" and lin["base_step"] == 200 and lin["task"] == "sft"
    assert run_meta("base", lab / "base", root=lab)["artifacts"].get("lineage") is None
    # A relative init.from (as given on the command line of `glassroom train`) is found too.
    copy = shutil.copytree(lab, tmp_path / "lab")
    write_lineage(copy / "sft", "lab/base")
    monkeypatch.chdir(tmp_path)
    assert run_meta("sft", copy / "sft", root=copy)["artifacts"]["lineage"]["base_run"] == "base"
    monkeypatch.chdir(copy)   # relative to the served folder's parent, whatever the current folder
    assert run_meta("sft", copy / "sft", root=copy)["artifacts"]["lineage"]["base_run"] == "base"
    # A Hugging Face folder (not a run the pages show): its path, no link.
    write_lineage(copy / "sft", "/models/SmolLM2-135M", base_kind="hf", base_step=None)
    lin = run_meta("sft", copy / "sft", root=copy)["artifacts"]["lineage"]
    assert lin["base_run"] is None and lin["base"] == "/models/SmolLM2-135M"


def test_a_private_base_is_not_named_on_public_pages(lab, tmp_path):
    copy = shutil.copytree(lab, tmp_path / "lab")
    with StoreWriter(copy / "base") as w:
        w.set_artifact("visibility", {"private": True})
    write_lineage(copy / "sft", (copy / "base").resolve(), data="https://user:pa55word@example.com/chat")
    public = run_meta("sft", copy / "sft", root=copy, public=True)["artifacts"]["lineage"]
    assert public["base"] == "a private run" and public["base_run"] is None
    assert "pa55word" not in public["data"]   # redacted like every other text on the page
    assert run_meta("sft", copy / "sft", root=copy)["artifacts"]["lineage"]["base_run"] == "base"   # local: linked
    site = tmp_path / "site"
    publish(copy, site)
    text = "".join(p.read_text(errors="ignore") for p in site.rglob("*.json"))
    assert str((copy / "base").resolve()) not in text and "pa55word" not in text


ROWS = "[...document.querySelectorAll('#samples-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))"


def check_panels(browser, base_href: str) -> None:
    assert browser.eval("document.getElementById('lineage').hidden") is False
    assert browser.eval("document.querySelector('#lineage-base a').textContent") == "base"
    assert browser.eval("document.querySelector('#lineage-base a').getAttribute('href')") == base_href
    assert browser.eval("document.getElementById('lineage-meta').textContent") == "a glassroom run · step 200"
    assert browser.eval("document.getElementById('lineage-task').textContent") == "task sft · data lab/data/chat"
    assert browser.eval("document.getElementById('samples').hidden") is False
    options = browser.eval("[...document.querySelectorAll('#samples-step option')].map(o => o.textContent)")
    assert options == ["newest (step 200)", "step 200", "step 100", "step 0", "all steps"]
    assert browser.eval(ROWS) == [["200", PROMPTS[0], SAMPLES[200][0]], ["200", PROMPTS[1], SAMPLES[200][1]]]
    browser.eval("(() => { const s = document.getElementById('samples-step'); s.value = '100'; s.onchange(); })()")
    rows = browser.eval(ROWS)
    assert [r[0] for r in rows] == ["100", "100"] and rows[0][2] == "lists files"
    assert rows[1][2].startswith("<img src=x onerror='window.pwned = 1'><b>bold?</b>")   # shown as text
    assert "hf_abcdefghij" not in rows[1][2]   # redacted like any journal text
    assert browser.eval("document.querySelectorAll('#samples-table img, #samples-table b').length") == 0
    assert browser.eval("window.pwned === undefined")
    browser.eval("(() => { const s = document.getElementById('samples-step'); s.value = 'all'; s.onchange(); })()")
    assert [r[0] for r in browser.eval(ROWS)] == ["200", "200", "100", "100", "0", "0"]   # newest first


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_panels_live_and_published(lab, tmp_path):
    lab = shutil.copytree(lab, tmp_path / "lab")
    write_lineage(lab / "sft", (lab / "base").resolve())   # the copy's own base
    site = tmp_path / "site"
    publish(lab, site)
    assert "hf_abcdefghij" not in "".join(p.read_text(errors="ignore") for p in site.rglob("*") if p.is_file())
    with Chromium(width=1280, height=900) as browser:
        with Server(lab) as server:
            browser.navigate(f"{server.url}/runs/sft")
            check_panels(browser, "/runs/base")
            browser.eval("(() => { const s = document.getElementById('samples-step'); s.value = 'newest'; s.onchange(); })()")
            write_samples(lab / "sft", {300: ["ls: list directory contents", "short-lived"]})   # a new checkpoint, live
            browser.wait_for("document.querySelector('#samples-table tbody td').textContent === '300'", timeout=10)
            assert browser.eval(ROWS)[1] == ["300", PROMPTS[1], "short-lived"]
            browser.navigate(f"{server.url}/runs/base")   # a pretraining run without either: both hidden
            assert browser.eval("document.getElementById('lineage').hidden && document.getElementById('samples').hidden")
        with StaticSiteServer(site) as url:
            browser.navigate(f"{url}/runs/sft/index.html")
            check_panels(browser, "../../runs/base/index.html")
