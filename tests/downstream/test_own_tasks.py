"""A researcher's own lm-eval task folder through `glassroom eval --tasks-dir`: a hand-written
multiple-choice task over a JSONL file and a rolling log-likelihood task score what lm-eval's own
Hugging Face model scores on the exported folder; a folder holding Python runs only with
--trust-code; a YAML-only folder cannot reach Python through a template or a metric; and every
mistake in the folder is one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from downstream_helpers import glassroom_here
from own_tasks_helpers import MAX_LENGTH, QUESTIONS, copy_tasks, write_hf_model, write_own_tasks


@pytest.fixture(scope="module")
def own_tasks(tmp_path_factory) -> Path:
    return write_own_tasks(tmp_path_factory.mktemp("own") / "mytasks")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    return write_hf_model(tmp_path_factory.mktemp("own-hf"))


def eval_own(hf_folder: Path, tasks_dir: Path, names: str, *extra: str):
    return glassroom_here("eval", str(hf_folder), "--tasks", names, "--tasks-dir", str(tasks_dir),
                          "--max-length", str(MAX_LENGTH), "--batch-size", "4", *extra)


def one_line_error(result, *says: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ the same numbers as lm-eval's HF model


@pytest.mark.slow
def test_own_tasks_score_what_lm_eval_hf_scores_on_the_exported_folder(hf_folder, own_tasks):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from glassroom.downstream.run import flatten

    result = eval_own(hf_folder, own_tasks, "my_qa,my_prose", "--json")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)["scores"]
    assert set(ours) == {"my_qa", "my_prose"} and set(ours["my_qa"]) == {"acc", "acc_norm"}
    assert set(ours["my_prose"]) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}
    theirs = flatten(lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={hf_folder},dtype=float32,device=cpu,max_length={MAX_LENGTH},logits_cache=False",
        tasks=["my_qa", "my_prose"], task_manager=TaskManager(include_path=str(own_tasks)), batch_size=4,
        bootstrap_iters=0, log_samples=False))
    for task, metrics in theirs.items():
        assert metrics.keys() == ours[task].keys()
        for metric, value in metrics.items():
            assert abs(ours[task][metric] - value) <= 1e-3 * max(1.0, abs(value)), (task, metric, ours[task][metric], value)


@pytest.mark.slow
def test_lm_evals_logits_cache_scores_a_request_split_later_wrong(hf_folder):
    """The two last questions' first answers are the same tokens split at another point: with its
    logits cache lm-eval's HF model gives the later split the log-probabilities of the earlier
    split's first positions; without it, it agrees with glassroom's adapter."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    import glassroom
    from glassroom.downstream.adapter import GlassroomLM, special_ids

    pairs = [(q, choices[0]) for q, choices, _ in QUESTIONS[-2:]]
    requests = [Instance("loglikelihood", {}, pair, i, ("demo", i, 1)) for i, pair in enumerate(pairs)]
    model, tok = glassroom.load(hf_folder)
    ours = GlassroomLM(model, tok, batch_size=4, max_length=MAX_LENGTH, eos_id=special_ids(hf_folder, tok)[0],
                       prefix_id=special_ids(hf_folder, tok)[1])
    assert ours.tok_encode(pairs[0][0] + pairs[0][1]) == ours.tok_encode(pairs[1][0] + pairs[1][1])
    glassroom_ll = [ll for ll, _ in ours.loglikelihood(requests)]
    scored = {}
    for cache in (True, False):
        hf = HFLM(pretrained=str(hf_folder), dtype="float32", device="cpu", batch_size=4, max_length=MAX_LENGTH,
                  logits_cache=cache)
        scored[cache] = [ll for ll, _ in hf.loglikelihood(requests, disable_tqdm=True)]
    assert scored[False] == pytest.approx(glassroom_ll, abs=1e-4)
    assert scored[True][0] == pytest.approx(glassroom_ll[0], abs=1e-4)  # the one computed
    assert abs(scored[True][1] - glassroom_ll[1]) > 1e-2  # the one served from its logits


# ------------------------------------------------------------------ code in a folder


HOSTILE = 'open({marker!r}, "w").write("ran")\n'


def _with_code(own_tasks: Path, tmp_path: Path, kind: str) -> tuple[Path, Path, str]:
    """(folder, the marker its code writes when it runs, what the refusal names)."""
    tasks = copy_tasks(own_tasks, tmp_path / "tasks")
    marker = tmp_path / "ran"
    if kind == "a .py file":
        (tasks / "tools").mkdir()
        (tasks / "tools" / "prepare.py").write_text(HOSTILE.format(marker=str(marker)))
        return tasks, marker, "(tools/prepare.py)"
    hook = f"def docs(dataset):\n    {HOSTILE.format(marker=str(marker)).strip()}\n    return dataset\n"
    if kind == "!function":
        (tasks / "utils.py").write_text(hook)
        yaml_file = tasks / "my_qa.yaml"
        says = "'!function' in my_qa.yaml"
    else:  # !function in a file outside the folder, pulled in by include:
        shared = tmp_path / "shared"
        shared.mkdir()
        (shared / "hooks.py").write_text(hook)
        (shared / "base.yaml").write_text("process_docs: !function hooks.docs\n")
        (tasks / "my_qa.yaml").write_text("include: ../shared/base.yaml\n" + (tasks / "my_qa.yaml").read_text())
        return tasks, marker, f"'!function' in {shared / 'base.yaml'}"
    yaml_file.write_text(yaml_file.read_text().replace("test_split: test\n",
                                                       "test_split: test\nprocess_docs: !function utils.docs\n"))
    return tasks, marker, says


