"""The laws foresight fits to final losses, sparsity-aware ones included, and the choice among them.

Every law is E + sum_j c_j * Z_j^-e_j on one or two features, fitted by engine.fit_batch (least
squares of log loss); what differs is the features a law reads off the points:

  C      L = E + A * C^-alpha                          C: training compute (active FLOPs)
  ND     L = E + A / N^alpha + B / D^beta               N: active parameters (Hoffmann et al. 2022)
  NtD    L = E + A / Nt^alpha + B / D^beta              Nt: total parameters
  NeffD  L = E + A / Neff^alpha + B / D^beta,  Neff = N^(1 - w) * Nt^w = N * S^w,  0 <= w <= 1

S = Nt / N is the sparsity ratio (total over active parameters; 1 for a dense model). NeffD makes
sparsity a variable: at fixed active parameters, a sparser model behaves like one with S^w times
as many parameters, w = 0 being "only active parameters count" (ND) and w = 1 "every parameter
counts" (NtD). It is the joint MoE law of Ludziejewski et al. 2025 ("Joint MoE Scaling Laws:
Mixture of Experts Can Be Memory Efficient", arXiv 2502.05172: L = a E^delta N^(alpha + gamma ln E) +
b E^omega D^(beta + zeta ln E) + c) with its interaction terms gamma, zeta, omega set to zero and the
expert count E replaced by the sparsity ratio S, and the effective-parameter reading of routed
models of Clark et al. 2022 ("Unified Scaling Laws for Routed Language Models", arXiv 2202.01169);
Abnar et al. 2025 ("Parameters vs FLOPs: Scaling Laws for Optimal Sparsity for Mixture-of-Experts
Language Models", arXiv 2501.12370) measure the same direction: at fixed active compute, loss falls
as total parameters grow. w is fitted by profiling: every w of a grid is an ordinary ND fit on Neff,
the best one refined by a bounded scalar search (bootstrap replicates take the best of a grid around
the fitted w and its two ends).

Which law: each law needs points that identify it (`candidates`): C at least 3 compute values; ND
sizes that vary N and D separately (fit.identifiable_nd); NtD and NeffD, in addition, sparsity that
varies across sizes by 1.5x or more (else they are ND with another constant A) and, for NeffD, one
size more than its 6 parameters. Among the identifiable laws of MoE points, `choose` takes the one
with the smallest leave-one-size-out error: every size (all its seeds) is left out in turn, the law
fitted on the rest predicts it, and the error is the root mean square over sizes of log(predicted /
mean observed). The table of errors is the choice's evidence. Dense points (S = 1 everywhere) keep
foresight's rule: ND when identifiable, else C.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy.optimize import minimize_scalar

from glassroom.errors import GlassroomError
from glassroom.ladder import LAW_KEYS
from glassroom.ladder.engine import fit_batch, law_values
from glassroom.ladder.fit import LAW_C, LAW_ND, Law, Term, identifiable_nd

KEYS = LAW_KEYS
LAWS = {
    "C": LAW_C,
    "ND": LAW_ND,
    "NtD": Law("L(Nt,D)", "E + A / Nt^alpha + B / D^beta  (Nt: total parameters)",
               (Term("E"), Term("A", "power", "Nt", "alpha"), Term("B", "power", "D", "beta"))),
    "NeffD": Law("L(Neff,D)", "E + A / Neff^alpha + B / D^beta, Neff = N^(1-w) * Nt^w  (Nt: total parameters)",
                 (Term("E"), Term("A", "power", "Neff", "alpha"), Term("B", "power", "D", "beta"))),
}
NAMES = {key: law.name for key, law in LAWS.items()}
SPARSITY_SPREAD = 1.5  # sparsity must vary this much across sizes for NtD and NeffD
W_GRID = np.linspace(0.0, 1.0, 11)  # NeffD's profile, then refined
W_COARSE = np.linspace(0.0, 1.0, 6)  # simulations
W_NEAR = np.array([-0.3, -0.15, -0.075, 0.0, 0.075, 0.15, 0.3])  # bootstrap replicates: around the fit's w


def _geomean(x: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(x))))


class Features:
    """A law's features of the points, normalised by their geometric means over the fitted points.

    theta rows are [E, c_1.., e_1..] in normalised units (engine.fit_batch), with a last column w for
    NeffD; values() and to_params() turn them into losses and original units."""

    def __init__(self, key: str, params, tokens, flops, total=None, w: float = 0.0):
        if key not in LAWS:
            raise GlassroomError(f"foresight: law must be one of {', '.join(KEYS)}, got {key!r}")
        self.key, self.law, self.w = key, LAWS[key], float(w)
        params = np.asarray(params, float)
        total = params if total is None else np.asarray(total, float)
        self.mean_logs = (float(np.mean(np.log(params))), float(np.mean(np.log(total))),
                          float(np.mean(np.log(np.asarray(tokens, float)))), float(np.mean(np.log(np.asarray(flops, float)))))

    @property
    def n_features(self) -> int:
        return 1 if self.key == "C" else 2

    def _log_size(self, params, total, w) -> np.ndarray:
        """log of the size feature over its scale; w (R,) gives (R, h) for NeffD, else (h,)."""
        logn, logt = np.log(np.asarray(params, float)), np.log(np.asarray(total, float))
        mn, mt = self.mean_logs[0], self.mean_logs[1]
        if self.key == "ND":
            return logn - mn
        if self.key == "NtD":
            return logt - mt
        w = np.asarray(w, float)[..., None]
        return (1 - w) * (logn - mn) + w * (logt - mt)

    def log_Z(self, params, tokens, flops, total=None, w=None) -> np.ndarray:
        """(m, h) log-features at the fitted points' scales; NeffD at w (default: this feature set's)."""
        total = params if total is None else total
        if self.key == "C":
            return (np.log(np.asarray(flops, float)) - self.mean_logs[3])[None]
        size = self._log_size(params, total, self.w if w is None else w)
        return np.stack([size, np.log(np.asarray(tokens, float)) - self.mean_logs[2]])

    def Z(self, params, tokens, flops, total=None, w=None) -> np.ndarray:
        return np.exp(self.log_Z(params, tokens, flops, total, w))

    def values(self, theta: np.ndarray, params, tokens, flops, total=None) -> np.ndarray:
        """theta (R, p) -> law values (R, h) at the given points."""
        theta = np.atleast_2d(np.asarray(theta, float))
        total = params if total is None else total
        if self.key != "NeffD":
            return law_values(theta, self.log_Z(params, tokens, flops, total))[0]
        size = self._log_size(params, total, theta[:, 5])  # (R, h): each row its own w
        logD = np.log(np.asarray(tokens, float)) - self.mean_logs[2]
        return (theta[:, :1] + theta[:, 1:2] * np.exp(-theta[:, 3:4] * size)
                + theta[:, 2:3] * np.exp(-theta[:, 4:5] * logD[None]))

    def to_params(self, th: np.ndarray) -> dict[str, float]:
        """One theta row in original units: E, A, alpha (and B, beta; w for NeffD)."""
        if self.key == "C":
            return {"E": float(th[0]), "A": float(th[1] * math.exp(self.mean_logs[3] * th[2])), "alpha": float(th[2])}
        w = float(th[5]) if self.key == "NeffD" else self.w
        log_scale = {"ND": self.mean_logs[0], "NtD": self.mean_logs[1],
                     "NeffD": (1 - w) * self.mean_logs[0] + w * self.mean_logs[1]}[self.key]
        out = {"E": float(th[0]), "A": float(th[1] * math.exp(log_scale * th[3])), "alpha": float(th[3]),
               "B": float(th[2] * math.exp(self.mean_logs[2] * th[4])), "beta": float(th[4])}
        if self.key == "NeffD":
            out["w"] = w
        return out

    def scale_dict(self, theta: Optional[np.ndarray] = None) -> dict[str, float]:
        """The features' scales in original units (fit.Fit.scales), at theta's w for NeffD."""
        if self.key == "C":
            return {"C": math.exp(self.mean_logs[3])}
        w = float(theta[5]) if self.key == "NeffD" and theta is not None else self.w
        size = {"ND": ("N", self.mean_logs[0]), "NtD": ("Nt", self.mean_logs[1]),
                "NeffD": ("Neff", (1 - w) * self.mean_logs[0] + w * self.mean_logs[1])}[self.key]
        return {size[0]: math.exp(size[1]), "D": math.exp(self.mean_logs[2])}


def fit_features(feats: Features, N, D, C, T, Y: np.ndarray, pin: Optional[float], starts: int = 2,
                 grid=None, warm: Optional[np.ndarray] = None, fine: bool = False,
                 refine: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """engine.fit_batch for any law. NeffD profiles w over a grid (W_GRID when `fine`; around warm's w
    when warm is given; else W_COARSE), every row keeping its best w (theta gets w as a last column),
    and with `refine` (one row) a bounded scalar search around the best. (theta (R, p), cost (R,))."""
    Y = np.atleast_2d(np.asarray(Y, float))
    if feats.key != "NeffD":
        return fit_batch(feats.Z(N, D, C, T), Y, pin, starts=starts, grid=grid, warm=warm)
    best_theta, best_cost = None, np.full(len(Y), np.inf)
    ws = W_GRID if fine else W_COARSE
    if warm is not None and not fine:  # replicates of a fit: finer steps near its w, the ends kept
        ws = np.unique(np.clip(float(warm[5]) + W_NEAR, 0.0, 1.0).tolist() + [0.0, 1.0])
    for w in ws:
        theta, cost = fit_batch(feats.Z(N, D, C, T, w), Y, pin, starts=starts, grid=grid,
                                warm=None if warm is None else warm[:5])
        theta = np.concatenate([theta, np.full((len(Y), 1), w)], 1)
        better = cost < best_cost
        best_theta = theta if best_theta is None else np.where(better[:, None], theta, best_theta)
        best_cost = np.where(better, cost, best_cost)
    if refine and len(Y) == 1:
        def cost_at(w):
            return float(fit_batch(feats.Z(N, D, C, T, w), Y, pin, starts=starts, grid=grid)[1][0])

        w0 = float(best_theta[0, 5])
        step = W_GRID[1] - W_GRID[0]
        found = minimize_scalar(cost_at, bounds=(max(0.0, w0 - step), min(1.0, w0 + step)), method="bounded",
                                options={"xatol": 1e-3})
        if found.fun < best_cost[0]:
            theta, cost = fit_batch(feats.Z(N, D, C, T, found.x), Y, pin, starts=starts, grid=grid)
            best_theta, best_cost = np.concatenate([theta, [[found.x]]], 1), cost
    return best_theta, best_cost


def size_index(N: np.ndarray, D: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Index of each point's size (same active and total parameters and tokens)."""
    keys: dict = {}
    return np.array([keys.setdefault((a, b, c), len(keys)) for a, b, c in zip(N, D, T)])


