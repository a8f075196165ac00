"""`glassroom train` with train.task: sft: from a pretrained tiny base, on
conversations made from real text, through the real CLI; the masked loss against conversations run
one by one; lineage, template rows, resume after SIGKILL, bad inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from glassroom.observe.store import StoreReader
from sft_helpers import build_chat, pretrain_base, sft_config
from cli_helpers import glassroom_in_process
from train_helpers import ROOT, assert_same_store, run_train_here

KILLED = -9
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def setup(tiny_dataset, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sft")
    base = pretrain_base(tiny_dataset, root / "base", here=True)
    chat = build_chat(root / "chat", base / "tokenizer.json")
    return {"root": root, "base": base, "chat": chat, "config": sft_config(root / "sft.yaml", base, chat)}


def train(config: Path, out: Path, *sets: str, resume: bool = False, env: dict | None = None,
          subprocess: bool = False):
    """`glassroom train CONFIG`, in this process unless `subprocess` (a kill drill, or a refusal checked
    as python -m glassroom gives it)."""
    import subprocess as sp
    import sys

    args = ["train", str(config), "--out", str(out), "--quiet"]
    for item in sets:
        args += ["--set", item]
    args += ["--resume"] if resume else []
    if not subprocess:
        return glassroom_in_process(*args, env={**OFFLINE, **(env or {})})
    return sp.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True,
                  timeout=600, env={**os.environ, **OFFLINE, **(env or {})})


@pytest.fixture(scope="module")
def sft_run(setup) -> Path:
    out = setup["root"] / "run"
    result = train(setup["config"], out)
    assert result.returncode == 0, result.stderr
    return out


def one_line(result, *words):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def final_eval(run: Path) -> dict:
    with StoreReader(run) as reader:
        return [e for e in reader.events() if e["kind"] == "end"][-1]["data"]


# ------------------------------------------------------------------ end to end


def test_sft_lowers_heldout_assistant_loss_against_the_base(setup, sft_run):
    start = setup["root"] / "step0"
    result = train(setup["config"], start, "train.steps=0")
    assert result.returncode == 0, result.stderr
    before, after = final_eval(start), final_eval(sft_run)
    assert set(after) >= {"eval/pydoc/loss", "eval/pydoc/bpb", "eval/macro/loss", "eval/macro/bpb"}
    assert after["eval/pydoc/loss"] < before["eval/pydoc/loss"] - 0.3, (before, after)
    assert after["eval/macro/bpb"] < before["eval/macro/bpb"]
    # the sft run measured its base as step 0, before its first step: the steps=0 run's numbers
    with StoreReader(sft_run) as reader:
        steps, losses = reader.series("eval/pydoc/loss")
    assert steps[0] == 0 and losses[0] == pytest.approx(before["eval/pydoc/loss"], rel=1e-6)


def test_sft_run_records_lineage_packing_counts_mask_share_and_samples(setup, sft_run):
    with StoreReader(sft_run) as reader:
        lineage = reader.artifact("lineage")
        events = reader.events()
        mask_share = reader.series("data/mask_share")[1]
        tokens_seen = reader.series("data/tokens_seen")[1]
    assert lineage == {"base": str(setup["base"]), "base_step": 12, "base_kind": "run", "task": "sft",
                       "data": str(setup["chat"])}
    start = events[0]
    assert start["kind"] == "start" and f"sft from {setup['base']} at step 12" in start["text"]
    counts = start["data"]["conversations"]
    assert 0 < counts["truncated"] < counts["conversations"]  # seq_len 128: the long answers are cut
    assert f"{counts['truncated']} of {counts['conversations']} conversations truncated" in start["text"]
    assert len(mask_share) == 12 and ((0 < mask_share) & (mask_share < 1)).all()
    # throughput counts real tokens: packing leaves some padding, so less than 8 x 128 a step
    steps = np.diff(np.concatenate([[0], tokens_seen]))
    assert (steps < 8 * 128).all() and (steps > 0.5 * 8 * 128).all()
    samples = [e for e in events if e["kind"] == "samples"]
    assert [e["step"] for e in samples] == [0, 4, 8, 12]  # the base, then each checkpoint
    assert samples[0]["data"]["samples"][0]["prompt"] == "What does json.dumps do?"


def test_template_token_rows_start_at_the_mean_of_the_base_rows(setup):
    from glassroom.train.run_folder import read_run_state

    start = setup["root"] / "step0"
    if not start.exists():
        assert train(setup["config"], start, "train.steps=0").returncode == 0
    _, base, _ = read_run_state(setup["base"], 12)
    _, tuned, _ = read_run_state(start, 0)
    n = base["embed.weight"].shape[0]
    vocab = json.loads((setup["chat"] / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    assert tuned["embed.weight"].shape[0] == vocab == n + 2  # grown for <|im_start|>, <|im_end|>
    torch.testing.assert_close(tuned["embed.weight"][:n], base["embed.weight"], rtol=0, atol=0)
    mean = base["embed.weight"].float().mean(0)
    for row in (n, n + 1):
        torch.testing.assert_close(tuned["embed.weight"][row].float(), mean)


@pytest.mark.slow
def test_sft_resume_after_sigkill_equals_the_uninterrupted_run(setup, sft_run, tmp_path):
    out = tmp_path / "killed"
    killed = train(setup["config"], out, env={"GLASSROOM_FAULTS": "kill@7"}, subprocess=True)
    assert killed.returncode == KILLED, killed.stderr
    resumed = train(setup["config"], out, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_store(out, sft_run)
    with StoreReader(out) as reader:
        assert reader.artifact("lineage") == {**reader.artifact("lineage"), "base_step": 12}


# ------------------------------------------------------------------ the loss itself


def objective_and_model(setup):
    from glassroom.data.mixture import Dataset
    from glassroom.model.transformer import build_model
    from glassroom.train.config import load_run_config
    from glassroom.train.objectives import SFT
    from glassroom.train.parallel import DistInfo

    cfg = load_run_config(setup["config"])
    objective = SFT(cfg, Dataset(cfg.data.path), DistInfo(), torch.device("cpu"))
    return objective, build_model(cfg.model, seed=1).float(), cfg


def step_loss_and_grads(objective, model, batch, cfg):
    """What the trainer backpropagates for one step: sum over micro-batches of loss / accum."""
    from contextlib import nullcontext

    model.zero_grad()
    accum = cfg.train.batch_size // cfg.train.micro_batch_size
    objective.begin(batch)
    total = 0.0
    for i in range(accum):
        part = slice(i * cfg.train.micro_batch_size, (i + 1) * cfg.train.micro_batch_size)
        micro = objective.micro(model, batch, part, nullcontext, False)
        (micro.loss / accum).backward()
        total += float(micro.loss.detach()) / accum
    return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_tokens_outside_the_mask_contribute_nothing(setup):
    objective, model, cfg = objective_and_model(setup)
    batch = objective.batch(0)
    loss, grads = step_loss_and_grads(objective, model, batch, cfg)
    t = batch.tensors
    # Tokens no trained target depends on: padding, and each conversation's tail after its last
    # trained target ("\n", EOS, a truncated user turn). Replace them all with other ids.
    tokens, mask, seg = t["tokens"].clone(), t["mask"], t["segments"]
    dead = torch.zeros_like(tokens, dtype=torch.bool)
    for r in range(len(tokens)):
        for j in range(tokens.shape[1]):
            s = int(seg[r, min(j, seg.shape[1] - 1)]) if j < seg.shape[1] else -1
            later = mask[r, j:][seg[r, j:] == s] if j < seg.shape[1] else mask[r, :0]
            dead[r, j] = later.sum() == 0 and (j == 0 or mask[r, j - 1] == 0)
    assert dead.sum() > 20
    changed = torch.where(dead, (tokens * 7 + 3) % 2048, tokens)
    assert (changed != tokens).sum() > 10
    t["tokens"] = changed
    loss2, grads2 = step_loss_and_grads(objective, model, batch, cfg)
    assert loss2 == loss
    for name in grads:
        assert torch.equal(grads[name], grads2[name]), name

    # and the gradient reaching the logits of an untrained target is exactly zero
    captured = {}

    class Keep(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            out = self.inner(*args, **kwargs)
            out.logits.retain_grad()
            captured["logits"] = out.logits
            return out

    from contextlib import nullcontext

    t["tokens"] = tokens
    objective.begin(batch)
    objective.micro(Keep(model), batch, slice(0, 4), nullcontext, True).loss.backward()
    grad = captured["logits"].grad
    untrained = mask[:4] == 0
    assert grad[untrained].abs().max() == 0 and grad[~untrained].abs().max() > 0


def test_a_packed_batch_equals_its_conversations_one_by_one(setup):
    objective, model, cfg = objective_and_model(setup)
    batch = objective.batch(0)
    t = batch.tensors
    assert (t["segments"].max(1).values >= 1).sum() >= 2  # rows really hold several conversations
    loss, grads = step_loss_and_grads(objective, model, batch, cfg)
    model.zero_grad()
    count, pieces = 0, 0
    terms = []
    for r in range(len(t["tokens"])):
        seg = t["segments"][r]
        for s in range(int(seg.max()) + 1):
            where = torch.nonzero(seg == s).flatten()
            a, b = int(where[0]), int(where[-1]) + 1  # inputs a..b-1, targets a+1..b
            conv = t["tokens"][r, a: b + 1]
            target_mask = t["mask"][r, a: b]
            logits = model(conv[None, :-1]).logits[0].float()
            ce = F.cross_entropy(logits, conv[1:], reduction="none")
            terms.append((ce * target_mask).sum())
            count += int(target_mask.sum())
            pieces += 1
    alone = torch.stack(terms).sum() / count
    alone.backward()
    assert pieces > len(t["tokens"])
    assert abs(float(alone.detach()) - loss) < 1e-5
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ bad inputs


def test_task_must_match_the_dataset(setup, tiny_dataset):
    one_line(train(setup["config"], setup["root"] / "bad1", f"data.path={tiny_dataset}"),
             "train.task: sft", "pretrain data", "manifest.json")
    one_line(run_train_here(setup["root"] / "bad2", setup["chat"], "model.vocab_size=2050"),
             "train.task: pretrain", "sft data")
    assert not (setup["root"] / "bad1").exists() and not (setup["root"] / "bad2").exists()


def test_sft_without_init_from_is_one_line(setup):
    raw = yaml.safe_load(setup["config"].read_text())
    raw.pop("init")
    raw["model"] = {"vocab_size": 2050, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128, "max_seq_len": 128}
    path = setup["root"] / "noinit.yaml"
    path.write_text(yaml.safe_dump(raw))
    one_line(train(path, setup["root"] / "bad3", subprocess=True), "init.from", "sft")  # as python -m glassroom gives it


def test_a_base_whose_tokenizer_differs_is_one_line(setup, tmp_path):
    from chat_helpers import conversations, write_chat_recipe, write_jsonl
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe
    import io

    src = write_jsonl(tmp_path / "conv.jsonl", conversations(80))
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src)}])  # its own tokenizer
    other = tmp_path / "data"
    build_dataset(load_recipe(recipe), other, workers=1, log=io.StringIO())
    one_line(train(setup["config"], tmp_path / "bad", f"data.path={other}"),
             "data.path", "is not the tokenizer of", "init.from")
    assert not (tmp_path / "bad").exists()


def test_overlong_drop_counts_the_dropped_conversations(setup, tmp_path):
    out = tmp_path / "drop"
    result = train(setup["config"], out, "train.overlong=drop", "train.steps=1", "train.warmup_steps=0",
                   "train.checkpoint_every=1")
    assert result.returncode == 0, result.stderr
    with StoreReader(out) as reader:
        start = reader.events()[0]
    counts = start["data"]["conversations"]
    assert counts["dropped"] > 0 and counts["truncated"] == 0
    assert f"{counts['dropped']} of {counts['conversations']} conversations dropped" in start["text"]


def test_sft_from_a_hugging_face_folder_grows_the_vocabulary_and_records_lineage(setup, tmp_path):
    from glassroom.train.run_folder import export_run
    from glassroom.train.run_folder import read_run_state

    folder = export_run(setup["base"], tmp_path / "hf")
    out = tmp_path / "from-hf"
    result = train(setup["config"], out, f"init.from={folder}", "train.steps=0")
    assert result.returncode == 0, result.stderr
    with StoreReader(out) as reader:
        assert reader.artifact("lineage") == {"base": str(folder), "base_step": None, "base_kind": "hf",
                                              "task": "sft", "data": str(setup["chat"])}
        assert f"sft from {folder};" in reader.events()[0]["text"]  # no step: one set of weights
    _, base, _ = read_run_state(setup["base"], 12)
    _, tuned, _ = read_run_state(out, 0)
    n = base["embed.weight"].shape[0]
    torch.testing.assert_close(tuned["embed.weight"][:n], base["embed.weight"], rtol=0, atol=0)
    torch.testing.assert_close(tuned["embed.weight"][n].float(), base["embed.weight"].float().mean(0))


@pytest.mark.parametrize("override, words", [
    ("train.task=finetune", ("train.task",)),
    ("train.overlong=cut", ("train.overlong",)),
    ("observe.sample_tokens=0", ("observe.sample_tokens",)),
    ("observe.sample_prompts=['  ']", ("observe.sample_prompts[0]", "empty")),
])
def test_new_keys_are_checked_in_one_line(setup, override, words):
    from glassroom.errors import GlassroomError
    from glassroom.train.config import load_run_config

    with pytest.raises(GlassroomError) as info:
        load_run_config(setup["config"], [override])
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_old_runs_resume_with_the_new_keys_at_their_defaults():
    from glassroom.train.run_dir import config_differences

    old = {"train": {"batch_size": 8, "seq_len": 32, "seed": 0}, "observe": {"norms_every": 3}}
    new = {"train": {"batch_size": 8, "seq_len": 32, "seed": 0, "task": "pretrain", "overlong": "truncate"},
           "observe": {"norms_every": 3, "sample_prompts": [], "sample_tokens": 64}}
    assert config_differences(old, new) == []
    assert config_differences(old, {**new, "train": {**new["train"], "task": "sft"}}) == ["train.task ('pretrain' -> 'sft')"]
