"""Greedy `glassroom sample` equals transformers' `generate(do_sample=False)` on the exported folder,
token for token, for 64 new tokens: dense and MoE, with and without sliding-window layers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hf_helpers import ARCHS, export_folder, hf_model, real_text, train_tiny_run_here  # noqa: E402

from glassroom.commands.sample import sample  # noqa: E402


def _hf_greedy(model, ids, new, eos):
    """transformers' greedy continuation of ids; eos None: never stops early."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=eos, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             generation_config=config)
    return out[0, len(ids):].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_greedy_sample_equals_transformers_generate(arch, tiny_dataset, tmp_path):
    # 128 positions: the prompt and 64 new tokens run well past the sliding windows (16).
    run = train_tiny_run_here(tmp_path, arch, tiny_dataset, "model.max_seq_len=128")
    folder = export_folder(run, tmp_path / "export")
    model, hf_tok = hf_model(folder)
    prompt = real_text(120)
    ours = sample(run, prompt, max_new_tokens=64, ignore_eos=True)
    assert hf_tok(prompt, add_special_tokens=False)["input_ids"] == ours["prompt_tokens"]
    assert _hf_greedy(model, ours["prompt_tokens"], 64, None) == ours["new_tokens"]
    assert sample(folder, prompt, max_new_tokens=64, ignore_eos=True)["new_tokens"] == ours["new_tokens"]
    # With EOS: both stop at the same place (or neither does), after the same tokens.
    for text in ("", prompt[:40]):
        with_eos = sample(folder, text, max_new_tokens=48)
        assert _hf_greedy(model, with_eos["prompt_tokens"], 48, 0) == with_eos["new_tokens"], text
