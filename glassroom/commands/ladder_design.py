"""`glassroom ladder design SPEC`: which ladder predicts the hero to a target accuracy for the least compute.

A (register_design, run_design) pair for glassroom/commands/ladder.py's SUBCOMMANDS; the work is in
glassroom/ladder/design.py, the method and figures in docs/ladder-design.md.
"""

from __future__ import annotations

import argparse
import json
import math

from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Before a ladder's compute is spent: simulate candidate ladders (which dial values, how many rungs,
seeds per rung, eval_sequences per evaluation) under a law and the seed noise, fit each simulated
ladder with the fitter of `glassroom ladder predict` (foresight), and report the hero's prediction
error (median and 90th percentile of |relative error|, with the median's Monte-Carlo interval) and
each ladder's compute (rungs x seeds x (training + evaluations)) as a fraction of the hero's.
Recommends the cheapest ladder whose median error meets --target-error within --budget, and prints
the spec lines to use; if none does, says so and what would be needed (exit 0).

Rungs are planned by the spec's own rules (as `ladder plan` / `ladder run`). The truth is a
published law (chinchilla: Hoffmann et al. 2022; besiroglu: Besiroglu et al. 2024, arXiv 2404.10102),
with N and D scaled so the smallest possible rung has 70M parameters, or the law fitted on a ladder
folder or results file (--law DIR|FILE), whose repeated seeds also give the noise.
Noise: --noise, else measured from --law's seeds, else the spec's fit.noise_floor.

example:
  glassroom ladder design experiments/ladder-demo.yaml --target-error 1% --budget 0.8
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
    p.add_argument("--simulations", type=int, default=200, metavar="N",
                   help="simulated ladders per confirmed candidate, at least 10 (default 200; screens use N/8)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the simulations (default 0)")
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
    if args.simulations > 100_000:
        raise GlassroomError(f"--simulations: at most 100000, got {args.simulations}")
    if args.seed < 0:
        raise GlassroomError(f"--seed: must be zero or more, got {args.seed}")
    return {"target": target, "budget": budget, "noise": noise, "eval_noise": eval_noise}


def run_design(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.ladder.design import design, format_design
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
                    eval_noise=checked["eval_noise"])
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
