"""The batched least-squares engine behind foresight: E + sum_j c_j * Z_j^-e_j fitted to many data sets at once.

Variable projection: for every exponent (pair) on a grid, the coefficients (all >= 0) are the exact
non-negative weighted least squares solution of the log-loss problem linearised around the data
(every subset of the <= 3 columns solved in closed form, the best feasible one kept); the best grid
points then start a projected Levenberg-Marquardt on the log residuals. Rows of Y are independent
data sets on the same features (bootstrap replicates, simulated ladders), fitted in one batch.
glassroom.ladder.foresight (laws on points, intervals) and moe_laws (sparsity-aware laws) use it.
"""

from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

EXP_LO, EXP_HI = 1e-3, 3.0
GRID_1 = np.linspace(0.02, 1.6, 80)
GRID_2 = np.linspace(0.02, 1.6, 33)
COARSE = {1: np.linspace(0.02, 1.6, 20), 2: np.linspace(0.02, 1.6, 9)}  # batches: same optimum, 10x faster
LM_ITERS = 60

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


def law_values(theta: np.ndarray, logZ: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        pred, cols, dcols = law_values(th, logZ)
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
