"""`glassroom verify SITE_OR_RUN [--against SAVED_COPY ...]`: check a run's record or a published
site on its own, and that it extends every copy a watcher saved earlier (docs/verify.md)."""

from __future__ import annotations

import argparse
import json

from glassroom.commands import new_command
from glassroom.errors import GlassroomError

ALTERED_EXIT = 3   # the record was altered; 2 stays "bad input"

DESCRIPTION = """\
Check a run folder or a published site, on its own and against copies saved earlier.

On its own, a run folder: the journal's digest chain; every metric window (the digest of the metric
rows each checkpoint and the end event chained); the settings the loss is measured with (eval set,
eval_sequences, precision, seq_len), at start, at each resume, in config.yaml and in the seal; and,
for a ladder's hero, the sealed prediction (made before the first step, unchanged).
A published site: each run's chain.json against site.json's head, every published event whose text
was not redacted against its digest, each published sealed prediction against its seal and its
preregistration event, and each ladder page's hero numbers against that seal.

--against SAVED_COPY (repeatable): a copy saved before, which the current record must extend: a
whole run folder, a published site folder, or just a saved chain.json, site.json or feed.atom.
The saved head's event id and digest must be in the current chain unchanged, and every event up to
it identical (the consistency check of Certificate Transparency). A rewrite, an erased event, a
truncated journal or another run's record swapped in since that copy is named.

Exit 0 and a short summary when the record is intact and extends every copy; exit 3 and one line,
`altered: ...`, naming what was changed; exit 2 for bad input.

examples:
  glassroom verify lab/runs/hero
  glassroom verify lab/runs/hero --against saved/hero-monday --against saved/chain.json
  glassroom verify site --against saved/site-monday --against saved/feed.atom
"""


def register(sub) -> None:
    p = new_command(sub, "verify", "check a run's record or a published site, and against saved copies", DESCRIPTION)
    p.add_argument("target", metavar="SITE_OR_RUN", help="a run folder (store.sqlite) or a published site (site.json)")
    p.add_argument("--against", metavar="SAVED_COPY", action="append", default=[],
                   help="a copy saved earlier: run folder, site folder, chain.json, site.json or feed.atom (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sqlite3
    from pathlib import Path

    from glassroom.observe.run_folder import has_store, store_path
    from glassroom.web.site_chain import SITE_FILE

    target = Path(args.target)
    if not target.is_dir():
        raise GlassroomError(f"{target}: {'is a file' if target.exists() else 'no such folder'}, "
                             "expected a run folder or a published site")
    try:
        if has_store(target):
            if not store_path(target).is_file():
                raise GlassroomError(f"{store_path(target)}: not a regular file, expected the run's SQLite store")
            result = _verify_run(target, [Path(a) for a in args.against])
        elif (target / SITE_FILE).is_file():
            result = _verify_site(target, [Path(a) for a in args.against])
        else:
            raise GlassroomError(f"{target}: neither a run folder (no store.sqlite) nor a published site (no site.json)")
    except sqlite3.DatabaseError as exc:
        raise GlassroomError(f"{target}: unreadable run store ({exc})") from None
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "listing"}))
    elif result["ok"]:
        print("\n".join(result["summary"]))
    else:
        print(f"altered: {result['problem']}")
    return 0 if result["ok"] else ALTERED_EXIT


