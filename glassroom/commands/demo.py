"""`glassroom demo [--out DIR]`: everything end to end on one small machine."""

from __future__ import annotations

import argparse
import json

from glassroom.commands import new_command, whole
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Run the whole story on this machine: build the demo corpus (five real domains; install them once
with scripts/install-corpora.sh), train a four-rung scaling ladder of MoE models, fit it and
preregister the hero's predicted loss curve, train the hero while the dashboard shows it live (URL
printed; expert load and router bias on every run's page), publish the static site, and print the
hero's predicted and achieved loss. About 20 minutes on 2 CPU cores. Running it again reuses
every finished step (experiments/demo.py, through the pipeline).

example:
  glassroom demo --out lab
"""


def register(sub) -> None:
    p = new_command(sub, "demo", "corpus, ladder, prediction, hero, dashboard and site, end to end", DESCRIPTION)
    p.add_argument("--out", default="lab", metavar="DIR", help="where everything goes (default ./lab)")
    p.add_argument("--port", type=whole, default=8080, help="dashboard port (default 8080; a free one if taken)")
    p.add_argument("--no-serve", action="store_true", help="do not start the dashboard")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from glassroom.demo import format_summary, run_demo

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: is a file, expected a folder")
    if not 0 < args.port < 65536:
        raise GlassroomError(f"--port: {args.port} is not a port number")
    summary = run_demo(out, args.port, serve=not args.no_serve)
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
