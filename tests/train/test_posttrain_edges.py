"""Post-training runs attacked as a careless user would: each test pins a failure that post-training
once had, and fails without its fix. Tiny base pretrained through the real CLI, chat and
preference data from real text (tests/sft_helpers.py, tests/dpo_helpers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from glassroom.observe.store import StoreReader
from sft_helpers import build_chat, pretrain_base, sft_config
from cli_helpers import glassroom_in_process
from train_helpers import ROOT, tree_hashes

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SHORT = ("train.steps=2", "train.warmup_steps=0", "train.checkpoint_every=2", "train.eval_every=2")


@pytest.fixture(scope="module")
def setup(tiny_dataset, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    base = pretrain_base(tiny_dataset, root / "base", here=True)
    chat = build_chat(root / "chat", base / "tokenizer.json", n=80)
    return {"root": root, "base": base, "chat": chat, "config": sft_config(root / "sft.yaml", base, chat)}


def glassroom(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m glassroom ARGS`: for the kill drills and the one refusal checked as a user gets it."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **OFFLINE, **(env or {})})


def glassroom_here(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`glassroom ARGS` in this process (cli_helpers.glassroom_in_process), offline."""
    return glassroom_in_process(*args, env={**OFFLINE, **(env or {})})


def train(config: Path, out: Path, *sets: str, resume: bool = False, here: bool = True) -> subprocess.CompletedProcess:
    args = ["train", str(config), "--out", str(out), "--quiet"]
    for item in sets:
        args += ["--set", item]
    return (glassroom_here if here else glassroom)(*args, *(["--resume"] if resume else []))


