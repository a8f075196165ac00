"""Tests of glassroom/train/evaluate.py."""

from __future__ import annotations

import math

import pytest
import torch

from glassroom.model.config import ModelConfig
from glassroom.model.transformer import build_model



def test_bits_per_byte_is_nats_over_ln2_over_bytes(tiny_dataset):
    """A model whose logits are all zero has loss ln(V) per token: bpb = log2(V) * tokens / bytes."""
    from glassroom.data.mixture import Dataset
    from glassroom.train.evaluate import evaluate, load_validation
    from glassroom.train.parallel import DistInfo

    dataset = Dataset(tiny_dataset)
    vocab = dataset.vocab_size
    cfg = ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=32)
    model = build_model(cfg, seed=0)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    sets = load_validation(dataset, dataset.domains, 16, 6)
    results = evaluate(model, sets, 4, torch.device("cpu"), None, DistInfo())
    for vs in sets:
        tokens, n_bytes = vs.tokens.shape[0] * 16, float(vs.window_bytes.sum())
        assert results[f"eval/{vs.domain}/loss"] == pytest.approx(math.log(vocab), rel=1e-6)
        assert results[f"eval/{vs.domain}/bpb"] == pytest.approx(math.log2(vocab) * tokens / n_bytes, rel=1e-6)
    bpbs = [results[f"eval/{vs.domain}/bpb"] for vs in sets]
    assert results["eval/macro/bpb"] == pytest.approx(sum(bpbs) / len(bpbs), rel=1e-12)
