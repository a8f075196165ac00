"""Bad inputs to `glassroom ladder fit/backtest/plan/run/verify`: exit 2 and one line naming the rung,
file or key, never a traceback; non-monotone rungs only with --allow-nonmonotone, marked unreliable."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from glassroom.ladder.rungs import load_rungs
from cli_helpers import glassroom_in_process
from ladder_helpers import ROOT, write_ladder

FAST = {"fit": {"bootstrap": 20, "momentum": 0.999}}
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))


def real_glassroom(*args) -> subprocess.CompletedProcess:
    """`python -m glassroom ARGS`: a real process, for one check per command that the one-line error and exit
    code 2 arrive through the interpreter."""
    return subprocess.run([sys.executable, "-m", "glassroom", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def glassroom(*args) -> subprocess.CompletedProcess:
    """The same command in this process (no torch import per call): exit code, stdout, stderr (and warnings)."""
    return glassroom_in_process(*args)


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def clean_ladder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("inputs") / "ladder"
    write_ladder(out, noise=0.001, seed=0, spec_overrides=FAST)
    return out


@contextlib.contextmanager
def edit_store(path: Path):
    """A connection committed and closed on leaving: a connection left to the garbage collector is closed (and
    its WAL checkpointed into store.sqlite) whenever the collector runs, maybe during the command under test."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def rung_dirs(ladder: Path) -> list[Path]:
    return [r.run_dir for r in load_rungs(ladder)]  # smallest compute first


def set_final(run_dir: Path, value, metric: str = "eval/macro/loss") -> None:
    with edit_store(run_dir / "store.sqlite") as conn:
        conn.execute("UPDATE metrics SET value = ? WHERE name_id = (SELECT id FROM names WHERE name = ?) AND "
                     "step = (SELECT MAX(step) FROM metrics WHERE name_id = (SELECT id FROM names WHERE name = ?))",
                     (value, metric, metric))


def negative(ladder):
    set_final(rung_dirs(ladder)[1], -0.5)
    return "is -0.5"


def zero(ladder):
    set_final(rung_dirs(ladder)[2], 0.0)
    return "is 0"


def nan(ladder):
    set_final(rung_dirs(ladder)[1], None)  # NaN and Inf are stored as null
    return "NaN or infinite"


def same_compute(ladder):
    rungs = rung_dirs(ladder)
    shutil.copytree(rungs[-1], rungs[-1].parent / "copy")
    return "same compute"


def non_monotone(ladder):
    rungs = rung_dirs(ladder)
    with edit_store(rungs[1] / "store.sqlite") as conn:
        smaller = conn.execute("SELECT value FROM metrics WHERE name_id = (SELECT id FROM names WHERE name = "
                               "'eval/macro/loss') ORDER BY step DESC LIMIT 1").fetchone()[0]
    set_final(rungs[-1], smaller * 1.05)
    return "does not fall with compute"


def unfinished(ladder):
    with edit_store(rung_dirs(ladder)[0] / "store.sqlite") as conn:
        conn.execute("DELETE FROM metrics WHERE step = (SELECT MAX(step) FROM metrics)")
    return "has not finished"


def set_fit(ladder: Path, **values) -> None:
    raw = yaml.safe_load((ladder / "spec.yaml").read_text())
    raw["fit"].update(values)
    (ladder / "spec.yaml").write_text(yaml.safe_dump(raw))


def irreducible_above_a_final(ladder):
    set_fit(ladder, irreducible=50)
    return "fit.irreducible 50 is not below"


def few_curve_points(ladder):
    """Three rungs with two evaluations each: 6 values for the curve law's 6 parameters."""
    set_fit(ladder, skip_fraction=0.5)
    rungs = rung_dirs(ladder)[:3]
    (ladder / "ladder.json").write_text(json.dumps({"rungs": [str(r) for r in rungs]}))
    for run_dir in rungs:
        with edit_store(run_dir / "store.sqlite") as conn:
            for (name_id,) in conn.execute("SELECT id FROM names WHERE name LIKE 'eval/%'").fetchall():
                conn.execute("DELETE FROM metrics WHERE name_id = ? AND step NOT IN (SELECT step FROM metrics "
                             "WHERE name_id = ? ORDER BY step DESC LIMIT 2)", (name_id, name_id))
    return "6 free parameters but the rungs give only"


