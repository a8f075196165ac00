"""Scaling-law fits with bootstrap intervals: L(C) = E + A*C^-alpha, L(N, D) = E + A/N^alpha + B/D^beta.

Method (docs/ladder.md): every law here is linear in its coefficients (E, A, B, ...) once its
exponents are fixed. So starting points come from a grid of exponents with non-negative least
squares for the coefficients at each grid point (variable projection); the best starts are then
refined with L-BFGS-B on the Hoffmann et al. (2022) objective, the sum of Huber(delta=1e-3) losses
of the residuals in log loss. Coefficients stay >= 0 through bounds (the role of Hoffmann's
log-sum-exp parametrisation); inputs are divided by their geometric mean so that all coefficients
are of the order of the loss, and reported in original units.

Intervals come from a seeded bootstrap. Each replicate perturbs the fitted values in log space by
(a) residuals resampled with replacement (whole per-rung blocks for curves; single points,
scaled by sqrt(n / (n - k)) for the degrees of freedom, for endpoint fits) and (b) one offset per
rung drawn from N(0, noise_floor): a single run per size cannot show the seed-to-seed spread of
its loss, so it is an assumption the spec states. With at least max(8, 2k + 2) points, the
endpoint fits resample the points themselves instead (cases bootstrap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy.optimize import minimize, nnls

from glassroom.errors import GlassroomError

HUBER_DELTA = 1e-3
EXPONENT_GRID = (0.03, 0.07, 0.15, 0.3, 0.5, 0.8, 1.2)
EXPONENT_BOUNDS = (1e-4, 3.0)
LOSS_MAX = 1e6  # glassroom.ladder.rungs.LOSS_MAX: beyond it a value is no loss (and overflows NNLS)
EXPONENT_IMPLAUSIBLE = 2.0  # an exponent this steep means the fit ran to its bound (Fit.warnings)
VANISHED = 1e-6  # a term worth less than this share of the loss has been dropped by the fit (Fit.notes)
TERM_DROPPED = {  # what a dropped term means, by its coefficient ("one") or its feature (Fit.notes)
    "E": "no irreducible loss in the data's range, so the law extrapolates as a pure power law "
         "(it keeps falling where a floor would flatten it: optimistic far beyond the runs)",
    "C": "the loss does not fall with compute in the data; the law predicts the same loss at every size",
    "N": "the model-size term vanished: the law sees no effect of model size, so a larger model "
         "is predicted no better than a smaller one given the same data or schedule",
    "D": "the data term vanished: the law sees no effect of the number of tokens",
    "S1": "the schedule term vanished: the law sees no effect of training progress",
    "S2": "no annealing gain: the law sees no extra drop while the learning rate decays (or no run decays it)",
}


@dataclass(frozen=True)
class Term:
    """One additive term: sign * coef * f(x), f = (x/x0)^-exponent ('power'), x/x0 ('linear') or 1."""

    coef: str
    kind: str = "one"  # one | power | linear
    feature: Optional[str] = None
    exponent: Optional[str] = None
    sign: float = 1.0


@dataclass(frozen=True)
class Law:
    name: str
    formula: str
    terms: tuple[Term, ...]

    @property
    def exponents(self) -> list[str]:
        return [t.exponent for t in self.terms if t.exponent]

    @property
    def coefs(self) -> list[str]:
        return [t.coef for t in self.terms]


LAW_C = Law("L(C)", "E + A * C^-alpha", (Term("E"), Term("A", "power", "C", "alpha")))
LAW_ND = Law("L(N,D)", "E + A / N^alpha + B / D^beta",
             (Term("E"), Term("A", "power", "N", "alpha"), Term("B", "power", "D", "beta")))


@dataclass
class Fit:
    law: Law
    params: dict[str, float]  # original units
    scales: dict[str, float]  # x0 of each feature
    objective: float
    n_points: int
    pinned: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    boot: list[dict[str, float]] = field(default_factory=list)
    bootstrap_method: str = ""
    shape_params: tuple[str, ...] = ()  # free parameters outside the terms (laws.py's w of L(Neff,D))

    @property
    def warnings(self) -> list[str]:
        """Exponents at or near a bound of EXPONENT_BOUNDS (above EXPONENT_IMPLAUSIBLE): the optimum lies
        outside what a power law can mean, the fit is not to be trusted."""
        lo, hi = EXPONENT_BOUNDS
        out = []
        for name in self.law.exponents:
            value = self.params.get(name)
            if name in self.pinned or value is None:
                continue
            if value >= EXPONENT_IMPLAUSIBLE or value <= lo * (1 + 1e-2):
                out.append(f"{self.law.name}: {name} = {value:.4g} at or near its bound [{lo:g}, {hi:g}] "
                           "(measured exponents are below 1): the data do not follow the law; the fit is unreliable")
        return out

    @property
    def notes(self) -> list[str]:
        """Terms the fit dropped: a free coefficient at its bound 0 (worth less than VANISHED of the loss
        where the points are centred). The fit stands, but the law then says less than its formula:
        with E = 0 it extrapolates as a pure power law, with the size term gone it ignores model size,
        and the dropped term's exponent means nothing (its interval spans the bounds)."""
        at = {k: np.array([v], float) for k, v in self.scales.items()}
        level = abs(float(evaluate(self.law, self.params, at)[0])) or 1.0
        out = []
        for t in self.law.terms:
            if t.coef in self.pinned or t.coef not in self.params:
                continue
            x = at.get(t.feature, np.ones(1))[0] if t.feature else 1.0
            f = 1.0 if t.kind == "one" else (x ** -self.params[t.exponent] if t.kind == "power" else x)
            if abs(self.params[t.coef] * f) > VANISHED * level:
                continue
            meaning = TERM_DROPPED.get(t.coef if t.kind == "one" else t.feature,
                                       f"the {t.coef} term vanished: the data show no effect of {t.feature}")
            out.append(f"{self.law.name}: {t.coef} = 0, at its bound: {meaning}"
                       + (f" ({t.exponent} is then undetermined)" if t.exponent else ""))
        return out

    @property
    def n_free(self) -> int:
        return len(self.law.coefs) + len(self.law.exponents) + len(self.shape_params) - len(self.pinned)

    def predict(self, X: dict[str, np.ndarray], params: Optional[dict[str, float]] = None) -> np.ndarray:
        return evaluate(self.law, params or self.params, X)

    def to_json(self) -> dict:
        return {"law": self.law.name, "formula": self.law.formula, "params": self.params,
                "intervals": {k: list(v) for k, v in self.intervals.items()}, "pinned": self.pinned,
                "n_points": self.n_points, "n_free_params": self.n_free, "dof": self.n_points - self.n_free,
                "bootstrap": {"method": self.bootstrap_method, "replicates": len(self.boot)},
                "warnings": self.warnings, "notes": self.notes}


