"""Tests of glassroom/hf/card.py."""

from __future__ import annotations

import pytest



DENSE = {"vocab_size": 2048, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128, "max_seq_len": 64}


HOSTILE_NAME = "evil<img src=x onerror=alert(1)>\n\nOwned | x ** [link](javascript:alert(1))\n==="


@pytest.mark.filterwarnings("ignore")
def test_card_shows_a_hostile_run_name_and_init_path_as_text(tmp_path):
    from glassroom.hf.card import model_card

    run = tmp_path / HOSTILE_NAME
    run.mkdir()
    config = {"model": DENSE, "data": {"path": str(tmp_path)},
              "init": {"from": "/models/x\n## Fake section <script>alert(1)</script>", "step": None},
              "observe": {"wandb_project": "p ```` x"}}
    card = model_card(run, config, 4, "LlamaForCausalLM", {})
    lines = card.splitlines()
    heading = [line for line in lines if line.startswith("# ")]
    assert len(heading) == 1 and "Owned" in heading[0]  # the name's newlines do not start new lines
    assert not any(line.startswith(("Owned", "===", "## Fake")) for line in lines)
    prose = card[:card.index("## Config")]  # the config itself is shown inside a fenced code block
    for raw in ("<img", "<script", "](javascript", "| x"):  # HTML, a link, a table cell: escaped
        assert raw not in prose.replace("\\" + raw[0], ""), raw
    assert "\\<img src=x onerror=alert(1)\\>" in card  # the same text, shown
    fence = next(line for line in lines if line.endswith("yaml"))[:-len("yaml")]
    assert set(fence) == {"`"} and len(fence) > 4 and lines[-1] == fence  # longer than any backtick run inside


@pytest.mark.filterwarnings("ignore")
def test_card_says_the_step_each_value_was_measured_at(tmp_path):
    from glassroom.hf.card import model_card
    from glassroom.observe.store import StoreWriter

    run = tmp_path / "run"
    run.mkdir()
    with StoreWriter(run) as writer:
        writer.log(3, {"eval/prose/bpb": 2.5, "downstream/glassroom_mc/acc": 0.5})
        writer.log(6, {"eval/prose/bpb": 2.0})  # after the exported step: not on the card
    card = model_card(run, {"model": DENSE, "data": {"path": str(tmp_path)}}, 4, "LlamaForCausalLM", {})
    assert "last evaluation at or before step 4" in card and "| prose | 2.5000 | 3 |" in card
    assert "| glassroom_mc/acc | 0.5000 | 3 |" in card and "2.0000" not in card
