// Charts: line charts on uPlot fed with min/max buckets (a spike stays visible at any zoom), event
// markers, an optional predicted band with its deviation readout, synced zoom that re-fetches detail,
// live appends, incidents (incidents.js draws them), a marked point (permalink.js) with its value in
// the readout, an x axis in steps or, on the compare page, tokens / FLOPs (compute.js converts);
// and a canvas heatmap for the tokens each expert received, per layer, over time.
"use strict";

GR.charts = [];
GR.fmt = function (v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e15) return v.toExponential(2).replace("e+", "e");
  if (a >= 1e12) return (v / 1e12).toFixed(2) + "T";
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "B";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (Number.isInteger(v)) return String(v);
  if (a >= 100) return v.toFixed(1);
  return a >= 0.01 ? v.toPrecision(4) : v.toExponential(2);
};
// Axis ticks: as many decimals as the tick spacing needs; suffixes for large values.
GR.ticks = function (u, vals, axisIdx, space, incr) {
  const log = axisIdx === 1 && u.scales.y && u.scales.y.distr === 3;
  const dec = Math.max(0, Math.min(8, -Math.floor(Math.log10(incr || 1))));
  return vals.map((v) => {
    if (v === null || v === undefined) return "";
    const a = Math.abs(v);
    if (a >= 1e15) { const e = Math.floor(Math.log10(a)); return +(v / 10 ** e).toPrecision(3) + "e" + e; }
    if (a >= 1e12) return +(v / 1e12).toPrecision(3) + "T";
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + "B";
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    if (log || (a > 0 && a < 1e-3)) return String(+v.toPrecision(2)).replace(/e-(\d)$/, "e-$1");
    return v.toFixed(dec);
  });
};
GR.axisSize = (u, values) => values ? Math.max(40, 22 + 8 * Math.max(...values.map((v) => String(v).length))) : 48;

// Colours: one per domain, the same in every chart of a page (golden-angle hues over the sorted list).
GR.palette = {};
GR.setDomains = function (domains) {
  [...new Set(domains)].sort().forEach((d, i) => { GR.palette[d] = `hsl(${(i * 137.508 + 205) % 360}, 62%, 46%)`; });
};
GR.colorFor = (key, i) => GR.palette[key] || `hsl(${(i * 137.508 + 20) % 360}, 58%, 45%)`;
GR.EVENT_COLORS = {anomaly: "#d62728", note: "#1f77b4", checkpoint: "#b0b7c3", start: "#2ca02c",
  resume: "#2ca02c", end: "#555", error: "#d62728"};
GR.events = [];   // events drawn as markers on every chart (eval events are too many to mark)

// Downsampled buckets to drawable points: a bucket whose min and max differ becomes two points, the
// min at its first step and the max half a bucket later, so the line passes through both extremes.
GR.bucketsToXY = function (p) {
  const xs = [], ys = [];
  const n = p.steps.length;
  for (let i = 0; i < n; i++) {
    const s = p.steps[i], lo = p.min[i], hi = p.max[i];
    if (lo === hi || lo === null || hi === null || i === n - 1) { xs.push(s); ys.push(hi === null ? lo : hi); continue; }
    const next = i + 1 < n ? p.steps[i + 1] : s + 1;
    const mid = s + Math.max(0.5, (next - s) / 2 - 0.5);
    xs.push(s, Math.min(mid, next - 0.25)); ys.push(lo, hi);
  }
  return [xs, ys];
};

// The index of the drawn x nearest to x (null when there is none or x lies outside the data).
function nearest(xs, x) {
  if (!xs.length || x < xs[0] - 0.5 || x > xs[xs.length - 1] + 0.5) return null;
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= x) lo = m; else hi = m; }
  return Math.abs(xs[hi] - x) < Math.abs(x - xs[lo]) ? hi : lo;
}

