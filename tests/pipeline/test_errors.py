"""Bad input to `glassroom run` / `glassroom show`: one line, exit 2, and nothing already done is lost."""

from __future__ import annotations

import json

import pytest

from pipeline_helpers import calls, glassroom, write_experiment

GOOD = """
a = Step("a", work, {"add": 1})
b = Step("b", work, {"in_a": a / "value.json", "add": 2})
steps = [b]
"""


def one_line_error(capsys, *args) -> str:
    code, out, err = glassroom(*args, capsys=capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("body, expected", [
    ("""
     a = Step("a", work, deps=("c",))
     b = Step("b", work, deps=(a,))
     c = Step("c", work, deps=(b,))
     steps = [c]
     """, "steps form a cycle: c -> b -> a -> c"),
    ("""
     a = Step("a", work, {"in_x": output_of("tokenizr", "tokenizer.json")})
     b = Step("tokenizer", work)
     steps = [a, b]
     """, "step 'a' depends on 'tokenizr', which is not a step of this experiment (did you mean tokenizer?)"),
    ("""
     steps = [Step("a", work, {"n": 1}), Step("a", work, {"n": 2})]
     """, "two different steps are named 'a'"),
    ("""
     steps = [Step("a", lambda ctx: None)]
     """, "must be defined at the top level"),
    ("""
     steps = [Step("a", work, {"when": time.time})]
     """, "config.when: a builtin_function_or_method cannot be part of a step's version"),
    ("""
     x = {"a": 1}["b"]
     """, "line 25: KeyError: 'b'"),
    ("""
     def broken(:
     """, "SyntaxError"),
    ("""
     a = 1
     """, "defines no `steps`"),
])
def test_bad_experiments_are_one_line_errors(tmp_path, capsys, body, expected):
    exp = write_experiment(tmp_path, body)
    line = one_line_error(capsys, "run", exp, "--workspace", tmp_path / "ws")
    assert expected in line
    assert str(exp.resolve()) in line
    assert not (tmp_path / "ws").exists()


def test_unknown_names_in_only_and_force(tmp_path, capsys):
    exp = write_experiment(tmp_path, GOOD)
    ws = tmp_path / "ws"
    assert "--only 'zzz' matches no step; the steps are: a, b" in one_line_error(capsys, "run", exp, "--workspace", ws, "--only", "zzz")
    assert "not a valid regular expression" in one_line_error(capsys, "run", exp, "--workspace", ws, "--only", "(")
    assert "--force bb: no such step (did you mean b?)" in one_line_error(capsys, "run", exp, "--workspace", ws, "--force", "bb")
    assert "no such experiment file" in one_line_error(capsys, "run", tmp_path / "nope.py")
    assert "must be at least 1" in one_line_error(capsys, "run", exp, "--jobs", "0")
    assert "no such file or folder" in one_line_error(capsys, "show", tmp_path / "nope")
    assert calls(tmp_path, "a") == 0


def test_a_broken_edit_loses_nothing_already_done(tmp_path, capsys):
    exp = write_experiment(tmp_path, GOOD)
    ws = tmp_path / "ws"
    assert glassroom("run", exp, "--workspace", ws, capsys=capsys)[0] == 0
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}

    exp.write_text(exp.read_text() + "\nraise RuntimeError('half-edited experiment')\n")
    assert "RuntimeError: half-edited experiment" in one_line_error(capsys, "run", exp, "--workspace", ws)
    exp.write_text(exp.read_text().replace("raise RuntimeError('half-edited experiment')", "")
                   .replace('steps = [b]', 'steps = [b, Step("c", work, deps=("b", "zz"))]'))
    assert "depends on 'zz'" in one_line_error(capsys, "run", exp, "--workspace", ws)

    after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert after == before
    assert all(json.loads((d / "status.json").read_text())["state"] == "done" for d in (ws / "steps").iterdir())


def test_ray_flag_without_ray_or_with_jobs(tmp_path, capsys, monkeypatch):
    exp = write_experiment(tmp_path, GOOD)
    assert "--jobs applies to the local runner" in one_line_error(
        capsys, "run", exp, "--ray", "local", "--jobs", "2", "--workspace", tmp_path / "ws")
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert "pip install -e '.[ray]'" in one_line_error(capsys, "run", exp, "--ray", "local", "--workspace", tmp_path / "ws")


def test_progress_every_must_be_a_finite_number(tmp_path, capsys):
    exp = write_experiment(tmp_path, GOOD)
    for value in ("nan", "inf", "0"):
        assert "--progress-every" in one_line_error(capsys, "run", exp, "--workspace", tmp_path / "ws",
                                                    "--progress-every", value)
    assert calls(tmp_path, "a") == 0


@pytest.mark.parametrize("name, text, expected", [
    ("step.json", "{{", "step.json: damaged (JSONDecodeError)"),
    ("step.json", "[1]", "step.json: damaged (a JSON list, not an object)"),
    ("step.json", "{}", "step.json: damaged (no step name)"),
    ("provenance.json", '{"x": 1}', "provenance.json: damaged (KeyError: 'experiment')"),
    ("provenance.json", '{"experiment": {"path": "a", "sha256": 5}, "glassroom": {}}', "provenance.json: damaged (TypeError"),
    ("provenance.json", '{"experiment": {"path": "a", "sha256": "ab"}, "glassroom": {}, "chain": [5]}',
     "provenance.json: damaged"),
    ("status.json", '{"duration_s": "long"}', "status.json: damaged (ValueError"),
    ("status.json", '{"attempt": "2"}', "status.json: damaged (TypeError"),
    ("status.json", "null", "status.json: damaged (a JSON NoneType, not an object)"),
])
def test_show_names_a_damaged_record_in_one_line(tmp_path, capsys, name, text, expected):
    """Each used to end in a traceback (exit 1) or print `None` as if all were well."""
    exp = write_experiment(tmp_path, GOOD)
    assert glassroom("run", exp, "--workspace", tmp_path / "ws", capsys=capsys)[0] == 0
    output = next((tmp_path / "ws" / "steps").glob("b-*"))
    assert glassroom("show", output, capsys=capsys)[0] == 0
    (output / name).write_text(text)
    assert expected in one_line_error(capsys, "show", output)
    assert (output / name).read_text() == text  # nothing rewritten


def test_show_survives_a_time_beyond_the_calendar(tmp_path, capsys):
    exp = write_experiment(tmp_path, GOOD)
    assert glassroom("run", exp, "--workspace", tmp_path / "ws", capsys=capsys)[0] == 0
    output = next((tmp_path / "ws" / "steps").glob("b-*"))
    status = json.loads((output / "status.json").read_text())
    (output / "status.json").write_text(json.dumps({**status, "started": 1e300}))
    code, out, _ = glassroom("show", output, capsys=capsys)
    assert code == 0 and "started ?" in out
