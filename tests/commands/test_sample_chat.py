"""Sampling a chat model: generate() stopping at any of several ids, CheckpointSamples (the fixed
prompts answered at each checkpoint; glassroom/train/samples.py) and `glassroom sample --chat` on
Hugging Face folders (glassroom's template, a foreign one through transformers) and the refusals."""

from __future__ import annotations

import json

import pytest
import yaml

from chat_helpers import docstring_answers
from glassroom.cli import main
from glassroom.data.chat import JINJA, ChatTemplate
from glassroom.data.tokenizer import EOS_TOKEN, save_tokenizer, train_tokenizer
from glassroom.errors import GlassroomError
from glassroom.generate import generate
from glassroom.model.config import model_config_from_mapping
from glassroom.model.transformer import build_model
from hf_helpers import OFFLINE, train_here  # noqa: F401 (OFFLINE: importing it sets the offline variables)
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


# ------------------------------------------------------------------------------ generate()


# ------------------------------------------------------------------------------ CheckpointSamples


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
    result = train_here(tmp_path / "run", tiny_dataset, "train.steps=2", "train.checkpoint_every=2", "model.moe=")
    assert result.returncode == 0, result.stderr
    code, out, err = _cli(capsys, tmp_path / "run", "--chat", "--prompt", QUESTION)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "has no chat template (its dataset manifest has no chat_template" in err
    code, out, _ = _cli(capsys, tmp_path / "run", "--prompt", "def ", "--prompt", "The", "--max-new-tokens", "3")
    assert code == 0 and out.startswith("def ") and "\n\nThe" in out   # several prompts without --chat


def test_an_sft_run_samples_what_sample_chat_prints_and_links_its_base(tiny_dataset, tmp_path, capsys, monkeypatch):
    """End to end: a tiny base pretrained, tuned on real conversations with observe.sample_prompts;
    each checkpoint's `samples` event holds what `glassroom sample RUN --step N --chat` prints, the
    run folder's template comes from its dataset manifest, and its Lineage links the base run."""
    import sft_helpers
    from glassroom.observe.store import StoreReader
    from glassroom.web.data import run_meta
    from sft_helpers import build_chat, pretrain_base, sft_config

    monkeypatch.setattr(sft_helpers, "run_train", train_here)  # the base's `glassroom train` in this process
    base = pretrain_base(tiny_dataset, tmp_path / "base")
    data = build_chat(tmp_path / "chat", base / "tokenizer.json", n=120)
    config = sft_config(tmp_path / "sft.yaml", base, data, steps=8, checkpoint_every=4, eval_every=4)
    result = train_here(tmp_path / "sft", data, config=config)
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
