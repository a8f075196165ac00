"""The hero's downstream scores predicted in two steps from the ladder's rungs, and their backtest.

Method (docs/ladder-downstream.md), after Bhagia et al. 2024, "Establishing Task Scaling Laws via
Compute-Efficient Model Ladders" (arXiv 2412.04403), and the Llama 3 report (arXiv 2407.21783,
sec 3.2.1): scores do not follow a power law in compute, but they follow the loss.

  step 1  the hero's loss: the ladder's own prediction (glassroom.ladder.predict), its final value,
          its interval and, for the band, its predicted curve.
  step 2  a link from loss to score, per downstream/<task>/<metric>:

              score = a / (1 + exp(-k (L - L0))) + b,   k > 0

          fitted on the (loss, score) pairs of every rung (every seed) at every step where both
          the score and the ladder's loss metric (fit.metric) were logged. a < 0 for a score that
          rises as the loss falls (accuracy), a > 0 for one that falls with it (bits per byte):
          the link is monotone either way. b is the score at zero-like loss, a + b at infinite
          loss (chance, for an accuracy). Bounded least squares from several starts: for
          accuracy-like metrics (acc*, exact_match, f1, em) both asymptotes lie in [0, 1]; k and
          L0 are bounded by the pairs' loss range.

Fallback: the sigmoid is kept only when it is constrained (at least MIN_SIGMOID_PAIRS pairs, k
and L0 inside their bounds, asymptotes inside theirs for unbounded metrics) and better than a
straight line by BIC; otherwise the link is linear in the loss (score = intercept + slope * L,
clipped to [0, 1] for accuracies), and `link.fallback` says why.

Interval: Monte Carlo over fit.bootstrap replicates at fit.confidence. Each replicate refits the
link on pairs resampled with replacement within each rung (the link's own uncertainty), draws
the hero's loss from step 1's interval (a split normal whose sides reach its lower and upper
bounds at the confidence's normal quantile), and adds one residual of the link fit drawn with
replacement (the scatter of scores around the link: a finite task's sampling noise and
checkpoint-to-checkpoint wobble). The interval is the predicted score plus and minus the wider
side of those draws' percentile interval (clipped to [0, 1] for accuracies): the plain percentile
interval leans the way the fit erred and covered 89% at a nominal 95% on synthetic ladders.
Numpy and scipy only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Optional, Sequence

import numpy as np
from scipy.optimize import least_squares

from glassroom.errors import GlassroomError
from glassroom.ladder.curve import fit_curves, predict_curve

PREFIX = "downstream/"
SOURCES = ("Bhagia et al. 2024, arXiv 2412.04403 (two-step task scaling laws); "
           "Llama 3 report, arXiv 2407.21783, sec 3.2.1")
METHOD = "two-step: ladder loss prediction, then a sigmoid link score = a / (1 + exp(-k (L - L0))) + b"
BOUNDED_METRIC = re.compile(r"^(acc|exact_match|em|f1)(_|$)")
MIN_PAIRS = 3          # fewer pairs than this for a task/metric: no link at all (skipped)
MIN_SIGMOID_PAIRS = 8  # fewer than this: the 4-parameter sigmoid is not tried, linear only
MAX_REPLICATES = 500
BAND_POINTS = 64       # at most this many steps in a downstream band
LOSS_MIN, LOSS_MAX = 1e-6, 1e6  # glassroom.ladder.rungs: no loss a fit can mean lies outside
SCORE_MAX = 1e9  # no score a link can mean is larger (an edited store); beyond it the fit overflows


@dataclass
class Pairs:
    loss: np.ndarray
    score: np.ndarray
    group: np.ndarray  # index of the rung each pair came from
    rungs: list[str]


@dataclass
class Link:
    form: str  # "sigmoid" | "linear"
    x: np.ndarray  # sigmoid: (b, a + b, k, L0); linear: (intercept, slope)
    clip: Optional[tuple[float, float]]
    residuals: np.ndarray
    fallback: Optional[str] = None
    bounds: Any = field(default=None, repr=False)

    def __call__(self, loss) -> np.ndarray:
        return _value(self.form, self.x, np.asarray(loss, float), self.clip)

    def params(self) -> dict:
        if self.form == "sigmoid":
            low, high, k, l0 = (float(v) for v in self.x)
            return {"a": high - low, "b": low, "k": k, "L0": l0}
        return {"intercept": float(self.x[0]), "slope": float(self.x[1])}


def _value(form: str, x, loss: np.ndarray, clip) -> np.ndarray:
    if form == "sigmoid":
        low, high, k, l0 = x
        z = np.clip(-k * (loss - l0), -700, 700)
        out = low + (high - low) / (1.0 + np.exp(z))
    else:
        out = x[0] + x[1] * loss
    return np.clip(out, *clip) if clip else out


def _jacobian(x, loss: np.ndarray) -> np.ndarray:
    """d(sigmoid link)/d(low, high, k, L0) at each loss."""
    low, high, k, l0 = x
    sig = 1.0 / (1.0 + np.exp(np.clip(-k * (loss - l0), -700, 700)))
    slope = (high - low) * sig * (1 - sig)
    return np.column_stack([1 - sig, sig, slope * (loss - l0), -slope * k])


def _solve(x0, loss: np.ndarray, score: np.ndarray, bounds, max_nfev: int):
    return least_squares(lambda x: _value("sigmoid", x, loss, None) - score, x0, jac=lambda x: _jacobian(x, loss),
                         bounds=bounds, method="trf", max_nfev=max_nfev)


def bounded(metric: str, scores: np.ndarray) -> bool:
    """Accuracy-like metric (a fraction in [0, 1]) whose logged values all lie in [0, 1]."""
    return bool(BOUNDED_METRIC.match(metric)) and bool(np.all((scores >= 0) & (scores <= 1)))


# ----------------------------------------------------------------------------- the pairs


def collect_pairs(rungs: Sequence, loss_metric: str) -> dict[str, Pairs]:
    """{"<task>/<metric>": Pairs} from every rung's steps where the score and the loss metric were
    both logged (finite values, loss within the rungs' loss limits, steps up to the rung's last)."""
    out: dict[str, list] = {}
    names = _names(rungs)
    for g, rung in enumerate(rungs):
        tasks = sorted(n for n in rung.metrics() if n.startswith(PREFIX) and n.count("/") == 2
                       and all(n.split("/")[1:]))
        if not tasks:
            continue
        ls, lv = rung.series(loss_metric)
        loss_at = {int(s): float(v) for s, v in zip(ls, lv) if LOSS_MIN <= v <= LOSS_MAX and s <= rung.steps}
        for name in tasks:
            steps, values = rung.series(name)
            for s, v in zip(steps, values):
                if int(s) in loss_at and math.isfinite(v):
                    out.setdefault(name[len(PREFIX):], []).append((loss_at[int(s)], float(v), g))
    result = {}
    for key, rows in sorted(out.items()):
        arr = np.asarray(rows, float)
        result[key] = Pairs(arr[:, 0], arr[:, 1], arr[:, 2].astype(int), names)
    return result


def _names(rungs: Sequence) -> list[str]:
    """Each rung's name; `<name> seed <seed>` where several rungs (the seeds of one size) share a name."""
    names = [str(getattr(r, "name", f"rung {i}")) for i, r in enumerate(rungs)]
    return [f"{n} seed {getattr(r, 'seed', i)}" if names.count(n) > 1 else n for i, (n, r) in enumerate(zip(names, rungs))]


