"""`glassroom publish DIR --out SITE`: the dashboard as a static site, optionally kept fresh."""

from __future__ import annotations

import argparse
from pathlib import Path

from glassroom import numbers
from glassroom.commands import new_command
from glassroom.errors import GlassroomError

DESCRIPTION = """\
Export every run below DIR as a static site (HTML, JSON data, JS; uPlot included) that any static
file server can host: the run list, each run's charts, journal and config, a compare page, and
each scaling ladder's page (ladders/: rungs against compute, the fitted law, the hero's band).
With --watch SECONDS it re-exports at that interval, so a public copy follows a live run; each
export switches over atomically (site.json), so a reader never sees half a site. Secrets are
redacted everywhere (config values under secret-looking keys, KEY=VALUE pairs, URL credentials and
token shapes inside any string, notes and event texts); environment variables are never exported;
runs and notes marked private (glassroom note --private-run / --private) are left out; files that
resolve outside DIR are not read. SITE may be inside DIR (lab/site for lab), not DIR itself.
docs/publish.md has the details.

example:
  glassroom publish lab/runs --out lab/site --watch 60
  python -m http.server -d lab/site 8000       # or upload lab/site to any static host
"""


def register(sub) -> None:
    p = new_command(sub, "publish", "export the runs below a folder as a static site", DESCRIPTION)
    p.add_argument("dir", metavar="DIR", help="folder holding runs (searched recursively), or one run")
    p.add_argument("--out", required=True, metavar="SITE", help="site folder to write (new, empty, or an earlier site)")
    p.add_argument("--watch", metavar="SECONDS", help="re-export at this interval (1 s to a week) until interrupted")
    p.set_defaults(run=run)


MAX_WATCH_S = 7 * 86400   # a week between exports at most


def parse_interval(text: str) -> float:
    try:
        value = numbers.option_float(text)
    except numbers.NumberError as exc:
        raise GlassroomError(f"--watch: expected a number of seconds: {exc}") from None
    if not 1 <= value <= MAX_WATCH_S:
        raise GlassroomError(f"--watch: must be from 1 second to a week ({MAX_WATCH_S} s), got {numbers.shown(text)}")
    return value


def run(args: argparse.Namespace) -> int:
    from glassroom.web.publish import check_site_folder, publish, watch

    if not args.dir.strip():
        raise GlassroomError("DIR is empty; give the folder that holds your runs")
    if not args.out.strip():
        raise GlassroomError("--out is empty; give the site folder to write, e.g. --out lab/site")
    root, out = Path(args.dir), Path(args.out)
    interval = None if args.watch is None else parse_interval(args.watch)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "no such folder"
        raise GlassroomError(f"{root}: {what}; give the folder that holds your runs")
    check_site_folder(out, root)
    try:
        if interval is None:
            publish(root, out, log=lambda m: print(m, flush=True))
            print(f"open {out / 'index.html'} through a static server, e.g. python -m http.server -d {out}")
            return 0
        print(f"re-exporting {root} to {out} every {interval:g} s (Ctrl-C stops)", flush=True)
        watch(root, out, interval, log=lambda m: print(m, flush=True))
    except OSError as exc:   # a full disk, a read-only or vanished --out: the previous export stays
        where = f" ({exc.filename})" if exc.filename else ""
        raise GlassroomError(f"--out {out}: cannot write the site: {exc.strerror or exc}{where}; "
                             "site.json switches last, so readers keep the previous export") from None
    return 0
