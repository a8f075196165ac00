"""`glassroom note RUN_DIR "text"`: add a note to a run's journal (also while it trains)."""

from __future__ import annotations

import argparse

from glassroom.commands import new_command

DESCRIPTION = """\
Add a note to a run's journal: it appears on the run's timeline and as a marker on its charts in
`glassroom serve` and the published site, at the run's current step (or --step). Safe while the
run is training: the note is one more event in the run store.

example:
  glassroom note lab/runs/hero "raised the router bias rate to 2e-3 from here; see issue 12"
"""


def register(sub) -> None:
    p = new_command(sub, "note", "add a note to a run's journal", DESCRIPTION)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("text", help="the note")
    p.add_argument("--step", type=int, help="the step it refers to (default: the run's latest step)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from glassroom.errors import GlassroomError
    from glassroom.observe.store import StoreReader, StoreWriter, store_path

    text = args.text.strip()
    if not text:
        raise GlassroomError("note: the text is empty")
    if not store_path(args.run_dir).is_file():
        raise GlassroomError(f"{args.run_dir}: not a run (no store.sqlite); give the folder of a run")
    step = args.step
    if step is None:
        with StoreReader(args.run_dir) as reader:
            latest = reader.latest("train/loss")
            step = latest[0] if latest else 0
    if step < 0:
        raise GlassroomError(f"--step: must be 0 or more, got {step}")
    writer = StoreWriter(args.run_dir)
    try:
        event_id = writer.event("note", text, step)
    finally:
        writer.conn.close()  # nothing buffered; leave the run's status alone
    print(f"note {event_id} added to {args.run_dir} at step {step}")
    return 0
