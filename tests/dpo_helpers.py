"""Preference data for the DPO tests, from real text: sentences of the Python documentation on this
machine (python3.11-doc, the docs domain of experiments/data-tiny.yaml).

The learnable preference: chosen = a sentence as written, rejected = the same words in reverse
order, for the one prompt PROMPT. `build_pairs` writes them as train and held-out JSONL and builds a
`task: dpo` dataset with the base run's tokenizer (plus the template tokens)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import yaml

DOCS = Path("/usr/share/doc/python3.11/html/_sources")
PROMPT = "Write a sentence from the Python documentation."
WORD = re.compile(r"^[A-Za-z][a-z]*,?$")


def doc_sentences(n: int, min_words: int = 6, max_words: int = 9) -> list[str]:
    """The first n distinct sentences of min..max plain words in the docs (files in sorted order)."""
    seen: dict[str, None] = {}
    for path in sorted(DOCS.rglob("*.txt")):
        text = re.sub(r"\s+", " ", path.read_text(errors="replace"))
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            words = sentence.rstrip(".").split()
            if sentence.endswith(".") and min_words <= len(words) <= max_words and all(WORD.match(w) for w in words):
                seen.setdefault(sentence, None)
                if len(seen) == n:
                    return list(seen)
    raise AssertionError(f"only {len(seen)} sentences in {DOCS}")


def reversed_words(sentence: str) -> str:
    return " ".join(reversed(sentence.rstrip(".").split())) + "."


def write_pairs(path: Path, sentences: list[str]) -> Path:
    with open(path, "w") as f:
        for i, s in enumerate(sentences):
            f.write(json.dumps({"id": f"{path.stem}-{i}", "prompt": PROMPT, "chosen": s, "rejected": reversed_words(s)}) + "\n")
    return path


def build_pairs(root: Path, base_run: Path, n_train: int = 240, n_heldout: int = 48, extra: list[dict] = ()) -> Path:
    """A task: dpo dataset in root/data from n_train + n_heldout sentence pairs (plus `extra` records
    in the train file), tokenized with base_run's tokenizer."""
    from glassroom.data.build import build_dataset
    from glassroom.data.recipe import load_recipe

    sentences = doc_sentences(n_train + n_heldout)
    root.mkdir(parents=True, exist_ok=True)
    train = write_pairs(root / "train.jsonl", sentences[:n_train])
    with open(train, "a") as f:
        for record in extra:
            f.write(json.dumps(record) + "\n")
    heldout = write_pairs(root / "heldout.jsonl", sentences[n_train:])
    recipe = {"name": "dpo-test", "task": "dpo",
              "domains": {"docs": {"sources": [
                  {"kind": "preferences", "path": str(train), "split": "train"},
                  {"kind": "preferences", "path": str(heldout), "split": "validation"}]}},
              "tokenizer": {"path": str(base_run / "tokenizer.json")}}
    (root / "dpo.yaml").write_text(yaml.safe_dump(recipe))
    out = root / "data"
    build_dataset(load_recipe(root / "dpo.yaml"), out, workers=1, log=io.StringIO())
    return out
