// The compare page's x axis by compute: each run's steps mapped to the tokens it had seen, or to
// training FLOPs (tokens x the run's FLOPs per token). Tokens at a step come from the run's
// `data/tokens_seen` series when it has one (interpolated between its points; past the newest one,
// extended at the newest tokens per step), else step x `meta.compute.tokens_per_step`. A run with
// neither (or, for FLOPs, no `flops_per_token`) is left off that axis, and the page says so.
"use strict";

GR.TOKENS_SEEN = "data/tokens_seen";
GR.AXIS_UNITS = {tokens: "tokens", flops: "FLOPs"};

GR.ComputeAxis = class {
  constructor(mode) {
    this.mode = mode;                // "tokens" | "flops"
    this.unit = GR.AXIS_UNITS[mode];
    this.runs = {};                  // run -> {steps, tokens, perStep, flopsPerToken} or {missing: why}
  }

  // Reads each run's compute facts; fetches its tokens_seen series. Returns the runs left out, with why.
  async prepare(runs, metas) {
    const out = [];
    await Promise.all(runs.map(async (run, i) => {
      const meta = metas[i] || {}, c = meta.compute && typeof meta.compute === "object" ? meta.compute : {};
      const num = (v) => typeof v === "number" && Number.isFinite(v) && v > 0 ? v : null;
      const perStep = num(c.tokens_per_step), fpt = num(c.flops_per_token);
      const hasSeries = Array.isArray(meta.names) && meta.names.includes(GR.TOKENS_SEEN);
      let why = null;
      if (!hasSeries && perStep === null) why = `no ${GR.TOKENS_SEEN} series and no tokens per step recorded`;
      else if (this.mode === "flops" && fpt === null) why = "no FLOPs per token recorded (the model config is missing)";
      if (why) { this.runs[run] = {missing: why}; out.push({run, why}); return; }
      const r = {steps: [], tokens: [], perStep, flopsPerToken: fpt};
      if (hasSeries) {
        const p = (await GR.source.series(run, [GR.TOKENS_SEEN], null, null, 4000)).series[GR.TOKENS_SEEN];
        if (p) p.steps.forEach((s, k) => { const v = p.min[k] ?? p.max[k]; if (Number.isFinite(v)) { r.steps.push(s); r.tokens.push(v); } });
      }
      this.runs[run] = r;
    }));
    return out;
  }

  has(run) { const r = this.runs[run]; return !!r && !r.missing; }

  // Tokens seen at a (possibly fractional) step; null when not known.
  tokensAt(run, step) {
    const r = this.runs[run];
    if (!r || r.missing || !Number.isFinite(step)) return null;
    const xs = r.steps, ys = r.tokens, n = xs.length;
    if (!n) return r.perStep === null ? null : step * r.perStep;
    if (step <= xs[0]) return Math.max(0, ys[0] - (xs[0] - step) * this._slope(r, 0));
    if (step >= xs[n - 1]) return ys[n - 1] + (step - xs[n - 1]) * this._slope(r, n - 2);
    let lo = 0, hi = n - 1;
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= step) lo = m; else hi = m; }
    return ys[lo] + (ys[hi] - ys[lo]) * (step - xs[lo]) / (xs[hi] - xs[lo]);
  }

  // Tokens per step between points i and i+1 (the recorded tokens per step when there is one pair or none).
  _slope(r, i) {
    const xs = r.steps, ys = r.tokens;
    if (i >= 0 && i + 1 < xs.length && xs[i + 1] > xs[i]) return (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]);
    if (r.perStep !== null) return r.perStep;
    return xs.length && xs[xs.length - 1] > 0 ? ys[ys.length - 1] / xs[xs.length - 1] : 0;
  }

  toX(run, step) {
    const t = this.tokensAt(run, step);
    if (t === null) return null;
    return this.mode === "flops" ? t * this.runs[run].flopsPerToken : t;
  }

  // The step at which a run reached x (inverse of toX; the series only grows). null: not known.
  toStep(run, x) {
    const r = this.runs[run];
    if (!r || r.missing || !Number.isFinite(x)) return null;
    const t = this.mode === "flops" ? x / r.flopsPerToken : x;
    const xs = r.steps, ys = r.tokens, n = xs.length;
    if (!n) return r.perStep ? t / r.perStep : null;
    const slope = (i) => this._slope(r, i) || 1;
    if (t <= ys[0]) return xs[0] - (ys[0] - t) / slope(0);
    if (t >= ys[n - 1]) return xs[n - 1] + (t - ys[n - 1]) / slope(n - 2);
    let lo = 0, hi = n - 1;
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (ys[m] <= t) lo = m; else hi = m; }
    return ys[hi] === ys[lo] ? xs[lo] : xs[lo] + (xs[hi] - xs[lo]) * (t - ys[lo]) / (ys[hi] - ys[lo]);
  }

  // A zoom range in x units -> the step range to fetch for one run (whole steps, widened by one).
  stepRange(run, range) {
    if (!range) return [null, null];
    const a = this.toStep(run, range[0]), b = this.toStep(run, range[1]);
    // Past what a server takes (a hand-made link to 1e30 tokens), or a series that went backwards
    // (a run whose count restarted): the whole run, never a request the server refuses.
    const most = Number.MAX_SAFE_INTEGER;
    if (!Number.isFinite(a) || !Number.isFinite(b) || a > b) return [null, null];
    return [Math.min(most, Math.max(0, Math.floor(a) - 1)), Math.min(most, Math.max(0, Math.ceil(b) + 1))];
  }

  // Drawable [xs, ys] in steps -> in x units (points whose x is not known are dropped).
  convert(run, xy) {
    const xs = [], ys = [];
    for (let i = 0; i < xy[0].length; i++) { const x = this.toX(run, xy[0][i]); if (x !== null) { xs.push(x); ys.push(xy[1][i]); } }
    return [xs, ys];
  }

  // Live points of tokens_seen extend the mapping before anything else of that update is converted.
  extend(run, steps, values) {
    const r = this.runs[run];
    if (!r || r.missing) return;
    for (let i = 0; i < steps.length; i++) {
      const last = r.steps.length ? r.steps[r.steps.length - 1] : -Infinity;
      if (steps[i] > last && Number.isFinite(values[i])) { r.steps.push(steps[i]); r.tokens.push(values[i]); }
    }
  }

  // A prediction band drawn on a run's steps -> the same band in x units.
  band(run, band) {
    if (!band || !this.has(run)) return null;
    const keep = band.steps.map((s, i) => [this.toX(run, s), i]).filter(([x]) => x !== null);
    const pick = (a) => keep.map(([, i]) => a[i]);
    return Object.assign({}, band, {steps: keep.map(([x]) => x), mean: pick(band.mean), lo: pick(band.lo), hi: pick(band.hi)});
  }
};
