"""Shared setup for the SFT tests: a tiny dense base pretrained through the real CLI, a conversation
dataset built from real text (Python's docstrings, tests/chat_helpers.py) with the base's tokenizer,
and an SFT config that starts from the base."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from chat_helpers import docstring_answers, write_chat_recipe, write_jsonl
from train_helpers import run_train, run_train_here

SFT_TRAIN = {"task": "sft", "steps": 12, "batch_size": 8, "micro_batch_size": 4, "seq_len": 128, "lr": 3e-3,
             "warmup_steps": 2, "seed": 0, "checkpoint_every": 4, "eval_every": 6, "eval_sequences": 6,
             "device": "cpu"}


def pretrain_base(tiny_dataset: Path, out: Path, here: bool = False) -> Path:
    """A dense tiny base (tests/configs/train-tiny.yaml without MoE, max_seq_len 128), 12 steps, checkpoint
    at 12; trained in this process with `here` (train_helpers.run_train_here), else as a subprocess."""
    train = run_train_here if here else run_train
    result = train(out, tiny_dataset, "model.moe=", "model.max_seq_len=128", "train.checkpoint_every=12")
    assert result.returncode == 0, result.stderr
    return out


def short_conversations(n: int | None = None) -> list[dict]:
    """A user asks what a standard-library function does; the assistant answers with the first
    sentence of its docstring (short: two or three conversations share a row of 129 tokens), every
    10th with the first sentence repeated five times (longer than a row: truncated or dropped)."""
    out = []
    for i, (qual, answer) in enumerate(docstring_answers()[:n]):
        first = answer.replace("\n", " ").split(". ")[0].rstrip(".") + "."
        if i % 10 == 0:
            first = " ".join([first] * 5)
        out.append({"id": qual, "messages": [{"role": "user", "content": f"What does {qual} do?"},
                                             {"role": "assistant", "content": first}]})
    return out


def build_chat(root: Path, tokenizer: Path, n: int | None = 240) -> Path:
    """Conversations about Python functions (their docstrings) built with `tokenizer` appended the
    template tokens; 20% held out."""
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    root.mkdir(parents=True, exist_ok=True)
    src = write_jsonl(root / "conv.jsonl", short_conversations(n))
    recipe = write_chat_recipe(root, [{"kind": "conversations", "path": str(src)}],
                               tokenizer={"path": str(tokenizer)})
    out = root / "data"
    build_dataset(load_recipe(recipe), out, workers=1, log=io.StringIO())
    return out


def sft_config(path: Path, base: Path, data: Path, **train) -> Path:
    cfg = {"init": {"from": str(base)}, "data": {"path": str(data)}, "train": {**SFT_TRAIN, **train},
           "observe": {"norms_every": 3, "sample_prompts": ["What does json.dumps do?"], "sample_tokens": 8}}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path
