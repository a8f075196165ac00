"""`glassroom publish`: the dashboard's pages as a static site (HTML, JSON data, JS) that any static
file server can host, optionally re-exported every few seconds so a public copy follows a live run.

Layout of SITE:
  index.html, compare.html, runs/<run>/index.html   the same pages as `glassroom serve`, in static mode
  static/                                            the frontend's JS and CSS, uPlot included
  site.json                                          {generation, generated, interval, runs, chains}
  runs/<run>/chain.json                              the run's chain and its head (glassroom.web.site_chain)
  data/<generation>/runs.json                        the run list
  data/<generation>/runs/<run>/meta.json             status, names, events, redacted config, prediction
  data/<generation>/runs/<run>/series/<hash>.json    one series' overview (min/max buckets) and, for a
                                                     long series, the index of its tiles
  data/<generation>/chunks.json                      the tile chunks this generation references
  data/chunks/<key>.json                             tile chunks, shared by the generations
                                                     (glassroom/web/site_tiles.py: levels, chunks, reuse)
  data/<generation>/runs/<run>/vectors/<hash>.json   one vector series (tokens per expert, router bias)
  feed.atom, runs/<run>/feed.atom                    Atom feeds of the lab and of each run (glassroom.web.feeds)
  incidents.html, data/<generation>/incidents.json   every run's incidents (glassroom.observe.incidents)
  data/<generation>/search.json                      metric names and event texts the pages search
  ladders/, atlas/                                   ladder and data atlas pages (ladder_page, atlas_page)
  .glassroom-manifest.json                           every file the publish wrote, with its sha256
                                                     (glassroom.folders.OWNED)

SITE must be new, empty, or a site a publish wrote: a re-publish refuses, in one line and touching
nothing, a folder holding any file its manifest does not list or that changed since (a stray
site.json does not make a site). The manifest is written "in progress" before the first file and
"complete" after the last, so a publish killed midway is taken up by the next one.

Each export writes a new generation into a temporary folder, renames it into place, and only then
replaces site.json (an atomic rename), so a reader sees the old site or the new one, never half of
one; pages read site.json first and take all their data from that generation. The previous
generation is kept for readers still on it (unless it holds a run no longer published: a run marked
private since is gone from the site, page and data, after one export); older ones are removed. Only what the pages show is
exported, through the same redaction as the live server (glassroom.observe.redact: secret keys,
secrets inside strings, notes and event texts), and no environment variable is. Runs marked private
(`glassroom note RUN --private-run`) and private notes are left out entirely; files that resolve
outside DIR (symlinks) are never read; a run whose store cannot be read is skipped with a message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Callable, Optional

from glassroom.errors import GlassroomError
from glassroom.folders import OWNED, check_owned, folder_files, replace_file, write_owned
from glassroom.observe.buckets import downsample
from glassroom.observe.readers import StoreReaders
from glassroom.observe.redact import redact_text
from glassroom.observe.runs import find_runs, inside, is_private, looks_secret, store_error, summarize
from glassroom.web import data
from glassroom.web.atlas_page import publish_atlases
from glassroom.web.feeds import publish_feeds
from glassroom.web.ladder_page import publish_ladders
from glassroom.web.site_chain import publish_chains
from glassroom.web.site_tiles import ChunkStore, SiteWriteError
from glassroom.web.views import FRONTEND, render_page

SERIES_POINTS = 2_000     # buckets per exported series: detail enough for a full-width chart
VECTOR_POINTS = 400
STATIC_SUFFIXES = {".js", ".css"}
SITE_MARKER = "site.json"
SITE_PARTS = ("data", "static", "runs", "atlas", "ladders", "index.html", "compare.html", SITE_MARKER)
SITE_LAYOUT = frozenset(SITE_PARTS) | {"feed.atom", "incidents.html"}   # every top-level name a publish writes
COMMAND = "publish"   # its name in SITE's ownership manifest (glassroom.folders.OWNED)
IN_PROGRESS = "in progress"


def _write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, separators=(",", ":"), allow_nan=False), encoding="utf-8")


def _file_key(name: str) -> str:
    return hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]


def _overview(steps, values) -> dict:
    """{steps, min, max, n}: the same buckets as the live API's full view at SERIES_POINTS."""
    s, lo, hi = downsample(steps, values, SERIES_POINTS)
    return {"steps": s.tolist(), "min": data.json_floats(lo), "max": data.json_floats(hi), "n": int(len(steps))}


