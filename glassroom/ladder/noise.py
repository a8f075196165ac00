"""Seed-to-seed noise of a ladder's final losses: measured from repeated seeds, else the stated value.

A rung run with K seeds gives K final losses of one size; their spread in log loss is the run-to-run
noise every prediction interval has to carry. `seed_noise` pools the within-size variance over every
size with at least two values (each size contributes K - 1 degrees of freedom, its own mean removed),
so a slope in the loss across sizes never inflates the estimate.

Few degrees of freedom: with dof = 2 (say 3 seeds of one size) the pooled SD is below the true SD
about 40% of the time and below half of it about 14% of the time (s^2 * dof / sigma^2 is chi-square
with dof degrees of freedom). The point estimate `sigma` stays the plain pooled SD (unbiased variance);
the uncertainty of it is carried, not hidden, by `draw`: consumers that simulate (foresight intervals,
ladder design) draw one sigma per replicate from its posterior under a flat prior on log sigma,
sigma^2 = dof * s^2 / chi2(dof) (the Student-t construction, e.g. Gelman et al., Bayesian Data
Analysis, 3rd ed., sec. 3.2), which widens intervals exactly as much as the small sample warrants.
`upper(q)` gives the same posterior's q-quantile for one-number uses. A stated value (spec
fit.noise_floor or --noise) has no sampling spread: it is used as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from glassroom.errors import GlassroomError


@dataclass(frozen=True)
class NoiseEstimate:
    sigma: float  # SD of one run's final loss around its size's mean, in log loss (~ a fraction)
    source: str  # "measured" (from repeated seeds) or "stated" (spec fit.noise_floor / --noise)
    dof: int  # degrees of freedom of the measured estimate (sum over sizes of seeds - 1); 0 if stated
    sizes: int  # number of sizes with >= 2 seeds
    stated: float  # the stated value it replaces or falls back to

    def draw(self, rng: np.random.Generator, n: Optional[int] = None):
        """sigma drawn from its posterior (module docstring); the stated value itself when not measured."""
        if self.source != "measured" or self.dof <= 0:
            return self.sigma if n is None else np.full(n, self.sigma)
        chi = rng.chisquare(self.dof, size=n)
        out = self.sigma * np.sqrt(self.dof / np.maximum(chi, 1e-12))
        return float(out) if n is None else out

    def upper(self, q: float = 0.9) -> float:
        """The q-quantile of sigma's posterior (the stated value when not measured)."""
        if self.source != "measured" or self.dof <= 0:
            return self.sigma
        from scipy.stats import chi2
        return float(self.sigma * math.sqrt(self.dof / chi2.ppf(1.0 - q, self.dof)))

    def to_json(self) -> dict:
        return {"sigma": self.sigma, "source": self.source, "dof": self.dof, "sizes": self.sizes,
                "stated": self.stated,
                "note": (f"pooled within-size SD of log loss over {self.sizes} size(s) with repeated seeds, "
                         f"{self.dof} degrees of freedom; intervals draw sigma from its posterior"
                         if self.source == "measured" else
                         "stated seed-to-seed noise (no size has two seeds to measure it from)")}


def seed_noise(values_by_size: Sequence[Sequence[float]], stated: float) -> NoiseEstimate:
    """Pooled within-size SD of log(loss) over sizes with >= 2 values; the stated value when none has."""
    if isinstance(stated, bool) or not isinstance(stated, (int, float, np.integer, np.floating)):
        raise GlassroomError(f"stated seed noise must be a number (0.003 = 0.3%), got {stated!r}")
    stated = float(stated)
    if not (math.isfinite(stated) and 0.0 <= stated < 1.0):
        raise GlassroomError(f"stated seed noise must be a fraction from 0 to below 1 (0.003 = 0.3%), got {stated:g}")
    ss, dof, sizes = 0.0, 0, 0
    for values in values_by_size:
        v = np.asarray(list(values), float)
        if not (np.all(np.isfinite(v)) and np.all(v > 0)):
            raise GlassroomError("seed noise: every loss must be finite and above zero")
        if len(v) < 2:
            continue
        logs = np.log(v)
        ss += float(np.sum((logs - logs.mean()) ** 2))
        dof += len(v) - 1
        sizes += 1
    if dof == 0:
        return NoiseEstimate(stated, "stated", 0, 0, stated)
    return NoiseEstimate(math.sqrt(ss / dof), "measured", dof, sizes, stated)