# ----------------------------------------------------------------------------- the link


def fit_link(loss: np.ndarray, score: np.ndarray, is_bounded: bool) -> Link:
    """The sigmoid link when the pairs constrain it, else the linear one (with the reason)."""
    loss, score = np.asarray(loss, float), np.asarray(score, float)
    clip = (0.0, 1.0) if is_bounded else None
    linear_x = _fit_linear(loss, score)
    linear = Link("linear", linear_x, clip, score - _value("linear", linear_x, loss, clip))
    if len(loss) < MIN_SIGMOID_PAIRS:
        linear.fallback = f"{len(loss)} pairs, fewer than the {MIN_SIGMOID_PAIRS} a sigmoid needs"
        return linear
    if np.ptp(score) <= 1e-12:
        linear.fallback = "every score is the same: the link is flat"
        return linear
    bounds = _sigmoid_bounds(loss, score, is_bounded)
    best = None
    for x0 in _starts(loss, score, bounds):
        try:
            res = _solve(x0, loss, score, bounds, 400)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.all(np.isfinite(res.x)) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        linear.fallback = "the sigmoid fit failed from every start"
        return linear
    sig = Link("sigmoid", best.x, clip, score - _value("sigmoid", best.x, loss, clip), bounds=bounds)
    why = _unconstrained(best.x, bounds, is_bounded)
    n = len(loss)
    bic = [n * math.log(max(float(np.mean(link.residuals ** 2)), 1e-300)) + p * math.log(n)
           for link, p in ((sig, 4), (linear, 2))]
    if why is None and bic[0] >= bic[1]:
        why = "a straight line fits the pairs as well (BIC)"
    if why:
        linear.fallback = why
        return linear
    return sig