def export_run(run_id: str, run_dir: Path, dest: Path, root: Optional[Path] = None,
               chunks: Optional[ChunkStore] = None, runs: Optional[dict[str, Path]] = None,
               readers: Optional[StoreReaders] = None) -> dict:
    """Writes one run's meta, series and vectors below `dest` (and, with `chunks`, the tiles of its
    long series into the shared chunk folder); returns its meta. One reader for the run's meta,
    series and vectors: `readers`' (a publish's), else one of its own."""
    own = StoreReaders() if readers is None else contextlib.nullcontext(readers)
    with own as readers:
        reader = readers.get(run_dir)
        meta = data.run_meta(run_id, run_dir, root=root, public=True, readers=readers, runs=runs)
        meta["files"], meta["vector_files"] = {}, {}
        for name in meta["names"]:
            rel = f"series/{_file_key(name)}.json"
            steps, values = reader.series(name)   # read once: the overview and the tiles come from it
            payload = _overview(steps, values)
            tiles = chunks.index(steps, values, SERIES_POINTS) if chunks is not None else None
            if tiles is not None:
                payload["tiles"] = tiles
            _write_json(dest / rel, payload)
            meta["files"][name] = rel
        for name in meta["vector_names"]:
            rel = f"vectors/{_file_key(name)}.json"
            _write_json(dest / rel, data.vector_payload(reader, name, points=VECTOR_POINTS))
            meta["vector_files"][name] = rel
    _write_json(dest / "meta.json", meta)
    return meta


def check_site_folder(out: Path, root: Optional[Path] = None) -> Optional[dict]:
    """Refuse to write into a folder that holds anything an earlier publish did not write (every file
    listed, unchanged, in its ownership manifest glassroom.folders.OWNED, or written by a publish
    that was stopped: _stopped_publish), or into DIR itself or a folder above it (a site inside
    DIR, e.g. lab/site for lab, is fine). Returns the manifest (None: a new or empty folder)."""
    if out.exists() and not out.is_dir():
        raise GlassroomError(f"--out {out}: exists and is not a folder; give a new or empty folder")
    if root is not None and root.is_dir():
        real_root, real_out = root.resolve(), out.resolve()
        if real_out == real_root or real_out in real_root.parents:
            raise GlassroomError(f"--out {out}: is DIR or a folder above it; give a folder of its own, e.g. {root / 'site'}")
    for name in SITE_PARTS:   # writing through a symlink would replace files somewhere else
        if (out / name).is_symlink():
            raise GlassroomError(f"--out {out}: {name} is a symbolic link; a site's folders must be its own "
                                 "(remove the link or give a new folder)")
    return check_owned(out, COMMAND, refused="not publishing over it: move it out or give a new or empty folder",
                       adopt=lambda rel, body: _stopped_publish(out, rel, body))


def _stopped_publish(out: Path, rel: str, body: dict) -> bool:
    """A file a publish stopped midway (killed) wrote: the manifest still says "in progress", the file
    is in the site's layout and was written after that manifest. The next publish takes it as its own."""
    if body.get("state") != IN_PROGRESS or not _in_layout(rel):
        return False
    try:
        path = out / rel
        return not path.is_symlink() and path.stat().st_mtime_ns >= (out / OWNED).stat().st_mtime_ns
    except OSError:
        return False


_HALF_WRITTEN = re.compile(r"\.(.+)\.tmp-[0-9]+")   # folders.replace_file's temporary name, left by a kill


def _in_layout(rel: str) -> bool:
    """Whether `rel` is a path a publish writes: below one of SITE_LAYOUT's names (or a half-written one)."""
    top = rel.split("/")[0]
    half = _HALF_WRITTEN.fullmatch(top)
    return (half.group(1) if half else top) in SITE_LAYOUT


def _drop_half_written(out: Path, files: set[str]) -> set[str]:
    """Remove the temporary files of folders.replace_file that a killed publish left (`files` were
    checked as the site's own); returns the rest."""
    kept = set()
    for rel in files:
        if _HALF_WRITTEN.fullmatch(rel.rsplit("/", 1)[-1]):
            (out / rel).unlink(missing_ok=True)
        else:
            kept.add(rel)
    return kept


