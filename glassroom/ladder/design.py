"""Ladder design: which ladder (span, rungs, seeds, evaluations) predicts the hero well enough, for least compute.

Before a ladder's compute is spent, `glassroom ladder design SPEC` simulates it. Each candidate
ladder is a set of dial values from the spec's own possible values below the hero (multiples of
shape.head_dim), K seeds per rung and an eval_sequences multiplier m. Its rungs are planned by the
spec's own rules (spec.expand on dataclasses.replace(spec, rungs=...)), so the sizes, tokens and
FLOPs simulated are exactly those `glassroom ladder run` would train.

A simulated ladder: every run's final loss = truth(N, D, C) * exp(e_size + s_run), where
  s_run  ~ N(0, sigma_seed^2), independent per run (seed-to-seed noise; a measured sigma is drawn
         once per simulated ladder from its posterior, glassroom.ladder.noise.NoiseEstimate.draw)
  e_size ~ N(0, sigma_eval^2 / m), one per size, shared by its K seeds: every run of a size is
         evaluated on the same held-out sequences (the first eval_sequences of each domain,
         glassroom/train/evaluate.py), so more seeds do not average this part out, more sequences do.
The simulated values go, one point per run, to glassroom.ladder.foresight.point_fit (the fitter of
`glassroom ladder predict`, which fits every seed's value), and the fit's prediction at the hero is
compared with the noise-free truth there. Over S simulated ladders: median and 90th percentile of
|relative error|, with a 95% order-statistic interval on the median (the Monte-Carlo uncertainty).

The truth: a published law (Hoffmann et al. 2022, arXiv 2203.15556; Besiroglu et al. 2024, arXiv
2404.10102; glassroom.ladder.synthetic.TRUTHS) or a law fitted on a ladder folder or results file.
A published law was measured on models of 70M parameters and more: evaluated at a tiny spec's N
its reducible part dwarfs E and the loss is nearly a pure power law, which extrapolates far more
easily than any real ladder. So N and D are multiplied by one factor that puts the smallest
possible rung at 70M parameters (1 when it is already there); tokens per parameter, the ladder's
span and the hero's distance are kept (docs/ladder-design.md: why it matters, with figures).

Search: every candidate is simulated S times, all on one random stream (common random numbers, so
that differences between candidates are not Monte-Carlo noise); in order of cost, the first within
--budget whose median meets the target is simulated again with 4 S fresh ladders, and recommended if
those meet it too. The announced figures are the fresh ones: the first pass picked the candidate
because it looked good, which biases its own figures low (the winner's curse); 4 S keeps the bias of
the second pass's own acceptance small (its median's Monte-Carlo spread is half the first's).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np

from glassroom.data.shards import read_manifest
from glassroom.errors import ConfigError, GlassroomError
from glassroom.numbers import shown
from glassroom.ladder.foresight import fit_points, point_fits
from glassroom.ladder.noise import NoiseEstimate
from glassroom.ladder.results import read_ladder, read_results
from glassroom.ladder.spec import LadderSpec, PlannedRun, dial_values, expand, plan_run
from glassroom.ladder.synthetic import TRUTHS, truth_loss
from glassroom.units import parse_count

PUBLISHED_MIN_PARAMS = 70e6  # smallest model of Hoffmann et al.'s fits (and so Besiroglu et al.'s refit)
MAX_DIAL_VALUES = 8  # possible dial values a search considers (log-spaced when the spec allows more)
MAX_RUNGS = 8
SEEDS = (1, 2, 3, 4)
EVAL_MULTIPLIERS = (1, 2, 4)
CONFIRM_FACTOR = 4  # the recommendation's fresh simulations: 4 S, so that its announced median is sharp
CHUNK = 400  # simulated ladders fitted in one batch


@dataclass
class Candidate:
    dials: tuple[int, ...]
    seeds: Union[int, tuple[int, ...]]  # K per rung, or one K for each rung (a spec's `seeds: [...]`)
    evals: int  # eval_sequences multiplier
    runs: list[PlannedRun]
    train_flops: float  # all rungs x seeds
    eval_flops: float
    cost: float  # (train + eval) / hero training FLOPs
    result: Optional[dict] = None

    @property
    def counts(self) -> list[int]:
        return list(self.seeds) if isinstance(self.seeds, tuple) else [self.seeds] * len(self.dials)

    def to_json(self) -> dict:
        return {"rungs": list(self.dials), "seeds": list(self.seeds) if isinstance(self.seeds, tuple) else self.seeds, "eval_multiplier": self.evals,
                "names": [r.name for r in self.runs], "span_compute": self.runs[-1].flops / self.runs[0].flops,
                "train_flops": self.train_flops, "eval_flops": self.eval_flops, "cost_fraction": self.cost,
                "result": self.result}


# ----------------------------------------------------------------------------- parsing


def parse_fraction(text: str, option: str) -> float:
    """'0.5%' or '0.005' -> 0.005; a GlassroomError for anything else."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise GlassroomError(f"{option}: {shown(text)} is not a fraction (write 0.5% or 0.005)") from None
    if not math.isfinite(value):
        raise GlassroomError(f"{option}: must be a finite number, got {shown(text)}")
    return value


