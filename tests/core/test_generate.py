"""Generation (glassroom/generate.py) and `glassroom sample`: greedy equals a plain argmax loop over
the full forward, sampling is seeded and honours top-p, EOS stops, bad input is one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glassroom.errors import GlassroomError
from glassroom.generate import generate, pick_next
from glassroom.model.config import MoEConfig, ModelConfig, model_config_from_mapping
from glassroom.model.transformer import build_model
import yaml

from glassroom.data.chat import ChatTemplate
from glassroom.data.tokenizer import train_tokenizer

from chat_helpers import docstring_answers
from hf_helpers import OFFLINE  # noqa: F401 (sets the offline variables)
from train_helpers import TINY

SLIDING = ModelConfig(vocab_size=300, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64,
                      sliding_window=5, global_every=2)
MOE = dataclasses.replace(SLIDING, qk_norm=True, sliding_window=None, global_every=None,
                          moe=MoEConfig(n_experts=4, top_k=2, d_expert=32, n_shared_experts=1, first_dense_layers=1))


def _greedy_without_cache(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("cfg", [SLIDING, MOE], ids=["sliding", "moe"])
def test_greedy_equals_argmax_over_the_full_forward(cfg):
    model = build_model(cfg, seed=1).train()
    prompt = [5, 17, 9, 250, 3, 3, 41]
    [out] = generate(model, [prompt], max_new_tokens=40)
    assert model.training  # generation ran in eval mode and left the mode as it found it
    if cfg.moe is not None:  # in eval mode the routers count nothing toward the next optimizer step
        assert int(model.step_tokens_per_expert().sum()) == 0
    model.eval()
    assert out.new_ids == _greedy_without_cache(model, prompt, 40)
    assert out.stop_reason == "max_new_tokens" and out.prompt_ids == prompt


def test_prompts_of_different_lengths_in_one_call_equal_each_alone():
    model = build_model(SLIDING, seed=2)
    prompts = [[1, 2, 3], [7, 8, 9, 10, 11], [4, 5, 6], [200]]
    together = generate(model, prompts, max_new_tokens=12, temperature=0.0)
    for prompt, got in zip(prompts, together):
        assert got.new_ids == generate(model, [prompt], max_new_tokens=12)[0].new_ids


def test_eos_stops_and_is_kept_as_the_last_new_token():
    model = build_model(SLIDING, seed=3)
    free = generate(model, [[1, 2, 3]], max_new_tokens=20)[0].new_ids
    eos = free[5]
    first = free.index(eos)
    out = generate(model, [[1, 2, 3]], max_new_tokens=20, eos_id=eos)[0]
    assert out.new_ids == free[:first + 1] and out.stop_reason == "eos"
    # In a batch, the finished prompt stops there while the other goes on.
    other = [9, 9, 9]
    other_free = generate(model, [other], max_new_tokens=20)[0].new_ids
    both = generate(model, [[1, 2, 3], other], max_new_tokens=20, eos_id=eos)
    assert both[0].new_ids == out.new_ids
    assert both[1].new_ids == (other_free[:other_free.index(eos) + 1] if eos in other_free else other_free)


def test_sampling_is_seeded_and_differs_between_seeds():
    model = build_model(MOE, seed=4)
    runs = [generate(model, [[1, 2, 3]], 30, temperature=1.5, seed=s)[0].new_ids for s in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    # A tiny top-p keeps only the most likely token: greedy, whatever the temperature and seed.
    greedy = generate(model, [[1, 2, 3]], 30)[0].new_ids
    assert generate(model, [[1, 2, 3]], 30, temperature=2.0, top_p=1e-6, seed=7)[0].new_ids == greedy


def test_top_p_draws_only_from_the_nucleus_and_temperature_reshapes():
    # probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two, 0.85 the first three.
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3]])).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    drawn = pick_next(logits, 1.0, 0.7, gen)
    counts = torch.bincount(drawn, minlength=4).tolist()
    assert counts[0] == 0 and counts[2] == 0
    assert abs(counts[1] / 4000 - 0.5 / 0.8) < 0.03
    drawn = pick_next(logits, 1.0, 0.85, gen)
    assert torch.bincount(drawn, minlength=4)[0] == 0 and torch.bincount(drawn, minlength=4)[2] > 0
    # Plain sampling follows the probabilities; a low temperature sharpens them.
    drawn = pick_next(logits, 1.0, 1.0, gen)
    assert abs(float((drawn == 0).float().mean()) - 0.05) < 0.015
    cold = pick_next(logits, 0.25, 1.0, gen)
    assert float((cold == 1).float().mean()) > 0.85
    assert torch.equal(pick_next(logits[:2], 0.0, 0.5, None), torch.tensor([1, 1]))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "--max-new-tokens: must be 1 or more"),
    ({"temperature": -0.5}, "--temperature: must be 0"),
    ({"top_p": 0.0}, "--top-p: must be in (0, 1]"),
    ({"top_p": 1.5}, "--top-p: must be in (0, 1]"),
    ({"prompt": list(range(64))}, "leave no room in the model's max_seq_len of 64"),
    ({"prompt": list(range(40)), "max_new_tokens": 30}, "ask for at most 24"),
    ({"prompt": []}, "at least one token"),
])
def test_generation_options_are_checked(kwargs, message):
    model = build_model(SLIDING, seed=0)
    args = {"prompt": [1, 2], "max_new_tokens": 4, **kwargs}
    prompt = args.pop("prompt")
    with pytest.raises(GlassroomError) as info:
        generate(model, [prompt], **args)
    assert message in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------- the command




QUESTION = "What does json.dumps do?"


@pytest.fixture(scope="module")
def chat_tok():
    """A tokenizer trained on real docstrings, with the template tokens appended."""
    tok = train_tokenizer([a for _, a in docstring_answers()], 400)
    ChatTemplate.for_tokenizer(tok)
    return tok


def tiny_model_mapping(vocab: int) -> dict:
    from glassroom.config import apply_overrides

    raw = apply_overrides(yaml.safe_load(TINY.read_text()), ["model.moe=", f"model.vocab_size={vocab}",
                                                              "model.max_seq_len=128"])
    return raw["model"]


def tiny_model(vocab: int, seed: int = 0):
    return build_model(model_config_from_mapping({"model": tiny_model_mapping(vocab)}), seed=seed)


class StopAfter:
    """A forward hook on the model: from the `after`-th one-token (decode) forward on, `token` has the
    highest logit, so greedy writes it there (a planted stop)."""

    def __init__(self, model, token: int, after: int):
        self.token, self.after, self.calls = token, after, 0
        self.handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        if args[0].shape[1] == 1:
            self.calls += 1
            if self.calls >= self.after:
                output.logits[..., self.token] = output.logits.max() + 100.0
        return output


def test_generate_stops_at_any_of_several_stop_ids(chat_tok):
    template = ChatTemplate.for_tokenizer(chat_tok)
    model = tiny_model(chat_tok.get_vocab_size())
    prompt = template.prompt([{"role": "user", "content": QUESTION}]).tolist()
    [free] = generate(model, [prompt], 12)
    assert template.im_end_id not in free.new_ids and template.eos_id not in free.new_ids
    hook = StopAfter(model, template.im_end_id, after=3)
    [out] = generate(model, [prompt], 12, eos_id=sorted(template.stop_ids))
    hook.handle.remove()
    # two free tokens (the prefill's and the first decode's), then the planted <|im_end|>, kept last
    assert out.new_ids == free.new_ids[:3] + [template.im_end_id] and out.stop_reason == "eos"
    [single] = generate(model, [prompt], 12, eos_id=free.new_ids[1])   # one id still works
    assert single.new_ids == free.new_ids[:2] and single.stop_reason == "eos"




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
