"""The chat template (ChatML-style) and the conversation datasets it writes and reads.

A conversation is a list of {"role": system|user|assistant, "content": str}. Rendering splices the
ids of two special tokens, `<|im_start|>` and `<|im_end|>`, between the ids of each message's text;
the text is never tokenized together with the template's markers, so a message that spells
`<|im_end|>` stays text (encode_special_tokens=True), nor with its role header, so the mask is
exactly the content's ids and `prompt` is always a prefix of the rendered conversation. One
message renders as

    <|im_start|> ids("{role}\\n") ids(content) <|im_end|> ids("\\n")

and the conversation ends with EOS (`<|endoftext|>`). The loss mask is 1 on each assistant
message's content ids and its `<|im_end|>` (what the model must learn to produce), 0 elsewhere;
mask[i] = 1 means "predicting token i from tokens < i is trained". `last_only=True` (DPO pairs)
keeps only the final assistant message in the mask. `ChatTemplate.jinja` is the same template for
tokenizer_config.json, so transformers' apply_chat_template gives the same ids (two differences:
transformers matches a special token a message spells, and tokenizes "{role}\\n{content}" as one
text, so a content starting with whitespace may merge with the header's newline there).

`Conversations(dataset, domain, split)` reads one shard of a built conversation dataset together
with its `<split>.mask.bin` (uint8, one byte per token).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from glassroom.data.shards import Shard, check_manifest, read_manifest
from glassroom.data.tokenizer import EOS_TOKEN
from glassroom.errors import GlassroomError

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ROLES = ("system", "user", "assistant")
TEMPLATE_NAME = "chatml"
TASKS = ("pretrain", "sft", "dpo")

JINJA = (
    "{%- for message in messages -%}"
    "{{ '" + IM_START + "' + message['role'] + '\\n' + message['content'] + '" + IM_END + "' + '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '" + IM_START + "assistant\\n' }}"
    "{%- else -%}{{ '" + EOS_TOKEN + "' }}{%- endif -%}"
)


def render_text(messages: list[dict], add_generation_prompt: bool = False) -> str:
    """The conversation as template text: what `jinja` renders (the ids come from `render`)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else EOS_TOKEN)


def _backend(tok):
    """The `tokenizers.Tokenizer` behind `tok` (a transformers fast tokenizer wraps one)."""
    return getattr(tok, "backend_tokenizer", tok)


def check_messages(messages, where: str) -> None:
    """A one-line GlassroomError naming `where` (e.g. `file.jsonl:12`) for a malformed conversation."""
    if not isinstance(messages, list):
        raise GlassroomError(f"{where}: messages is {type(messages).__name__}, expected a list of "
                             "{\"role\", \"content\"} objects")
    if not messages:
        raise GlassroomError(f"{where}: messages is an empty list; a conversation needs at least one message")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise GlassroomError(f"{where}: messages[{i}] is {type(msg).__name__}, expected an object with role and content")
        role = msg.get("role")
        if "role" not in msg:
            raise GlassroomError(f"{where}: messages[{i}] has no 'role' (its keys: {', '.join(map(str, msg))[:80]}); "
                                 "each message needs 'role' and 'content' keys (rename ShareGPT's from/value)")
        if role not in ROLES:
            raise GlassroomError(f"{where}: messages[{i}] has role {role!r}; roles are {', '.join(ROLES)}")
        if not isinstance(msg.get("content"), str):
            got = "missing" if "content" not in msg else "null" if msg["content"] is None else type(msg["content"]).__name__
            raise GlassroomError(f"{where}: messages[{i}] content is {got}, expected a string")


def _make_special(backend) -> None:
    """Marks the template tokens and EOS special when a tokenizer has them as ordinary (added or
    vocabulary) tokens: a special token is never matched inside text (encode_special_tokens), so a
    message that spells one stays text. Ids do not change."""
    from tokenizers import AddedToken

    added = backend.get_added_tokens_decoder()
    plain = [t for t in (IM_START, IM_END, EOS_TOKEN) if (i := backend.token_to_id(t)) is not None
             and not (i in added and added[i].special)]
    if plain:
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in plain])