# ----------------------------------------------------------------------------- truth


def published_truth(name: str, spec_smallest_params: float) -> tuple[Callable, dict]:
    """(truth(N, D, C) -> loss, description) of a published law, N and D scaled (module docstring)."""
    if name not in TRUTHS:
        raise GlassroomError(f"--law {name}: unknown; use {', '.join(sorted(TRUTHS))}, a ladder folder or a results file")
    law = TRUTHS[name]
    scale = max(1.0, PUBLISHED_MIN_PARAMS / spec_smallest_params)

    def truth(params, tokens, flops):
        return np.asarray(truth_loss(law, np.asarray(params, float) * scale, np.asarray(tokens, float) * scale), float)

    return truth, {"kind": "published", "name": name, "params": dict(law), "scale": scale,
                   "note": f"N and D x {scale:.4g} so the smallest possible rung has >= {PUBLISHED_MIN_PARAMS:.0e} "
                           "parameters (the published fits' smallest model)"}


def fitted_truth(source: str, stated_noise: float, irreducible: Optional[float]) -> tuple[Callable, dict, object]:
    """(truth, description, NoiseEstimate) from a ladder folder or results file, fitted by foresight."""
    from pathlib import Path

    results = read_ladder(source) if Path(source).is_dir() else read_results(source)
    ffit = fit_points(results.points, law="auto", stated_noise=stated_noise, irreducible=irreducible, bootstrap=0)

    def truth(params, tokens, flops):
        p, t, c = (np.atleast_1d(np.asarray(x, float)) for x in (params, tokens, flops))
        return ffit.features.values(ffit.theta[None], p, t, c)[0]

    flops = [p.flops for p in results.points]
    desc = {"kind": "fitted", "source": str(source), "law": ffit.law_name, "params": dict(ffit.fit.params),
            "points": len(results.points), "flops_range": [min(flops), max(flops)]}
    return truth, desc, ffit.noise


# ----------------------------------------------------------------------------- candidates


def _spec_seeds(spec: LadderSpec) -> Union[int, tuple[int, ...]]:
    """The spec's `seeds`: one K, or a tuple of K per rung when they differ."""
    seeds = getattr(spec, "seeds", 1)
    if isinstance(seeds, (list, tuple)):
        return int(seeds[0]) if len(set(seeds)) == 1 else tuple(int(k) for k in seeds)
    return int(seeds or 1)


