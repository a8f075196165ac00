"""Tests of glassroom/model/transformer.py."""

from __future__ import annotations

import torch

from glassroom.model.config import ModelConfig
from glassroom.model.transformer import build_model



def _model(window=None, tie=True):
    cfg = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                      max_seq_len=64, tie_embeddings=tie, sliding_window=window,
                      global_every=2 if window else None)
    return build_model(cfg, seed=3).float()


def _pack(convs, seq):
    """One row holding convs, then padding: ids, segments, positions."""
    ids, seg, pos = [], [], []
    for i, conv in enumerate(convs):
        ids += conv
        seg += [i] * len(conv)
        pos += list(range(len(conv)))
    pad = seq - len(ids)
    ids += [0] * pad
    seg += [-1] * pad
    pos += [0] * pad
    return (torch.tensor([ids]), torch.tensor([seg]), torch.tensor([pos]))


def test_no_segments_is_the_pretraining_forward_bit_for_bit():
    model = _model()
    ids = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))
    base = model(ids).logits
    one_segment = model(ids, segments=torch.zeros_like(ids), positions=torch.arange(20).expand(2, 20)).logits
    torch.testing.assert_close(one_segment, base, rtol=1e-5, atol=1e-5)
    assert torch.equal(model(ids).logits, base)


def test_packed_row_equals_each_conversation_alone():
    for window in (None, 4):
        model = _model(window=window)
        gen = torch.Generator().manual_seed(1)
        convs = [torch.randint(0, 97, (n,), generator=gen).tolist() for n in (7, 11, 5)]
        ids, seg, pos = _pack(convs, 30)
        packed = model(ids, segments=seg, positions=pos).logits[0]
        start = 0
        for conv in convs:
            alone = model(torch.tensor([conv])).logits[0]
            torch.testing.assert_close(packed[start:start + len(conv)], alone, rtol=1e-5, atol=1e-5)
            start += len(conv)


def test_no_attention_crosses_a_conversation_boundary():
    """A planted marker: changing conversation 0 leaves conversation 1's logits untouched, in
    the same row (and vice versa: a later conversation never reaches back)."""
    model = _model()
    a, b = list(range(1, 10)), list(range(20, 32))
    ids, seg, pos = _pack([a, b], 24)
    ref = model(ids, segments=seg, positions=pos).logits[0]
    planted = [96] * len(a)
    ids2, _, _ = _pack([planted, b], 24)
    out = model(ids2, segments=seg, positions=pos).logits[0]
    assert torch.equal(out[len(a):len(a) + len(b)], ref[len(a):len(a) + len(b)])
    assert not torch.allclose(out[:len(a)], ref[:len(a)])
    ids3, _, _ = _pack([a, [95] * len(b)], 24)
    out3 = model(ids3, segments=seg, positions=pos).logits[0]
    assert torch.equal(out3[:len(a)], ref[:len(a)])
    # without the segment mask the marker does leak: the test can see a crossing
    leaky = model(ids2, positions=pos).logits[0]
    assert not torch.allclose(leaky[len(a):len(a) + len(b)], ref[len(a):len(a) + len(b)])


def test_padding_rows_are_finite():
    model = _model()
    ids, seg, pos = _pack([[1, 2, 3]], 10)
    out = model(ids, segments=seg, positions=pos).logits
    assert torch.isfinite(out).all()
