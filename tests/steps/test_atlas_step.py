"""The atlas as a pipeline step (glassroom/steps/atlas.py): it writes the dataset's atlas
beside the dataset, is reused on a second run, `glassroom publish` of the workspace finds the dataset with its atlas,
wrong options are one-line errors at load; and the demo's steps include it at k=40."""

from __future__ import annotations

import json

import pytest

from pipeline_helpers import glassroom

from web_helpers import REPO

REPO_RECIPE = REPO / "experiments" / "data-tiny.yaml"

RECIPE = """\
name: two
domains:
  code:
    sources:
      - {kind: python-stdlib, max_bytes: 60K}
  prose:
    sources:
      - {kind: bible, max_bytes: 60K}
split:
  validation_fraction: 0.1
tokenizer:
  vocab_size: 512
  sample_bytes: 100K
"""

EXPERIMENT = """\
from glassroom.steps import data_build_step
from glassroom.steps.atlas import atlas_step

data = data_build_step("two-data", "two.yaml")
steps = [data, atlas_step("two-atlas", data, k={k})]
"""


@pytest.mark.slow
def test_atlas_step_writes_reuses_publishes_and_checks(tmp_path, capsys):
    (tmp_path / "two.yaml").write_text(RECIPE)
    exp = tmp_path / "exp.py"
    exp.write_text(EXPERIMENT.format(k=2))
    ws = tmp_path / "ws"
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 0, err
    (data,) = list((ws / "data").glob("two-data-*"))
    (step,) = list((ws / "data").glob("two-atlas-*"))
    atlas = json.loads((data / "dataset" / "atlas" / "atlas.json").read_text())
    result = json.loads((step / "result.json").read_text())
    assert atlas["k"] == 2 and result["k"] == 2 and result["atlas"] == str(data / "dataset" / "atlas" / "atlas.json")
    assert atlas["domain_purity"] >= 0.95 and result["domain_purity"] == atlas["domain_purity"]
    assert "2 reused" in glassroom("run", exp, "--workspace", ws, capsys=capsys)[2]

    # What `glassroom publish` and `serve` of the workspace find: the dataset, with its atlas.
    from glassroom.web.atlas_page import atlas_file, find_datasets

    found = find_datasets(ws)
    assert list(found) == [f"data/{data.name}/dataset"]
    assert atlas_file(ws, found[f"data/{data.name}/dataset"]) is not None

    for bad, words in (("0", "k must be"), ("'40'", "k must be"), ("True", "k must be"), ("10 ** 6", "more than")):
        exp.write_text(EXPERIMENT.format(k=bad))
        code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_atlas_step_options_are_checked_at_load():
    import pytest

    from glassroom.steps.atlas import atlas_step
    from glassroom.steps.data import data_build_step

    data = data_build_step("d", REPO_RECIPE)
    assert atlas_step("a", data).config["k"] == 40
    for kwargs, words in (({"k": 0}, "k must be"), ({"k": 2.5}, "k must be"), ({"sample": -1}, "sample must be"),
                          ({"seed": "x"}, "seed must be"), ({"max_tokens": 4}, "max_tokens must be"),
                          ({"sampling": "all"}, "sampling must be one of"), ({"method": "slow"}, "method must be one of"),
                          ({"k": 50, "sample": 10}, "more than the 10")):
        with pytest.raises(ValueError, match=words):
            atlas_step("a", data, **kwargs)
    with pytest.raises(ValueError, match="data must be a data step"):
        atlas_step("a", "demo-data")
