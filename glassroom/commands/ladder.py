"""`glassroom ladder ...`: plan a scaling ladder, fit the rungs, backtest the fit.

`ladder` is a group: each sub-subcommand is a (register, run) pair in SUBCOMMANDS below. To add
one (e.g. `run`), write register_X(sub) and run_X(args) and append (register_X, run_X).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict

from glassroom import numbers
from glassroom.commands import new_command, whole, number
from glassroom.commands.ladder_design import register_design, run_design
from glassroom.errors import GlassroomError
from glassroom.ladder import LAW_KEYS
from glassroom.model.accounting import GPU_MEMORY_GIB, GPU_PEAK_BF16
from glassroom.numbers import shown
from glassroom.observe.run_folder import store_path
from glassroom.units import parse_count

DESCRIPTION = """\
A scaling ladder: small models of one recipe that predict a big ("hero") run before it starts.

  plan      SPEC: every rung and the hero: name, parameters, tokens, FLOPs, time on your hardware
  design    SPEC: which ladder (span, rungs, seeds) predicts the hero to a target error for the least compute
  run       SPEC --out DIR: train the rungs as cached pipeline steps (--hero: and the hero)
  fit       DIR | --results FILE: scaling laws fitted on the finished rungs or a results file
  predict   (LADDER_DIR | --results FILE) --params N --tokens D: the loss of any size, with an interval
  backtest  DIR: fit on all rungs but the largest and predict it
  verify    RUN_DIR: check the hero's sealed prediction and the run's chained journal

docs/ladder.md explains the spec, the laws, the fitting method and the folder layout.

example:
  glassroom ladder plan experiments/ladder-demo.yaml
  glassroom ladder plan experiments/ladder-story.yaml --gpu h200 --gpus 704 --mfu 0.22
  glassroom ladder verify lab/runs/hero-bbaafd2d
