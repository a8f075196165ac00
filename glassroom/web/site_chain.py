"""The chain's head in the published site, and the site checked as `glassroom verify` checks it.

`glassroom publish` writes, for each run it exports, SITE/runs/<run>/chain.json:

  {"chain": 1, "run": id, "generated": unix time of the export, "format": the record's format
   (observe/record.py), "head": {"id", "digest", "kind", "step", "time"}, "events": [[id, digest, kind, step], ...],
   "sealed": the sealed prediction's digest or null}

(observe/anchor.py: a private note lists its digest only), site.json's "chains" ({run: head}), and a
"chain" entry in the run's and the lab's Atom feeds (glassroom.web.feeds: its id ends in
/chain/<event id>, its content names the digest). Whoever keeps a copy of any of them holds an anchor.

verify_site checks a site on its own: each run's chain.json against site.json's head, each published
event whose text was not redacted against its digest in the listing, the sealed prediction in the
run's meta.json against its seal and the chained preregistration, and each ladder page's hero numbers
against that seal. Metric rows are not in a site (only their buckets): `glassroom verify RUN_DIR`
recomputes those. Never imports torch.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote

from glassroom.folders import replace_file
from glassroom.observe import anchor, record
from glassroom.observe.journal import event_digest
from glassroom.observe.prediction import check_seal
from glassroom.observe.redact import REDACTED
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.run_folder import has_store
from glassroom.observe.store import StoreReader
from glassroom.web.lineage import PRIVATE_BASE

CHAIN_FILE = "chain.json"
SITE_FILE = "site.json"
CHAIN_VERSION = 1
HEAD_RE = re.compile(r"sha256 ([0-9a-f]{64})")
ENTRY_RE = re.compile(r"/(?P<run>[^/]+(?:/[^/]+)*)/chain/(?P<id>\d+)$")


def run_chain(run_dir: Path, run_id: str, now: Optional[float] = None,
              readers: Optional[StoreReaders] = None) -> Optional[dict]:
    """The chain.json of one run (None when its journal has no chained event)."""
    with reading(run_dir, readers) as reader:
        rows = reader.chain_rows()
        start = reader.journal_events(kind="start")
        prediction = reader.artifact("prediction")
    if not rows:
        return None
    fmt = record.record_of(start[0]["data"]).get("format") if start else None
    seal = prediction.get("seal") if isinstance(prediction, dict) and isinstance(prediction.get("seal"), dict) else {}
    return {"chain": CHAIN_VERSION, "run": run_id, "generated": time.time() if now is None else now,
            "format": fmt if isinstance(fmt, int) else 1, "head": anchor.head(rows), "events": anchor.listing(rows),
            "sealed": seal.get("digest") if isinstance(seal.get("digest"), str) else None}


def publish_chains(out: Path, runs: dict[str, Path], now: float,
                   readers: Optional[StoreReaders] = None) -> dict[str, dict]:
    """Write SITE/runs/<run>/chain.json for each exported run; returns {run: head} for site.json."""
    heads = {}
    for run_id, run_dir in sorted(runs.items()):
        try:
            chain = run_chain(run_dir, run_id, now, readers)
        except Exception:   # an unreadable store: its page is skipped too
            continue
        if chain is not None:
            replace_file(out / "runs" / run_id / CHAIN_FILE, json.dumps(chain, separators=(",", ":")))
            heads[run_id] = chain["head"]
    pages = out / "runs"
    if pages.is_dir():   # a run no longer published (marked private since) keeps no chain.json
        for old in sorted(pages.rglob(CHAIN_FILE)):
            if old.parent.relative_to(pages).as_posix() not in runs:
                old.unlink(missing_ok=True)
    return heads


def feed_entry(run_id: str, head: dict) -> tuple[str, str]:
    """(title, content) of the feed entry that carries a run's head."""
    at = "" if head.get("step") is None else f" at step {head['step']}"
    return (f"{run_id}: record head — event {head['id']}{at}",
            f"The record of {run_id} ends at event {head['id']} ({head.get('kind') or 'private'}{at}), "
            f"sha256 {head['digest']}. Keep this entry: `glassroom verify SITE --against` it shows that "
            "nothing up to here was rewritten since.")


# ----------------------------------------------------------------------------- saved copies

class NotACopy(ValueError):
    """A path that is no run folder, site, chain.json, site.json or feed (one line)."""