def _write_manifest(out: Path, files, state: str) -> None:
    try:
        write_owned(out, COMMAND, files, state=state)
    except OSError as exc:   # a full disk, a read-only SITE: one line; site.json still names the last generation
        raise GlassroomError(f"--out {out}: cannot write {OWNED} ({exc.strerror or exc}); site.json still names "
                             "the previous export") from None


def _owned_now(out: Path, before: set[str], since: int) -> list[str]:
    """What this publish leaves as its own: what was the site's when it began, and what it wrote."""
    mine = []
    for rel in folder_files(out):
        path = out / rel
        try:
            new = _in_layout(rel) and not path.is_symlink() and path.stat().st_mtime_ns >= since
        except OSError:
            continue
        if rel in before or new:
            mine.append(rel)
    return mine


def _drop_what_is_no_longer_published(out: Path, data_dir: Path, generation: str, exported: set[str]) -> None:
    """After the switch: a run that was published before and is not now (marked private since,
    renamed, removed) loses its page and its data in the older generations, which are otherwise
    kept one round for readers still on them."""
    for old in (p for p in data_dir.iterdir() if p.is_dir() and p.name.startswith("g") and p.name != generation):
        listed = old / "runs.json"
        try:
            ids = {r["id"] for r in json.loads(listed.read_text(encoding="utf-8"))["runs"]}
        except (OSError, ValueError, KeyError, TypeError):
            ids = None   # unreadable: drop the whole generation
        if ids is None or not ids <= exported:
            shutil.rmtree(old, ignore_errors=True)
    pages = out / "runs"
    if pages.is_dir():
        for page in sorted(pages.rglob("index.html")):
            run_id = page.parent.relative_to(pages).as_posix()
            if run_id not in exported:
                page.unlink(missing_ok=True)
                for folder in [page.parent, *page.parent.parents]:   # empty folders up to SITE/runs
                    if folder == pages or not folder.is_relative_to(pages):
                        break
                    try:
                        folder.rmdir()
                    except OSError:
                        break


def publish(root: str | Path, out: str | Path, interval: Optional[float] = None,
            log: Callable[[str], None] = lambda m: None) -> dict:
    """One export of every run below `root` into the site folder `out`; returns site.json's content."""
    root, out = Path(root), Path(out)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "no such folder"
        raise GlassroomError(f"{root}: {what}; give the folder that holds your runs")
    check_site_folder(out, root)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GlassroomError(f"--out {out}: cannot be created ({exc.strerror}); give a folder you can write") from None
    # Before the first file: the site is ours while this publish writes it; one killed midway leaves
    # an "in progress" manifest, and the next publish takes up what was written after it (_stopped_publish).
    before = _drop_half_written(out, set(folder_files(out)))
    _write_manifest(out, before, IN_PROGRESS)
    since = (out / OWNED).stat().st_mtime_ns
    generation = f"g{time.time_ns() // 1_000_000}"
    data_dir = out / "data"
    tmp = data_dir / f".tmp-{generation}-{os.getpid()}"
    runs = find_runs(root)   # found once; every part below reads each run through one reader
    now = time.time()
    chunks = ChunkStore(data_dir)
    with StoreReaders() as readers:
        site = _export(root, out, runs, readers, generation, data_dir, tmp, now, chunks, interval, log)
    _drop_what_is_no_longer_published(out, data_dir, generation, set(site["runs"]))
    keep = sorted(p.name for p in data_dir.iterdir() if p.is_dir() and p.name.startswith("g"))[-2:]
    for p in data_dir.iterdir():
        if p.is_dir() and p.name not in keep and (p.name.startswith("g") or p.name.startswith(".tmp-")):
            if p.name.startswith(".tmp-") and p.name.endswith(f"-{os.getpid()}"):
                continue
            shutil.rmtree(p, ignore_errors=True)
    chunks.collect(log)   # after the switch: chunk files that no kept generation references
    _write_manifest(out, _owned_now(out, before, since), "complete")   # the files a re-publish may replace
    exported = site["runs"]
    log(f"published {len(exported)} run{'s' if len(exported) != 1 else ''} to {out} ({generation})")
    return site


