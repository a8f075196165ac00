"""Red-team tests of conversation data: what a careless or hostile user feeds `glassroom data build`
(task sft/dpo), the chat template and `glassroom data chatset`. Each test pins a hole that was found
and fixed: it fails without the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chat_helpers import conversations, preferences, write_chat_recipe, write_jsonl
from glassroom.cli import main
from glassroom.data.chat import ChatTemplate
from glassroom.data.tokenizer import train_tokenizer


def build(recipe, out, capsys, *extra):
    code = main(["data", "build", str(recipe), "--out", str(out), "--workers", "1", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def sft_recipe(tmp_path, records, name="c.jsonl", **source):
    path = write_jsonl(tmp_path / name, records)
    return write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(path), **source}])


def test_jsonl_with_a_bom_and_crlf_lines_builds(tmp_path, capsys):
    """A JSONL saved by a Windows editor (UTF-8 BOM, CRLF, blank lines) reads like any other."""
    lines = [json.dumps(r) for r in conversations(40)]
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n\r\n")
    recipe = write_chat_recipe(tmp_path, [{"kind": "conversations", "path": str(path)}])
    code, _, err = build(recipe, tmp_path / "out", capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["domains"]["pydoc"]["sources"][0]["documents"] == 40


@pytest.fixture(scope="module")
def newline_template():
    texts = ["assistant\n\n\nfoo bar\n\n\n  baz\n\n\n\n\tqux " * 3] * 50 + ["hello world assistant user"] * 50
    return ChatTemplate.for_tokenizer(train_tokenizer(texts, 600))


@pytest.mark.parametrize("content", ["\n\nfoo", "\n\n\n\nbar", "  baz", "\n", "😀 日本語 e\u0301 👨\u200d👩\u200d👧"])
def test_mask_is_exactly_the_answer_when_it_starts_with_whitespace(newline_template, content):
    """An answer starting with newlines or spaces: BPE merged them with the header's "\\n", so the mask
    trained the header and decoded to a longer text, and the prompt generation continues was not a
    prefix of the trained ids."""
    t = newline_template
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}]
    ids, mask = t.render(messages)
    trained = ids[mask == 1]
    assert trained[-1] == t.im_end_id
    assert t.decode(trained[:-1]) == content
    prompt = t.prompt(messages[:1])
    assert np.array_equal(ids[:len(prompt)], prompt)
    assert not mask[:len(prompt)].any()
