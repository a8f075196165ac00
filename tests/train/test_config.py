"""The run config's two halves: `resolve_init` reads the init: base's files, `parse_run_config` reads
none, and `run_config_from_mapping` is the two in order."""

from __future__ import annotations

import builtins
import io
from pathlib import Path

import pytest
import yaml

from glassroom.errors import ConfigError
from glassroom.train.config import parse_run_config, resolve_init, run_config_from_mapping

ROOT = Path(__file__).resolve().parents[2]


def tiny_with_init(base: Path) -> dict:
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text())
    raw["init"] = {"from": str(base)}
    raw["train"]["task"] = "sft"
    return raw


def test_parsing_reads_no_file(tmp_path, monkeypatch):
    raw = tiny_with_init(tmp_path / "no-such-base")  # resolving would have to read it
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy)
    monkeypatch.setattr(Path, "exists", lambda self: opened.append(str(self)) or False)
    monkeypatch.setattr(Path, "is_file", lambda self: opened.append(str(self)) or False)
    monkeypatch.setattr(Path, "is_dir", lambda self: opened.append(str(self)) or False)
    cfg = parse_run_config(raw, "tiny")
    assert opened == [] and cfg.init.source == str(tmp_path / "no-such-base") and cfg.train.task == "sft"


def test_resolving_reads_the_base_and_its_errors_name_the_folder(tmp_path):
    raw = tiny_with_init(tmp_path / "no-such-base")
    del raw["model"]  # the base's model: section is needed
    with pytest.raises(ConfigError, match="init.from: .*no-such-base: no such folder"):
        resolve_init(raw)
    with pytest.raises(ConfigError, match="no such folder"):
        run_config_from_mapping(raw, "tiny")


def test_a_config_without_init_is_the_same_through_either_door():
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "train-tiny.yaml").read_text())
    assert resolve_init(raw) is raw
    assert parse_run_config(raw, "tiny") == run_config_from_mapping(raw, "tiny")


def test_unknown_sections_are_refused_before_any_base_is_read(tmp_path):
    raw = {**tiny_with_init(tmp_path / "no-such-base"), "modle": {}}
    with pytest.raises(ConfigError, match="modle: unknown section"):
        resolve_init(raw)
