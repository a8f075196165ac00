"""Post-training on the dashboard and the published site, attacked: lineage bases that are not paths
here (`~nosuchuser`, a NUL byte), a run naming itself as its base, and samples events that an old
or foreign version (or a hostile model) wrote: malformed data, markup, `</script>`, U+2028, a right-
to-left override, a 1 MB answer, secrets in prompts and answers, thousands of checkpoints. The page
renders, the Samples panel says what it could not show, nothing throws, the site is redacted."""

from __future__ import annotations

import os
import shutil

import pytest

from glassroom.observe.store import StoreWriter
from glassroom.web.data import run_meta
from glassroom.web.publish import publish
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path, write_run

OPENAI = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
HOSTILE = "</script><script>window.pwned=1</script>\u2028\u2029\u202egnp.exe <img src=x onerror=window.pwned=2>"
BIG = "word " * 200_000   # a 1 MB answer


def lineage(run_dir, base, **extra):
    with StoreWriter(run_dir) as w:
        w.set_artifact("lineage", {"base": base, "base_step": 10, "base_kind": "run", "task": "sft", **extra})


@pytest.fixture()
def lab(tmp_path):
    root = tmp_path / "lab"
    write_run(root / "base", steps=20, moe_layers=(), state="finished")
    write_run(root / "sft", steps=20, moe_layers=(), state="finished", seed=1)
    return root


@pytest.mark.parametrize("base", ["~nosuchuser_glassroom/runs/base", "runs/a\x00b"])
def test_a_base_that_is_no_path_here_still_renders_and_publishes(lab, tmp_path, base):
    # Before: Path.expanduser raised RuntimeError, Path.resolve ValueError; the page and publish failed.
    lineage(lab / "sft", base)
    for public in (False, True):
        lin = run_meta("sft", lab / "sft", root=lab, public=public)["artifacts"]["lineage"]
        assert lin["base_run"] is None and lin["base"] == base
    publish(lab, tmp_path / "site")
    assert (tmp_path / "site" / "runs" / "sft" / "index.html").is_file()


def test_a_run_naming_itself_as_its_base_is_not_linked(lab):
    for base in (lab / "sft", lab / "sft" / "checkpoints"):
        lineage(lab / "sft", str(base.resolve()))
        assert run_meta("sft", lab / "sft", root=lab)["artifacts"]["lineage"]["base_run"] is None
    lineage(lab / "sft", str((lab / "base").resolve()))   # a real base still links
    assert run_meta("sft", lab / "sft", root=lab)["artifacts"]["lineage"]["base_run"] == "base"


def write_hostile_samples(run_dir, checkpoints: int = 2000) -> None:
    with StoreWriter(run_dir, flush_rows=100_000, flush_seconds=3600) as w:
        for step in range(checkpoints):   # thousands of checkpoints
            w.event("samples", f"samples at step {step}", step, {"samples": [{"prompt": "p", "text": f"a{step}"}]})
        w.event("samples", "old shape", 5000, {"samples": "not a list"})
        w.event("samples", "no data", 5001, None)
        w.event("samples", "no step", None, {"samples": [{"prompt": "p", "text": "t"}]})
        w.event("samples", "hostile", 6000, {"samples": [
            {"prompt": f"my key is {OPENAI}", "text": HOSTILE + f" token {GITHUB}"},
            {"prompt": "big", "text": BIG},
            {"prompt": 7, "text": 8.5},   # numbers, from a foreign writer
            {"text": "no prompt"},
            "a bare string",
            None]})


PANEL = "[...document.querySelectorAll('#samples-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))"


