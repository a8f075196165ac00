"""The hero's whole loss curve, predicted from the rungs' curves, preregistered once in its run store.

The law (Tissue et al. 2024, "Scaling Law with Learning Rate Annealing", arXiv 2408.11029), with a
size term in Chinchilla's additive form so that one fit covers every rung:

    L(N, s) = E + B * N^-beta + A * S1(s)^-alpha - C * S2(s)

  m_i     the lr multiplier of step i (glassroom.train.optim.lr_multiplier, exactly as training);
          relative to each run's own peak lr, since the scaling rules give each size its own peak
  S1(s)   forward area in tokens: tokens_per_step * sum_{i<s} m_i (constant lr: S1 = tokens seen)
  S2(s)   annealing area: sum_{i<s} mom_i, mom_i = lambda * mom_{i-1} + max(0, m_{i-1} - m_i), in
          steps (lambda = fit.momentum, 0.999 as in the paper; warmup's increases count as zero)

The value at store step s (after s optimizer steps) is compared with the metric logged at s.
Points before fit.skip_fraction of each run are left out (the early transient is not a power law).
The band is the bootstrap's (fit.py) quantiles at fit.confidence (widened where needed to hold the
predicted curve itself: fit.percentile_interval), each replicate's curve also
shifted by one draw of the hero's own seed noise, N(0, sigma) in log loss: a predictive interval for
the one run that will be observed. sigma is the seed-to-seed noise (noise.py): measured from the
rungs' repeated seeds when some size has two or more (each replicate then draws sigma from its
posterior, NoiseEstimate.draw), else the spec's fit.noise_floor. Seeds of one size are fitted as
runs of their own (each its own curve, each its own endpoint); the backtest holds out every seed of
the largest size and compares the prediction with their mean final value.

`preregister` seals the prediction (glassroom.observe.prediction.seal: a SHA-256 digest over the
prediction, the rungs' config hashes and final metrics, the code commit and the moment of sealing)
and writes it with a chained journal event, only into a run that has not started;
`glassroom ladder verify RUN_DIR` checks it (docs/ladder.md, "The sealed prediction").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Optional

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.ladder.curve import (  # noqa: F401  (re-exported: the curve law and its band)
    BAND_POINTS, CURVE_LAW, curve_features, fit_curves, lr_multipliers, predict_curve, schedule_areas)
from glassroom.ladder.downstream_link import downstream_backtest, downstream_prediction
from glassroom.ladder.fit import fit_endpoints, predict_interval
from glassroom.ladder.rungs import check_rungs, group_sizes, load_rungs, measure_noise, read_spec_settings
from glassroom.model.accounting import count_params, flops_per_token
from glassroom.observe.prediction import band_problem, predicted_run, run_digest, seal
from glassroom.observe.prediction import deviation  # noqa: F401  (re-exported: the band's deviation)
from glassroom.observe.record import measure_settings
from glassroom.observe.run_folder import checkpoints_path, store_path
from glassroom.observe.store import StoreWriter
from glassroom.pipeline.provenance import git_state
from glassroom.train.config import run_config_from_mapping
from glassroom.units import model_name
from glassroom.version import PACKAGE_DIR, __version__


def size_misfit(rungs, fit_cfg) -> Optional[dict]:
    """The curve law's out-of-sample error across sizes: every size (all its seeds) left out in turn,
    the law fitted on the others predicts its final value; {"rms", "errors": {size: log(predicted /
    mean observed)}, "note"}. The seeds' noise is part of it, so it is carried beside that noise only
    where it exceeds it: the band adds sqrt(max(0, rms^2 - sigma^2)). None with fewer than 3 sizes or
    when a fold cannot be fitted."""
    sizes = group_sizes(rungs)
    if len(sizes) < 3:
        return None
    quick = dataclasses.replace(fit_cfg, bootstrap=1)
    size_term = getattr(fit_cfg, "size_term", "active")
    errors = {}
    for i, held in enumerate(sizes):
        train = [r for j, group in enumerate(sizes) if j != i for r in group]
        try:
            fit = fit_curves(train, fit_cfg.metric, quick)
        except GlassroomError:
            return None
        first = held[0]
        band = predict_curve(fit, first.law_size(size_term), first.config["train"], first.tokens_per_step, quick)
        actual = float(np.mean([r.final(fit_cfg.metric) for r in held]))
        errors[first.name] = math.log(band["final_loss"] / actual)
    rms = float(np.sqrt(np.mean(np.square(list(errors.values())))))
    return {"rms": rms, "errors": errors,
            "note": "leave-one-size-out error of the curve law; the band carries what of it the seed noise does not"}


def _misfit_sd(misfit: Optional[dict], noise) -> float:
    """The SD the band adds for the law's misfit beyond the seeds' noise (size_misfit's docstring)."""
    if not misfit:
        return 0.0
    return math.sqrt(max(0.0, misfit["rms"] ** 2 - noise.sigma ** 2))


def _code_version() -> dict:
    state = git_state(PACKAGE_DIR)
    return {"glassroom": __version__, "commit": state.get("commit"), "dirty": state.get("dirty")}


def make_prediction(ladder_dir: str | Path, hero_config: dict, fit_cfg=None, param_count: Optional[str] = None,
                    allow_nonmonotone: bool = False) -> dict:
    """The hero's prediction from the rungs in DIR/rungs/ (rungs.py), ready for `preregister`.

    hero_config is the hero's RunConfig mapping (as ladder.spec.expand gives it). Rungs that no fit
    can use are refused (rungs.check_rungs); allowed non-monotone rungs or exponents at their bounds
    make `reliable` false, with the reasons in `warnings`.
    """
    settings, spec_count = read_spec_settings(ladder_dir)
    fit_cfg = fit_cfg or settings
    param_count = param_count or spec_count
    rungs = load_rungs(ladder_dir, param_count)
    reversals: list[str] = []
    warnings = check_rungs(rungs, fit_cfg.metric, fit_cfg.irreducible,
                           allow_nonmonotone or getattr(fit_cfg, "allow_nonmonotone", False), fit_cfg.noise_floor,
                           reversals)
    noise = measure_noise(rungs, fit_cfg.metric, fit_cfg.noise_floor)
    cfg = run_config_from_mapping(hero_config, "hero")
    # What binds the prediction to its hero: `ladder verify` compares it with RUN_DIR/config.yaml.
    hero_run = json.loads(json.dumps(predicted_run(cfg.to_dict())))
    counts = count_params(cfg.model)
    n = counts.active if param_count == "active" else counts.non_embedding_active
    if getattr(fit_cfg, "size_term", "active") == "total":
        n += counts.total - counts.active
    tokens_per_step = cfg.train.batch_size * cfg.train.seq_len
    fit = fit_curves(rungs, fit_cfg.metric, fit_cfg, noise)
    warnings += fit.warnings
    misfit = size_misfit(rungs, fit_cfg)
    band = predict_curve(fit, n, hero_config["train"], tokens_per_step, fit_cfg, noise=noise,
                         misfit=_misfit_sd(misfit, noise))
    endpoint = None
    if len(group_sizes(rungs)) >= (2 if fit_cfg.irreducible != "free" else 3):
        C = [r.flops for r in rungs]
        L = [r.final(fit_cfg.metric) for r in rungs]
        pinned = None if fit_cfg.irreducible == "free" else float(fit_cfg.irreducible)
        efit = fit_endpoints(C, L, pinned, fit_cfg.bootstrap, noise.sigma, fit_cfg.confidence, fit_cfg.seed)
        hero_c = float(flops_per_token(cfg.model, cfg.train.seq_len)) * cfg.train.steps * tokens_per_step
        mean, lo, hi = predict_interval(efit, {"C": [hero_c]}, fit_cfg.confidence)
        endpoint = {"law": efit.to_json(), "compute": hero_c, "final_loss": float(mean[0]),
                    "final_interval": [float(lo[0]), float(hi[0])]}
    now = time.time()
    prediction = {
        "created": now, "created_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "metric": fit_cfg.metric, "law": fit.to_json(), "params": fit.params, "confidence": fit_cfg.confidence,
        "band": f"{fit_cfg.confidence:.0%} bootstrap quantiles incl. seed noise {describe_noise(noise)}"
                + (f" and the law's leave-one-size-out misfit beyond it ({_misfit_sd(misfit, noise):.3g})"
                   if _misfit_sd(misfit, noise) else ""),
        "noise": noise.to_json(), "misfit": misfit,
        "settings": {"momentum": fit_cfg.momentum, "skip_fraction": fit_cfg.skip_fraction,
                     "noise_floor": fit_cfg.noise_floor, "bootstrap": fit_cfg.bootstrap, "seed": fit_cfg.seed,
                     "irreducible": fit_cfg.irreducible, "param_count": param_count,
                     "size_term": getattr(fit_cfg, "size_term", "active")},
        "rungs": [{**r.identity(), "final": r.final_metrics()} for r in rungs],
        "sizes": size_summary(rungs, fit_cfg.metric), "code": _code_version(),
        "hero": {"name": model_name(counts.total, counts.active), "params": n, "steps": cfg.train.steps,
                 "tokens": cfg.train.steps * tokens_per_step, "schedule": cfg.train.schedule,
                 "run_config": hero_run, "config_sha256": run_digest(hero_run),
                 "measure": measure_settings(cfg.to_dict())},   # what the band is compared with (observe/record.py)
        **band, "endpoint_check": endpoint, "reliable": not warnings, "warnings": warnings,
        "notes": reversals + fit.notes + (endpoint["law"]["notes"] if endpoint else []),
    }
    # Step 2 of the two-step prediction: the rungs' task scores through a loss -> score link.
    prediction["downstream"] = downstream_prediction(rungs, fit_cfg, band["final_loss"], band["final_interval"],
                                                     curve=band)
    return prediction


def describe_noise(noise) -> str:
    """One phrase: `0.0041 (log loss, measured from 4 sizes' seeds, 4 dof)` or `0.003 (log loss, stated)`."""
    if noise.source == "measured":
        return (f"{noise.sigma:.3g} (log loss, measured from the seeds of {noise.sizes} size(s), {noise.dof} dof; "
                f"the stated fit.noise_floor {noise.stated:g} is not used)")
    return f"{noise.sigma:g} (log loss, stated: fit.noise_floor; no size has two seeds to measure it)"


def size_summary(rungs, metric: str) -> list[dict]:
    """One entry per size: its name, N, tokens, FLOPs, each seed's final value and their mean."""
    out = []
    for group in group_sizes(rungs):
        finals = [r.final(metric) for r in group]
        out.append({"name": group[0].name, "params": group[0].params, "tokens": group[0].tokens,
                    "flops": group[0].flops, "seeds": [r.seed for r in group], "finals": finals,
                    "mean": float(np.mean(finals))})
    return out


def leave_largest_size_out(C, loss, pinned_E: Optional[float] = None, replicates: int = 200,
                           noise_floor: float = 0.003, confidence: float = 0.95, seed: int = 0) -> Optional[dict]:
    """L(C) fitted without every run at the largest compute (all seeds of the largest size) and
    predicted there, compared with those runs' mean final value (fit.leave_largest_out's fields,
    plus each held-out run's value). One run per size: the same numbers as fit.leave_largest_out."""
    C, loss = np.asarray(C, float), np.asarray(loss, float)
    if len(C) == 0:
        return None
    held = np.isclose(C, C.max(), rtol=1e-9, atol=0.0)
    order = np.argsort(C[~held], kind="stable")
    Ct, Lt = C[~held][order], loss[~held][order]
    distinct = len(np.unique(Ct))
    if distinct < (2 if pinned_E is not None else 3):
        return None
    fit = fit_endpoints(Ct, Lt, pinned_E, replicates, noise_floor, confidence, seed)
    mean, lo, hi = predict_interval(fit, {"C": [float(C.max())]}, confidence)
    predicted, actual = float(mean[0]), float(np.mean(loss[held]))
    return {"predicted_loss": predicted, "actual_loss": actual, "relative_error": (predicted - actual) / actual,
            "interval": [float(lo[0]), float(hi[0])], "covered": bool(lo[0] <= actual <= hi[0]),
            "compute": float(C.max()), "actual_losses": [float(v) for v in loss[held]], "fit": fit.to_json()}


def seal_commit() -> str:
    """The code that makes the prediction: the git commit (plus a hash of the glassroom sources when
    the checkout has uncommitted changes), else the package version and that hash."""
    root = PACKAGE_DIR
    state = _code_version()

    def sources() -> str:
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:16]

    if state.get("commit"):
        return state["commit"] + (f"+src.{sources()}" if state.get("dirty") else "")
    return f"glassroom-{__version__}+src.{sources()}"


