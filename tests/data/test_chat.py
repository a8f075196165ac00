"""The chat template (glassroom/data/chat.py): ids spliced, the assistant loss mask, prompts, the
manifest form, malformed messages, and transformers' apply_chat_template on an exported folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chat_helpers import docstring_answers
from glassroom.data.chat import IM_END, IM_START, ChatTemplate, check_messages, render_text
from glassroom.data.tokenizer import EOS_TOKEN, train_tokenizer
from glassroom.errors import GlassroomError


@pytest.fixture(scope="module")
def tok():
    texts = [answer for _, answer in docstring_answers()]
    return train_tokenizer(texts, 500)


@pytest.fixture(scope="module")
def template(tok):
    return ChatTemplate.for_tokenizer(tok)


def real_conversation() -> list[dict]:
    (q1, a1), (q2, a2) = docstring_answers()[3:5]
    return [{"role": "system", "content": "Answer from the Python documentation."},
            {"role": "user", "content": f"What does {q1} do?"}, {"role": "assistant", "content": a1},
            {"role": "user", "content": f"And {q2}?"}, {"role": "assistant", "content": a2}]


def spans(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) runs of mask == 1."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def test_mask_is_exactly_each_assistant_content_and_its_im_end(template):
    messages = real_conversation()
    ids, mask = template.render(messages)
    assert ids.dtype == np.int64 and mask.dtype == np.uint8 and len(ids) == len(mask)
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    found = spans(mask)
    assert [template.decode(ids[a:b]) for a, b in found] == [a + IM_END for a in answers]
    for a, _ in found:  # the token before a trained span ends the "assistant\n" header
        assert template.decode(ids[:a]).endswith(f"{IM_START}assistant\n")
    assert template.decode(ids) == render_text(messages)  # ids decode to the jinja text
    assert ids[-1] == template.eos_id and mask[-1] == 0


def test_last_only_keeps_the_final_answer(template):
    ids, mask = template.render(real_conversation(), last_only=True)
    found = spans(mask)
    assert len(found) == 1
    assert template.decode(ids[found[0][0]:found[0][1]]) == real_conversation()[-1]["content"] + IM_END


def test_a_message_spelling_template_tokens_stays_text(template):
    text = f"Is {IM_END} the end? And {EOS_TOKEN} or {IM_START}assistant?"
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": f"No: {IM_END} is text here."}]
    ids, mask = template.render(messages)
    assert int((ids == template.im_end_id).sum()) == 2  # one per message, none from the text
    assert int((ids == template.im_start_id).sum()) == 2
    assert int((ids == template.eos_id).sum()) == 1
    assert template.decode(ids) == render_text(messages)
    a, b = spans(mask)[0]
    assert template.decode(ids[a:b]) == f"No: {IM_END} is text here.{IM_END}"


def test_tokens_are_appended_after_every_id_once(tok):
    fresh = train_tokenizer([a for _, a in docstring_answers()], 400)
    before = fresh.get_vocab_size()
    vocab = dict(fresh.get_vocab())
    t = ChatTemplate.for_tokenizer(fresh)
    assert (t.im_start_id, t.im_end_id) == (before, before + 1)
    assert fresh.get_vocab_size() == before + 2 and t.eos_id == fresh.token_to_id(EOS_TOKEN) == 0
    assert all(fresh.token_to_id(k) == v for k, v in vocab.items())
    ChatTemplate.for_tokenizer(fresh)
    assert fresh.get_vocab_size() == before + 2


def test_prompt_continues_into_the_answer_and_stop_ids(template):
    messages = real_conversation()
    ids, _ = template.render(messages)
    prompt = template.prompt(messages[:-1])
    assert template.decode(prompt).endswith(f"{IM_START}assistant\n")
    assert np.array_equal(ids[: len(prompt)], prompt)
    assert template.stop_ids == {template.im_end_id, template.eos_id}


def test_manifest_form_round_trips_and_refuses_another_tokenizer(template, tok):
    d = json.loads(json.dumps(template.to_dict()))
    again = ChatTemplate.from_dict(d, tok)
    assert (again.im_start_id, again.im_end_id, again.eos_id) == (template.im_start_id, template.im_end_id, template.eos_id)
    assert np.array_equal(again.render(real_conversation())[0], template.render(real_conversation())[0])
    with pytest.raises(GlassroomError, match="im_end_id"):
        ChatTemplate.from_dict({**d, "im_end_id": d["im_end_id"] + 7}, tok)
    with pytest.raises(GlassroomError, match="use the tokenizer the data was built with"):
        ChatTemplate.from_dict(d, train_tokenizer(["plain text only"] * 3, 300))


@pytest.mark.parametrize("messages,expect", [
    ([], "empty list"),
    ("hello", "expected a list"),
    ([{"role": "tool", "content": "x"}], "messages[0] has role 'tool'"),
    ([{"role": "user", "content": 3}], "messages[0] content is int"),
    ([{"role": "user"}], "messages[0] content is missing"),
    ([{"role": "user", "content": "a"}, ["user", "b"]], "messages[1] is list"),
])
def test_check_messages_is_one_line_naming_where(messages, expect):
    with pytest.raises(GlassroomError) as info:
        check_messages(messages, "chats.jsonl:12")
    assert str(info.value).startswith("chats.jsonl:12: ") and expect in str(info.value)
    assert "\n" not in str(info.value)
