"""Multi-resolution tiles of the published site (`glassroom publish`): what lets the static copy zoom
into a long series with full fidelity and no server (frontend/sitetiles.js reads them).

A series with more points than its overview (publish.SERIES_POINTS buckets) gets levels of bucket
width 1 (the raw points), 8, 64, 512, ... steps. Buckets are aligned on absolute steps (bucket
`step // width`), each holds its first step and the min and max of its values, so a one-step spike
survives at every level. A level is kept only while it has more buckets than the overview and at
most half as many as the level below it (sparse series, e.g. an eval every 250 steps, skip the
levels that would repeat their raw points). Each level is cut into chunks of CHUNK buckets in order
(chunk k = buckets k*CHUNK .. (k+1)*CHUNK-1), so a run that grows changes only the last chunk of each
level.

Chunk files live in one folder shared by every generation, SITE/data/chunks/<key>.json, named by a
SHA-256 of their content (format version, width, steps, mins, maxs), so a re-export writes only the
chunks that changed: one that is already there is the same data. Raw chunks are
{"steps": [...], "values": [...]}, bucket chunks {"steps": [...], "min": [...], "max": [...]}
(null where a value is NaN or infinite). Each generation lists the chunks it references in
data/<generation>/chunks.json; after the switch to a new generation, chunk files no kept generation
lists are deleted (the previous generation keeps its chunks for readers still on it; chunks of a
run marked private since go with the generation that held it).

The index of a series goes into its overview file under "tiles":
  {"version": 1, "factor": 8, "chunk": 4096, "last": [step, value], "overview": {"width", "origin"},
   "levels": [{"width": 1, "chunks": [[first_step, last_step, buckets, key], ...]}, ...]}
(finest level first). A series with at most SERIES_POINTS points has no "tiles": its overview is
its raw points.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Optional

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.folders import replace_file
from glassroom.observe.buckets import BRANCH, aligned_levels
from glassroom.web.data import json_floats

TILE_VERSION = 1
FACTOR = BRANCH          # each level's buckets are FACTOR (8) times wider than the level below
CHUNK = 4096             # buckets per chunk file (raw chunk ~110 KB of JSON, bucket chunk ~160 KB)
CHUNKS_DIR = "chunks"    # SITE/data/chunks/
MANIFEST = "chunks.json"  # SITE/data/<generation>/chunks.json: {"chunks": [key, ...]}
_KEY = re.compile(r"^[0-9a-f]{32}\.json$")


class SiteWriteError(GlassroomError):
    """A chunk file cannot be written: the site's fault, not a run's, so the whole export stops."""


def levels(steps: np.ndarray, values: np.ndarray, overview_points: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """[(width, first step per bucket, mins, maxs)], raw level (width 1) first; [] when the series
    has at most `overview_points` points: observe.buckets.aligned_levels, the store's tile buckets."""
    return aligned_levels(steps, values, overview_points)


def chunk_key(width: int, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> str:
    h = hashlib.sha256(f"glassroom-tiles/{TILE_VERSION}/{width}/{len(steps)}/".encode())
    h.update(np.ascontiguousarray(steps, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(lo, dtype="<f8").tobytes())
    if width > 1:
        h.update(np.ascontiguousarray(hi, dtype="<f8").tobytes())
    return h.hexdigest()[:32]


def chunk_payload(width: int, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> dict:
    if width == 1:
        return {"steps": steps.tolist(), "values": json_floats(lo)}
    return {"steps": steps.tolist(), "min": json_floats(lo), "max": json_floats(hi)}


class ChunkStore:
    """SITE/data/chunks/: writes each chunk once (temporary name, then rename, so a chunk file is
    whole or absent), remembers what this export references, and deletes what no kept generation
    references."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.dir = self.data_dir / CHUNKS_DIR
        if self.dir.is_symlink() or (self.dir.exists() and not self.dir.is_dir()):
            raise GlassroomError(f"--out {self.data_dir.parent}: data/{CHUNKS_DIR} is a symbolic link or a file; "
                                 "a site's folders must be its own (remove it or give a new folder)")
        self.referenced: set[str] = set()
        self.written = 0
        self.reused = 0

    def put(self, width: int, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> str:
        key = chunk_key(width, steps, lo, hi)
        path = self.dir / f"{key}.json"
        if key not in self.referenced and not (path.is_file() and not path.is_symlink()):
            try:
                if path.is_symlink() or path.exists():   # not a chunk we wrote: a folder, a link
                    raise IsADirectoryError(f"{path.name} is not a plain file")
                replace_file(path, json.dumps(chunk_payload(width, steps, lo, hi), separators=(",", ":"), allow_nan=False))
            except OSError as exc:   # the site's fault, not the run's: the whole export stops, nothing switched
                raise SiteWriteError(f"--out {self.data_dir.parent}: cannot write data/{CHUNKS_DIR}/{key}.json "
                                     f"({exc.strerror or exc}); nothing was switched: free space or remove what is "
                                     "in its place, then publish again") from None
            self.written += 1
        else:
            self.reused += 1
        self.referenced.add(key)
        return key

    def index(self, steps: np.ndarray, values: np.ndarray, overview_points: int) -> Optional[dict]:
        """Writes the tiles of one series (those not already there); returns its index, or None
        when the overview holds every point."""
        found = levels(steps, values, overview_points)
        if not found:
            return None
        last = float(values[-1])
        first, newest = int(steps[0]), int(steps[-1])
        out = {"version": TILE_VERSION, "factor": FACTOR, "chunk": CHUNK,
               "last": [newest, last if math.isfinite(last) else None],
               # the overview's buckets (observe.store.downsample): `width` steps each from `origin`
               "overview": {"width": max(1, -(-(newest - first + 1) // overview_points)), "origin": first},
               "levels": []}
        for width, s, lo, hi in found:
            chunks = []
            for at in range(0, len(s), CHUNK):
                cs, clo, chi = s[at:at + CHUNK], lo[at:at + CHUNK], hi[at:at + CHUNK]
                chunks.append([int(cs[0]), int(cs[-1]), int(len(cs)), self.put(width, cs, clo, chi)])
            out["levels"].append({"width": width, "chunks": chunks})
        return out

    def write_manifest(self, generation_dir: Path) -> None:
        path = Path(generation_dir) / MANIFEST
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"chunks": sorted(self.referenced)}, separators=(",", ":")), encoding="utf-8")

    def collect(self, log=lambda m: None) -> int:
        """Deletes chunk files that no generation left in data/ lists; returns how many. A
        generation without a manifest (published before tiles) references none; one whose manifest
        cannot be read stops the collection (nothing is deleted this round)."""
        if not self.dir.is_dir():
            return 0
        keep: set[str] = set()
        for gen in self.data_dir.iterdir():
            if not (gen.is_dir() and gen.name.startswith("g")):
                continue
            manifest = gen / MANIFEST
            if not manifest.exists():
                continue
            try:
                keys = json.loads(manifest.read_text(encoding="utf-8"))["chunks"]
                keep.update(str(k) for k in keys)
            except (OSError, ValueError, KeyError, TypeError):
                log(f"kept every chunk: {manifest} cannot be read")
                return 0
        removed = 0
        for path in self.dir.iterdir():
            stale_tmp = path.name.startswith(".") and ".tmp-" in path.name
            if (_KEY.match(path.name) and path.name[:-5] not in keep) or stale_tmp:
                try:
                    path.unlink()
                    removed += 1
                except OSError:
                    pass
        return removed
