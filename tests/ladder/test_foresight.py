"""Foresight fits of any points (glassroom.ladder.foresight): exact recovery, seed noise, intervals, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.ladder.foresight import Point, fit_points, point_fit, point_fits
from glassroom.ladder.noise import seed_noise
from glassroom.ladder.synthetic import TRUTHS, hero_size, ladder_sizes, synthetic_ladder, truth_loss


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


def test_compute_law_is_recovered_exactly_without_noise():
    E, A, alpha = 1.8, 900.0, 0.16
    C = 1e18 * np.geomspace(1, 100, 6)
    pts = [Point(f"r{i}", 1e8 * (i + 1), 2e9, c, E + A * c ** -alpha) for i, c in enumerate(C)]
    ff = fit_points(pts, law="C", bootstrap=20)
    assert ff.law_name == "L(C)"
    assert ff.fit.params["E"] == pytest.approx(E, rel=1e-6)
    assert ff.fit.params["A"] == pytest.approx(A, rel=1e-5)
    assert ff.fit.params["alpha"] == pytest.approx(alpha, rel=1e-6)
    out = ff.predict(1e9, 2e10, flops=1e22)
    assert out["predicted_loss"] == pytest.approx(E + A * 1e22 ** -alpha, rel=1e-7)


@pytest.mark.parametrize("name", sorted(TRUTHS))
def test_params_and_tokens_law_is_recovered_exactly_without_noise(name):
    truth = TRUTHS[name]
    pts = synthetic_ladder(truth, 100, 5, 1, 0.0, tokens_per_param=(10, 40))
    ff = fit_points(pts, bootstrap=0)
    assert ff.law_name == "L(N,D)"  # auto: the sizes vary N and D separately
    for key in ("E", "A", "B", "alpha", "beta"):
        assert ff.fit.params[key] == pytest.approx(truth[key], rel=1e-5), key
    N, D, C = hero_size(pts)
    assert ff.predict(N, D)["predicted_loss"] == pytest.approx(float(truth_loss(truth, N, D)), rel=1e-8)


def test_fixed_ratio_ladder_uses_the_compute_law_and_says_why():
    pts = synthetic_ladder(TRUTHS["chinchilla"], 34, 5, 1, 0.0)
    ff = fit_points(pts, bootstrap=0)
    assert ff.law_name == "L(C)" and "rungs" in ff.why  # the reason L(N,D) was not used
    with pytest.raises(GlassroomError) as exc:
        fit_points(pts, law="ND")
    assert "L(N,D)" in _one_line(exc)


def test_noise_is_measured_from_seeds_and_stated_without_them():
    truth = TRUTHS["besiroglu"]
    pts = synthetic_ladder(truth, 100, 8, 4, 0.01, rng=np.random.default_rng(7))
    ff = fit_points(pts, stated_noise=0.003, bootstrap=0)
    assert ff.noise.source == "measured" and ff.noise.dof == 8 * 3 and ff.noise.sizes == 8
    assert 0.007 < ff.noise.sigma < 0.013  # 24 degrees of freedom: within ~30% of 1%
    one = synthetic_ladder(truth, 100, 8, 1, 0.01, rng=np.random.default_rng(7))
    ff1 = fit_points(one, stated_noise=0.004, bootstrap=0)
    assert ff1.noise.source == "stated" and ff1.noise.sigma == 0.004 and ff1.noise.dof == 0
    # the pooled SD uses each size's own mean: a slope across sizes adds nothing
    est = seed_noise([[3.0, 3.0 * math.exp(0.02)], [2.0, 2.0 * math.exp(-0.02)], [1.5]], 0.003)
    assert est.sigma == pytest.approx(0.02 / math.sqrt(2)) and est.dof == 2 and est.sizes == 2
    assert est.upper(0.9) > est.sigma
    assert seed_noise([[3.0, 3.0]], 0.003).to_json()["source"] == "measured"


def test_seeds_that_all_agree_fall_back_to_the_stated_noise():
    pts = synthetic_ladder(TRUTHS["chinchilla"], 100, 5, 3, 0.0)  # every seed of a size: the same loss
    ff = fit_points(pts, stated_noise=0.004, bootstrap=50)
    assert ff.noise.source == "measured" and ff.noise.sigma == 0.0
    assert ff.sigma_used["sigma"] == 0.004 and "stated" in ff.sigma_used["source"]
    out = ff.predict(*hero_size(pts), kind="law")
    assert out["upper"] / out["lower"] > 1.01  # an interval, not a point


def test_intervals_contain_the_prediction_and_the_truth():
    truth = TRUTHS["chinchilla"]
    pts = synthetic_ladder(truth, 820, 5, 3, 0.005, rng=np.random.default_rng(3))
    ff = fit_points(pts, bootstrap=200, seed=1)
    N, D, C = hero_size(pts)
    law = ff.predict(N, D, kind="law")
    run = ff.predict(N, D)
    value = float(truth_loss(truth, N, D))
    assert law["lower"] < law["predicted_loss"] < law["upper"]
    assert law["lower"] <= value <= law["upper"]
    assert run["lower"] <= law["lower"] * 1.001 and run["upper"] >= law["upper"] * 0.999
    assert run["interval"]["confidence"] == 0.95 and run["interval"]["kind"] == "run"
    assert set(run) >= {"predicted_loss", "lower", "upper", "interval", "params", "tokens", "flops", "law", "noise"}
    assert run["law"]["law"] == "L(C)" and run["noise"]["source"] == "measured"
    assert run["flops"] == pytest.approx(C, rel=1e-9)  # flops from 6ND at the points' own flops/(6ND)
    lo, hi = ff.fit.intervals["alpha"]
    assert lo <= ff.fit.params["alpha"] <= hi


def test_point_fit_is_the_fit_without_bootstrap_and_batches_agree():
    truth = TRUTHS["besiroglu"]
    pts = synthetic_ladder(truth, 820, 5, 1, 0.005, tokens_per_param=(10, 40), rng=np.random.default_rng(2))
    N = [p.params for p in pts]
    D = [p.tokens for p in pts]
    C = [p.flops for p in pts]
    y = [p.loss for p in pts]
    hero = hero_size(pts)
    full = fit_points(pts, bootstrap=0).predict(*hero)["predicted_loss"]
    assert point_fit(N, D, C, y, "auto")(*hero) == pytest.approx(full, rel=1e-6)
    rng = np.random.default_rng(0)
    Y = truth_loss(truth, np.array(N), np.array(D)) * np.exp(rng.normal(0, 0.005, (6, len(N))))
    batch = point_fits(N, D, C, Y, "ND")(*hero)
    single = [point_fit(N, D, C, row, "ND")(*hero) for row in Y]
    assert np.allclose(batch, single, rtol=1e-6)


@pytest.mark.parametrize("mutate, words", [
    (lambda pts: pts[:1] + [Point("x", pts[1].params, pts[1].tokens, pts[1].flops, math.nan)], "loss"),
    (lambda pts: pts[:-1] + [Point("x", pts[-1].params, pts[-1].tokens, pts[-1].flops, 0.0)], "loss"),
    (lambda pts: pts[:-1] + [Point("x", pts[-1].params, pts[-1].tokens, pts[-1].flops, -2.0)], "loss"),
    (lambda pts: pts + [Point("dup", pts[0].params, pts[0].tokens, pts[0].flops, pts[0].loss, pts[0].seed)], "same size"),
    (lambda pts: [Point(f"s{k}", pts[0].params, pts[0].tokens, pts[0].flops, 3.0 + 0.01 * k, k) for k in range(4)], "distinct"),
    (lambda pts: [], "no points"),
    (lambda pts: pts[:-1] + [Point("x", math.inf, 1e9, 1e18, 3.0)], "params"),
    (lambda pts: pts[:-1] + [Point("x", 1e8, "many", 1e18, 3.0)], "tokens"),
    (lambda pts: pts[:-1] + [Point("x", 1e8, 2e9, 1e18, 3.0, seed=1.5)], "seed"),
])
def test_bad_points_raise_one_line(mutate, words):
    pts = synthetic_ladder(TRUTHS["chinchilla"], 34, 5, 1, 0.0)
    with pytest.raises(GlassroomError) as exc:
        fit_points(mutate(pts), bootstrap=0)
    assert words in _one_line(exc)


def test_bad_options_raise_one_line():
    pts = synthetic_ladder(TRUTHS["chinchilla"], 34, 5, 1, 0.0)
    for kwargs in ({"law": "quadratic"}, {"irreducible": 99.0}, {"irreducible": -1.0}, {"confidence": 1.5},
                   {"bootstrap": -3}, {"stated_noise": math.nan}):
        with pytest.raises(GlassroomError) as exc:
            fit_points(pts, **kwargs)
        _one_line(exc)
    ff = fit_points(pts, bootstrap=0)
    for args in ((0, 1e9), (1e9, -1), (math.nan, 1e9), (1e9, 1e9, 0.0)):
        with pytest.raises(GlassroomError) as exc:
            ff.predict(*args)
        _one_line(exc)


def test_pinned_irreducible_loss_is_kept():
    pts = synthetic_ladder(TRUTHS["chinchilla"], 100, 4, 1, 0.0)
    ff = fit_points(pts, irreducible=1.69, bootstrap=10)
    assert ff.fit.params["E"] == 1.69 and ff.fit.pinned == {"E": 1.69}
    assert all(b["E"] == 1.69 for b in ff.fit.boot)


def test_ladder_sizes_hold_compute_and_ratio():
    sizes = ladder_sizes(820, 5, 1e18, 20)
    assert len(sizes) == 5 and sizes[-1][3] / sizes[0][3] == pytest.approx(820)
    assert all(D / N == pytest.approx(20) and 6 * N * D == pytest.approx(C) for _, N, D, C in sizes)
    assert len(ladder_sizes(34, 5, 1e18, (10, 40))) == 10
