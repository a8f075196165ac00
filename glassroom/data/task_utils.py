"""Copied into a dataset's tasks/ folder as utils.py: what its lm-eval task files call.

It must run wherever lm-eval runs, with or without glassroom installed: standard library and
`datasets` only. The JSONL documents are found beside this file, so the folder can move.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_docs(file=None, **_):
    """custom_dataset: the task's JSONL (named by dataset_kwargs.file) as a `test` split, offline."""
    import json

    import datasets

    rows = [json.loads(line) for line in (HERE / file).read_text(encoding="utf-8").splitlines() if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def bpb_results(doc, results):
    """process_results of the rolling tasks: (log-likelihood, UTF-8 bytes the trainer counts)."""
    (loglikelihood,) = results
    return {"bits_per_byte": (loglikelihood, float(doc["n_bytes"]))}