def _fit_linear(loss: np.ndarray, score: np.ndarray) -> np.ndarray:
    if np.ptp(loss) <= 0:
        return np.array([float(np.mean(score)), 0.0])
    slope, intercept = np.polyfit(loss, score, 1)
    return np.array([intercept, slope])


def _sigmoid_bounds(loss, score, is_bounded):
    span = float(np.ptp(loss))
    lo_l, hi_l = float(loss.min()), float(loss.max())
    if is_bounded:
        s_lo, s_hi = 0.0, 1.0
    else:
        ds = max(float(np.ptp(score)), 1e-9)
        s_lo, s_hi = float(score.min()) - 5 * ds, float(score.max()) + 5 * ds
    return (np.array([s_lo, s_lo, 0.5 / span, lo_l - 2 * span]),
            np.array([s_hi, s_hi, 60.0 / span, hi_l + 2 * span]))


def _starts(loss, score, bounds):
    span = float(np.ptp(loss))
    falling = np.corrcoef(loss, score)[0, 1] < 0 if np.ptp(score) > 0 else True
    top, bottom = float(score.max()), float(score.min())
    low, high = (top, bottom) if falling else (bottom, top)  # b at low loss, a + b at high loss
    for l0 in np.quantile(loss, (0.2, 0.5, 0.8)):
        for k in (2.0 / span, 8.0 / span):
            x0 = np.array([low, high, k, l0])
            yield np.clip(x0, bounds[0] + 1e-9 * (bounds[1] - bounds[0]), bounds[1] - 1e-9 * (bounds[1] - bounds[0]))


def _unconstrained(x, bounds, is_bounded) -> Optional[str]:
    lo, hi = bounds
    near = lambda i: min(x[i] - lo[i], hi[i] - x[i]) <= 1e-3 * (hi[i] - lo[i])  # noqa: E731
    if near(2):
        return "the sigmoid's steepness k ran to its bound: the pairs do not show its bend"
    if near(3):
        return "the sigmoid's midpoint L0 ran to its bound, outside the pairs' loss range"
    if not is_bounded and (near(0) or near(1)):
        return "an asymptote of the sigmoid ran to its bound: the pairs do not show where the score levels off"
    return None


def _refit(link: Link, loss: np.ndarray, score: np.ndarray) -> np.ndarray:
    """The link's parameters on resampled pairs, same form, warm-started from the fit."""
    if link.form == "linear":
        return _fit_linear(loss, score)
    try:
        res = _solve(link.x, loss, score, link.bounds, 100)
        return res.x if np.all(np.isfinite(res.x)) else link.x
    except (ValueError, np.linalg.LinAlgError):
        return link.x


# ----------------------------------------------------------------------------- the prediction


def _check_loss(hero_loss, hero_interval) -> tuple[float, float, float]:
    try:
        loss = float(hero_loss)
        lo, hi = (float(v) for v in hero_interval)
    except (TypeError, ValueError):
        raise GlassroomError(f"downstream prediction: the hero's loss {hero_loss!r} and interval {hero_interval!r} "
                             "must be a number and two numbers") from None
    if not all(LOSS_MIN <= v <= LOSS_MAX for v in (loss, lo, hi)) or not lo <= hi:
        raise GlassroomError(f"downstream prediction: the hero's loss {loss:g} and interval [{lo:g}, {hi:g}] must be "
                             f"losses in [{LOSS_MIN:g}, {LOSS_MAX:g}] with lower <= upper")
    # A point estimate outside its own bootstrap interval (a skewed bootstrap, few replicates): the
    # interval is widened to hold it, as step 1 does (ladder.fit.percentile_interval).
    return loss, min(lo, loss), max(hi, loss)