def saved_anchors(path: Path) -> list[dict]:
    """The anchors a saved copy holds: [{"run": id or None, "head", "events" (a listing or None),
    "where"}]. Raises NotACopy."""
    path = Path(path)
    if path.is_dir():
        if has_store(path):
            with StoreReader(path) as reader:
                rows = reader.chain_rows()
            if not rows:
                raise NotACopy(f"{path}: its journal has no chained event to compare with")
            return [{"run": None, "head": anchor.head(rows), "events": anchor.listing(rows), "where": str(path)}]
        if (path / SITE_FILE).is_file():
            out = []
            for chain in sorted((path / "runs").rglob(CHAIN_FILE)) if (path / "runs").is_dir() else []:
                out += _from_json(chain, chain.parent.relative_to(path / "runs").as_posix())
            out += [a for a in _from_json(path / SITE_FILE) if a["run"] not in {b["run"] for b in out}]
            if not out:
                raise NotACopy(f"{path}: a site with no chain heads (published before they were)")
            return out
        raise NotACopy(f"{path}: not a run folder (no store.sqlite) or a published site (no site.json)")
    if not path.is_file():
        raise NotACopy(f"{path}: no such file or folder")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NotACopy(f"{path}: cannot be read ({exc})") from None
    if text.lstrip().startswith("<"):
        return _from_feed(path, text)
    return _from_json(path)


def _from_json(path: Path, run: Optional[str] = None) -> list[dict]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        raise NotACopy(f"{path}: not JSON") from None
    if isinstance(value, dict) and anchor.valid_head(value.get("head")):
        events = value.get("events") if isinstance(value.get("events"), list) else None
        if events is not None and not all(isinstance(e, list) and len(e) == 4 for e in events):
            raise NotACopy(f"{path}: its events are not [id, digest, kind, step] rows")
        return [{"run": value.get("run") if isinstance(value.get("run"), str) else run, "head": value["head"],
                 "events": events, "where": str(path)}]
    if isinstance(value, dict) and isinstance(value.get("chains"), dict):
        return [{"run": r, "head": h, "events": None, "where": str(path)}
                for r, h in sorted(value["chains"].items()) if anchor.valid_head(h)]
    raise NotACopy(f"{path}: holds no chain head (a chain.json, site.json or feed.atom was expected)")


def _from_feed(path: Path, text: str) -> list[dict]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        raise NotACopy(f"{path}: not XML") from None
    ns = "{http://www.w3.org/2005/Atom}"
    found: dict[str, dict] = {}
    for entry in root.iter(f"{ns}entry"):
        id_el, content = entry.find(f"{ns}id"), entry.find(f"{ns}content")
        m = ENTRY_RE.search(id_el.text or "") if id_el is not None else None
        digest = HEAD_RE.search(content.text or "") if content is not None else None
        if m and digest:
            run = unquote(m.group("run"))
            head = {"id": int(m.group("id")), "digest": digest.group(1), "kind": None, "step": None}
            if run not in found or head["id"] > found[run]["head"]["id"]:
                found[run] = {"run": run, "head": head, "events": None, "where": str(path)}
    if not found:
        raise NotACopy(f"{path}: a feed with no record head entry (published before they were)")
    return list(found.values())


# ----------------------------------------------------------------------------- a site on its own

def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def site_runs(site: Path) -> dict[str, list[list]]:
    """{run: its chain.json listing} of a site's runs (heads checked by verify_site)."""
    out = {}
    for chain in sorted((site / "runs").rglob(CHAIN_FILE)) if (site / "runs").is_dir() else []:
        value = _load(chain)
        if isinstance(value, dict) and isinstance(value.get("events"), list):
            out[chain.parent.relative_to(site / "runs").as_posix()] = value["events"]
    return out


