"""A tasks folder is code: lm-eval executes the Python its YAML names. glassroom eval and
train.eval_tasks run only a folder whose YAML and utils.py are the ones glassroom writes, and never
a compiled module placed in its __pycache__."""

from __future__ import annotations

import importlib.util
import marshal
import shutil
from pathlib import Path

import pytest

from downstream_helpers import dataset_with_tasks
from glassroom.data.mixture import Dataset
from glassroom.downstream import run as downstream
from glassroom.errors import GlassroomError
from glassroom.model.config import ModelConfig
from glassroom.model.transformer import build_model

HOSTILE = "\nopen({marker!r}, 'w').write('ran')\n"


@pytest.fixture(scope="module")
def dataset(tiny_dataset, tmp_path_factory) -> Path:
    return dataset_with_tasks(tiny_dataset, tmp_path_factory.mktemp("trust") / "data")


@pytest.fixture(scope="module")
def model_and_tokenizer(dataset):
    tok = Dataset(dataset).tokenizer()
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=64)
    return build_model(cfg, seed=0).eval(), tok


def _tasks_copy(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "tasks"
    shutil.copytree(dataset / "tasks", out)
    return out


def _evaluate(model_and_tokenizer, tasks: Path) -> dict:
    model, tok = model_and_tokenizer
    return downstream.evaluate(model, tok, ["glassroom_mc_prose"], tasks, limit=2, batch_size=4, max_length=32)


@pytest.mark.parametrize("change", ["utils.py", "task yaml", "yaml in a subfolder", "manifest task name"])
def test_a_tasks_folder_with_code_glassroom_did_not_write_is_refused_before_it_runs(
        dataset, model_and_tokenizer, tmp_path, change):
    tasks = _tasks_copy(dataset, tmp_path)
    marker = tmp_path / "ran"
    if change == "utils.py":
        with (tasks / "utils.py").open("a") as f:
            f.write(HOSTILE.format(marker=str(marker)))
        says = "utils.py: not the file glassroom writes"
    elif change == "task yaml":
        (tasks / "evil.py").write_text(f"def load(**_):\n    {HOSTILE.format(marker=str(marker)).strip()}\n")
        yaml = tasks / "glassroom_mc_prose.yaml"
        yaml.write_text(yaml.read_text().replace("utils.load_docs", "evil.load"))
        says = "glassroom_mc_prose.yaml: not the file glassroom writes"
    elif change == "yaml in a subfolder":
        (tasks / "sub").mkdir()
        (tasks / "sub" / "evil.py").write_text(f"def load(**_):\n    {HOSTILE.format(marker=str(marker)).strip()}\n")
        (tasks / "sub" / "glassroom_mc_prose.yaml").write_text(
            (tasks / "glassroom_mc_prose.yaml").read_text().replace("utils.load_docs", "evil.load"))
        (tasks / "glassroom_mc_prose.yaml").unlink()
        says = "sub/glassroom_mc_prose.yaml: not a task file glassroom wrote"
    else:
        manifest = (tasks / "manifest.json").read_text().replace('"glassroom_mc_code"', '"glassroom_mc_../code"')
        (tasks / "manifest.json").write_text(manifest)
        says = "is not one glassroom writes"
    with pytest.raises(GlassroomError) as info:
        _evaluate(model_and_tokenizer, tasks)
    assert says in str(info.value) and "\n" not in str(info.value)
    assert "glassroom data tasks" in str(info.value)
    with pytest.raises(GlassroomError):
        downstream.task_manager(tasks, ["glassroom_mc_prose"])  # what train.eval_tasks builds at start
    assert not marker.exists()


def test_a_compiled_module_placed_in_the_folders_pycache_is_never_run(dataset, model_and_tokenizer, tmp_path):
    tasks = _tasks_copy(dataset, tmp_path)
    marker = tmp_path / "ran"
    utils = tasks / "utils.py"
    hostile = utils.read_text() + HOSTILE.format(marker=str(marker))
    code = compile(hostile, str(utils), "exec")
    stat = utils.stat()
    # A .pyc whose header claims the verified utils.py as its source (mtime and size): Python would
    # load it instead of the source.
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc = Path(importlib.util.cache_from_source(str(utils)))
    pyc.parent.mkdir()
    pyc.write_bytes(header + marshal.dumps(code))
    result = _evaluate(model_and_tokenizer, tasks)
    assert set(result["scores"]["glassroom_mc_prose"]) == {"acc", "acc_norm"}
    assert not marker.exists()