def candidates(N, D, C, T, pinned: bool = False) -> dict[str, str]:
    """{key: ""} for every law these points identify, {key: why not} for the others."""
    N, D, C, T = (np.asarray(x, float) for x in (N, D, C, T))
    first = np.unique(size_index(N, D, T), return_index=True)[1]
    Ns, Ds, Ts = N[first], D[first], T[first]
    out = {}
    need = 2 if pinned else 3
    distinct = len(np.unique(C))
    out["C"] = "" if distinct >= need else f"needs at least {need} distinct compute values, have {distinct}"
    ok, why = identifiable_nd(Ns, Ds)
    out["ND"] = "" if ok else why
    sparsity = Ts / Ns
    spread = float(sparsity.max() / sparsity.min())
    if spread < SPARSITY_SPREAD:
        varies = (f"the sizes' sparsity (total / active parameters) varies {spread:.2f}x, under "
                  f"{SPARSITY_SPREAD:g}x: total and active parameters move together")
        out["NtD"] = out["NeffD"] = varies
    else:
        okt, whyt = identifiable_nd(Ts, Ds)
        out["NtD"] = "" if okt else whyt
        out["NeffD"] = out["ND"] or ("" if len(first) >= 7 else f"needs at least 7 sizes for 6 parameters, "
                                                                    f"have {len(first)}")
    return out


