"""The curve law, the hero prediction, preregistration, deviation, and `ladder fit` / `ladder backtest`."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.ladder.predict import (deviation, fit_curves, lr_multipliers, make_prediction, predict_curve,
                                      preregister, schedule_areas)
from glassroom.ladder.rungs import load_rungs
from glassroom.observe.store import StoreReader
from cli_helpers import glassroom_in_process
from ladder_helpers import ROOT, TRUTH, true_curve, write_ladder

FAST = {"fit": {"bootstrap": 40, "momentum": 0.999}}  # TRUTH's C is sized for the paper's lambda (the demo uses 0.95)


def real_glassroom(*args):
    """`python -m glassroom ARGS`: a real process, for one check per command that the one-line error and exit
    code 2 arrive through the interpreter."""
    return subprocess.run([sys.executable, "-m", "glassroom", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def glassroom(*args):
    """The same command in this process (no torch import per call): exit code, stdout, stderr (and warnings)."""
    return glassroom_in_process(*args)


def test_schedule_areas_match_the_definition():
    m = np.array([0.5, 1.0, 1.0, 0.8, 0.5, 0.5])
    s1, s2 = schedule_areas(m, momentum=0.9)
    assert s1.tolist() == pytest.approx([0, 0.5, 1.5, 2.5, 3.3, 3.8, 4.3])
    # drops: 0 (warmup rise counts as 0), 0, 0.2, 0.3, 0; mom: 0, 0, 0, .2, .48, .432
    assert s2.tolist() == pytest.approx([0, 0, 0, 0, 0.2, 0.68, 1.112])
    constant = lr_multipliers({"steps": 50, "batch_size": 8, "micro_batch_size": 8, "seq_len": 16, "lr": 1e-3,
                               "schedule": "constant"})
    assert schedule_areas(constant)[1][-1] == 0


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder")
    spec, rungs, hero = write_ladder(out, noise=0.001, seed=0, schedules=("cosine", "wsd"), spec_overrides=FAST)
    return out, spec, rungs, hero


def test_curve_law_predicts_a_held_out_schedule(ladder):
    """Rungs trained under cosine and WSD; the hero, 2.4x the largest rung, under a linear schedule."""
    out, spec, _, hero = ladder
    fit = fit_curves(load_rungs(out), "eval/macro/loss", spec.fit)
    for name in ("alpha", "beta"):
        lo, hi = fit.intervals[name]
        assert lo <= TRUTH[name] <= hi
    train = copy.deepcopy(hero.config["train"])
    train["schedule"] = "linear"
    tps = train["batch_size"] * train["seq_len"]
    band = predict_curve(fit, hero.params, train, tps, spec.fit)
    truth = true_curve(hero.params, train, tps, band["steps"])
    assert np.max(np.abs(np.array(band["mean"]) / truth - 1)) < 0.005
    lo, hi = band["final_interval"]
    assert lo < truth[-1] < hi and lo < band["final_loss"] < hi
    assert all(a <= b <= c for a, b, c in zip(band["lo"], band["mean"], band["hi"]))


def test_prediction_is_preregistered_once(ladder, tmp_path):
    out, spec, rungs, hero = ladder
    prediction = make_prediction(out, hero.config)
    assert prediction["hero"]["steps"] == hero.steps and len(prediction["rungs"]) == 4
    assert all(len(r["config_sha256"]) == 64 for r in prediction["rungs"])
    assert prediction["code"]["commit"] and prediction["steps"][-1] == hero.steps
    assert prediction["endpoint_check"]["final_loss"] > 0
    run_dir = tmp_path / "hero"
    sealed = preregister(run_dir, prediction)
    with pytest.raises(GlassroomError, match="already holds a preregistered prediction"):
        preregister(run_dir, {**prediction, "final_loss": 0.0})
    with StoreReader(run_dir) as reader:
        stored = reader.artifact("prediction")
        events = reader.events(kinds=["prediction"])
    assert stored == sealed  # the first one, unchanged
    unsealed = {k: v for k, v in stored.items() if k not in ("seal", "created", "created_iso")}
    assert unsealed == json.loads(json.dumps({k: v for k, v in prediction.items() if k not in ("created", "created_iso")}))
    assert stored["created"] == stored["seal"]["created"] >= prediction["created"]  # the moment of sealing
    assert len(events) == 1 and "preregistered eval/macro/loss" in events[0]["text"]

    # deviation: 0 on the mean, +-1.96 sigma at the band's edges, None outside the band's steps
    i = len(prediction["steps"]) // 2
    step, mean, hi, lo = (prediction[k][i] for k in ("steps", "mean", "hi", "lo"))
    assert deviation(prediction, step, mean) == pytest.approx(0, abs=1e-9)
    assert deviation(prediction, step, hi) == pytest.approx(1.96, rel=1e-3)
    assert deviation(prediction, step, lo) == pytest.approx(-1.96, rel=1e-3)
    assert deviation(prediction, 0, mean) is None


@pytest.mark.slow
def test_fit_and_backtest_commands(ladder):
    out = ladder[0]
    result = glassroom("ladder", "backtest", str(out), "--json")
    assert result.returncode == 0, result.stderr
    bt = json.loads(result.stdout)
    assert {"predicted_loss", "actual_loss", "relative_error", "covered"} <= set(bt)
    assert abs(bt["relative_error"]) < 0.01 and bt["covered"]
    assert bt["held_out"] == "221K-A159K"   # the demo spec's largest rung
    result = glassroom("ladder", "fit", str(out), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["compute"]) >= {"eval/macro/loss", "eval/macro/bpb", "eval/prose/bpb", "eval/code/loss"}
    main = report["compute"]["eval/macro/loss"]
    assert main["leave_largest_out"]["actual_loss"] > 0 and main["dof"] == 1
    assert report["params_tokens"] is None and any("L(N,D)" in n for n in report["notes"])
    assert report["curve"]["intervals"]["alpha"][0] <= TRUTH["alpha"] <= report["curve"]["intervals"]["alpha"][1]
    text = glassroom("ladder", "fit", str(out))
    assert "leave-largest-out" in text.stdout and "curve law" in text.stdout


def test_fit_errors_are_one_line(tmp_path):
    for run, args, message in ((real_glassroom, [str(tmp_path / "nope")], "no such ladder folder"),
                               (glassroom, [str(tmp_path)], "no rungs/ folder")):
        result = run("ladder", "fit", *args)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_size_term_reads_total_or_active_parameters_of_moe_rungs(ladder):
    """fit.size_term total: the curve law's N is the rung's count plus the experts a token does not use,
    for the rungs and the hero alike; the prediction records which."""
    import dataclasses

    out, spec, _, hero = ladder
    rungs = load_rungs(out)
    assert all(r.law_size("total") - r.law_size("active") == r.total_params - r.active_params > 0 for r in rungs)
    active = make_prediction(out, hero.config, spec.fit)
    total = make_prediction(out, hero.config, dataclasses.replace(spec.fit, size_term="total"))
    assert active["settings"]["size_term"] == "active" and total["settings"]["size_term"] == "total"
    assert total["final_loss"] != pytest.approx(active["final_loss"], rel=1e-6)
    # Rungs drawn with N active: the law on active parameters is the one that lands on the truth.
    tps = hero.config["train"]["batch_size"] * hero.config["train"]["seq_len"]
    truth = true_curve(hero.params, hero.config["train"], tps, [hero.config["train"]["steps"]])[0]
    assert abs(active["final_loss"] / truth - 1) < abs(total["final_loss"] / truth - 1)


@pytest.mark.slow
def test_the_band_carries_the_laws_leave_one_size_out_misfit_beyond_the_seed_noise(ladder):
    """A law that misses sizes it did not see must not claim the seed noise alone: size_misfit
    measures that error, and the band widens by what of it the noise does not explain."""
    import dataclasses
    from types import SimpleNamespace

    from glassroom.ladder.predict import _misfit_sd, size_misfit

    out, spec, _, hero = ladder
    rungs = load_rungs(out)
    misfit = size_misfit(rungs, spec.fit)
    assert set(misfit["errors"]) == {r.name for r in rungs} and misfit["rms"] < 0.01  # drawn from the law itself
    assert _misfit_sd(misfit, SimpleNamespace(sigma=1.0)) == 0.0
    assert _misfit_sd({"rms": 0.05}, SimpleNamespace(sigma=0.03)) == pytest.approx(0.04)
    assert size_misfit(rungs[:2], spec.fit) is None   # two sizes: nothing to leave out
    fit = fit_curves(rungs, "eval/macro/loss", spec.fit)
    tps = hero.config["train"]["batch_size"] * hero.config["train"]["seq_len"]
    plain = predict_curve(fit, hero.params, hero.config["train"], tps, spec.fit)
    wide = predict_curve(fit, hero.params, hero.config["train"], tps, spec.fit, misfit=0.03)
    assert plain["final_loss"] == wide["final_loss"]
    width = lambda band: band["final_interval"][1] - band["final_interval"][0]  # noqa: E731
    assert width(wide) > 1.25 * width(plain)
    prediction = make_prediction(out, hero.config, dataclasses.replace(spec.fit, bootstrap=20))
    assert prediction["misfit"]["rms"] == pytest.approx(misfit["rms"], rel=1e-6)




def test_curve_prediction_and_backtest_report_the_fitted_curve(tmp_path):
    from glassroom.ladder.predict import backtest, curve_features, fit_curves, lr_multipliers, predict_curve
    from glassroom.ladder.rungs import load_rungs
    from ladder_helpers import write_ladder

    spec, _, hero = write_ladder(tmp_path, noise=0.002, seed=1, spec_overrides={"fit": {"bootstrap": 30}})
    rungs = load_rungs(tmp_path)
    fit = fit_curves(rungs[:-1], spec.fit.metric, spec.fit)
    held = rungs[-1]
    band = predict_curve(fit, held.params, held.config["train"], held.tokens_per_step, spec.fit)
    X = curve_features(held.params, held.tokens_per_step, lr_multipliers(held.config["train"]),
                       np.asarray(band["steps"]), spec.fit.momentum)
    np.testing.assert_array_equal(band["mean"], fit.predict(X))
    assert band["final_loss"] == band["mean"][-1]
    lo, hi = band["final_interval"]
    assert lo < band["final_loss"] < hi and min(band["final_loss"] - lo, hi - band["final_loss"]) > 1e-4
    result = backtest(tmp_path, spec.fit)
    # The backtest's band also carries the law's leave-one-size-out misfit beyond the seed noise.
    from types import SimpleNamespace

    from glassroom.ladder.predict import _misfit_sd

    extra = _misfit_sd(result["misfit"], SimpleNamespace(sigma=result["noise"]["sigma"]))
    wide = predict_curve(fit, held.params, held.config["train"], held.tokens_per_step, spec.fit, misfit=extra)
    assert result["predicted_loss"] == band["final_loss"] == wide["final_loss"]
    assert result["interval"] == wide["final_interval"]
