"""`glassroom ladder design SPEC`: which ladder predicts the hero to a target accuracy for the least compute.

A (register_design, run_design) pair for glassroom/commands/ladder.py's SUBCOMMANDS; the work is in
glassroom/ladder/design.py, the method and figures in docs/ladder-design.md.
"""

from __future__ import annotations

import argparse
import json
import math

from glassroom.commands import new_command, whole
from glassroom.errors import GlassroomError

MAX_SIMULATIONS = 10_000  # per candidate; the default 400 takes seconds, 10000 about two minutes on the demo

DESCRIPTION = """\
Before a ladder's compute is spent: simulate candidate ladders (which dial values, how many rungs,
seeds per rung, eval_sequences per evaluation) under a law and the seed noise, fit each simulated
ladder with the fitter of `glassroom ladder predict` (foresight), and report the hero's prediction
error (median and 90th percentile of |relative error|, with the median's Monte-Carlo interval) and
each ladder's compute (rungs x seeds x (training + evaluations)) as a fraction of the hero's.
Recommends the cheapest ladder whose median error meets --target-error within --budget, and prints
the spec lines to use; if none does, says so and what would be needed (exit 0).

Rungs are planned by the spec's own rules (as `ladder plan` / `ladder run`). The truth is a
published law (chinchilla: Hoffmann et al. 2022, arXiv 2203.15556; besiroglu: Besiroglu et al. 2024,
arXiv 2404.10102),
with N and D scaled so the smallest possible rung has 70M parameters, or the law fitted on a ladder
folder or results file (--law DIR|FILE), whose repeated seeds also give the noise.
Noise: --noise, else measured from --law's seeds, else the spec's fit.noise_floor.
Method, options and calibration figures: docs/ladder-design.md.

example:
  glassroom ladder design experiments/ladder-demo.yaml --target-error 1%
  glassroom ladder design experiments/ladder-demo.yaml --target-error 1% --smallest 16 --noise 0.7%
  glassroom ladder design experiments/ladder-story.yaml --hero 1e24 --law besiroglu --json
"""


