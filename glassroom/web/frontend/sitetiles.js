// The published site's zoom (`glassroom publish`, no server): a series' overview file holds 2,000
// min/max buckets and, for a long series, the index of its tiles (glassroom/web/site_tiles.py):
// levels of bucket width 1 (raw points), 8, 64, ... steps, each cut into chunk files
// data/chunks/<key>.json. GR.siteSeries answers a view [start, end] at `points` buckets as the live
// API does ({steps, min, max, n}): it picks the coarsest level (the overview first) that still has at
// least `points` buckets over the range, down to the raw points, fetches only the chunks covering
// the range (cached: their names are content hashes, so they never change), takes from it only the
// buckets wholly inside the range and the partial ones at its two ends from the finer levels (as the
// server's tiles do: no value of a step outside the range), and reduces them to at most `points`
// min/max buckets, with the range's exact raw count `n` and its newest point as itself.
"use strict";
window.GR = window.GR || {};

GR.siteTiles = {
  limit: 96,            // files kept in memory (chunks ~100-180 KB of JSON each, overviews smaller)
  cache: new Map(),     // url -> Promise of parsed JSON, oldest first
  async json(url) {
    const c = GR.siteTiles.cache;
    if (c.has(url)) { const p = c.get(url); c.delete(url); c.set(url, p); return p; }
    const p = (async () => {
      const r = await fetch(url);   // immutable files: the browser's cache may keep them too
      if (!r.ok) throw new Error(`${url}: HTTP ${r.status} (the site was re-exported? reload the page)`);
      return r.json();
    })();
    c.set(url, p);
    p.catch(() => c.delete(url));
    while (c.size > GR.siteTiles.limit) c.delete(c.keys().next().value);
    return p;
  },
};

// Buckets of `p` (steps ascending; raw chunks have `values`) from the one that holds step `from`
// (buckets aligned on `origin` with `width` steps) through step `to`.
GR.siteCut = function (p, from, to, width, origin) {
  const lo = width > 1 ? origin + Math.floor((from - origin) / width) * width : from;
  const mn = p.min || p.values, mx = p.max || p.values;
  const out = {steps: [], min: [], max: []};
  for (let i = 0; i < p.steps.length; i++) {
    const s = p.steps[i];
    if (s < lo || s > to) continue;
    out.steps.push(s); out.min.push(mn[i]); out.max.push(mx[i]);
  }
  return out;
};

// At most `points` buckets of equal step width over `c` (min of mins, max of maxs, first step).
GR.siteReduce = function (c, points) {
  const n = c.steps.length;
  if (n <= points) return c;
  const first = c.steps[0], width = Math.max(1, Math.ceil((c.steps[n - 1] - first + 1) / points));
  const out = {steps: [], min: [], max: []};
  let key = null;
  for (let i = 0; i < n; i++) {
    const k = Math.floor((c.steps[i] - first) / width), lo = c.min[i], hi = c.max[i];
    if (k !== key) { key = k; out.steps.push(c.steps[i]); out.min.push(lo); out.max.push(hi); continue; }
    const j = out.steps.length - 1;
    if (lo !== null && (out.min[j] === null || lo < out.min[j])) out.min[j] = lo;
    if (hi !== null && (out.max[j] === null || hi > out.max[j])) out.max[j] = hi;
  }
  return out;
};

// Buckets a level has over [a, b], estimated from its chunks' step ranges and counts.
GR.siteCount = function (level, a, b) {
  let n = 0;
  for (const [f, l, count] of level.chunks) {
    if (l < a || f > b) continue;
    n += count * (Math.min(l, b) - Math.max(f, a) + 1) / (l - f + 1);
  }
  return n;
};

// The chunk files of `level` whose buckets' first steps reach into [a, b].
GR.siteFiles = function (level, a, b, chunkBase) {
  const files = level.chunks.filter(([f, l]) => l >= a && f <= b);
  return Promise.all(files.map((c) => GR.siteTiles.json(`${chunkBase}${c[3]}.json`)));
};

