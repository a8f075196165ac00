"""The downstream link (glassroom.ladder.downstream_link): a sigmoid from loss to score recovered from
synthetic pairs, the linear fallback and its reason, intervals that cover, the band at the curve's
steps, the backtest's shape, real rung stores, and the seal and `ladder verify` covering the
prediction's "downstream" section."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from glassroom.errors import GlassroomError
from glassroom.ladder.downstream_link import (collect_pairs, downstream_backtest, downstream_prediction,
                                              fit_link)
from glassroom.observe.prediction import band_problem, downstream_problem, verify_run

CFG = SimpleNamespace(metric="eval/macro/loss", confidence=0.95, bootstrap=60, seed=0)
STEPS = np.arange(100, 1001, 100)


class FakeRung:
    """What the link reads of a rung (glassroom.ladder.rungs.RungData): name, size, steps, metrics, series."""

    def __init__(self, name, size, series, seed=None, steps=1000):
        self.name, self.seed, self.steps, self._series = name, seed, steps, series
        self.params, self.tokens, self.flops = 10.0 ** (6 + size), 10.0 ** (7 + size), 10.0 ** (13 + 2 * size)
        self.run_dir = f"/ladder/rungs/{name}"

    def metrics(self):
        return list(self._series)

    def series(self, metric):
        steps, values = self._series.get(metric, ([], []))
        steps, values = np.asarray(steps, int), np.asarray(values, float)
        keep = np.isfinite(values)
        return steps[keep], values[keep]


def sigmoid(loss, a=-0.6, b=0.85, k=4.0, l0=3.2):
    return a / (1 + np.exp(-k * (loss - l0))) + b


def ladder(finals=(4.2, 3.8, 3.4, 3.1), seeds=1, noise=0.01, rng_seed=0, score=sigmoid, tasks=("t/acc",)):
    """Rungs whose loss falls over training to `finals`; each task's score = score(loss) + noise."""
    rng = np.random.default_rng(rng_seed)
    rungs = []
    for size, final in enumerate(finals):
        for seed in range(seeds):
            loss = (final + 3.0 * (STEPS / 1000) ** -0.5 - 3.0) * np.exp(rng.normal(0, 0.002, len(STEPS)))
            series = {"eval/macro/loss": (STEPS, loss)}
            for t in tasks:
                series[f"downstream/{t}"] = (STEPS, score(loss) + rng.normal(0, noise, len(STEPS)))
            rungs.append(FakeRung(f"r{size}", size, series, seed=seed))
    return rungs


def test_sigmoid_recovered_from_synthetic_pairs():
    loss = np.linspace(2.0, 5.0, 60)
    score = sigmoid(loss) + np.random.default_rng(1).normal(0, 0.005, len(loss))
    link = fit_link(loss, score, is_bounded=True)
    assert link.form == "sigmoid" and link.fallback is None
    p = link.params()
    assert p["a"] == pytest.approx(-0.6, abs=0.03) and p["b"] == pytest.approx(0.85, abs=0.02)
    assert p["k"] == pytest.approx(4.0, rel=0.15) and p["L0"] == pytest.approx(3.2, abs=0.05)
    # The reported params are the formula's: a / (1 + exp(-k (L - L0))) + b.
    assert link([3.0])[0] == pytest.approx(sigmoid(3.0, p["a"], p["b"], p["k"], p["L0"]))


def test_a_score_that_rises_with_loss_is_recovered_too():
    """Monotone either way: a metric where lower is better (like bits per byte) has a > 0."""
    loss = np.linspace(2.0, 5.0, 60)
    score = sigmoid(loss, a=2.0, b=0.5, k=3.0, l0=3.5) + np.random.default_rng(2).normal(0, 0.01, len(loss))
    link = fit_link(loss, score, is_bounded=False)
    assert link.form == "sigmoid"
    assert link.params()["a"] == pytest.approx(2.0, rel=0.1) and link.params()["L0"] == pytest.approx(3.5, abs=0.1)


@pytest.mark.parametrize("loss, score, why", [
    (np.linspace(3, 4, 30), 0.5 * np.linspace(3, 4, 30) + 0.1, "steepness|straight line"),   # a straight line
    (np.linspace(3, 4, 5), np.linspace(0.5, 0.3, 5), "fewer than the 8"),                      # too few pairs
    (np.linspace(3, 4, 20), np.full(20, 0.25), "same"),                                        # at chance throughout
])
def test_fallback_to_a_line_says_why(loss, score, why):
    import re

    link = fit_link(loss, score, is_bounded=True)
    assert link.form == "linear" and re.search(why, link.fallback)
    assert set(link.params()) == {"intercept", "slope"}