def eval_domains(spec: LadderSpec, data: Optional[str] = None) -> tuple[int, str]:
    """Domains each evaluation covers (each gets eval_sequences): from the dataset's manifest, else the
    spec's data.weights, else 1 (said so: the evaluations' compute is then a lower bound)."""
    section = spec.base.get("data", {})
    path = data or section.get("path", "")
    if data:   # named on purpose (--data): a folder that is not a built dataset is a mistake, not a fallback
        try:
            domains = read_manifest(data).get("domains")
        except (OSError, AttributeError, ValueError) as exc:
            raise GlassroomError(f"--data {data}: its manifest.json cannot be read ({exc.__class__.__name__}); "
                                 "give a folder glassroom data build wrote") from None
        except GlassroomError as exc:
            raise GlassroomError(f"--data {exc}") from None
        if not isinstance(domains, (list, dict)) or not domains:
            raise GlassroomError(f"--data {data}: its manifest.json lists no domains; give a folder glassroom data "
                                 "build wrote")
        return len(domains), f"{len(domains)} domains (from {data}/manifest.json)"
    try:
        domains = read_manifest(path).get("domains")
        if isinstance(domains, (list, dict)) and domains:
            return len(domains), f"{len(domains)} domains (from {path}/manifest.json)"
    except (GlassroomError, OSError, AttributeError, ValueError):
        pass
    weights = section.get("weights")
    if isinstance(weights, dict) and weights:
        return len(weights), f"{len(weights)} domains (the spec's data.weights; {path} not built here)"
    return 1, f"1 domain assumed ({path or 'the dataset'} not built here; --data names it; eval compute is a lower bound)"


def eval_flops(run: PlannedRun, domains: int, multiplier: int) -> float:
    """Forward FLOPs (1/3 of the 6N training rate) of every evaluation of one run, eval_sequences x m."""
    train = run.config["train"]
    every = max(1, int(train["eval_every"]))
    n_evals = run.steps // every + (1 if run.steps % every else 0)
    sequences = int(train.get("eval_sequences", 32)) * multiplier
    return n_evals * sequences * int(train["seq_len"]) * domains * run.flops_per_token / 3.0


