"""The bounded YAML reader every command uses (glassroom/yaml_io.py): alias bombs, depth, size and
duplicate keys are refused in one line; ordinary documents (anchors, merge keys) read as PyYAML does."""

from __future__ import annotations

import pytest
import yaml

from glassroom import yaml_io
from glassroom.cli import main


def _bomb(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded():
    text = _bomb()
    assert len(text) < 600                       # a few hundred bytes ...
    with pytest.raises(yaml_io.YamlLimitError, match="expands to more than"):
        yaml_io.safe_load(text)                  # ... that would be 9**9 = 387M strings


def test_shared_anchors_within_the_limit_read_like_pyyaml():
    text = "base: &b {lr: 0.001, steps: 10}\nrun: *b\nother:\n  <<: *b\n  steps: 20\n"
    assert yaml_io.safe_load(text) == yaml.safe_load(text)
    assert yaml_io.safe_load(_bomb(levels=4)) == yaml.safe_load(_bomb(levels=4))   # 9**4 values: fine


def test_depth_size_and_self_reference_are_refused():
    with pytest.raises(yaml_io.YamlLimitError, match="nested deeper"):
        yaml_io.safe_load("[" * 200 + "]" * 200)
    with pytest.raises(yaml_io.YamlLimitError, match="characters"):
        yaml_io.safe_load("a: " + "x" * (yaml_io.MAX_BYTES + 1))
    with pytest.raises((yaml_io.YamlLimitError, yaml.YAMLError)):
        yaml_io.safe_load("&a [*a]")


def test_a_key_given_twice_is_refused_naming_it_and_its_line():
    with pytest.raises(yaml.YAMLError) as info:
        yaml_io.safe_load("domains:\n  code: 1\n  prose: 2\n  code: 3\n")
    message = yaml_io.describe_error(info.value)
    assert "duplicate key 'code'" in message and "line 4" in message
    assert yaml_io.safe_load("a: [1, 1]\nb: {x: 1, y: 1}\n") == {"a": [1, 1], "b": {"x": 1, "y": 1}}


@pytest.mark.parametrize("text, expected", [
    (_bomb(), "expands to more than"),
    ("train:\n  lr: 0.001\n  lr: 0.1\n", "duplicate key 'lr'"),
])
def test_train_refuses_them_in_one_line_and_makes_no_run(tmp_path, capsys, text, expected):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    code = main(["train", str(config), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and expected in err[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["train", "{p}", "--out", "{o}"], ["data", "build", "{p}", "--out", "{o}"],
                                     ["ladder", "plan", "{p}"], ["plan", "{p}"]])
def test_a_pipe_given_as_a_config_is_refused_without_reading_it(tmp_path, capsys, command):
    import os

    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)   # reading it would block until someone writes: never opened
    args = [a.format(p=fifo, o=tmp_path / "out") for a in command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a regular file" in err[0]
    assert not (tmp_path / "out").exists()