def _settings(fit_cfg) -> tuple[str, float, int, int]:
    confidence = float(getattr(fit_cfg, "confidence", 0.95))
    if not 0 < confidence < 1:
        raise GlassroomError(f"fit.confidence: must be in (0, 1), got {confidence}")
    replicates = int(min(max(int(getattr(fit_cfg, "bootstrap", 200)), 20), MAX_REPLICATES))
    return str(getattr(fit_cfg, "metric", "eval/macro/loss")), confidence, replicates, int(getattr(fit_cfg, "seed", 0))


def _draw_losses(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: np.ndarray, zc: float) -> np.ndarray:
    """Split-normal draws (replicates x points): sides reaching lo and hi at the quantile zc."""
    up, down = (hi - mean) / zc, (mean - lo) / zc
    return mean[None, :] + np.where(z[:, None] > 0, z[:, None] * up[None, :], z[:, None] * down[None, :])


def _thin(curve: dict) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    steps = list(curve["steps"])
    keep = np.unique(np.linspace(0, len(steps) - 1, min(BAND_POINTS, len(steps))).round().astype(int))
    pick = lambda k: np.asarray(curve[k], float)[keep]  # noqa: E731
    return [int(steps[i]) for i in keep], pick("mean"), pick("lo"), pick("hi")


def _predict_one(key: str, pairs: Pairs, loss: float, lo: float, hi: float, confidence: float,
                 replicates: int, seed: int, curve: Optional[dict]) -> dict:
    metric = key.split("/")[-1]
    is_bounded = bounded(metric, pairs.score)
    link = fit_link(pairs.loss, pairs.score, is_bounded)
    rng = np.random.default_rng([seed, 7919, *key.encode()])
    zc = NormalDist().inv_cdf((1 + confidence) / 2)
    # The loss points: the hero's final, then the band's steps (when a curve is given).
    points = [(loss, lo, hi)]
    band_steps = None
    if curve is not None:
        band_steps, cm, clo, chi = _thin(curve)
        points += list(zip(cm, clo, chi))
    means, lows, highs = (np.array(v, float) for v in zip(*points))
    z = rng.standard_normal(replicates)
    losses = _draw_losses(means, lows, highs, z, zc)
    draws = np.empty_like(losses)
    groups = [np.flatnonzero(pairs.group == g) for g in np.unique(pairs.group)]
    for b in range(replicates):
        # Pairs resampled within each rung (every rung keeps its count). Resampling whole rungs was
        # tried: with 3-5 rungs it leaves the bend unseen in many replicates and the band spans
        # most of [chance, 1] (docs/ladder-downstream.md, "Method").
        idx = np.concatenate([rng.choice(g, len(g)) for g in groups])
        x = _refit(link, pairs.loss[idx], pairs.score[idx])
        resid = link.residuals[rng.integers(len(link.residuals))] if len(link.residuals) else 0.0
        draws[b] = _value(link.form, x, losses[b], None) + resid
    if link.clip:
        draws = np.clip(draws, *link.clip)
    q = ((1 - confidence) / 2, (1 + confidence) / 2)
    center = link(means)
    # The wider side of the percentile interval, mirrored: percentile intervals of a bent link lean
    # the way the fit erred (measured 80 of 90 covered at 95%; mirrored, 87 of 90: docs).
    half = np.maximum(center - np.quantile(draws, q[0], axis=0), np.quantile(draws, q[1], axis=0) - center)
    lower, upper = center - half, center + half
    if link.clip:
        lower, upper = np.clip(lower, *link.clip), np.clip(upper, *link.clip)
    used = sorted({pairs.rungs[g] for g in pairs.group})
    warnings = []
    if loss < pairs.loss.min():
        warnings.append(f"the hero's loss {loss:.4g} is below every pair's (lowest {pairs.loss.min():.4g}): "
                        "the link is extrapolated")
        if link.form == "linear" and is_bounded:
            warnings.append("a straight link cannot foresee a score's rise out of chance (a bend the rungs never "
                            "reached): the interval covers the line's own uncertainty only")
    out = {
        "predicted": float(center[0]), "lower": float(lower[0]), "upper": float(upper[0]),
        "link": {"form": link.form, "params": link.params(), "n_pairs": int(len(pairs.loss)),
                 "source": f"{len(pairs.loss)} (loss, score) pairs from {len(used)} rung(s) at every step where "
                           f"downstream/{key} and the loss were both logged",
                 "rungs": used, "fallback": link.fallback,
                 "residual_sd": float(np.std(link.residuals)) if len(link.residuals) else 0.0,
                 "loss_range": [float(pairs.loss.min()), float(pairs.loss.max())],
                 "bounds": list(link.clip) if link.clip else None},
        "extrapolated": bool(loss < pairs.loss.min()), "warnings": warnings,
    }
    if band_steps is not None:
        out["at_steps"] = {"steps": band_steps, "mean": center[1:].tolist(), "lo": lower[1:].tolist(),
                           "hi": upper[1:].tolist()}
    return out