function interp(xs, ys, x) {
  if (!xs.length || x < xs[0] || x > xs[xs.length - 1]) return null;
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= x) lo = m; else hi = m; }
  if (xs[hi] === xs[lo]) return ys[lo];
  return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo]);
}

// A line chart. lines: [{key, run, name, label, color, dash, width}]; opts: {title, log, band, unit,
// axis}: axis (compute.js) maps a run's steps to the x drawn (tokens, FLOPs); without it x is the step.
GR.LineChart = class {
  constructor(parent, lines, opts) {
    this.lines = lines;
    this.opts = opts || {};
    this.title = this.opts.title;
    this.raw = {};         // key -> [xs, ys] currently drawn
    this.zoom = null;      // [min, max] when zoomed in
    this.card = GR.el("section", "card" + (this.opts.wide ? " wide" : ""), parent);
    const head = GR.el("div", "card-head", this.card);
    GR.el("h3", "", head).textContent = this.title;
    this.readout = GR.el("div", "readout", head);
    const link = GR.el("button", "link", head);
    link.textContent = "link"; link.title = "copy a link to this chart, its range and the marked point";
    link.addEventListener("click", () => GR.permalink && GR.permalink.copy(this, link));
    this.body = GR.el("div", "chart", this.card);
    this.axis = this.opts.axis || null;
    this.band = this.opts.band || null;   // {steps, mean, lo, hi}: a predicted curve with its interval
    this._build();
    GR.charts.push(this);
  }

  _build() {
    const series = [this.axis ? {label: this.axis.unit, value: (u, v) => GR.fmt(v)} : {label: "step"}];
    for (const l of this.lines) {
      series.push({label: l.label, stroke: l.color, width: l.width || 1.5, dash: l.dash, spanGaps: true,
        points: l.points ? {show: true, size: 6, fill: l.color} : {show: false}, value: (u, v) => GR.fmt(v)});
    }
    const bands = [];
    if (this.band) {
      const n = series.length;
      series.push({label: "predicted", stroke: "#6b7280", width: 1.25, dash: [6, 4], spanGaps: true, points: {show: false}, value: (u, v) => GR.fmt(v)});
      series.push({label: "predicted hi", stroke: "rgba(107,114,128,0.35)", width: 0.75, spanGaps: true, points: {show: false}});
      series.push({label: "predicted lo", stroke: "rgba(107,114,128,0.35)", width: 0.75, spanGaps: true, points: {show: false}});
      bands.push({series: [n + 1, n + 2], fill: "rgba(107,114,128,0.16)"});
    }
    const self = this;
    const width = Math.max(280, this.body.clientWidth || 560);
    const opts = {
      width, height: this.opts.height || 220,
      series, bands,
      scales: {x: {time: false}, y: this.opts.log ? {distr: 3} : {}},
      axes: [
        {stroke: "#6b7280", grid: {stroke: "#eef0f3"}, ticks: {stroke: "#e5e7eb"}, values: GR.ticks},
        {stroke: "#6b7280", grid: {stroke: "#eef0f3"}, ticks: {stroke: "#e5e7eb"}, size: GR.axisSize, values: GR.ticks},
      ],
      legend: {live: true},
      cursor: {sync: {key: "gr-x", setSeries: false}, drag: {x: true, y: false}},
      hooks: {
        draw: [(u) => self._drawMarkers(u)],
        setSelect: [(u) => {
          if (u.select.width > 4) {
            const min = u.posToVal(u.select.left, "x"), max = u.posToVal(u.select.left + u.select.width, "x");
            u.setSelect({width: 0, height: 0}, false);
            GR.zoomAll([Math.floor(min), Math.ceil(max)]);
          }
        }],
      },
    };
    opts.cursor.drag.setScale = false;
    this.u = new uPlot(opts, this._data(), this.body);
    if (this.band) {   // the band's edges need no legend entries of their own
      const rows = this.u.root.querySelectorAll(".u-legend .u-series");
      for (const i of [series.length - 1, series.length - 2]) if (rows[i]) rows[i].style.display = "none";
    }
    this.u.over.addEventListener("dblclick", () => GR.zoomAll(null));
    // A click (not a drag) marks the x under the cursor on every chart.
    let downX = null;
    this.u.over.addEventListener("mousedown", (e) => { downX = e.clientX; });
    this.u.over.addEventListener("click", (e) => {
      if (downX === null || Math.abs(e.clientX - downX) > 3 || !GR.permalink) return;
      const x = this.u.posToVal(this.u.cursor.left, "x");
      if (Number.isFinite(x)) GR.permalink.markAt(x, this);
    });
  }

  // The x drawn for a run's step: the step itself, or its tokens / FLOPs (null: not known).
  xOf(run, step) { return this.axis ? this.axis.toX(run, step) : step; }

  _data() {
    const tables = this.lines.map((l) => this.raw[l.key] || [[], []]);
    if (this.band) tables.push([this.band.steps, this.band.mean, this.band.hi, this.band.lo]);
    if (!tables.length) return [[]];
    return uPlot.join(tables);
  }

  _drawMarkers(u) {
    const ctx = u.ctx, [x0, x1] = [u.scales.x.min, u.scales.x.max];
    if (x0 === undefined || x0 === null) return;
    ctx.save();
    for (const e of GR.events) {
      if (e.step === null || e.step === undefined || e.kind === "eval" || e.kind === "incident") continue;
      if (this.opts.runs && e.run && !this.opts.runs.includes(e.run)) continue;
      const at = this.xOf(e.run, e.step);
      if (at === null || at < x0 || at > x1) continue;
      const x = Math.round(u.valToPos(at, "x", true)) + 0.5;
      ctx.strokeStyle = GR.EVENT_COLORS[e.kind] || "#999";
      ctx.lineWidth = e.kind === "anomaly" ? 1.5 * devicePixelRatio : devicePixelRatio;
      ctx.setLineDash(e.kind === "checkpoint" ? [3 * devicePixelRatio, 3 * devicePixelRatio] : []);
      ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
    }
    ctx.restore();
    if (GR.drawIncidents) GR.drawIncidents(this, u);
    if (GR.mark !== null && GR.mark !== undefined && GR.mark >= x0 && GR.mark <= x1) {   // the marked point
      const x = Math.round(u.valToPos(GR.mark, "x", true)) + 0.5;
      ctx.save();
      ctx.fillStyle = "rgba(250, 204, 21, 0.28)";
      ctx.fillRect(x - 3 * devicePixelRatio, u.bbox.top, 6 * devicePixelRatio, u.bbox.height);
      ctx.strokeStyle = "#ca8a04"; ctx.lineWidth = devicePixelRatio;
      ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
      ctx.restore();
    }
  }

  // Replace the drawn points from a series payload ({name: {steps, min, max}}) of one run.
  setPayload(run, series) {
    for (const l of this.lines) {
      if (l.run !== run || !series[l.name]) continue;
      const xy = GR.bucketsToXY(series[l.name]);
      this.raw[l.key] = this.axis ? this.axis.convert(run, xy) : xy;
    }
    this.redraw();
  }

  // Live points (steps, values) for one run's series name: appended after the last drawn step.
  append(run, name, steps, values) {
    let changed = false;
    for (const l of this.lines) {
      if (l.run !== run || l.name !== name) continue;
      const r = this.raw[l.key] || (this.raw[l.key] = [[], []]);
      const last = r[0].length ? r[0][r[0].length - 1] : -Infinity;
      for (let i = 0; i < steps.length; i++) {
        const x = this.xOf(run, steps[i]);
        if (x !== null && x > last) { r[0].push(x); r[1].push(values[i]); changed = true; }
      }
    }
    if (changed) this.redraw();
    return changed;
  }

  redraw() {
    this.u.setData(this._data(), !this.zoom);
    if (this.zoom) this.u.setScale("x", {min: this.zoom[0], max: this.zoom[1]});
    this._readout();
  }

  // The newest value of the first line, and with a band, how far it is from the prediction.
  _readout() {
    // With a band, the line of the predicted metric (e.g. eval/macro/loss), else the first line.
    const l = (this.band && this.band.metric && this.lines.find((x) => x.name === this.band.metric)) || this.lines[0];
    const r = l && this.raw[l.key];
    if (!r || !r[0].length) { this.readout.textContent = ""; this.marked = null; return; }
    let step = r[0][r[0].length - 1], value = r[1][r[1].length - 1];
    const marked = GR.mark !== null && GR.mark !== undefined;
    if (marked) {   // the value at the marked x: the drawn point nearest to it
      const i = nearest(r[0], GR.mark);
      step = GR.mark; value = i === null ? null : r[1][i];
      this.marked = {x: GR.mark, value, at: i === null ? null : r[0][i]};
    } else this.marked = null;
    const where = this.axis ? `${GR.fmt(step)} ${this.axis.unit}` : `step ${GR.fmt(step)}`;
    let text = `${GR.fmt(value)} at ${where}`;
    if (marked) {   // the nearest drawn point may lie off the mark (evals every N steps, a coarse bucket)
      const at = this.marked.at, off = at !== null && (this.axis ? GR.fmt(at) !== GR.fmt(GR.mark) : Math.abs(at - GR.mark) > 0.5);
      const atText = at === null ? "" : this.axis ? `${GR.fmt(at)} ${this.axis.unit}` : `step ${GR.fmt(Math.round(at))}`;
      text = value === null ? `no value at ${where} (marked)` : off ? `${GR.fmt(value)} at ${atText}, nearest to the marked ${where}` : `${GR.fmt(value)} at ${where} (marked)`;
    }
    if (this.band && value !== null) {
      const mean = interp(this.band.steps, this.band.mean, step);
      const lo = interp(this.band.steps, this.band.lo, step), hi = interp(this.band.steps, this.band.hi, step);
      if (mean !== null) {
        const dev = (value - mean) / mean * 100;
        const inside = value >= lo && value <= hi;
        // The band's edges are +-z sigma (z = 1.96 for a 95% band).
        const z = {0.9: 1.645, 0.95: 1.96, 0.99: 2.576}[this.band.confidence] || 1.96;
        const edge = value >= mean ? hi : lo;
        const sigmas = edge !== mean ? (value - mean) / Math.abs(edge - mean) * z : 0;
        const name = l.name && l.name !== "train/loss" ? `${l.name} ` : "";
        text = `${name}${text} · predicted ${GR.fmt(mean)} [${GR.fmt(lo)}, ${GR.fmt(hi)}] · ${dev >= 0 ? "+" : ""}${dev.toFixed(1)}%, ` +
          `${sigmas >= 0 ? "+" : ""}${sigmas.toFixed(1)} sigma, ${inside ? "inside" : "outside"} the band`;
        this.readout.classList.toggle("outside", !inside);
        this.deviation = {step, value, mean, lo, hi, percent: dev, inside};
      }
    }
    this.readout.textContent = text;
  }

  resize() { this.u.setSize({width: Math.max(280, this.body.clientWidth), height: this.opts.height || 220}); }
};

