"""`glassroom note RUN_DIR "text"`: add a note to a run's journal (also while it trains), and mark
a note or a whole run private (left out of `glassroom publish` and of a non-loopback `serve`)."""

from __future__ import annotations

import argparse

from glassroom.commands import new_command, whole
from glassroom.errors import GlassroomError

MAX_NOTE_CHARS = 20_000      # a note is read on every page load and stream; link to longer text
MAX_STEP = 2**62             # SQLite stores 64-bit integers; steps are far below this

DESCRIPTION = """\
Add a note to a run's journal: it appears on the run's timeline and as a marker on its charts in
`glassroom serve` and the published site, at the run's current step (or --step). Safe while the
run is training: the note is one more event in the run store. Notes are redacted like everything
else shown (tokens, KEY=VALUE secrets, URL credentials).

A note holds at most 20,000 characters; --step is 0 or more.

--private TEXT adds TEXT as a private note: kept out of the published site (and out of `serve`
bound to a non-loopback address); --private-run does the same for the whole run, --public-run
undoes that.

examples:
  glassroom note lab/runs/hero "raised the router bias rate to 2e-3 from here; see the spike at step 41000"
  glassroom note lab/runs/hero --private "rerun after the cluster outage; ask ops about node 7"
  glassroom note lab/runs/scratch --private-run
"""


def register(sub) -> None:
    p = new_command(sub, "note", "add a note to a run's journal; mark a note or a run private", DESCRIPTION)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("text", nargs="?", help="the note (optional with --private-run / --public-run)")
    p.add_argument("--step", type=whole, help="the step it refers to (default: the run's latest step)")
    p.add_argument("--private", metavar="TEXT", help="add TEXT as a private note, kept out of the published site")
    visibility = p.add_mutually_exclusive_group()
    visibility.add_argument("--private-run", action="store_true",
                            help="mark the whole run private: left out of `glassroom publish`")
    visibility.add_argument("--public-run", action="store_true", help="undo --private-run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sqlite3
    import time

    from glassroom.observe.runs import VISIBILITY
    from glassroom.observe.store import StoreReader, StoreWriter, store_path, write_failure

    if args.text is not None and args.private is not None:
        raise GlassroomError('note: give the text once, either as "text" or as --private "text"')
    private_note = args.private is not None
    text = (args.private if private_note else args.text or "").strip()
    changes_visibility = args.private_run or args.public_run
    if private_note and not text:
        raise GlassroomError("note: --private: the text is empty")
    if not text and not changes_visibility:
        raise GlassroomError("note: the text is empty")
    path = store_path(args.run_dir)
    if not path.is_file():
        raise GlassroomError(f"{args.run_dir}: not a run (no store.sqlite); give the folder of a run")
    if args.step is not None and not 0 <= args.step <= MAX_STEP:
        raise GlassroomError(f"--step: must be in 0-{MAX_STEP}, got {args.step}")
    if len(text) > MAX_NOTE_CHARS:
        raise GlassroomError(f"note: {len(text):,} characters, more than the {MAX_NOTE_CHARS:,} a note may have; "
                             "link to a file instead")
    try:
        step = args.step
        if step is None and text:
            with StoreReader(args.run_dir) as reader:
                latest = reader.latest("train/loss")
                step = latest[0] if latest else 0
        writer = StoreWriter(args.run_dir)
        try:
            said = []
            if changes_visibility:
                private = bool(args.private_run)
                writer.set_artifact(VISIBILITY, {"private": private, "time": time.time()})
                said.append(f"{args.run_dir} is now {'private: left out of glassroom publish' if private else 'public'}")
            if text:
                event_id = writer.event("note", text, step, {"private": True} if private_note else None)
                said.append(f"{'private ' if private_note else ''}note {event_id} added to {args.run_dir} at step {step}")
        finally:
            writer.conn.close()  # nothing buffered; leave the run's status alone
    except sqlite3.DatabaseError as exc:
        raise write_failure(path, exc, "nothing was added") from None
    print("\n".join(said))
    return 0
