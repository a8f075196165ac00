"""Step buckets: the one place that says which bucket a step falls in and how a bucket's values fold
into (first step, min, max). Pure numpy functions, no SQLite, no torch.

Three things draw a series with them, and they agree because they share this module:
- the store's tiles (observe/tiles.py): level k holds buckets of `width(k)` = 8**k steps aligned on
  absolute steps, `bucket = step >> (SHIFT * k)` (floor, so negative steps work), for k = 1..LEVELS;
  the SQL there folds min/max/last/count per bucket exactly as `fold` does here;
- `downsample` (the live API's raw path and the published overview): `buckets` equal buckets from the
  first step, each its first step, min and max, the newest point kept exactly;
- the published site's tiles (web/site_tiles.py): `aligned_levels`, the same aligned buckets as the
  store's tiles (width 8**k), kept while they thin the series out.

Min and max are over the finite values (NaN where a bucket has none), so a one-step spike survives
every zoom and a gap stays a gap.
"""

from __future__ import annotations

import numpy as np

SHIFT = 3                   # a bucket of level k covers 8**k steps: bucket = step >> (SHIFT * k)
BRANCH = 1 << SHIFT         # each level's buckets are BRANCH times wider than the level below
LEVELS = 6                  # the store's widest tile: 8**6 = 262,144 steps


def width(level: int) -> int:
    """Steps per bucket at `level` (level 0: the raw points, 1 step)."""
    return 1 << (SHIFT * level)


def bucket_of(steps, level: int):
    """The bucket of level `level` that each step falls in (floor division by width(level), also for
    negative steps); works on ints and int64 arrays alike."""
    return steps >> (SHIFT * level)


def bucket_index(steps: np.ndarray, lo: int, width: int) -> np.ndarray:
    """(steps - lo) // width for int64 steps >= lo, without int64 overflow: steps may span more
    than 2**63 (a store holding both -2**62 and 2**62), so the difference is taken in uint64."""
    offset = np.asarray(steps, dtype=np.int64).view(np.uint64) - np.uint64(int(lo) % 2**64)
    return offset // np.uint64(width)


def finite(values: np.ndarray) -> np.ndarray:
    """float64 values with NaN wherever a value is not finite (a gap)."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def fold(index: np.ndarray, steps: np.ndarray, mins: np.ndarray,
         maxs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Consecutive items with the same bucket `index` folded into one: (first step, min of mins, max of
    maxs) per bucket, in order; NaN where a bucket holds no finite value. Items are in step order."""
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    with np.errstate(invalid="ignore"):
        return steps[starts], np.fmin.reduceat(mins, starts), np.fmax.reduceat(maxs, starts)


def downsample(steps: np.ndarray, values: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At most `buckets` buckets of equal step width: per bucket its first step and the min and max
    value, so a one-step spike survives at every zoom; the last point is kept exactly."""
    if len(steps) <= buckets:
        return steps, values, values
    lo, hi = int(steps[0]), int(steps[-1])
    size = max(1, -(-(hi - lo + 1) // buckets))
    clean = finite(values)
    out_steps, mins, maxs = fold(bucket_index(steps, lo, size), steps, clean, clean)
    # The newest point is shown as itself, not hidden inside its bucket.
    return np.r_[out_steps, steps[-1]], np.r_[mins, values[-1]], np.r_[maxs, values[-1]]


def aligned_levels(steps: np.ndarray, values: np.ndarray,
                   overview_points: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """[(width, first step per bucket, mins, maxs)] of aligned buckets (width 8**k, as the store's
    tiles), raw points (width 1) first; [] when the series has at most `overview_points` points. A
    level is kept while it has more buckets than `overview_points` and at most half as many as the
    last kept level (a sparse series skips the levels that would repeat its points). Each level is
    folded from the one below (aligned buckets nest)."""
    if len(steps) <= overview_points:
        return []
    steps = np.asarray(steps, dtype=np.int64)
    clean = finite(values)
    out = [(1, steps, clean, clean)]
    level, s, lo, hi = 0, steps, clean, clean
    while True:
        level += 1
        s, lo, hi = fold(bucket_of(s, level), s, lo, hi)
        if len(s) <= overview_points:
            return out
        if len(s) <= len(out[-1][1]) // 2:
            out.append((width(level), s, lo, hi))
