"""`glassroom show PATH`: how a step's output was produced (experiment, commit, step chain, configs)."""

from __future__ import annotations

import argparse
import json

from glassroom.commands import new_command

DESCRIPTION = """\
Print how an output of `glassroom run` was produced: its step, version and status; the experiment
file (and its sha256) and the glassroom git commit it ran from; the function's result; and the
chain of steps it was built from, inputs first, each with its version, output folder and config.
PATH is a step's output folder or any file inside it.

examples:
  glassroom show workspace/stats/stdlib-report-1c0e9f2a
  glassroom show workspace/stats/stdlib-report-1c0e9f2a/report.md --json
"""


def register(sub) -> None:
    p = new_command(sub, "show", "how an output was produced: experiment, commit, step chain", DESCRIPTION)
    p.add_argument("path", metavar="PATH", help="a step's output folder, or a file inside it")
    p.add_argument("--json", action="store_true", help="print step.json, status, provenance and result as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from glassroom.pipeline.provenance import format_show, load_show

    info = load_show(args.path)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(format_show(info))
    return 0
