"""A GLM-4-MoE folder with use_qk_norm: glassroom reads it as a sigmoid MoE with qk_norm, and export
writes that as dots.llm1 with the same tensors and the same logits (transformers' Glm4Moe with
QK-norm and Dots1 compute the same); `glassroom train` with it as init.from says so in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from own_tasks_helpers import stdlib_text
from train_helpers import TINY

from glassroom.config import apply_overrides
from glassroom.data.tokenizer import save_tokenizer, train_tokenizer
from glassroom.hf.architectures import import_note
from glassroom.hf.export import write_folder
from glassroom.hf.load import model_section, read_hf_config, read_hf_tensors
from glassroom.model.config import model_config_from_mapping
from glassroom.model.transformer import build_model


@pytest.fixture(scope="module")
def glm_folder(tmp_path_factory):
    """(a GLM-4-MoE folder with use_qk_norm, the dots.llm1 folder glassroom exported it from)."""
    root = tmp_path_factory.mktemp("glm4")
    tok = train_tokenizer([stdlib_text("textwrap.py", 20_000)], 300)
    save_tokenizer(tok, root / "tokenizer.json")
    raw = apply_overrides(yaml.safe_load(TINY.read_text()), [f"model.vocab_size={tok.get_vocab_size()}",
                                                              "model.qk_norm=true"])
    state = build_model(model_config_from_mapping({"model": raw["model"]}), seed=0).state_dict()
    noise = torch.Generator().manual_seed(1)
    for name in state:  # norms and router biases away from their initial 1 and 0
        if name.endswith("router_bias") or "norm" in name:
            state[name] = state[name] + 0.1 * torch.randn(state[name].shape, generator=noise)
    dots = write_folder(root / "dots", raw["model"], state, root / "tokenizer.json")
    glm = root / "glm"
    shutil.copytree(dots, glm)
    config = {k: v for k, v in read_hf_config(dots).items() if k not in ("sliding_window", "max_window_layers", "layer_types")}
    config.update(model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"], use_qk_norm=True,
                  partial_rotary_factor=1.0, num_nextn_predict_layers=0,
                  rope_parameters={**config["rope_parameters"], "partial_rotary_factor": 1.0})
    (glm / "config.json").write_text(json.dumps(config, indent=2))
    return glm, dots


@pytest.mark.slow  # loads both folders with transformers
def test_a_glm4_moe_with_qk_norm_is_imported_and_exported_as_dots1_with_the_same_tensors_and_logits(glm_folder, tmp_path):
    from transformers import AutoModelForCausalLM

    import glassroom

    glm, dots = glm_folder
    assert read_hf_config(dots)["model_type"] == "dots1"
    ids = torch.tensor([[5, 17, 42, 99, 7, 250, 3, 64]])
    logits = {}
    for name, folder in (("glm", glm), ("dots", dots)):
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True).eval()
        assert type(model).__name__ == {"glm": "Glm4MoeForCausalLM", "dots": "Dots1ForCausalLM"}[name]
        with torch.no_grad():
            logits[name] = model(ids).logits
    assert torch.equal(logits["glm"], logits["dots"])
    ours, _ = glassroom.load(glm)
    with torch.no_grad():
        assert (ours(ids).logits - logits["glm"]).abs().max() < 1e-4
    mapping = model_section(glm)
    assert mapping["qk_norm"] is True and mapping["moe"]["router"] == "sigmoid"
    again = write_folder(tmp_path / "again", mapping, ours.state_dict(), glm / "tokenizer.json")
    assert read_hf_config(again)["model_type"] == "dots1"
    before, after = read_hf_tensors(glm), read_hf_tensors(again)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_the_import_says_it_in_one_line(glm_folder, capsys):
    from glassroom.commands.train import _import_note

    glm, dots = glm_folder
    note = import_note(read_hf_config(glm), str(glm))
    assert note.startswith(f"note: {glm}: GLM-4-MoE with use_qk_norm") and "dots.llm1 (Dots1ForCausalLM)" in note
    assert import_note(read_hf_config(dots), str(dots)) is None
    assert import_note({**read_hf_config(glm), "use_qk_norm": False}, str(glm)) is None
    _import_note(glm)
    assert capsys.readouterr().err.strip().splitlines() == [note]
