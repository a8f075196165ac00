"""The ladder fit's acceptance on synthetic truth: the fitter against least squares on the true formula, and coverage.

Two published laws (Hoffmann et al. 2022, arXiv 2203.15556; Besiroglu et al. 2024, arXiv 2404.10102),
5-rung ladders over 34x and 820x of compute at 20 tokens per parameter and at 10 and 40 (L(N, D)
identifiable), 1 and 3 seeds per size, 0.5% lognormal noise per run, 20 noise draws each, the hero at
100x the largest rung's compute. Wanted: the fitter's median |error| at most 1.1x that of least
squares on the true formula, and the 95% interval covering the noise-free truth in >= 90% of draws.
bench/foresight.py measures the same over more draws (docs/ladder-foresight.md).
"""

from __future__ import annotations

import pytest

from glassroom.ladder.synthetic import TRUTHS, measure

LADDERS = {"fixed-34x": (34, 20), "fixed-820x": (820, 20), "varied-34x": (34, (10, 40)), "varied-820x": (820, (10, 40))}


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 3])
@pytest.mark.parametrize("ladder", sorted(LADDERS))
@pytest.mark.parametrize("truth", sorted(TRUTHS))
def test_fitter_matches_least_squares_on_the_true_formula_and_intervals_cover(truth, ladder, seeds):
    span, tokens_per_param = LADDERS[ladder]
    r = measure(TRUTHS[truth], span, 5, seeds, 0.005, tokens_per_param, noise_seeds=40, bootstrap=200)
    assert r["law"] == ("L(C)" if ladder.startswith("fixed") else "L(N,D)")
    assert r["ratio"] <= 1.1, r
    assert r["coverage_law"] >= 0.9, r
    assert r["coverage_run"] >= 0.9, r
    assert r["fit_median"] < 0.05  # the errors themselves are those of a 5-rung ladder at 100x, not a broken fit


def test_without_noise_the_hero_is_exact():
    for truth in TRUTHS.values():
        r = measure(truth, 100, 5, 1, 0.0, (10, 40), noise_seeds=1, bootstrap=0)
        assert r["fit_median"] < 1e-7
