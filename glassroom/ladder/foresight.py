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

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.ladder.fit import LAW_C, LAW_ND, LOSS_MAX, Fit, identifiable_nd, quantile_levels
from glassroom.ladder.noise import NoiseEstimate, seed_noise

EXP_LO, EXP_HI = 1e-3, 3.0
GRID_1 = np.linspace(0.02, 1.6, 80)
GRID_2 = np.linspace(0.02, 1.6, 33)
COARSE = {1: np.linspace(0.02, 1.6, 20), 2: np.linspace(0.02, 1.6, 9)}  # batches: same optimum, 10x faster
LM_ITERS = 60
LEVELS = 2  # bootstrap levels: 1 around the fitted law only; 2 also around its refits (module docstring)


@dataclass(frozen=True)
class Point:
    name: str
    params: float
    tokens: float
    flops: float
    loss: float
    seed: Optional[int] = None


# ---------------------------------------------------------------- the batched engine

def _solve_sym(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form solution of symmetric r x r systems (r <= 3), batched; (solution, well-posed mask)."""
    r = A.shape[-1]
    if r == 1:
        det = A[..., 0, 0]
        return b / np.where(det > 0, det, 1.0)[..., None], det > 0
    if r == 2:
        a, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 1]
        det = a * d - c * c
        ok = det > 1e-12 * a * d
        det = np.where(ok, det, 1.0)
        return np.stack([(d * b[..., 0] - c * b[..., 1]) / det, (a * b[..., 1] - c * b[..., 0]) / det], -1), ok
    a, bb, c = A[..., 0, 0], A[..., 0, 1], A[..., 0, 2]
    d, e, f = A[..., 1, 1], A[..., 1, 2], A[..., 2, 2]
    c00, c01, c02 = d * f - e * e, c * e - bb * f, bb * e - c * d
    c11, c12, c22 = a * f - c * c, bb * c - a * e, a * d - bb * bb
    det = a * c00 + bb * c01 + c * c02
    ok = det > 1e-12 * a * d * f
    det = np.where(ok, det, 1.0)
    x, y, z = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([(c00 * x + c01 * y + c02 * z) / det, (c01 * x + c11 * y + c12 * z) / det,
                     (c02 * x + c12 * y + c22 * z) / det], -1), ok


def _nnls_batch(A: np.ndarray, b: np.ndarray, yy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact NNLS from normal equations, batched: A (..., k, k), b (..., k), yy (...) -> coef (..., k), rss.

    The optimum of a non-negative least squares problem is the unconstrained optimum on its support;
    with k <= 3 columns every support is tried and the best feasible one kept (rss evaluated exactly)."""
    k = A.shape[-1]
    best = np.full(A.shape[:-2], np.inf)
    coef = np.zeros(A.shape[:-1])
    for r in range(1, k + 1):
        for S in itertools.combinations(range(k), r):
            S = list(S)
            As = A[..., S, :][..., :, S]
            bs = b[..., S]
            c, ok = _solve_sym(As, bs)
            rss = yy - 2 * np.einsum("...i,...i->...", c, bs) + np.einsum("...i,...ij,...j->...", c, As, c)
            ok &= np.all(c >= 0, axis=-1) & (rss < best)
            best = np.where(ok, rss, best)
            for j, col in enumerate(S):
                coef[..., col] = np.where(ok, c[..., j], coef[..., col])
            for col in set(range(k)) - set(S):
                coef[..., col] = np.where(ok, 0.0, coef[..., col])
    return coef, best


def fit_batch(Z: np.ndarray, Y: np.ndarray, pin_E: Optional[float] = None, starts: int = 2,
              grid: Optional[np.ndarray] = None, warm: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of log loss for E + sum_j c_j * Z_j^-e_j, every row of Y a separate data set.

    Z (m, n): normalised features (m = 1 or 2); Y (R, n) losses. Returns theta (R, 1 + 2m) as
    [E, c_1..c_m, e_1..e_m] (E = pin_E when pinned) and the cost (R,) = 0.5 * sum of squared log residuals.
    `starts` best grid points (per row) start the refinement, and `warm` (p,) as one more start when given.
    """
    Z = np.atleast_2d(np.asarray(Z, float))
    Y = np.atleast_2d(np.asarray(Y, float))
    m, n = Z.shape
    R = Y.shape[0]
    g1 = grid if grid is not None else (GRID_1 if m == 1 else GRID_2)
    combos = np.array(list(itertools.product(g1, repeat=m)))  # (G, m)
    logZ = np.log(Z)
    F = np.exp(-combos[:, :, None] * logZ[None, :, :])  # (G, m, n)
    E0 = np.zeros(R) if pin_E is None else np.broadcast_to(np.asarray(pin_E, float), (R,))
    B = F.transpose(0, 2, 1) if pin_E is not None else np.concatenate([np.ones((len(combos), n, 1)), F.transpose(0, 2, 1)], 2)
    W2 = 1.0 / Y ** 2
    T = Y - E0[:, None]
    A = np.einsum("rn,gni,gnj->rgij", W2, B, B, optimize=True)
    b = np.einsum("rn,gni,rn->rgi", W2, B, T, optimize=True)
    yy = np.einsum("rn,rn->r", W2, T * T)[:, None]
    coef, rss = _nnls_batch(A, b, np.broadcast_to(yy, A.shape[:2]))
    k = min(starts, len(combos))
    top = np.argsort(rss, axis=1)[:, :k]  # (R, k)
    rows = np.repeat(np.arange(R), k)
    flat = top.reshape(-1)
    c0 = coef[rows, flat]
    e0 = combos[flat]
    if pin_E is None:
        theta = np.concatenate([c0, e0], 1)
    else:
        theta = np.concatenate([E0[rows, None], c0, e0], 1)
    if warm is not None:
        theta = np.concatenate([theta.reshape(R, k, -1), np.broadcast_to(warm, (R, 1, theta.shape[1]))], 1).reshape(R * (k + 1), -1)
        k += 1
        if pin_E is not None:
            theta[:, 0] = np.repeat(E0, k)
    theta, cost = _lm(theta, logZ, np.repeat(Y, k, axis=0), pin_E is not None)
    cost = cost.reshape(R, k)
    pick = np.argmin(cost, axis=1)
    theta = theta.reshape(R, k, -1)[np.arange(R), pick]
    return theta, cost[np.arange(R), pick]


def _model(theta: np.ndarray, logZ: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prediction, columns Z^-e, d columns / d exponent) of theta's laws at logZ."""
    m = logZ.shape[0]
    powers = np.exp(-theta[:, 1 + m:, None] * logZ[None])  # (R, m, n)
    cols, dcols = powers, -logZ[None] * powers
    pred = theta[:, :1] + np.einsum("rm,rmn->rn", theta[:, 1:1 + m], cols)
    return pred, cols, dcols


def _lm(theta: np.ndarray, logZ: np.ndarray, Y: np.ndarray, pinned: bool) -> tuple[np.ndarray, np.ndarray]:
    """Projected Levenberg-Marquardt on log residuals, batched over rows; bounds: coefs >= 0, exponents in range.

    A parameter on a bound that the gradient pushes outward is held for that step (active set); a row
    stops once a nearly undamped step no longer lowers its cost, and later iterations skip it."""
    m = logZ.shape[0]
    logY = np.log(Y)
    lo = np.r_[np.zeros(1 + m), np.full(m, EXP_LO)]
    hi = np.r_[np.full(1 + m, np.inf), np.full(m, EXP_HI)]
    free = np.ones(1 + 2 * m, bool)
    if pinned:
        free[0] = False
    lo, hi = lo[free], hi[free]
    theta = theta.copy()

    def residual(th, rows):
        pred, cols, dcols = _model(th, logZ)
        return (np.log(np.maximum(pred, 1e-12)) - logY[rows]), pred, (cols, dcols)

    act = np.arange(len(theta))
    r, pred, powers = residual(theta, act)
    cost = 0.5 * np.sum(r * r, 1)
    lam = np.full(len(theta), 1e-3)
    for _ in range(LM_ITERS):
        th_a, c_a, l_a = theta[act], cost[act], lam[act]
        J = np.concatenate([np.ones_like(pred)[:, None], powers[0],
                            th_a[:, 1:1 + m, None] * powers[1]], 1) / pred[:, None, :]  # (R, p, n)
        J = J[:, free]
        g = np.einsum("rpn,rn->rp", J, r)
        x = th_a[:, free]
        blocked = ((x <= lo + 1e-12) & (g > 0)) | ((x >= hi - 1e-12) & (g < 0))
        J = J * ~blocked[:, :, None]
        g = np.where(blocked, 0.0, g)
        JJ = np.einsum("rpn,rqn->rpq", J, J)
        d = np.einsum("rpp->rp", JJ)
        H = JJ + ((l_a[:, None] * (d + 1e-12 * (1 + d.max(1, keepdims=True)))) + blocked)[:, :, None] * np.eye(J.shape[1])
        try:
            step = np.linalg.solve(H, -g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = -g / np.maximum(np.einsum("rpp->rp", H), 1e-300)
        trial = th_a.copy()
        trial[:, free] = np.clip(x + step, lo, hi)
        r2, pred2, powers2 = residual(trial, act)
        cost2 = 0.5 * np.sum(r2 * r2, 1)
        ok = np.isfinite(cost2) & (cost2 <= c_a)
        done = (ok & (cost2 >= c_a * (1 - 1e-12) - 1e-300) & (l_a <= 1.0)) | (l_a >= 1e10)
        theta[act] = np.where(ok[:, None], trial, th_a)
        cost[act] = np.where(ok, cost2, c_a)
        lam[act] = np.clip(np.where(ok, l_a * 0.3, l_a * 10.0), 1e-12, 1e12)
        keep = ~done
        r = np.where(ok[:, None], r2, r)[keep]
        pred = np.where(ok[:, None], pred2, pred)[keep]
        powers = tuple(np.where(ok[:, None, None], b, a)[keep] for a, b in zip(powers, powers2))
        act = act[keep]
        if not len(act):
            break
    return theta, cost


# ---------------------------------------------------------------- laws on points

def _geomean(x: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(x))))


class _Features:
    """A law's features, normalised by their geometric means: 'C' (flops) or 'ND' (params, tokens)."""

    def __init__(self, key: str, params: np.ndarray, tokens: np.ndarray, flops: np.ndarray):
        self.key = key
        self.law = LAW_C if key == "C" else LAW_ND
        raw = self.raw(params, tokens, flops)
        self.scales = [_geomean(x) for x in raw]

    def raw(self, params, tokens, flops) -> list[np.ndarray]:
        return [np.asarray(flops, float)] if self.key == "C" else [np.asarray(params, float), np.asarray(tokens, float)]

    def Z(self, params, tokens, flops) -> np.ndarray:
        return np.stack([x / s for x, s in zip(self.raw(params, tokens, flops), self.scales)])

    def values(self, theta: np.ndarray, params, tokens, flops) -> np.ndarray:
        """theta (R, p) -> law values (R, h) at the given points."""
        pred = _model(np.atleast_2d(theta), np.log(self.Z(params, tokens, flops)))[0]
        return pred

    def to_params(self, th: np.ndarray) -> dict[str, float]:
        if self.key == "C":
            return {"E": float(th[0]), "A": float(th[1] * self.scales[0] ** th[2]), "alpha": float(th[2])}
        return {"E": float(th[0]), "A": float(th[1] * self.scales[0] ** th[3]), "alpha": float(th[3]),
                "B": float(th[2] * self.scales[1] ** th[4]), "beta": float(th[4])}

    def scale_dict(self) -> dict[str, float]:
        return {"C": self.scales[0]} if self.key == "C" else {"N": self.scales[0], "D": self.scales[1]}


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
        rows.append((name, *vals, seed))
    seen: dict = {}
    for name, N, D, C, y, seed in rows:
        key = (N, D, seed)
        if key in seen:
            what = f"seed {seed}" if seed is not None else "no seed"
            raise GlassroomError(f"foresight: {seen[key]} and {name} are the same size (params {N:g}, tokens {D:g}) "
                                 f"with {what}: a duplicate row, or give each run of one size its own seed")
        seen[key] = name
    N, D, C, y = (np.array([r[k] for r in rows]) for k in (1, 2, 3, 4))
    return N, D, C, y


def _sizes(N: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Index of each point's size (same params and tokens)."""
    keys = {}
    return np.array([keys.setdefault((a, b), len(keys)) for a, b in zip(N, D)])


def choose_law(law: str, N: np.ndarray, D: np.ndarray, C: np.ndarray, pinned: bool = False) -> tuple[str, str]:
    """('C' | 'ND', why) for the requested law on these points; GlassroomError when it cannot be fitted."""
    if law not in ("auto", "C", "ND"):
        raise GlassroomError(f"foresight: law must be auto, C or ND, got {law!r}")
    size = _sizes(N, D)
    first = np.unique(size, return_index=True)[1]
    Ns, Ds = N[first], D[first]
    ok, why = identifiable_nd(Ns, Ds)
    if law == "ND" and not ok:
        raise GlassroomError(f"foresight: L(N,D) cannot be fitted: {why}")
    if law == "ND" or (law == "auto" and ok):
        return "ND", "the sizes vary params and tokens separately" if law == "auto" else "asked for"
    need = 2 if pinned else 3
    distinct = len(np.unique(C))
    if distinct < need:
        raise GlassroomError(f"foresight: L(C) needs at least {need} distinct compute values, have {distinct} "
                             f"({len(Ns)} size(s)): add rungs of other sizes")
    return "C", why if law == "auto" else "asked for"


# ---------------------------------------------------------------- fits with intervals

@dataclass
class ForesightFit:
    fit: Fit
    noise: NoiseEstimate
    law_name: str  # "L(C)" | "L(N,D)"
    confidence: float = 0.95
    why: str = ""
    features: Optional[_Features] = None
    theta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    boot_theta: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    run_noise: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flops_per_6nd: float = 1.0
    largest_flops: float = 0.0
    sigma_used: dict = field(default_factory=dict)
    data: tuple = ()  # (N, D, C, y) of the fitted points
    pinned_E: Optional[float] = None

    def predict(self, params: float, tokens: float, flops: Optional[float] = None, kind: str = "run") -> dict:
        """The law's loss at (params, tokens[, flops]) with its interval; kind 'run' (one run, seed noise
        included) or 'law' (the law's value). flops None: 6 * N * D times the fitted points' median
        flops / (6 N D)."""
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
        mean = float(f.values(self.theta[None], [N], [D], [C])[0, 0])
        lower = upper = mean
        if len(self.boot_theta):
            logs = np.log(np.maximum(f.values(self.boot_theta, [N], [D], [C])[:, 0], 1e-12))
            if kind == "run":
                logs = logs + self.run_noise
            lo_q, hi_q = np.quantile(logs, quantile_levels(self.confidence))
            lower, upper = min(mean, math.exp(lo_q)), max(mean, math.exp(hi_q))
        return {"predicted_loss": mean, "lower": lower, "upper": upper,
                "interval": {"confidence": self.confidence, "kind": kind,
                             "method": f"{self.fit.bootstrap_method} bootstrap, percentile interval"
                                       + (" incl. one run's seed noise" if kind == "run" else " of the law's value"),
                             "replicates": int(len(self.boot_theta)), "sigma": self.sigma_used},
                "params": N, "tokens": D, "flops": C,
                "extrapolation": C / self.largest_flops if self.largest_flops else None,
                "law": self.fit.to_json(), "why_law": self.why, "noise": self.noise.to_json()}

    def to_json(self) -> dict:
        return {"law": self.fit.to_json(), "law_name": self.law_name, "why_law": self.why,
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
    N, D, C, y = _arrays(points)
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
    key, why = choose_law(law, N, D, C, pin is not None)
    size = _sizes(N, D)
    noise = seed_noise([y[size == s] for s in np.unique(size)], stated_noise)
    feats = _Features(key, N, D, C)
    Z = feats.Z(N, D, C)
    theta, cost = fit_batch(Z, y[None], pin, starts=4)
    theta = theta[0]
    params = feats.to_params(theta)
    pinned = {} if pin is None else {"E": pin}
    fit = Fit(feats.law, params, feats.scale_dict(), float(cost[0]), len(y), pinned)
    fitted = feats.values(theta[None], N, D, C)[0]
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
        boot, _ = fit_batch(Z, Ystar, pin, starts=2, grid=COARSE[Z.shape[0]], warm=theta)
        if LEVELS >= 2:
            sig2, _ = _sigma_draws(noise, lof_ss, lof_dof, rng, bootstrap)
            gen = feats.values(boot, N, D, C)
            Y2 = gen * np.exp(sig2[:, None] * rng.standard_normal((bootstrap, len(y))))
            boot2, _ = fit_batch(Z, Y2, pin, starts=2, grid=COARSE[Z.shape[0]], warm=theta)
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
                        float(C.max()), sigma_used, (N, D, C, y), pin)


# ---------------------------------------------------------------- fast fits for simulation

def point_fits(params, tokens, flops, losses, law: str = "auto", irreducible: Optional[float] = None
               ) -> Callable[..., np.ndarray]:
    """Fit every row of `losses` (R, n) on the same points at once; returns f(params, tokens, flops) -> (R,)."""
    N, D = np.asarray(params, float), np.asarray(tokens, float)
    C = np.asarray(flops, float) if flops is not None else 6.0 * N * D
    Y = np.atleast_2d(np.asarray(losses, float))
    if Y.shape[1] != len(N) or not (np.all(np.isfinite(Y)) and np.all(Y > 0)):
        raise GlassroomError("foresight: losses must be finite, above zero, one column per point")
    key, _ = choose_law(law, N, D, C, irreducible is not None)
    feats = _Features(key, N, D, C)
    Z = feats.Z(N, D, C)
    theta, _ = fit_batch(Z, Y, irreducible, starts=2, grid=COARSE[Z.shape[0]])
    ratio = float(np.median(C / (6.0 * N * D)))

    def predict(p: float, t: float, c: Optional[float] = None) -> np.ndarray:
        c = 6.0 * p * t * ratio if c is None else c
        return feats.values(theta, [p], [t], [c])[:, 0]

    return predict


def point_fit(params, tokens, flops, loss, law: str = "auto") -> Callable[..., float]:
    """One fit, no bootstrap (what ladder design simulates thousands of times): f(params, tokens, flops) -> loss."""
    f = point_fits(params, tokens, flops, np.asarray(loss, float)[None], law)
    return lambda p, t, c=None: float(f(p, t, c)[0])