def downstream_prediction(rungs: Sequence, fit_cfg, hero_loss: float, hero_interval: Sequence[float],
                          curve: Optional[dict] = None) -> dict:
    """The hero's downstream scores from its predicted loss (step 1) through each task's link (step 2).

    rungs: objects with name, steps, metrics() and series(metric) (glassroom.ladder.rungs.RungData);
    fit_cfg: the spec's fit section (metric, confidence, bootstrap, seed); hero_loss, hero_interval:
    step 1's final loss and its interval; curve: step 1's predicted curve {steps, mean, lo, hi}
    (curve.predict_curve), for a band per score at up to BAND_POINTS of its steps.

    Returns {"method", "sources", "loss_metric", "confidence", "replicates", "scores": {"<task>/<metric>":
    {"predicted", "lower", "upper", "link": {...}, "extrapolated", "warnings", "at_steps"?}}, "skipped": {key: why},
    "reason": None, or why "scores" is empty}.
    """
    metric, confidence, replicates, seed = _settings(fit_cfg)
    out = {"method": METHOD, "sources": SOURCES, "loss_metric": metric, "confidence": confidence,
           "replicates": replicates, "scores": {}, "skipped": {}, "reason": None}
    pairs = collect_pairs(rungs, metric)
    if not pairs:  # nothing to link: step 1's numbers are not even looked at
        out["reason"] = (f"no rung logged downstream scores (downstream/<task>/<metric>) at a step where {metric} "
                         "was logged: set train.eval_tasks in the ladder spec's base to predict them")
        return out
    loss, lo, hi = _check_loss(hero_loss, hero_interval)
    if curve is not None:
        problem = _curve_problem(curve)
        if problem:
            raise GlassroomError(f"downstream prediction: the predicted loss curve is damaged ({problem})")
    for key, p in pairs.items():
        why = _too_few(p)
        if why:
            out["skipped"][key] = why
            continue
        out["scores"][key] = _predict_one(key, p, loss, lo, hi, confidence, replicates, seed, curve)
    if not out["scores"]:
        out["reason"] = "no task/metric has enough pairs for a link: " + "; ".join(f"{k}: {v}" for k, v in out["skipped"].items())
    return out


def _too_few(p: Pairs) -> Optional[str]:
    big = np.abs(p.score) > SCORE_MAX
    if big.any():
        return f"a score of {p.score[big][0]:g} (rung {p.rungs[p.group[big][0]]}): beyond +-{SCORE_MAX:g}, no score a link can use"
    if len(p.loss) < MIN_PAIRS:
        return f"{len(p.loss)} (loss, score) pair(s), fewer than {MIN_PAIRS}"
    if len(set(p.group.tolist())) < 2:
        return "scores from one rung only: a link needs at least two"
    if np.ptp(p.loss) <= 1e-12 * max(1.0, float(np.abs(p.loss).max())):
        return "every pair has the same loss"
    return None


