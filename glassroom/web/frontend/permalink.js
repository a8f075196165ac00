// Permalinks: the page URL's hash holds the view, `#chart=<first metric of a chart>&start=S&end=E&point=P`
// (the compare page adds `&x=step|tokens|flops`; there S, E and P are in that axis's units). The hash
// follows the view as the user zooms or clicks a point (history.replaceState: no history entries);
// opening such a URL zooms every chart to [S, E], scrolls to the chart and marks P (a highlight line,
// and each chart's readout gives its value there). A hash is parsed defensively: garbage, huge
// numbers, start after end or an unknown chart are ignored, never an exception.
"use strict";

GR.mark = null;   // the marked x value (a step, or tokens / FLOPs on the compare page), or null

GR.permalink = {
  AXES: ["step", "tokens", "flops"],

  // {chart, start, end, point, x} from a hash string; every field null when absent or unusable.
  parse(hash) {
    const out = {chart: null, start: null, end: null, point: null, x: null};
    let params;
    try { params = new URLSearchParams(String(hash || "").replace(/^#/, "")); } catch (e) { return out; }
    const get = (k) => { const v = params.get(k); return v === null ? null : v.slice(0, 300); };
    const x = get("x");
    out.x = GR.permalink.AXES.includes(x) && GR.boot.page === "compare" ? x : null;   // only the compare page has axes
    // Steps are integers a server accepts; tokens and FLOPs are any finite non-negative-ish number.
    const most = out.x === "tokens" || out.x === "flops" ? 1e30 : Number.MAX_SAFE_INTEGER;
    const num = (k) => {
      const raw = get(k);
      if (raw === null || !/^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(raw)) return null;
      const v = Number(raw);
      if (!Number.isFinite(v) || Math.abs(v) > most) return null;
      return out.x === "tokens" || out.x === "flops" ? v : Math.round(v);
    };
    out.start = num("start"); out.end = num("end"); out.point = num("point");
    if (out.start === null || out.end === null || out.start >= out.end) { out.start = null; out.end = null; }
    const chart = get("chart");
    out.chart = chart && chart.length <= 200 ? chart : null;
    return out;
  },

  // The hash for a view: {chart, start, end, point, x}; null fields are left out.
  format(view) {
    const p = new URLSearchParams();
    if (view.chart) p.set("chart", view.chart);
    if (view.start !== null && view.start !== undefined && view.end !== null && view.end !== undefined) {
      p.set("start", String(view.start)); p.set("end", String(view.end));
    }
    if (view.point !== null && view.point !== undefined) p.set("point", String(view.point));
    if (view.x && view.x !== "step") p.set("x", view.x);
    const text = p.toString();
    return text ? `#${text}` : "";
  },

  // A range around a step for links that only know the step (events, incidents, search results).
  around(step, last) {
    const span = Math.max(20, Math.round((Number.isFinite(last) && last > step ? last : step) / 20));
    return {start: Math.max(0, step - span), end: step + span, point: step};
  },

  // The run page permalink at a step (or to a metric's chart with `chart`).
  runLink(run, view) { return GR.runHref(run) + GR.permalink.format(view || {}); },

  // The view as the page shows it now; `chart` names the chart the user last touched.
  current(chart) {
    const z = GR.zoom;
    const name = chart ? GR.permalink.chartName(chart) : GR.activeChart;
    return {chart: name || null, start: z ? z[0] : null, end: z ? z[1] : null, point: GR.mark, x: GR.xMode || null};
  },

  // The hash follows the view; nothing is written until the user zooms or marks something.
  update() {
    const hash = GR.permalink.format(GR.permalink.current());
    try { history.replaceState(null, "", location.pathname + location.search + hash); } catch (e) { /* file:// */ }
  },

  chartName(c) {
    if (c.vector) return c.vector.name;
    const first = c.lines.find((l) => l.name);
    return first ? first.name : null;
  },

  // The chart a permalink names: the one whose first metric it is, else the first that draws it.
  findChart(name) {
    if (!name) return null;
    const lines = GR.charts.filter((c) => c.lines);
    return lines.find((c) => GR.permalink.chartName(c) === name) || lines.find((c) => c.lines.some((l) => l.name === name)) || null;
  },

  // Applies a parsed hash to the page: zoom, mark, scroll. Returns whether anything was applied.
  apply(view, scroll) {
    if (!view) return false;
    GR.mark = view.point;
    if (view.start !== null) GR.zoomAll([view.start, view.end], true);
    const chart = GR.permalink.findChart(view.chart);
    GR.activeChart = chart ? view.chart : null;
    GR.charts.forEach((c) => c.lines && c.redraw());
    if (chart && scroll) GR.permalink.scrollTo(chart);
    return view.start !== null || view.point !== null || !!chart;
  },

  // Scrolls the chart into view once the page has settled (panels above it fill in as data loads).
  scrollTo(chart) {
    chart.card.classList.add("linked");
    const go = () => chart.card.scrollIntoView({block: "center"});
    go();
    for (const ms of [300, 1000]) setTimeout(() => { if (!GR.userScrolled) go(); if (ms === 1000) GR.permalink.settled = true; }, ms);
    setTimeout(() => chart.card.classList.remove("linked"), 3000);
  },

  // Marks x on every chart (a click on a chart); the hash follows.
  markAt(x, chart) {
    GR.mark = x === null ? null : (GR.xMode && GR.xMode !== "step" ? Number(x.toPrecision(6)) : Math.round(x));
    if (chart) GR.activeChart = GR.permalink.chartName(chart);
    GR.charts.forEach((c) => c.lines && c.redraw());
    GR.permalink.update();
  },

  // Copies the chart's permalink (its first metric, the range, the point); where the clipboard is
  // refused (an insecure origin), the link is shown selected for the user to copy.
  async copy(chart, button) {
    const hash = GR.permalink.format(GR.permalink.current(chart));
    GR.activeChart = GR.permalink.chartName(chart);
    const url = location.href.replace(/#.*$/, "") + hash;
    try { history.replaceState(null, "", location.pathname + location.search + hash); } catch (e) { /* file:// */ }
    GR.lastCopied = url;
    try {
      await navigator.clipboard.writeText(url);
      button.textContent = "copied";
    } catch (e) {
      let field = chart.card.querySelector("input.permalink");
      if (!field) { field = GR.el("input", "permalink", chart.card); field.readOnly = true; }
      field.value = url; field.hidden = false; field.select();
      button.textContent = "copy it";
    }
    setTimeout(() => { button.textContent = "link"; }, 2000);
  },

  // Once the page's charts exist: apply the hash (and again whenever the user changes it).
  start() {
    if (GR.permalink.started) return;
    GR.permalink.started = true;
    GR.permalink.apply(GR.permalink.parse(location.hash), true);
    GR.permalinkApplied = true;
    window.addEventListener("hashchange", () => GR.permalink.apply(GR.permalink.parse(location.hash), true));
    for (const ev of ["wheel", "keydown", "touchmove", "mousedown"]) window.addEventListener(ev, () => { GR.userScrolled = true; }, {once: true, passive: true});
  },
};
