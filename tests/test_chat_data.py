"""`glassroom data build` of conversation (task: sft) and preference (task: dpo) data through the CLI:
the shards, masks, manifest and stats; bad input as one line and exit 2; counted skips; a base
tokenizer extended in place; preference pairs kept adjacent through dedup and the split."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chat_helpers import conversations, preferences, write_chat_recipe, write_jsonl
from data_helpers import run_cli, error_line
from glassroom.data.chat import IM_END, ChatTemplate, Conversations
from glassroom.data.shards import Shard
from glassroom.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from glassroom.errors import GlassroomError


def build(recipe, out, capsys):
    return run_cli(["data", "build", recipe, "--out", out, "--workers", "1"], capsys)


one_error = error_line  # data_helpers


def template_of(out) -> ChatTemplate:
    manifest = json.loads((out / "manifest.json").read_text())
    return ChatTemplate.from_dict(manifest["chat_template"], load_tokenizer(out / "tokenizer.json"))


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    records = conversations(120)
    records.insert(5, {"id": "no-answer", "messages": [{"role": "user", "content": "What does glob.glob do?"}]})
    records.insert(9, {"id": "unanswered", "messages": records[0]["messages"] + [{"role": "user", "content": "More?"}]})
    records.append({**records[1], "id": "copy-of-1"})  # the same rendered text: dropped by exact dedup
    src = write_jsonl(root / "conv.jsonl", records)
    recipe = write_chat_recipe(root, [{"kind": "conversations", "path": str(src), "id_field": "id"}])
    return root, recipe


@pytest.fixture(scope="module")
def built(sft, tmp_path_factory):
    import io

    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    root, recipe = sft
    out = root / "data"
    build_dataset(load_recipe(recipe), out, workers=1, log=io.StringIO(), recipe_file=str(recipe))
    return out


def test_build_writes_masks_manifest_and_chat_stats(built):
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["task"] == "sft" and manifest["chat_template"]["name"] == "chatml"
    template = template_of(built)
    for split in ("train", "validation"):
        conv = Conversations(built, "pydoc", split)
        shard = Shard(built, "pydoc", split, manifest["dtype"])
        assert (built / "shards" / "pydoc" / f"{split}.mask.bin").stat().st_size == len(shard) == len(conv.mask)
        assert len(conv) == manifest["domains"]["pydoc"][split]["documents"] > 0
        for i in range(len(conv)):
            ids, mask = conv.conversation(i)
            assert ids[-1] == template.eos_id and mask[-1] == 0
            text = template.decode(ids)
            answer = text.split("<|im_start|>assistant\n")[1].split(IM_END)[0]
            assert template.decode(ids[mask == 1]) == answer + IM_END
    chat = manifest["domains"]["pydoc"]["chat"]
    assert chat["train"]["conversations"] + chat["validation"]["conversations"] == 120
    assert chat["train"]["turns"] == 3 * chat["train"]["conversations"]
    assert 0.3 < chat["train"]["assistant_share"] < 0.95
    assert chat["train"]["assistant_share"] == round(chat["train"]["assistant_tokens"] / chat["train"]["tokens"], 4)


def test_skips_and_duplicates_are_counted_in_the_funnel(built):
    stats = json.loads((built / "stats.json").read_text())
    assert stats["extract"]["pydoc"]["skipped"] == {"no_assistant_turn": 1, "last_not_assistant": 1}
    assert stats["exact_dedup"]["pydoc"]["removed"]["exact_duplicate"]["docs"] == 1
    assert "too_short" not in stats["filter"]["pydoc"]["removed"]  # one-line answers are kept
    assert stats["tokenize"]["pydoc"]["chat"]["train"]["conversations"] > 0
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["domains"]["pydoc"]["sources"][0]["skipped"] == {"no_assistant_turn": 1, "last_not_assistant": 1}


def test_parquet_conversations_and_source_split(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = conversations(40)
    pq.write_table(pa.Table.from_pylist(records[:30]), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(records[30:]), tmp_path / "held.parquet")
    recipe = write_chat_recipe(tmp_path, [
        {"kind": "conversations", "path": str(tmp_path / "train.parquet"), "id_field": "id", "split": "train"},
        {"kind": "conversations", "path": str(tmp_path / "held.parquet"), "id_field": "id", "split": "validation"}])
    code, out, err = build(recipe, tmp_path / "data", capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["domains"]["pydoc"]["train"]["documents"] == 30
    assert manifest["domains"]["pydoc"]["validation"]["documents"] == 10
    held = Shard(tmp_path / "data", "pydoc", "validation", manifest["dtype"]).doc_ids()
    assert all(i.split(":")[-1] in {r["id"] for r in records[30:]} for i in held)


BAD = {
    "unknown_role": ('{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}',
                     "messages[0] has role 'tool'"),
    "content_not_string": ('{"messages": [{"role": "user", "content": ["x"]}]}', "messages[0] content is list"),
    "not_an_object": ('["user", "hello"]', "is a JSON list, expected an object"),
    "messages_missing": ('{"conversation": []}', "has no 'messages' field"),
    "not_json": ('{"messages": [', "not valid JSON"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_conversation_lines_exit_2_naming_file_and_line(tmp_path, capsys, case):
    line, expect = BAD[case]
    good = [json.dumps(r) for r in conversations(3)]
    src = tmp_path / "conv.jsonl"
    src.write_text("\n".join(good[:2] + [line] + good[2:]) + "\n")
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src)}])
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 2
    msg = one_error(err)
    assert f"{src}:3:" in msg and expect in msg
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("task,kind,expect", [
    ("sft", "jsonl", "a task: sft recipe takes conversations sources, not jsonl"),
    ("pretrain", "conversations", "a conversations source needs task: sft"),
    ("sft", "preferences", "a task: sft recipe takes conversations sources, not preferences"),
])
def test_task_and_source_kind_must_match(tmp_path, capsys, task, kind, expect):
    src = write_jsonl(tmp_path / "x.jsonl", conversations(3))
    recipe = write_chat_recipe(tmp_path, [{"kind": kind, "path": str(src)}], task=task)
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 2
    msg = one_error(err)
    assert "domains.pydoc.sources[0].kind" in msg and expect in msg


def test_base_tokenizer_keeps_every_id_and_appends_the_template_tokens(tmp_path, capsys):
    from chat_helpers import docstring_answers

    base = train_tokenizer([a for _, a in docstring_answers()], 450)
    save_tokenizer(base, tmp_path / "base.json")
    src = write_jsonl(tmp_path / "conv.jsonl", conversations(40))
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src)}],
                               tokenizer={"path": str(tmp_path / "base.json")})
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 0, err
    tok = load_tokenizer(tmp_path / "data" / "tokenizer.json")
    n = base.get_vocab_size()
    assert all(tok.token_to_id(t) == i for t, i in base.get_vocab().items())
    assert (tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")) == (n, n + 1)
    assert tok.get_vocab_size() == n + 2
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == n + 2
    assert manifest["tokenizer"]["added_tokens"] == {"<|im_start|>": n, "<|im_end|>": n + 1}
    assert load_tokenizer(tmp_path / "base.json").get_vocab_size() == n  # the base file is untouched


def test_dpo_pairs_stay_adjacent_through_dedup_and_split(tmp_path, capsys):
    records = preferences(80)
    records.insert(10, {**records[3], "id": "dup-of-3"})  # the same pair again: dropped whole
    records.insert(20, {"id": "same", "prompt": "What?", "chosen": "This.", "rejected": "This."})
    src = write_jsonl(tmp_path / "pairs.jsonl", records)
    recipe = write_chat_recipe(tmp_path, [{"kind": "preferences", "path": str(src), "id_field": "id"}], task="dpo")
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 0, err
    out = tmp_path / "data"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "dpo"
    stats = json.loads((out / "stats.json").read_text())
    assert stats["extract"]["pydoc"]["skipped"] == {"identical_pair": 1}
    assert stats["exact_dedup"]["pydoc"]["removed"]["exact_duplicate"]["docs"] == 1
    template = template_of(out)
    by_id = {r["id"]: r for r in records}
    total = 0
    for split in ("train", "validation"):
        conv = Conversations(out, "pydoc", split)
        ids = Shard(out, "pydoc", split, manifest["dtype"]).doc_ids()
        assert len(conv) % 2 == 0 and len(ids) == len(conv)
        total += len(conv) // 2
        for i in range(0, len(conv), 2):
            assert ids[i].endswith("#chosen") and ids[i + 1] == ids[i].replace("#chosen", "#rejected")
            rec = by_id[ids[i].split(":")[-1].removesuffix("#chosen")]
            (a, ma), (b, mb) = conv.conversation(i), conv.conversation(i + 1)
            assert template.decode(a[ma == 1]) == rec["chosen"] + IM_END
            assert template.decode(b[mb == 1]) == rec["rejected"] + IM_END
            assert template.decode(a[ma == 0]) == template.decode(b[mb == 0])  # the same prompt
    assert total == 80 and manifest["domains"]["pydoc"]["chat"]["train"]["pairs"] * 2 == len(Conversations(out, "pydoc", "train"))


def test_preference_answers_must_end_with_the_assistant(tmp_path, capsys):
    records = preferences(20)
    records[4] = {**records[4], "chosen": [{"role": "user", "content": "not an answer"}]}
    src = write_jsonl(tmp_path / "pairs.jsonl", records)
    recipe = write_chat_recipe(tmp_path, [{"kind": "preferences", "path": str(src)}], task="dpo")
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 0, err
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["extract"]["pydoc"]["skipped"] == {"no_assistant_answer": 1}
    assert "no_assistant_answer" in err or "preference pairs whose answer" in err


def test_conversations_reader_refuses_a_missing_or_short_mask(built, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    mask = copy / "shards" / "pydoc" / "train.mask.bin"
    mask.write_bytes(mask.read_bytes()[:-3])
    with pytest.raises(GlassroomError, match=r"train\.mask\.bin: holds \d+ mask bytes, the shard has \d+ tokens"):
        Conversations(copy, "pydoc", "train")
    mask.unlink()
    with pytest.raises(GlassroomError, match=r"train\.mask\.bin: missing; rebuild"):
        Conversations(copy, "pydoc", "train")
    assert np.asarray(Conversations(built, "pydoc", "train").mask).max() == 1


def test_pretraining_recipes_resolve_and_hash_as_before(tmp_path):
    """The keys added for conversation data are absent from a pretraining recipe's resolved form (the hash
    changed once, when dedup.recall/examples and the quality and decontaminate sections were added)."""
    from glassroom.data.recipe import load_recipe, recipe_dict, recipe_hash

    from train_helpers import ROOT

    tiny = load_recipe(ROOT / "experiments" / "data-tiny.yaml")
    resolved = recipe_dict(tiny)
    assert "task" not in resolved
    assert all("split" not in s and "messages_field" not in s for d in resolved["domains"].values() for s in d["sources"])
    assert recipe_hash(tiny) == "sha256:94a9863e2d287ed9bb5844b4e1c5b1b0e790c8ff8bbc8d4f247492ac831e9023"
    src = write_jsonl(tmp_path / "c.jsonl", conversations(2))
    chat = recipe_dict(load_recipe(write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src), "split": "train"}])))
    assert chat["task"] == "sft" and chat["domains"]["pydoc"]["sources"][0]["split"] == "train"


def test_a_source_of_only_unanswered_conversations_is_one_line(tmp_path, capsys):
    records = [{"turns": [{"role": "user", "content": f"What does {q} do?"}]} for q in ("glob.glob", "json.dumps")]
    src = write_jsonl(tmp_path / "q.jsonl", records)
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src), "messages_field": "turns"}])
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 2
    msg = one_error(err)
    assert "gave no text" in msg and "conversations without an assistant message 2" in msg and f"{src}:1" in msg


def test_every_source_forced_to_train_is_one_line(tmp_path, capsys):
    src = write_jsonl(tmp_path / "c.jsonl", conversations(10))
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src), "split": "train"}])
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 2
    assert "domain pydoc: no documents in validation" in one_error(err)


def test_short_and_near_duplicate_conversations_are_kept(tmp_path, capsys):
    """min_bytes does not apply to conversations, and dedup is exact only (a changed word is kept)."""
    records = conversations(30)
    near = json.loads(json.dumps(records[7]))
    near["id"] = "near-7"
    near["messages"][-1]["content"] = near["messages"][-1]["content"].replace(" ", "  ", 1)
    records.append(near)
    src = write_jsonl(tmp_path / "c.jsonl", records)
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(src), "id_field": "id"}],
                               clean={"min_bytes": 5000, "max_bytes": 100000})
    code, _, err = build(recipe, tmp_path / "data", capsys)
    assert code == 0, err
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["filter"]["pydoc"]["removed"] == {} and stats["fuzzy_dedup"]["pydoc"]["removed"] == {}
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["totals"]["train"]["documents"] + manifest["totals"]["validation"]["documents"] == 31
    assert manifest["recipe"]["clean"]["min_bytes"] == 5000 and manifest["recipe"]["dedup"]["fuzzy"] is True