def test_prediction_intervals_and_bounds():
    rungs = ladder()
    out = downstream_prediction(rungs, CFG, 3.0, (2.95, 3.05))
    assert out["reason"] is None and out["loss_metric"] == "eval/macro/loss" and "2412.04403" in out["sources"]
    s = out["scores"]["t/acc"]
    assert s["lower"] <= s["predicted"] <= s["upper"]
    assert s["lower"] <= sigmoid(3.0) <= s["upper"]
    assert s["link"]["n_pairs"] == 40 and s["link"]["rungs"] == ["r0", "r1", "r2", "r3"] and s["extrapolated"]
    assert "extrapolated" in s["warnings"][0]
    # A wider loss interval widens the score interval (step 1's uncertainty goes through the link).
    wide = downstream_prediction(rungs, CFG, 3.0, (2.7, 3.3))["scores"]["t/acc"]
    assert wide["upper"] - wide["lower"] > 1.5 * (s["upper"] - s["lower"])
    # An accuracy stays in [0, 1] however far the loss is extrapolated.
    far = downstream_prediction(rungs, CFG, 0.5, (0.1, 1.0))["scores"]["t/acc"]
    assert 0 <= far["lower"] <= far["predicted"] <= far["upper"] <= 1
    # Same inputs, same numbers (seeded), and the whole thing is JSON.
    assert downstream_prediction(rungs, CFG, 3.0, (2.95, 3.05)) == out
    json.dumps(out, allow_nan=False)


def test_intervals_cover_the_truth_over_noise_seeds():
    covered = 0
    for seed in range(10):
        s = downstream_prediction(ladder(rng_seed=seed, noise=0.015), CFG, 3.0, (2.97, 3.03))["scores"]["t/acc"]
        covered += s["lower"] <= sigmoid(3.0) <= s["upper"]
    assert covered >= 8


def test_band_at_the_curve_steps_ends_at_the_final_prediction():
    steps = list(range(10, 2001, 10))
    mean = np.linspace(6.0, 3.0, len(steps))
    curve = {"steps": steps, "mean": mean.tolist(), "lo": (mean * 0.98).tolist(), "hi": (mean * 1.02).tolist()}
    out = downstream_prediction(ladder(), CFG, 3.0, (3.0 * 0.98, 3.0 * 1.02), curve=curve)
    s = out["scores"]["t/acc"]
    band = s["at_steps"]
    assert band["steps"][0] == 10 and band["steps"][-1] == 2000 and len(band["steps"]) <= 64
    assert all(a < b for a, b in zip(band["steps"], band["steps"][1:]))
    assert all(lo <= m <= hi for lo, m, hi in zip(band["lo"], band["mean"], band["hi"]))
    assert (band["mean"][-1], band["lo"][-1], band["hi"][-1]) == pytest.approx((s["predicted"], s["lower"], s["upper"]))
    assert band["mean"][0] < band["mean"][-1]   # higher loss early: lower accuracy
    assert downstream_problem(out) is None


def test_no_scores_and_too_few_pairs_say_why():
    bare = [FakeRung(f"r{i}", i, {"eval/macro/loss": (STEPS, 4.0 - i / 5 + 0 * STEPS)}) for i in range(3)]
    out = downstream_prediction(bare, CFG, 3.0, (2.9, 3.1))
    assert out["scores"] == {} and "train.eval_tasks" in out["reason"]
    one = bare[:2] + [FakeRung("r9", 9, {"eval/macro/loss": (STEPS, 3.5 + 0 * STEPS), "downstream/t/acc": (STEPS, 0.3 + 0 * STEPS)})]
    out = downstream_prediction(one, CFG, 3.0, (2.9, 3.1))
    assert out["scores"] == {} and "one rung" in out["skipped"]["t/acc"] and "t/acc" in out["reason"]
    # Scores logged at steps with no loss value give no pairs; NaN scores are left out.
    off = [FakeRung(f"r{i}", i, {"eval/macro/loss": (STEPS, 4.0 - i / 5 + 0 * STEPS),
                                 "downstream/t/acc": (STEPS + 1, 0.3 + 0 * STEPS),
                                 "downstream/u/acc": (STEPS, np.full(len(STEPS), np.nan))}) for i in range(3)]
    assert collect_pairs(off, "eval/macro/loss") == {}


