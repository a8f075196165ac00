"""Tests of glassroom/train/samples.py."""

from __future__ import annotations

import pytest
import torch
import yaml

from glassroom.data.chat import ChatTemplate, IM_END
from glassroom.data.tokenizer import EOS_TOKEN, train_tokenizer
from glassroom.errors import GlassroomError
from glassroom.generate import generate
from glassroom.model.config import model_config_from_mapping
from glassroom.model.transformer import build_model
from glassroom.train.samples import CheckpointSamples

from chat_helpers import docstring_answers
from hf_helpers import OFFLINE  # noqa: F401 (sets the offline variables)
from train_helpers import TINY



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


def test_checkpoint_samples_answer_chat_prompts_greedily_and_stop_at_im_end(chat_tok):
    template = ChatTemplate.for_tokenizer(chat_tok)
    model = tiny_model(chat_tok.get_vocab_size()).train()
    prompts = [QUESTION, "Define: ephemeral", "What does textwrap.dedent do?"]
    sampler = CheckpointSamples(prompts, chat_tok, template.to_dict(), max_tokens=10)   # the manifest's form
    assert sampler.ids[0] == template.prompt([{"role": "user", "content": QUESTION}]).tolist()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    first = sampler.run(model, torch.device("cpu"), 100)
    assert model.training   # put back in train mode
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    assert first == sampler.run(model, "cpu", 100)   # deterministic
    assert [s["prompt"] for s in first] == prompts
    for prompt, sample in zip(prompts, first):   # each its own conversation, answered alone
        ids = template.prompt([{"role": "user", "content": prompt}]).tolist()
        [alone] = generate(model, [ids], 10)
        assert sample["text"] == chat_tok.decode(alone.new_ids, skip_special_tokens=False)
        assert sample["stop"] == "max_tokens" and sample["new_tokens"] == 10
    hook = StopAfter(model, template.im_end_id, after=2)
    stopped = sampler.run(model.eval(), "cpu", 200)
    hook.handle.remove()
    assert not model.training   # eval stays eval
    [alone] = generate(model, [sampler.ids[0]], 10)
    assert stopped[0]["text"] == chat_tok.decode(alone.new_ids[:2], skip_special_tokens=False)   # no <|im_end|>
    assert stopped[0]["stop"] == "eos" and IM_END not in stopped[0]["text"]


def test_checkpoint_samples_of_a_pretraining_run_continue_the_text():
    texts = [a for _, a in docstring_answers()]
    tok = train_tokenizer(texts, 400)
    model = tiny_model(tok.get_vocab_size())
    sampler = CheckpointSamples(["Return a", ""], tok, None, max_tokens=8)
    out = sampler.run(model, "cpu", 0)
    eos = tok.token_to_id(EOS_TOKEN)
    assert sampler.ids[1] == [eos]   # an empty prompt starts a new document
    for ids, sample in zip(sampler.ids, out):
        [alone] = generate(model, [ids], 8, eos_id=eos)
        new = alone.new_ids[:-1] if alone.stop_reason == "eos" else alone.new_ids
        assert sample["text"] == tok.decode(new, skip_special_tokens=False)
    assert sampler.ids[0] == tok.encode("Return a", add_special_tokens=False).ids


def test_checkpoint_samples_from_a_config_and_its_mistakes(chat_tok):
    from types import SimpleNamespace

    cfg = SimpleNamespace(observe=SimpleNamespace(sample_prompts=[QUESTION], sample_tokens=5),
                          model=SimpleNamespace(max_seq_len=128))
    sampler = CheckpointSamples(cfg, chat_tok, ChatTemplate.for_tokenizer(chat_tok))
    assert sampler.prompts == [QUESTION] and sampler.max_tokens == 5
    assert CheckpointSamples(SimpleNamespace(observe=SimpleNamespace(sample_prompts=[])), chat_tok).run(None) == []
    long = SimpleNamespace(observe=SimpleNamespace(sample_prompts=["ok", "word " * 200], sample_tokens=5),
                           model=SimpleNamespace(max_seq_len=64))
    with pytest.raises(GlassroomError, match=r"^observe\.sample_prompts\[1\]: \d+ tokens leave no room"):
        CheckpointSamples(long, chat_tok)
    with pytest.raises(GlassroomError, match=r"^observe\.sample_tokens: must be"):
        CheckpointSamples([QUESTION], chat_tok, max_tokens=0)
    with pytest.raises(GlassroomError, match=r"^observe\.sample_prompts\[0\]: expected text"):
        CheckpointSamples([3], chat_tok)
