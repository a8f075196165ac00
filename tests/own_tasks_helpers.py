"""A researcher's own lm-eval task folder, hand-written as docs/eval.md's example ("Your own tasks"):
my_qa (multiple choice over a JSONL file) and my_prose (rolling log-likelihood over a JSONL file),
and a tiny untrained glassroom model exported as a Hugging Face folder to score them on."""

from __future__ import annotations

import json
import shutil
import sysconfig
from pathlib import Path

import yaml

from train_helpers import TINY

from glassroom.config import apply_overrides
from glassroom.data.tokenizer import save_tokenizer, train_tokenizer
from glassroom.hf.export import write_folder
from glassroom.model.config import model_config_from_mapping
from glassroom.model.transformer import build_model

MAX_LENGTH = 48

# Eight questions with four answers; the last two share every token but the split between
# context and answer (lm-eval's logits cache scores the second one wrong: docs/eval.md).
QUESTIONS = [
    ("The capital of France is", [" Paris.", " a river.", " green.", " seven."], 0),
    ("Water boils at a temperature of", [" one hundred degrees.", " blue.", " the moon.", " yesterday."], 0),
    ("The opposite of hot is", [" loud.", " cold.", " square.", " seven."], 1),
    ("A week has", [" seven days.", " three wheels.", " no colour.", " a roof."], 0),
    ("Cats are animals that", [" fly to the sun.", " are made of glass.", " often chase mice.", " grow on trees."], 2),
    ("To open a locked door you need", [" a spoon of rain.", " the key.", " a loud song.", " the letter Q."], 1),
    ("The cat sat", [" on the mat.", " in the hat.", " under a cloud.", " to eat."], 0),
    ("The cat sat on", [" the mat.", " a dog.", " seven.", " the moon."], 0),
]

MC_YAML = """\
task: my_qa
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: choices
doc_to_target: answer
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

ROLLING_YAML = """\
task: my_prose
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: text
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
"""


def stdlib_text(name: str, chars: int) -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text(encoding="utf-8")[:chars]


def write_own_tasks(root: Path) -> Path:
    """A hand-written folder: my_qa (multiple choice over qa.jsonl) and my_prose (rolling
    log-likelihood over prose.jsonl, documents longer than MAX_LENGTH tokens)."""
    root.mkdir(parents=True)
    with (root / "qa.jsonl").open("w", encoding="utf-8") as f:
        for question, choices, answer in QUESTIONS:
            f.write(json.dumps({"question": question, "choices": choices, "answer": answer}) + "\n")
    with (root / "prose.jsonl").open("w", encoding="utf-8") as f:
        for name in ("textwrap.py", "shlex.py", "this.py"):
            f.write(json.dumps({"text": stdlib_text(name, 600)}) + "\n")
    (root / "my_qa.yaml").write_text(MC_YAML.format(data=root / "qa.jsonl"))
    (root / "my_prose.yaml").write_text(ROLLING_YAML.format(data=root / "prose.jsonl"))
    return root


def write_hf_model(root: Path) -> Path:
    """A dense tiny glassroom model (untrained) exported as a Hugging Face folder (Llama) in root/hf."""
    texts = [stdlib_text(name, 20_000) for name in ("json/decoder.py", "textwrap.py", "string.py", "shlex.py")]
    tok = train_tokenizer(texts + [q for q, _, _ in QUESTIONS], 512)
    save_tokenizer(tok, root / "tokenizer.json")
    raw = apply_overrides(yaml.safe_load(TINY.read_text()), ["model.moe=", f"model.vocab_size={tok.get_vocab_size()}",
                                                              "model.max_seq_len=64"])
    state = build_model(model_config_from_mapping({"model": raw["model"]}), seed=0).state_dict()
    return write_folder(root / "hf", raw["model"], state, root / "tokenizer.json")


def copy_tasks(own_tasks: Path, out: Path) -> Path:
    """A copy of the hand-written folder whose YAML read the copy's data files."""
    shutil.copytree(own_tasks, out)
    for path in out.glob("*.yaml"):
        path.write_text(path.read_text().replace(str(own_tasks), str(out)))
    return out