@pytest.mark.parametrize("loss, interval", [(float("nan"), (1, 2)), (3.0, (3.2, 3.1)), (-1.0, (-2, 0)),
                                            ("x", (1, 2)), (3.0, None), (3.0, (2.9, float("inf")))])
def test_bad_step_one_numbers_are_one_line_errors(loss, interval):
    with pytest.raises(GlassroomError, match="downstream prediction"):
        downstream_prediction(ladder(), CFG, loss, interval)


def test_a_loss_outside_its_own_interval_widens_the_interval_instead_of_failing():
    """A skewed bootstrap (or one replicate) can leave step 1's point estimate outside its interval."""
    out = downstream_prediction(ladder(), CFG, 3.0, (3.1, 3.2))["scores"]["t/acc"]
    inside = downstream_prediction(ladder(), CFG, 3.0, (3.0, 3.2))["scores"]["t/acc"]
    assert out["lower"] <= out["predicted"] <= out["upper"]
    assert (out["predicted"], out["lower"], out["upper"]) == (inside["predicted"], inside["lower"], inside["upper"])


def test_no_scored_task_means_no_downstream_step_whatever_step_one_says():
    bare = [FakeRung(f"r{i}", i, {"eval/macro/loss": (STEPS, 4.0 - i / 5 + 0 * STEPS)}) for i in range(3)]
    out = downstream_prediction(bare, CFG, 3.0, (3.1, 3.1))
    assert out["scores"] == {} and "train.eval_tasks" in out["reason"]


@pytest.mark.parametrize("mean, lo, hi", [(3.0, 2.9, 3.4), (3.0, 2.5, 3.05), (5.0, 4.99, 5.5)])
def test_split_normal_loss_draws_reach_each_side_at_its_own_bound(mean, lo, hi):
    from statistics import NormalDist

    from glassroom.ladder.downstream_link import _draw_losses

    zc = NormalDist().inv_cdf(0.975)
    z = np.random.default_rng(0).standard_normal(200_000)
    draws = _draw_losses(np.array([mean]), np.array([lo]), np.array([hi]), z, zc)[:, 0]
    assert np.quantile(draws, 0.025) == pytest.approx(lo, abs=0.01 * (mean - lo) + 1e-3)
    assert np.quantile(draws, 0.975) == pytest.approx(hi, abs=0.01 * (hi - mean) + 1e-3)
    assert np.median(draws) == pytest.approx(mean, abs=1e-2 * (hi - lo))


@pytest.mark.parametrize("lo, hi", [(2.9, 3.4), (2.6, 3.1), (2.95, 3.05)])
def test_a_skewed_loss_interval_maps_through_the_link_as_computed_by_hand(lo, hi):
    """Noise-free pairs on a known sigmoid: every refit is that sigmoid, so the score draws are f(loss
    draws), whose percentile interval is [f(hi), f(lo)] (f falls with the loss); the interval is the
    prediction plus and minus its wider side (the module's mirroring rule)."""
    cfg = SimpleNamespace(**{**vars(CFG), "bootstrap": 500})
    s = downstream_prediction(ladder(noise=0.0), cfg, 3.0, (lo, hi))["scores"]["t/acc"]
    assert s["link"]["form"] == "sigmoid"
    half = max(sigmoid(3.0) - sigmoid(hi), sigmoid(lo) - sigmoid(3.0))
    assert s["predicted"] == pytest.approx(sigmoid(3.0), abs=2e-3)
    assert s["upper"] - s["predicted"] == pytest.approx(half, rel=0.08)
    assert s["predicted"] - s["lower"] == pytest.approx(half, rel=0.08)


def test_damaged_curve_is_refused():
    with pytest.raises(GlassroomError, match="curve is damaged"):
        downstream_prediction(ladder(), CFG, 3.0, (2.9, 3.1), curve={"steps": [1, 2], "mean": [3.0], "lo": [2.9], "hi": [3.1]})