// A heatmap of tokens per expert over time for one MoE layer: columns are step buckets, rows are
// experts, colour is the expert's share relative to a uniform share (1 = balanced).
GR.Heatmap = class {
  constructor(parent, title) {
    this.title = title;
    this.card = GR.el("section", "card", parent);
    const head = GR.el("div", "card-head", this.card);
    GR.el("h3", "", head).textContent = title;
    this.readout = GR.el("div", "readout", head);
    this.canvas = GR.el("canvas", "heatmap", this.card);
    this.legend = GR.el("div", "heat-legend", this.card);
    this.legend.innerHTML = `<span>0</span><i></i><span>1× (balanced)</span><i class="hot"></i><span>≥3× uniform share</span>`;
    this.data = {steps: [], values: []};
    this.canvas.addEventListener("mousemove", (e) => this._hover(e));
    GR.charts.push(this);
  }

  static color(t) {   // t in [0, 1]: a perceptual dark-blue -> teal -> yellow ramp
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const x = Math.min(1, Math.max(0, t)) * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x)), f = x - i;
    return stops[i].map((c, k) => Math.round(c + (stops[i + 1][k] - c) * f));
  }

  setData(payload) { this.data = payload; this.draw(); }

  draw() {
    const {steps, values} = this.data;
    const cssW = Math.max(280, this.card.clientWidth - 24), rows = values.length ? values[0].length : 0;
    const cssH = Math.max(80, Math.min(220, rows * 14 + 24));
    const dpr = devicePixelRatio || 1;
    this.canvas.width = cssW * dpr; this.canvas.height = cssH * dpr;
    this.canvas.style.width = cssW + "px"; this.canvas.style.height = cssH + "px";
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cssW, cssH);
    this.plot = {left: 34, top: 4, width: cssW - 40, height: cssH - 22, rows};
    if (!steps.length || !rows) { ctx.fillStyle = "#9ca3af"; ctx.fillText("no data yet", 40, 20); return; }
    const cols = steps.length, img = new ImageData(cols, rows);
    for (let c = 0; c < cols; c++) {
      const v = values[c], total = v.reduce((a, b) => a + (b || 0), 0);
      for (let r = 0; r < rows; r++) {
        const rel = total > 0 && v[r] !== null ? v[r] * rows / total : 0;
        const [R, G, B] = GR.Heatmap.color(rel / 3);
        const o = (r * cols + c) * 4;
        img.data[o] = R; img.data[o + 1] = G; img.data[o + 2] = B; img.data[o + 3] = 255;
      }
    }
    const off = document.createElement("canvas");
    off.width = cols; off.height = rows;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    const p = this.plot;
    ctx.drawImage(off, p.left, p.top, p.width, p.height);
    ctx.fillStyle = "#6b7280"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right";
    for (let r = 0; r < rows; r += Math.max(1, Math.ceil(rows / 8))) ctx.fillText(`e${r}`, p.left - 4, p.top + (r + 0.75) * p.height / rows);
    ctx.textAlign = "left"; ctx.fillText(`step ${GR.fmt(steps[0])}`, p.left, cssH - 4);
    ctx.textAlign = "right"; ctx.fillText(`step ${GR.fmt(steps[cols - 1])}`, p.left + p.width, cssH - 4);
    const last = values[cols - 1], total = last.reduce((a, b) => a + (b || 0), 0);
    const top = total ? Math.max(...last.map((x) => (x || 0) * rows / total)) : 0;
    this.readout.textContent = `busiest expert ${top.toFixed(2)}× uniform at step ${GR.fmt(steps[cols - 1])}`;
  }

  _hover(e) {
    const p = this.plot, {steps, values} = this.data;
    if (!p || !steps.length) return;
    const rect = this.canvas.getBoundingClientRect();
    const c = Math.floor((e.clientX - rect.left - p.left) / p.width * steps.length);
    const r = Math.floor((e.clientY - rect.top - p.top) / p.height * p.rows);
    if (c < 0 || c >= steps.length || r < 0 || r >= p.rows) return;
    const v = values[c], total = v.reduce((a, b) => a + (b || 0), 0);
    this.canvas.title = `step ${steps[c]} · expert ${r} · ${total ? (v[r] * p.rows / total).toFixed(2) : "–"}× uniform share`;
  }

  resize() { this.draw(); }
};

GR.el = function (tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
};

window.addEventListener("resize", () => {
  clearTimeout(GR._resizeTimer);
  GR._resizeTimer = setTimeout(() => GR.charts.forEach((c) => c.resize()), 150);
});
