"""`glassroom ladder predict` and `ladder fit --results`: results files and ladder folders, JSON and text,
and every bad input as exit 2 with one line."""

from __future__ import annotations

import json

import pytest

from glassroom.cli import main
from ladder_results_helpers import TRUTH, law, table, write_csv, write_jsonl


def run(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own refusals (an unknown --law, a missing --tokens)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args):
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    rows = table(noise=0.002)
    return write_csv(root / "runs.csv", rows), write_jsonl(root / "runs.jsonl", rows)


def test_csv_and_jsonl_predict_the_same_with_the_law_and_interval(capsys, files):
    csv_file, jsonl_file = files
    a = run_json(capsys, "ladder", "predict", "--results", str(csv_file), "--params", "3e9", "--tokens", "6e10")
    b = run_json(capsys, "ladder", "predict", "--results", str(jsonl_file), "--params", "3B", "--tokens", "60B")
    for key in ("predicted_loss", "lower", "upper"):
        assert a[key] == pytest.approx(b[key], rel=1e-12)
    assert a["law"]["law"] == "L(N,D)" and set(a["law"]["params"]) == set(TRUTH)
    assert a["lower"] < a["predicted_loss"] < a["upper"]
    assert a["lower"] <= law(3e9, 6e10) <= a["upper"]
    assert abs(a["predicted_loss"] / law(3e9, 6e10) - 1) < 0.01
    assert a["interval"]["confidence"] == 0.95 and a["noise"]["source"] == "stated"
    assert a["source"]["runs"] == 12 and a["source"]["flops_from_6nd"] == 12
    assert a["extrapolation"] == pytest.approx(3e9 * 6e10 / (3e8 * 80 * 3e8))
    code, out, err = run(capsys, "ladder", "predict", "--results", str(csv_file), "--params", "3e9", "--tokens", "6e10")
    assert code == 0 and f"predicted loss {a['predicted_loss']:.4f}" in out and "L(N,D)" in out


def test_law_c_and_flops_option(capsys, files):
    c = run_json(capsys, "ladder", "predict", "--results", str(files[0]), "--params", "3e9", "--tokens", "6e10",
                 "--law", "C", "--flops", "1.08e21")
    assert c["law"]["law"] == "L(C)" and c["flops"] == 1.08e21


def test_seeds_measure_the_noise(capsys, tmp_path):
    path = write_csv(tmp_path / "seeds.csv", table(seeds=3, noise=0.01))
    out = run_json(capsys, "ladder", "predict", "--results", str(path), "--params", "1e9", "--tokens", "2e10")
    assert out["noise"]["source"] == "measured" and out["noise"]["dof"] == 24 and out["noise"]["sizes"] == 12
    assert 0.005 < out["noise"]["sigma"] < 0.02
    assert out["source"]["seeds"] == 3


@pytest.mark.slow
def test_fit_results_json_and_text(capsys, files):
    out = run_json(capsys, "ladder", "fit", "--results", str(files[0]))
    assert out["law"]["law"] == "L(N,D)" and out["objective"] == "least-squares"
    assert out["law"]["params"]["E"] == pytest.approx(TRUTH["E"], rel=0.02)
    assert len(out["points"]) == 12 and out["source"]["format"] == "csv"
    huber = run_json(capsys, "ladder", "fit", "--results", str(files[0]), "--objective", "huber", "--law", "C")
    assert huber["law"]["law"] == "L(C)" and huber["objective"] == "huber"
    code, text, _ = run(capsys, "ladder", "fit", "--results", str(files[1]))
    assert code == 0 and "L(N,D) = E + A / N^alpha + B / D^beta" in text and "12 runs, 12 sizes" in text


@pytest.mark.slow
def test_curves_in_a_results_file_give_the_curve_law(capsys, tmp_path):
    from ladder_results_helpers import _curve_rows

    rows, truth = _curve_rows()
    path = write_jsonl(tmp_path / "curves.jsonl", rows)
    fit = run_json(capsys, "ladder", "fit", "--results", str(path), "--law", "C")
    assert fit["curve"]["runs"] == 3 and fit["curve"]["params"]["alpha"] == pytest.approx(truth["alpha"], rel=0.05)
    pred = run_json(capsys, "ladder", "predict", "--results", str(path), "--params", "4e5", "--tokens", "4e6", "--law", "C")
    assert pred["curve"]["like_run"] == "r2" and pred["curve"]["schedule"] == "cosine"
    assert pred["curve"]["lower"] <= pred["curve"]["predicted_loss"] <= pred["curve"]["upper"]