def one_line(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def start_event(run: Path) -> dict:
    with StoreReader(run) as reader:
        return [e for e in reader.events() if e["kind"] == "start"][0]


# ------------------------------------------------------------------ answers cut away by seq_len


@pytest.mark.slow
def test_seq_len_shorter_than_every_answer_is_one_line_not_a_run_of_zero_losses(setup):
    # seq_len 4: the template header alone fills the row; every answer is cut away. It used to train
    # 2 steps at loss 0 and mask share 0, and call it a run.
    out = setup["root"] / "cut"
    one_line(train(setup["config"], out, *SHORT, "train.seq_len=4", here=False),  # through python -m glassroom
             "train.seq_len", "raise train.seq_len")
    assert not out.exists()


def test_conversations_whose_answer_is_cut_away_are_dropped_and_counted(setup):
    # A limit between the shortest and the longest header: some conversations keep no assistant
    # token. They used to be packed as rows of pure zero-mask targets, uncounted.
    from glassroom.data.chat import Conversations
    from glassroom.data.mixture import Dataset
    from glassroom.data.packing import describe_counts, open_packed_set

    ds = Dataset(setup["chat"])
    conv = Conversations(ds.path, ds.domains[0], "train")
    firsts = sorted(int(conv.conversation(i)[1].nonzero()[0][0]) for i in range(len(conv)))  # first trained target
    seq_len = firsts[len(firsts) // 2]  # half of them have their first trained target at or past seq_len + 1
    cut = sum(f >= seq_len + 1 for f in firsts)
    assert 0 < cut < len(firsts)
    packed = open_packed_set(ds, ds.domains, "train", seq_len)
    assert packed.counts["dropped_empty"] == cut
    assert len(packed.parts[0].length) == len(firsts) - cut
    rows = packed.stack([(0, [(i, int(packed.parts[0].length[i]))]) for i in range(len(packed.parts[0].length))])
    assert (rows.mask.sum(1) > 0).all()  # every row kept trains something
    assert f"{cut} dropped (no trained token left" in describe_counts(packed.counts, "truncate")


# ------------------------------------------------------------------ resume without the base


RESUME_SETS = ("train.steps=4", "train.warmup_steps=0", "train.checkpoint_every=2", "train.eval_every=2")


@pytest.fixture(scope="module")
def uninterrupted(setup) -> Path:
    out = setup["root"] / "uninterrupted"
    assert train(setup["config"], out, *RESUME_SETS).returncode == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("model", [None, {"max_seq_len": 128}], ids=["no-model-section", "partial-model-section"])
def test_resume_with_the_users_config_after_the_base_folder_is_deleted(setup, uninterrupted, tmp_path, model):
    # The docs: a resumed run continues from its own checkpoint without its init folder. With the
    # user's config (no model: section, as every post-training config) --resume used to fail with
    # "init.from: ...: no such folder", so a deleted base stranded the run.
    import shutil

    from train_helpers import assert_same_store

    sets = RESUME_SETS
    base = tmp_path / "base"
    shutil.copytree(setup["base"], base)
    config = sft_config(tmp_path / "sft.yaml", base, setup["chat"])
    if model is not None:  # keys that agree with the base (or training knobs) may be set
        config.write_text(config.read_text() + yaml.safe_dump({"model": model}))
    out = tmp_path / "run"
    killed = glassroom("train", str(config), "--out", str(out), "--quiet", *[a for s in sets for a in ("--set", s)],
                       env={"GLASSROOM_FAULTS": "kill@3"})
    assert killed.returncode == -9, killed.stderr
    shutil.rmtree(base)
    resumed = train(config, out, *sets, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_store(out, uninterrupted)


@pytest.mark.slow
def test_resume_on_data_rebuilt_with_another_tokenizer_is_one_line(setup, tmp_path):
    # Killed, then the data rebuilt in place with a tokenizer of its own (400 ids: they fit the
    # model's 2050 rows) and the base deleted (so init.from's tokenizer check cannot run): --resume
    # used to continue silently, training on other tokens under the same ids.
    import io
    import shutil

    from chat_helpers import write_chat_recipe, write_jsonl
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe
    from sft_helpers import short_conversations

    base, data = tmp_path / "base", tmp_path / "chat"
    shutil.copytree(setup["base"], base)
    shutil.copytree(setup["chat"], data)
    config = sft_config(tmp_path / "sft.yaml", base, data)
    out = tmp_path / "run"
    sets = [a for s in ("train.steps=4", "train.warmup_steps=0", "train.checkpoint_every=2") for a in ("--set", s)]
    killed = glassroom("train", str(config), "--out", str(out), "--quiet", *sets, env={"GLASSROOM_FAULTS": "kill@3"})
    assert killed.returncode == -9, killed.stderr
    shutil.rmtree(base)
    shutil.rmtree(data)
    src = write_jsonl(tmp_path / "conv.jsonl", short_conversations(80))
    build_dataset(load_recipe(write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src)}])), data,
                  workers=1, log=io.StringIO())
    before = tree_hashes(out)
    one_line(glassroom_here("train", str(config), "--out", str(out), "--quiet", *sets, "--resume"),
             "data.path", "another tokenizer")
    assert tree_hashes(out) == before  # refused before anything is written: config.yaml, journal, status


# ------------------------------------------------------------------ a tuned model outside glassroom


