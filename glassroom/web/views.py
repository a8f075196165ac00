"""What the dashboard's pages share, live and published: the page template (`render_page`, with
the Content-Security-Policy) and the view of a run's events that pages, feeds, incidents and search
show (`shown`: redacted, private notes out when public, a private base run named nowhere).

server, publish, feeds, search, atlas_page and ladder_page import this module; it imports none of
them (no import cycle through the pages). Never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from glassroom.observe import incidents as incidents_mod
from glassroom.observe.readers import StoreReaders
from glassroom.observe.redact import SHOWN_CHARS, clip_shown, redact_text, shown_prefix
from glassroom.observe.runs import VISIBILITY, event_is_private
from glassroom.observe.store import StoreReader
from glassroom.web.lineage import hidden_base, scrub

FRONTEND = Path(__file__).parent / "frontend"
# An event's text as read for feeds and search: the part that is shown (SHOWN_CHARS) and a margin,
# so a hostile multi-megabyte text is never loaded whole (see redact.shown_prefix; StoreReader.event_rows).
EVENT_TEXT_CHARS = SHOWN_CHARS + 4_096

# Pages and data come from this server only; no inline script (the boot data is a JSON block).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]


def render_page(page: str, boot: dict) -> str:
    """A frontend page with its boot data (mode, base URL, run ids) filled in, safely escaped. A
    static page also gets the Content-Security-Policy as a meta tag (no server sends the header)."""
    text = (FRONTEND / f"{page}.html").read_text(encoding="utf-8")
    payload = json.dumps(boot).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    base = boot.get("base", "/").replace('"', "%22").replace("<", "%3C")
    if boot.get("mode") == "static":
        meta_csp = CSP.replace("; frame-ancestors 'none'", "")
        text = text.replace('<meta charset="utf-8">',
                            f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{meta_csp}">', 1)
    return text.replace("{{BOOT}}", payload).replace("{{BASE}}", base)


_TEXTS: dict[str, str] = {}
MAX_CACHED_TEXTS = 200_000
MAX_CACHED_CHARS = 20_000_000   # texts and their redacted copies together: a few tens of MB at most
_cached_chars = [0]


def redacted_text(text: str) -> str:
    """redact_text, remembered: events never change, so a feed, a search or a `--watch` export that
    shows the same event again does not redact it again (the cache is emptied when full, by count
    or by characters, so long texts such as tracebacks cannot make it grow without bound)."""
    got = _TEXTS.get(text)
    if got is None:
        got = redact_text(text)
        size = len(text) + len(got)
        if len(_TEXTS) >= MAX_CACHED_TEXTS or _cached_chars[0] + size > MAX_CACHED_CHARS:
            _TEXTS.clear()
            _cached_chars[0] = 0
        if size <= MAX_CACHED_CHARS // 100:
            _TEXTS[text] = got
            _cached_chars[0] += size
    return got


def run_is_private(reader: StoreReader) -> bool:
    """Whether the run is marked private now (read from its store at each request: a server's list of
    runs is up to 2 s old, and a run marked private must leave feeds, search and incidents at once)."""
    try:
        value = reader.artifact(VISIBILITY)
    except (ValueError, RecursionError):
        return True
    return bool(isinstance(value, dict) and value.get("private"))


def shown(events: list[dict], reader: StoreReader, run_dir: Path, root: Optional[Path], public: bool,
          runs: Optional[dict[str, Path]] = None, readers: Optional[StoreReaders] = None) -> list[dict]:
    """Events as the run page shows them: redacted, private notes out when `public`, and a private
    base run (glassroom.web.lineage) named nowhere on a public view. Only incident events keep their
    (redacted) data: feeds and search show texts, and redacting every event's data would cost more
    than everything else they do."""
    if public and run_is_private(reader):   # marked private since the server last listed its runs
        return []
    out = []
    for e in events:
        if public and event_is_private(e):
            continue
        if e.get("kind") == incidents_mod.KIND:
            data = e.get("data")
            if isinstance(data, dict):
                data = {k: shown_prefix(v) for k, v in data.items()}
            out.append(incidents_mod.redacted({**e, "text": shown_prefix(e.get("text")), "data": data}))
        else:
            text = e.get("text")
            kind = e.get("kind")   # a hand-written kind can hold anything too
            out.append({**e, "kind": redacted_text(kind) if isinstance(kind, str) else kind,
                        "text": redacted_text(shown_prefix(text)) if isinstance(text, str) else "", "data": None})
    if public and out:
        hidden = hidden_base(reader.artifact("lineage"), run_dir, root, True, runs, readers)
        if hidden:
            out = scrub(out, hidden)
    for e in out:   # clipped only now: a secret or a hidden path across the cut was removed whole
        e["text"] = clip_shown(e.get("text"))
        if isinstance(e.get("data"), dict):
            e["data"] = {k: clip_shown(v) for k, v in e["data"].items()}
    return out
