"""Packed rows: block-diagonal attention and per-conversation positions in the model, and the
packing of conversations into rows (glassroom/data/packing.py)."""

from __future__ import annotations


# ------------------------------------------------------------------ packing conversations into rows

import io  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from glassroom.data.packing import Packer, first_fit, open_packed_set, padding_shares, validation_rows  # noqa: E402
from glassroom.errors import GlassroomError  # noqa: E402


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    """Conversations about Python functions (sft_helpers.short_conversations), their own tokenizer."""
    from chat_helpers import write_chat_recipe, write_jsonl
    from glassroom.data.build import build_dataset
    from glassroom.data.mixture import Dataset
    from glassroom.data.recipe import load_recipe
    from sft_helpers import short_conversations

    root = tmp_path_factory.mktemp("pack")
    src = write_jsonl(root / "conv.jsonl", short_conversations(200))
    recipe = write_chat_recipe(root, [{"kind": "conversations", "path": str(src)}])
    build_dataset(load_recipe(recipe), root / "data", workers=1, log=io.StringIO())
    return Dataset(root / "data")


def conversations_of(ds, split="train"):
    from glassroom.data.chat import Conversations

    conv = Conversations(ds.path, ds.domains[0], split)
    return [conv.conversation(i) for i in range(len(conv))]


def unpack(rows, whole=()):
    """Every (tokens, mask of its targets 1..) conversation of PackedRows, from segments (which
    cover inputs: a conversation ending on the row's last token has it as its last target, told
    from a conversation followed by one token of padding by `whole`, the known conversations)."""
    out = []
    width = rows.segments.shape[1]
    for r in range(len(rows.tokens)):
        seg = rows.segments[r]
        for s in range(seg.max() + 1):
            where = np.flatnonzero(seg == s)
            a, b = where[0], where[-1] + 1
            assert (rows.positions[r, a:b] == np.arange(b - a)).all()
            end = b + 1 if b == width and tuple(rows.tokens[r, a:b]) not in whole else b
            assert rows.mask[r, end - 1: b].sum() == 0  # the target after its last token is not trained
            out.append((rows.tokens[r, a:end], rows.mask[r, a:end - 1]))
        pad = seg < 0
        assert (rows.mask[r][pad] == 0).all() and (rows.positions[r][pad] == 0).all()
    return out


def test_first_fit_keeps_order_and_capacity():
    rows = first_fit(np.array([5, 4, 3, 6, 2, 10]), 10)
    assert rows == [[0, 1], [2, 3], [4], [5]]
    lengths = np.random.default_rng(0).integers(1, 30, 300)
    rows = first_fit(lengths, 30)
    assert sorted(i for row in rows for i in row) == list(range(300))
    assert all(lengths[row].sum() <= 30 for row in rows)
    naive, room = [], []  # first fit the slow way: each item to the first row with room
    for i, n in enumerate(lengths):
        r = next((r for r, free in enumerate(room) if free >= n), len(room))
        if r == len(room):
            naive.append([])
            room.append(30)
        naive[r].append(i)
        room[r] -= n
    assert rows == naive


def test_rows_hold_whole_conversations_with_their_masks(chat):
    packed = open_packed_set(chat, chat.domains, "train", 128)
    packer = Packer(packed, {chat.domains[0]: 1.0}, batch_size=8, seed=5)
    whole = {tuple(t): m for t, m in conversations_of(chat)}
    seen = 0
    for step in range(3):
        rows = packer.batch(step)
        assert rows.tokens.shape == (8, 129) and rows.mask.shape == rows.segments.shape == (8, 128)
        for tokens, mask in unpack(rows, whole):
            assert tuple(tokens) in whole or len(tokens) == 129  # whole, or truncated to a row
            if tuple(tokens) in whole:
                np.testing.assert_array_equal(mask, whole[tuple(tokens)][1:])  # the mask, as targets
                seen += 1
    assert seen > 30
    # several conversations share rows: over 10 batches (80 rows) 69-81% of rows hold two or more for
    # 25 splits (the split hashes document ids, which name the file's folder); one batch alone held 3-8 of 8
    shared = np.mean([(packer.batch(s).segments.max(1) >= 1).mean() for s in range(10)])
    assert shared >= 0.5


def test_rows_of_a_step_are_a_pure_function_of_dataset_seed_and_step(chat):
    packed = open_packed_set(chat, chat.domains, "train", 128)
    a = Packer(packed, {chat.domains[0]: 1.0}, 8, seed=1)
    b = Packer(open_packed_set(chat, chat.domains, "train", 128), {chat.domains[0]: 1.0}, 8, seed=1)
    later = b.batch(40)  # far into later epochs first: no iterator state
    for step in (0, 3, 40):
        x, y = a.batch(step), (later if step == 40 else b.batch(step))
        for name in ("tokens", "mask", "segments", "positions"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
    other = Packer(packed, {chat.domains[0]: 1.0}, 8, seed=2).batch(0)
    assert not np.array_equal(other.tokens, a.batch(0).tokens)
    # ranks split the global batch
    halves = [a.batch(3, rank, 2).tokens for rank in (0, 1)]
    np.testing.assert_array_equal(np.concatenate(halves), a.batch(3).tokens)
    # one epoch covers every conversation once
    rows = a.epoch_rows(0, 0)
    assert sorted(i for row in rows for i, _ in row) == list(range(len(packed.parts[0].length)))


def test_overlong_conversations_are_truncated_or_dropped_and_counted(chat):
    lengths = [len(t) for t, _ in conversations_of(chat)]
    long = sum(n > 65 for n in lengths)
    assert 0 < long < len(lengths)
    cut = open_packed_set(chat, chat.domains, "train", 64)
    assert cut.counts == {"conversations": len(lengths), "truncated": long, "dropped": 0, "dropped_empty": 0}
    assert cut.parts[0].length.max() == 65
    dropped = open_packed_set(chat, chat.domains, "train", 64, "drop")
    assert dropped.counts["dropped"] == long and len(dropped.parts[0].length) == len(lengths) - long
    with pytest.raises(GlassroomError, match="train.overlong"):
        open_packed_set(chat, chat.domains, "train", 64, "shorten")


def test_padding_share_of_packing_against_one_conversation_a_row(chat):
    packed = open_packed_set(chat, chat.domains, "train", 128)
    shares = padding_shares(packed)
    lengths = packed.parts[0].length
    assert shares["padded"] == pytest.approx(1 - lengths.sum() / (len(lengths) * 129))
    assert shares["packed"] < shares["padded"] / 2
    assert shares["rows_packed"] < shares["rows_padded"]


def test_validation_rows_are_fixed_and_capped(chat):
    packed = open_packed_set(chat, chat.domains, "validation", 128)
    rows = validation_rows(packed, 0, 3)
    assert len(rows.tokens) == 3
    again = validation_rows(open_packed_set(chat, chat.domains, "validation", 128), 0, 3)
    np.testing.assert_array_equal(rows.tokens, again.tokens)
    first = unpack(rows)[0][0]
    # shard order, first fit: the first held-out conversation opens the first row (its first seq_len + 1
    # tokens when it is longer: train.overlong truncate; how long it is depends on the test tokenizer)
    np.testing.assert_array_equal(first, conversations_of(chat, "validation")[0][0][:129])