"""


def register(sub) -> None:
    p = new_command(sub, "ladder", "plan, fit and backtest scaling ladders", DESCRIPTION)
    p.set_defaults(run=lambda args: _no_subcommand(p))
    ladder_sub = p.add_subparsers(dest="ladder_command", metavar="SUBCOMMAND")
    for reg, _ in SUBCOMMANDS:
        reg(ladder_sub)


def _no_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# ----------------------------------------------------------------------------- plan


def register_plan(sub) -> None:
    p = new_command(sub, "plan", "rungs and hero of a ladder spec: size, tokens, FLOPs, time",
                    "Expand a ladder spec by its rules and report each rung and the hero: name (total-Aactive\n"
                    "parameters), layers, N, tokens, FLOPs, steps, batch, lr and the estimated time. Without\n"
                    "--gpu the time is for this CPU (measured matmul peak x MFU 0.15, or --cpu-flops).\n\n"
                    "example:\n  glassroom ladder plan experiments/ladder-story.yaml --gpu h200 --gpus 704 --mfu 0.22")
    p.add_argument("spec", metavar="SPEC", help="ladder spec YAML (see experiments/ladder-*.yaml)")
    p.add_argument("--gpu", choices=sorted(GPU_PEAK_BF16), help="GPU type (default: this CPU)")
    p.add_argument("--gpus", type=whole, default=1, help="number of GPUs (default 1)")
    p.add_argument("--mfu", type=number, help="model FLOP utilisation, 0-1 (default 0.4 on GPUs, 0.15 on CPU)")
    p.add_argument("--cpu-flops", type=number, metavar="F", help="CPU peak FLOP/s instead of measuring it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from glassroom.ladder.plan import format_plan, plan_ladder
    from glassroom.ladder.spec import load_spec

    if args.gpus < 1:
        raise GlassroomError(f"--gpus: must be at least 1, got {args.gpus}")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise GlassroomError(f"--mfu: must be above 0 and at most 1, got {args.mfu}")
    if args.cpu_flops is not None and not (math.isfinite(args.cpu_flops) and args.cpu_flops > 0):
        raise GlassroomError(f"--cpu-flops: must be a positive finite number, got {args.cpu_flops}")
    report = plan_ladder(load_spec(args.spec), args.gpu, args.gpus, args.mfu, args.cpu_flops)
    if not math.isfinite(report["hero"]["seconds"]):  # a denormal --mfu or --cpu-flops
        raise GlassroomError(f"--mfu / --cpu-flops: {report['hardware']['flops_per_s']:.3g} FLOP/s is too small "
                             "to time a run (the hero would take forever)")
    print(json.dumps(report) if args.json else format_plan(report))
    return 0


# ----------------------------------------------------------------------------- fit


def register_fit(sub) -> None:
    p = new_command(sub, "fit", "fit scaling laws on a ladder's finished rungs or a results file",
                    "Fit L(C) = E + A*C^-alpha on every rung's final value of the spec's metric, of\n"
                    "eval/macro/bpb and of each domain's loss and bpb; L(N, D) when the rungs vary N and D\n"
                    "separately; and the schedule-aware curve law on the whole curves. Parameters come with\n"
                    "bootstrap intervals, and L(C) with its leave-largest-out extrapolation error.\n"
                    "DIR holds DIR/rungs/<name>/ (config.yaml + store.sqlite) and optionally DIR/spec.yaml.\n"
                    "Refused (exit 2, one line naming the rungs): a final loss that is NaN, infinite, zero or\n"
                    "negative, two rungs at the same compute, fewer curve points than parameters, and a bigger\n"
                    "rung no better than a smaller one (unless --allow-nonmonotone: then `reliable: false`).\n"
                    "A term the fit dropped (a coefficient at its bound 0: E = 0, the curve law's size term\n"
                    "B = 0) is said as a `note:` line with what it means.\n\n"
                    "--results FILE instead fits a results file from anywhere (a paper's table, another lab's\n"
                    "runs): CSV or JSON lines with name, params, tokens, loss and optionally flops (else\n"
                    "6 * params * tokens), seed, and whole curves (step + schedule); docs/ladder-predict.md.\n"
                    "The law is L(N, D) when the sizes vary N and D separately, else L(C) (--law to choose);\n"
                    "with a total_params column (MoE runs) auto chooses among L(C), L(N,D), L(Nt,D) and\n"
                    "L(Neff,D) by leave-one-size-out error; repeated seeds of a size give the measured noise.\n\n"
                    "example:\n  glassroom ladder fit ladders/demo\n"
                    "  glassroom ladder fit --results experiments/results/chinchilla-besiroglu.csv --law ND --objective huber")
    p.add_argument("dir", metavar="DIR", nargs="?", help="ladder folder (docs/ladder.md: layout)")
    p.add_argument("--results", metavar="FILE", help="a results file (CSV or JSON lines) instead of DIR")
    p.add_argument("--law", choices=LAWS, help="with --results: auto (default), C for L(C), ND for L(N, D) on active "
                   "parameters, NtD on total parameters, NeffD with sparsity (docs/ladder-foresight.md)")
    p.add_argument("--noise", metavar="FRACTION", help="with --results: the stated seed-to-seed noise in log loss "
                   "(0.003 or 0.3%%; default 0.003), used unless repeated seeds measure it")
    p.add_argument("--objective", choices=OBJECTIVES, help="with --results: least-squares (default: of log loss, "
                   "foresight) or huber (Hoffmann et al.'s Huber delta 1e-3 of log loss, as papers fit)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--allow-nonmonotone", action="store_true",
                   help="fit even when a bigger rung ends no better than a smaller one; the report says unreliable")
    p.set_defaults(run=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from glassroom.ladder.report import fit_report, format_fit

    if args.results is not None or args.dir is None:
        return _fit_results(args)  # one line when both or neither
    for flag, value in (("--law", args.law), ("--noise", args.noise), ("--objective", args.objective)):
        if value is not None:
            raise GlassroomError(f"{flag}: only with --results FILE (a ladder folder uses its spec's fit: section)")
    report = fit_report(args.dir, args.allow_nonmonotone)
    print(json.dumps(report) if args.json else format_fit(report))
    return 0


LAWS = ("auto", *LAW_KEYS)
OBJECTIVES = ("least-squares", "huber")


def _fraction(flag: str, text, default: float, low_open: bool = False) -> float:
    """A fraction from `0.003`, `0.3%`; in [0, 1) (or (0, 1) when low_open); one line otherwise."""
    if text is None:
        return default
    raw = str(text).strip()
    try:
        value = numbers.option_float(raw[:-1]) / 100 if raw.endswith("%") else numbers.option_float(raw)
    except numbers.NumberError:
        raise GlassroomError(f"{flag}: {shown(text)} is not a number (e.g. 0.003 or 0.3%)") from None
    if not math.isfinite(value) or value < 0 or value >= 1 or (low_open and value == 0):
        raise GlassroomError(f"{flag}: must be {'above' if low_open else 'at least'} 0 and below 1, got {shown(text)}")
    return value


def _count(flag: str, text) -> float:
    try:
        value = parse_count(text)
    except ValueError:
        raise GlassroomError(f"{flag}: {shown(text)} is not a positive number (e.g. 7e10, 70B, 1.4T)") from None
    if not value > 0:
        raise GlassroomError(f"{flag}: must be above zero, got {text}")
    return value


def _settings(args: argparse.Namespace, results, confidence: float) -> dict:
    """The fit's settings: a ladder folder's spec fit: section where it has one, the options over it."""
    cfg = results.fit_settings
    stated = _fraction("--noise", args.noise, results.stated_noise if results.stated_noise is not None else 0.003)
    return {"law": args.law or "auto", "stated_noise": stated, "confidence": confidence,
            "irreducible": None if cfg is None or cfg.irreducible == "free" else float(cfg.irreducible),
            "bootstrap": cfg.bootstrap if cfg is not None else 200, "seed": cfg.seed if cfg is not None else 0}


def _predict(args: argparse.Namespace, results, st: dict, n: float, d: float, c, total=None) -> dict:
    """predicted_loss, lower, upper, interval, law, noise for (n, d[, c]) by the chosen objective."""
    if (args.objective or "least-squares") == "huber":
        from glassroom.ladder.results import huber_prediction

        if st["irreducible"] is not None:
            raise GlassroomError("--objective huber: the spec pins fit.irreducible; use least-squares")
        return huber_prediction(results.points, n, d, c, st["law"], st["stated_noise"], st["confidence"],
                                st["bootstrap"], st["seed"])
    from glassroom.ladder.foresight import fit_points

    fit = fit_points(results.points, law=st["law"], stated_noise=st["stated_noise"], irreducible=st["irreducible"],
                     bootstrap=st["bootstrap"], confidence=st["confidence"], seed=st["seed"])
    return {**fit.predict(n, d, c, total_params=total), "objective": "least-squares"}


def _curve_report(results, stated: float, confidence: float):
    if not results.curves:
        return None
    from glassroom.ladder.results import fit_curve_law

    fit = fit_curve_law(results.curves, noise=stated, confidence=confidence)
    return fit, {**fit.to_json(), "runs": len(results.curves)}


def _fit_results(args: argparse.Namespace) -> int:
    from glassroom.ladder.results import read_source

    if args.allow_nonmonotone:
        raise GlassroomError("--allow-nonmonotone: only with a ladder folder (a results file is fitted as it is)")
    results = read_source(args.results, args.dir)
    st = _settings(args, results, 0.95)
    largest = max(results.points, key=lambda p: p.flops)
    pred = _predict(args, results, st, largest.params, largest.tokens, largest.flops, largest.total_params)
    curve = _curve_report(results, st["stated_noise"], 0.95)
    from glassroom.ladder.results import compute_warnings

    report = {"source": results.summary(), "objective": pred["objective"], "law": pred["law"], "noise": pred["noise"],
              "warnings": compute_warnings(results.points) if pred["law"]["law"] == "L(C)" else [],
              "sigma": (pred.get("interval") or {}).get("sigma"), "why_law": pred.get("why_law"),
              "cross_validation": pred.get("cross_validation"), "curve": curve[1] if curve else None, "points": [asdict(p) for p in results.points]}
    if args.json:
        print(json.dumps(report))
        return 0
    print(_source_line(results))
    print(_law_lines(report))
    for w in report["warnings"]:
        print(f"warning: {w}")
    if curve:
        print(f"curve law {curve[1]['formula']} on {curve[1]['runs']} curves ({curve[1]['n_points']} points): "
              f"{_params_text(curve[1])}")
    return 0


def _source_line(results) -> str:
    s = results.summary()
    extra = f", {s['seeds']} seeds" if s["seeds"] > 1 else ""
    flops = f"; FLOPs = 6 N D for {s['flops_from_6nd']}" if s["flops_from_6nd"] else ""
    return (f"{s['source']}: {s['runs']} runs, {s['sizes']} sizes{extra}, N {s['params'][0]:.3g}..{s['params'][1]:.3g}, "
            f"D {s['tokens'][0]:.3g}..{s['tokens'][1]:.3g}, C {s['flops'][0]:.3g}..{s['flops'][1]:.3g}{flops}")


def _params_text(law: dict) -> str:
    parts = []
    for name, value in law["params"].items():
        lo_hi = law.get("intervals", {}).get(name)
        pinned = name in law.get("pinned", {})
        parts.append(f"{name} = {value:.4g}" + (" (pinned)" if pinned else f" [{lo_hi[0]:.4g}, {lo_hi[1]:.4g}]"
                                                 if lo_hi else ""))
    return ", ".join(parts)


def _law_lines(report: dict) -> str:
    from glassroom.ladder.laws import NAMES

    law = report["law"]
    lines = [f"{law['law']} = {law['formula']}: {_params_text(law)}"]
    noise = report.get("noise")
    if isinstance(noise, dict):
        how = (f"measured from repeated seeds ({noise['sizes']} sizes, dof {noise['dof']})"
               if noise["source"] == "measured" else "stated")
        unused = " (not used: the cases bootstrap resamples the runs themselves)" if noise.get("used") is False else ""
        lines.append(f"seed-to-seed noise {noise['sigma']:.3g} in log loss, {how}{unused}")
    used = (report.get("interval") or {}).get("sigma") or report.get("sigma")
    if isinstance(used, dict) and used.get("sigma") is not None:
        lines.append(f"noise in the interval: {used['sigma']:.3g} ({used['source']}"
                     + (f"; residual scatter {used['residual_sigma']:.3g}" if used.get("residual_sigma") else "") + ")")
    if report.get("why_law"):
        lines.append(f"law: {report['why_law']}")
    for key, row in (report.get("cross_validation") or {}).items():
        shown = f"{row['rms']:.2%}" if row.get("rms") is not None else f"not identifiable ({row.get('why')})"
        lines.append(f"  leave-one-size-out error of {NAMES[key]}: {shown}")
    for w in law.get("warnings", []) or []:
        lines.append(f"warning: {w}")
    for n in law.get("notes", []) or []:
        lines.append(f"note: {n}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- predict


def register_predict(sub) -> None:
    p = new_command(sub, "predict", "predict the loss of any size from a results file or a ladder folder",
                    "Fit the ladder's runs (a results file with --results, or a ladder folder's finished rungs)\n"
                    "and predict the final loss of a model of --params N non-embedding active parameters\n"
                    "trained on --tokens D tokens, with an interval at --confidence that carries the fit's\n"
                    "uncertainty (bootstrap) and the seed-to-seed noise of one run (measured from repeated\n"
                    "seeds, else stated: --noise, or the spec's fit.noise_floor). The law is L(N, D) when the\n"
                    "runs vary N and D separately, else L(C) on FLOPs (--flops, else 6 N D scaled like the\n"
                    "runs' own FLOPs); --law chooses. Numbers: 7e10, 70B, 1.4T.\n"
                    "Refused (exit 2, one line): a results file that is missing, a folder, empty, unparseable,\n"
                    "lacks a column, holds NaN/inf/zero/negative values, the same size and seed twice, or one\n"
                    "size only; --params / --tokens / --flops that are not positive numbers.\n"
                    "docs/ladder-predict.md has the file format and a worked example.\n\n"
                    "example:\n  glassroom ladder predict --results experiments/results/chinchilla-besiroglu.csv "
                    "--params 70B --tokens 1.4T --law ND --objective huber\n  glassroom ladder predict lab/ladders/demo-fit-e57c1925 --params 2e5 --tokens 2e6 --json")
    p.add_argument("dir", metavar="LADDER_DIR", nargs="?", help="ladder folder (or --results FILE)")
    p.add_argument("--results", metavar="FILE", help="a results file (CSV or JSON lines) instead of LADDER_DIR")
    p.add_argument("--params", required=True, metavar="N", help="non-embedding active parameters of the model to predict")
    p.add_argument("--tokens", required=True, metavar="D", help="its training tokens")
    p.add_argument("--flops", metavar="C", help="its training FLOPs (default: 6 N D, scaled like the runs' FLOPs)")
    p.add_argument("--total-params", metavar="NT", help="a MoE's every parameter (--params being its active ones); "
                   "needed by the laws on total parameters (NtD, NeffD)")
    p.add_argument("--law", choices=LAWS, help="auto (default): L(N, D) when identifiable, else L(C); for MoE runs "
                   "the identifiable law with the smallest leave-one-size-out error; C; ND; NtD; NeffD")
    p.add_argument("--noise", metavar="FRACTION", help="stated seed-to-seed noise in log loss (0.003 or 0.3%%), "
                   "used unless repeated seeds measure it (default: the spec's fit.noise_floor, else 0.003)")
    p.add_argument("--confidence", metavar="P", help="interval confidence (default 0.95, or the spec's)")
    p.add_argument("--objective", choices=OBJECTIVES, help="least-squares (default: of log loss, measured noise "
                   "and run intervals) or huber (Hoffmann et al.'s Huber delta 1e-3 of log loss, as papers fit; "
                   "interval for the law's value)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_predict)


def run_predict(args: argparse.Namespace) -> int:
    from glassroom.ladder.results import compute_warnings, predict_curve_final, read_source

    n, d = _count("--params", args.params), _count("--tokens", args.tokens)
    c = _count("--flops", args.flops) if args.flops is not None else None
    total = _count("--total-params", args.total_params) if args.total_params is not None else None
    if not math.isfinite(6.0 * n * d):
        raise GlassroomError(f"--params {args.params} x --tokens {args.tokens}: the compute overflows")
    confidence = _fraction("--confidence", args.confidence, 0.95, low_open=True)
    results = read_source(args.results, args.dir)
    if args.confidence is None and results.fit_settings is not None:
        confidence = results.fit_settings.confidence
    st = _settings(args, results, confidence)
    out = _predict(args, results, st, n, d, c, total)
    out["extrapolation"] = out["flops"] / max(p.flops for p in results.points)  # x the largest run's compute
    out["params_over_largest_run"] = n / max(p.params for p in results.points)
    out["source"] = results.summary()
    out["warnings"] = compute_warnings(results.points) if out["law"]["law"] == "L(C)" else []
    out["points"] = [asdict(p) for p in results.points]
    curve = _curve_report(results, st["stated_noise"], confidence)
    if curve:
        like = max(results.curves, key=lambda cv: cv.params * cv.tokens[-1])
        out["curve"] = {**predict_curve_final(curve[0], like, n, d, confidence), "law": curve[1]}
    if args.json:
        print(json.dumps(out))
        return 0
    interval = out.get("interval") or {}
    print(_source_line(results))
    print(f"predict N {n:.4g}, D {d:.4g}, C {out['flops']:.4g} FLOPs"
          f"{'' if c is not None else ' (6 N D, scaled like the runs)'}: "
          f"{out['extrapolation']:.3g}x the largest run's compute")
    print(f"  predicted loss {out['predicted_loss']:.4f}  [{out['lower']:.4f}, {out['upper']:.4f}] "
          f"({interval.get('confidence', confidence):.0%} interval for the {interval.get('kind', 'law')}; "
          f"objective {out['objective']})")
    print("  " + _law_lines(out).replace("\n", "\n  "))
    for w in out["warnings"]:
        print(f"  warning: {w}")
    if "curve" in out:
        cv = out["curve"]
        print(f"  curve law ({cv['schedule']} like {cv['like_run']}, {cv['steps']} steps): "
              f"{cv['predicted_loss']:.4f} [{cv['lower']:.4f}, {cv['upper']:.4f}]")
    return 0


# ----------------------------------------------------------------------------- backtest


def register_backtest(sub) -> None:
    p = new_command(sub, "backtest", "fit on all rungs but the largest and predict it",
                    "Fit the curve law on every rung but the largest, predict the largest's whole curve and\n"
                    "final value, and compare: predicted_loss, actual_loss, relative_error, covered (the\n"
                    "interval holds the actual value); with the L(C) endpoint fit as a cross-check.\n"
                    "Refused (exit 2, one line naming the rungs): a final loss that is NaN, infinite, zero or\n"
                    "negative, two rungs at the same compute, a bigger rung no better than a smaller one.\n\n"
                    "example:\n  glassroom ladder backtest ladders/demo --json")
    p.add_argument("dir", metavar="DIR", help="ladder folder with at least 3 finished rungs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--allow-nonmonotone", action="store_true",
                   help="backtest even when a bigger rung ends no better than a smaller one (marked unreliable)")
    p.set_defaults(run=run_backtest)


def run_backtest(args: argparse.Namespace) -> int:
    from glassroom.ladder.predict import backtest

    result = backtest(args.dir, allow_nonmonotone=args.allow_nonmonotone)
    if args.json:
        print(json.dumps(result))
        return 0
    lo, hi = result["interval"]
    print(f"backtest {args.dir}: fit on {', '.join(result['fitted_on'])}; predict {result['held_out']}")
    print(f"  {result['metric']}: predicted {result['predicted_loss']:.4f} [{lo:.4f}, {hi:.4f}], "
          f"actual {result['actual_loss']:.4f}, error {result['relative_error']:+.2%}, "
          f"{'covered' if result['covered'] else 'NOT covered'}")
    if result["curve_mean_abs_relative_error"] is not None:
        print(f"  whole curve: mean |error| {result['curve_mean_abs_relative_error']:.2%}")
    e = result["endpoint_check"]
    if e:
        print(f"  L(C) endpoint fit: predicted {e['predicted_loss']:.4f}, error {e['relative_error']:+.2%}, "
              f"{'covered' if e['covered'] else 'not covered'}")
    if not result["reliable"]:
        print("  UNRELIABLE:")
        for warning in result["warnings"]:
            print(f"  warning: {warning}")
    for note in result.get("notes", []):
        print(f"  note: {note}")
    return 0


# ----------------------------------------------------------------------------- run


def register_run(sub) -> None:
    p = new_command(sub, "run", "train a ladder's rungs as cached pipeline steps",
                    "Train every rung of a ladder spec, each an ordinary run (watch them with glassroom serve\n"
                    "DIR), as pipeline steps in DIR: a finished rung is reused, an interrupted one resumes from\n"
                    "its checkpoints, a changed rule retrains only the rungs it changes. Then DIR holds\n"
                    "spec.yaml and ladder.json for `ladder fit DIR` and `ladder backtest DIR`. With --hero it\n"
                    "also fits, preregisters the hero's predicted curve in its run store, and trains the hero.\n\n"
                    "example:\n  glassroom ladder run experiments/ladder-demo.yaml --out lab/ladder --data lab/data/demo")
    p.add_argument("spec", metavar="SPEC", help="ladder spec YAML")
    p.add_argument("--out", required=True, metavar="DIR", help="the ladder folder (pipeline workspace)")
    p.add_argument("--data", metavar="DATA_DIR", help="dataset folder (default: the spec's base data.path)")
    p.add_argument("--hero", action="store_true", help="also fit, preregister and train the hero")
    p.add_argument("--jobs", type=whole, default=1, help="rungs trained at once (default 1)")
    p.add_argument("--force", action="append", default=[], metavar="NAME", help="retrain this step and what follows")
    p.add_argument("--ray", metavar="ADDRESS", help="run the steps on the Ray cluster at ADDRESS (host:port, auto) or "
                   "`local`; each rung and the hero train as Ray Train workers (DIR and the data on a filesystem "
                   "every node sees)")
    p.add_argument("--gpus-per-worker", type=whole, default=0, metavar="G", help="with --ray: 1 gives each worker a GPU "
                   "and each rung the fewest workers its memory per GPU fits in, by `glassroom plan`'s count (default 0: CPUs)")
    p.add_argument("--gpu-memory", type=number, metavar="GIB", help="with --gpus-per-worker: memory per GPU in GiB "
                   "(default 141, an H200)")
    p.add_argument("--workers", type=whole, default=1, metavar="W", help="with --ray on CPUs: at most W workers "
                   "for each rung and the hero, the most its batch splits over (default 1)")
    p.add_argument("--cpus-per-worker", type=number, default=1, metavar="C", help="with --ray: CPUs each worker "
                   "holds, and its torch threads (default 1)")
    p.set_defaults(run=run_run)


def run_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.data.shards import read_manifest
    from glassroom.ladder.rungs import NO_PREDICTION_FILE
    from glassroom.steps.ladder import ladder_steps, run_experiment, write_experiment, write_ladder_folder
    from glassroom.ladder.spec import read_spec

    if args.jobs < 1:
        raise GlassroomError(f"--jobs: must be at least 1, got {args.jobs}")
    cluster = _cluster(args)
    spec, raw = read_spec(args.spec)  # read once: the steps and the ladder folder's spec.yaml come from it
    data = str(Path(args.data).resolve()) if args.data else None
    read_manifest(data or spec.base.get("data", {}).get("path", ""))  # a clear error before anything trains
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: is a file, expected a folder")
    rung_steps, later = ladder_steps(spec, raw, data, with_hero=args.hero, cluster=cluster)
    names = [step.name for step in rung_steps + later]
    for name in args.force:  # before anything is written to --out
        if name not in names:
            raise GlassroomError(f"--force {name}: no such step; the steps are: {', '.join(names)}")
    if cluster:
        for step in rung_steps + later[1:]:
            r = step.resources
            print(f"ladder: {step.name}: {r.workers} worker(s)" + (f" x {r.gpus_per_worker} GPU" if r.total_gpus
                  else f" x {r.cpus:g} CPU"), file=sys.stderr)
    experiment = write_experiment(out, Path(args.spec), data, args.hero, rung_steps + later, cluster)
    graph, result = run_experiment(experiment, out, args.jobs, args.force or None, ray=args.ray)
    rungs = [node for node in graph if node.step.kind == "rungs"]
    write_ladder_folder(out, raw, [node.output for node in rungs])
    if not result.ok:
        print(f"ladder: {len(result.failed)} step(s) failed, {len(result.blocked)} blocked; rerun to retry",
              file=sys.stderr)
        return 1
    fit = graph.nodes.get(f"{spec.name}-fit") if args.hero else None
    if fit is not None and (fit.output / NO_PREDICTION_FILE).is_file():
        missing = json.loads((fit.output / NO_PREDICTION_FILE).read_text())
        print(f"ladder: no prediction: {missing['reason']}\nway forward: {missing['way_forward']}", file=sys.stderr)
    print(f"ladder: {len(rungs)} rungs in {out}; next: glassroom ladder fit {out}")
    return 0


def _cluster(args) -> dict | None:
    """run_resources' settings for `ladder run --ray` (None without --ray); one-line errors."""
    if args.ray is None:
        if args.gpus_per_worker or args.gpu_memory is not None or args.workers != 1 or args.cpus_per_worker != 1:
            raise GlassroomError("--workers, --gpus-per-worker, --cpus-per-worker and --gpu-memory go with "
                                 "--ray ADDRESS|local")
        return None
    if not args.cpus_per_worker > 0:
        raise GlassroomError(f"--cpus-per-worker: must be above 0, got {args.cpus_per_worker:g}")
    if args.gpus_per_worker > 1:
        raise GlassroomError(f"--gpus-per-worker {args.gpus_per_worker}: a worker trains on one GPU; give 1 (the "
                             "worker count comes from each rung's memory)")
    if args.gpu_memory is not None and not args.gpus_per_worker:
        raise GlassroomError("--gpu-memory: goes with --gpus-per-worker 1")
    if args.gpu_memory is not None and args.gpu_memory <= 0:
        raise GlassroomError(f"--gpu-memory: must be above 0 GiB, got {args.gpu_memory:g}")
    if args.gpus_per_worker and args.workers != 1:
        raise GlassroomError("--workers: with --gpus-per-worker each rung's worker count comes from its memory per GPU")
    memory = (args.gpu_memory if args.gpu_memory is not None else GPU_MEMORY_GIB["h200"]) * 2**30
    return {"gpus_per_worker": args.gpus_per_worker, "workers": args.workers, "cpus_per_worker": args.cpus_per_worker,
            **({"gpu_memory": memory} if args.gpus_per_worker else {})}


