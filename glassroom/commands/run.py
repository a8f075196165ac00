"""`glassroom run EXPERIMENT`: run an experiment's steps, reusing every output already done."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from glassroom.commands import new_command, whole, number
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Run an experiment: a Python file whose `steps` list builds a graph of steps (data build, tokenizer,
training runs, evaluation, fits). Each step's output lives at <workspace>/<kind>/<name>-<version>,
where the version hashes the step's name, config and its inputs' versions: a rerun reuses every
done step, and changing one setting reruns only that step and what depends on it. Steps run in
subprocesses here (--jobs at a time) or as Ray tasks (--ray). Two runs of the same experiment can
go at once: a step runs in one of them and the other waits for it and reuses its output. A run that
was killed resumes where it stopped. docs/run.md has a worked example.

examples:
  glassroom run experiments/stdlib_tokens.py --dry-run
  glassroom run experiments/stdlib_tokens.py --workspace /data/ws --jobs 2
  glassroom run experiments/stdlib_tokens.py --force token-counts
  glassroom run experiments/stdlib_tokens.py --ray local
"""


def register(sub) -> None:
    p = new_command(sub, "run", "run an experiment's steps, reusing what is done (local or Ray)", DESCRIPTION)
    p.add_argument("experiment", metavar="EXPERIMENT", help="experiment file (.py) defining `steps`")
    p.add_argument("--dry-run", action="store_true", help="list each step as done, to run or running; run nothing")
    p.add_argument("--only", metavar="REGEX", help="run only steps whose name matches (and what they need)")
    p.add_argument("--force", action="append", default=[], metavar="NAME",
                   help="recompute step NAME and everything downstream even if done (repeatable)")
    p.add_argument("--workspace", metavar="DIR",
                   help="where outputs go (default $GLASSROOM_WORKSPACE, else ./workspace)")
    p.add_argument("--ray", metavar="local|ADDRESS",
                   help="run steps as Ray tasks: 'local' starts Ray on this machine, else a cluster address")
    p.add_argument("--jobs", type=whole, metavar="N", help="local runner: steps at once (default: CPU count)")
    p.add_argument("--progress-every", type=number, default=5.0, metavar="S",
                   help="seconds between progress lines (default 5)")
    p.set_defaults(run=run)


def workspace_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("GLASSROOM_WORKSPACE") or "workspace").absolute()


def run(args: argparse.Namespace) -> int:
    from glassroom.pipeline.experiment import load_experiment
    from glassroom.pipeline.provenance import run_context
    from glassroom.pipeline.scheduler import format_plan, plan_rows, run_graph

    if args.jobs is not None and args.jobs < 1:
        raise GlassroomError(f"--jobs: must be at least 1, got {args.jobs}")
    if not (math.isfinite(args.progress_every) and args.progress_every > 0):
        raise GlassroomError(f"--progress-every: must be a positive number of seconds, got {args.progress_every}")
    if args.ray is not None and args.jobs is not None:
        raise GlassroomError("--jobs applies to the local runner; with --ray, each step's Resources decide")
    workspace = workspace_dir(args.workspace)
    if workspace.exists() and not workspace.is_dir():
        raise GlassroomError(f"--workspace {workspace}: is a file, expected a folder")
    experiment = load_experiment(args.experiment)
    graph = experiment.graph(workspace)
    selected, forced = graph.select(args.only, args.force)

    if args.dry_run:
        print(format_plan(plan_rows(graph, selected, forced), args.experiment, workspace))
        return 0

    if args.ray is not None:
        from glassroom.pipeline.runner_ray import RayBackend

        backend = RayBackend(args.ray)
    else:
        from glassroom.pipeline.runner_local import LocalBackend

        backend = LocalBackend(args.jobs)
    workspace.mkdir(parents=True, exist_ok=True)
    result = run_graph(graph, backend, selected, forced, experiment_path=experiment.path,
                       context=run_context(experiment.path, experiment.sha256, experiment.source),
                       progress_every=args.progress_every)
    return 0 if result.ok else 1
