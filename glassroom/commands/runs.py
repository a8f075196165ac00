"""`glassroom runs DIR`: list the runs below a folder with status, step and last loss."""

from __future__ import annotations

import argparse
import json

from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
List every run below DIR (a folder holding store.sqlite) with its state (running, finished,
failed; 'stalled since step S' when a running run's heartbeat is older than its train.stall_after,
300 s by default), its step, its last training loss and its last macro bits per byte. Reads only; safe while runs train.

example:
  glassroom runs lab
"""


def register(sub) -> None:
    p = new_command(sub, "runs", "list the runs below a folder", DESCRIPTION)
    p.add_argument("root", metavar="DIR")
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.observe.runs import find_runs, summarize

    root = Path(args.root)
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "no such folder"
        raise GlassroomError(f"{root}: {what}; give the folder that holds the runs")
    runs = find_runs(root)
    if not runs:
        raise GlassroomError(f"{root}: no runs below this folder (a run is a folder with store.sqlite)")
    rows = [summarize(run_id, path) for run_id, path in sorted(runs.items())]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    width = max(len(r["id"]) for r in rows)
    states = [f"stalled since step {r['stalled_since_step']}" if r.get("stale") else r["state"] for r in rows]
    sw = max([9, *map(len, states)])
    print(f"{'run':{width}s}  {'state':{sw}s} {'step':>8s} {'loss':>8s} {'eval bpb':>9s}")
    for r, state in zip(rows, states):
        latest = r.get("latest", {})
        loss, bpb = latest.get("loss"), latest.get("eval_bpb")
        print(f"{r['id']:{width}s}  {state:{sw}s} {r['step'] or 0:>8d} "
              f"{'' if loss is None else f'{loss:.4f}':>8s} {'' if bpb is None else f'{bpb:.4f}':>9s}")
    return 0