def register_design(sub) -> None:
    p = new_command(sub, "design", "simulate candidate ladders; the cheapest that predicts the hero well enough",
                    DESCRIPTION)
    p.add_argument("spec", metavar="SPEC", help="ladder spec YAML (see experiments/ladder-*.yaml)")
    p.add_argument("--hero", metavar="D_MODEL|FLOPS",
                   help="the hero: a d_model (multiple of shape.head_dim) or FLOPs such as 1e24 (default: the spec's)")
    p.add_argument("--target-error", default="0.5%", metavar="FRACTION",
                   help="median |relative error| at the hero to reach: 0.5%% or 0.005 (default 0.5%%)")
    p.add_argument("--budget", default="1", metavar="FRACTION",
                   help="most ladder compute, as a fraction of the hero's (default 1: 100%%)")
    p.add_argument("--noise", metavar="FRACTION",
                   help="seed-to-seed SD of a run's final loss, e.g. 1%% (default: measured from --law's seeds, "
                        "else the spec's fit.noise_floor)")
    p.add_argument("--eval-noise", default="0", metavar="FRACTION",
                   help="SD of the eval set's sampling error per size at the spec's eval_sequences, shared by a "
                        "size's seeds (default 0: then no eval_sequences multiplier is tried)")
    p.add_argument("--law", default="chinchilla", metavar="LAW",
                   help="truth to simulate: chinchilla, besiroglu, a ladder folder or a results file (default chinchilla)")
    p.add_argument("--smallest", type=whole, metavar="D_MODEL",
                   help="smallest dial value a candidate may use (default: half the spec's smallest rung)")
    p.add_argument("--data", metavar="DATA_DIR",
                   help="dataset folder, for the domains each evaluation covers (default: the spec's base data.path)")
    p.add_argument("--simulations", type=whole, default=400, metavar="N",
                   help="simulated ladders per candidate, at least 10 (default 400); fewer: faster, wider MC intervals")
    p.add_argument("--seed", type=whole, default=0, help="random seed of the simulations (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_design)


def _check_args(args: argparse.Namespace) -> dict:
    from glassroom.ladder.design import parse_fraction

    target = parse_fraction(args.target_error, "--target-error")
    if not 0 < target < 1:
        raise GlassroomError(f"--target-error: must be above 0 and below 100%, got {args.target_error}")
    budget = parse_fraction(args.budget, "--budget")
    if not budget > 0:
        raise GlassroomError(f"--budget: must be above 0 (a fraction of the hero's compute), got {args.budget}")
    noise = None
    if args.noise is not None:
        noise = parse_fraction(args.noise, "--noise")
        if not 0 <= noise < 1:
            raise GlassroomError(f"--noise: must be at least 0 and below 100%, got {args.noise}")
    eval_noise = parse_fraction(args.eval_noise, "--eval-noise")
    if not 0 <= eval_noise < 1:
        raise GlassroomError(f"--eval-noise: must be at least 0 and below 100%, got {args.eval_noise}")
    if args.simulations < 10:
        raise GlassroomError(f"--simulations: at least 10, got {args.simulations}")
    if args.simulations > MAX_SIMULATIONS:
        raise GlassroomError(f"--simulations: at most {MAX_SIMULATIONS}, got {args.simulations}")
    if args.smallest is not None and args.smallest < 1:
        raise GlassroomError(f"--smallest: must be a positive d_model, got {args.smallest}")
    if args.seed < 0:
        raise GlassroomError(f"--seed: must be zero or more, got {args.seed}")
    return {"target": target, "budget": budget, "noise": noise, "eval_noise": eval_noise}


def run_design(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.ladder.design import design
    from glassroom.ladder.spec import load_spec
    from glassroom.ladder.synthetic import TRUTHS

    checked = _check_args(args)
    if args.law not in TRUTHS and not Path(args.law).exists():
        raise GlassroomError(f"--law {args.law}: not {', '.join(sorted(TRUTHS))}, and no such ladder folder "
                             "or results file")
    spec_path = Path(args.spec)
    if not spec_path.is_file():
        raise GlassroomError(f"{spec_path}: {'is a folder' if spec_path.is_dir() else 'no such file'}, "
                             "expected a ladder spec YAML")
    report = design(load_spec(spec_path), hero=args.hero, target=checked["target"], budget=checked["budget"],
                    noise=checked["noise"], law=args.law, simulations=args.simulations, seed=args.seed,
                    eval_noise=checked["eval_noise"], data=args.data, smallest=args.smallest)
    if args.json:
        print(json.dumps(_clean(report), allow_nan=False))
    else:
        print(format_design(report))
    return 0


def _clean(x):
    """JSON-ready: non-finite floats (a failed fit's error) become null, numpy scalars plain numbers."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# ----------------------------------------------------------------------------- report


def _pct(x: float) -> str:
    return "failed" if not math.isfinite(x) else f"{x:.2%}"


def _row(c: dict, key: str = "search") -> str:
    s = c["result"][key]
    lo, hi = s["median_interval"]
    seeds = ",".join(map(str, c["seeds"])) if isinstance(c["seeds"], list) else str(c["seeds"])
    return (f"  {str(c['rungs']):<26} {seeds:>5} {'x' + str(c['eval_multiplier']):>5} "
            f"{c['span_compute']:>7.3g}x {c['cost_fraction']:>8.2%} {_pct(s['median']):>7} "
            f"[{_pct(lo)}, {_pct(hi)}] {_pct(s['p90']):>7}"
            + (f"   fresh: {_pct(c['result']['confirmed']['median'])}" if c["result"].get("confirmed") else ""))


def format_design(report: dict) -> str:
    h, t, n, ev = report["hero"], report["truth"], report["noise"], report["eval_noise"]
    truth = (f"{t['name']} (published law; N, D x {t['scale']:.3g})" if t["kind"] == "published"
             else f"{t['law']} fitted on {t['source']} ({t['note']})")
    out = [f"ladder design {report['spec']}: hero {h['name']} (d_model {h['d_model']}, {h['flops']:.3g} FLOPs); "
           f"target median |error| {report['target_error']:.2%}, budget {report['budget']:.3g} x the hero's compute",
           f"truth: {truth}; seed noise {n['sigma']:.3g}, {n['used']}; eval noise {ev['sigma']:.3g} at "
           f"eval_sequences {ev['at_eval_sequences']}; eval compute for {ev['domains_note']}",
           f"{report['candidates']} candidate ladders from dial values {report['dial_values']} "
           f"({report['within_budget']} within budget), {report['simulations']} simulated ladders each, "
           "fitted by foresight as `ladder predict` fits",
           f"  {'rungs':<26} {'seeds':>5} {'evals':>5} {'span':>8} {'cost':>8} {'median':>7} {'(95% MC)':>17} "
           f"{'p90':>7}"]
    mine = report["spec_ladder"]
    if mine:
        out.append("the spec's ladder:")
        out.append(_row(mine))
    out.append("cheapest for each error level (within budget):")
    out += [_row(c) for c in report["frontier"]]
    rec = report["recommended"]
    if rec:
        f = rec["result"]["confirmed"]
        lo, hi = f["median_interval"]
        out.append(f"recommended: {rec['names'][0]} .. {rec['names'][-1]} ({len(rec['rungs'])} rungs, "
                   f"{rec['span_compute']:.3g}x compute span), {rec['seeds']} seed(s), eval_sequences "
                   f"x{rec['eval_multiplier']}, {rec['cost_fraction']:.2%} of the hero's compute")
        out.append(f"  expected |error| at the hero (fresh {f['simulations']} simulations): median {_pct(f['median'])} "
                   f"(95% MC [{_pct(lo)}, {_pct(hi)}]), 90th percentile {_pct(f['p90'])}; against one measured "
                   f"hero run (its own seed noise too): median {_pct(f['vs_one_hero_run']['median'])}")
        out.append("  spec lines:  " + "   ".join(rec["spec_lines"]))
    else:
        b = report["best_within_budget"]
        s = b["result"]["search"]
        out.append(f"NO candidate within budget {report['budget']:.3g} reaches a median |error| of "
                   f"{report['target_error']:.2%}; the best, {b['rungs']} with {b['seeds']} seed(s), gets "
                   f"{_pct(s['median'])} for {b['cost_fraction']:.2%} of the hero")
        c = report["cheapest_beyond_budget"]
        if c:
            f = c["result"]["confirmed"]
            out.append(f"  needed: --budget {c['cost_fraction']:.3g} for {c['rungs']} with {c['seeds']} seed(s) "
                       f"(median {_pct(f['median'])}, p90 {_pct(f['p90'])}); spec lines:  " + "   ".join(c["spec_lines"]))
        else:
            out.append("  no candidate reaches it at any budget")
        if report["bias_bound"]:
            out.append(f"  most of that error is bias (median signed error {s['bias']:+.2%}), not noise: the truth "
                       "departs from the fitted law family (or from a pinned fit.irreducible); more seeds will not fix it")
        if report["noise_needed_estimate"]:
            out.append(f"  or a seed noise of about {report['noise_needed_estimate']:.2g} instead of {n['sigma']:.3g} "
                       "(errors scale about linearly with the noise; an estimate, not simulated)")
    return "\n".join(out)
