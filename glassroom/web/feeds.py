"""Atom 1.0 feeds of what happened in the runs, for watchers outside the lab: one per run and one for
the whole lab (its newest MAX_ENTRIES entries over all runs). Served live by `glassroom serve`
(/feed.atom, /feed.atom?run=ID) and written by `glassroom publish` (SITE/feed.atom,
SITE/runs/<run>/feed.atom), with the site's incidents.json and search.json (`publish_feeds`).

Entries: anomalies, notes, prediction events (the preregistration, leaving or entering the band),
checkpoints, ends (end, stopped, error, ...), incidents (opened, updated, resolved) and the record's
head (category "chain", id ending in /chain/<event id>: glassroom.web.site_chain). Each entry's
id is a tag: URI made of the lab folder's name, the run id and the event id, so it stays the same
from one export or request to the next and live and published feeds agree; its link is the run
page's permalink at the event's step (`#point=S&start=..&end=..`, glassroom.web frontend contract).
Live links are absolute (built from the request's base URL); published ones are relative to the
feed file (no xml:base: a static site does not know its own URL, and relative references in Atom
resolve against the feed's own address).

Texts go through the same view as the run page (`shown`: redacted, private notes out when public,
a private base run named nowhere); characters XML 1.0 cannot carry are dropped; ElementTree escapes
the rest. Stdlib only; never imports torch.
"""

from __future__ import annotations

import datetime
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import quote

from glassroom.folders import replace_file
from glassroom.observe import anchor, incidents as incidents_mod
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.redact import redact_text
from glassroom.observe.runs import find_runs
from glassroom.observe.store import StoreReader
from glassroom.web.search import site_index
from glassroom.web.site_chain import feed_entry
from glassroom.web.views import EVENT_TEXT_CHARS, render_page, run_is_private, shown

ATOM = "http://www.w3.org/2005/Atom"
MAX_ENTRIES = 200
END_KINDS = ("end", "stopped", "error", "finished", "failed")
FEED_KINDS = ("anomaly", "note", "prediction", "checkpoint", "incident", *END_KINDS)
TITLE_CHARS = 140
CONTENT_CHARS = 20_000
# XML 1.0 allows tab, newline, carriage return and U+0020 upwards, less surrogates and U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

ET.register_namespace("", ATOM)


def xml_text(value) -> str:
    """A value as text XML 1.0 can carry (control characters and lone surrogates dropped)."""
    return _NOT_XML.sub("", value if isinstance(value, str) else str(value))


def rfc3339(when) -> str:
    """A Unix time as RFC 3339 in UTC (`2026-12-01T03:09:39Z`); a missing or absurd time is the epoch."""
    try:
        seconds = float(when)
        stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        stamp = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
    return stamp.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def newest_events(reader: StoreReader, run_dir: Path, root: Optional[Path], public: bool,
                  kinds: tuple[str, ...] = FEED_KINDS, limit: int = MAX_ENTRIES,
                  found: Optional[dict[str, Path]] = None, readers: Optional[StoreReaders] = None) -> list[dict]:
    """The newest `limit` shown events of `kinds`, newest first (private notes skipped, not counted).
    `found` and `readers`: every run below root and the pass's readers, when publish has them."""
    if public and run_is_private(reader):
        return []
    out: list[dict] = []
    before = None
    while len(out) < limit:
        batch = reader.event_rows(kinds, limit, before, text_chars=EVENT_TEXT_CHARS)
        if not batch:
            break
        out += shown(batch, reader, run_dir, root, public, found, readers)
        before = batch[-1]["id"]
    return out[:limit]


def last_step(reader: StoreReader) -> int:
    status = reader.status()
    step = status.get("step") if isinstance(status, dict) else None
    return int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) and step == step else 0