def cross_validate(keys, N, D, C, T, y, pin: Optional[float] = None) -> dict[str, dict]:
    """Leave-one-size-out error of each law in `keys`: {key: {"rms": ..., "errors": {size: log error}}}.
    A law that the remaining sizes of some fold cannot identify gets rms None and the reason."""
    N, D, C, T, y = (np.asarray(x, float) for x in (N, D, C, T, y))
    size = size_index(N, D, T)
    out = {}
    for key in keys:
        errors, why = [], ""
        for s in np.unique(size):
            keep = size != s
            reason = candidates(N[keep], D[keep], C[keep], T[keep], pin is not None).get(key, "")
            if reason:
                why = f"without size {int(s) + 1}: {reason}"
                break
            feats = Features(key, N[keep], D[keep], C[keep], T[keep])
            theta, _ = fit_features(feats, N[keep], D[keep], C[keep], T[keep], y[keep][None], pin, starts=4,
                                    fine=True)
            held = size == s
            predicted = feats.values(theta, N[held][:1], D[held][:1], C[held][:1], T[held][:1])[0, 0]
            errors.append(math.log(max(predicted, 1e-12)) - float(np.mean(np.log(y[held]))))
        out[key] = ({"rms": None, "why": why} if why else
                    {"rms": float(np.sqrt(np.mean(np.square(errors)))), "errors": [float(e) for e in errors]})
    return out


