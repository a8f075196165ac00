"""Sampling a chat model: generate() stopping at any of several ids, CheckpointSamples (the fixed
prompts answered at each checkpoint; glassroom/train/samples.py) and `glassroom sample --chat` on
Hugging Face folders (glassroom's template, a foreign one through transformers) and the refusals."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from chat_helpers import docstring_answers
from glassroom.cli import main
from glassroom.data.chat import IM_END, JINJA, ChatTemplate
from glassroom.data.tokenizer import EOS_TOKEN, save_tokenizer, train_tokenizer
from glassroom.errors import GlassroomError
from glassroom.generate import generate
from glassroom.model.config import model_config_from_mapping
from glassroom.model.transformer import build_model
from glassroom.train.samples import CheckpointSamples
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


# ------------------------------------------------------------------------------ generate()


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


# ------------------------------------------------------------------------------ CheckpointSamples


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


# ------------------------------------------------------------------------------ sample --chat


def write_hf_folder(out, tok, seed: int = 0, chat_template: str | None = None):
    """A glassroom model exported as a Hugging Face folder with `tok` (its chat_template written by
    export when tok has the template tokens; `chat_template` replaces it)."""
    from glassroom.hf.export import write_folder

    out.parent.mkdir(parents=True, exist_ok=True)
    tok_path = out.parent / f"{out.name}-tokenizer.json"
    save_tokenizer(tok, tok_path)
    mapping = tiny_model_mapping(tok.get_vocab_size())
    state = build_model(model_config_from_mapping({"model": mapping}), seed=seed).state_dict()
    folder = write_folder(out, mapping, state, tok_path)
    if chat_template is not None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] = chat_template
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def chat_folder(chat_tok, tmp_path_factory):
    return write_hf_folder(tmp_path_factory.mktemp("chat") / "hf", chat_tok)


def _cli(capsys, *argv):
    code = main(["sample", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sample_chat_applies_the_template_and_prints_the_answer_alone(chat_folder, chat_tok, capsys):
    import glassroom

    assert json.loads((chat_folder / "tokenizer_config.json").read_text())["chat_template"] == JINJA
    template = ChatTemplate.for_tokenizer(chat_tok)
    code, out, _ = _cli(capsys, chat_folder, "--chat", "--system", "Answer from the Python documentation.",
                        "--prompt", QUESTION, "--prompt", "Define: ephemeral", "--max-new-tokens", "12", "--json")
    assert code == 0
    first, second = [json.loads(line) for line in out.strip().splitlines()]
    system = {"role": "system", "content": "Answer from the Python documentation."}
    assert first["prompt_tokens"] == template.prompt([system, {"role": "user", "content": QUESTION}]).tolist()
    # each prompt is its own conversation: the second does not hold the first
    assert second["prompt_tokens"] == template.prompt([system, {"role": "user", "content": "Define: ephemeral"}]).tolist()
    assert first["chat"] is True and first["system"] == system["content"]
    model, tok = glassroom.load(chat_folder)
    [alone] = generate(model, [first["prompt_tokens"]], 12, eos_id=sorted(template.stop_ids))
    assert first["new_tokens"] == alone.new_ids
    code, text, _ = _cli(capsys, chat_folder, "--chat", "--prompt", QUESTION, "--max-new-tokens", "12")
    assert code == 0
    plain = template.prompt([{"role": "user", "content": QUESTION}]).tolist()
    [answer] = generate(model, [plain], 12, eos_id=sorted(template.stop_ids))
    new = answer.new_ids[:-1] if answer.stop_reason == "eos" else answer.new_ids
    assert text == tok.decode(new, skip_special_tokens=False) + "\n"   # the answer alone: no prompt, no template


def test_sample_chat_uses_a_foreign_template_through_transformers(chat_tok, tmp_path, capsys):
    from transformers import AutoTokenizer

    jinja = ("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
             "{% if add_generation_prompt %}### assistant:{% endif %}")
    folder = write_hf_folder(tmp_path / "hf", chat_tok, chat_template=jinja)
    code, out, _ = _cli(capsys, folder, "--chat", "--prompt", QUESTION, "--max-new-tokens", "4", "--json")
    assert code == 0
    theirs = AutoTokenizer.from_pretrained(str(folder)).apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert json.loads(out)["prompt_tokens"] == list(theirs)


def test_sample_chat_refuses_a_model_without_a_template(tmp_path, capsys):
    plain = train_tokenizer([a for _, a in docstring_answers()], 400)   # no template tokens
    folder = write_hf_folder(tmp_path / "base", plain)
    assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    code, out, err = _cli(capsys, folder, "--chat", "--prompt", QUESTION)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: --chat: {folder} has no chat template")
    code, out, err = _cli(capsys, folder, "--system", "be brief", "--prompt", QUESTION)
    assert code == 2 and err.startswith("error: --system: only with --chat") and err.count("\n") == 1


def test_sample_chat_on_a_pretraining_run_folder_is_refused(tiny_dataset, tmp_path, capsys):
    from train_helpers import run_train

    result = run_train(tmp_path / "run", tiny_dataset, "train.steps=2", "train.checkpoint_every=2", "model.moe=")
    assert result.returncode == 0, result.stderr
    code, out, err = _cli(capsys, tmp_path / "run", "--chat", "--prompt", QUESTION)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "has no chat template (its dataset manifest has no chat_template" in err
    code, out, _ = _cli(capsys, tmp_path / "run", "--prompt", "def ", "--prompt", "The", "--max-new-tokens", "3")
    assert code == 0 and out.startswith("def ") and "\n\nThe" in out   # several prompts without --chat


def test_an_sft_run_samples_what_sample_chat_prints_and_links_its_base(tiny_dataset, tmp_path, capsys):
    """End to end: a tiny base pretrained, tuned on real conversations with observe.sample_prompts;
    each checkpoint's `samples` event holds what `glassroom sample RUN --step N --chat` prints, the
    run folder's template comes from its dataset manifest, and its Lineage links the base run."""
    from glassroom.observe.store import StoreReader
    from glassroom.web.data import run_meta
    from sft_helpers import build_chat, pretrain_base, sft_config
    from train_helpers import run_train

    base = pretrain_base(tiny_dataset, tmp_path / "base")
    data = build_chat(tmp_path / "chat", base / "tokenizer.json", n=120)
    config = sft_config(tmp_path / "sft.yaml", base, data, steps=8, checkpoint_every=4, eval_every=4)
    result = run_train(tmp_path / "sft", data, config=config)
    assert result.returncode == 0, result.stderr
    with StoreReader(tmp_path / "sft") as reader:
        events = [e for e in reader.events() if e["kind"] == "samples"]
    assert [e["step"] for e in events] == [0, 4, 8]  # the base, then each checkpoint
    events = events[1:]  # step 0 has no checkpoint of its own to sample from (the base's is another folder)
    manifest = json.loads((data / "manifest.json").read_text())
    from glassroom.data.tokenizer import load_tokenizer

    template = ChatTemplate.from_dict(manifest["chat_template"], load_tokenizer(tmp_path / "sft" / "tokenizer.json"))
    for event in events:
        [stored] = event["data"]["samples"]
        code, out, _ = _cli(capsys, tmp_path / "sft", "--step", event["step"], "--chat", "--prompt", QUESTION,
                            "--max-new-tokens", 8, "--json")
        printed = json.loads(out)
        assert code == 0 and printed["completion"] == stored["text"] and stored["prompt"] == QUESTION
        assert printed["prompt_tokens"] == template.prompt([{"role": "user", "content": QUESTION}]).tolist()
    lineage = run_meta("sft", tmp_path / "sft", root=tmp_path)["artifacts"]["lineage"]
    assert lineage["base_run"] == "base" and lineage["task"] == "sft" and lineage["base_step"] == 12


def test_sample_chat_names_a_dataset_template_that_no_longer_fits_the_run(tmp_path, capsys, monkeypatch):
    from glassroom.commands import sample_chat

    plain = train_tokenizer([a for _, a in docstring_answers()], 400)
    other = train_tokenizer([a for _, a in docstring_answers()], 300)
    template = ChatTemplate.for_tokenizer(other).to_dict()   # ids of another tokenizer
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("data: {path: data}\n")
    monkeypatch.setattr(sample_chat, "_manifest_template", lambda run_dir: template)
    with pytest.raises(GlassroomError, match=r"^--chat: .*run: its dataset's chat_template does not fit the run's tokenizer"):
        sample_chat.chat_encoder(run, plain, plain.token_to_id(EOS_TOKEN))