def verify_site(site: Path) -> dict:
    """{"ok", "problem", "runs", "events_checked", "events_redacted", "seals", "ladders"} of a site."""
    out: dict[str, Any] = {"ok": False, "problem": None, "runs": 0, "events_checked": 0, "events_redacted": 0,
                           "seals": 0, "ladders": 0}
    meta_site = _load(site / SITE_FILE)
    if not isinstance(meta_site, dict) or not isinstance(meta_site.get("generation"), str):
        out["problem"] = f"{site / SITE_FILE}: not a glassroom site.json"
        return out
    heads = meta_site.get("chains") if isinstance(meta_site.get("chains"), dict) else {}
    sealed: dict[str, dict] = {}
    for run_id in meta_site.get("runs") or []:
        chain = _load(site / "runs" / run_id / CHAIN_FILE)
        meta = _load(site / "data" / meta_site["generation"] / "runs" / run_id / "meta.json")
        if chain is None and run_id not in heads:
            continue   # a run with no chained event, or published before heads were
        if not isinstance(chain, dict) or not anchor.valid_head(chain.get("head")):
            out["problem"] = f"run {run_id}: {CHAIN_FILE} is missing or damaged, site.json names its head"
            return out
        listing = chain.get("events") if isinstance(chain.get("events"), list) else []
        if heads.get(run_id) != chain["head"] or not listing or listing[-1][:2] != [chain["head"]["id"], chain["head"]["digest"]]:
            out["problem"] = f"run {run_id}: site.json's head and {CHAIN_FILE}'s disagree: one was edited"
            return out
        problem = _check_events(run_id, listing, meta, out, sealed)
        if problem:
            out["problem"] = problem
            return out
        out["runs"] += 1
    problem = _check_ladders(site, sealed, out)
    if problem:
        out["problem"] = problem
        return out
    out["ok"] = True
    return out


def _check_events(run_id: str, listing: list, meta: Any, out: dict, sealed: dict) -> Optional[str]:
    """The published events of one run against the listing's digests; its sealed prediction."""
    digests = {row[0]: row[1] for row in listing if isinstance(row, list) and len(row) == 4}
    ids = sorted(digests)
    before = {b: a for a, b in zip(ids, ids[1:])}
    events = meta.get("events") if isinstance(meta, dict) and isinstance(meta.get("events"), list) else []
    for e in events:
        if not isinstance(e, dict) or e.get("id") not in digests:
            continue
        data = None if e.get("data") is None else json.dumps(e["data"])
        prev = digests.get(before.get(e["id"]), "") if e["id"] != ids[0] else ""
        if event_digest(prev, e["id"], e.get("time", 0), e.get("step"), e.get("kind", ""), e.get("text", ""), data) == digests[e["id"]]:
            out["events_checked"] += 1
        elif any(mark in (e.get("text") or "") or (data and mark in data) for mark in (REDACTED, PRIVATE_BASE)):
            out["events_redacted"] += 1
        else:
            return (f"run {run_id}: published event {e['id']} ({e.get('kind')}) does not match its digest in "
                    f"{CHAIN_FILE}: the page's copy was edited")
    prediction = ((meta or {}).get("artifacts") or {}).get("prediction") if isinstance(meta, dict) else None
    if isinstance(prediction, dict) and isinstance(prediction.get("seal"), dict):
        problem = check_seal(prediction)
        if problem:
            return f"run {run_id}: the published prediction: {problem}"
        chained = [e for e in events if isinstance(e, dict) and e.get("kind") == "prediction"
                   and isinstance(e.get("data"), dict) and "seal_digest" in e["data"]]
        if chained and chained[0]["data"]["seal_digest"] != prediction["seal"]["digest"]:
            return (f"run {run_id}: the published prediction's seal {prediction['seal']['digest'][:12]}... is not the "
                    f"one preregistered (event {chained[0]['id']}: {str(chained[0]['data']['seal_digest'])[:12]}...)")
        first_start = next((row[0] for row in listing if row[2] in ("start", "resume")), None)
        if chained and first_start is not None and first_start < chained[0]["id"]:
            return (f"run {run_id}: the prediction was preregistered (event {chained[0]['id']}) after the run "
                    f"started (event {first_start})")
        sealed[run_id] = prediction
        out["seals"] += 1
    return None


def _check_ladders(site: Path, sealed: dict[str, dict], out: dict) -> Optional[str]:
    """Each published ladder page's hero numbers against the hero run's sealed prediction."""
    for page in sorted((site / "ladders" / "l").rglob("ladder.json")) if (site / "ladders" / "l").is_dir() else []:
        view = _load(page)
        hero = view.get("hero") if isinstance(view, dict) and isinstance(view.get("hero"), dict) else None
        if hero is None or hero.get("run") not in sealed:
            continue
        p = sealed[hero["run"]]
        want = {"predicted": p.get("final_loss"), "interval": p.get("final_interval"), "seal": p["seal"]["digest"]}
        diffs = [k for k, v in want.items() if hero.get(k) != v]
        if diffs:
            return (f"{page.relative_to(site)}: the hero's {', '.join(diffs)} differ from run {hero['run']}'s sealed "
                    "prediction: the ladder page was edited")
        out["ladders"] += 1
    return None