def test_a_loss_that_rises_with_compute_is_a_warning(capsys, tmp_path):
    path = tmp_path / "rise.csv"
    path.write_text("name,params,tokens,loss\na,1e8,2e9,3\nb,2e8,4e9,2.9\nc,4e8,8e9,3.5\n")
    out = run_json(capsys, "ladder", "predict", "--results", str(path), "--params", "1e9", "--tokens", "2e10")
    assert out["law"]["law"] == "L(C)" and len(out["warnings"]) == 1 and "does not fall with compute" in out["warnings"][0]
    code, text, _ = run(capsys, "ladder", "fit", "--results", str(path))
    assert code == 0 and "warning: the run(s) at 1.92e+19 FLOPs" in text


@pytest.fixture(scope="module")
def ladder_dir(tmp_path_factory):
    from ladder_helpers import write_ladder

    out = tmp_path_factory.mktemp("ladder")
    spec, rungs, hero = write_ladder(out, noise=0.001, seed=0, spec_overrides={"fit": {"bootstrap": 40}})
    return out, spec, rungs, hero


def test_predict_on_a_ladder_folder_uses_its_rungs_and_spec(capsys, ladder_dir):
    from ladder_helpers import true_curve

    out, spec, rungs, hero = ladder_dir
    train = hero.config["train"]
    tps = train["batch_size"] * train["seq_len"]
    tokens = train["steps"] * tps
    pred = run_json(capsys, "ladder", "predict", str(out), "--params", str(hero.params), "--tokens", str(tokens))
    assert pred["source"]["format"] == "ladder" and pred["source"]["runs"] == len(rungs)
    assert pred["noise"]["stated"] == spec.fit.noise_floor and pred["interval"]["confidence"] == spec.fit.confidence
    assert [p["seed"] for p in pred["points"]] == [0] * len(rungs)
    assert [p["params"] for p in pred["points"]] == sorted(r.params for r in rungs)
    truth = float(true_curve(hero.params, train, tps, [train["steps"]])[0])
    assert abs(pred["predicted_loss"] / truth - 1) < 0.03
    code, text, _ = run(capsys, "ladder", "predict", str(out), "--params", str(hero.params), "--tokens", str(tokens))
    assert code == 0 and "predicted loss" in text and "L(C)" in text


def test_predict_on_a_ladder_with_two_seeds_measures_the_noise(capsys, tmp_path):
    import copy

    import numpy as np
    import yaml

    from ladder_helpers import write_ladder, write_rung

    spec, rungs, hero = write_ladder(tmp_path, noise=0.001, seed=0, spec_overrides={"fit": {"bootstrap": 40}})
    rng = np.random.default_rng(1)
    for run in rungs:
        again = copy.deepcopy(run)
        again.config["train"]["seed"] = 1
        write_rung(tmp_path / "rungs" / f"{run.name}-s1", again, 0.005, rng, spec.fit.momentum)
    train = hero.config["train"]
    tokens = train["steps"] * train["batch_size"] * train["seq_len"]
    pred = run_json(capsys, "ladder", "predict", str(tmp_path), "--params", str(hero.params), "--tokens", str(tokens))
    assert pred["source"]["runs"] == 2 * len(rungs) and pred["source"]["sizes"] == len(rungs)
    assert sorted({p["seed"] for p in pred["points"]}) == [0, 1]
    assert pred["noise"]["source"] == "measured" and pred["noise"]["dof"] == len(rungs)
    assert yaml.safe_load((tmp_path / "rungs" / f"{rungs[0].name}-s1" / "config.yaml").read_text())["train"]["seed"] == 1


