"""`glassroom ladder fit DIR`: every law fitted on a ladder's rungs, as one JSON-ready report.

- L(C) = E + A*C^-alpha on each rung's final value of the spec's metric (E pinned when the spec
  says so), of eval/macro/bpb, and of every domain's eval loss and bpb (E free), each with its
  leave-largest-out error (for the spec's metric and macro bpb). With only 2 rungs E is pinned to 0 (3 parameters need 3 points).
- L(N, D) only when the rungs vary N and D separately (fit.identifiable_nd); otherwise the reason.
- The schedule-aware curve law (predict.py) on the whole curves of the spec's metric.
Secondary metrics (all but the spec's) use at most SECONDARY_REPLICATES bootstrap replicates.

Seeds (the spec's `seeds: K`): every run is a point of its own (L(C) sees repeated C; the curve law
fits each run's curve as its own group); the seed-to-seed noise used for intervals (`noise`) is
measured from the sizes with two or more seeds (noise.seed_noise), else fit.noise_floor as stated.
The leave-largest-out check holds out every seed of the largest size and compares with their mean;
"rungs" in the sense of "how many points identify E" means sizes.

Before fitting, rungs.check_rungs refuses finals no fit can use (one line naming the rungs).
Non-monotone rungs are fitted only when allowed; the report then says `reliable: false` with the
reasons in `warnings`, as it does when any fitted exponent stopped at its bound. A term that a fit
of the spec's metric dropped (a coefficient at 0: fit.Fit.notes) is said in `notes`. A secondary metric
that cannot be fitted (a NaN final in one domain) is left out with a note.
"""

from __future__ import annotations

from pathlib import Path

from glassroom.errors import GlassroomError
from glassroom.ladder.fit import LAW_ND, bootstrap, fit_endpoints, fit_law, identifiable_nd
from glassroom.ladder.noise import seed_noise
from glassroom.ladder.predict import fit_curves, leave_largest_size_out, size_summary
from glassroom.ladder.rungs import check_rungs, group_sizes, load_rungs, measure_noise, read_spec_settings

SECONDARY_REPLICATES = 50


def _metrics(rungs, main: str) -> list[str]:
    names = set(rungs[0].metrics())
    for rung in rungs[1:]:
        names &= set(rung.metrics())
    if main not in names:
        raise_missing(rungs[0], main)
    extra = sorted(n for n in names if n.startswith("eval/") and n.endswith(("/loss", "/bpb")) and n != main)
    extra.sort(key=lambda n: (not n.startswith("eval/macro/"), n))
    return [main] + extra


def raise_missing(rung, metric: str) -> None:
    raise GlassroomError(f"{rung.run_dir}: no {metric} values (the spec's fit.metric); check the metric name")


def fit_report(ladder_dir: str | Path, allow_nonmonotone: bool = False) -> dict:
    fit_cfg, param_count = read_spec_settings(ladder_dir)
    rungs = load_rungs(ladder_dir, param_count)
    allow = allow_nonmonotone or fit_cfg.allow_nonmonotone
    reversals: list[str] = []
    warnings = check_rungs(rungs, fit_cfg.metric, fit_cfg.irreducible, allow, fit_cfg.noise_floor, reversals)
    groups = group_sizes(rungs)
    noise = measure_noise(rungs, fit_cfg.metric, fit_cfg.noise_floor)
    C = [r.flops for r in rungs]
    report = {"dir": str(ladder_dir), "metric": fit_cfg.metric, "param_count": param_count,
              "rungs": [{**r.identity(), "final": r.final(fit_cfg.metric)} for r in rungs],
              "sizes": size_summary(rungs, fit_cfg.metric), "noise": noise.to_json(),
              "settings": {"bootstrap": fit_cfg.bootstrap, "noise_floor": fit_cfg.noise_floor,
                           "confidence": fit_cfg.confidence, "irreducible": fit_cfg.irreducible,
                           "seed": fit_cfg.seed, "allow_nonmonotone": allow}, "notes": reversals, "compute": {},
              "warnings": warnings}
    if len(groups) < 3:
        report["notes"].append("2 sizes: E pinned to 0 in L(C) (3 parameters need at least 3 sizes)")
    for metric in _metrics(rungs, fit_cfg.metric):
        main = metric == fit_cfg.metric
        pinned = 0.0 if len(groups) < 3 else None
        if main and fit_cfg.irreducible != "free":
            pinned = float(fit_cfg.irreducible)
        reps = fit_cfg.bootstrap if main else min(fit_cfg.bootstrap, SECONDARY_REPLICATES)
        if not main:
            try:
                check_rungs(rungs, metric, "free", allow_nonmonotone=True)
            except GlassroomError as exc:
                report["notes"].append(f"{metric} not fitted: {exc}")
                continue
        L = [r.final(metric) for r in rungs]
        metric_noise = noise if main else seed_noise([[r.final(metric) for r in g] for g in groups],
                                                     fit_cfg.noise_floor)
        fit = fit_endpoints(C, L, pinned, reps, metric_noise.sigma, fit_cfg.confidence, fit_cfg.seed)
        if main:
            warnings.extend(fit.warnings)
            report["notes"].extend(fit.notes)
        llo = None
        if main or metric == "eval/macro/bpb":
            llo = leave_largest_size_out(C, L, pinned, reps, metric_noise.sigma, fit_cfg.confidence, fit_cfg.seed)
        if llo is not None:
            llo.pop("fit")
        report["compute"][metric] = {**fit.to_json(), "leave_largest_out": llo, "noise": metric_noise.to_json()}
    N, D = [r.params for r in rungs], [r.tokens for r in rungs]
    ok, why = identifiable_nd([g[0].params for g in groups], [g[0].tokens for g in groups])  # sizes, not runs
    if ok:
        L = [r.final(fit_cfg.metric) for r in rungs]
        nd = fit_law(LAW_ND, {"N": N, "D": D}, L)
        bootstrap(nd, {"N": N, "D": D}, L, None, fit_cfg.bootstrap, noise.sigma, fit_cfg.confidence, fit_cfg.seed)
        report["params_tokens"] = nd.to_json()
        warnings.extend(nd.warnings)
        report["notes"].extend(nd.notes)
    else:
        report["params_tokens"] = None
        report["notes"].append(f"L(N,D) not fitted: {why.replace('rungs', 'sizes')}")
    curve = fit_curves(rungs, fit_cfg.metric, fit_cfg, noise)
    warnings.extend(curve.warnings)
    report["notes"].extend(curve.notes)
    report["curve"] = curve.to_json()
    report["reliable"] = not warnings
    return report


