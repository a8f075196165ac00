"""Conversation and preference sources (`kind: conversations` / `kind: preferences`) as documents.

Both read JSONL (optionally .gz) or Parquet files. A conversation record holds a `messages` list
(field name: `messages_field`) of {"role": system|user|assistant, "content": str} (or a list of
OpenAI-style text parts {"type": "text", "text": str}, joined); a preference
record holds `prompt` (a string = one user message, or a messages list), `chosen` and `rejected`
(a string = one assistant message, or a messages list ending with the assistant's answer).

A malformed record is the user's mistake and stops the build with one line naming file:line (a
line that is not JSON or not an object, the messages field missing, an unknown role, a content
that is not a string). Records that are well formed but useless for training are skipped and
counted in the source report (the build's funnel) under a named reason:
  no_assistant_turn    a conversation without any assistant message
  last_not_assistant   a conversation whose last message is not the assistant's (nothing to answer)
  no_assistant_answer  a preference whose chosen or rejected is a list not ending with an assistant message
  identical_pair       a preference whose chosen and rejected answers are the same text (whitespace aside)

A pair whose chosen and rejected lists differ before their final answer compares answers to two
different conversations, and one whose answers follow an assistant message has no question to
answer: each is one line naming file:line.

Each document is {id, text, domain, source, chat, [split]}: `text` is the conversation rendered as
template text (chat.render_text; a pair renders both documents), used by exact dedup and the
quality filters; `chat` is {"messages": [...]} or {"prompt": [...], "chosen": [...], "rejected": [...]}.
Message contents are normalised as the text of other sources is (NFC, CR LF to LF).
"""

from __future__ import annotations

import gzip
import re
import unicodedata
from pathlib import Path
from typing import Iterator

from glassroom.data.chat import check_messages, render_text
from glassroom.errors import GlassroomError
from glassroom.numbers import loads as json_loads

CHAT_KINDS = ("conversations", "preferences")
SKIP_REASONS = ("no_assistant_turn", "last_not_assistant", "no_assistant_answer", "identical_pair")


def _records(path: Path, fields: list[str]) -> Iterator[tuple[str, object]]:
    """(where, record) of each JSONL line or Parquet row of `path`."""
    if path.suffix == ".parquet" or path.name.endswith(".parq"):
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not parquet
            raise GlassroomError(f"{path}: not a readable Parquet file ({str(exc)[:120]})") from None
        missing = [f for f in fields if f not in pf.schema_arrow.names]
        if missing:
            raise GlassroomError(f"{path}: no column {missing[0]!r}; set the field names in the recipe source")
        row = 0
        for batch in pf.iter_batches(batch_size=1024):
            for record in batch.to_pylist():
                row += 1
                yield f"{path}:row {row}", record
        return
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as fh:  # -sig: a leading BOM is not data
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json_loads(line)
                except (ValueError, RecursionError) as exc:
                    why = "too deep" if isinstance(exc, RecursionError) else getattr(exc, "msg", str(exc))
                    raise GlassroomError(f"{path}:{lineno}: not valid JSON ({why}); "
                                         "each line must be one JSON object") from None
                yield f"{path}:{lineno}", record
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise GlassroomError(f"{path}: cannot be read ({' '.join(str(exc).split())[:120]})") from None


_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone "\\ud800" escape in JSON: text that UTF-8 cannot write


def _norm(text: str) -> str:
    """NFC, LF line ends, and a lone surrogate as U+FFFD (like an invalid UTF-8 byte in the file)."""
    text = _SURROGATE.sub("\ufffd", text)
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


def _messages(value, where: str, name: str, default_role: str) -> list[dict]:
    """A messages list from a string (one message of `default_role`) or a list, checked and normalised."""
    if isinstance(value, str):
        value = [{"role": default_role, "content": value}]
    where = f"{where}: {name}" if name != "messages" else where
    if isinstance(value, list):
        value = [_text_parts(m, i, where) for i, m in enumerate(value)]
    check_messages(value, where)
    return [{"role": m["role"], "content": _norm(m["content"])} for m in value]


def _json_list(value, where: str, field: str):
    """A messages field stored as a JSON string (common in Parquet exports) as the list it spells."""
    if not isinstance(value, str):
        return value
    try:
        decoded = json_loads(value)
    except (ValueError, RecursionError):
        decoded = None
    if not isinstance(decoded, list):
        raise GlassroomError(f"{where}: {field!r} is a string, not a list of messages (nor a JSON text of one)")
    return decoded


def _text_parts(msg, i: int, where: str):
    """A message whose content is a list of text parts (OpenAI style) with its parts joined."""
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, list):
        return msg
    for j, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            what = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise GlassroomError(f"{where}: messages[{i}] content is list and content[{j}] is {what!r}, not a text "
                                 "part ({\"type\": \"text\", \"text\": ...}); give a string or text parts")
    return {**msg, "content": "".join(part["text"] for part in content)}


def _field(record, name: str, where: str):
    if not isinstance(record, dict):
        raise GlassroomError(f"{where}: is a JSON {type(record).__name__}, expected an object with {name!r}")
    if name not in record:
        raise GlassroomError(f"{where}: has no {name!r} field; set the field name in the recipe source")
    if record[name] is None:
        raise GlassroomError(f"{where}: {name!r} is null; give it a value or remove the record")
    return record[name]


