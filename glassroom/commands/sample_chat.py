"""`glassroom sample --chat`: the model's chat template, found where the model keeps it, as a function
from messages to prompt ids, and the ids that end an answer.

- A run folder: its dataset manifest's `chat_template` (data.path in the run's config.yaml, relative
  to the current folder like `glassroom export`), checked against the run's own tokenizer; a dataset
  no longer there: the template tokens of the run's tokenizer.json copy (what the run trained with).
- A Hugging Face folder: tokenizer_config.json's `chat_template`. glassroom's own template (an
  exported chat model) is rendered with glassroom.data.chat, ids spliced; any other template with
  transformers' `apply_chat_template` on the folder (offline), as the model's authors meant it.

The answer ends at `<|im_end|>` (when the tokenizer has it) or the end token (`<|endoftext|>`, or
generation_config.json's eos_token_id, one id or a list). No template: one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from glassroom.errors import GlassroomError
from glassroom.observe.run_folder import has_config

NO_TEMPLATE = ("--chat: {path} has no chat template ({why}); it is a pretrained model: drop --chat to continue "
               "text, or tune it on conversations (train.task: sft) and sample that run")


def chat_encoder(path: Path, tok, eos: int | None) -> tuple[Callable[[list[dict]], list[int]], set[int]]:
    """(messages -> prompt ids ending with the assistant header, stop ids) for the model at `path`."""
    from glassroom.data.chat import IM_END, IM_START, JINJA, ChatTemplate

    has_tokens = tok.token_to_id(IM_START) is not None and tok.token_to_id(IM_END) is not None
    if has_config(path):   # a run folder
        template = _manifest_template(path)
        if template is not None:
            try:
                chat = ChatTemplate.from_dict(template, tok)
            except GlassroomError as exc:   # the dataset rebuilt since, with another tokenizer
                raise GlassroomError(f"--chat: {path}: its dataset's chat_template does not fit the run's "
                                     f"tokenizer ({exc})") from None
        elif has_tokens:
            chat = ChatTemplate.for_tokenizer(tok)
        else:
            raise GlassroomError(NO_TEMPLATE.format(
                path=path, why=f"its dataset manifest has no chat_template and its tokenizer no {IM_START}"))
        return (lambda messages: [int(i) for i in chat.prompt(messages)]), set(chat.stop_ids)
    jinja = _tokenizer_config(path).get("chat_template")
    if not isinstance(jinja, str) or not jinja.strip():
        raise GlassroomError(NO_TEMPLATE.format(path=path, why="no chat_template in tokenizer_config.json"))
    stops = ({eos} | _generation_eos(path) | {tok.token_to_id(IM_END)}) - {None}
    if jinja == JINJA and has_tokens:
        chat = ChatTemplate.for_tokenizer(tok)
        return (lambda messages: [int(i) for i in chat.prompt(messages)]), stops | set(chat.stop_ids)
    return _transformers_encoder(path), stops


def _manifest_template(run_dir: Path) -> dict | None:
    """The chat_template of the run's dataset manifest, or None (no manifest there, or none in it)."""
    from glassroom.train.run_dir import saved_config

    data = saved_config(run_dir).get("data") or {}
    manifest = Path(str(data.get("path", ""))) / "manifest.json"
    try:
        value = json.loads(manifest.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


def _tokenizer_config(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise GlassroomError(f"{path}: not readable JSON ({str(exc)[:80]}); fix or re-export the folder") from None
    return value if isinstance(value, dict) else {}


def _generation_eos(folder: Path) -> set[int]:
    try:
        value = json.loads((folder / "generation_config.json").read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return set()
    values = value if isinstance(value, list) else [value]
    return {v for v in values if isinstance(v, int) and not isinstance(v, bool)}


def _transformers_encoder(folder: Path) -> Callable[[list[dict]], list[int]]:
    import os

    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(key, "1")   # a local folder: never the network
    from transformers import AutoTokenizer

    try:
        hf_tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:   # transformers raises many kinds for a broken folder
        raise GlassroomError(f"{folder}: transformers cannot read its tokenizer ({type(exc).__name__}: "
                             f"{str(exc)[:120]}); --chat needs it for the folder's chat_template") from None

    def encode(messages: list[dict]) -> list[int]:
        try:
            out = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        except Exception as exc:   # a template that refuses the messages (e.g. no system role)
            raise GlassroomError(f"{folder}: its chat_template refused the conversation ({type(exc).__name__}: "
                                 f"{str(exc)[:120]})") from None
        ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
        return [int(i) for i in ids]

    return encode