def choose(law: str, N, D, C, T, y, pinned: Optional[float] = None) -> tuple[str, str, Optional[dict]]:
    """(key, why, cross-validation table or None) for the requested law ('auto' or a key)."""
    if law not in ("auto", *KEYS):
        raise GlassroomError(f"foresight: law must be auto, {', '.join(KEYS)}, got {law!r}")
    able = candidates(N, D, C, T, pinned is not None)
    if law != "auto":
        if able[law]:
            raise GlassroomError(f"foresight: {NAMES[law]} cannot be fitted: {able[law]}")
        return law, "asked for", None
    moe = bool(np.any(np.asarray(T, float) != np.asarray(N, float)))
    usable = [k for k in KEYS if not able[k]]
    if not usable:
        raise GlassroomError(f"foresight: L(C) {able['C']}: add rungs of other sizes")
    if not moe or len(usable) == 1:
        key = "ND" if "ND" in usable else usable[0]
        why = ("the sizes vary params and tokens separately" if key == "ND" else able["ND"])
        return key, why, None
    table = cross_validate(usable, N, D, C, T, y, pinned)
    scored = [k for k in usable if table[k]["rms"] is not None]
    if not scored:
        return usable[0], "no law survived leave-one-size-out; the simplest identifiable one", table
    key = min(scored, key=lambda k: table[k]["rms"])  # ties: the earlier (simpler) law of KEYS
    shown = ", ".join(f"{NAMES[k]} {table[k]['rms']:.2%}" for k in scored)
    return key, f"smallest leave-one-size-out error among the identifiable laws ({shown})", table


def check_total(params: float, total: Optional[float], key: str) -> float:
    """A prediction's total parameters: required by the laws that read them, else the active count."""
    if total is None:
        if key in ("NtD", "NeffD"):
            raise GlassroomError(f"foresight: {NAMES[key]} reads total parameters; give total_params for the prediction")
        return params
    if isinstance(total, bool) or not isinstance(total, (int, float, np.integer, np.floating)) \
            or not math.isfinite(total) or total < params:
        raise GlassroomError(f"foresight: total_params must be a finite number at least params ({params:g}), "
                             f"got {total!r}")
    return float(total)

