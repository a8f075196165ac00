"""What the dashboard's pages read, as plain JSON-able dicts: shared by the live server and the
static site so both show the same thing.

Series are downsampled on the server side: at most `points` buckets of equal step width over
the requested range, each with its min and max (so a one-step spike survives every zoom level) and
the newest point kept exactly, read from the store's precomputed tiles (observe/tiles.py; the raw
rows and observe.buckets.downsample when a store has none). Vectors (tokens per expert, router bias)
are averaged per bucket for the heatmaps and trajectories.

Everything that carries text a person or a process wrote (events and notes, the config, artifacts)
goes through glassroom.observe.redact here, and a series whose name holds a secret (`secret/sk-...`)
is not listed or streamed, so the live API, the live stream and the static site
show the same redacted values. With `public=True` (the published site, or a server bound to a
non-loopback address) notes marked private are left out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from glassroom.observe import anchor
from glassroom.observe.buckets import bucket_index
from glassroom.observe.redact import redact, redact_event
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.runs import VISIBILITY, event_is_private, looks_secret, read_config, summarize
from glassroom.observe.store import StoreReader
from glassroom.web.compute import run_compute
from glassroom.web.lineage import PRIVATE_BASE, hidden_base, lineage_view, scrub

MAX_POINTS = 20_000          # largest bucket count a client may ask for
DEFAULT_POINTS = 1_500
MAX_NAMES = 400              # series per request
VECTOR_SAMPLES = 8           # rows a vector view averages per bucket, at most (evenly spread)
# Artifacts the pages draw (the preregistered prediction, the newest Hugging Face export and its model
# card); others (status, config) have their own fields. The `lineage` artifact (what an init.from run
# started from) is added by glassroom.web.lineage, its base matched to a run the pages can link to.
EXPORTED_ARTIFACTS = ("prediction", "export")


def json_floats(values: np.ndarray) -> list:
    """A float array as a list with NaN/Inf as None (JSON has no NaN)."""
    out = values.astype(np.float64).tolist()
    if not np.isfinite(values).all():
        out = [v if math.isfinite(v) else None for v in out]
    return out


def series_payload(reader: StoreReader, names: list[str], start: Optional[int] = None,
                   end: Optional[int] = None, points: int = DEFAULT_POINTS) -> dict:
    """{name: {steps, min, max, n}} for each name; `n` counts the raw points in the range."""
    out: dict[str, Any] = {}
    for name in names:
        s, lo, hi, n = reader.view(name, start, end, points)   # from the store's tiles (observe/tiles.py)
        out[name] = {"steps": s.tolist(), "min": json_floats(lo), "max": json_floats(hi), "n": n}
    return {"series": out, "start": start, "end": end, "points": points}


def _vector_rows(reader: StoreReader, name: str, start: Optional[int], end: Optional[int],
                 points: int) -> list[tuple[int, list]]:
    """The rows a vector view averages: all of them when the range spans at most points x
    VECTOR_SAMPLES steps; else, in each of the `points` buckets, the first row of each of
    VECTOR_SAMPLES equal slices (so at most that many rows per bucket, evenly spread, found by the
    (name, step) index without reading the others), and always the range's first and newest rows."""
    id_ = reader.name_id(name)
    if id_ is None:
        return []
    lo = -(2**62) if start is None else max(-(2**62), int(start))
    hi = 2**62 if end is None else min(2**62, int(end))
    first, last = reader.vector_extent(id_, lo, hi)
    if first is None:
        return []
    if last - first + 1 <= points * VECTOR_SAMPLES:
        return reader.vectors(name, first, last)
    bucket = -(-(last - first + 1) // points)
    part = max(1, -(-bucket // VECTOR_SAMPLES))
    rows = []
    for b_lo in range(first, last + 1, bucket):
        b_hi = min(b_lo + bucket - 1, last)
        for s in range(b_lo, b_hi + 1, part):
            row = reader.first_vector(id_, s, min(s + part - 1, b_hi))
            if row is not None:
                rows.append(row)
    if rows[-1][0] != last:   # the newest row, as itself (the heatmap's readout is about it)
        rows.append(reader.first_vector(id_, last, last))
    return rows


def vector_payload(reader: StoreReader, name: str, start: Optional[int] = None,
                   end: Optional[int] = None, points: int = 400) -> dict:
    """{steps, values: [[...] per bucket], width}: each bucket's mean vector (first step of the bucket),
    over at most VECTOR_SAMPLES of its rows, evenly spread (_vector_rows): a heatmap of a 200k-step
    run reads a few thousand rows, not all of them."""
    points = max(1, int(points))
    rows = _vector_rows(reader, name, start, end, points)
    if not rows:
        return {"name": name, "steps": [], "values": [], "width": 0}
    width = max(len(v) for _, v in rows)
    steps = np.array([s for s, _ in rows], dtype=np.int64)
    matrix = np.full((len(rows), width), np.nan)
    for i, (_, v) in enumerate(rows):
        matrix[i, : len(v)] = [np.nan if x is None else x for x in v]
    if len(rows) > points:
        lo, hi = int(steps[0]), int(steps[-1])
        bucket_width = max(1, -(-(hi - lo + 1) // points))
        index = bucket_index(steps, lo, bucket_width)   # steps may span more than int64
        starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
        filled = np.where(np.isfinite(matrix), matrix, 0.0)
        sums = np.add.reduceat(filled, starts, axis=0)
        valid = np.add.reduceat(np.isfinite(matrix).astype(np.float64), starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            matrix = np.where(valid > 0, sums / np.maximum(valid, 1), np.nan)
        steps = steps[starts]
    return {"name": name, "steps": steps.tolist(), "values": [json_floats(r) for r in matrix], "width": width}


def shown_events(events: list[dict], public: bool = False) -> list[dict]:
    """Events as the outside sees them: redacted, and without private notes when `public`."""
    return [redact_event(e) for e in events if not (public and event_is_private(e))]


def events_payload(reader: StoreReader, after_id: int = 0, public: bool = False) -> list[dict]:
    return shown_events(reader.events(after_id), public)


def run_meta(run_id: str, run_dir: Path, root: Optional[Path] = None, public: bool = False,
             readers: Optional[StoreReaders] = None, runs: Optional[dict[str, Path]] = None) -> dict:
    """Everything a run page needs besides the series: status, names, events, config, prediction.
    `root`: the served folder (files resolving outside it are not read); `readers`: the pass's open
    store readers (publish reads each run through one), else one is opened; `runs`: the runs below
    root when the caller has found them (publish), else a lineage base is looked up by a walk."""
    with reading(run_dir, readers) as reader:
        names = [n for n in reader.names() if not looks_secret(n)]   # `secret/sk-...`: not listed
        vector_names = [n for n in reader.vector_names() if not looks_secret(n)]
        events = shown_events(reader.events(), public)
        artifacts = {name: redact(reader.artifact(name)) for name in EXPORTED_ARTIFACTS}
        lineage = reader.artifact("lineage")
        artifacts["lineage"] = lineage_view(lineage, run_dir, root, public, runs, readers)
        status = reader.status()
        chain = anchor.head(reader.chain_tail())   # the record's head (glassroom.web.site_chain)
    config, config_text = read_config(run_dir, root, readers)
    private_base = (artifacts["lineage"] or {}).get("base") == PRIVATE_BASE
    hidden = hidden_base(lineage, run_dir, root, public, runs, readers) if private_base else []   # named nowhere on the page
    events, config, config_text = scrub([events, config, config_text], hidden)
    return {
        "id": run_id,
        "status": {k: status.get(k) for k in ("state", "step", "updated")},
        "summary": summarize(run_id, run_dir, readers=readers),
        "names": names,
        "vector_names": vector_names,
        "events": events,
        "config": config,
        "config_text": config_text,
        "compute": run_compute(config),   # the compare page's tokens and FLOPs axes
        "artifacts": {k: v for k, v in artifacts.items() if v is not None},
        "chain": chain,
    }


class RunMadePrivate(Exception):
    """A followed run was marked private while a public page streamed it."""


class Cursor:
    """What one live page has already seen of one run: the last step per series, the last event id,
    the status. `poll()` returns only what is new since, so the stream sends small messages."""

    MAX_NEW = 5_000   # more new points than this for one series: tell the page to reload instead

    def __init__(self, run_id: str, run_dir: Path, public: bool = False, root: Optional[Path] = None):
        self.run_id, self.run_dir, self.public, self.root = run_id, run_dir, public, root
        self.reader = StoreReader(run_dir)
        try:
            self._start()
        except BaseException:
            self.reader.close()
            raise

    def _start(self) -> None:
        self.last_step: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.vector_last: dict[int, int] = {}
        self.last_event = 0
        self.status: Any = None
        self._name_count = -1
        self._refresh_names()
        counters = self.reader.counters()   # the writer's counters: one query, not two per series
        for id_ in self.names:
            if counters is None:
                self.last_step[id_] = self._max_step("metrics", id_)
                self.vector_last[id_] = self._max_step("vectors", id_)
            else:
                _, last, vlast = counters.get(id_, (0, None, None))
                self.last_step[id_] = -(2**62) if last is None else int(last)
                self.vector_last[id_] = -(2**62) if vlast is None else int(vlast)
        self.last_event = self.reader.max_event_id()
        self.status = self.reader.status()

    def _max_step(self, table: str, id_: int) -> int:
        step = self.reader.max_step(id_, vectors=table == "vectors")
        return -(2**62) if step is None else int(step)

    def _refresh_names(self) -> None:
        count = self.reader.name_count()
        if count != self._name_count:
            self._name_count = count
            for id_, name in self.reader.name_ids():
                if not looks_secret(name):   # a series whose name holds a secret is never streamed
                    self.names.setdefault(id_, name)

    def poll(self) -> Optional[dict]:
        """New points, vectors, events and status since the last poll; None when nothing changed.
        With `public`, raises RunMadePrivate once the run has been marked private."""
        if self.public:
            visibility = self.reader.artifact(VISIBILITY)
            if isinstance(visibility, dict) and visibility.get("private"):
                raise RunMadePrivate(f"run {self.run_id} was marked private")
        self._refresh_names()
        series: dict[str, Any] = {}
        vectors: dict[str, Any] = {}
        reload = False
        # Which series grew, from the writer's counters in one query (None: ask each series)
        counters = self.reader.counters()
        for id_, name in self.names.items():
            last = self.last_step.get(id_, -(2**62))
            vlast = self.vector_last.get(id_, -(2**62))
            if counters is not None:
                _, top, vtop = counters.get(id_, (0, None, None))
            else:   # a store without counters: the newest steps from the (name, step) index
                top, vtop = (self._max_step(table, id_) for table in ("metrics", "vectors"))
                top, vtop = (None if x == -(2**62) else x for x in (top, vtop))
            never = -(2**62)
            if (top if top is not None else never) < last or (vtop if vtop is not None else never) < vlast:
                # Cut back: a resumed run discarded the steps after its checkpoint (all of a series
                # that began after it) and logs them again, maybe with other values. The page
                # reloads what it shows; new rows follow.
                reload = True
                self.last_step[id_] = last = min(last, never if top is None else top)
                self.vector_last[id_] = vlast = min(vlast, never if vtop is None else vtop)
            if (top is None or top <= last) and (vtop is None or vtop <= vlast):
                continue
            rows = self.reader.rows_after(id_, last, self.MAX_NEW + 1)
            if rows:
                if len(rows) > self.MAX_NEW:
                    reload = True
                    self.last_step[id_] = self._max_step("metrics", id_)
                else:
                    self.last_step[id_] = rows[-1][0]
                    series[name] = {"steps": [r[0] for r in rows],
                                    "values": [r[1] if r[1] is None or math.isfinite(r[1]) else None for r in rows]}
            vrows = self.reader.rows_after(id_, vlast, 200, vectors=True)
            if vrows:
                self.vector_last[id_] = vrows[-1][0]
                vectors[name] = {"steps": [r[0] for r in vrows], "count": len(vrows)}
        events = self.reader.events(self.last_event)
        if events:
            self.last_event = events[-1]["id"]
            events = shown_events(events, self.public)
            if self.public:   # a private base (glassroom.web.lineage) is named nowhere on a public page
                events = scrub(events, hidden_base(self.reader.artifact("lineage"), self.run_dir, self.root, True))
        status = self.reader.status()
        status_changed = status != self.status
        self.status = status
        if not (series or vectors or events or status_changed or reload):
            return None
        return {"run": self.run_id, "series": series, "vectors": vectors, "events": events,
                "status": {k: status.get(k) for k in ("state", "step", "updated")}, "reload": reload}

    def close(self) -> None:
        self.reader.close()
