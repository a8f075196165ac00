"""glassroom/numbers.py: the bounded number reader, and every command that reads numbers a user
wrote refusing the same class of bad values in one line.

The class: a 5,000-digit integer (past Python's int-str limit), 1e400 (past a float's range), -1 (a
count below zero), NaN, and text where a number goes. Each is planted in each input (a plan config
and --set, a run config, a data recipe and every JSON lines kind data build reads, a ladder spec for
plan and design, a local eval task record); the command must exit 2 with exactly one stderr line,
no traceback, and leave its inputs and output folder as they were. All run in process (cli.main):
every refusal comes before any training, building or model loading.
"""

from __future__ import annotations

import json
import math
import sysconfig
from pathlib import Path

import pytest
import yaml

from glassroom import numbers
from glassroom.cli import main
from glassroom.data.tasks import FORMAT, expected_files
from glassroom.data.tokenizer import save_tokenizer, train_tokenizer

ROOT = Path(__file__).resolve().parents[2]
DIGITS = "9" * 5000
STDLIB = Path(sysconfig.get_paths()["stdlib"])

# How each bad value is spelled in YAML, on the command line and in JSON.
BAD_YAML = {"5000 digits": DIGITS, "1e400": "1.0e+400", "-1": "-1", "NaN": ".nan", "text": "many"}
BAD_ARG = {"5000 digits": DIGITS, "1e400": "1e400", "-1": "-1", "NaN": "nan", "text": "many"}
BAD_JSON = {"5000 digits": DIGITS, "1e400": "1e400", "-1": "-1", "NaN": "NaN", "text": '"many"'}
# JSON lines kinds without a numeric field: only what cannot be read as JSON numbers is planted there.
UNREADABLE = ("5000 digits", "1e400", "NaN")


def snapshot(*roots: Path) -> dict:
    """Every file below `roots` (or the file itself) and its bytes; a folder that does not exist is absent."""
    out = {}
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        out.update({str(p): p.read_bytes() for p in paths})
    return out