def _curve_problem(curve) -> Optional[str]:
    if not isinstance(curve, dict):
        return "not a mapping"
    steps = curve.get("steps")
    if not isinstance(steps, (list, tuple)) or not steps:
        return "no steps"
    for k in ("mean", "lo", "hi"):
        v = curve.get(k)
        if not isinstance(v, (list, tuple, np.ndarray)) or len(v) != len(steps):
            return f"{k} is not one value per step"
        if not all(isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and LOSS_MIN <= x <= LOSS_MAX
                   for x in v):
            return f"{k} holds a value that is not a finite loss"
    if not all(a <= m <= b for a, m, b in zip(curve["lo"], curve["mean"], curve["hi"])):
        return "lo <= mean <= hi does not hold"
    return None


# ----------------------------------------------------------------------------- the backtest


def _sizes(rungs: Sequence) -> list[list]:
    """Rungs grouped by size (params, tokens), smallest compute first: the seeds of one size together."""
    groups: dict[tuple, list] = {}
    for r in rungs:
        groups.setdefault((r.params, r.tokens), []).append(r)
    return sorted(groups.values(), key=lambda g: g[0].flops)


def _final_score(rung, key: str) -> Optional[float]:
    steps, values = rung.series(PREFIX + key)
    last = steps == rung.steps
    return float(values[last][-1]) if last.any() else None


def downstream_backtest(rungs: Sequence, fit_cfg, held_loss: Optional[dict] = None) -> dict:
    """Hold out the largest size (every seed of it), fit the links on the rest, predict its final scores.

    held_loss: step 1 for the held-out size, as the loss backtest made it ({"final_loss",
    "final_interval"}, e.g. curve.predict_curve's band fitted without it); None fits it here with
    the curve law on the other rungs (curve.fit_curves). Each score is compared with the mean of
    the held-out seeds' final scores; `link_only` is the link at their actual mean final loss (the
    error step 2 alone makes).
    """
    sizes = _sizes(rungs)
    metric, confidence, _, _ = _settings(fit_cfg)
    if len(sizes) < 3:
        return {"held_out": [], "fitted_on": [], "scores": {}, "skipped": {}, "covered": None,
                "reason": f"a backtest needs at least 3 sizes (fit on 2, predict 1), have {len(sizes)}"}
    held, train = sizes[-1], [r for g in sizes[:-1] for r in g]
    if held_loss is None:
        fit = fit_curves(train, metric, fit_cfg)
        held_loss = predict_curve(fit, held[0].law_size(getattr(fit_cfg, "size_term", "active")), held[0].config["train"],
                                  held[0].tokens_per_step, fit_cfg)
    pred = downstream_prediction(train, fit_cfg, held_loss["final_loss"], held_loss["final_interval"])
    actual_losses = [v for v in (_final_loss(r, metric) for r in held) if v is not None]
    actual_loss = float(np.mean(actual_losses)) if actual_losses else None
    train_pairs = collect_pairs(train, metric) if actual_loss is not None else {}
    scores = {}
    for key, p in pred["scores"].items():
        finals = [v for v in (_final_score(r, key) for r in held) if v is not None and math.isfinite(v)]
        actual = float(np.mean(finals)) if finals else None
        entry = {"predicted": p["predicted"], "lower": p["lower"], "upper": p["upper"], "actual": actual,
                 "actual_by_seed": finals, "error": None if actual is None else p["predicted"] - actual,
                 "covered": None if actual is None else bool(p["lower"] <= actual <= p["upper"]),
                 "link": p["link"]["form"], "fallback": p["link"]["fallback"], "warnings": p["warnings"],
                 "link_only": None}
        if actual_loss is not None and key in train_pairs:
            tp = train_pairs[key]
            link = fit_link(tp.loss, tp.score, bounded(key.split("/")[-1], tp.score))
            entry["link_only"] = float(link([actual_loss])[0])
        scores[key] = entry
    checked = [s["covered"] for s in scores.values() if s["covered"] is not None]
    return {"held_out": _names(held), "fitted_on": _names(train),
            "loss_metric": metric, "confidence": confidence,
            "predicted_loss": float(held_loss["final_loss"]), "actual_loss": actual_loss,
            "scores": scores, "skipped": pred["skipped"],
            "covered": f"{sum(checked)}/{len(checked)}" if checked else None, "reason": pred["reason"]}


def _final_loss(rung, metric: str) -> Optional[float]:
    steps, values = rung.series(metric)
    last = steps == rung.steps
    return float(values[last][-1]) if last.any() else None
