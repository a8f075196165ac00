"""`glassroom ladder ...`: plan a scaling ladder, fit the rungs, backtest the fit.

`ladder` is a group: each sub-subcommand is a (register, run) pair in SUBCOMMANDS below. To add
one (e.g. `run`), write register_X(sub) and run_X(args) and append (register_X, run_X).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
A scaling ladder: small models of one recipe that predict a big ("hero") run before it starts.

  plan      SPEC: every rung and the hero: name, parameters, tokens, FLOPs, time on your hardware
  run       SPEC --out DIR: train the rungs as cached pipeline steps (--hero: and the hero)
  fit       DIR: scaling laws fitted on the finished rungs, with bootstrap intervals
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
    from glassroom.model.accounting import GPU_PEAK_BF16

    p = new_command(sub, "plan", "rungs and hero of a ladder spec: size, tokens, FLOPs, time",
                    "Expand a ladder spec by its rules and report each rung and the hero: name (total-Aactive\n"
                    "parameters), layers, N, tokens, FLOPs, steps, batch, lr and the estimated time. Without\n"
                    "--gpu the time is for this CPU (measured matmul peak x MFU 0.15, or --cpu-flops).\n\n"
                    "example:\n  glassroom ladder plan experiments/ladder-story.yaml --gpu h200 --gpus 704 --mfu 0.22")
    p.add_argument("spec", metavar="SPEC", help="ladder spec YAML (see experiments/ladder-*.yaml)")
    p.add_argument("--gpu", choices=sorted(GPU_PEAK_BF16), help="GPU type (default: this CPU)")
    p.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    p.add_argument("--mfu", type=float, help="model FLOP utilisation, 0-1 (default 0.4 on GPUs, 0.15 on CPU)")
    p.add_argument("--cpu-flops", type=float, metavar="F", help="CPU peak FLOP/s instead of measuring it")
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
    p = new_command(sub, "fit", "fit scaling laws on a ladder's finished rungs",
                    "Fit L(C) = E + A*C^-alpha on every rung's final value of the spec's metric, of\n"
                    "eval/macro/bpb and of each domain's loss and bpb; L(N, D) when the rungs vary N and D\n"
                    "separately; and the schedule-aware curve law on the whole curves. Parameters come with\n"
                    "bootstrap intervals, and L(C) with its leave-largest-out extrapolation error.\n"
                    "DIR holds DIR/rungs/<name>/ (config.yaml + store.sqlite) and optionally DIR/spec.yaml.\n"
                    "Refused (exit 2, one line naming the rungs): a final loss that is NaN, infinite, zero or\n"
                    "negative, two rungs at the same compute, fewer curve points than parameters, and a bigger\n"
                    "rung no better than a smaller one (unless --allow-nonmonotone: then `reliable: false`).\n\n"
                    "example:\n  glassroom ladder fit ladders/demo")
    p.add_argument("dir", metavar="DIR", help="ladder folder (docs/ladder.md: layout)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--allow-nonmonotone", action="store_true",
                   help="fit even when a bigger rung ends no better than a smaller one; the report says unreliable")
    p.set_defaults(run=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from glassroom.ladder.report import fit_report, format_fit

    report = fit_report(args.dir, args.allow_nonmonotone)
    print(json.dumps(report) if args.json else format_fit(report))
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
    p.add_argument("--jobs", type=int, default=1, help="rungs trained at once (default 1)")
    p.add_argument("--force", action="append", default=[], metavar="NAME", help="retrain this step and what follows")
    p.set_defaults(run=run_run)


def run_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.config import load_yaml
    from glassroom.data.shards import read_manifest
    from glassroom.ladder.run import ladder_steps, run_experiment, write_experiment, write_ladder_folder
    from glassroom.ladder.spec import load_spec

    if args.jobs < 1:
        raise GlassroomError(f"--jobs: must be at least 1, got {args.jobs}")
    spec = load_spec(args.spec)
    raw = load_yaml(args.spec)
    data = str(Path(args.data).resolve()) if args.data else None
    read_manifest(data or spec.base.get("data", {}).get("path", ""))  # a clear error before anything trains
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: is a file, expected a folder")
    rung_steps, later = ladder_steps(spec, raw, data, with_hero=args.hero)
    names = [step.name for step in rung_steps + later]
    for name in args.force:  # before anything is written to --out
        if name not in names:
            raise GlassroomError(f"--force {name}: no such step; the steps are: {', '.join(names)}")
    experiment = write_experiment(out, Path(args.spec), data, args.hero)
    graph, result = run_experiment(experiment, out, args.jobs, args.force or None)
    rungs = [node for node in graph if node.step.kind == "rungs"]
    write_ladder_folder(out, raw, [node.output for node in rungs])
    if not result.ok:
        print(f"ladder: {len(result.failed)} step(s) failed, {len(result.blocked)} blocked; rerun to retry",
              file=sys.stderr)
        return 1
    print(f"ladder: {len(rungs)} rungs in {out}; next: glassroom ladder fit {out}")
    return 0


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
                    "It cannot catch someone who rewrote the whole chain and seal: keep a copy of the digest\n"
                    "(docs/ladder.md, \"The sealed prediction\").\n\n"
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
    store = run_dir / "store.sqlite"
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
        raise GlassroomError(f"{run_dir / 'store.sqlite'}: unreadable run store ({exc})") from None

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


SUBCOMMANDS = [(register_plan, run_plan), (register_run, run_run), (register_fit, run_fit),
               (register_backtest, run_backtest), (register_verify, run_verify)]
