"""A run's chain as the outside holds it, and the check that the current record extends a saved one.

A chain listing is [[id, digest, kind, step], ...], oldest first, for every chained event (kind and
step are null for a private note: its digest is published, never what it says). Its head is
{"id", "digest", "kind", "step", "time"} of the newest. `glassroom publish` writes both into the
site (SITE/runs/<run>/chain.json, site.json, the feeds); a watcher who keeps any of them holds an
anchor.

extends(current, saved) is the consistency check of Certificate Transparency, on a hash chain: the
saved head's event id and digest must be in the current chain unchanged. Since each digest covers
the one before it, that one equality vouches for every event up to the saved head; with a whole
saved listing the first event that differs is named (removed, rewritten, renumbered, cut off, or
the whole record replaced). Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from glassroom.observe.runs import event_is_private


def listing(rows) -> list[list]:
    """The published listing from StoreReader.chain_rows() (id, time, step, kind, data text, digest)."""
    out = []
    for id_, _, step, kind, data, digest in rows:
        try:
            parsed = json.loads(data) if data else None
        except (ValueError, RecursionError):
            parsed = {"private": True}
        private = event_is_private({"kind": kind, "data": parsed})
        out.append([int(id_), digest, None if private else kind, None if private else step])
    return out


def head(rows) -> Optional[dict]:
    """The head of StoreReader.chain_rows(): the newest chained event (kind and step null when private)."""
    if not rows:
        return None
    (id_, digest, kind, step), when = listing(rows[-1:])[0], rows[-1][1]
    return {"id": id_, "digest": digest, "kind": kind, "step": step, "time": when}


def valid_head(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("id"), int) and not isinstance(value.get("id"), bool)
            and isinstance(value.get("digest"), str) and len(value["digest"]) == 64)


def _what(kind, step) -> str:
    if kind is None:
        return "a private note" if step is None else f"step {step}"
    return kind + ("" if step is None else f" at step {step}")


def extends(current: list[list], saved_head: dict, saved: Optional[list[list]] = None) -> Optional[str]:
    """None when the `current` listing extends the saved head (and, given, the saved listing up to
    it); else one line naming the first thing that was rewritten, removed or cut off."""
    by_id = {row[0]: row for row in current}
    newest = current[-1][0] if current else 0
    hid, hdigest = saved_head["id"], saved_head["digest"]
    for row in [r for r in (saved or []) if r[0] <= hid] or [[hid, hdigest, saved_head.get("kind"), saved_head.get("step")]]:
        id_, digest, kind, step = row[0], row[1], row[2], row[3]
        now = by_id.get(id_)
        if now is None:
            if id_ > newest:
                return (f"the journal was cut back: it ends at event {newest}, the saved copy's head is event {hid} "
                        f"({_what(saved_head.get('kind'), saved_head.get('step'))}); event {id_} "
                        f"({_what(kind, step)}) and every one after it were erased")
            return f"event {id_} ({_what(kind, step)}) of the saved copy was removed from the journal"
        if now[1] != digest:
            if not saved:
                return (f"event {id_} ({_what(kind, step)}), the saved head, has another digest now: the journal "
                        "was rewritten, renumbered or replaced at or before it")
            if id_ == saved[0][0]:
                return (f"the record was replaced: its first event {id_} ({_what(kind, step)} in the saved copy) "
                        "differs, and so does every event after it (another run's store swapped in, or the whole "
                        "journal rewritten)")
            if (now[2], now[3]) != (kind, step) and kind is not None and now[2] is not None:
                return (f"event {id_} was {_what(kind, step)} in the saved copy and is {_what(now[2], now[3])} now: "
                        "an event before it was removed or inserted and the journal renumbered")
            return f"event {id_} ({_what(kind, step)}) was rewritten since the saved copy (its digest differs)"
    return None