def _anchors(path, run_name=None) -> list[dict]:
    import sqlite3

    from glassroom.web.site_chain import NotACopy, saved_anchors

    try:
        found = saved_anchors(path)
    except NotACopy as exc:
        raise GlassroomError(f"--against {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise GlassroomError(f"--against {path}: unreadable run store ({exc})") from None
    if run_name is None or len(found) == 1:
        return found
    mine = [a for a in found if a["run"] is not None and a["run"].rsplit("/", 1)[-1] == run_name]
    if not mine:
        runs = ", ".join(str(a["run"]) for a in found[:5])
        raise GlassroomError(f"--against {path}: holds no chain of run {run_name} (it holds {runs})")
    return mine


def _short(head) -> str:
    if not head:
        return "no chained event"
    what = head.get("kind") or "private note"
    at = "" if head.get("step") is None else f" at step {head['step']}"
    return f"event {head['id']} ({what}{at}) sha256 {head['digest'][:16]}"


def _verify_run(run_dir, copies) -> dict:
    from glassroom.observe import anchor
    from glassroom.observe.record import verify_record

    anchors = [a for c in copies for a in _anchors(c, run_dir.name)]   # bad input first: exit 2
    result = verify_record(run_dir)
    if not result["ok"]:
        return result
    for saved in anchors:
        problem = anchor.extends(result["listing"], saved["head"], saved["events"])
        if problem:
            return {**result, "ok": False, "problem": f"{problem} (against {saved['where']})"}
    lines = [f"ok: {run_dir}: record format {result['format']}, {result['events']} events, head {_short(result['head'])}"]
    if result["format"] >= 2:
        tail = f", {result['tail_rows']} after step {result['last_window']} not chained yet" if result["tail_rows"] else ""
        redone = f" ({result['superseded']} redone after a resume)" if result["superseded"] else ""
        lines.append(f"metrics: {result['chained_rows']} rows in {result['windows']} windows match their digests{redone}{tail}")
        m = result["measure"] or {}
        if m:
            lines.append(f"measured with: eval_sequences {m.get('eval_sequences')}, precision {m.get('precision')}, "
                         f"seq_len {m.get('seq_len')}, data {m.get('data_path')}")
    if result.get("changes"):
        lines.append("measured otherwise after a resume: " + "; ".join(result["changes"]))
    if result["sealed"]:
        lines.append(f"prediction: sealed sha256 {result['sealed'][:16]}, before the first step, unchanged")
    if result["lacks"]:
        lines.append("not checkable in this record: " + "; ".join(result["lacks"]))
    if anchors:
        lines.append(f"extends {len(anchors)} saved cop{'y' if len(anchors) == 1 else 'ies'}: "
                     + ", ".join(f"{a['where']} (to event {a['head']['id']})" for a in anchors))
    return {**result, "summary": lines}


def _verify_site(site, copies) -> dict:
    from glassroom.observe import anchor
    from glassroom.web.site_chain import site_runs, verify_site

    anchors = [a for c in copies for a in _anchors(c)]
    result = verify_site(site)
    if not result["ok"]:
        return result
    runs = site_runs(site)
    for saved in anchors:
        run = saved["run"]
        if run is None:   # a saved run folder: the site's run that starts with the same event, or of its name
            first = saved["events"][0][:2] if saved["events"] else None
            names = ([r for r, listing in runs.items() if listing and listing[0][:2] == first]
                     or [r for r in runs if r.rsplit("/", 1)[-1] == saved["where"].rstrip("/").rsplit("/", 1)[-1]])
            if len(names) != 1:
                raise GlassroomError(f"--against {saved['where']}: no run of the site {site} starts with its first "
                                     "event or has its folder's name")
            run = names[0]
        if run not in runs:
            return {**result, "ok": False, "problem": f"run {run}, published in the saved copy {saved['where']}, "
                                                      "is gone from the site (or its chain.json is)"}
        problem = anchor.extends(runs[run], saved["head"], saved["events"])
        if problem:
            return {**result, "ok": False, "problem": f"run {run}: {problem} (against {saved['where']})"}
    lines = [f"ok: {site}: {result['runs']} run chain(s) match site.json; {result['events_checked']} published events "
             f"match their digests" + (f", {result['events_redacted']} redacted (not checkable)" if result["events_redacted"] else ""),
             f"predictions: {result['seals']} sealed and matching their preregistration; {result['ladders']} ladder "
             "pages show the sealed numbers",
             "metric rows are not in a site: verify the run folder for them"]
    if anchors:
        lines.append(f"extends {len(anchors)} saved head{'s' if len(anchors) != 1 else ''}: "
                     + ", ".join(f"{a['run'] or a['where']} to event {a['head']['id']}" for a in anchors[:6]))
    return {**result, "summary": lines}