def _mistral_with_window(folder: Path, tokenizer: Path) -> Path:
    """A transformers-made Mistral (sliding window 16, random weights scaled up so greedy text is
    not one repeated token) saved with save_pretrained, with the base's tokenizer saved by transformers."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=2048, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, intermediate_size=128, max_position_embeddings=128,
                        sliding_window=16, tie_word_embeddings=False, eos_token_id=0, pad_token_id=0, bos_token_id=None)
    model = MistralForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(8)
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_file=str(tokenizer), eos_token="<|endoftext|>").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tuned(setup) -> tuple[Path, Path]:
    """(run, export): SFT 2 steps from a transformers-made sliding-window Mistral, exported."""
    root = setup["root"] / "tuned"
    root.mkdir()
    hf_base = _mistral_with_window(root / "mistral", setup["base"] / "tokenizer.json")
    config = sft_config(root / "sft.yaml", hf_base, setup["chat"], seq_len=64)
    run, export = root / "run", root / "export"
    assert train(config, run, *SHORT).returncode == 0
    assert glassroom_here("export", str(run), "--out", str(export)).returncode == 0
    return run, export


def test_a_tuned_sliding_window_model_answers_the_same_in_glassroom_its_export_and_transformers(tuned):
    # The docs' promise at its edge: SFT from a transformers-made sliding-window folder (vocabulary
    # grown by the template tokens), exported; greedy --chat answers past the window, with a
    # two-line system message, token for token the same from the run, from the export, and from
    # transformers' apply_chat_template + generate on the export.
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, export = tuned
    system, prompt, n = "Answer briefly.\nUse one sentence.", "What does json.dumps do?", 40
    answers = []
    for path in (run, export):
        result = glassroom_here("sample", str(path), "--chat", "--system", system, "--prompt", prompt,
                           "--max-new-tokens", str(n), "--ignore-eos", "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.splitlines()[0])
        answers.append((out["prompt_tokens"], out["new_tokens"]))
    assert answers[0] == answers[1]
    tok = AutoTokenizer.from_pretrained(export, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(export, local_files_only=True)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert len(ids) + n > 16 + 16  # well past the window
    # Greedy by hand, as --ignore-eos means: <|endoftext|> may be chosen, it just does not stop the
    # answer. (generate's min_new_tokens would instead forbid it, and differ once the model picks it.)
    new = []
    with torch.no_grad():
        for _ in range(n):
            new.append(int(model(torch.tensor([ids + new])).logits[0, -1].argmax()))
    assert answers[0] == (ids, new)
    assert len(set(new)) > 5  # a real answer, not one token repeated


# ------------------------------------------------------------------ preference pairs cut to the same tokens


def test_pairs_identical_once_truncated_are_dropped_and_counted(setup, tmp_path):
    # chosen and rejected share a long prefix and differ only past seq_len + 1 tokens: truncated,
    # they are the same tokens, h = 0 whatever the model (no gradient), and dpo/accuracy counted them
    # wrong forever. They used to be used (and counted as merely truncated).
    import io
    import json

    from dpo_helpers import PROMPT, doc_sentences, reversed_words
    from glassroom.data.build import build_dataset
    from glassroom.data.mixture import Dataset
    from glassroom.data.recipe import load_recipe
    from glassroom.train.dpo import open_pairs

    sentences = doc_sentences(40)
    prefix = " ".join(sentences[:6])  # far longer than 32 tokens
    records = {"train": [], "validation": []}
    for i, s in enumerate(sentences[6:]):
        split = "validation" if i % 4 == 0 else "train"
        if i % 2:  # differ only at the end
            records[split].append({"prompt": PROMPT, "chosen": f"{prefix} {s}", "rejected": f"{prefix} {reversed_words(s)}"})
        else:
            records[split].append({"prompt": PROMPT, "chosen": s, "rejected": reversed_words(s)})
    sources = []
    for split, items in records.items():
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in items))
        sources.append({"kind": "preferences", "path": str(path), "split": split})
    recipe = tmp_path / "pairs.yaml"
    recipe.write_text(yaml.safe_dump({"name": "pairs", "task": "dpo", "domains": {"docs": {"sources": sources}},
                                      "tokenizer": {"path": str(setup["base"] / "tokenizer.json")}}))
    build_dataset(load_recipe(recipe), tmp_path / "data", workers=1, log=io.StringIO())
    ds = Dataset(tmp_path / "data")
    pairs = open_pairs(ds, ds.domains, "train", 32)
    same = sum(1 for i, r in enumerate(records["train"]) if r["chosen"].startswith(prefix))
    assert same > 0 and pairs.counts["dropped_identical"] == same
    assert len(pairs) == len(records["train"]) - same
    tokens, _ = pairs.rows(np.arange(len(pairs)), 0)
    half = len(pairs)
    assert all(not np.array_equal(tokens[j], tokens[half + j]) for j in range(half))
    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump({
        "init": {"from": str(setup["base"])}, "data": {"path": str(tmp_path / "data")},
        "train": {"task": "dpo", "steps": 1, "batch_size": 4, "micro_batch_size": 4, "seq_len": 32, "lr": 1e-3,
                  "warmup_steps": 0, "checkpoint_every": 1, "eval_every": 1, "eval_sequences": 8, "device": "cpu"}}))
    assert train(config, tmp_path / "run").returncode == 0
    assert f"{same} dropped (chosen and rejected the same once truncated)" in start_event(tmp_path / "run")["text"]


def test_init_from_a_file_says_it_is_a_file(setup, tmp_path):
    # init.from: BASE/tokenizer.json (a file inside the base) used to say "no such folder".
    config = sft_config(tmp_path / "sft.yaml", setup["base"] / "tokenizer.json", setup["chat"])
    out = tmp_path / "run"
    one_line(train(config, out, *SHORT), "init.from", "is a file", "give the folder")
    assert not out.exists()


def test_a_tied_transformers_qwen3_base_grows_its_vocabulary_at_the_mean_and_exports_tied(setup, tmp_path):
    # A Qwen3 made by transformers (tied embeddings, its tokenizer saved by transformers) as the
    # base: the data's two template tokens are new rows, set to the mean of the base's rows in the
    # one tied matrix; exported, the model stays tied with 2050 rows.
    import json

    import torch
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=2048, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, intermediate_size=128, max_position_embeddings=128,
                      tie_word_embeddings=True, eos_token_id=0, pad_token_id=0, bos_token_id=None)
    base = tmp_path / "qwen"
    Qwen3ForCausalLM(cfg).save_pretrained(base)
    PreTrainedTokenizerFast(tokenizer_file=str(setup["base"] / "tokenizer.json"),
                            eos_token="<|endoftext|>").save_pretrained(base)
    config = sft_config(tmp_path / "sft.yaml", base, setup["chat"], seq_len=64)
    run, export = tmp_path / "run", tmp_path / "export"
    assert train(config, run, "train.steps=0", "train.warmup_steps=0").returncode == 0
    assert glassroom_here("export", str(run), "--out", str(export)).returncode == 0
    ours, theirs = load_file(export / "model.safetensors"), load_file(base / "model.safetensors")
    assert "lm_head.weight" not in ours and json.loads((export / "config.json").read_text())["tie_word_embeddings"]
    grown, rows = ours["model.embed_tokens.weight"], theirs["model.embed_tokens.weight"]
    assert grown.shape == (2050, 64)
    torch.testing.assert_close(grown[:2048], rows, rtol=0, atol=0)
    torch.testing.assert_close(grown[2048:], rows.mean(0).expand(2, -1), rtol=0, atol=1e-6)


@pytest.mark.dist
def test_dpo_from_an_exported_sft_folder_measures_its_base_exactly_at_step_0(setup, tuned, tmp_path):
    # The chain SFT -> export -> DPO with init.from the exported folder (its tokenizer already has
    # the template tokens; the pairs are built with it), on 2 FSDP ranks: lineage says hf, the
    # reference is computed once, step 1's loss is ln 2. The hole: at step 0 the policy IS the
    # reference (every reward 0, accuracy 0, loss ln 2), but evaluated in other batches than the
    # reference's (each rank takes every other held-out pair) float noise gave rewards of ~1e-7
    # and counted pairs as "correct" (1 of 48).
    import math

    from dpo_helpers import build_pairs

    _, export = tuned
    data = build_pairs(tmp_path / "pairs", export, n_train=16, n_heldout=48)
    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump({
        "init": {"from": str(export)}, "data": {"path": str(data)},
        "train": {"task": "dpo", "steps": 1, "batch_size": 4, "micro_batch_size": 2, "seq_len": 64, "lr": 1e-3,
                  "warmup_steps": 0, "checkpoint_every": 1, "eval_every": 1, "eval_sequences": 48,
                  "precision": "fp32", "device": "cpu", "parallel": "fsdp"}}))
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "glassroom", "train", str(config), "--out", str(out), "--quiet"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE})
    assert result.returncode == 0, result.stderr[-3000:]
    with StoreReader(out) as reader:
        at = {name: reader.series(f"eval/dpo/{name}") for name in ("reward_chosen", "reward_rejected", "accuracy", "loss")}
        lineage, loss = reader.artifact("lineage"), reader.series("train/loss")[1]
        kinds = [e["kind"] for e in reader.events()]
    assert lineage["base_kind"] == "hf" and lineage["task"] == "dpo" and lineage["base_step"] is None
    assert kinds.count("dpo_reference") == 1
    assert loss[0] == pytest.approx(math.log(2), abs=1e-4)
    for name in ("reward_chosen", "reward_rejected", "accuracy"):
        steps, values = at[name]
        assert steps[0] == 0 and values[0] == 0.0, (name, values)
    assert at["loss"][1][0] == pytest.approx(math.log(2), abs=1e-7)
