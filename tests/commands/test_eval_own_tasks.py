"""A researcher's own tasks folder on a run folder: scored during training (train.eval_tasks with
train.eval_tasks_dir) and again by `glassroom eval RUN --tasks-dir`, stored the way glassroom's
local tasks are: downstream/<task>/<metric> at the checkpoint's step, with a `downstream` event."""

from __future__ import annotations

import json

import pytest

from downstream_helpers import glassroom_here, train_run
from own_tasks_helpers import write_own_tasks

from glassroom.observe.store import StoreReader


@pytest.mark.slow  # trains the tiny run
def test_own_tasks_are_stored_in_the_run_during_training_and_by_glassroom_eval(tiny_dataset, tmp_path):
    own = write_own_tasks(tmp_path / "mytasks")
    run = train_run(tmp_path / "run", tiny_dataset, "train.eval_tasks=[my_qa, my_prose]", f"train.eval_tasks_dir={own}")
    with StoreReader(run) as reader:
        steps, trained = reader.series("downstream/my_qa/acc")
        assert steps.tolist() == [4, 8, 12]
        assert reader.series("downstream/my_prose/bits_per_byte")[0].tolist() == [4, 8, 12]
    result = glassroom_here("eval", str(run), "--tasks", "my_qa,my_prose", "--tasks-dir", str(own), "--step", "8",
                            "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["stored"] is True and out["step"] == 8
    with StoreReader(run) as reader:
        assert reader.series("downstream/my_qa/acc")[1][1] == pytest.approx(out["scores"]["my_qa"]["acc"])
        assert reader.series("downstream/my_prose/bits_per_byte")[1][1] == \
            pytest.approx(out["scores"]["my_prose"]["bits_per_byte"], abs=1e-3)  # trained in bf16 autocast or fp32
        events = [e for e in reader.events() if e["kind"] == "downstream"]
    assert [e["step"] for e in events] == [4, 8, 12, 8]
    assert events[-1]["data"]["scores"] == out["scores"] and events[-1]["data"]["checkpoint"] == "step_0000008"
