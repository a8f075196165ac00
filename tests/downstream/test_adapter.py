"""Downstream evaluation: local lm-eval tasks (glassroom data tasks), the model adapter, scores in
the store from `glassroom eval` and from train.eval_tasks, and agreement with lm-eval's own
Hugging Face model on the exported folder and with the trainer's bits per byte."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from downstream_helpers import SEQ_LEN, WINDOWS, dataset_with_tasks, train_run
from hf_helpers import OFFLINE, export_folder
from train_helpers import run_train

from glassroom.observe.store import StoreReader

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def dataset(tiny_dataset, tmp_path_factory) -> Path:
    return dataset_with_tasks(tiny_dataset, tmp_path_factory.mktemp("ds") / "tiny")


@pytest.fixture(scope="module")
def run(dataset, tmp_path_factory) -> Path:
    """Trained with two eval_tasks: scores at steps 4, 8 and 12."""
    return train_run(tmp_path_factory.mktemp("runs") / "run", dataset,
                     "train.eval_tasks=[glassroom_bpb_prose, glassroom_mc_prose]")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------ the task files


def test_tasks_are_passages_of_validation_documents_deterministic_and_replaced_whole(dataset, tmp_path):
    from glassroom.data.mixture import Dataset
    from glassroom.data.tasks import ENDING_CHARS, LENGTH_RANGE, write_tasks

    tasks = dataset / "tasks"
    manifest = json.loads((tasks / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["groups"]["glassroom_bpb"] == [f"glassroom_bpb_{d}" for d in ("prose", "docs", "code")]
    assert {"name": "bible", "kind": "bible"}.items() <= manifest["sources"]["prose"][0].items()
    ds = Dataset(dataset)
    tok = ds.tokenizer()
    shard = ds.shard("prose", "validation")
    texts = [tok.decode(shard.doc_tokens(i).tolist(), skip_special_tokens=False) for i in range(shard.n_docs)]
    items = read_jsonl(tasks / "glassroom_mc_prose.jsonl")
    assert len(items) == manifest["tasks"]["glassroom_mc_prose"]["items"] == 12
    for item in items:
        true = item["choices"][item["gold"]]
        assert item["context"] + true in texts[item["source_doc"]]  # the true ending follows the context
        assert len(item["choices"]) == 4 and len(set(item["choices"])) == 4
        for k, choice in enumerate(item["choices"]):
            assert choice[0].isspace() and len(choice) >= ENDING_CHARS
            if k != item["gold"]:
                assert LENGTH_RANGE[0] <= len(choice) / len(true) <= LENGTH_RANGE[1]
                assert not any(item["context"] + choice in t for t in texts)
    assert len({i["gold"] for i in items}) > 1
    # Same seed: the same bytes; another seed: other items. Only DATASET/tasks is replaced.
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    (copy / "tasks" / "stale.txt").write_text("old")
    (copy / "notes.txt").write_text("mine")
    write_tasks(copy, seq_len=SEQ_LEN, windows=WINDOWS, items=12, seed=3)
    assert (copy / "tasks" / "glassroom_mc_prose.jsonl").read_bytes() == (tasks / "glassroom_mc_prose.jsonl").read_bytes()
    assert not (copy / "tasks" / "stale.txt").exists() and (copy / "notes.txt").read_text() == "mine"
    assert not [p.name for p in copy.iterdir() if p.name.startswith(".tasks")]
    write_tasks(copy, seq_len=SEQ_LEN, windows=WINDOWS, items=12, seed=4)
    assert read_jsonl(copy / "tasks" / "glassroom_mc_prose.jsonl") != items


def test_rolling_task_windows_are_the_trainers_windows(dataset):
    """lm-eval's rolling windows over the bpb document, through the adapter's tokenization, are the
    trainer's evaluation windows token for token (both read the split after an EOS), and the bytes
    counted are the trainer's."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    from glassroom.data.mixture import Dataset
    from glassroom.downstream.adapter import encode
    from glassroom.train.evaluate import DomainValidation

    ds = Dataset(dataset)
    tok = ds.tokenizer()
    for domain in ds.domains:
        doc = read_jsonl(dataset / "tasks" / f"glassroom_bpb_{domain}.jsonl")[0]
        val = DomainValidation(ds, domain, SEQ_LEN, WINDOWS)
        assert doc["n_bytes"] == pytest.approx(val.window_bytes.sum(), rel=1e-12)
        ids = encode(tok, doc["text"])
        windows = [make_disjoint_window(w) for w in get_rolling_token_windows(ids, ds.eos_id, SEQ_LEN, 1)]
        assert len(windows) == len(val.tokens) == doc["windows"]
        for (context, continuation), row in zip(windows, val.tokens.tolist()):
            assert (context + continuation)[:-1] == row[:-1] and continuation == row[1:]  # the same windows