def evaluate(law: Law, params: dict[str, float], X: dict[str, np.ndarray]) -> np.ndarray:
    """The law's value at X (original units)."""
    n = len(next(iter(X.values())))
    out = np.zeros(n)
    for t in law.terms:
        if t.kind == "one":
            f = np.ones(n)
        elif t.kind == "power":
            f = np.asarray(X[t.feature], float) ** -params[t.exponent]
        else:
            f = np.asarray(X[t.feature], float)
        out += t.sign * params[t.coef] * f
    return out


def quantile_levels(confidence: float) -> tuple[float, float]:
    """The two-sided quantile levels of a central interval, rounded so that 0.8 gives exactly 0.1 and 0.9."""
    return round((1 - confidence) / 2, 12), round((1 + confidence) / 2, 12)


def _huber(r: np.ndarray, delta: float = HUBER_DELTA) -> tuple[float, np.ndarray]:
    a = np.abs(r)
    value = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return float(value.sum()), np.clip(r, -delta, delta)


class _Problem:
    """The law on normalised inputs, with pinned coefficients removed from the free vector."""

    def __init__(self, law: Law, X: dict[str, np.ndarray], y: np.ndarray, pinned: dict[str, float],
                 scales: dict[str, float]):
        self.law, self.y, self.pinned, self.scales = law, np.asarray(y, float), pinned, scales
        self.Z = {k: np.asarray(X[k], float) / scales[k] for k in scales}
        self.free_coefs = [c for c in law.coefs if c not in pinned]
        self.exps = law.exponents
        self.log_z = {k: np.log(np.maximum(v, 1e-300)) for k, v in self.Z.items()}

    def columns(self, exps: dict[str, float]) -> dict[str, np.ndarray]:
        cols = {}
        for t in self.law.terms:
            if t.kind == "one":
                cols[t.coef] = t.sign * np.ones(len(self.y))
            elif t.kind == "power":
                cols[t.coef] = t.sign * self.Z[t.feature] ** -exps[t.exponent]
            else:
                cols[t.coef] = t.sign * self.Z[t.feature]
        return cols

    def value(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        k = len(self.free_coefs)
        coefs = dict(zip(self.free_coefs, theta[:k]))
        exps = dict(zip(self.exps, theta[k:]))
        cols = self.columns(exps)
        pred = sum(cols[c] * (coefs[c] if c in coefs else self.pinned[c] / self._unit(c, exps)) for c in cols)
        safe = np.maximum(pred, 1e-9)
        obj, dr = _huber(np.log(safe) - np.log(self.y))
        g_pred = dr / safe
        grad = [float(g_pred @ cols[c]) for c in self.free_coefs]
        for t in self.law.terms:
            if t.exponent:
                grad.append(float(g_pred @ (-self.log_z[t.feature] * cols[t.coef] * coefs.get(t.coef, 0.0))))
        return obj, np.asarray(grad)

    def _unit(self, coef: str, exps: dict[str, float]) -> float:
        """Original-unit value of a normalised coefficient of 1 (x0^alpha for powers, 1/x0 for linear)."""
        t = next(t for t in self.law.terms if t.coef == coef)
        if t.kind == "power":
            return self.scales[t.feature] ** exps[t.exponent]
        if t.kind == "linear":
            return 1.0 / self.scales[t.feature]
        return 1.0

    def to_params(self, theta: np.ndarray) -> dict[str, float]:
        k = len(self.free_coefs)
        exps = dict(zip(self.exps, (float(v) for v in theta[k:])))
        params = {c: float(v) * self._unit(c, exps) for c, v in zip(self.free_coefs, theta[:k])}
        params.update(self.pinned)
        params.update(exps)
        return params

    def starts(self, keep: int) -> list[np.ndarray]:
        """Grid over the exponents, NNLS for the coefficients; the `keep` best by the objective."""
        scored = []
        for combo in np.array(np.meshgrid(*[EXPONENT_GRID] * len(self.exps))).reshape(len(self.exps), -1).T:
            exps = dict(zip(self.exps, combo))
            cols = self.columns(exps)
            target = self.y - sum(cols[c] * self.pinned[c] / self._unit(c, exps) for c in self.pinned)
            M = np.stack([cols[c] for c in self.free_coefs], axis=1)
            # Columns carry their sign (-S2), so NNLS keeps every coefficient >= 0.
            coefs, _ = nnls(M, target)
            theta = np.r_[coefs, combo]
            scored.append((self.value(theta)[0], tuple(theta)))
        scored.sort(key=lambda s: s[0])
        return [np.asarray(t) for _, t in scored[:keep]]

    def refine(self, starts: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
        bounds = [(0.0, None)] * len(self.free_coefs) + [EXPONENT_BOUNDS] * len(self.exps)
        best = None
        for start in starts:
            res = minimize(self.value, start, jac=True, method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-10})
            if best is None or res.fun < best[0]:
                best = (float(res.fun), res.x)
        return best


def _scales(law: Law, X: dict[str, np.ndarray]) -> dict[str, float]:
    out = {}
    for t in law.terms:
        if t.feature:
            x = np.asarray(X[t.feature], float)
            out[t.feature] = float(np.exp(np.mean(np.log(x[x > 0])))) if t.kind == "power" else float(np.max(np.abs(x)) or 1.0)
    return out


def fit_law(law: Law, X: dict[str, Sequence[float]], y: Sequence[float], pinned: Optional[dict[str, float]] = None,
            starts: int = 6) -> Fit:
    """The best fit of `law` to (X, y): grid starts, then L-BFGS-B on Huber of log residuals."""
    X = {k: np.asarray(v, float) for k, v in X.items()}
    y = np.asarray(y, float)
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise GlassroomError(f"{law.name}: every loss must be finite and above zero (the fit is in log loss)")
    if np.any(y > LOSS_MAX):
        raise GlassroomError(f"{law.name}: a loss of {float(y.max()):g} is above {LOSS_MAX:g}; no fit can use it")
    for name, x in X.items():
        if not (np.all(np.isfinite(x)) and np.all(x >= 0)):
            raise GlassroomError(f"{law.name}: every {name} must be finite and at least zero")
    scales = _scales(law, X)
    problem = _Problem(law, X, y, dict(pinned or {}), scales)
    objective, theta = problem.refine(problem.starts(starts))
    return Fit(law, problem.to_params(theta), scales, objective, len(y), dict(pinned or {}))


def _refit(fit: Fit, X: dict[str, np.ndarray], y: np.ndarray) -> dict[str, float]:
    problem = _Problem(fit.law, X, y, fit.pinned, fit.scales)
    k = problem.free_coefs
    exps = {e: fit.params[e] for e in problem.exps}
    warm = np.r_[[fit.params[c] / problem._unit(c, exps) for c in k], [exps[e] for e in problem.exps]]
    _, theta = problem.refine([warm, *problem.starts(1)])
    return problem.to_params(theta)


def bootstrap(fit: Fit, X: dict[str, Sequence[float]], y: Sequence[float], groups: Optional[Sequence[int]] = None,
              replicates: int = 200, noise_floor: float = 0.003, confidence: float = 0.95, seed: int = 0) -> Fit:
    """Fill fit.boot and fit.intervals (module docstring); `groups` gives each point's rung."""
    X = {k: np.asarray(v, float) for k, v in X.items()}
    y = np.asarray(y, float)
    n = len(y)
    groups = np.arange(n) if groups is None else np.asarray(groups)
    rungs = np.unique(groups)
    rng = np.random.default_rng(seed)
    fitted = fit.predict(X)
    resid = np.log(y) - np.log(np.maximum(fitted, 1e-9))
    per_point = len(rungs) == n
    cases = per_point and n >= max(8, 2 * fit.n_free + 2)
    fit.bootstrap_method = "cases" if cases else ("residual" if per_point else "rung-block residual")
    if per_point and n > fit.n_free:
        resid = resid * math.sqrt(n / (n - fit.n_free))
    blocks = [resid[groups == g] for g in rungs]
    same_length = len({len(b) for b in blocks}) == 1
    fit.boot = []
    for _ in range(replicates):
        if cases:
            while True:
                idx = rng.integers(0, n, n)
                if len(np.unique(idx)) > fit.n_free:
                    break
            Xb, yb = {k: v[idx] for k, v in X.items()}, y[idx]
        else:
            noise = np.zeros(n)
            for g in rungs:
                mask = groups == g
                if per_point:
                    noise[mask] = rng.choice(resid)
                elif same_length:
                    noise[mask] = blocks[rng.integers(len(blocks))]
                else:
                    noise[mask] = rng.choice(resid, int(mask.sum()))
                noise[mask] += rng.normal(0.0, noise_floor)
            Xb, yb = X, fitted * np.exp(noise)
        fit.boot.append(_refit(fit, Xb, yb))
    lo_q, hi_q = quantile_levels(confidence)
    for name in fit.params:
        values = np.array([b[name] for b in fit.boot])
        fit.intervals[name] = (float(np.quantile(values, lo_q)), float(np.quantile(values, hi_q)))
    return fit


def predict_interval(fit: Fit, X: dict[str, Sequence[float]], confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) of the law at X: the fit's value and the bootstrap's quantiles."""
    X = {k: np.asarray(v, float) for k, v in X.items()}
    mean = fit.predict(X)
    if not fit.boot:
        return mean, mean.copy(), mean.copy()
    draws = np.array([fit.predict(X, b) for b in fit.boot])
    return (mean, *percentile_interval(mean, draws, confidence))


def percentile_interval(mean: np.ndarray, draws: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's percentile interval of `draws` (replicates x points) at `confidence`, widened
    where needed to hold the point estimate `mean`: with a skewed bootstrap or few replicates (one, say)
    the estimate can fall outside its replicates' quantiles, and an interval that excludes its own
    prediction is no interval (the same rule as foresight's predictions)."""
    lo_q, hi_q = quantile_levels(confidence)
    lo, hi = np.quantile(draws, lo_q, axis=0), np.quantile(draws, hi_q, axis=0)
    return np.minimum(lo, mean), np.maximum(hi, mean)


def identifiable_nd(N: Sequence[float], D: Sequence[float]) -> tuple[bool, str]:
    """L(N, D) needs rungs that vary N and D separately: at least 6 points and D/N spread over 1.5x."""
    ratio = np.asarray(D, float) / np.asarray(N, float)
    if len(ratio) < 6:
        return False, f"needs at least 6 rungs for 5 parameters, have {len(ratio)}"
    if ratio.max() / ratio.min() < 1.5:
        return False, "the rungs hold tokens per parameter fixed, so N and D move together: fit L(C) instead"
    return True, ""


def fit_endpoints(C: Sequence[float], loss: Sequence[float], pinned_E: Optional[float] = None,
                  replicates: int = 200, noise_floor: float = 0.003, confidence: float = 0.95,
                  seed: int = 0) -> Fit:
    """L(C) on one final value per rung, with intervals."""
    pinned = {} if pinned_E is None else {"E": float(pinned_E)}
    fit = fit_law(LAW_C, {"C": C}, loss, pinned)
    return bootstrap(fit, {"C": C}, loss, None, replicates, noise_floor, confidence, seed)


def leave_largest_out(C: Sequence[float], loss: Sequence[float], pinned_E: Optional[float] = None,
                      replicates: int = 200, noise_floor: float = 0.003, confidence: float = 0.95,
                      seed: int = 0) -> Optional[dict]:
    """Fit L(C) without the largest point and predict it: relative error and interval coverage."""
    C, loss = np.asarray(C, float), np.asarray(loss, float)
    order = np.argsort(C)
    C, loss = C[order], loss[order]
    need = 2 if pinned_E is not None else 3
    if len(C) - 1 < need:
        return None
    fit = fit_endpoints(C[:-1], loss[:-1], pinned_E, replicates, noise_floor, confidence, seed)
    mean, lo, hi = predict_interval(fit, {"C": C[-1:]}, confidence)
    predicted, actual = float(mean[0]), float(loss[-1])
    return {"predicted_loss": predicted, "actual_loss": actual, "relative_error": (predicted - actual) / actual,
            "interval": [float(lo[0]), float(hi[0])], "covered": bool(lo[0] <= actual <= hi[0]),
            "compute": float(C[-1]), "fit": fit.to_json()}
