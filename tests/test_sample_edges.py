"""`glassroom sample` and generate() at the edges of their options: a temperature or top-p too small
for float32, seeds outside the generator's range, a prompt that is not UTF-8."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glassroom.cli import main
from glassroom.errors import GlassroomError
from glassroom.generate import generate, pick_next
from glassroom.model.config import ModelConfig
from glassroom.model.transformer import build_model

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=32)


@pytest.mark.parametrize("temperature", [1e-46, 5e-324])
def test_a_temperature_below_float32s_smallest_number_is_greedy_not_a_crash(temperature):
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, -1.0, 0.0, 4.0]])
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(pick_next(logits, temperature, 1.0, gen), torch.tensor([1, 0]))
    assert torch.equal(pick_next(logits, temperature, 0.5, gen), torch.tensor([1, 0]))


@pytest.mark.parametrize("top_p", [1e-300, 1e-50])
def test_a_top_p_that_rounds_to_zero_in_float32_keeps_the_most_likely_token(top_p):
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9]] * 3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        assert torch.equal(pick_next(logits, 1.0, top_p, gen), torch.tensor([1, 1, 1]))


def test_seeds_outside_the_generators_range_are_refused_and_the_largest_works():
    model = build_model(CFG, seed=0)
    for seed in (-1, 2**64):
        with pytest.raises(GlassroomError, match=r"--seed: must be between 0 and 2\*\*64 - 1"):
            generate(model, [[1, 2]], 3, temperature=1.0, seed=seed)
    [a] = generate(model, [[1, 2]], 3, temperature=1.0, seed=2**64 - 1)
    [b] = generate(model, [[1, 2]], 3, temperature=1.0, seed=2**64 - 1)
    assert a.new_ids == b.new_ids


@pytest.mark.parametrize("argv, message", [
    (["--prompt", "a\udcffb"], "--prompt: not valid UTF-8 text (position 1)"),  # argv of the bytes a\xffb
    (["--prompt", "x", "--seed", "-1"], "--seed: must be between 0 and 2**64 - 1, got -1"),
    (["--prompt", "x", "--seed", str(2**70)], "--seed: must be between 0 and 2**64 - 1"),
])
def test_a_prompt_that_is_not_utf8_and_a_seed_out_of_range_are_one_line(tmp_path, capsys, argv, message):
    code = main(["sample", str(tmp_path), *argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and message in captured.err


def test_generate_with_a_sliding_window_moe_past_its_window_equals_the_full_forward():
    from glassroom.model.config import MoEConfig

    cfg = dataclasses.replace(CFG, n_layers=4, sliding_window=3, global_every=2, max_seq_len=40,
                              moe=MoEConfig(n_experts=4, top_k=2, d_expert=16, router="softmax"))
    model = build_model(cfg, seed=1).eval()
    [out] = generate(model, [[5, 6, 7]], 30)
    ids = [5, 6, 7] + out.new_ids
    with torch.no_grad():
        full = model(torch.tensor([ids[:-1]])).logits[0]
    assert full[2:].argmax(-1).tolist() == out.new_ids