def conversation_records(cfg, path: Path, report) -> Iterator[tuple[str, str, dict]]:
    """(key, where, chat) of each usable record of one file; skips are counted in `report`."""
    if cfg.kind == "conversations":
        field = cfg.messages_field or "messages"
        fields = [field] + ([cfg.id_field] if cfg.id_field else [])
        for where, record in _records(path, fields):
            messages = _messages(_json_list(_field(record, field, where), where, field), where, "messages", "user")
            roles = [m["role"] for m in messages]
            if "assistant" not in roles:
                report.skip("no_assistant_turn", where)
            elif roles[-1] != "assistant":
                report.skip("last_not_assistant", where)
            else:
                yield _key(record, cfg, where), where, {"messages": messages}
        return
    fields = ["prompt", "chosen", "rejected"] + ([cfg.id_field] if cfg.id_field else [])
    for where, record in _records(path, fields):
        prompt = _messages(_field(record, "prompt", where), where, "prompt", "user")
        chosen = _messages(_field(record, "chosen", where), where, "chosen", "assistant")
        rejected = _messages(_field(record, "rejected", where), where, "rejected", "assistant")
        if chosen[-1]["role"] != "assistant" or rejected[-1]["role"] != "assistant":
            report.skip("no_assistant_answer", where)
            continue
        if chosen[:-1] != rejected[:-1]:
            raise GlassroomError(f"{where}: chosen and rejected differ before their final answer; a pair compares "
                                 "two answers to the same conversation: put the shared turns in prompt")
        if (prompt + chosen[:-1])[-1]["role"] == "assistant":
            raise GlassroomError(f"{where}: the answers follow an assistant message (the prompt ends with one); "
                                 "a prompt ends with the user's turn the answers reply to")
        if _squeezed(chosen) == _squeezed(rejected):
            report.skip("identical_pair", where)
        else:
            yield _key(record, cfg, where), where, {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def _squeezed(messages: list[dict]) -> list[tuple[str, str]]:
    """(role, content with whitespace runs collapsed): answers that differ only in spacing are the same."""
    return [(m["role"], " ".join(m["content"].split())) for m in messages]


def _key(record: dict, cfg, where: str) -> str:
    if cfg.id_field and record.get(cfg.id_field) is not None:
        return _SURROGATE.sub("\ufffd", f"{where.rsplit(':', 1)[0]}:{record[cfg.id_field]}")
    return where


def chat_text(chat: dict) -> list[str]:
    """The rendered template text of each document a record makes (one, or two for a pair)."""
    if "messages" in chat:
        return [render_text(chat["messages"])]
    return [render_text(chat["prompt"] + chat["chosen"]), render_text(chat["prompt"] + chat["rejected"])]


def iter_conversations(cfg, files: list[Path], domain: str, report) -> Iterator[dict]:
    """Documents of a conversations/preferences source, within its max_docs / max_bytes caps."""
    label = cfg.label
    for path in files:
        for key, _where, chat in conversation_records(cfg, path, report):
            text = "".join(chat_text(chat))
            size = len(text.encode())
            if cfg.max_docs is not None and report.docs >= cfg.max_docs:
                return
            if cfg.max_bytes is not None and report.bytes + size > cfg.max_bytes and report.docs:
                return
            report.docs += 1
            report.bytes += size
            doc = {"id": f"{label}/{key.lstrip('/')}", "text": text, "domain": domain, "source": label, "chat": chat}
            if cfg.split:
                doc["split"] = cfg.split
            yield doc


def encode_chat(template, docs: list[dict], dtype) -> tuple:
    """Render staged conversation documents into one shard batch.

    Returns (ids, offsets, mask, written, counts): `written` is one {id, source, bytes} per shard
    document (a preference pair gives two, `#chosen` then `#rejected`, adjacent), `counts` adds up
    conversations, pairs, turns (messages), tokens and assistant (mask-1) tokens.
    """
    import numpy as np

    convs, last_only, written = [], [], []
    counts = {"conversations": 0, "pairs": 0, "turns": 0, "tokens": 0, "assistant_tokens": 0}
    for doc in docs:
        chat = doc["chat"]
        if "messages" in chat:
            parts = [("", chat["messages"])]
        else:
            parts = [("#chosen", chat["prompt"] + chat["chosen"]), ("#rejected", chat["prompt"] + chat["rejected"])]
            counts["pairs"] += 1
        for suffix, messages in parts:
            convs.append(messages)
            last_only.append(bool(suffix))
            counts["turns"] += len(messages)
            written.append({"id": doc["id"] + suffix, "source": doc["source"],
                            "bytes": len(render_text(messages).encode())})
    rendered = template.render_many([c for c, lo in zip(convs, last_only) if not lo])
    pairs = iter(template.render_many([c for c, lo in zip(convs, last_only) if lo], last_only=True))
    plain = iter(rendered)
    out = [next(pairs) if lo else next(plain) for lo in last_only]
    counts["conversations"] = len(out)
    lengths = np.fromiter((len(ids) for ids, _ in out), dtype=np.int64, count=len(out))
    offsets = np.zeros(len(out) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([i for i, _ in out]).astype(dtype) if out else np.zeros(0, dtype)
    mask = np.concatenate([m for _, m in out]) if out else np.zeros(0, np.uint8)
    counts["tokens"] = int(len(ids))
    counts["assistant_tokens"] = int(mask.sum())
    return ids, offsets, mask, written, counts


def tokenizer_texts(chat: dict) -> list[str]:
    """The message contents of a record, for training a tokenizer (no template markers)."""
    messages = chat.get("messages") or chat["prompt"] + chat["chosen"] + chat["rejected"]
    return [m["content"] for m in messages]
