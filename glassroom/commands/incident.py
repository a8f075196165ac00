"""`glassroom incident open/update/resolve/list`: open an anomaly (or any step) of a run as an
incident, follow it up, write up what it was; list the incidents of a run or of a whole lab.
Each action is one journal event in the run store (glassroom.observe.incidents), safe while the
run trains."""

from __future__ import annotations

import argparse

from glassroom.cli import OneLineErrorParser
from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Incidents are the lab's answer next to an anomaly: open one at the step where something went wrong
(or from an anomaly event the detector wrote), add updates while you look into it, and resolve it
with a write-up of what it was. Each action is one event in the run's journal (chained like every
event; safe while the run trains); the dashboard draws incidents on the run's charts and timeline,
lists them on its incidents page (/incidents), and puts them in the Atom feeds. Texts are redacted
like notes when shown.

  glassroom incident open RUN_DIR --step S "title" [--anomaly EVENT_ID]   -> prints the new ID (inc-N)
  glassroom incident update RUN_DIR ID "text"
  glassroom incident resolve RUN_DIR ID "what it was"                     (once; then use update)
  glassroom incident list DIR [--json]                                    (DIR: a run or a folder of runs)

examples:
  glassroom incident open lab/runs/hero --step 84 "eval loss left the predicted band"
  glassroom incident open lab/rungs/37.4K --anomaly 18 "grad norm spike"
  glassroom incident update lab/runs/hero inc-1 "same data shard as the step-48 spike; checking it"
  glassroom incident resolve lab/runs/hero inc-1 "a shard of minified JS; dropped from the mixture"
  glassroom incident list lab
"""


def register(sub) -> None:
    p = new_command(sub, "incident", "open, update, resolve and list incidents of runs", DESCRIPTION)
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineErrorParser)
    p.set_defaults(run=_usage(p))

    o = actions.add_parser("open", help="open an incident at a step of a run (or at one of its anomalies)",
                           description="Open an incident at --step S, or at the step of anomaly --anomaly "
                           "EVENT_ID; prints its ID (inc-1, inc-2, ... per run).")
    _debug(o)
    o.add_argument("run_dir", metavar="RUN_DIR")
    o.add_argument("title", help="one line, at most 300 characters")
    o.add_argument("--step", metavar="S", help="the step it happened at (0 up to the newest step the run has reached; default: the anomaly's step)")
    o.add_argument("--anomaly", metavar="EVENT_ID",
                   help="the id of the anomaly event it follows up (an event of kind anomaly in this run)")
    o.set_defaults(run=run_open)

    for name, what, help_ in (("update", "text", "add an update to an incident (open or resolved)"),
                              ("resolve", "what it was", "resolve an incident with a write-up (once)")):
        a = actions.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        _debug(a)
        a.add_argument("run_dir", metavar="RUN_DIR")
        a.add_argument("incident", metavar="ID", help="inc-N (or N)")
        a.add_argument("text", metavar="TEXT", help=f"{what}; at most 20,000 characters")
        a.set_defaults(run=run_follow_up)

    ls = actions.add_parser("list", help="list the incidents of a run or of every run below a folder",
                            description="A table (run, id, step, status, title), or --json.")
    _debug(ls)
    ls.add_argument("dir", metavar="DIR", help="a run folder or a folder of runs")
    ls.add_argument("--json", action="store_true", help='print {"incidents": [{"run", "id", ...}]}')
    ls.set_defaults(run=run_list)


def _debug(parser) -> None:
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors")


def _usage(parser):
    def show(args: argparse.Namespace) -> int:
        raise GlassroomError("incident: give an action: open, update, resolve or list "
                             "(see glassroom incident --help)")
    return show


def run_open(args: argparse.Namespace) -> int:
    from glassroom.observe.incidents import open_incident

    done = open_incident(args.run_dir, args.title, step=args.step, anomaly=args.anomaly)
    print(f"{done['incident']} opened in {args.run_dir} at step {done['step']}: {done['title']}")
    return 0


def run_follow_up(args: argparse.Namespace) -> int:
    from glassroom.observe.incidents import resolve_incident, update_incident

    act = resolve_incident if args.action == "resolve" else update_incident
    done = act(args.run_dir, args.incident, args.text)
    print(f"{done['incident']} {'resolved' if args.action == 'resolve' else 'updated'} in {args.run_dir}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from glassroom.observe.incidents import read_incidents
    from glassroom.observe.runs import find_runs, store_error

    root = Path(args.dir)
    if not root.is_dir():
        raise GlassroomError(f"{root}: {'not a folder' if root.exists() else 'no such folder'}; "
                             "give a run folder or a folder of runs")
    runs = find_runs(root)
    if not runs:
        raise GlassroomError(f"{root}: no runs (no store.sqlite) at or below it; give a run folder or a folder of runs")
    rows = []
    for run_id, run_dir in sorted(runs.items()):
        try:
            rows += [{"run": run_id, **i} for i in read_incidents(run_dir)]
        except Exception as exc:   # one damaged store must not hide the others
            sys.stderr.write(f"skipped {run_id}: {store_error(exc)}\n")
    if args.json:
        print(json.dumps({"incidents": rows}, indent=1))
        return 0
    if not rows:
        print(f"no incidents in {len(runs)} run{'s' if len(runs) != 1 else ''} below {root}")
        return 0
    def cell(text) -> str:   # a title written with terminal escapes or line breaks prints as one plain line
        return "".join(c if c.isprintable() else " " for c in str(text))

    table = [("run", "id", "step", "status", "title")] + [
        tuple(cell(v) for v in (r["run"], r["id"], r["step"], r["status"],
                                r["title"] if len(r["title"]) <= 70 else r["title"][:69] + "…"))
        for r in rows]
    widths = [max(len(row[c]) for row in table) for c in range(4)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
    return 0