def corrupt_store(ladder):
    (rung_dirs(ladder)[2] / "store.sqlite").write_bytes(b"not a database" * 100)
    return "unreadable run store"


def alias_bomb_config(ladder):
    (rung_dirs(ladder)[0] / "config.yaml").write_text(BOMB)
    return "refused"


def config_not_a_mapping(ladder):
    (rung_dirs(ladder)[0] / "config.yaml").write_text("- just\n- a list\n")
    return "config.yaml"


def bad_listing(ladder):
    (ladder / "ladder.json").write_text('{"rungs": "rungs/209K"}')
    return "ladder.json"


def rungs_is_a_file(ladder):
    shutil.rmtree(ladder / "rungs")
    (ladder / "rungs").write_text("x")
    return "rungs"


def bad_spec_key(ladder):
    set_fit(ladder, bootstrapp=3)
    return "bootstrapp"


def nan_noise_floor(ladder):
    set_fit(ladder, noise_floor=float("nan"))
    return "noise_floor"


def set_mid_curve(run_dir: Path, value, metric: str = "eval/macro/loss") -> None:
    """Replace the value of the middle evaluation of `metric` (raw SQL: text and bytes stay as given)."""
    with edit_store(run_dir / "store.sqlite") as conn:
        name_id = conn.execute("SELECT id FROM names WHERE name = ?", (metric,)).fetchone()[0]
        steps = [r[0] for r in conn.execute("SELECT step FROM metrics WHERE name_id = ? ORDER BY step", (name_id,))]
        conn.execute("UPDATE metrics SET value = ? WHERE name_id = ? AND step = ?", (value, name_id, steps[len(steps) // 2]))


def huge_loss_mid_curve(ladder):
    """Near the float limit the fit's least-squares starts overflowed (a segfault in scipy's NNLS)."""
    set_mid_curve(rung_dirs(ladder)[-1], 1e308)
    return "is 1e+308 at step"


def huge_final(ladder):
    set_final(rung_dirs(ladder)[0], 1e300)
    return "is 1e+300"


def tiny_finals(ladder):
    """Losses of 1e-300: the bootstrap's perturbed values underflowed to zero (log warnings, a garbage fit)."""
    for run_dir in rung_dirs(ladder):
        with edit_store(run_dir / "store.sqlite") as conn:
            conn.execute("UPDATE metrics SET value = value * 1e-300 WHERE name_id IN "
                         "(SELECT id FROM names WHERE name LIKE 'eval/%')")
    return "is no loss a fit can use"


def text_in_the_store(ladder):
    set_mid_curve(rung_dirs(ladder)[1], "abc")
    return "a metric value is not a number"


def bytes_in_the_store(ladder):
    set_final(rung_dirs(ladder)[2], b"\x00\xff")
    return "a metric value is not a number"


def zero_mid_curve_of_the_largest(ladder):
    """The backtest compares the held-out rung's curve point by point (it printed `inf%`)."""
    set_mid_curve(rung_dirs(ladder)[-1], 0.0)
    return "is 0 at step"


def listed_twice(ladder):
    first = rung_dirs(ladder)[0].relative_to(ladder)
    (ladder / "ladder.json").write_text(json.dumps({"rungs": [str(first), f"./{first}"] + [
        str(r.relative_to(ladder)) for r in rung_dirs(ladder)[1:]]}))
    return f"lists the rung '{first}' twice"


def spec_is_a_folder(ladder):  # was ignored: the fit ran with default settings
    (ladder / "spec.yaml").unlink()
    (ladder / "spec.yaml").mkdir()
    return "spec.yaml: not a file"


def listing_is_a_folder(ladder):  # was ignored: every DIR/rungs/* was fitted instead
    (ladder / "ladder.json").mkdir()
    return "ladder.json: not a file"


CASES = [negative, zero, nan, same_compute, non_monotone, unfinished, irreducible_above_a_final, few_curve_points,
         corrupt_store, alias_bomb_config, config_not_a_mapping, bad_listing, rungs_is_a_file, bad_spec_key,
         nan_noise_floor, huge_loss_mid_curve, huge_final, text_in_the_store, bytes_in_the_store,
         zero_mid_curve_of_the_largest, tiny_finals, listed_twice, spec_is_a_folder, listing_is_a_folder]


def files(folder: Path) -> dict:
    """Every file's bytes, but SQLite's -wal/-shm companions (readers create them)."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_fit_and_backtest_refuse_bad_rungs_in_one_line(clean_ladder, tmp_path, case):
    ladder = tmp_path / "ladder"
    shutil.copytree(clean_ladder, ladder)
    needle = case(ladder)
    before = files(ladder)
    run = real_glassroom if case is CASES[0] else glassroom  # one case through `python -m glassroom`
    for command in ("fit", "backtest"):
        result = run("ladder", command, ladder)
        one_line_error(result, *([needle] if needle else []))
    assert files(ladder) == before  # nothing written, nothing destroyed


def test_refusals_name_the_rungs(clean_ladder, tmp_path):
    ladder = tmp_path / "ladder"
    shutil.copytree(clean_ladder, ladder)
    non_monotone(ladder)
    names = [r.name for r in load_rungs(ladder)]
    line = glassroom("ladder", "fit", ladder).stderr
    assert f": {names[-1]} (" in line and "no better than the smaller" in line and "--allow-nonmonotone" in line
    assert any(f"smaller {name} (" in line for name in names[:-1])


@pytest.mark.slow
def test_allow_nonmonotone_fits_and_marks_the_fit_unreliable(clean_ladder, tmp_path):
    ladder = tmp_path / "ladder"
    shutil.copytree(clean_ladder, ladder)
    non_monotone(ladder)
    fit = glassroom("ladder", "fit", ladder, "--allow-nonmonotone", "--json")
    assert fit.returncode == 0, fit.stderr[-2000:]
    report = json.loads(fit.stdout)
    assert report["reliable"] is False and any("does not fall with compute" in w for w in report["warnings"])
    text = glassroom("ladder", "fit", ladder, "--allow-nonmonotone")
    assert "UNRELIABLE" in text.stdout and "warning: final eval/macro/loss does not fall" in text.stdout
    backtest = glassroom("ladder", "backtest", ladder, "--allow-nonmonotone", "--json")
    assert backtest.returncode == 0, backtest.stderr[-2000:]
    assert json.loads(backtest.stdout)["reliable"] is False
    clean = json.loads(glassroom("ladder", "fit", clean_ladder, "--json").stdout)
    assert clean["reliable"] is True and clean["warnings"] == []


def spec_missing(tmp_path):
    return tmp_path / "none.yaml", "no such file"


def spec_folder(tmp_path):
    return tmp_path, "is a folder"


def spec_alias_bomb(tmp_path):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    return tmp_path / "bomb.yaml", "refused"


def spec_bad_key(tmp_path):
    text = (ROOT / "experiments" / "ladder-demo.yaml").read_text().replace("fit:\n", "fit:\n  metrc: x\n", 1)
    (tmp_path / "bad.yaml").write_text(text)
    return tmp_path / "bad.yaml", "metrc"


def spec_not_yaml(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    return tmp_path / "bad.yaml", "not valid YAML"


def spec_empty(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    return tmp_path / "empty.yaml", "empty.yaml"


def demo_spec_with(tmp_path, stem: str, **changes) -> Path:
    """experiments/ladder-demo.yaml with top-level keys (or `a__b` nested keys) replaced."""
    raw = yaml.safe_load((ROOT / "experiments" / "ladder-demo.yaml").read_text())
    for key, value in changes.items():
        *parents, last = key.split("__")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path = tmp_path / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def spec_rule_overflows(tmp_path):  # an OverflowError traceback before
    return demo_spec_with(tmp_path, "overflow", scaling__lr={"base": 1.0, "of": "compute", "exponent": 1e10}), \
        "scaling.lr: gives inf"


def spec_negative_tokens(tmp_path):  # a complex number from (negative compute) ** exponent before
    path = demo_spec_with(tmp_path, "negative", tokens=[-5, 1e5, 2e5, 3e5], hero__tokens=1e6)
    raw = yaml.safe_load(path.read_text())
    del raw["tokens_per_param"]
    path.write_text(yaml.safe_dump(raw))
    return path, "tokens[0]: must be a positive number of tokens"


def spec_huge_tokens_per_param(tmp_path):  # OverflowError: cannot convert float infinity to integer
    return demo_spec_with(tmp_path, "huge", tokens_per_param=1e300), "FLOPs, beyond any plan"


def spec_dial_of_a_trillion(tmp_path):  # counted 6e10 layers one by one: hung
    return demo_spec_with(tmp_path, "trillion", rungs=[16, 10**12]), "62500000000 layers"


def spec_name_with_a_slash(tmp_path):  # names the pipeline's step folders
    return demo_spec_with(tmp_path, "slash", name="../../etc"), "name: '../../etc'"


def spec_eval_fraction_above_one(tmp_path):
    return demo_spec_with(tmp_path, "eval", eval_fraction=1e9), "eval_fraction: must be above 0 and at most 1"


def spec_negative_seed(tmp_path):  # numpy's default_rng(-1) raised at fit time
    return demo_spec_with(tmp_path, "seed", fit__seed=-1), "fit.seed: must be zero or more"


SPECS = [spec_missing, spec_folder, spec_alias_bomb, spec_bad_key, spec_not_yaml, spec_empty, spec_rule_overflows,
         spec_negative_tokens, spec_huge_tokens_per_param, spec_dial_of_a_trillion, spec_name_with_a_slash,
         spec_eval_fraction_above_one, spec_negative_seed]


@pytest.mark.slow
@pytest.mark.parametrize("case", SPECS, ids=[c.__name__ for c in SPECS])
def test_plan_and_run_refuse_bad_specs_in_one_line(tmp_path, case):
    spec, needle = case(tmp_path)
    run = real_glassroom if case is SPECS[0] else glassroom  # one case through `python -m glassroom`
    one_line_error(run("ladder", "plan", spec, "--cpu-flops", "1e10"), needle)
    one_line_error(run("ladder", "run", spec, "--out", tmp_path / "out"), needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, needle", [
    (["--cpu-flops", "nan"], "--cpu-flops"), (["--cpu-flops", "inf"], "--cpu-flops"), (["--cpu-flops", "0"], "--cpu-flops"),
    (["--mfu", "nan"], "--mfu"), (["--gpus", "0"], "--gpus"), (["--gpu", "h999"], "invalid choice"),
    (["--mfu", "1e-320"], "too small to time a run"), (["--cpu-flops", "1e-300"], "too small to time a run")])
def test_plan_options_refused_in_one_line(args, needle):
    one_line_error(glassroom("ladder", "plan", ROOT / "experiments" / "ladder-demo.yaml", *args), needle)


def test_fit_on_a_file_or_an_empty_ladder_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for command in ("fit", "backtest"):
        one_line_error(glassroom("ladder", command, tmp_path / "file"), "is a file")
        one_line_error(glassroom("ladder", command, tmp_path / "none"), "no such ladder folder")
    (tmp_path / "empty" / "rungs").mkdir(parents=True)
    one_line_error(glassroom("ladder", "fit", tmp_path / "empty"), "0 rung(s)")


def test_verify_bad_inputs_are_one_line(tmp_path, clean_ladder):
    one_line_error(real_glassroom("ladder", "verify", tmp_path / "nope"), "no such folder")
    (tmp_path / "file").write_text("x")
    one_line_error(glassroom("ladder", "verify", tmp_path / "file"), "is a file")
    one_line_error(glassroom("ladder", "verify", tmp_path), "no store.sqlite")
    rung = rung_dirs(clean_ladder)[0]
    one_line_error(glassroom("ladder", "verify", rung), "no preregistered prediction")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "store.sqlite").write_bytes(b"garbage" * 200)
    one_line_error(glassroom("ladder", "verify", broken), "unreadable run store")


@pytest.mark.slow
def test_run_with_an_unknown_force_name_writes_nothing(tmp_path, tiny_dataset):
    out = tmp_path / "ladder"
    result = glassroom("ladder", "run", ROOT / "tests" / "configs" / "ladder-tiny.yaml", "--out", out,
                       "--data", tiny_dataset, "--force", "nope")
    one_line_error(result, "--force nope: no such step; the steps are: ")
    assert not out.exists()  # it used to write DIR/ladder_experiment.py first


@pytest.mark.slow
def test_a_step_json_that_is_not_an_object_is_ignored(clean_ladder, tmp_path):
    """step.json is optional (it only records the pipeline version): a damaged one was an
    AttributeError traceback."""
    ladder = tmp_path / "ladder"
    shutil.copytree(clean_ladder, ladder)
    (rung_dirs(ladder)[0] / "step.json").write_text("[1]")
    result = glassroom("ladder", "fit", ladder, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rungs"][0]["version"] is None
