"""Synthetic ladders drawn from published scaling-law fits, and the least-squares reference on the true formula.

Truths (L(N, D) = E + A / N^alpha + B / D^beta, N parameters, D training tokens):
- "chinchilla": Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models",
  arXiv 2203.15556, approach 3 (eq. 10): E 1.69, A 406.4, B 410.7, alpha 0.34, beta 0.28.
- "besiroglu": Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt", arXiv 2404.10102,
  their refit of approach 3: E 1.82, A 482.01, B 2085.43, alpha 0.3478, beta 0.3658.

A ladder has `rungs` compute values log-spaced over `span` (largest / smallest); at tokens_per_param
r a rung of compute C has N = sqrt(C / (6 r)), D = r N (C = 6 N D). A sequence of ratios runs every
rung at each of them (the IsoFLOP-style ladder on which L(N, D) is identifiable). Each of `seeds`
runs per size has loss = truth * exp(N(0, noise)): multiplicative lognormal run-to-run noise.

`least_squares_reference` is the yardstick of the acceptance (docs/ladder-foresight.md, Figures): least squares of log loss
(maximum likelihood under that noise) with the TRUE formula L(N, D), all five parameters free, from
a fine grid of exponent pairs with the exact non-negative coefficients at each and the 8 best
refined (engine.fit_batch). On a fixed-ratio ladder N and D move together, so only the sum
A/N^alpha + B/D^beta along the ladder's ratio is determined, which is all the hero needs.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import numpy as np

from glassroom.ladder.engine import fit_batch
from glassroom.ladder.fit import LAW_C, LAW_ND, fit_law
from glassroom.ladder.foresight import Point, fit_points

TRUTHS = {
    "chinchilla": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28},
    "besiroglu": {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658},
}
REFERENCE_GRID = np.linspace(0.02, 1.6, 49)


def truth_loss(truth: dict, params, tokens) -> np.ndarray:
    """E + A / N^alpha + B / D^beta."""
    N, D = np.asarray(params, float), np.asarray(tokens, float)
    return truth["E"] + truth["A"] / N ** truth["alpha"] + truth["B"] / D ** truth["beta"]


def ladder_sizes(span: float, rungs: int, smallest_flops: float = 1e18,
                 tokens_per_param: Union[float, Sequence[float]] = 20) -> list[tuple[str, float, float, float]]:
    """(name, N, D, C) of every size of the ladder."""
    ratios = [float(tokens_per_param)] if np.ndim(tokens_per_param) == 0 else [float(r) for r in tokens_per_param]
    out = []
    for i, C in enumerate(smallest_flops * np.geomspace(1.0, span, rungs)):
        for r in ratios:
            N = math.sqrt(C / (6.0 * r))
            name = f"r{i}" if len(ratios) == 1 else f"r{i}-t{r:g}"
            out.append((name, N, r * N, 6.0 * N * r * N))
    return out


def synthetic_ladder(truth: dict, span: float, rungs: int, seeds: int, noise: float, smallest_flops: float = 1e18,
                     tokens_per_param: Union[float, Sequence[float]] = 20,
                     rng: Optional[np.random.Generator] = None) -> list[Point]:
    """Every run of the ladder (module docstring), each with its seed and noisy final loss."""
    rng = rng if rng is not None else np.random.default_rng(0)
    points = []
    for name, N, D, C in ladder_sizes(span, rungs, smallest_flops, tokens_per_param):
        for k in range(seeds):
            loss = float(truth_loss(truth, N, D) * math.exp(rng.normal(0.0, noise)))
            points.append(Point(name if k == 0 else f"{name}-s{k}", N, D, C, loss, k))
    return points


def hero_size(points: Sequence[Point], factor: float = 100.0, tokens_per_param: float = 20.0) -> tuple[float, float, float]:
    """(N, D, C) at `factor` times the largest point's compute, at tokens_per_param."""
    C = factor * max(p.flops for p in points)
    N = math.sqrt(C / (6.0 * tokens_per_param))
    return N, tokens_per_param * N, C


