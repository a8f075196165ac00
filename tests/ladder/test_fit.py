"""Scaling-law fits on synthetic data drawn from a known law with noise: recovery and extrapolation."""

from __future__ import annotations

import numpy as np

from glassroom.ladder.fit import LAW_ND, bootstrap, fit_endpoints, fit_law, identifiable_nd, leave_largest_out
import pytest

E, A, ALPHA = 1.8, 400.0, 0.15


def law_c(C):
    return E + A * np.asarray(C) ** -ALPHA


def test_compute_law_recovers_parameters_within_intervals_and_extrapolates():
    rng = np.random.default_rng(3)
    C = np.logspace(17, 21, 6)
    loss = law_c(C) * np.exp(rng.normal(0, 0.002, len(C)))
    fit = fit_endpoints(C, loss, replicates=100, noise_floor=0.002, seed=0)
    for name, true in (("E", E), ("A", A), ("alpha", ALPHA)):
        lo, hi = fit.intervals[name]
        assert lo <= true <= hi, (name, true, lo, hi)
        assert lo < fit.params[name] < hi
    target = 4e21  # 4x the largest point
    predicted = fit.predict({"C": [target]})[0]
    assert abs(predicted / law_c(target) - 1) < 0.005


def test_pinned_irreducible_loss_stays_put_and_fits_the_rest():
    C = np.logspace(18, 21, 4)
    fit = fit_endpoints(C, law_c(C), pinned_E=E, replicates=20, noise_floor=0.0)
    assert fit.params["E"] == E and fit.n_free == 2
    assert abs(fit.params["alpha"] - ALPHA) < 1e-3 and abs(fit.params["A"] / A - 1) < 0.02


def test_leave_largest_out_reports_error_and_coverage():
    rng = np.random.default_rng(1)
    C = np.logspace(17, 21, 6)
    loss = law_c(C) * np.exp(rng.normal(0, 0.002, len(C)))
    result = leave_largest_out(C, loss, replicates=50, noise_floor=0.002)
    assert abs(result["relative_error"]) < 0.01
    assert result["covered"] == (result["interval"][0] <= result["actual_loss"] <= result["interval"][1])
    assert leave_largest_out(C[:3], loss[:3]) is None  # 2 points cannot fit 3 parameters


def test_a_wrong_law_is_not_covered():
    """Data that bends away from a power law: the held-out point falls outside a tight interval."""
    C = np.logspace(17, 21, 6)
    loss = law_c(C)
    loss[-1] *= 0.95
    result = leave_largest_out(C, loss, replicates=50, noise_floor=0.001)
    assert not result["covered"] and result["relative_error"] > 0.03


def test_params_and_tokens_law_when_rungs_vary_both():
    N = np.array([1e7, 3e7, 1e8, 3e8, 1e7, 1e8, 3e7, 3e8, 1e7, 3e8, 1e8, 3e7])
    D = np.array([2e8, 6e8, 2e9, 6e9, 2e9, 2e8, 6e9, 6e8, 6e9, 2e9, 6e9, 2e8])
    truth = {"E": 1.69, "A": 406.4, "alpha": 0.34, "B": 410.7, "beta": 0.28}
    loss = truth["E"] + truth["A"] / N ** truth["alpha"] + truth["B"] / D ** truth["beta"]
    assert identifiable_nd(N, D)[0]
    fit = fit_law(LAW_ND, {"N": N, "D": D}, loss)
    for name in ("E", "alpha", "beta"):
        assert abs(fit.params[name] / truth[name] - 1) < 0.05, (name, fit.params[name])
    bootstrap(fit, {"N": N, "D": D}, loss, replicates=20, noise_floor=0.001)
    assert fit.bootstrap_method == "cases"  # 12 points >= 2k + 2
    assert set(fit.intervals) == set(truth)
    fixed_ratio = identifiable_nd(N[:4], 20 * N[:4])
    assert not fixed_ratio[0] and "6 rungs" in fixed_ratio[1]
    assert not identifiable_nd(np.logspace(7, 9, 6), 20 * np.logspace(7, 9, 6))[0]


def test_intervals_are_the_bootstrap_quantiles_and_the_method_follows_the_data():
    """Exact: each parameter's interval is the (1 -+ confidence) / 2 quantiles of its bootstrap
    replicates, and predict_interval's band the same quantiles of the replicates' curves; the
    resampling scheme is cases for many points, residuals for few, rung blocks for curves."""
    from glassroom.ladder.fit import LAW_C, predict_interval

    rng = np.random.default_rng(5)
    C = np.logspace(17, 21, 6)
    loss = law_c(C) * np.exp(rng.normal(0, 0.003, len(C)))
    fit = bootstrap(fit_law(LAW_C, {"C": C}, loss), {"C": C}, loss, replicates=40, noise_floor=0.002,
                    confidence=0.8, seed=0)
    assert fit.bootstrap_method == "residual" and len(fit.boot) == 40
    for name in fit.params:
        values = [b[name] for b in fit.boot]
        assert fit.intervals[name] == (float(np.quantile(values, 0.1)), float(np.quantile(values, 0.9))), name
    target = {"C": [1e22]}
    mean, lo, hi = predict_interval(fit, target, confidence=0.8)
    curves = [fit.predict(target, b)[0] for b in fit.boot]
    assert mean[0] == fit.predict(target)[0]
    assert (lo[0], hi[0]) == (np.quantile(curves, 0.1), np.quantile(curves, 0.9)) and lo[0] < mean[0] < hi[0]

    many = np.logspace(17, 21, 8)   # the fewest points that are resampled as cases
    many_loss = law_c(many) * np.exp(rng.normal(0, 0.003, len(many)))
    assert bootstrap(fit_law(LAW_C, {"C": many}, many_loss), {"C": many}, many_loss,
                     replicates=5).bootstrap_method == "cases"
    groups = np.repeat(np.arange(3), 2)
    assert bootstrap(fit_law(LAW_C, {"C": C}, loss), {"C": C}, loss, groups=groups,
                     replicates=5).bootstrap_method == "rung-block residual"




def test_exponent_at_its_bound_is_a_warning():
    C = np.logspace(17, 20, 4)
    loss = np.array([3.0, 2.5, 2.4, 2.6])  # a bigger rung worse: alpha runs to its bound
    fit = fit_endpoints(C, loss, replicates=5)
    assert any("alpha" in w and "bound" in w for w in fit.warnings), fit.params
    good = fit_endpoints(C, 1.8 + 400 * C ** -0.15, replicates=5)
    assert good.warnings == [] and good.to_json()["warnings"] == []




def test_endpoint_prediction_is_the_fitted_value_inside_its_interval():
    from glassroom.ladder.fit import fit_endpoints, leave_largest_out, predict_interval

    rng = np.random.default_rng(3)
    C = np.logspace(17, 21, 6)
    loss = (1.8 + 400.0 * C ** -0.15) * np.exp(rng.normal(0, 0.002, len(C)))
    fit = fit_endpoints(C[:-1], loss[:-1], replicates=60, noise_floor=0.002)
    mean, lo, hi = predict_interval(fit, {"C": C[-1:]})
    assert float(mean[0]) == float(fit.predict({"C": C[-1:]})[0])
    assert lo[0] < mean[0] < hi[0] and min(mean[0] - lo[0], hi[0] - mean[0]) > 1e-4 * mean[0]
    result = leave_largest_out(C, loss, replicates=60, noise_floor=0.002)
    assert result["predicted_loss"] == float(mean[0])
    assert result["relative_error"] == pytest.approx((mean[0] - loss[-1]) / loss[-1], rel=1e-12)
