"""Conversations and preference pairs made from real text on this machine (the docstrings of Python's
own standard library), and recipes that build them, for the chat template and chat data tests."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import yaml

MODULES = ("textwrap", "json", "shlex", "string", "posixpath", "fnmatch", "base64", "difflib", "glob", "heapq",
           "bisect", "calendar", "colorsys", "html", "keyword", "operator", "statistics", "zlib")


def docstring_answers() -> list[tuple[str, str]]:
    """(qualified name, first paragraph of its docstring) for public functions of MODULES."""
    import importlib

    found = []
    for name in MODULES:
        mod = importlib.import_module(name)
        for attr, obj in sorted(vars(mod).items()):
            if attr.startswith("_") or not callable(obj):
                continue
            doc = inspect.getdoc(obj)
            para = doc.split("\n\n")[0].strip() if doc else ""
            if len(para) > 20:
                found.append((f"{name}.{attr}", para))
    return found


def conversations(n: int | None = None) -> list[dict]:
    """{"id", "messages"} records: a user asks what a function does, the assistant answers with its doc."""
    out = []
    for qual, answer in docstring_answers()[:n]:
        out.append({"id": qual, "messages": [
            {"role": "system", "content": "Answer from the Python documentation."},
            {"role": "user", "content": f"What does {qual} do?"},
            {"role": "assistant", "content": answer},
        ]})
    return out


def preferences(n: int | None = None) -> list[dict]:
    """{"id", "prompt", "chosen", "rejected"}: the true doc against the next function's doc."""
    items = docstring_answers()[:n]
    return [{"id": qual, "prompt": f"What does {qual} do?", "chosen": answer,
             "rejected": items[(i + 1) % len(items)][1]} for i, (qual, answer) in enumerate(items)]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_chat_recipe(root: Path, sources: list[dict], task: str = "sft", **top) -> Path:
    recipe = {"name": "chat-test", "task": task, "domains": {"pydoc": {"sources": sources}},
              "tokenizer": {"vocab_size": 400}, "split": {"validation_fraction": 0.2}, **top}
    path = root / f"recipe-{task}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path