def _export(root: Path, out: Path, runs: dict[str, Path], readers: StoreReaders, generation: str,
            data_dir: Path, tmp: Path, now: float, chunks: ChunkStore, interval: Optional[float],
            log: Callable[[str], None]) -> dict:
    """The new generation, the pages, the ladder and atlas pages, the feeds and chains, then the
    switch (site.json); returns site.json's content."""
    summaries, exported = [], []
    try:
        for run_id, run_dir in sorted(runs.items()):
            if inside(root, run_dir) is None:   # an id that leads out of DIR (never, via find_runs)
                continue
            if looks_secret(run_id):   # its id is its folder path, which would be in every URL
                log(f"left out {redact_text(run_id)}: its folder name looks like a secret; rename the folder to publish it")
                continue
            try:
                if is_private(run_dir, readers):
                    log(f"left out {run_id}: marked private")
                    continue
                export_run(run_id, run_dir, tmp / "runs" / run_id, root=root, chunks=chunks, runs=runs, readers=readers)
            except SiteWriteError:   # the site cannot be written (site_tiles.ChunkStore): stop, switch nothing
                raise
            except (sqlite3.DatabaseError, OSError) as exc:   # one unreadable run must not stop the others
                shutil.rmtree(tmp / "runs" / run_id, ignore_errors=True)
                log(f"skipped {run_id}: {store_error(exc)}")
                continue
            except Exception as exc:   # nor one that cannot be exported for another reason
                shutil.rmtree(tmp / "runs" / run_id, ignore_errors=True)
                log(f"skipped {run_id}: cannot be exported ({type(exc).__name__}: {redact_text(str(exc))[:200]})")
                continue
            summaries.append(summarize(run_id, run_dir, now, readers))
            exported.append(run_id)
        _write_json(tmp / "runs.json", {"root": redact_text(root.resolve().name), "generated": now, "runs": summaries})
        chunks.write_manifest(tmp)
        os.rename(tmp, data_dir / generation)   # a new folder (not folders.replace_file): nothing to replace
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    for src in sorted(FRONTEND.rglob("*")):
        rel = src.relative_to(FRONTEND)
        if src.is_file() and src.suffix in STATIC_SUFFIXES and "node_modules" not in rel.parts:
            replace_file(out / "static" / rel, src.read_bytes())
    (out / "static" / "vendor").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FRONTEND / "vendor" / "uPlot.LICENSE", out / "static" / "vendor" / "uPlot.LICENSE")
    boot = {"mode": "static", "base": "./", "runs": []}
    replace_file(out / "index.html", render_page("index", {**boot, "page": "index"}))
    replace_file(out / "compare.html", render_page("compare", {**boot, "page": "compare"}))
    for run_id in exported:
        base = "../" * (len(run_id.split("/")) + 1)
        replace_file(out / "runs" / run_id / "index.html",
                      render_page("run", {"mode": "static", "base": base, "page": "run", "runs": [run_id]}))

    publish_atlases(root, out)
    # the runs found once above, passed down (no walk of DIR again)
    publish_ladders(root, out, set(exported), log=log, runs={i: runs[i] for i in exported}, readers=readers)
    # feeds, incidents.json, search.json
    publish_feeds(root, out, exported, data_dir / generation, runs=runs, readers=readers)
    # each run's chain.json, and its head here: what a watcher keeps (glassroom.web.site_chain)
    chains = publish_chains(out, {i: runs[i] for i in exported}, now, readers=readers)
    site = {"generation": generation, "generated": now, "interval": interval, "runs": exported, "chains": chains}
    replace_file(out / SITE_MARKER, json.dumps(site))   # the switch: readers move to the new generation
    return site


def watch(root: str | Path, out: str | Path, interval: float, log: Callable[[str], None] = print,
          rounds: Optional[int] = None) -> None:
    """Re-export every `interval` seconds (until interrupted, or `rounds` exports for tests)."""
    done = 0
    while rounds is None or done < rounds:
        started = time.monotonic()
        publish(root, out, interval=interval, log=log)
        done += 1
        if rounds is not None and done >= rounds:
            break
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