def _param_line(fit: dict) -> str:
    parts = []
    for name, value in fit["params"].items():
        if name in fit["pinned"]:
            parts.append(f"{name} = {value:.4g} (pinned)")
        else:
            lo, hi = fit["intervals"].get(name, (value, value))
            parts.append(f"{name} = {value:.4g} [{lo:.4g}, {hi:.4g}]")
    return ", ".join(parts)


def format_fit(report: dict) -> str:
    conf = report["settings"]["confidence"]
    runs, sizes = len(report["rungs"]), len(report["sizes"])
    what = f"{runs} rungs" if runs == sizes else f"{sizes} sizes ({runs} runs)"
    lines = [f"ladder {report['dir']}: {what}, N = {report['param_count'].replace('_', ' ')} "
             f"parameters; intervals: {conf:.0%} bootstrap" + ("" if report["reliable"] else "; UNRELIABLE (warnings below)")]
    for size in report["sizes"]:
        finals = size["finals"]
        value = (f"{finals[0]:.4f}" if len(finals) == 1 else
                 f"mean {size['mean']:.4f} of {len(finals)} seeds: " + ", ".join(f"{v:.4f}" for v in finals))
        lines.append(f"  {size['name']:>14}  N {size['params']:.3g}  tokens {size['tokens']:.3g}  "
                     f"FLOPs {size['flops']:.3g}  {report['metric']} {value}")
    noise = report["noise"]
    lines.append(f"seed noise: {noise['sigma']:.3g} in log loss, " +
                 (f"measured from the seeds of {noise['sizes']} size(s) ({noise['dof']} dof)"
                  if noise["source"] == "measured" else "stated (fit.noise_floor; no size has two seeds)"))
    for metric, fit in report["compute"].items():
        lines.append(f"{metric}: L(C) = {fit['formula']}: {_param_line(fit)}  (dof {fit['dof']})")
        llo = fit["leave_largest_out"]
        if llo:
            mean = " (mean of its seeds)" if len(llo.get("actual_losses") or []) > 1 else ""
            lines.append(f"    leave-largest-out: predicted {llo['predicted_loss']:.4f}, actual{mean} {llo['actual_loss']:.4f}, "
                         f"error {llo['relative_error']:+.2%}, {'covered' if llo['covered'] else 'not covered'}")
    if report["params_tokens"]:
        lines.append(f"L(N,D) = {report['params_tokens']['formula']}: {_param_line(report['params_tokens'])}")
    curve = report["curve"]
    lines.append(f"curve law {curve['formula']} ({curve['n_points']} points): {_param_line(curve)}")
    lines.extend(f"note: {n}" for n in report["notes"])
    lines.extend(f"warning: {w}" for w in report["warnings"])
    return "\n".join(lines)
