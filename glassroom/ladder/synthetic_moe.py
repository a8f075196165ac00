"""Synthetic Mixture-of-Experts ladders from sparsity-aware truths, and the least-squares reference on them.

Truths are L(Neff, D) = E + A / Neff^alpha + B / D^beta with Neff = N * S^w (N active parameters,
S = total / active parameters, glassroom.ladder.laws): w = 0 only active parameters count, w = 1
every parameter does, in between sparsity helps partly (Clark et al. 2022's S-Base runs give
w = 0.46 in `glassroom ladder fit --results experiments/results/clark-sbase.csv`). The coefficients
are Chinchilla's (Hoffmann et al. 2022, approach 3) and Besiroglu et al. 2024's refit, read as
laws of the active parameters of dense models (w plays no role at S = 1).

A MoE ladder crosses compute values log-spaced over `span` with tokens-per-parameter ratios and
sparsity ratios: every (C, r, S) is a size with N = sqrt(C / (6 r)) active parameters, D = r N,
N * S total parameters, C = 6 N D (active compute). The hero: `factor` x the largest rung's compute at
20 tokens per parameter and the largest sparsity of the ladder. Each of `seeds` runs per size has
loss = truth * exp(N(0, noise)).

`least_squares_reference` is the acceptance's yardstick: least squares of log loss on the TRUE
formula, all six parameters free (w profiled over a grid of 41 values, each a 5-parameter fit from
a fine grid of exponent pairs with the 8 best refined, engine.fit_batch).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from glassroom.ladder.engine import fit_batch
from glassroom.ladder.foresight import Point, fit_points
from glassroom.ladder.synthetic import REFERENCE_GRID, TRUTHS

MOE_TRUTHS = {
    f"{base}-w{w:g}": {**TRUTHS[base], "w": w}
    for base in ("chinchilla", "besiroglu") for w in (0.0, 0.3, 0.5, 1.0)
}
REFERENCE_W = np.linspace(0.0, 1.0, 41)


def truth_loss(truth: dict, params, tokens, total) -> np.ndarray:
    """E + A / (N * S^w)^alpha + B / D^beta, S = total / params."""
    N, D, T = (np.asarray(x, float) for x in (params, tokens, total))
    neff = N ** (1 - truth["w"]) * T ** truth["w"]
    return truth["E"] + truth["A"] / neff ** truth["alpha"] + truth["B"] / D ** truth["beta"]


def moe_ladder(truth: dict, span: float = 30.0, rungs: int = 4, tokens_per_param: Sequence[float] = (10, 40),
               sparsity: Sequence[float] = (2, 8), seeds: int = 2, noise: float = 0.017,
               smallest_flops: float = 1e18, rng: Optional[np.random.Generator] = None) -> list[Point]:
    """Every run of the ladder (module docstring), with its seed and noisy final loss."""
    rng = rng if rng is not None else np.random.default_rng(0)
    points = []
    for i, C in enumerate(smallest_flops * np.geomspace(1.0, span, rungs)):
        for r in tokens_per_param:
            for s in sparsity:
                N = math.sqrt(C / (6.0 * r))
                D, T = r * N, s * N
                for k in range(seeds):
                    loss = float(truth_loss(truth, N, D, T) * math.exp(rng.normal(0.0, noise)))
                    points.append(Point(f"r{i}-t{r:g}-s{s:g}" + (f"-s{k}" if k else ""), N, D, 6.0 * N * D,
                                        loss, k, T))
    return points


def hero_size(points: Sequence[Point], factor: float = 100.0, tokens_per_param: float = 20.0):
    """(N, D, C, T) at `factor` x the largest compute, the ladder's largest sparsity."""
    C = factor * max(p.flops for p in points)
    S = max(p.total_params / p.params for p in points)
    N = math.sqrt(C / (6.0 * tokens_per_param))
    return N, tokens_per_param * N, C, S * N


def least_squares_reference(points: Sequence[Point], params: float, tokens: float, total: float) -> float:
    """Least squares on the true formula L(Neff, D) (module docstring), evaluated at the given size."""
    N = np.array([p.params for p in points], float)
    D = np.array([p.tokens for p in points], float)
    T = np.array([p.total_params for p in points], float)
    y = np.array([p.loss for p in points], float)
    best, value = math.inf, math.nan
    for w in REFERENCE_W:
        neff = N ** (1 - w) * T ** w
        sN, sD = math.exp(np.mean(np.log(neff))), math.exp(np.mean(np.log(D)))
        theta, cost = fit_batch(np.stack([neff / sN, D / sD]), y[None], None, starts=8, grid=REFERENCE_GRID)
        if cost[0] < best:
            E, a, b, ea, eb = theta[0]
            hero_neff = params ** (1 - w) * total ** w
            best, value = float(cost[0]), float(E + a * (hero_neff / sN) ** -ea + b * (tokens / sD) ** -eb)
    return value


def measure(truth: dict, noise: float = 0.017, noise_seeds: int = 20, bootstrap: int = 100, factor: float = 100.0,
            first_seed: int = 0, **ladder) -> dict:
    """The acceptance measurement on one sparsity-aware truth: per noise draw, fit_points (law auto:
    chosen by leave-one-size-out error, stated noise = the true noise), the prediction at the hero
    size, and least_squares_reference. Median and 90th percentile |relative error|, their ratio, how
    often the 95% intervals covered the noise-free truth, and which laws auto chose."""
    err, ref, cover_law, cover_run, chosen = [], [], [], [], {}
    for k in range(noise_seeds):
        rng = np.random.default_rng(20_000 + first_seed + k)
        points = moe_ladder(truth, noise=noise, rng=rng, **ladder)
        N, D, C, T = hero_size(points, factor)
        value = float(truth_loss(truth, N, D, T))
        ff = fit_points(points, stated_noise=noise, bootstrap=bootstrap, seed=k)
        chosen[ff.law_name] = chosen.get(ff.law_name, 0) + 1
        p_law = ff.predict(N, D, C, kind="law", total_params=T)
        p_run = ff.predict(N, D, C, kind="run", total_params=T)
        err.append(abs(p_law["predicted_loss"] / value - 1))
        ref.append(abs(least_squares_reference(points, N, D, T) / value - 1))
        cover_law.append(p_law["lower"] <= value <= p_law["upper"])
        cover_run.append(p_run["lower"] <= value <= p_run["upper"])
    err, ref = np.array(err), np.array(ref)
    m_err, m_ref = float(np.median(err)), float(np.median(ref))
    return {"laws": chosen, "noise_seeds": noise_seeds, "fit_median": m_err, "fit_p90": float(np.quantile(err, 0.9)),
            "ls_true_median": m_ref, "ls_true_p90": float(np.quantile(ref, 0.9)),
            "ratio": m_err / m_ref if m_ref > 0 else (1.0 if m_err == 0 else math.inf),
            "coverage_law": float(np.mean(cover_law)), "coverage_run": float(np.mean(cover_run))}
