"""The rolling bits-per-byte task on text of multi-byte UTF-8 characters (Japanese, Russian): when
the validation tokens end inside a character, the task leaves those last tokens out instead of
scoring U+FFFD's tokens, so lm-eval sees the trainer's tokens and its bits per byte stays close."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F
import yaml

from downstream_helpers import glassroom_here
from glassroom.data.mixture import Dataset
from glassroom.downstream.adapter import GlassroomLM, encode
from glassroom.data.tasks import bpb_document
from glassroom.model.config import ModelConfig
from glassroom.model.transformer import build_model

LETTERS = "日本語東京学習モデルデータ漢字読書русскийязыкмодельданныеёжabcdefgh"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("utf8")
    rng = random.Random(0)
    (root / "docs").mkdir()
    for i in range(80):
        words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 5))) for _ in range(300)]
        text = "\n".join(" ".join(words[k:k + 15]) for k in range(0, 300, 15))
        (root / "docs" / f"{i}.txt").write_text(text + "\n", encoding="utf-8")
    recipe = {"name": "utf8", "domains": {"mixed": {"sources": [{"kind": "files", "path": str(root / "docs" / "*.txt")}]}},
              "split": {"validation_fraction": 0.2},
              "tokenizer": {"vocab_size": 300, "sample_bytes": "1M"}}
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    built = glassroom_here("data", "build", str(root / "recipe.yaml"), "--out", str(root / "data"))
    assert built.returncode == 0, built.stderr
    return Dataset(root / "data")


def test_a_window_end_inside_a_character_leaves_those_tokens_out_and_the_rest_is_the_trainers(dataset):
    tok = dataset.tokenizer()
    shard = dataset.shard("mixed", "validation")
    trimmed = 0
    for seq_len in range(9, 60):
        doc = bpb_document(dataset, "mixed", tok, seq_len, 3)
        ids = shard.tokens[: doc["windows"] * seq_len].tolist()
        assert doc["roundtrip_differs"] == 0
        assert encode(tok, doc["text"]) == ids[: doc["tokens"]]  # what lm-eval scores: the trainer's tokens
        assert doc["n_bytes"] == shard.bytes_between(0, doc["tokens"])
        trimmed += doc["trimmed_tokens"] > 0
    assert trimmed >= 2  # the corpus does split characters at window ends (4-9 of these 51 lengths, by the BPE trained)


def test_the_trimmed_task_stays_close_to_the_trainers_bits_per_byte(dataset):
    tok = dataset.tokenizer()
    model = build_model(ModelConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=1, n_heads=2, d_ff=64,
                                    max_seq_len=64), seed=0).eval()
    seq_len = next(L for L in range(30, 64) if bpb_document(dataset, "mixed", tok, L, 8)["trimmed_tokens"])
    doc = bpb_document(dataset, "mixed", tok, seq_len, 8)
    nll, n_bytes = 0.0, 0
    with torch.no_grad():
        for tokens, b in dataset.validation_batches("mixed", seq_len, 8, 8):
            x = torch.tensor(tokens)
            logits = model(x[:, :-1]).logits.float()
            nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
            n_bytes += b
    trainer = nll / math.log(2) / n_bytes

    class Request:
        def __init__(self, text):
            self.args = (text,)

    [ll] = GlassroomLM(model, tok, batch_size=8, max_length=seq_len).loglikelihood_rolling([Request(doc["text"])])
    task = -ll / math.log(2) / doc["n_bytes"]
    assert abs(task - trainer) < 0.01, (task, trainer)