@pytest.mark.parametrize("kind", ["a .py file", "!function", "!function through include"])
def test_a_folder_holding_python_runs_only_with_trust_code(hf_folder, own_tasks, tmp_path, kind):
    tasks, marker, says = _with_code(own_tasks, tmp_path, kind)
    refused = eval_own(hf_folder, tasks, "my_qa")
    one_line_error(refused, f"--tasks-dir {tasks}: holds Python code", says, "pass --trust-code if you trust it")
    assert not marker.exists()
    trusted = eval_own(hf_folder, tasks, "my_qa", "--trust-code")
    assert trusted.returncode == 0, trusted.stderr
    assert "my_qa" in trusted.stdout and "acc" in trusted.stdout
    assert marker.exists() == (kind != "a .py file")  # a stray .py is refused, but nothing names it


def test_a_template_cannot_reach_python_without_trust_code(hf_folder, own_tasks, tmp_path):
    """lm-eval renders templates with plain Jinja, where `{{ cycler.__init__.__globals__.os }}` is
    the os module: without --trust-code they render in Jinja's sandbox."""
    tasks = copy_tasks(own_tasks, tmp_path / "tasks")
    marker = tmp_path / "ran"
    template = "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}{{question}}"
    mc = tasks / "my_qa.yaml"
    mc.write_text(mc.read_text().replace('doc_to_text: "{{question}}"', f"doc_to_text: {json.dumps(template)}"))
    one_line_error(eval_own(hf_folder, tasks, "my_qa"), "task 'my_qa'", "Jinja's sandbox", "--trust-code")
    assert not marker.exists()


def test_a_metric_lm_eval_does_not_register_is_not_loaded_without_trust_code(hf_folder, own_tasks, tmp_path):
    """An unregistered metric name goes to Hugging Face evaluate.load, which runs a script a path names."""
    tasks = copy_tasks(own_tasks, tmp_path / "tasks")
    marker = tmp_path / "ran"
    script = tmp_path / "elsewhere" / "metric.py"
    script.parent.mkdir()
    script.write_text(HOSTILE.format(marker=str(marker)))
    rolling = tasks / "my_prose.yaml"
    rolling.write_text(rolling.read_text().replace("  - metric: bits_per_byte", f"  - metric: {script}"))
    one_line_error(eval_own(hf_folder, tasks, "my_prose"), f"metric '{script}'", "not one lm-eval registers",
                   "--trust-code")
    assert not marker.exists()


# ------------------------------------------------------------------ mistakes


@pytest.mark.parametrize("change, names, says", [
    ("record", "my_qa", ["task 'my_qa'", "Context is not a string"]),
    ("rolling record", "my_prose", ["task 'my_prose', document 3: its text is int 5, not text"]),
    ("answer", "my_qa", ["task 'my_qa'", "IndexError"]),
    ("jsonl", "my_qa", ["task 'my_qa'", "DatasetGenerationError", "JSON"]),
    ("yaml", "my_qa", ["broken.yaml: not valid YAML (line 2"]),
    ("include", "my_qa", ["my_qa.yaml: include: missing.yaml is not a file"]),
    pytest.param("name", "my_q", ["unknown task 'my_q'", "local tasks: my_prose, my_qa"],
                 marks=pytest.mark.slow),  # a name the folder lacks may be one lm-eval ships: its index is read
])
def test_mistakes_in_an_own_folder_are_one_line_exit_2(hf_folder, own_tasks, tmp_path, change, names, says):
    tasks = copy_tasks(own_tasks, tmp_path / "tasks")
    if change == "record":  # a question the template reads as text is a number
        with (tasks / "qa.jsonl").open("a") as f:
            f.write(json.dumps({"question": 5, "choices": [" a", " b"], "answer": 0}) + "\n")
    elif change == "rolling record":
        with (tasks / "prose.jsonl").open("a") as f:
            f.write(json.dumps({"text": 5}) + "\n")
    elif change == "answer":  # the gold index past the choices (lm-eval checks the first record's)
        (tasks / "qa.jsonl").write_text(json.dumps({"question": "Why?", "choices": [" a", " b"], "answer": 7}) + "\n")
    elif change == "jsonl":
        (tasks / "qa.jsonl").write_text('{"question": "Why?", "choices" [" a", " b"]}\n')
    elif change == "yaml":
        (tasks / "broken.yaml").write_text("task: [my_broken\n")
    elif change == "include":
        (tasks / "my_qa.yaml").write_text("include: missing.yaml\n" + (tasks / "my_qa.yaml").read_text())
    one_line_error(eval_own(hf_folder, tasks, names), *says)


def test_a_tasks_dir_that_is_missing_or_a_file_is_one_line(hf_folder, own_tasks, tmp_path):
    one_line_error(eval_own(hf_folder, tmp_path / "nothing", "my_qa"), f"--tasks-dir {tmp_path / 'nothing'}: no tasks folder")
    one_line_error(eval_own(hf_folder, own_tasks / "qa.jsonl", "my_qa"), "qa.jsonl: not a folder")
