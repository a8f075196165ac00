"""An export is remembered by its run: the store's `export` artifact and journal event, and a Model panel
with the card on the dashboard and the published site (as text: a card is never parsed as HTML)."""

from __future__ import annotations

import pytest

from glassroom.observe.store import StoreReader, StoreWriter
from glassroom.web.data import run_meta
from glassroom.web.publish import publish
from hf_helpers import export_folder, train_tiny_run_here
from web_helpers import Chromium, Server, StaticSiteServer, chromium_path, write_run


def test_export_writes_the_artifact_and_event_and_replaces_them(tiny_dataset, tmp_path):
    run = train_tiny_run_here(tmp_path, "llama", tiny_dataset)
    first = export_folder(run, tmp_path / "hf")
    second = export_folder(run, tmp_path / "hf-bf16", dtype="bf16")
    with StoreReader(run) as reader:
        art = reader.artifact("export")
        events = [e for e in reader.events() if e["kind"] == "export"]
    assert art["folder"] == str(second.resolve()) and art["dtype"] == "bf16"  # the newest export
    assert art["architecture"] == "LlamaForCausalLM" and art["step"] == 4
    assert art["card"] == (second / "README.md").read_text()
    assert [e["data"]["folder"] for e in events] == [str(first.resolve()), str(second.resolve())]
    meta = run_meta("llama", run)
    assert meta["artifacts"]["export"]["card"] == art["card"]


HOSTILE = "# card\n<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'> HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_run(root / "run", steps=200, moe_layers=(), state="finished")
    with StoreWriter(root / "run") as w:
        w.set_artifact("export", {"folder": "/models/run", "step": 200, "architecture": "LlamaForCausalLM",
                                  "dtype": "fp32", "created_iso": "2026-11-30T20:00:00Z", "card": HOSTILE})
    write_run(root / "plain", steps=200, moe_layers=(), state="finished", seed=1)
    return root


def check_model_panel(browser) -> None:
    assert browser.eval("document.getElementById('model').hidden") is False
    assert browser.eval("document.getElementById('model-meta').textContent") == \
        "LlamaForCausalLM · step 200 · fp32 · exported 2026-11-30T20:00:00Z"
    card = browser.eval("document.getElementById('model-card').textContent")
    assert "<script>window.pwned = 1</script>" in card and "hf_abcdefghij" not in card  # text, redacted
    assert browser.eval("window.pwned === undefined")


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium not installed (scripts/install-system.sh)")
def test_model_panel_live_and_published(lab, tmp_path):
    site = tmp_path / "site"
    publish(lab, site)
    assert "hf_abcdefghij" not in "".join(p.read_text(errors="ignore") for p in site.rglob("*") if p.is_file())
    with Chromium(width=1280, height=900) as browser:
        with Server(lab) as server:
            browser.navigate(f"{server.url}/runs/run")
            check_model_panel(browser)
            browser.navigate(f"{server.url}/runs/plain")
            assert browser.eval("document.getElementById('model').hidden") is True
        with StaticSiteServer(site) as url:
            browser.navigate(f"{url}/runs/run/index.html")
            check_model_panel(browser)


def test_a_run_keeps_its_tokenizer_when_the_dataset_changes(tiny_dataset, tmp_path):
    import shutil

    from tokenizers import Tokenizer

    from glassroom.data.tokenizer import train_tokenizer

    dataset = shutil.copytree(tiny_dataset, tmp_path / "data")
    run = train_tiny_run_here(tmp_path, "llama", dataset)
    assert (run / "tokenizer.json").read_bytes() == (dataset / "tokenizer.json").read_bytes()
    # the dataset is rebuilt with another tokenizer: the export still carries the one trained with
    train_tokenizer(["a completely different corpus " * 50], vocab_size=300).save(str(dataset / "tokenizer.json"))
    folder = export_folder(run, tmp_path / "hf")
    assert (folder / "tokenizer.json").read_bytes() == (run / "tokenizer.json").read_bytes()
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size() > 300