def least_squares_reference(points: Sequence[Point], params: float, tokens: float) -> float:
    """Least squares on the true formula L(N, D) (module docstring), evaluated at (params, tokens)."""
    N = np.array([p.params for p in points], float)
    D = np.array([p.tokens for p in points], float)
    y = np.array([p.loss for p in points], float)
    sN, sD = math.exp(np.mean(np.log(N))), math.exp(np.mean(np.log(D)))
    theta, _ = fit_batch(np.stack([N / sN, D / sD]), y[None], None, starts=8, grid=REFERENCE_GRID)
    E, a, b, ea, eb = theta[0]
    return float(E + a * (params / sN) ** -ea + b * (tokens / sD) ** -eb)


def measure(truth: dict, span: float, rungs: int = 5, seeds: int = 1, noise: float = 0.005,
            tokens_per_param: Union[float, Sequence[float]] = 20, noise_seeds: int = 20, factor: float = 100.0,
            stated_noise: Optional[float] = None, bootstrap: int = 200, law: str = "auto",
            smallest_flops: float = 1e18, first_seed: int = 0, huber: bool = False) -> dict:
    """The acceptance measurement (fitter against least squares on the truth, and coverage) on one truth and
    ladder, over `noise_seeds` noise draws.

    Per draw: fit_points (stated noise = the true noise unless given), prediction at `factor` x the
    largest rung's compute at 20 tokens per parameter, least_squares_reference at the same size.
    Returns the fitter's and the reference's median and 90th percentile |relative error|, their
    ratio, and how often the 95% interval (kind "law" and kind "run") covered the noise-free truth.
    huber: also the median error of fit.py's fit (Huber delta 1e-3 of log loss, the `ladder fit DIR`
    fitter before foresight) of the same law on the same points."""
    stated = noise if stated_noise is None else stated_noise
    err, ref, cover_law, cover_run, width, laws, hub = [], [], [], [], [], set(), []
    for k in range(noise_seeds):
        rng = np.random.default_rng(10_000 + first_seed + k)
        points = synthetic_ladder(truth, span, rungs, seeds, noise, smallest_flops, tokens_per_param, rng)
        N, D, C = hero_size(points, factor)
        value = float(truth_loss(truth, N, D))
        ff = fit_points(points, law=law, stated_noise=stated, bootstrap=bootstrap, seed=k)
        laws.add(ff.law_name)
        p_law, p_run = ff.predict(N, D, C, kind="law"), ff.predict(N, D, C, kind="run")
        err.append(abs(p_law["predicted_loss"] / value - 1))
        ref.append(abs(least_squares_reference(points, N, D) / value - 1))
        if huber:
            hub.append(abs(_huber_prediction(points, ff.law_name, N, D, C) / value - 1))
        cover_law.append(p_law["lower"] <= value <= p_law["upper"])
        cover_run.append(p_run["lower"] <= value <= p_run["upper"])
        width.append((p_law["upper"] - p_law["lower"]) / value)
    err, ref = np.array(err), np.array(ref)
    m_err, m_ref = float(np.median(err)), float(np.median(ref))
    ratio = m_err / m_ref if m_ref > 0 else (1.0 if m_err == 0 else math.inf)
    return {"law": "/".join(sorted(laws)), "noise_seeds": noise_seeds, "fit_median": float(np.median(err)),
            "fit_p90": float(np.quantile(err, 0.9)), "fit_max": float(err.max()), "ls_true_median": float(np.median(ref)),
            "ls_true_p90": float(np.quantile(ref, 0.9)), "ratio": ratio,
            "coverage_law": float(np.mean(cover_law)), "coverage_run": float(np.mean(cover_run)),
            "width_median": float(np.median(width)), "huber_median": float(np.median(hub)) if hub else None}


def _huber_prediction(points: Sequence[Point], law_name: str, N: float, D: float, C: float) -> float:
    if law_name == "L(C)":
        fit = fit_law(LAW_C, {"C": [p.flops for p in points]}, [p.loss for p in points])
        return float(fit.predict({"C": [C]})[0])
    fit = fit_law(LAW_ND, {"N": [p.params for p in points], "D": [p.tokens for p in points]}, [p.loss for p in points])
    return float(fit.predict({"N": [N], "D": [D]})[0])