class ChatTemplate:
    """Renders conversations to (ids, mask) with the template tokens' ids spliced in."""

    def __init__(self, tok, im_start_id: int, im_end_id: int, eos_id: int) -> None:
        self.tok = _backend(tok)
        self.im_start_id, self.im_end_id, self.eos_id = int(im_start_id), int(im_end_id), int(eos_id)
        _make_special(self.tok)
        spelled = self._encode([IM_START + IM_END + EOS_TOKEN, "\n"])
        if set(spelled[0]) & {self.im_start_id, self.im_end_id, self.eos_id}:
            raise GlassroomError(f"the tokenizer turns the text {IM_START}{IM_END}{EOS_TOKEN} into the template's own "
                                 "ids (ordinary vocabulary entries); use a tokenizer where they are special tokens")
        if self.decode(spelled[1]) != "\n":
            raise GlassroomError(f"the tokenizer cannot encode a newline (it gives ids {spelled[1]}); the chat template "
                                 "needs one that keeps text byte for byte, like the byte-level BPE glassroom trains")
        self.newline = spelled[1]

    # ------------------------------------------------------------------ construction

    @classmethod
    def for_tokenizer(cls, tok) -> "ChatTemplate":
        """The template for `tok`; appends the missing template tokens to it in place (ids after
        every existing id). `tok` must have the `<|endoftext|>` EOS token."""
        backend = _backend(tok)
        eos = backend.token_to_id(EOS_TOKEN)
        if eos is None:
            raise GlassroomError(f"the tokenizer has no {EOS_TOKEN} token; chat data needs it as the end of a conversation")
        missing = [t for t in (IM_START, IM_END) if backend.token_to_id(t) is None]
        if missing:
            from tokenizers import AddedToken

            if backend is not tok:
                raise GlassroomError(f"the tokenizer lacks {', '.join(missing)}; add them to its tokenizer.json "
                                     "(glassroom data build does) before using it for chat")
            backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
        return cls(backend, backend.token_to_id(IM_START), backend.token_to_id(IM_END), eos)

    @classmethod
    def from_dict(cls, d, tok) -> "ChatTemplate":
        """The template a dataset manifest recorded (`to_dict`), checked against `tok`'s ids."""
        if not isinstance(d, dict) or d.get("name") != TEMPLATE_NAME:
            raise GlassroomError(f"chat_template {str(d)[:60]!r} is not a {TEMPLATE_NAME} template; rebuild the dataset")
        backend = _backend(tok)
        for key, token in (("im_start_id", IM_START), ("im_end_id", IM_END), ("eos_id", EOS_TOKEN)):
            have = backend.token_to_id(token)
            if have is None or have != d.get(key):
                raise GlassroomError(f"the tokenizer's {token} is id {have}, the data's chat_template.{key} is "
                                     f"{d.get(key)}; use the tokenizer the data was built with")
        return cls(backend, d["im_start_id"], d["im_end_id"], d["eos_id"])

    def to_dict(self) -> dict:
        return {"name": TEMPLATE_NAME, "im_start": IM_START, "im_end": IM_END, "eos": EOS_TOKEN,
                "im_start_id": self.im_start_id, "im_end_id": self.im_end_id, "eos_id": self.eos_id,
                "mask": "assistant content and its <|im_end|>", "jinja": self.jinja}

    @property
    def jinja(self) -> str:
        return JINJA

    @property
    def stop_ids(self) -> set[int]:
        return {self.im_end_id, self.eos_id}

    # ------------------------------------------------------------------ rendering

    def _encode(self, texts: list[str]) -> list[list[int]]:
        self.tok.encode_special_tokens = True  # template-token text inside a message stays text
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def render_many(self, conversations: list[list[dict]], last_only: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """`render` of each conversation, encoding all their messages in one batch."""
        # "{role}\n" and the content are encoded apart: a content starting with whitespace would
        # otherwise merge with the header's "\n" (the mask would train the header, and the ids would
        # not continue `prompt`'s "assistant\n" as generation sees it)
        headers = {role: self._encode([f"{role}\n"])[0] for role in ROLES}
        texts = [m["content"] for conv in conversations for m in conv]
        encoded = iter(self._encode(texts)) if texts else iter(())
        out = []
        for conv in conversations:
            last_assistant = max((i for i, m in enumerate(conv) if m["role"] == "assistant"), default=-1)
            ids: list[int] = []
            mask: list[int] = []
            for i, msg in enumerate(conv):
                content_ids = next(encoded)
                trained = msg["role"] == "assistant" and (not last_only or i == last_assistant)
                ids.append(self.im_start_id)
                ids.extend(headers[msg["role"]])
                mask.extend([0] * (1 + len(headers[msg["role"]])))
                ids.extend(content_ids)
                mask.extend([int(trained)] * len(content_ids))
                ids.append(self.im_end_id)
                ids.extend(self.newline)
                mask.extend([int(trained)] + [0] * len(self.newline))
            ids.append(self.eos_id)
            mask.append(0)
            out.append((np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=np.uint8)))
        return out

    def render(self, messages: list[dict], last_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64, mask uint8) of one conversation, ending with EOS."""
        check_messages(messages, "conversation")
        return self.render_many([messages], last_only)[0]

    def prompt(self, messages: list[dict]) -> np.ndarray:
        """The conversation so far, then `<|im_start|>` + "assistant\\n": what generation continues."""
        if messages:
            check_messages(messages, "conversation")
            ids = self.render_many([messages])[0][0][:-1]  # without EOS
        else:
            ids = np.zeros(0, dtype=np.int64)
        head = self._encode(["assistant\n"])[0]
        return np.concatenate([ids, np.asarray([self.im_start_id, *head], dtype=np.int64)])

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)


def mask_path(dataset: str | Path, domain: str, split: str) -> Path:
    return Path(dataset) / "shards" / domain / f"{split}.mask.bin"


class Conversations:
    """One domain/split of a conversation dataset: tokens, mask and conversation offsets."""

    def __init__(self, dataset: str | Path, domain: str, split: str) -> None:
        root = Path(dataset)
        manifest = read_manifest(root)
        check_manifest(manifest, root / "manifest.json")
        self.task = manifest.get("task", "pretrain")
        if self.task not in ("sft", "dpo"):
            raise GlassroomError(f"{root}: not a conversation dataset (manifest task is {self.task!r}); build one "
                                 "with a recipe that says task: sft or task: dpo")
        if domain not in manifest["domains"]:
            raise GlassroomError(f"{root}: has no domain {domain!r} (it has {', '.join(manifest['domains'])})")
        self.template = manifest.get("chat_template")
        shard = Shard(root, domain, split, manifest["dtype"])
        self.shard = shard
        self.tokens = shard.tokens
        self.offsets = shard.doc_offsets
        path = mask_path(root, domain, split)
        if not path.is_file():
            what = "missing" if not os.path.lexists(path) else "not a regular file"
            raise GlassroomError(f"{path}: {what}; rebuild the dataset with glassroom data build")
        size = path.stat().st_size
        if size != len(self.tokens):
            raise GlassroomError(f"{path}: holds {size} mask bytes, the shard has {len(self.tokens)} tokens "
                                 "(corrupt); rebuild the dataset with glassroom data build")
        self.mask = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        if size and int(self.mask.max()) > 1:  # the trainers weight targets by it: 5 would count five times
            raise GlassroomError(f"{path}: holds bytes other than 0 and 1 (corrupt); rebuild the dataset with "
                                 "glassroom data build")
        if self.task == "dpo" and len(self) % 2:
            raise GlassroomError(f"{shard.paths['tokens']}: a DPO shard holds an odd number of documents "
                                 f"({len(self)}); pairs are (chosen, rejected): rebuild the dataset")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def conversation(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, mask) of conversation i, EOS included."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return np.asarray(self.tokens[lo:hi]), np.asarray(self.mask[lo:hi])
