"""`glassroom metrics RUN_DIR [--name NAME] [--json]`: list a run's metrics or print one series."""

from __future__ import annotations

import argparse
import json
import math

from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Without --name, list the metric names of a run with their number of points and latest value.
With --name, print that series as JSON [[step, value], ...] (null where a value was not finite).
Reads the run store; safe while the run is training.

examples:
  glassroom metrics lab/runs/dense
  glassroom metrics lab/runs/dense --name train/loss
"""


def register(sub) -> None:
    p = new_command(sub, "metrics", "list a run's metrics or print one series as JSON", DESCRIPTION)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--name", help="a metric name such as train/loss or eval/macro/bpb")
    p.add_argument("--json", action="store_true", help="print the list of names as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sqlite3

    from glassroom.observe.store import store_path

    try:
        return _show(args)
    except FileNotFoundError as exc:
        raise GlassroomError(str(exc)) from None
    except sqlite3.DatabaseError as exc:  # not a database, malformed, missing tables, busy for too long
        raise GlassroomError(f"{store_path(args.run_dir)}: cannot be read ({exc}); the run store is damaged "
                             "or is not a glassroom run store") from None


def _show(args: argparse.Namespace) -> int:
    from glassroom.observe.store import StoreReader

    with StoreReader(args.run_dir) as reader:
        names = reader.names()
        if args.name is None:
            if args.json:
                print(json.dumps(names))
                return 0
            for name in names:
                step, value = reader.latest(name)
                print(f"{name:48s} last step {step:>8d}  {value:.6g}")
            return 0
        if args.name not in names:
            import difflib

            close = difflib.get_close_matches(args.name, names, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise GlassroomError(f"{args.run_dir}: no metric named {args.name}{hint}")
        steps, values = reader.series(args.name)
        print(json.dumps([[int(s), None if math.isnan(v) else float(v)] for s, v in zip(steps, values)]))
    return 0
