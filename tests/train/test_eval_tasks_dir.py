"""`train.eval_tasks_dir` and `train.eval_tasks_trust_code`: the keys checked when the config is
read (one line naming the key), a researcher's own tasks folder scored by train.eval_tasks, and a
folder holding Python refused at the start unless trusted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from own_tasks_helpers import copy_tasks, write_hf_model, write_own_tasks
from train_helpers import TINY

from glassroom.errors import ConfigError
from glassroom.train.config import load_run_config


@pytest.mark.parametrize("sets, says", [
    (["train.eval_tasks_trust_code=yes please"], "train.eval_tasks_trust_code: "),
    (["train.eval_tasks_dir=[a, b]"], "train.eval_tasks_dir: "),
    (["train.eval_tasks=[my_qa]", "train.eval_tasks_dir=' '"], "train.eval_tasks_dir: empty"),
    (["train.eval_tasks_dir=mytasks"], "train.eval_tasks_dir: set, but train.eval_tasks is empty"),
    (["train.eval_tasks_trust_code=true"], "train.eval_tasks_trust_code: set, but train.eval_tasks is empty"),
])
def test_eval_tasks_dir_and_trust_code_are_checked_when_the_config_is_read(sets, says):
    with pytest.raises(ConfigError) as info:
        load_run_config(TINY, sets)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_eval_tasks_dir_and_trust_code_defaults():
    train = load_run_config(TINY).train
    assert train.eval_tasks_dir is None and train.eval_tasks_trust_code is False
    train = load_run_config(TINY, ["train.eval_tasks=[my_qa]", "train.eval_tasks_dir=~/mytasks",
                                   "train.eval_tasks_trust_code=true"]).train
    assert (train.eval_tasks_dir, train.eval_tasks_trust_code) == ("~/mytasks", True)


class _Data:
    """What TrainingTasks reads of a dataset: its path and tokenizer."""

    def __init__(self, path: Path, tokenizer):
        self.path, self._tok = path, tokenizer

    def tokenizer(self):
        return self._tok


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory):
    import glassroom

    return glassroom.load(write_hf_model(tmp_path_factory.mktemp("model")))


@pytest.mark.slow  # lm-eval loads the tasks
def test_own_tasks_in_training_run_only_with_trust_code_when_they_hold_python(model_and_tokenizer, tmp_path):
    from glassroom.train.eval_tasks import TrainingTasks

    model, tok = model_and_tokenizer
    own = copy_tasks(write_own_tasks(tmp_path / "written"), tmp_path / "tasks")
    data = _Data(tmp_path / "no-dataset", tok)
    sets = ["train.eval_tasks=[my_qa, my_prose]", f"train.eval_tasks_dir={own}"]
    hook = TrainingTasks(load_run_config(TINY, sets), data, world_size=1)
    assert hook.tasks_dir == own
    scores = hook.run(model, "cpu")
    assert set(scores) == {"my_qa", "my_prose"} and "bits_per_byte" in scores["my_prose"]

    marker = tmp_path / "ran"
    (own / "utils.py").write_text(f"def docs(dataset):\n    open({str(marker)!r}, 'w').write('ran')\n    return dataset\n")
    mc = own / "my_qa.yaml"
    mc.write_text(mc.read_text().replace("test_split: test\n", "test_split: test\nprocess_docs: !function utils.docs\n"))
    with pytest.raises(ConfigError, match=re.escape(
            f"train.eval_tasks_dir: {own}: holds Python code (utils.py, '!function' in my_qa.yaml) that lm-eval "
            "would run; set train.eval_tasks_trust_code: true if you trust it")):
        TrainingTasks(load_run_config(TINY, sets), data, world_size=1)
    assert not marker.exists()
    trusted = TrainingTasks(load_run_config(TINY, sets + ["train.eval_tasks_trust_code=true"]), data, world_size=1)
    assert set(trusted.run(model, "cpu")) == {"my_qa", "my_prose"} and marker.exists()


def test_a_missing_eval_tasks_dir_names_the_key(tmp_path):
    from glassroom.train.eval_tasks import TrainingTasks

    sets = ["train.eval_tasks=[my_qa]", f"train.eval_tasks_dir={tmp_path / 'none'}"]
    with pytest.raises(ConfigError, match=re.escape(f"train.eval_tasks_dir: {tmp_path / 'none'}: no tasks folder")):
        TrainingTasks(load_run_config(TINY, sets), _Data(tmp_path, None), world_size=1)