def permalink_hash(step, run_last: int) -> str:
    """`#point=S&start=..&end=..`: the event's step with a window of about a tenth of the run around it."""
    if not isinstance(step, int) or isinstance(step, bool):
        return ""
    half = max(50, max(run_last, step) // 20)
    return f"#point={step}&start={max(0, step - half)}&end={step + half}"


def _clip(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _entry(run_id: str, event: dict, incidents: dict[str, dict]) -> tuple[str, str]:
    """(title, content) of one event."""
    kind, step, text = event["kind"], event.get("step"), event.get("text") or ""
    at = "" if step is None else f" at step {step}"
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    if kind == "incident" and isinstance(data.get("incident"), str):
        iid = data["incident"]
        title = (incidents.get(iid) or {}).get("title") or text
        action = {"open": "opened", "update": "updated", "resolve": "resolved"}.get(data.get("action"), "noted")
        headline = f"incident {iid} {action}{at} — {title}"
        content = text if action == "opened" else f"{title}\n\n{text}"
    else:
        headline = f"{kind}{at} — {text}"
        content = text
    return _clip(f"{run_id}: {headline}", TITLE_CHARS), content[:CONTENT_CHARS]


def run_entries(run_id: str, run_dir: Path, root: Optional[Path], public: bool, link: Callable[[str], str],
                lab: str, limit: int = MAX_ENTRIES, readers: Optional[StoreReaders] = None,
                found: Optional[dict[str, Path]] = None) -> list[dict]:
    """The feed entries of one run, newest first: {"id", "title", "updated" (Unix time), "link", "content",
    "kind", "run"}. `link(hash)` makes the run page's URL with a permalink hash."""
    with reading(run_dir, readers) as reader:
        events = newest_events(reader, run_dir, root, public, limit=limit, found=found, readers=readers)
        folded = {}
        if any(e["kind"] == "incident" for e in events):
            all_incident_events = shown(reader.event_rows(("incident",), 100_000, text_chars=EVENT_TEXT_CHARS), reader, run_dir, root, public,
                                         found, readers)
            folded = {i["id"]: i for i in incidents_mod.fold(all_incident_events)}
        run_last = last_step(reader)
        tail = [] if public and run_is_private(reader) else reader.chain_tail()
    out = []
    if tail:   # the record's head, for watchers to keep (glassroom.web.site_chain)
        head = anchor.head(tail)
        title, content = feed_entry(run_id, head)
        out.append({"id": f"tag:glassroom,2026:{quote(lab, safe='')}/{quote(run_id)}/chain/{head['id']}",
                    "title": title, "updated": head["time"], "link": link(permalink_hash(head["step"], run_last)),
                    "content": content, "kind": "chain", "run": run_id})
    for event in events:
        title, content = _entry(run_id, event, folded)
        out.append({"id": f"tag:glassroom,2026:{quote(lab, safe='')}/{quote(run_id)}/event/{int(event['id'])}",
                    "title": title, "updated": event.get("time"), "link": link(permalink_hash(event.get("step"), run_last)),
                    "content": content, "kind": event["kind"], "run": run_id})
    return out


def lab_entries(runs: dict[str, Path], root: Optional[Path], public: bool, link: Callable[[str, str], str],
                lab: str, limit: int = MAX_ENTRIES, readers: Optional[StoreReaders] = None,
                found: Optional[dict[str, Path]] = None) -> list[dict]:
    """The newest `limit` entries over every run; a run whose store cannot be read is left out."""
    out: list[dict] = []
    for run_id, run_dir in sorted(runs.items()):
        try:
            out += run_entries(run_id, run_dir, root, public, lambda h, r=run_id: link(r, h), lab, limit, readers, found)
        except Exception:   # unreadable, or hostile content that cannot be shown: the other runs still are
            continue
    out.sort(key=lambda e: (_sort_time(e["updated"]), e["id"]), reverse=True)
    return out[:limit]


def _sort_time(when) -> float:
    try:
        value = float(when)
    except (TypeError, ValueError):
        return 0.0
    return value if value == value else 0.0


def render(title: str, feed_id: str, self_href: str, page_href: str, entries: list[dict],
           now: Optional[float] = None) -> str:
    """An Atom 1.0 document (UTF-8 text with an XML declaration)."""
    feed = ET.Element(f"{{{ATOM}}}feed")

    def sub(parent, tag, text=None, **attrs):
        el = ET.SubElement(parent, f"{{{ATOM}}}{tag}", {k: xml_text(v) for k, v in attrs.items()})
        if text is not None:
            el.text = xml_text(text)
        return el

    sub(feed, "title", title)
    sub(feed, "id", feed_id)
    newest = max((_sort_time(e["updated"]) for e in entries), default=None)
    sub(feed, "updated", rfc3339(newest if newest is not None else (now or 0)))
    sub(feed, "link", rel="self", type="application/atom+xml", href=self_href)
    sub(feed, "link", rel="alternate", type="text/html", href=page_href)
    author = sub(feed, "author")
    sub(author, "name", "glassroom")
    sub(feed, "generator", "glassroom")
    for e in entries:
        entry = sub(feed, "entry")
        sub(entry, "id", e["id"])
        sub(entry, "title", e["title"], type="text")
        sub(entry, "updated", rfc3339(e["updated"]))
        sub(entry, "link", rel="alternate", type="text/html", href=e["link"])
        sub(entry, "category", term=e["kind"])
        sub(entry, "content", e["content"], type="text")
    body = ET.tostring(feed, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"


def lab_feed(runs: dict[str, Path], root: Path, public: bool, base: str, lab: str,
             static: bool = False, readers: Optional[StoreReaders] = None,
             found: Optional[dict[str, Path]] = None) -> str:
    """The whole lab's feed. Live: `base` is the server's absolute base URL (`http://host:port/`);
    static: `base` is "" and links are relative to SITE/feed.atom."""
    if static:
        page = lambda run_id, h: f"runs/{quote(run_id)}/index.html{h}"   # noqa: E731
        self_href, page_href = "feed.atom", "index.html"
    else:
        page = lambda run_id, h: f"{base}runs/{quote(run_id)}{h}"   # noqa: E731
        self_href, page_href = f"{base}feed.atom", base
    entries = lab_entries(runs, root, public, page, lab, readers=readers, found=found)
    return render(redact_text(f"{lab}: glassroom lab"), f"tag:glassroom,2026:{quote(lab, safe='')}",
                  self_href, page_href, entries)


def run_feed(run_id: str, run_dir: Path, root: Path, public: bool, base: str, lab: str,
             static: bool = False, readers: Optional[StoreReaders] = None,
             found: Optional[dict[str, Path]] = None) -> str:
    """One run's feed (live: absolute links from `base`; static: relative to SITE/runs/<run>/feed.atom)."""
    if static:
        page = lambda h: f"index.html{h}"   # noqa: E731
        self_href, page_href = "feed.atom", "index.html"
    else:
        page = lambda h: f"{base}runs/{quote(run_id)}{h}"   # noqa: E731
        self_href, page_href = f"{base}feed.atom?run={quote(run_id, safe='')}", f"{base}runs/{quote(run_id)}"
    entries = run_entries(run_id, run_dir, root, public, page, lab, readers=readers, found=found)
    return render(f"{run_id}: glassroom run", f"tag:glassroom,2026:{quote(lab, safe='')}/{quote(run_id)}",
                  self_href, page_href, entries)


def lab_incidents(runs: dict[str, Path], root: Optional[Path], public: bool,
                  readers: Optional[StoreReaders] = None, found: Optional[dict[str, Path]] = None) -> list[dict]:
    """Every run's folded incidents, {"run": id, ...}, newest first (by the time they were opened)."""
    out: list[dict] = []
    for run_id, run_dir in sorted(runs.items()):
        try:
            with reading(run_dir, readers) as reader:
                events = shown(reader.event_rows(("incident",), 100_000, text_chars=EVENT_TEXT_CHARS), reader, run_dir,
                               root, public, found, readers)
        except Exception:   # unreadable, or hostile content that cannot be shown: the other runs still are
            continue
        out += [{"run": run_id, **i} for i in incidents_mod.fold(events)]
    out.sort(key=lambda i: (_sort_time(i.get("opened")), i["run"], i["id"]), reverse=True)
    return out


def publish_feeds(root: Path, out: Path, exported_run_ids: list[str], generation_dir: Path,
                  write: Optional[Callable[[Path, str], None]] = None, runs: Optional[dict[str, Path]] = None,
                  readers: Optional[StoreReaders] = None) -> None:
    """Write SITE/feed.atom, SITE/runs/<run>/feed.atom, SITE/incidents.html, and
    generation_dir/incidents.json and search.json, for the runs just exported (public view)."""
    write = write or replace_file
    found = find_runs(root) if runs is None else runs   # publish passes the runs it found
    runs = {i: found[i] for i in exported_run_ids if i in found}
    lab = redact_text(Path(root).resolve().name)
    generation_dir.mkdir(parents=True, exist_ok=True)
    write(generation_dir / "incidents.json",
          json.dumps({"incidents": lab_incidents(runs, root, True, readers, found)}, separators=(",", ":"), allow_nan=False))
    write(generation_dir / "search.json", json.dumps(site_index(runs, root, readers, found), separators=(",", ":"), allow_nan=False))
    write(out / "feed.atom", lab_feed(runs, root, True, "", lab, static=True, readers=readers, found=found))
    for run_id, run_dir in runs.items():
        try:
            text = run_feed(run_id, run_dir, root, True, "", lab, static=True, readers=readers, found=found)
        except Exception:   # a run that cannot be read now gets no feed this round (its page is still there)
            continue
        write(out / "runs" / run_id / "feed.atom", text)
    pages = out / "runs"
    if pages.is_dir():   # a run no longer published (marked private since) keeps no feed
        for old in sorted(pages.rglob("feed.atom")):
            if old.parent.relative_to(pages).as_posix() not in runs:
                old.unlink(missing_ok=True)
    try:
        page = render_page("incidents", {"mode": "static", "base": "./", "page": "incidents"})
    except FileNotFoundError:   # the page's HTML comes with the frontend (frontend/incidents.html)
        return
    write(out / "incidents.html", page)