def refused(args: list, capsys, *keep: Path, progress: bool = False) -> str:
    """Runs `glassroom ARGS` in process; asserts exit 2, one stderr line, nothing in `keep` changed.
    With `progress` (data build, which reports its stages on stderr) one `error:` line among them."""
    before = snapshot(*keep)
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:   # argparse's refusal
        code = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    if progress:
        lines = [line for line in lines if line.startswith("error")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
    assert "Traceback" not in err and len(lines[0]) < 600, err[:2000]
    assert snapshot(*keep) == before
    return lines[0]


def plant(text: str, key: str, value: str) -> str:
    """YAML `text` with the first `key: ...` line's value replaced by `value`."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
    lines[at] = lines[at].split(":")[0] + f": {value}"
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the reader


def test_the_reader_bounds_digits_magnitude_and_constants():
    assert numbers.parse_int("1_000") == 1000 and numbers.parse_int("-" + "9" * 30) == -int("9" * 30)
    assert numbers.parse_float("1.5e308") == 1.5e308 and numbers.parse_float("inf") == math.inf
    for bad, says in ((DIGITS, "5,000 digits; numbers here have at most 30"), ("9" * 31, "31 digits"),
                      ("1x", "not a whole number")):
        with pytest.raises(numbers.NumberError, match=says):
            numbers.parse_int(bad)
    for bad, says in (("1e400", "beyond a float's range"), ("nan", "NaN"), ("1" * 101, "at most 100")):
        with pytest.raises(numbers.NumberError, match=says):
            numbers.parse_float(bad)
    assert numbers.loads('{"a": [1, 2.5, -3]}') == {"a": [1, 2.5, -3]}
    for bad in ('{"a": ' + DIGITS + "}", '{"a": 1e400}', '{"a": NaN}', '[Infinity]', '[-Infinity]'):
        with pytest.raises(ValueError):
            numbers.loads(bad)
    with pytest.raises(numbers.NumberError, match="at most 2\\*\\*63 - 1"):
        numbers.option_int(str(2 ** 63))
    with pytest.raises(numbers.NumberError, match="not a finite number"):
        numbers.option_float("inf")
    assert "(5,000 characters)" in numbers.shown(DIGITS)


# ----------------------------------------------------------------------------- every command


@pytest.mark.parametrize("bad", BAD_YAML)
def test_plan_refuses_a_bad_number_in_the_config_file(bad, tmp_path, capsys):
    config = tmp_path / "model.yaml"
    config.write_text(plant((ROOT / "experiments" / "train-dense.yaml").read_text(), "n_layers", BAD_YAML[bad]))
    assert "n_layers" in refused(["plan", config], capsys, config)


@pytest.mark.parametrize("bad", BAD_ARG)
def test_plan_refuses_a_bad_number_in_set_and_in_an_option(bad, capsys):
    config = ROOT / "experiments" / "train-dense.yaml"
    assert "model.n_layers" in refused(["plan", config, "--set", f"model.n_layers={BAD_ARG[bad]}"], capsys, config)
    for option in ("--dp", "--micro-batch", "--seq-len"):
        assert option in refused(["plan", config, option, BAD_ARG[bad]], capsys)


@pytest.mark.parametrize("bad", BAD_YAML)
def test_train_refuses_a_bad_number_in_the_run_config_and_set(bad, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(plant((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text(), "steps", BAD_YAML[bad]))
    out = tmp_path / "run"
    assert "steps" in refused(["train", config, "--out", out], capsys, config, out)
    assert not out.exists()
    good = ROOT / "tests" / "configs" / "train-tiny.yaml"
    assert "train.steps" in refused(["train", good, "--out", out, "--set", f"train.steps={BAD_ARG[bad]}"], capsys, out)
    assert not out.exists()


def recipe_with(tmp_path: Path, sources: list[dict], task: str | None = None, **extra) -> Path:
    recipe = {"name": "bad-numbers", "domains": {"docs": {"sources": sources}},
              "tokenizer": {"vocab_size": 300, "sample_bytes": "64K"}, **extra}
    if task:
        recipe["task"] = task
        recipe["tokenizer"] = {"path": str(tmp_path / "tokenizer.json")}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.mark.parametrize("bad", BAD_YAML)
def test_data_build_refuses_a_bad_number_in_the_recipe(bad, tmp_path, capsys):
    (tmp_path / "doc.txt").write_text("some text\n" * 50)
    recipe = recipe_with(tmp_path, [{"kind": "files", "path": str(tmp_path / "doc.txt")}])
    recipe.write_text(plant(recipe.read_text(), "vocab_size", BAD_YAML[bad]))
    out = tmp_path / "out"
    assert "vocab_size" in refused(["data", "build", recipe, "--out", out], capsys, recipe, out)
    assert not out.exists()


JSONL_KINDS = {
    # kind: (recipe task, one good record, the field a bad value replaces)
    "jsonl": (None, {"text": "a document of plain text " * 20, "n": 1}, "n"),
    "conversations": ("sft", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                              "n": 1}, "n"),
    "preferences": ("dpo", {"prompt": "say hi", "chosen": "hi", "rejected": "no", "n": 1}, "n"),
    "decontaminate": (None, {"question": "what is it", "n": 1}, "n"),
}


@pytest.mark.parametrize("bad", UNREADABLE)
@pytest.mark.parametrize("kind", JSONL_KINDS)
def test_data_build_refuses_a_json_lines_file_with_a_bad_number(kind, bad, tmp_path, capsys):
    task, record, field = JSONL_KINDS[kind]
    line = json.dumps(record).replace(f'"{field}": 1', f'"{field}": {BAD_JSON[bad]}')
    data = tmp_path / "records.jsonl"
    data.write_text(line + "\n")
    if kind == "decontaminate":   # read after cleaning: real text to clean first
        recipe = recipe_with(tmp_path, [{"kind": "files", "path": str(STDLIB / "json" / "*.py")}],
                             decontaminate={"files": [str(data)]})
    else:
        recipe = recipe_with(tmp_path, [{"kind": kind, "path": str(data)}], task=task)
        save_tokenizer(train_tokenizer(["hello there, a few words of text"] * 4, 300), tmp_path / "tokenizer.json")
    out = tmp_path / "out"
    # jsonl skips and counts a malformed line (docs/data.md); a file of only such lines leaves the domain empty.
    says = refused(["data", "build", recipe, "--out", out, "--workers", "1"], capsys, data, recipe, out, progress=True)
    assert "records.jsonl" in says or "gave no text" in says
    assert not out.exists()


def ladder_spec(tmp_path: Path, key: str, value: str) -> Path:
    spec = tmp_path / "ladder.yaml"
    spec.write_text(plant((ROOT / "tests" / "configs" / "ladder-tiny.yaml").read_text(), key, value))
    return spec


@pytest.mark.parametrize("bad", BAD_YAML)
def test_ladder_plan_and_design_refuse_a_bad_number_in_the_spec(bad, tmp_path, capsys):
    spec = ladder_spec(tmp_path, "tokens_per_param", BAD_YAML[bad])
    assert "tokens_per_param" in refused(["ladder", "plan", spec, "--cpu-flops", "1e12"], capsys, spec)
    assert "tokens_per_param" in refused(["ladder", "design", spec, "--simulations", "10"], capsys, spec)


@pytest.mark.parametrize("bad", BAD_ARG)
def test_ladder_plan_and_design_refuse_a_bad_number_option(bad, tmp_path, capsys):
    spec = ROOT / "tests" / "configs" / "ladder-tiny.yaml"
    assert "--gpus" in refused(["ladder", "plan", spec, "--gpus", BAD_ARG[bad]], capsys)
    assert "--simulations" in refused(["ladder", "design", spec, "--simulations", BAD_ARG[bad]], capsys)


def tasks_folder(root: Path, record_line: str) -> Path:
    """A tasks folder as `glassroom data tasks` writes it, with one multiple-choice task of one record."""
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    manifest = {"format": FORMAT, "tasks": {"glassroom_mc_prose": {"kind": "multiple_choice", "domain": "prose"}}}
    (tasks / "manifest.json").write_text(json.dumps(manifest))
    for name, content in expected_files(manifest, tasks).items():
        (tasks / name).write_bytes(content)
    (tasks / "glassroom_mc_prose.jsonl").write_text(record_line + "\n")
    return tasks


@pytest.mark.parametrize("bad", BAD_JSON)
def test_eval_refuses_a_task_record_with_a_bad_number(bad, tmp_path, capsys):
    line = '{"context": "the sky is", "choices": ["blue", "loud"], "gold": %s}' % BAD_JSON[bad]
    tasks = tasks_folder(tmp_path / "data", line)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"path": str(tmp_path / "data")}}))
    says = refused(["eval", run, "--tasks", "glassroom_mc_prose"], capsys, tasks, run)
    assert "glassroom_mc_prose.jsonl:1" in says


def test_eval_refuses_a_task_record_whose_context_is_not_text(tmp_path, capsys):
    tasks = tasks_folder(tmp_path / "data", '{"context": 5}')
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"path": str(tmp_path / "data")}}))
    says = refused(["eval", run, "--tasks", "glassroom_mc_prose"], capsys, tasks, run)
    assert "glassroom_mc_prose.jsonl:1: 'context' is not text" in says
