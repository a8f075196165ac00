"""Sparsity-aware laws (glassroom.ladder.laws): which law the points identify, the choice by
leave-one-size-out error, predictions that need total parameters, and the acceptance on synthetic
MoE truths (the fitter against least squares on the true formula, and coverage)."""

from __future__ import annotations

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.ladder.foresight import Point, fit_points
from glassroom.ladder.laws import candidates
from glassroom.ladder.synthetic_moe import MOE_TRUTHS, hero_size, moe_ladder, measure, truth_loss


@pytest.mark.slow
def test_noise_free_sparsity_aware_truths_are_chosen_and_recovered():
    rng = np.random.default_rng(7)
    for _ in range(3):   # truths drawn at random: w anywhere in [0, 1], Chinchilla-like magnitudes
        truth = {"E": rng.uniform(1.0, 2.5), "A": 10 ** rng.uniform(2, 3), "alpha": rng.uniform(0.2, 0.45),
                 "B": 10 ** rng.uniform(2, 3), "beta": rng.uniform(0.2, 0.45), "w": rng.uniform(0.15, 0.85)}
        points = moe_ladder(truth, noise=0.0, seeds=1, sparsity=(2, 8, 32), span=100)
        ff = fit_points(points, bootstrap=0)
        assert ff.law_name == "L(Neff,D)", ff.why
        assert ff.fit.params["w"] == pytest.approx(truth["w"], abs=0.02)
        N, D, C, T = hero_size(points)
        assert ff.predict(N, D, C, total_params=T, kind="law")["predicted_loss"] == pytest.approx(
            float(truth_loss(truth, N, D, T)), rel=2e-3)
        table = ff.cross_validation
        assert set(table) == {"C", "ND", "NtD", "NeffD"} and table["NeffD"]["rms"] < table["ND"]["rms"]


def test_a_ladder_of_one_sparsity_cannot_tell_total_from_active_parameters():
    points = moe_ladder(MOE_TRUTHS["chinchilla-w0.5"], noise=0.0, seeds=1, sparsity=(8,))
    able = candidates(*(np.array([getattr(p, k) for p in points]) for k in ("params", "tokens", "flops", "total_params")))
    assert able["ND"] == "" and "sparsity" in able["NtD"] and "sparsity" in able["NeffD"]
    ff = fit_points(points, bootstrap=0)   # active or total: the same law with another A; ND or C by cross-validation
    assert ff.law_name == "L(N,D)" and set(ff.cross_validation) == {"C", "ND"}
    with pytest.raises(GlassroomError, match="cannot be fitted: the sizes' sparsity"):
        fit_points(points, law="NeffD", bootstrap=0)


def test_laws_on_total_parameters_need_them_to_predict():
    points = moe_ladder(MOE_TRUTHS["besiroglu-w1"], noise=0.0, seeds=1)
    ff = fit_points(points, law="NtD", bootstrap=0)
    with pytest.raises(GlassroomError, match="give total_params"):
        ff.predict(1e9, 2e10)
    with pytest.raises(GlassroomError, match="at least params"):
        ff.predict(1e9, 2e10, total_params=1e8)
    with pytest.raises(GlassroomError, match="total_params must be a number at least params"):
        fit_points([Point("a", 1e8, 1e9, 6e17, 3.0, None, 5e7), *points], bootstrap=0)


@pytest.mark.slow
def test_a_results_file_with_total_params_predicts_a_moe(tmp_path, capsys):
    import json

    from glassroom.cli import main

    truth = MOE_TRUTHS["chinchilla-w0.3"]
    rows = ["name,params,total_params,tokens,loss,seed"]
    for p in moe_ladder(truth, noise=0.01, seeds=2, rng=np.random.default_rng(1)):
        rows.append(f"{p.name},{p.params:.6g},{p.total_params:.6g},{p.tokens:.6g},{p.loss:.6g},{p.seed}")
    path = tmp_path / "moe.csv"
    path.write_text("\n".join(rows) + "\n")
    code = main(["ladder", "predict", "--results", str(path), "--params", "3e9", "--tokens", "6e10",
                 "--total-params", "2.4e10", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["law"]["law"] in ("L(Neff,D)", "L(Nt,D)", "L(N,D)")
    assert out["total_params"] == 2.4e10 and set(out["cross_validation"]) == {"C", "ND", "NtD", "NeffD"}
    assert out["lower"] <= out["predicted_loss"] <= out["upper"]
    assert main(["ladder", "predict", "--results", str(path), "--params", "3e9", "--tokens", "6e10",
                 "--law", "NeffD"]) == 2
    assert "give total_params" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("truth", ["chinchilla-w0.3", "besiroglu-w1"])
def test_fitter_matches_least_squares_on_sparsity_aware_truths_and_intervals_cover(truth):
    """20 noise draws at the demo's measured seed noise (1.7%), 2 seeds per size; bench/foresight_moe.py
    measures all eight truths."""
    r = measure(MOE_TRUTHS[truth], noise=0.017, noise_seeds=20, bootstrap=60)
    assert r["ratio"] <= 1.1, r
    assert r["coverage_law"] >= 0.9 and r["coverage_run"] >= 0.9, r