def test_backtest_holds_out_every_seed_of_the_largest_size():
    rungs = ladder(seeds=2, tasks=("t/acc", "b/bits_per_byte"), score=lambda L: sigmoid(L))
    result = downstream_backtest(rungs, CFG, {"final_loss": 3.1, "final_interval": [3.05, 3.15]})
    assert result["held_out"] == ["r3 seed 0", "r3 seed 1"] and "r2 seed 1" in result["fitted_on"]
    assert result["actual_loss"] == pytest.approx(3.1, rel=0.01) and result["predicted_loss"] == 3.1
    for key in ("t/acc", "b/bits_per_byte"):
        s = result["scores"][key]
        assert len(s["actual_by_seed"]) == 2 and s["actual"] == pytest.approx(np.mean(s["actual_by_seed"]))
        assert s["error"] == pytest.approx(s["predicted"] - s["actual"]) and isinstance(s["covered"], bool)
        assert s["lower"] <= s["predicted"] <= s["upper"] and s["link_only"] is not None
    assert result["covered"].endswith("/2")
    # Rungs that never leave chance: a flat line, and a warning that it cannot foresee a rise.
    flat = downstream_backtest(ladder(score=lambda L: 0.25 + 0 * L), CFG, {"final_loss": 3.1, "final_interval": [3.0, 3.2]})
    assert flat["scores"]["t/acc"]["link"] == "linear" and "out of chance" in flat["scores"]["t/acc"]["warnings"][1]
    few = downstream_backtest(ladder(finals=(4.0, 3.5)), CFG, {"final_loss": 3.1, "final_interval": [3.0, 3.2]})
    assert few["scores"] == {} and "at least 3 sizes" in few["reason"]


# ----------------------------------------------------------------------------- real rungs, the seal


@pytest.fixture(scope="module")
def real_ladder(tmp_path_factory):
    """A ladder folder of real run stores (tests/ladder_helpers.py) with downstream scores logged at
    every eval step, as train.eval_tasks would."""
    from glassroom.ladder.rungs import load_rungs
    from glassroom.observe.store import StoreReader, StoreWriter
    from ladder_helpers import write_ladder

    out = tmp_path_factory.mktemp("ladder")
    spec, _, hero = write_ladder(out, noise=0.001, seed=0, spec_overrides={"fit": {"bootstrap": 30, "momentum": 0.999}})
    rng = np.random.default_rng(0)
    for rung_dir in sorted((out / "rungs").iterdir()):
        with StoreReader(rung_dir) as r:
            steps, loss = r.series("eval/macro/loss")
        with StoreWriter(rung_dir) as w:
            for s, v in zip(steps, loss):
                w.log(int(s), {"downstream/mc/acc": float(sigmoid(v, k=3.0, l0=float(np.median(loss))) + rng.normal(0, 0.01))})
    return out, spec, hero, load_rungs(out)


@pytest.mark.slow
def test_real_rungs_predict_and_backtest(real_ladder):
    from glassroom.ladder.predict import fit_curves, predict_curve

    out, spec, hero, rungs = real_ladder
    fit_cfg = dataclasses.replace(spec.fit, bootstrap=30)
    fit = fit_curves(rungs, fit_cfg.metric, fit_cfg)
    tps = hero.config["train"]["batch_size"] * hero.config["train"]["seq_len"]
    band = predict_curve(fit, hero.params, hero.config["train"], tps, fit_cfg)
    pred = downstream_prediction(rungs, fit_cfg, band["final_loss"], band["final_interval"], curve=band)
    s = pred["scores"]["mc/acc"]
    assert s["link"]["n_pairs"] > 20 and 0 <= s["lower"] <= s["predicted"] <= s["upper"] <= 1
    assert s["at_steps"]["steps"][-1] == band["steps"][-1]
    result = downstream_backtest(rungs, fit_cfg)   # step 1 fitted here without the largest rung
    assert result["held_out"] == [rungs[-1].name] and result["scores"]["mc/acc"]["actual"] is not None


def _prediction(downstream):
    steps = [10, 20, 30]
    return {"metric": "eval/macro/loss", "steps": steps, "mean": [4.0, 3.5, 3.2], "lo": [3.9, 3.4, 3.1],
            "hi": [4.1, 3.6, 3.3], "confidence": 0.95, "final_loss": 3.2, "final_interval": [3.1, 3.3],
            "rungs": [], "downstream": downstream}


def test_seal_and_verify_cover_the_downstream_section(tmp_path):
    from glassroom.ladder.predict import preregister

    downstream = downstream_prediction(ladder(), CFG, 3.2, (3.1, 3.3),
                                       curve={"steps": [10, 20, 30], "mean": [4.0, 3.5, 3.2], "lo": [3.9, 3.4, 3.1],
                                              "hi": [4.1, 3.6, 3.3]})
    run = tmp_path / "hero"
    sealed = preregister(run, _prediction(downstream))
    assert "prediction.downstream" in sealed["seal"]["fields"]
    assert verify_run(run)["ok"]
    # One downstream number changed in the store after sealing: `ladder verify` names the part.
    sealed["downstream"]["scores"]["t/acc"]["predicted"] += 0.01
    with sqlite3.connect(run / "store.sqlite") as conn:
        conn.execute("UPDATE artifacts SET value = ? WHERE name = 'prediction'", (json.dumps(sealed),))
    result = verify_run(run)
    assert not result["ok"] and "downstream differs" in result["problem"]


