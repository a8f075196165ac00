"""Step kinds: `data_build_step` runs the data layer's build as a cached, versioned step."""

from __future__ import annotations

import json

import pytest

from pipeline_helpers import glassroom

RECIPE = """\
name: code
domains:
  code:
    sources:
      - {{kind: python-stdlib, max_bytes: {max_bytes}}}
split:
  validation_fraction: 0.1
tokenizer:
  vocab_size: 512
  sample_bytes: 200K
"""

EXPERIMENT = """\
from glassroom.steps import data_build_step

steps = [data_build_step("code-data", "code.yaml", "tokenizer.vocab_size={vocab}")]
"""


@pytest.mark.slow
def test_data_build_step_builds_reuses_and_rebuilds_on_a_recipe_change(tmp_path, capsys):
    (tmp_path / "code.yaml").write_text(RECIPE.format(max_bytes="200K"))
    exp = tmp_path / "exp.py"
    exp.write_text(EXPERIMENT.format(vocab=512))
    ws = tmp_path / "ws"
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 0, err
    (out,) = list((ws / "data").glob("code-data-*"))
    manifest = json.loads((out / "dataset" / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 512 and manifest["totals"]["train"]["tokens"] > 10_000
    assert json.loads((out / "result.json").read_text())["train_tokens"] == manifest["totals"]["train"]["tokens"]
    assert json.loads((out / "step.json").read_text())["config"]["recipe"]["tokenizer"]["vocab_size"] == 512

    assert "1 reused" in glassroom("run", exp, "--workspace", ws, capsys=capsys)[2]
    (tmp_path / "code.yaml").write_text(RECIPE.format(max_bytes="150K"))  # the file's contents count
    code, out_text, _ = glassroom("run", exp, "--workspace", ws, "--dry-run", capsys=capsys)
    assert "to run   code-data" in out_text

    exp.write_text(EXPERIMENT.format(vocab=5))  # a bad override is a one-line error at load
    code, _, err = glassroom("run", exp, "--workspace", ws, capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tokenizer.vocab_size" in err
