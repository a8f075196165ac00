"""The schedule-aware loss-curve law L(N, s) fitted on the rungs' curves, and the band it predicts
for a run of N parameters and a learning-rate schedule (used by predict.py, downstream_link.py and
results.py; see docs/ladder-predict.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from glassroom.config import build_section
from glassroom.errors import GlassroomError
from glassroom.ladder.fit import Fit, Law, Term, bootstrap, fit_law, percentile_interval
from glassroom.train.config import TrainSection

CURVE_LAW = Law("L(N,s)", "E + B * N^-beta + A * S1^-alpha - C * S2",
                (Term("E"), Term("B", "power", "N", "beta"), Term("A", "power", "S1", "alpha"),
                 Term("C", "linear", "S2", None, -1.0)))
BAND_POINTS = 500


def lr_multipliers(train: Any) -> np.ndarray:
    """m_i for i in 0..steps-1 of a `train:` section (TrainSection or mapping)."""
    from glassroom.train.optim import lr_multiplier  # lazy: torch loads only when this runs

    if isinstance(train, dict):
        train = build_section(TrainSection, train, "train")
    f = lr_multiplier(train)
    return np.array([f(i) for i in range(train.steps)], dtype=float)


def schedule_areas(multipliers: np.ndarray, momentum: float = 0.999) -> tuple[np.ndarray, np.ndarray]:
    """(S1, S2) in steps at s = 0..len(multipliers): after s optimizer steps."""
    m = np.asarray(multipliers, float)
    s1 = np.r_[0.0, np.cumsum(m)]
    drops = np.r_[0.0, np.maximum(0.0, m[:-1] - m[1:])]  # drop_i = m_{i-1} - m_i, none at i = 0
    mom = np.zeros_like(m)
    acc = 0.0
    for i, d in enumerate(drops):
        acc = momentum * acc + d
        mom[i] = acc
    s2 = np.r_[0.0, np.cumsum(mom)]
    return s1, s2


def curve_features(params: float, tokens_per_step: float, multipliers: np.ndarray, steps: np.ndarray,
                   momentum: float) -> dict[str, np.ndarray]:
    s1, s2 = schedule_areas(multipliers, momentum)
    steps = np.asarray(steps, int)
    return {"N": np.full(len(steps), float(params)), "S1": tokens_per_step * s1[steps], "S2": s2[steps]}


def _rung_points(rungs, metric: str, fit_cfg) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    X, y, groups = {"N": [], "S1": [], "S2": []}, [], []
    for g, rung in enumerate(rungs):
        steps, values = rung.series(metric)
        keep = (steps >= max(1, math.ceil(fit_cfg.skip_fraction * rung.steps))) & (steps <= rung.steps)
        if keep.sum() < 2:
            raise GlassroomError(f"{rung.run_dir}: fewer than 2 values of {metric} after {fit_cfg.skip_fraction:.0%} "
                                 "of the run; evaluate more often (eval_fraction)")
        rung.check_curve(metric, fit_cfg.skip_fraction)
        size = rung.law_size(getattr(fit_cfg, "size_term", "active"))
        feats = curve_features(size, rung.tokens_per_step, lr_multipliers(rung.config["train"]), steps[keep],
                               fit_cfg.momentum)
        for k in X:
            X[k].extend(feats[k])
        y.extend(values[keep])
        groups.extend([g] * int(keep.sum()))
    return {k: np.asarray(v) for k, v in X.items()}, np.asarray(y), np.asarray(groups)


def fit_curves(rungs, metric: str, fit_cfg, noise=None) -> Fit:
    """The curve law fitted jointly on every rung's curve of `metric` (each seed's curve a group of
    its own), with bootstrap replicates whose per-run offsets have SD noise.sigma (noise.py's
    NoiseEstimate; fit_cfg.noise_floor when None)."""
    if len(rungs) < 2:
        raise GlassroomError("the curve law needs at least two rungs")
    X, y, groups = _rung_points(rungs, metric, fit_cfg)
    pinned = {} if fit_cfg.irreducible == "free" else {"E": float(fit_cfg.irreducible)}
    free = len(CURVE_LAW.coefs) + len(CURVE_LAW.exponents) - len(pinned)
    if len(y) <= free:
        counts = ", ".join(f"{r.name} {int((groups == g).sum())}" for g, r in enumerate(rungs))
        raise GlassroomError(f"the curve law has {free} free parameters but the rungs give only {len(y)} values of "
                             f"{metric} after skip_fraction ({counts}); evaluate more often (eval_fraction) or add rungs")
    fit = fit_law(CURVE_LAW, X, y, pinned)
    sigma = fit_cfg.noise_floor if noise is None else noise.sigma
    return bootstrap(fit, X, y, groups, fit_cfg.bootstrap, sigma, fit_cfg.confidence, fit_cfg.seed)


def predict_curve(fit: Fit, params: float, train: Any, tokens_per_step: float, fit_cfg,
                  points: int = BAND_POINTS, noise=None, misfit: float = 0.0) -> dict[str, Any]:
    """steps, mean, lo, hi of the law for one run, from skip_fraction of its steps to the end; each
    replicate shifted by one draw of the run's seed noise (noise: a NoiseEstimate, whose measured
    sigma is drawn from its posterior per replicate; fit_cfg.noise_floor when None) and of the law's
    own out-of-sample error `misfit` (SD in log loss, size_misfit's; 0: none)."""
    m = lr_multipliers(train)
    total = len(m)
    first = max(1, math.ceil(fit_cfg.skip_fraction * total))
    steps = np.unique(np.linspace(first, total, min(points, total - first + 1)).round().astype(int))
    X = curve_features(params, tokens_per_step, m, steps, fit_cfg.momentum)
    mean = fit.predict(X)
    if fit.boot:
        rng = np.random.default_rng(fit_cfg.seed + 1)
        sigmas = ([fit_cfg.noise_floor] * len(fit.boot) if noise is None
                  else [noise.draw(rng) for _ in fit.boot])  # a stated sigma draws nothing: the same stream
        draws = np.array([fit.predict(X, b) * math.exp(rng.normal(0.0, math.hypot(sd, misfit)))
                          for b, sd in zip(fit.boot, sigmas)])
        lo, hi = percentile_interval(mean, draws, fit_cfg.confidence)
    else:
        lo, hi = mean.copy(), mean.copy()
    return {"steps": steps.tolist(), "mean": mean.tolist(), "lo": lo.tolist(), "hi": hi.tolist(),
            "final_loss": float(mean[-1]), "final_interval": [float(lo[-1]), float(hi[-1])]}