def resolve_hero(spec: LadderSpec, hero: Optional[str]) -> LadderSpec:
    """The spec with --hero applied: a d_model (a multiple of head_dim), or FLOPs (the nearest d_model)."""
    if hero is None:
        return spec

    try:
        value = parse_count(hero)
    except ValueError as exc:
        raise GlassroomError(f"--hero: {exc}") from None
    if not (math.isfinite(value) and value > 0):
        raise GlassroomError(f"--hero: must be a positive d_model or FLOPs, got {hero}")
    step = spec.shape.head_dim
    if value < 1e6:  # a dial value
        if value != int(value) or int(value) % step:
            raise GlassroomError(f"--hero {hero}: a d_model must be a whole multiple of shape.head_dim ({step})")
        return dataclasses.replace(spec, hero=dataclasses.replace(spec.hero, d_model=int(value)))

    @functools.lru_cache(maxsize=None)
    def flops_of(k: int) -> Optional[float]:
        """The hero's FLOPs at d_model k * head_dim; None where the rules give no valid model."""
        h = dataclasses.replace(spec.hero, d_model=k * step)
        try:
            return plan_run(spec, "hero", h.d_model, None if h.tokens is None else float(h.tokens),
                             h.tokens_per_param or spec.tokens_per_param, h.model, h.train).flops
        except ConfigError:
            return None

    def valid_in(a: int, b: int) -> Optional[int]:
        """The smallest k in [a, b) with a valid model (None if none)."""
        return next((k for k in range(a, b) if flops_of(k) is not None), None)

    lo, hi = None, 1  # lo: largest valid k known below the target; hi: a valid k at or above it
    while True:
        if hi > 1 << 16:
            raise GlassroomError(f"--hero {hero}: no d_model of this spec reaches {value:.3g} FLOPs")
        probe = valid_in(hi, hi + min(hi, 64))
        if probe is not None and flops_of(probe) >= value:
            hi = probe
            break
        lo = probe if probe is not None else lo
        hi *= 2
    while lo is not None and hi - lo > 1:
        mid = valid_in((lo + hi) // 2, hi)
        if mid is None:
            break  # nothing valid between: lo and hi are neighbours
        if flops_of(mid) < value:
            lo = mid
        else:
            hi = mid
    k = hi if lo is None else min((lo, hi), key=lambda k: abs(math.log(flops_of(k) / value)))
    if abs(math.log(flops_of(k) / value)) > math.log(1.5):
        raise GlassroomError(f"--hero {hero}: the nearest hero by this spec's rules is d_model {k * step} at "
                             f"{flops_of(k):.3g} FLOPs (the hero's tokens and model settings); give a d_model instead")
    return dataclasses.replace(spec, hero=dataclasses.replace(spec.hero, d_model=k * step))


def possible_dials(spec: LadderSpec, own: Sequence[int], hero_dial: int, smallest: Optional[int] = None) -> list[int]:
    """Dial values a candidate may use: multiples of head_dim (whole KV groups) from `smallest` (default
    half the spec's smallest rung) to just below the hero; at most MAX_DIAL_VALUES, log-spaced, the
    spec's own kept."""
    if spec.tokens is not None:  # tokens given per rung: only the spec's own rungs have a token count
        return [d for d in own if smallest is None or d >= smallest]
    step, group = spec.shape.head_dim, spec.shape.kv_group
    lo = max(step, (min(own) // 2) // step * step) if smallest is None else max(step, -(-smallest // step) * step)
    values = [d for d in range(lo, hero_dial, step) if (d // step) % group == 0]
    if len(values) > MAX_DIAL_VALUES:
        picks = set(d for d in own if d in values)
        for x in np.geomspace(values[0], values[-1], MAX_DIAL_VALUES):
            picks.add(min(values, key=lambda d: abs(math.log(d / x))))
        values = sorted(picks)
    return values


def _subset(values: list[int], flops: dict[int, float], k: int) -> Optional[tuple[int, ...]]:
    """k of `values` (first and last kept) nearest to log-spaced compute; None if not k distinct."""
    targets = np.geomspace(flops[values[0]], flops[values[-1]], k)
    chosen: list[int] = []
    for t in targets:
        free = [d for d in values if d not in chosen and (not chosen or d > chosen[-1])]
        if not free:
            return None
        chosen.append(min(free, key=lambda d: abs(math.log(flops[d] / t))))
    if chosen[0] != values[0] or chosen[-1] != values[-1] or len(set(chosen)) != k:
        return None
    return tuple(chosen)


def plan_hero(spec: LadderSpec) -> PlannedRun:
    h = spec.hero
    try:
        return plan_run(spec, "hero", h.d_model, None if h.tokens is None else float(h.tokens),
                         h.tokens_per_param or spec.tokens_per_param, h.model, h.train)
    except ConfigError as exc:
        raise GlassroomError(f"hero: {exc}") from None


def candidates(spec: LadderSpec, domains: int, eval_noise: float,
               smallest: Optional[int] = None) -> tuple[list[Candidate], PlannedRun, list[int]]:
    """Every candidate ladder, planned by the spec's rules, and the hero."""
    hero = plan_hero(spec)
    own = dial_values(spec)
    values = possible_dials(spec, own, hero.dial, smallest)
    planned: dict[int, PlannedRun] = {}
    for d in values:
        tokens = None if spec.tokens is None else float(spec.tokens[own.index(d)])
        try:
            planned[d] = plan_run(spec, "rung", d, tokens, spec.tokens_per_param)
        except ConfigError:
            continue  # not a valid model at this dial value (the rules' rounding); skip it
    values = [d for d in values if d in planned and planned[d].flops < hero.flops]
    flops = {d: planned[d].flops for d in values}
    min_rungs = 2 if spec.fit.irreducible != "free" else 3
    subsets = set()
    for i in range(len(values)):
        for j in range(i + min_rungs - 1, len(values)):
            span = values[i:j + 1]
            for k in range(min_rungs, min(len(span), MAX_RUNGS) + 1):
                s = _subset(span, flops, k)
                if s:
                    subsets.add(s)
    if all(d in flops for d in own) and len(own) >= min_rungs:
        subsets.add(tuple(own))
    if len(values) < min_rungs:
        raise GlassroomError(f"hero d_model {hero.dial}: {len(values)} possible rung size(s) below it "
                             f"({', '.join(map(str, values)) or 'none'}"
                             f"{'' if smallest is None else f', from --smallest {smallest}'}); a ladder needs at least {min_rungs}")
    out = []
    multipliers = EVAL_MULTIPLIERS if eval_noise > 0 else (1,)
    for dials in sorted(subsets):
        try:  # exactly what `ladder run` would train (names distinct, hero above the largest rung)
            runs, _ = expand(dataclasses.replace(spec, rungs=list(dials), rung_budgets=None,
                                                 tokens=None if spec.tokens is None else
                                                 [spec.tokens[own.index(d)] for d in dials]))
        except ConfigError:
            continue
        train = sum(r.flops for r in runs)
        for m in multipliers:
            ev = sum(eval_flops(r, domains, m) for r in runs)
            for k in SEEDS:
                out.append(Candidate(dials, k, m, runs, k * train, k * ev, k * (train + ev) / hero.flops))
        mixed = _spec_seeds(spec)
        if dials == tuple(own) and isinstance(mixed, tuple) and len(mixed) == len(dials):  # seeds: [K per rung]
            ev = [eval_flops(r, domains, 1) for r in runs]
            t = sum(k * r.flops for k, r in zip(mixed, runs))
            e = sum(k * x for k, x in zip(mixed, ev))
            out.append(Candidate(dials, mixed, 1, runs, t, e, (t + e) / hero.flops))
    out.sort(key=lambda c: (c.cost, len(c.dials)))
    return out, hero, values


# ----------------------------------------------------------------------------- simulation


def simulate(cand: Candidate, hero: PlannedRun, truth: Callable, noise, eval_noise: float, simulations: int,
             rng: np.random.Generator, irreducible: Optional[float] = None, law: str = "auto") -> np.ndarray:
    """Signed relative errors of the hero's prediction over `simulations` simulated ladders, all fitted
    in one batch by foresight.point_fits (the fitter of `ladder predict`, no bootstrap)."""
    k, sizes = cand.counts, len(cand.runs)
    params = np.repeat([float(r.params) for r in cand.runs], k)
    tokens = np.repeat([float(r.tokens) for r in cand.runs], k)
    flops = np.repeat([float(r.flops) for r in cand.runs], k)
    base = np.asarray(truth(params, tokens, flops), float)
    true_hero = float(np.asarray(truth([hero.params], [hero.tokens], [hero.flops]), float).ravel()[0])
    sigmas = np.asarray(noise.draw(rng, simulations), float)  # a measured sigma's posterior; a stated one as is
    log_noise = sigmas[:, None] * rng.standard_normal((simulations, len(params)))
    if eval_noise > 0:  # one draw per size, shared by its seeds (module docstring)
        log_noise += np.repeat(rng.normal(0.0, eval_noise / math.sqrt(cand.evals), (simulations, sizes)), k, axis=1)
    out = np.empty(simulations)
    for i in range(0, simulations, CHUNK):  # batches bound the fitter's memory (an L(N,D) grid is large)
        predict = point_fits(params, tokens, flops, base[None] * np.exp(log_noise[i:i + CHUNK]), law, irreducible)
        with np.errstate(invalid="ignore", over="ignore"):
            out[i:i + CHUNK] = np.asarray(predict(float(hero.params), float(hero.tokens), float(hero.flops)), float)
    return out / true_hero - 1.0


def summarise(errors: np.ndarray) -> dict:
    """Median and 90th percentile of |error| (failed fits count as infinitely wrong), with a 95%
    order-statistic interval on the median: its Monte-Carlo uncertainty."""
    a = np.sort(np.where(np.isfinite(errors), np.abs(errors), np.inf))
    n = len(a)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = a[max(0, int(math.floor(n / 2 - half)))], a[min(n - 1, int(math.ceil(n / 2 + half)))]
    finite = errors[np.isfinite(errors)]
    return {"simulations": n, "median": float(np.median(a)), "p90": float(np.quantile(a, 0.9)),
            "median_interval": [float(lo), float(hi)], "failed": int(n - len(finite)),
            "bias": float(np.median(finite)) if len(finite) else math.nan}


# ----------------------------------------------------------------------------- search


def _noise_estimate(sigma: float, source: str = "stated"):
    return NoiseEstimate(sigma=float(sigma), source=source, dof=0, sizes=0, stated=float(sigma))


def _run(c: Candidate, hero, truth, noise, eval_noise, simulations, rng, pin) -> dict:
    errors = simulate(c, hero, truth, noise, eval_noise, simulations, rng, pin)
    out = summarise(errors)
    # The error against one measured hero run: the hero's own seed noise on top of the prediction's.
    own = np.exp(rng.standard_normal(len(errors)) * np.asarray(noise.draw(rng, len(errors)), float))
    out["vs_one_hero_run"] = summarise((1.0 + errors) / own - 1.0)
    return out


def _confirm(order: list[Candidate], target: float, run) -> Optional[Candidate]:
    """The cheapest candidate of `order` whose median meets the target, confirmed by S fresh simulations
    (so the announced figures carry no selection bias: the first pass picked it because it looked good)."""
    for c in order:
        if c.result["search"]["median"] <= target:
            c.result["confirmed"] = run(c)
            if c.result["confirmed"]["median"] <= target:
                return c
    return None


def _frontier(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no cheaper one beats: cost up, median down."""
    out, best = [], math.inf
    for c in sorted(cands, key=lambda c: c.cost):
        m = c.result["search"]["median"]
        if m < best:
            out.append(c)
            best = m
    return out


def design(spec: LadderSpec, hero: Optional[str] = None, target: float = 0.005, budget: float = 1.0,
           noise: Optional[float] = None, law: str = "chinchilla", simulations: int = 400, seed: int = 0,
           eval_noise: float = 0.0, data: Optional[str] = None, smallest: Optional[int] = None) -> dict:
    """Everything `glassroom ladder design` reports, as one JSON-ready mapping (module docstring)."""
    spec = resolve_hero(spec, hero)
    domains, domains_note = eval_domains(spec, data)
    cands, hero_run, values = candidates(spec, domains, eval_noise, smallest)
    irreducible = None if spec.fit.irreducible == "free" else float(spec.fit.irreducible)
    measured = None
    if law in TRUTHS:
        smallest = min(c.runs[0].params for c in cands)
        truth, truth_desc = published_truth(law, smallest)
    else:
        truth, truth_desc, measured = fitted_truth(law, spec.fit.noise_floor, irreducible)
    if truth_desc["kind"] == "fitted":  # the law is used where it was measured, or said not to be
        lo, hi = truth_desc["flops_range"]
        rung_lo = min(c.runs[0].flops for c in cands)
        outside = rung_lo < lo / 10 or hero_run.flops > hi * 1e4
        truth_desc["note"] = (f"fitted on {lo:.3g}..{hi:.3g} FLOPs; the candidates' rungs start at {rung_lo:.3g} "
                              f"and the hero is at {hero_run.flops:.3g}"
                              + ("; the law is used far outside the points it was fitted on" if outside else ""))
    if noise is not None:
        noise_est = _noise_estimate(noise)
        noise_note = "stated (--noise)"
    elif measured is not None and measured.source == "measured":
        noise_est, noise_note = measured, f"measured from repeated seeds in {law} ({measured.dof} dof)"
    else:
        noise_est, noise_note = _noise_estimate(spec.fit.noise_floor), "stated (the spec's fit.noise_floor)"
    confirmations = iter(range(1, 1 << 30))

    def run(c: Candidate, stream: int = 0) -> dict:
        rng = np.random.default_rng([seed, stream])
        n = simulations * (CONFIRM_FACTOR if stream else 1)
        return _run(c, hero_run, truth, noise_est, eval_noise, n, rng, irreducible)

    for c in cands:  # one stream for every candidate's search: common random numbers sharpen the comparisons
        c.result = {"search": run(c)}
    confirm = lambda c: run(c, next(confirmations))  # noqa: E731  (fresh, independent streams)
    within = [c for c in cands if c.cost <= budget]
    beyond = [c for c in cands if c.cost > budget]
    recommended = _confirm(within, target, confirm)
    cheapest_any = None if recommended is not None else _confirm(beyond, target, confirm)
    best = min(within or cands, key=lambda c: (c.result["search"]["median"], c.cost))
    needed_noise, bias_bound = None, False
    b = best.result["search"]
    if recommended is None and b["median"] > 0:
        # Errors scale about linearly with the noise, unless most of the error is the fit's bias (a law
        # family or pinned irreducible loss that does not match the truth): no noise level removes that.
        bias_bound = abs(b["bias"]) > 0.5 * b["median"]
        if noise_est.sigma > 0 and not bias_bound:
            needed_noise = noise_est.sigma * target / b["median"]
    spec_seeds = _spec_seeds(spec)
    own = [r.dial for r in expand_own(spec)]
    mine = next((c for c in cands if list(c.dials) == own and c.seeds == spec_seeds and c.evals == 1), None)
    tokens_of = dict(zip(dial_values(spec), spec.tokens or []))
    base_eval = int(spec.base["train"].get("eval_sequences", 32))

    def lines(c: Candidate) -> list[str]:
        out = [f"rungs: [{', '.join(map(str, c.dials))}]"]
        if spec.tokens is not None:
            out.append(f"tokens: [{', '.join(str(tokens_of[d]) for d in c.dials)}]")
        out.append(f"seeds: {c.to_json()['seeds']}")
        if c.evals != 1 or eval_noise > 0:
            out.append(f"base.train.eval_sequences: {base_eval * c.evals}")
        return out

    return {
        "spec": spec.name, "hero": {"d_model": hero_run.dial, "name": hero_run.name, "params": hero_run.params,
                                    "tokens": hero_run.tokens, "flops": hero_run.flops},
        "target_error": target, "budget": budget, "simulations": simulations, "seed": seed,
        "truth": truth_desc, "noise": {**noise_est.to_json(), "used": noise_note},
        "eval_noise": {"sigma": eval_noise, "at_eval_sequences": base_eval, "domains": domains,
                       "domains_note": domains_note},
        "fitter": "glassroom.ladder.foresight.point_fits, law auto (the fitter of `glassroom ladder predict`)",
        "dial_values": values, "candidates": len(cands), "within_budget": len(within),
        "frontier": [c.to_json() for c in _frontier(within or cands)],
        "spec_ladder": None if mine is None else mine.to_json(),
        "recommended": None if recommended is None else {**recommended.to_json(), "spec_lines": lines(recommended)},
        "cheapest_beyond_budget": None if cheapest_any is None else {**cheapest_any.to_json(),
                                                                      "spec_lines": lines(cheapest_any)},
        "best_within_budget": best.to_json(), "noise_needed_estimate": needed_noise, "bias_bound": bias_bound,
        "all": [c.to_json() for c in cands],
    }


def expand_own(spec: LadderSpec) -> list[PlannedRun]:
    """The spec's own rungs below the hero (for the report)."""
    hero = plan_hero(spec)
    return [r for r in (plan_run(spec, "rung", d, None if spec.tokens is None else float(spec.tokens[i]),
                                  spec.tokens_per_param) for i, d in enumerate(dial_values(spec)))
            if r.flops < hero.flops]