# ------------------------------------------------------------------ scores: trainer, CLI, store


@pytest.mark.slow
def test_eval_tasks_during_training_match_the_trainers_bpb(run):
    with StoreReader(run) as reader:
        steps, task_bpb = reader.series("downstream/glassroom_bpb_prose/bits_per_byte")
        eval_steps, eval_bpb = reader.series("eval/prose/bpb")
        acc_steps, acc = reader.series("downstream/glassroom_mc_prose/acc")
        events = [e for e in reader.events() if e["kind"] == "downstream"]
    assert steps.tolist() == [4, 8, 12] == acc_steps.tolist() == [e["step"] for e in events]
    assert eval_steps.tolist() == [6, 12]
    assert abs(task_bpb[-1] - eval_bpb[-1]) < 1e-3, (task_bpb[-1], eval_bpb[-1])
    assert task_bpb[0] > task_bpb[-1]  # it learns
    assert all(0 <= a <= 1 for a in acc)
    assert events[-1]["data"]["scores"]["glassroom_bpb_prose"]["bits_per_byte"] == pytest.approx(task_bpb[-1])


def test_scores_are_the_same_at_any_batch_and_in_either_tasks_format(run, dataset, tmp_path):
    """Training scores with four micro-batches per forward, `glassroom eval` with --batch-size: the
    scores may not depend on it (right padding, causal attention, log-softmax only where scored).
    A tasks folder of the older format (fields as Jinja templates) is still read, with the same scores."""
    import glassroom
    from glassroom.data import tasks as task_files
    from glassroom.downstream.run import evaluate

    model, tok = glassroom.load(run)
    names = ["glassroom_mc_prose", "glassroom_mc_code", "glassroom_bpb_prose"]
    scores = [evaluate(model, tok, names, dataset / "tasks", batch_size=b, max_length=SEQ_LEN)["scores"]
              for b in (1, 3, 16)]
    assert scores[0] == scores[1] == scores[2]
    older = tmp_path / "tasks"
    shutil.copytree(dataset / "tasks", older)
    manifest = json.loads((older / "manifest.json").read_text())
    manifest["format"] = "glassroom-tasks/1"
    (older / "manifest.json").write_text(json.dumps(manifest))
    for name in manifest["tasks"]:
        text = (older / f"{name}.yaml").read_text()
        templated = re.sub(r'(doc_to_target|doc_to_text): "(\w+)"', r'\1: "{{\2}}"', text)
        assert templated != text
        (older / f"{name}.yaml").write_text(templated)
    assert task_files.verify_folder(older)["format"] == "glassroom-tasks/1"
    assert evaluate(model, tok, names, older, batch_size=3, max_length=SEQ_LEN)["scores"] == scores[0]
    (older / "glassroom_mc_prose.yaml").write_text(text)   # a format-2 file in a format-1 folder: refused
    with pytest.raises(Exception, match="not the file glassroom writes"):
        task_files.verify_folder(older)


# ------------------------------------------------------------------ against lm-eval's HF model