def check_page(browser) -> None:
    assert browser.eval("document.getElementById('samples').hidden") is False
    rows = browser.eval(PANEL)
    assert rows[0][0] == "6000" and len(rows) == 6
    assert rows[0][1] == "my key is <redacted>" and OPENAI not in rows[0][2] and GITHUB not in rows[0][2]
    assert rows[0][2].startswith("</script><script>window.pwned=1</script>\u2028\u2029\u202egnp.exe")   # as text
    assert len(rows[1][2]) < 2100 and rows[1][2].endswith("(998,000 more characters)")
    assert rows[2][1:] == ["7", "8.5"] and rows[3][1:] == ["?", "no prompt"] and rows[4][1:] == ["?", "?"]
    note = browser.eval("document.getElementById('samples-note').textContent")
    assert note.startswith("3 samples events not shown (at step 5000, 5001, ?)"), note
    assert browser.eval("document.querySelectorAll('#samples-table img, #samples-table script').length") == 0
    assert browser.eval("window.pwned === undefined")
    assert browser.eval("document.querySelectorAll('#samples-step option').length") == 2003
    assert browser.eval("document.getElementById('lineage-task').textContent") == 'task {"name":"sft"} · data 12'
    assert browser.eval("document.getElementById('error').hidden") is True
    assert not [c for c in browser.console if "exceptionDetails" in c], browser.console


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_hostile_samples_render_live_and_published(lab, tmp_path):
    write_hostile_samples(lab / "sft")
    lineage(lab / "sft", "/models/SmolLM2-135M", task={"name": "sft"}, data=12)   # foreign value types
    site = tmp_path / "site"
    publish(lab, site)
    published = "".join(p.read_text(errors="ignore") for p in site.rglob("*") if p.is_file())
    assert OPENAI not in published and GITHUB not in published   # redacted like journal text
    with Chromium(width=1280, height=900) as browser:
        with Server(lab) as server:
            browser.navigate(f"{server.url}/runs/sft", timeout=60)
            check_page(browser)
        with StaticSiteServer(site) as url:
            browser.console.clear()
            browser.navigate(f"{url}/runs/sft/index.html", timeout=60)
            check_page(browser)
    shutil.rmtree(site)


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_only_malformed_samples_show_the_note_not_a_blank_panel(lab):
    with StoreWriter(lab / "sft") as w:
        w.event("samples", "old shape", 10, {"answers": ["x"]})
    with Chromium(width=1280, height=900) as browser, Server(lab) as server:
        browser.navigate(f"{server.url}/runs/sft")
        assert browser.eval("document.getElementById('samples').hidden") is False
        assert browser.eval("document.getElementById('samples-note').textContent").startswith("1 samples event not shown (at step 10)")
        assert browser.eval("document.querySelectorAll('#samples-table tr').length") == 0
        assert not [c for c in browser.console if "exceptionDetails" in c], browser.console


@pytest.mark.slow
def test_a_private_base_is_named_nowhere_on_the_public_pages(tiny_dataset, tmp_path):
    """A real SFT run from a base marked private: the Lineage panel said "a private run", but the
    start event ("sft from <path>"), its data and the config's init.from published the path."""
    import subprocess
    import sys

    from glassroom.cli import main
    from glassroom.web.data import Cursor
    from sft_helpers import build_chat, pretrain_base, sft_config

    lab = tmp_path / "lab"
    base = pretrain_base(tiny_dataset, lab / "alice-private-base")
    chat = build_chat(tmp_path / "chat", base / "tokenizer.json", n=40)
    config = sft_config(tmp_path / "sft.yaml", base, chat, steps=1, warmup_steps=0, checkpoint_every=1, eval_every=1, eval_sequences=2)
    result = subprocess.run([sys.executable, "-m", "glassroom", "train", str(config), "--out", str(lab / "sft"), "--quiet"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    assert main(["note", str(base), "--private-run"]) == 0
    private = str(base.resolve())
    local = run_meta("sft", lab / "sft", root=lab)   # the loopback dashboard: the owner sees the path
    assert private in local["config_text"] and local["artifacts"]["lineage"]["base_run"] == "alice-private-base"
    public = run_meta("sft", lab / "sft", root=lab, public=True)
    assert "alice-private-base" not in str(public) and "from: a private run" in public["config_text"]
    assert any("sft from a private run at step 12" in e["text"] for e in public["events"])
    publish(lab, tmp_path / "site")
    assert "alice-private-base" not in "".join(p.read_text(errors="ignore") for p in (tmp_path / "site").rglob("*") if p.is_file())
    # A public server's live stream: new journal text naming the base is scrubbed too.
    cursor = Cursor("sft", lab / "sft", public=True, root=lab)
    try:
        with StoreWriter(lab / "sft") as w:
            w.event("note", f"compare with {private}/checkpoints at step 12", 1)
        assert cursor.poll()["events"][0]["text"] == "compare with a private run/checkpoints at step 12"
    finally:
        cursor.close()