BAD_FILES = {
    "missing column": "name,params,tokens,flops\na,1e8,2e9,1e18\nb,2e8,4e9,4e18\n",
    "negative loss": "name,params,tokens,loss\na,1e8,2e9,-3\nb,2e8,4e9,2.9\n",
    "zero loss": "name,params,tokens,loss\na,1e8,2e9,0\nb,2e8,4e9,2.9\n",
    "NaN loss": "name,params,tokens,loss\na,1e8,2e9,NaN\nb,2e8,4e9,2.9\n",
    "inf params": "name,params,tokens,loss\na,inf,2e9,3\nb,2e8,4e9,2.9\n",
    "duplicated size": "name,params,tokens,loss\na,1e8,2e9,3\nb,1e8,2e9,2.9\n",
    "single size": "name,params,tokens,seed,loss\na,1e8,2e9,0,3\nb,1e8,2e9,1,2.9\n",
    "mixed formats": "name,params,tokens,loss\na,1e8,2e9,3\n{\"name\": \"b\"}\n",
    "unparseable row": "name,params,tokens,loss\na,1e8,2e9\nb,2e8,4e9,2.9\n",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["predict", "fit"])
def test_bad_results_files_exit_2_with_one_line(capsys, tmp_path, case, command):
    path = tmp_path / "bad.csv"
    path.write_text(BAD_FILES[case])
    extra = ["--params", "1e9", "--tokens", "2e10"] if command == "predict" else []
    code, out, err = run(capsys, "ladder", command, "--results", str(path), *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and str(path) in err


@pytest.mark.parametrize("args,needle", [
    (["--params", "0", "--tokens", "2e10"], "--params: must be above zero"),
    (["--params=-1", "--tokens", "2e10"], "--params"),
    (["--params", "nan", "--tokens", "2e10"], "--params"),
    (["--params", "abc", "--tokens", "2e10"], "--params: 'abc' is not a positive number"),
    (["--params", "1e9", "--tokens", "0"], "--tokens: must be above zero"),
    (["--params", "1e9", "--tokens", "inf"], "--tokens"),
    (["--params", "1e9", "--tokens", "2e10", "--flops", "0"], "--flops: must be above zero"),
    (["--params", "1e200", "--tokens", "1e200"], "the compute overflows"),
    (["--params", "1e9", "--tokens", "2e10", "--noise", "2"], "--noise: must be at least 0 and below 1"),
    (["--params", "1e9", "--tokens", "2e10", "--noise", "x"], "--noise: 'x' is not a number"),
    (["--params", "1e9", "--tokens", "2e10", "--confidence", "1"], "--confidence: must be above 0 and below 1"),
    (["--params", "1e9", "--tokens", "2e10", "--confidence", "0"], "--confidence"),
    (["--params", "1e9", "--tokens", "2e10", "--law", "X"], "invalid choice"),
    (["--params", "1e9"], "--tokens"),
])
def test_bad_predict_options_exit_2_with_one_line(capsys, files, args, needle):
    code, out, err = run(capsys, "ladder", "predict", "--results", str(files[0]), *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.parametrize("args,needle", [
    (["ladder", "predict", "DIR", "--results", "FILE", "--params", "1e9", "--tokens", "2e10"], "not both"),
    (["ladder", "predict", "--params", "1e9", "--tokens", "2e10"], "give a ladder folder"),
    (["ladder", "fit", "DIR", "--results", "FILE"], "not both"),
    (["ladder", "fit"], "give a ladder folder"),
    (["ladder", "fit", "DIR", "--law", "ND"], "--law: only with --results"),
    (["ladder", "fit", "--results", "FILE", "--allow-nonmonotone"], "--allow-nonmonotone: only with a ladder folder"),
    (["ladder", "predict", "--results", "no/such.csv", "--params", "1e9", "--tokens", "2e10"], "no such results file"),
])
def test_source_mistakes_are_one_line(capsys, tmp_path, args, needle):
    args = [str(tmp_path / "x.csv") if a == "FILE" else str(tmp_path) if a == "DIR" else a for a in args]
    if "FILE" not in args:
        (tmp_path / "x.csv").write_text("name,params,tokens,loss\na,1e8,2e9,3\nb,2e8,4e9,2.9\n")
    code, out, err = run(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_predict_on_a_folder_given_as_results_file(capsys, tmp_path):
    code, _, err = run(capsys, "ladder", "predict", "--results", str(tmp_path), "--params", "1e9", "--tokens", "2e10")
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1


def test_ladder_help_lists_predict_and_design(capsys):
    assert main(["ladder", "--help"]) == 0
    listing = capsys.readouterr().out
    assert "predict" in listing and "design" in listing
    assert main(["ladder", "predict", "--help"]) == 0
    help_text = capsys.readouterr().out
    for flag in ("--results", "--params", "--tokens", "--flops", "--law", "--noise", "--confidence", "--objective"):
        assert flag in help_text