def _refuse_started(writer, run_dir: Path) -> None:
    """A prediction is made before the hero's first step: refuse a run (its StoreWriter) that has started."""
    row = writer.metric_extent()
    if row[0]:
        raise GlassroomError(f"{run_dir}: the run has already logged {row[0]} metric value(s) from step {row[1]}; "
                             "a prediction must be sealed before the first step (predict into a new run folder)")
    started = writer.first_event(("start", "resume"))
    if started:
        raise GlassroomError(f"{run_dir}: the run has already started (event {started[0]}, {started[1]} at step "
                             f"{started[2]}); a prediction must be sealed before it starts (use a new run folder)")
    folder = checkpoints_path(run_dir)
    if folder.is_dir() and any(folder.iterdir()):
        raise GlassroomError(f"{run_dir}: holds checkpoints ({folder}); a prediction must be sealed before the "
                             "first step (use a new run folder)")


def preregister(run_dir: str | Path, prediction: dict) -> dict:
    """Seal `prediction` and write it into RUN_DIR's store as artifact "prediction", with a chained
    "prediction" event that records the seal's digest; returns the sealed prediction.

    Written once, before the run starts: a second call, a store that already holds a prediction, or
    a run that has logged any step, started, or checkpointed raises GlassroomError and changes
    nothing (one SQLite transaction). The prediction's `created` is the moment of sealing; any time
    it carried is dropped.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise GlassroomError(f"{run_dir}: is a file, expected a run folder")
    problem = band_problem(prediction)
    final = prediction.get("final_interval") if isinstance(prediction, dict) else None
    if problem is None and not (isinstance(prediction.get("final_loss"), (int, float))
                                and isinstance(final, list) and len(final) == 2):
        problem = "no final_loss and final_interval"
    if problem:
        raise GlassroomError(f"{run_dir}: cannot preregister a damaged prediction ({problem}); make it again "
                             "with `glassroom ladder run --hero`")
    rungs = [{"name": r.get("name"), "config_hash": r.get("config_sha256"), "final": r.get("final")}
             for r in prediction.get("rungs", []) if isinstance(r, dict)]
    commit = seal_commit()
    try:
        writer = StoreWriter(run_dir)
    except sqlite3.DatabaseError as exc:
        raise GlassroomError(f"{store_path(run_dir)}: unreadable run store ({exc})") from None
    try:
        with writer.transaction():   # checks, artifact and event: all or nothing
            if writer.has_artifact("prediction"):
                raise GlassroomError(f"{run_dir}: already holds a preregistered prediction; it is never changed "
                                     "(predict into a new hero run folder instead)")
            _refuse_started(writer, run_dir)
            sealed = seal(prediction, rungs, commit)
            writer.set_artifact("prediction", sealed)
            digest = sealed["seal"]["digest"]
            text = (f"preregistered {sealed['metric']} {sealed['final_loss']:.4f} "
                    f"[{sealed['final_interval'][0]:.4f}, {sealed['final_interval'][1]:.4f}] at step "
                    f"{sealed['steps'][-1]}; sealed sha256 {digest}")
            data = {k: sealed[k] for k in ("metric", "final_loss", "final_interval", "created")}
            writer.event("prediction", text, 0, {**data, "seal_digest": digest})
    finally:
        writer.close()
    return sealed


def backtest(ladder_dir: str | Path, fit_cfg=None, allow_nonmonotone: bool = False) -> dict:
    """Fit on every size but the largest and predict the largest's curve and final loss; with seeds,
    every seed of the largest size is held out and the prediction is compared with their mean final
    value (each seed's own final and curve error are reported too). The seed noise comes from the
    fitted sizes only: the held-out runs are not looked at before the comparison."""
    settings, param_count = read_spec_settings(ladder_dir)
    fit_cfg = fit_cfg or settings
    rungs = load_rungs(ladder_dir, param_count)
    sizes = group_sizes(rungs)
    if len(sizes) < 3:
        raise GlassroomError(f"{ladder_dir}: a backtest needs at least 3 sizes (fit on 2, predict 1), have "
                             f"{len(sizes)}" + (f" ({len(rungs)} runs)" if len(rungs) != len(sizes) else ""))
    reversals: list[str] = []
    warnings = check_rungs(rungs, fit_cfg.metric, fit_cfg.irreducible,
                           allow_nonmonotone or getattr(fit_cfg, "allow_nonmonotone", False), fit_cfg.noise_floor,
                           reversals)
    held, train = sizes[-1], [r for g in sizes[:-1] for r in g]
    for run in held:
        run.check_curve(fit_cfg.metric, fit_cfg.skip_fraction)  # its curve is compared point by point
    noise = measure_noise(train, fit_cfg.metric, fit_cfg.noise_floor)
    fit = fit_curves(train, fit_cfg.metric, fit_cfg, noise)
    warnings += fit.warnings
    first = held[0]
    misfit = size_misfit(train, fit_cfg)
    band = predict_curve(fit, first.law_size(getattr(fit_cfg, "size_term", "active")), first.config["train"],
                         first.tokens_per_step, fit_cfg, noise=noise, misfit=_misfit_sd(misfit, noise))
    runs, errors = [], []
    for run in held:
        final = run.final(fit_cfg.metric)
        steps, values = run.series(fit_cfg.metric)
        seen = np.isin(steps, band["steps"])
        err = None
        if seen.any():
            gaps = np.abs(np.interp(steps[seen], band["steps"], band["mean"]) / values[seen] - 1)
            errors.extend(gaps.tolist())
            err = float(np.mean(gaps))
        runs.append({"name": run.name, "seed": run.seed, "run_dir": str(run.run_dir), "actual_loss": final,
                     "relative_error": (band["final_loss"] - final) / final, "curve_mean_abs_relative_error": err})
    actual = float(np.mean([r["actual_loss"] for r in runs]))
    lo, hi = band["final_interval"]
    endpoint = leave_largest_size_out([r.flops for r in rungs], [r.final(fit_cfg.metric) for r in rungs],
                                      None if fit_cfg.irreducible == "free" else float(fit_cfg.irreducible),
                                      fit_cfg.bootstrap, noise.sigma, fit_cfg.confidence, fit_cfg.seed)
    result = {"metric": fit_cfg.metric, "held_out": first.name, "fitted_on": list(dict.fromkeys(r.name for r in train)),
            "held_out_runs": runs, "seeds": len(held),
            "predicted_loss": band["final_loss"], "actual_loss": actual,
            "relative_error": (band["final_loss"] - actual) / actual, "interval": [lo, hi],
            "covered": bool(lo <= actual <= hi),
            "curve_mean_abs_relative_error": float(np.mean(errors)) if errors else None,
            "noise": noise.to_json(), "misfit": misfit, "law": fit.to_json(), "endpoint_check": endpoint,
            "reliable": not warnings, "warnings": warnings, "notes": reversals + fit.notes}
    result["downstream"] = downstream_backtest(rungs, fit_cfg, band)
    return result