@pytest.mark.parametrize("damage, why", [
    (lambda d: d.update(scores=[]), "no scores"),
    (lambda d: d["scores"]["t/acc"].update(predicted=float("nan")), "finite"),
    (lambda d: d["scores"]["t/acc"].update(lower=0.99, upper=0.2), "lower <= predicted"),
    (lambda d: d["scores"]["t/acc"]["link"].update(form="cubic"), "link form"),
    (lambda d: d["scores"]["t/acc"]["at_steps"].update(steps=[3, 2, 1]), "increasing"),
    (lambda d: d["scores"]["t/acc"]["at_steps"]["mean"].pop(), "one finite number per step"),
    (lambda d: d["scores"].update({"no-slash": {}}), "<task>/<metric>"),
])
def test_a_damaged_downstream_section_is_refused(tmp_path, damage, why):
    from glassroom.ladder.predict import preregister

    curve = {"steps": [10, 20, 30], "mean": [4.0, 3.5, 3.2], "lo": [3.9, 3.4, 3.1], "hi": [4.1, 3.6, 3.3]}
    downstream = downstream_prediction(ladder(), CFG, 3.2, (3.1, 3.3), curve=curve)
    damage(downstream)
    assert why in band_problem(_prediction(downstream))
    with pytest.raises(GlassroomError, match="damaged prediction"):
        preregister(tmp_path / "hero", _prediction(downstream))


def rising(loss):
    """A score that rises with the loss (lower is better, like bits per byte): a > 0."""
    return sigmoid(loss, a=0.6, b=0.2)


@pytest.mark.parametrize("score, key", [(sigmoid, "t/acc"), (rising, "t/bpb")], ids=["falling", "rising"])
def test_a_skewed_band_maps_each_steps_loss_interval_through_the_link_as_computed_by_hand(score, key):
    """Noise-free pairs on a known monotone link f (falling, and rising), and a predicted loss curve
    whose interval at each step is skewed, up at one step and down at the next: the score interval at
    every band step and at the final one is f(mean) plus and minus the wider of |f(lo) - f(mean)| and
    |f(hi) - f(mean)| (the side reaching lo is drawn to lo, the side reaching hi to hi). Swapping the
    two sides of the loss draws gives f(mean) +- the wider of |f(2 mean - lo) - f(mean)| and
    |f(2 mean - hi) - f(mean)|: the test checks that this differs clearly at many steps, so it can fail."""
    cfg = SimpleNamespace(**{**vars(CFG), "bootstrap": 500})
    steps = list(range(100, 3100, 100))
    mean = np.linspace(3.6, 2.8, len(steps))
    up = np.arange(len(steps)) % 2 == 0
    lo = np.where(up, mean - 0.04, mean - 0.35)
    hi = np.where(up, mean + 0.35, mean + 0.04)
    curve = {"steps": steps, "mean": mean.tolist(), "lo": lo.tolist(), "hi": hi.tolist()}
    out = downstream_prediction(ladder(noise=0.0, score=score, tasks=(key,)), cfg, float(mean[-1]),
                                (float(lo[-1]), float(hi[-1])), curve=curve)
    s = out["scores"][key]
    assert s["link"]["form"] == "sigmoid"
    band = s["at_steps"]
    assert band["steps"] == steps

    f = score
    half = np.maximum(np.abs(f(hi) - f(mean)), np.abs(f(lo) - f(mean)))
    swapped = np.maximum(np.abs(f(2 * mean - lo) - f(mean)), np.abs(f(2 * mean - hi) - f(mean)))
    tolerance = 0.08 * half + 2e-3
    assert np.sum(np.abs(swapped - half) > 3 * tolerance) >= 8   # the hand computation tells the two apart
    got_center = np.asarray(band["mean"])
    np.testing.assert_allclose(got_center, f(mean), atol=2e-3)
    for name, got in (("upper", np.asarray(band["hi"]) - got_center), ("lower", got_center - np.asarray(band["lo"]))):
        bad = np.flatnonzero(np.abs(got - half) > tolerance)
        assert bad.size == 0, (name, [(steps[i], float(got[i]), float(half[i]), float(swapped[i])) for i in bad])
    assert s["upper"] - s["predicted"] == pytest.approx(half[-1], abs=tolerance[-1])
    assert s["predicted"] - s["lower"] == pytest.approx(half[-1], abs=tolerance[-1])
