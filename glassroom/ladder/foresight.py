"""Foresight: fit any ladder's final losses (run folders, a results file, a paper's table) and predict any size.

Laws (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", arXiv 2203.15556):
L(C) = E + A * C^-alpha on compute, or L(N, D) = E + A / N^alpha + B / D^beta when the points vary
N and D separately (fit.identifiable_nd on the distinct sizes). On a ladder that holds tokens per
parameter fixed, L(N, D) reduces to E + A' C^-alpha/2 + B' C^-beta/2: L(C) is then a slightly
misspecified but much steadier description (3 parameters instead of 5 on a handful of sizes); its
bias at 100x the largest rung is measured (docs/ladder-foresight.md) and small next to the noise.

Fit: least squares of log loss, every run one point (seeds of one size are separate points), which
is the maximum-likelihood fit under multiplicative lognormal run-to-run noise. Hoffmann's Huber loss
with delta 1e-3 (fit.py) behaves like least absolute deviations once the noise is above 0.1%, and
loses efficiency; foresight has no outliers to guard against that the noise estimate would not show.
The search is variable projection, vectorised: for every exponent pair on a grid, the coefficients
(all >= 0) are the exact non-negative weighted least squares solution (every subset of columns solved
in closed form, the best feasible one kept); the best grid points then start a projected
Levenberg-Marquardt on the log residuals. Many ladders (bootstrap replicates, ladder design's
simulations) are fitted in one batch; one fit takes a few milliseconds.

Intervals: a two-level parametric bootstrap. Sigma: measured from seeds, pooled with the scatter of
the size means around the law (so misfit counts as noise; degrees of freedom n - k) and drawn per
replicate from its posterior sigma^2 = SS / chi2(dof) (noise.py); or the stated value, raised to the
residual scatter of the size means when that is larger (a stated value is only as good as the
statement: give seeds to measure it; seeds that all gave the same loss measure nothing, and the
stated value is used). Level one redraws every run around the fitted law,
fitted * exp(N(0, sigma)), and refits; level two redraws every run around each level-one refit and
refits again (warm-started, coarse grid). The interval is the percentile interval of the level-two
predictions. Why two levels: how far a 100x extrapolation can swing depends on the law's own exponents
and E, and one level around the single fitted law misses that; measured on synthetic truth (bench/
foresight.py, docs/ladder-foresight.md) one level covered the law's value 92-97% of the time for a
nominal 95% (fewer than 90% of 20 draws often enough to matter), two levels 96-100% (conservative:
intervals ~1.4x wider). The basic (reflected) interval covered only 78-94%, the prediction being
skewed. Kind "run" adds one draw of run noise per replicate, for comparing with one observed run;
"law" is the law's value itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.ladder.engine import COARSE
from glassroom.ladder.fit import LOSS_MAX, Fit, quantile_levels
from glassroom.ladder.laws import Features, check_total, choose, fit_features, size_index
from glassroom.ladder.noise import NoiseEstimate, seed_noise

LEVELS = 2  # bootstrap levels: 1 around the fitted law only; 2 also around its refits (module docstring)


@dataclass(frozen=True)
class Point:
    name: str
    params: float
    tokens: float
    flops: float
    loss: float
    seed: Optional[int] = None
    total_params: Optional[float] = None  # a MoE's every parameter (params: its active ones); None = dense


# ---------------------------------------------------------------- laws on points

def _arrays(points: Sequence[Point]) -> tuple[np.ndarray, ...]:
    if isinstance(points, (str, bytes, dict)) or not hasattr(points, "__iter__"):
        raise GlassroomError(f"foresight: points must be a list of runs, got {type(points).__name__}")
    points = list(points)
    if not points:
        raise GlassroomError("foresight: no points to fit (give name, params, tokens, flops, loss per run)")
    rows = []
    for i, p in enumerate(points):
        name = getattr(p, "name", None) or f"point {i + 1}"
        vals = []
        for key in ("params", "tokens", "flops", "loss"):
            v = getattr(p, key, None)
            if v is None and key == "flops":
                vals.append(math.nan)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise GlassroomError(f"foresight: {name}: {key} must be a number, got {v!r}")
            v = float(v)
            if not math.isfinite(v) or v <= 0:
                raise GlassroomError(f"foresight: {name}: {key} must be finite and above zero, got {v:g}")
            vals.append(v)
        if vals[3] > LOSS_MAX:
            raise GlassroomError(f"foresight: {name}: a loss of {vals[3]:g} is above {LOSS_MAX:g}; no fit can use it")
        if math.isnan(vals[2]):
            vals[2] = 6.0 * vals[0] * vals[1]
            if not math.isfinite(vals[2]):
                raise GlassroomError(f"foresight: {name}: 6 * params * tokens overflows; give flops")
        seed = getattr(p, "seed", None)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise GlassroomError(f"foresight: {name}: seed must be a whole number, got {seed!r}")
        total = getattr(p, "total_params", None)
        if total is not None:
            if isinstance(total, bool) or not isinstance(total, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(total) or total < vals[0]:
                raise GlassroomError(f"foresight: {name}: total_params must be a number at least params "
                                     f"({vals[0]:g}), got {total!r}")
        rows.append((name, *vals, seed, vals[0] if total is None else float(total)))
    seen: dict = {}
    for name, N, D, _C, _y, seed, T in rows:
        key = (N, D, T, seed)
        if key in seen:
            what = f"seed {seed}" if seed is not None else "no seed"
            raise GlassroomError(f"foresight: {seen[key]} and {name} are the same size (params {N:g}, tokens {D:g}) "
                                 f"with {what}: a duplicate row, or give each run of one size its own seed")
        seen[key] = name
    N, D, C, y, T = (np.array([r[k] for r in rows]) for k in (1, 2, 3, 4, 6))
    return N, D, C, y, T


# ---------------------------------------------------------------- fits with intervals

@dataclass
class ForesightFit:
    fit: Fit
    noise: NoiseEstimate
    law_name: str  # laws.NAMES: "L(C)", "L(N,D)", "L(Nt,D)", "L(Neff,D)"
    confidence: float = 0.95
    why: str = ""
    features: Optional[Features] = None
    theta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    boot_theta: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    run_noise: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flops_per_6nd: float = 1.0
    largest_flops: float = 0.0
    sigma_used: dict = field(default_factory=dict)
    data: tuple = ()  # (N, D, C, y, T) of the fitted points
    pinned_E: Optional[float] = None
    cross_validation: Optional[dict] = None  # laws.cross_validate's table when auto chose among MoE laws

    def predict(self, params: float, tokens: float, flops: Optional[float] = None, kind: str = "run",
                total_params: Optional[float] = None) -> dict:
        """The law's loss at (params, tokens[, flops]) with its interval; kind 'run' (one run, seed noise
        included) or 'law' (the law's value). flops None: 6 * N * D times the fitted points' median
        flops / (6 N D). total_params: the size's every parameter, needed by L(Nt,D) and L(Neff,D)
        (params is the active count)."""
        if kind not in ("run", "law"):
            raise GlassroomError(f"foresight: interval kind must be run or law, got {kind!r}")
        vals = {}
        for key, v in (("params", params), ("tokens", tokens), ("flops", flops)):
            if v is None and key == "flops":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) or v <= 0:
                raise GlassroomError(f"foresight: predict needs {key} as a finite number above zero, got {v!r}")
            vals[key] = float(v)
        N, D = vals["params"], vals["tokens"]
        C = vals.get("flops", 6.0 * N * D * self.flops_per_6nd)
        f = self.features
        T = check_total(N, total_params, f.key)
        mean = float(f.values(self.theta[None], [N], [D], [C], [T])[0, 0])
        lower = upper = mean
        if len(self.boot_theta):
            logs = np.log(np.maximum(f.values(self.boot_theta, [N], [D], [C], [T])[:, 0], 1e-12))
            if kind == "run":
                logs = logs + self.run_noise
            lo_q, hi_q = np.quantile(logs, quantile_levels(self.confidence))
            lower, upper = min(mean, math.exp(lo_q)), max(mean, math.exp(hi_q))
        return {"predicted_loss": mean, "lower": lower, "upper": upper,
                "interval": {"confidence": self.confidence, "kind": kind,
                             "method": f"{self.fit.bootstrap_method} bootstrap, percentile interval"
                                       + (" incl. one run's seed noise" if kind == "run" else " of the law's value"),
                             "replicates": int(len(self.boot_theta)), "sigma": self.sigma_used},
                "params": N, "tokens": D, "flops": C, "total_params": T,
                "extrapolation": C / self.largest_flops if self.largest_flops else None,
                "law": self.fit.to_json(), "why_law": self.why, "noise": self.noise.to_json(),
                "cross_validation": self.cross_validation}

    def to_json(self) -> dict:
        return {"law": self.fit.to_json(), "law_name": self.law_name, "why_law": self.why,
                "cross_validation": self.cross_validation,
                "noise": self.noise.to_json(), "sigma": self.sigma_used, "confidence": self.confidence,
                "flops_per_6nd": self.flops_per_6nd, "largest_flops": self.largest_flops}


def _sigma_draws(noise: NoiseEstimate, lof_ss: float, lof_dof: int, rng: np.random.Generator, R: int) -> tuple[np.ndarray, dict]:
    """Per-replicate noise sigma (module docstring) and a description of it."""
    s_lof = math.sqrt(lof_ss / lof_dof) if lof_dof > 0 else None
    if noise.source == "measured" and noise.sigma > 0:
        ss = noise.sigma ** 2 * noise.dof + (lof_ss if lof_dof > 0 else 0.0)
        dof = noise.dof + max(lof_dof, 0)
        pooled = math.sqrt(ss / dof)
        draws = np.sqrt(ss / np.maximum(rng.chisquare(dof, R), 1e-12))
        return draws, {"source": "measured + residual", "sigma": pooled, "dof": dof, "residual_sigma": s_lof}
    base = noise.sigma if noise.source == "stated" else noise.stated  # seeds that all agree measure nothing
    used = max(base, s_lof or 0.0)
    source = "stated" if noise.source == "stated" else "stated (every size's seeds gave the same loss)"
    return np.full(R, used), {"source": source if used == base else "residual (above stated)", "sigma": used,
                              "dof": 0, "residual_sigma": s_lof}


def fit_points(points: Sequence[Point], law: str = "auto", stated_noise: float = 0.003,
               irreducible: Optional[float] = None, bootstrap: int = 200, confidence: float = 0.95,
               seed: int = 0) -> ForesightFit:
    """Fit L(C) or L(N,D) to the runs' final losses, with noise from seeds and bootstrap intervals."""
    N, D, C, y, T = _arrays(points)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not (0 < confidence < 1):
        raise GlassroomError(f"foresight: confidence must be a number between 0 and 1, got {confidence!r}")
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or bootstrap < 0:
        raise GlassroomError(f"foresight: bootstrap must be a whole number >= 0, got {bootstrap!r}")
    pin = None
    if irreducible is not None:
        pin = float(irreducible)
        if not (math.isfinite(pin) and 0 <= pin < float(y.min())):
            raise GlassroomError(f"foresight: irreducible loss must be at least 0 and below every loss "
                                 f"(smallest {float(y.min()):g}), got {irreducible}")
    key, why, table = choose(law, N, D, C, T, y, pin)
    size = size_index(N, D, T)
    noise = seed_noise([y[size == s] for s in np.unique(size)], stated_noise)
    feats = Features(key, N, D, C, T)
    theta, cost = fit_features(feats, N, D, C, T, y[None], pin, starts=4, fine=True, refine=True)
    theta = theta[0]
    params = feats.to_params(theta)
    pinned = {} if pin is None else {"E": pin}
    fit = Fit(feats.law, params, feats.scale_dict(theta), float(cost[0]), len(y), pinned,
              shape_params=("w",) if key == "NeffD" else ())
    fitted = feats.values(theta[None], N, D, C, T)[0]
    resid = np.log(y) - np.log(fitted)
    sizes = np.unique(size)
    lof_ss = float(sum(np.sum(size == s) * np.mean(resid[size == s]) ** 2 for s in sizes))
    lof_dof = len(sizes) - fit.n_free
    rng = np.random.default_rng(seed)
    sig, sigma_used = _sigma_draws(noise, lof_ss, lof_dof, rng, bootstrap)
    boot = np.zeros((0, len(theta)))
    run_noise = np.zeros(0)
    if bootstrap:
        Ystar = fitted[None] * np.exp(sig[:, None] * rng.standard_normal((bootstrap, len(y))))
        grid = COARSE[feats.n_features]
        boot, _ = fit_features(feats, N, D, C, T, Ystar, pin, starts=2, grid=grid, warm=theta)
        if LEVELS >= 2:
            sig2, _ = _sigma_draws(noise, lof_ss, lof_dof, rng, bootstrap)
            gen = feats.values(boot, N, D, C, T)
            Y2 = gen * np.exp(sig2[:, None] * rng.standard_normal((bootstrap, len(y))))
            boot2, _ = fit_features(feats, N, D, C, T, Y2, pin, starts=2, grid=grid, warm=theta)
            boot, sig = boot2, sig2
        run_noise = sig * rng.standard_normal(len(boot))
        fit.boot = [feats.to_params(t) for t in boot]
        fit.bootstrap_method = "parametric" if LEVELS == 1 else "two-level parametric"
        lo_q, hi_q = quantile_levels(confidence)
        for name in fit.params:
            values = np.array([b[name] for b in fit.boot])
            fit.intervals[name] = (float(np.quantile(values, lo_q)), float(np.quantile(values, hi_q)))
    ratio = float(np.median(C / (6.0 * N * D)))
    return ForesightFit(fit, noise, feats.law.name, confidence, why, feats, theta, boot, run_noise, ratio,
                        float(C.max()), sigma_used, (N, D, C, y, T), pin, table)


# ---------------------------------------------------------------- fast fits for simulation

def point_fits(params, tokens, flops, losses, law: str = "auto", irreducible: Optional[float] = None,
               total=None) -> Callable[..., np.ndarray]:
    """Fit every row of `losses` (R, n) on the same points at once; returns f(params, tokens, flops,
    total=None) -> (R,). `total`: the points' total parameters (MoE; default: params). With law auto on
    MoE points the law is chosen once, by cross-validation on the first row."""
    N, D = np.asarray(params, float), np.asarray(tokens, float)
    C = np.asarray(flops, float) if flops is not None else 6.0 * N * D
    T = N if total is None else np.asarray(total, float)
    Y = np.atleast_2d(np.asarray(losses, float))
    if Y.shape[1] != len(N) or not (np.all(np.isfinite(Y)) and np.all(Y > 0)):
        raise GlassroomError("foresight: losses must be finite, above zero, one column per point")
    key, _, _ = choose(law, N, D, C, T, Y[0], irreducible)
    feats = Features(key, N, D, C, T)
    theta, _ = fit_features(feats, N, D, C, T, Y, irreducible, starts=2, grid=COARSE[feats.n_features])
    ratio = float(np.median(C / (6.0 * N * D)))

    def predict(p: float, t: float, c: Optional[float] = None, total_params: Optional[float] = None) -> np.ndarray:
        c = 6.0 * p * t * ratio if c is None else c
        return feats.values(theta, [p], [t], [c], [check_total(p, total_params, key)])[:, 0]

    return predict


def point_fit(params, tokens, flops, loss, law: str = "auto", total=None) -> Callable[..., float]:
    """One fit, no bootstrap (what ladder design simulates thousands of times): f(params, tokens, flops) -> loss."""
    f = point_fits(params, tokens, flops, np.asarray(loss, float)[None], law, total=total)
    return lambda p, t, c=None, total_params=None: float(f(p, t, c, total_params)[0])