// The buckets of `levels[i]` over [a, b] exactly, as the server's tiles.segments: only the whole
// buckets inside [a, b] (aligned on `origin` + multiples of the width) come from level i, the
// partial ones at the two ends from the level below, down to the raw points; so no value of a step
// outside [a, b] is counted. A level is {width, origin, chunks} or the overview ({width, origin, data}).
// `ends`: the series' first and last steps; a bucket cut by one of them holds no step beyond it,
// so it is taken whole (the full view reads the overview alone).
GR.siteExact = async function (levels, i, a, b, chunkBase, ends) {
  const out = {steps: [], min: [], max: []};
  if (!(a <= b)) return out;
  const level = levels[i], w = level.width, o = level.origin || 0;
  const lo = w > 1 && a > ends[0] ? o + Math.ceil((a - o) / w) * w : a;
  const hi = w > 1 && b < ends[1] ? o + Math.floor((b + 1 - o) / w) * w - 1 : b;
  if (lo > hi) return GR.siteExact(levels, i - 1, a, b, chunkBase, ends);
  const [left, parts, right] = await Promise.all([
    lo > a ? GR.siteExact(levels, i - 1, a, lo - 1, chunkBase, ends) : out,
    level.data ? [level.data] : GR.siteFiles(level, lo, hi, chunkBase),
    hi < b ? GR.siteExact(levels, i - 1, hi + 1, b, chunkBase, ends) : out]);
  const pieces = [left, ...parts.map((p) => GR.siteCut(p, lo, hi, 1, 0)), right];
  const cut = {steps: [], min: [], max: []};
  for (const c of pieces) for (const k of ["steps", "min", "max"]) for (const v of c[k]) cut[k].push(v);
  return cut;
};

// The number of raw points in [a, b] and the newest of them ([step, value], null when none): the
// raw chunks' counts, reading only the (at most two) chunks that [a, b] cuts. `newest` (the
// series' last [step, value]) is the answer when b reaches it.
GR.siteRaw = async function (raw, a, b, chunkBase, newest) {
  let n = 0;
  for (const c of raw.chunks) {
    const [f, l, count] = c;
    if (l < a || f > b) continue;
    if (f >= a && l <= b) { n += count; continue; }
    const p = await GR.siteTiles.json(`${chunkBase}${c[3]}.json`);
    const cut = GR.siteCut(p, a, b, 1, 0);
    n += cut.steps.length;
  }
  if (b >= newest[0]) return {n, newest};
  newest = null;
  for (let j = raw.chunks.length - 1; j >= 0; j--) {   // the last chunk starting at or before b
    const c = raw.chunks[j];
    if (c[0] > b) continue;
    if (c[1] < a) break;
    const p = await GR.siteTiles.json(`${chunkBase}${c[3]}.json`);
    const cut = GR.siteCut(p, a, b, 1, 0), k = cut.steps.length - 1;
    if (k >= 0) newest = [cut.steps[k], cut.min[k]];
    break;
  }
  return {n, newest};
};

// overview: a series file ({steps, min, max, n[, tiles]}); chunkBase: the URL of data/chunks/.
GR.siteSeries = async function (overview, start, end, points, chunkBase) {
  // as the live API: 1,500 buckets when none are asked for, else 2 to 20,000
  points = points === null || points === undefined || !Number.isFinite(Number(points)) ? 1500
    : Math.min(20000, Math.max(2, Math.floor(Number(points))));
  const lo = start === null || start === undefined ? -Infinity : Number(start);
  const hi = end === null || end === undefined ? Infinity : Number(end);
  const t = overview.tiles;
  if (!t || !Array.isArray(t.levels) || !t.levels.length) {   // the overview holds every raw point
    const c = GR.siteCut(overview, lo, hi, 1, 0);
    return Object.assign(GR.siteReduce(c, points), {n: c.steps.length});
  }
  const raw = t.levels[0], [lastStep, lastValue] = t.last;
  const a = Math.max(lo, raw.chunks[0][0]), b = Math.min(hi, lastStep);
  const empty = {steps: [], min: [], max: [], n: 0};
  if (!(a <= b)) return empty;
  // The coarsest of the overview and the levels with at least `points` buckets over the range
  // (estimated from the chunks' step ranges and counts), down to the raw points.
  const o = t.overview || {width: 1, origin: 0};   // the overview's buckets: `width` steps from `origin`
  const levels = t.levels.concat([{width: o.width, origin: o.origin, data: overview}]);
  let top = 0;
  if (overview.steps.filter((s) => s >= a && s <= b).length >= points) top = levels.length - 1;
  else for (let i = t.levels.length - 1; i > 0; i--) {
    if (GR.siteCount(t.levels[i], a, b) >= points) { top = i; break; }
  }
  const [cut, counted] = await Promise.all([GR.siteExact(levels, top, a, b, chunkBase, [raw.chunks[0][0], lastStep]),
    GR.siteRaw(raw, a, b, chunkBase, [lastStep, lastValue])]);
  const out = GR.siteReduce(cut, points);
  if (out === cut && top === 0) return Object.assign(out, {n: out.steps.length});   // the raw points themselves
  // The newest point of the range is shown as itself, not hidden inside its bucket (as the live API does).
  const newest = counted.newest;
  if (newest) {
    out.steps.push(newest[0]); out.min.push(newest[1]); out.max.push(newest[1]);
  }
  return Object.assign(out, {n: counted.n});
};