@pytest.mark.slow
def test_same_numbers_as_lm_eval_hf_on_the_exported_folder(run, dataset, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    import glassroom
    from glassroom.downstream.run import evaluate, flatten

    folder = export_folder(run, tmp_path / "hf")
    manager = TaskManager(include_path=str(dataset / "tasks"))
    model, tok = glassroom.load(folder)
    for tasks, length in ((["glassroom_mc_prose"], 128), (["glassroom_bpb_prose", "glassroom_bpb_code"], SEQ_LEN)):
        ours = evaluate(model, tok, tasks, dataset / "tasks", batch_size=4, max_length=length)["scores"]
        theirs = flatten(lm_eval.simple_evaluate(
            model="hf", model_args={"pretrained": str(folder), "dtype": "float32", "max_length": length, "device": "cpu"},
            tasks=tasks, task_manager=manager, batch_size=4, bootstrap_iters=0, log_samples=False))
        assert ours.keys() == theirs.keys()
        for task in ours:
            for metric, value in theirs[task].items():
                assert abs(ours[task][metric] - value) < 1e-3, (task, metric, ours[task][metric], value)


@pytest.mark.slow
def test_generate_until_is_greedy_and_stops_at_strings(run):
    import torch
    from lm_eval.api.instance import Instance

    import glassroom
    from glassroom.downstream.adapter import GlassroomLM

    model, tok = glassroom.load(run)
    lm = GlassroomLM(model, tok, max_length=64)
    prompt = "And God said, Let there be"
    ids = lm.tok_encode(prompt)
    with torch.no_grad():  # the reference: full forwards, argmax, 12 tokens
        ref = list(ids)
        for _ in range(12):
            ref.append(int(model(torch.tensor([ref])).logits[0, -1].argmax()))
            if ref[-1] == lm.eot_token_id:
                ref.pop()
                break
    want = lm.tok_decode(ref[len(ids):])
    requests = [Instance("generate_until", {}, (prompt, {"until": ["\x00never"], "max_gen_toks": 12}), 0)]
    assert lm.generate_until(requests) == [want]
    stop = want.strip()[:2]
    cut = lm.generate_until([Instance("generate_until", {}, (prompt, {"until": [stop], "max_gen_toks": 12}), 0)])
    assert cut == [want.split(stop)[0]] and stop not in cut[0]


@pytest.mark.slow
def test_eval_tasks_keys_checked_and_training_unchanged_by_them(run, dataset, tmp_path):
    """eval_tasks_every picks the steps; torchrun with more than one process is refused; and a run
    with eval_tasks trains exactly as one without (lm-eval's seeding does not leak into training)."""
    from glassroom.data.mixture import Dataset
    from glassroom.train.eval_tasks import TrainingTasks
    from glassroom.errors import ConfigError
    from glassroom.train.config import load_run_config
    from train_helpers import TINY, losses

    sets = [f"data.path={dataset}", "train.eval_tasks=[glassroom_bpb_docs]", "train.eval_tasks_every=5"]
    cfg = load_run_config(TINY, sets)
    hook = TrainingTasks(cfg, Dataset(dataset), world_size=1)
    assert [s for s in range(1, 13) if hook.due(s, s % 4 == 0, s == 12)] == [5, 10, 12]
    assert [s for s in range(1, 13) if TrainingTasks(load_run_config(TINY, sets[:2]), Dataset(dataset), 1).due(s, s % 4 == 0, s == 12)] == [4, 8, 12]
    with pytest.raises(ConfigError, match="train.eval_tasks: runs in a single process only, this run has 2"):
        TrainingTasks(cfg, Dataset(dataset), world_size=2)
    for bad, says in (("train.eval_tasks_every=0", "train.eval_tasks_every: must be positive"),
                      ("train.eval_tasks=[a, a]", "train.eval_tasks[1]: 'a' is named twice")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_run_config(TINY, sets + [bad])
    np.testing.assert_array_equal(losses(run), losses(train_run(tmp_path / "plain", dataset)))


@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_resumes_with_each_score_once(run, dataset, tmp_path):
    """SIGKILL right after step 8's checkpoint (its tasks ran before it): --resume redoes steps 9-12
    and the store holds the same scores, each step's once, as the run never interrupted."""
    out = tmp_path / "killed"
    sets = (f"train.eval_sequences={WINDOWS}", "model.max_seq_len=128", "train.eval_tasks=[glassroom_bpb_prose, glassroom_mc_prose]")
    env = {**OFFLINE, "OMP_NUM_THREADS": "1"}
    killed = run_train(out, dataset, *sets, env={**env, "GLASSROOM_FAULTS": "kill_after_checkpoint@8"})
    assert killed.returncode != 0
    resumed = run_train(out, dataset, *sets, resume=True, env=env)
    assert resumed.returncode == 0, resumed.stderr
    for name in ("downstream/glassroom_bpb_prose/bits_per_byte", "downstream/glassroom_mc_prose/acc_norm"):
        with StoreReader(out) as got, StoreReader(run) as want:
            np.testing.assert_array_equal(np.stack(got.series(name)), np.stack(want.series(name)))
    with StoreReader(out) as reader:
        assert [e["step"] for e in reader.events() if e["kind"] == "downstream"] == [4, 8, 12]


def test_special_ids_of_a_folder_follow_lm_eval_hf(tmp_path):
    """EOS: <|endoftext|> when the tokenizer has it, else config.json's eos_token_id (first of a
    list); the prefix token: tokenizer_config.json's bos_token (a string or an added-token dict)."""
    from tokenizers import Tokenizer, models

    from glassroom.downstream.adapter import special_ids

    plain = Tokenizer(models.WordLevel({"<s>": 0, "a": 1, "[UNK]": 2}, unk_token="[UNK]"))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"}}))
    assert special_ids(tmp_path, plain) == (7, 0)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": None}))
    withe = Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    assert special_ids(tmp_path, withe) == (1, None)