# ----------------------------------------------------------------------------- verify

ALTERED_EXIT = 3  # the record was altered; 2 stays "bad input" (no such folder, no prediction)


def register_verify(sub) -> None:
    p = new_command(sub, "verify", "check a run's sealed prediction and chained journal",
                    "Check the preregistered prediction of a run (the hero): its SHA-256 seal recomputes\n"
                    "over the prediction, the rungs' config hashes and final metrics, the code commit and the\n"
                    "time of sealing; the journal is chained (digests not stripped) and the chain unbroken;\n"
                    "the prediction was sealed before the run started and before its first metric; and the\n"
                    "run's config.yaml is the hero it was made for. Exit 0 and one line when intact;\n"
                    f"exit {ALTERED_EXIT} and one line saying what was altered otherwise; exit 2 for bad input.\n"
                    "It cannot catch someone who rewrote the whole chain and seal: `glassroom verify RUN_DIR\n"
                    "--against COPY` checks the run against a head saved earlier (docs/verify.md).\n\n"
                    "example:\n  glassroom ladder verify lab/runs/hero-bbaafd2d")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run folder holding the prediction (its store.sqlite)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    import sqlite3
    import time
    from pathlib import Path

    from glassroom.observe.prediction import verify_run

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise GlassroomError(f"{run_dir}: {'is a file' if run_dir.exists() else 'no such folder'}, expected a run folder")
    store = store_path(run_dir)
    if store.exists() and not store.is_file():  # a folder, a FIFO (which would block), a device
        raise GlassroomError(f"{store}: not a regular file, expected the run's SQLite store")
    try:
        result = verify_run(run_dir)
    except FileNotFoundError:
        raise GlassroomError(f"{run_dir}: not a run (no store.sqlite)") from None
    except LookupError:
        raise GlassroomError(f"{run_dir}: holds no preregistered prediction (`glassroom ladder run --hero` "
                             "writes one into the hero's run folder)") from None
    except sqlite3.DatabaseError as exc:
        raise GlassroomError(f"{store_path(run_dir)}: unreadable run store ({exc})") from None

    def iso(when) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(when)))

    if result["ok"]:
        first = result["first_step_time"]
        after = f"before step 1 at {iso(first)}" if first is not None else "the run has not logged a step yet"
        line = (f"sealed prediction intact: sha256 {result['digest']} made {iso(result['created'])}, {after}; "
                f"journal: {result['chain']['chained']} events chained, head {result['chain']['head'][:16]}")
    else:
        line = f"altered: {result['problem']}"
    if args.json:
        print(json.dumps(result))
    else:
        print(line)
    return 0 if result["ok"] else ALTERED_EXIT


SUBCOMMANDS = [(register_plan, run_plan), (register_design, run_design), (register_run, run_run),
               (register_fit, run_fit), (register_predict, run_predict), (register_backtest, run_backtest),
               (register_verify, run_verify)]
