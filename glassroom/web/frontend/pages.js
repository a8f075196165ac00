// The three pages: the run list, one run (charts, heatmaps, events, config), and several runs
// compared on shared charts. Which charts a run gets follows from its metric names (docs/serve.md).
// Permalinks (permalink.js), the compute axis (compute.js), incidents (incidents.js) and search
// (search.js) live in their own files; this one wires them into the pages.
"use strict";

const GROUP_KINDS = ["embedding", "attention", "mlp", "experts", "shared_experts", "router", "router_bias", "norms", "head"];
const KIND_TITLE = {param: "Parameter", grad: "Gradient", update: "Update"};
const DOWNSTREAM_ORDER = ["acc", "acc_norm", "bits_per_byte"];
const DOWNSTREAM_TITLE = {acc: "accuracy", acc_norm: "accuracy (length-normalised)", bits_per_byte: "bits per byte"};
const byLayer = (a, b) => (parseInt(a.match(/\d+/)) || 0) - (parseInt(b.match(/\d+/)) || 0);

GR.setConnection = function (ok) {
  const dot = document.getElementById("conn");
  if (!dot) return;
  dot.className = ok ? "conn ok" : "conn bad";
  dot.title = GR.source.live ? (ok ? "live: connected" : "live: reconnecting") : (ok ? "static copy: polling" : "static copy: offline");
};

function ago(t) {
  if (!t) return "–";
  const s = Math.max(0, Date.now() / 1000 - t);
  return s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : s < 86400 ? `${(s / 3600).toFixed(1)} h ago` : `${(s / 86400).toFixed(1)} d ago`;
}
function badge(state, stale, since) {
  const b = document.createElement("span");
  b.className = `badge ${stale ? "stale" : state}`;
  b.textContent = stale ? (since == null ? "stalled" : `stalled since step ${GR.fmt(since)}`) : state;
  if (stale) b.title = "marked running, but no heartbeat for longer than its train.stall_after";
  return b;
}
function showError(e) {
  const box = document.getElementById("error");
  if (box) { box.textContent = String(e.message || e); box.hidden = false; }
  GR.error = String(e.message || e);
  console.error(e);
}
GR.showError = showError;

// ------------------------------------------------------------------------------------ run list
GR.indexPage = async function () {
  const tbody = document.querySelector("#runs tbody");
  const chosen = new Set();
  const button = document.getElementById("compare");
  button.addEventListener("click", () => { location.href = GR.compareHref([...chosen]); });
  function render(data) {
    document.getElementById("root").textContent = data.root || "";
    tbody.innerHTML = "";
    if (!data.runs.length) tbody.innerHTML = `<tr><td colspan="10" class="empty">No runs below this folder yet.</td></tr>`;
    for (const r of data.runs) {
      const tr = GR.el("tr", "", tbody), l = r.latest || {};
      const cb = GR.el("input", "", GR.el("td", "", tr));
      cb.type = "checkbox"; cb.checked = chosen.has(r.id);
      cb.addEventListener("change", () => { cb.checked ? chosen.add(r.id) : chosen.delete(r.id); button.disabled = chosen.size < 1; });
      const idCell = GR.el("td", "run-id", tr);
      const a = GR.el("a", "", idCell); a.href = GR.runHref(r.id); a.textContent = r.id;
      if (r.private) GR.el("span", "badge private", idCell).textContent = "private";
      if (r.error) GR.el("div", "row-error", idCell).textContent = r.error;   // e.g. "store unreadable: file is not a database"
      GR.el("td", "", tr).appendChild(badge(r.state, r.stale, r.stalled_since_step));
      for (const v of [r.step, l.loss, l.eval_bpb, l.lr, l.tokens_per_s, l.mfu]) GR.el("td", "num", tr).textContent = GR.fmt(v);
      const ev = GR.el("td", "num", tr); ev.textContent = r.anomalies ? `${r.events} (${r.anomalies} anomal${r.anomalies > 1 ? "ies" : "y"})` : GR.fmt(r.events);
      if (r.anomalies) ev.classList.add("warn");
      GR.el("td", "num", tr).textContent = ago(r.updated);
    }
    GR.ready = true;
  }
  document.getElementById("to-incidents").href = GR.incidentsHref();
  document.getElementById("lab-feed").href = GR.feedHref(null);
  GR.feedLink(null);
  if (GR.searchBox) GR.searchBox(document.getElementById("search"));
  try { render(await GR.source.runs()); } catch (e) { showError(e); }
  GR.source.subscribe([], {runs: render, reload: async () => render(await GR.source.runs())});
};

// ------------------------------------------------------------------------------------ charts of a run
// A chart spec: {title, lines: [{name, label, color, dash, width}], log, wide, band}.
GR.planCharts = function (names, vectorNames, meta) {
  const has = new Set(names);
  const used = new Set();
  const sections = [];
  const line = (name, label, color, extra) => { used.add(name); return Object.assign({name, label, color}, extra || {}); };
  const pick = (re) => names.filter((n) => re.test(n));
  const domains = [...new Set(pick(/^(eval\/[^/]+\/(loss|bpb)|data\/tokens\/[^/]+)$/).map((n) => n.split("/")[n.startsWith("eval") ? 1 : 2]))].filter((d) => d !== "macro");
  GR.setDomains(domains);
  const chart = (title, lines, extra) => Object.assign({title, lines: lines.filter(Boolean)}, extra || {});

  const train = [];
  const lossLines = [has.has("train/loss") && line("train/loss", "train", "#111827", {width: 1.5})];
  for (const d of domains) if (has.has(`eval/${d}/loss`)) lossLines.push(line(`eval/${d}/loss`, `eval ${d}`, GR.palette[d], {width: 1.75}));
  const prediction = meta && meta.artifacts && meta.artifacts.prediction;
  // The predicted metric (e.g. eval/macro/loss) is drawn over its band.
  if (prediction && prediction.metric && has.has(prediction.metric) && !lossLines.some((l) => l && l.name === prediction.metric))
    lossLines.push(line(prediction.metric, prediction.metric.replace(/^eval\//, "eval ").replace(/\/loss$/, ""), "#111827", {dash: [6, 4], width: 2.25}));
  if (lossLines.some(Boolean)) train.push(chart("Loss", lossLines, {wide: true, band: prediction && prediction.steps ? prediction : null, height: 280}));
  const bpb = domains.filter((d) => has.has(`eval/${d}/bpb`)).map((d) => line(`eval/${d}/bpb`, d, GR.palette[d]));
  if (has.has("eval/macro/bpb")) bpb.unshift(line("eval/macro/bpb", "macro", "#111827", {width: 2, dash: [5, 3]}));
  if (bpb.length) train.push(chart("Eval bits per byte", bpb));
  if (has.has("train/lr")) train.push(chart("Learning rate", [line("train/lr", "lr", "#7c3aed")]));
  if (has.has("train/grad_norm")) train.push(chart("Gradient norm", [line("train/grad_norm", "grad norm", "#ea580c")]));
  sections.push({title: "Training", charts: train});

  // Downstream scores (glassroom eval, train.eval_tasks): one chart per metric, a line per task,
  // a point at each evaluated checkpoint, points joined by lines.
  // A task the preregistered prediction has a band for (ladder: docs/ladder-downstream.md) also
  // gets a chart of its own, drawn over that band, after its metric's chart.
  const byMetric = {};
  for (const n of pick(/^downstream\/[^/]+\/[^/]+$/)) { const [, task, metric] = n.split("/"); (byMetric[metric] ||= []).push([task, n]); }
  const downstream = [];
  for (const metric of Object.keys(byMetric).sort((a, b) => (DOWNSTREAM_ORDER.indexOf(a) + 1 || 99) - (DOWNSTREAM_ORDER.indexOf(b) + 1 || 99) || a.localeCompare(b))) {
    const title = DOWNSTREAM_TITLE[metric] || metric.replace(/_/g, " ");
    const lines = byMetric[metric].sort().map(([task, n], i) => {
      const domain = (task.match(/^glassroom_[a-z]+_(.+)$/) || [])[1];
      return line(n, task.replace(/^glassroom_/, ""), GR.colorFor(domain || task, i), {points: true, width: domain ? 1.5 : 2.25});
    });
    downstream.push(chart(`Downstream: ${title}`, lines));
    for (const l of lines) {
      const band = GR.downstreamBand(prediction, l.name);
      if (band) downstream.push(chart(`Downstream: ${l.label} ${title}, predicted`, [Object.assign({}, l, {width: 2.25})], {band}));
    }
  }
  if (downstream.length) sections.push({title: "Downstream", charts: downstream});

  const norms = [];
  const totals = ["param", "grad", "update"].filter((k) => has.has(`norm/${k}/total`))
    .map((k, i) => line(`norm/${k}/total`, k, ["#2563eb", "#ea580c", "#059669"][i]));
  if (totals.length) norms.push(chart("Norms, total (log)", totals, {log: true}));
  for (const kind of ["param", "grad", "update"]) {
    const groups = GROUP_KINDS.filter((g) => has.has(`norm/${kind}/${g}`));
    if (groups.length) norms.push(chart(`${KIND_TITLE[kind]} norm by group (log)`,
      groups.map((g) => line(`norm/${kind}/${g}`, g, GR.colorFor(null, GROUP_KINDS.indexOf(g)))), {log: true}));
    const layers = pick(new RegExp(`^norm/${kind}/layer_\\d+$`)).sort(byLayer);
    if (layers.length) norms.push(chart(`${KIND_TITLE[kind]} norm by layer (log)`,
      layers.map((n, i) => line(n, n.split("/")[2], `hsl(${220 - 200 * i / Math.max(1, layers.length - 1)}, 65%, 45%)`)), {log: true}));
  }
  sections.push({title: "Norms", charts: norms});

  const moe = [];
  const moeLayers = [...new Set(names.concat(vectorNames).map((n) => (n.match(/^moe\/(layer_\d+)\//) || [])[1]).filter(Boolean))].sort(byLayer);
  const heatmaps = moeLayers.filter((l) => vectorNames.includes(`moe/${l}/tokens_per_expert`)).map((l) => ({title: `Expert load, ${l.replace("_", " ")}`, name: `moe/${l}/tokens_per_expert`}));
  const biasCharts = moeLayers.filter((l) => vectorNames.includes(`moe/${l}/bias`)).map((l) => ({title: `Router bias per expert, ${l.replace("_", " ")}`, vector: `moe/${l}/bias`}));
  const stat = (key, title, log) => {
    const lines = moeLayers.filter((l) => has.has(`moe/${l}/${key}`)).map((l, i) => line(`moe/${l}/${key}`, l, `hsl(${(i * 137.508 + 30) % 360}, 60%, 45%)`));
    if (lines.length) moe.push(chart(title, lines, {log}));
  };
  stat("imbalance", "Load imbalance (max / mean tokens per expert)");
  stat("drop_fraction", "Dropped by capacity (fraction of assignments)");
  stat("entropy", "Router entropy");
  stat("bias_norm", "Router bias norm");
  const range = [];
  moeLayers.forEach((l, i) => {
    const c = `hsl(${(i * 137.508 + 30) % 360}, 60%, 45%)`;
    if (has.has(`moe/${l}/bias_max`)) range.push(line(`moe/${l}/bias_max`, `${l} max`, c));
    if (has.has(`moe/${l}/bias_min`)) range.push(line(`moe/${l}/bias_min`, `${l} min`, c, {dash: [4, 3]}));
  });
  if (range.length) moe.push(chart("Router bias range (min, max)", range));
  stat("aux_loss", "Auxiliary (balance) loss");
  stat("z_loss", "Router z-loss");
  if (moe.length || heatmaps.length) sections.push({title: "Mixture of experts", charts: moe, heatmaps, vectors: biasCharts});

  const perf = [];
  if (has.has("throughput/tokens_per_s")) perf.push(chart("Throughput (tokens/s)", [line("throughput/tokens_per_s", "tokens/s", "#0891b2")]));
  if (has.has("throughput/mfu")) perf.push(chart("Model FLOP utilisation", [line("throughput/mfu", "MFU", "#0d9488")]));
  const tokens = domains.filter((d) => has.has(`data/tokens/${d}`)).map((d) => line(`data/tokens/${d}`, d, GR.palette[d]));
  if (tokens.length) perf.push(chart("Tokens seen per domain", tokens));
  if (perf.length) sections.push({title: "Throughput and data", charts: perf});

  // Anything else still gets drawn: one chart per parent path, at most 12 lines each.
  const rest = {};
  for (const n of names) if (!used.has(n) && !/^eval\/macro\/loss$/.test(n)) (rest[n.split("/").slice(0, -1).join("/") || n] ||= []).push(n);
  const other = [];
  for (const [parent, ns] of Object.entries(rest).sort()) {
    for (let i = 0; i < ns.length; i += 12) other.push(chart(parent, ns.slice(i, i + 12).map((n, j) => line(n, n.split("/").pop(), GR.colorFor(n.split("/").pop(), j)))));
  }
  if (other.length) sections.push({title: "Other metrics", charts: other});
  return sections;
};

// The preregistered band of downstream/<task>/<metric>: the prediction's downstream.scores[<task>/<metric>]
// .at_steps ({steps, mean, lo, hi}, glassroom/ladder/downstream_link.py), when whole; else null.
GR.downstreamBand = function (prediction, name) {
  const d = prediction && prediction.downstream, key = name.slice("downstream/".length);
  const score = d && d.scores && typeof d.scores === "object" && Object.prototype.hasOwnProperty.call(d.scores, key) ? d.scores[key] : null;
  const b = score && score.at_steps;
  const numbers = (v) => Array.isArray(v) && v.length === b.steps.length && v.every((x) => typeof x === "number" && Number.isFinite(x));
  if (!b || !Array.isArray(b.steps) || !b.steps.length || ![b.steps, b.mean, b.lo, b.hi].every(numbers)) return null;
  return {steps: b.steps, mean: b.mean, lo: b.lo, hi: b.hi, metric: name, confidence: d.confidence};
};

// Builds the charts of `runs` into `main` and keeps them fed: initial load, zoom, live updates.
GR.Board = class {
  constructor(main, runs) { this.main = main; this.runs = runs; this.lineCharts = []; this.heatmaps = []; this.vectorCharts = []; }

  addLineChart(parent, spec, run) {
    const lines = spec.lines.map((l) => Object.assign({}, l, {run: l.run || run, key: `${l.run || run}|${l.name}`}));
    const c = new GR.LineChart(parent, lines, {title: spec.title, log: spec.log, wide: spec.wide, band: spec.band, height: spec.height, runs: this.runs, axis: spec.axis});
    this.lineCharts.push(c);
    return c;
  }

  addVectorChart(parent, run, spec) {
    const c = new GR.LineChart(parent, [], {title: spec.title, runs: this.runs});
    c.vector = {run, name: spec.vector};
    this.vectorCharts.push(c);
    return c;
  }

  points() { return Math.min(4000, Math.max(400, 2 * Math.round(this.main.clientWidth / 2))); }

  async load(range) {
    const byRun = {};
    for (const c of this.lineCharts) for (const l of c.lines) (byRun[l.run] ||= new Set()).add(l.name);
    const jobs = Object.entries(byRun).map(async ([run, names]) => {
      // On a compute axis the range is in tokens or FLOPs: each run fetches its own step range.
      const [start, end] = this.axis ? this.axis.stepRange(run, range) : (range || [null, null]);
      const list = [...names];
      for (let i = 0; i < list.length; i += 200) {
        const p = await GR.source.series(run, list.slice(i, i + 200), start, end, this.points());
        for (const c of this.lineCharts) { c.zoom = range; c.setPayload(run, p.series); }
      }
    });
    jobs.push(this.loadVectors(range));
    await Promise.all(jobs);
  }

  async loadVectors(range) {
    const [start, end] = range || [null, null];
    await Promise.all(this.heatmaps.map(async (h) => h.setData(await GR.source.vectors(h.run, h.name, start, end, 300))));
    await Promise.all(this.vectorCharts.map(async (c) => {
      const v = await GR.source.vectors(c.vector.run, c.vector.name, start, end, this.points());
      if (c.lines.length !== v.width) {   // one line per expert, built once the width is known
        c.lines = Array.from({length: v.width}, (_, e) => ({key: `${c.vector.run}|${c.vector.name}|${e}`, run: c.vector.run, name: null, label: `e${e}`, color: `hsl(${(e * 360 / Math.max(1, v.width)) % 360}, 60%, 45%)`, width: 1}));
        c.u.destroy(); c._build();
      }
      c.lines.forEach((l, e) => { c.raw[l.key] = [v.steps, v.values.map((row) => row[e])]; });
      c.zoom = range; c.redraw();
    }));
  }

  onUpdate(u) {
    const seen = (u.series || {})[GR.TOKENS_SEEN];
    if (this.axis && seen) this.axis.extend(u.run, seen.steps, seen.values);   // before the points it places
    for (const [name, s] of Object.entries(u.series || {})) {
      for (const c of this.lineCharts) c.append(u.run, name, s.steps, s.values);
      GR.lastPoint = {run: u.run, name, step: s.steps[s.steps.length - 1], value: s.values[s.values.length - 1], at: Date.now()};
    }
    if (u.events && u.events.length) { GR.events.push(...u.events.map((e) => Object.assign(e, {run: u.run}))); this.onEvents && this.onEvents(u.events, u.run); this.lineCharts.forEach((c) => c.u.redraw(false)); }
    if (Object.keys(u.vectors || {}).length && !this._vecTimer) this._vecTimer = setTimeout(() => { this._vecTimer = null; this.loadVectors(GR.zoom); }, 1000);
    const grown = this.lineCharts.some((c) => Object.values(c.raw).some((r) => r[0].length > 3 * this.points()));
    if (u.reload || grown) this.load(GR.zoom);
    this.onStatus && this.onStatus(u);
  }
};

GR.zoom = null;
// Zooms every chart to range ([min, max] in the x axis's units; null: all); the URL's hash follows
// unless `quiet` (a permalink being applied).
GR.zoomAll = function (range, quiet) {
  GR.zoom = range;
  if (!quiet && GR.permalink) GR.permalink.update();
  clearTimeout(GR._zoomTimer);
  GR._zoomTimer = setTimeout(() => GR.board && GR.board.load(range).catch(showError), 60);
};

function renderEvents(box, events, run) {
  const showEval = document.getElementById("show-eval");
  const list = box.querySelector("ol");
  const items = events.filter((e) => showEval.checked || e.kind !== "eval").slice().reverse();
  list.innerHTML = "";
  if (!items.length) list.innerHTML = `<li class="empty">No events yet.</li>`;
  for (const e of items.slice(0, 500)) {
    const li = GR.el("li", `ev ${e.kind}`, list);
    GR.el("span", `kind ${e.kind}`, li).textContent = e.kind;
    GR.el("span", "step", li).textContent = e.step === null || e.step === undefined ? "" : `step ${e.step}`;
    GR.el("span", "when", li).textContent = new Date(e.time * 1000).toLocaleString();
    const inc = e.kind === "incident" && e.data && typeof e.data.incident === "string" ? e.data : null;
    GR.el("div", "text", li).textContent = (run ? "" : `${e.run}: `) + (inc ? `${inc.incident} ${inc.action}: ` : "") + e.text;
    // Live only: on the published copy nobody can run it against the lab's folders.
    if (GR.source.live && e.kind === "anomaly" && run && e.step !== null && e.step !== undefined && Number.isInteger(e.id)) {
      const cmd = GR.el("code", "command", li);   // selects whole with one click: copy, fill in the title
      cmd.textContent = GR.incidentCommand(run, e);
      cmd.title = "open this anomaly as an incident: run this in the served folder";
      cmd.addEventListener("click", (ev) => ev.stopPropagation());
    }
    if (e.step !== null && e.step !== undefined) li.addEventListener("click", () => {
      const view = GR.permalink.around(e.step, GR.lastStep);
      GR.zoomAll([view.start, view.end]);
      GR.permalink.markAt(e.step, null);
    });
  }
}

// ------------------------------------------------------------------------------------ run page
GR.runPage = async function () {
  const run = GR.boot.runs[0];
  document.title = `${run} · glassroom`;
  document.getElementById("run-id").textContent = run;
  document.getElementById("run-feed").href = GR.feedHref(run);
  GR.feedLink(run);
  const main = document.getElementById("charts");
  const board = GR.board = new GR.Board(main, [run]);
  const eventsBox = document.getElementById("events");
  let events = [];
  const header = (status, summary) => {
    const st = document.getElementById("run-state");
    st.innerHTML = ""; st.appendChild(badge(status.state, summary && summary.stale, summary && summary.stalled_since_step));
    document.getElementById("run-step").textContent = `step ${GR.fmt(status.step)}`;
    document.getElementById("run-updated").textContent = `updated ${ago(status.updated)}`;
    GR.lastStep = status.step;
  };
  board.onStatus = (u) => {
    const loss = (u.series || {})["train/loss"];   // the status is written at events, the loss every step
    const step = Math.max(u.status ? u.status.step || 0 : 0, loss ? loss.steps[loss.steps.length - 1] : 0);
    if (u.status) header(Object.assign({}, u.status, {step, updated: Date.now() / 1000}));
  };
  board.onEvents = (evs) => { events = events.concat(evs); renderEvents(eventsBox, events, run); GR.showSamples(events); GR.showIncidents(run); };
  const unreadable = (msg) => {   // the run's store cannot be read: say so in words, stop updating
    const st = document.getElementById("run-state");
    st.innerHTML = ""; st.appendChild(badge("unreadable", false));
    showError(new Error(msg));
    GR.ready = true;
  };
  document.getElementById("show-eval").addEventListener("change", () => renderEvents(eventsBox, events, run));

  let known = new Set(), rebuilding = false;
  async function build() {
    const meta = await GR.source.meta(run);
    known = new Set(meta.names);
    main.innerHTML = ""; GR.charts.length = 0; board.lineCharts = []; board.heatmaps = []; board.vectorCharts = [];
    header(Object.assign({}, meta.status, {step: meta.summary.step, updated: meta.summary.updated}), meta.summary);
    events = meta.events.map((e) => Object.assign(e, {run}));
    GR.events = events.slice();
    renderEvents(eventsBox, events, run);
    GR.showIncidents(run);
    document.getElementById("config").textContent = meta.config_text || "(no config.yaml in this run)";
    const seal = GR.sealOf(meta);
    for (const section of GR.planCharts(meta.names, meta.vector_names, meta)) {
      if (!section.charts.length && !(section.heatmaps || []).length) continue;
      GR.el("h2", "section", main).textContent = section.title;
      const grid = GR.el("div", "grid", main);
      for (const h of section.heatmaps || []) { const hm = new GR.Heatmap(grid, h.title); hm.run = run; hm.name = h.name; board.heatmaps.push(hm); }
      for (const v of section.vectors || []) board.addVectorChart(grid, run, v);
      for (const spec of section.charts) {
        const c = board.addLineChart(grid, spec, run);
        if (spec.band && seal) c.card.insertBefore(GR.sealLine(c.card, seal), c.body);   // under the band's readout
      }
    }
    GR.showSeal(seal);
    GR.showChain(meta.chain);
    GR.showModel(meta.artifacts && meta.artifacts.export);
    GR.showLineage(meta.artifacts && meta.artifacts.lineage);
    GR.showSamples(events);
    GR.permalink.start();   // the first build: apply the URL's hash (zoom, mark, scroll)
    await board.load(GR.zoom);
    GR.ready = true;
  }
  GR.source.subscribe([run], {
    hello: () => { build().catch((e) => unreadable(e.message || String(e))); },   // a reconnect rebuilds: events or names may be new
    update: (u) => {
      board.onUpdate(u);
      // A series the page has never seen (the first downstream scores, a first eval): plan the charts again.
      if (!rebuilding && Object.keys(u.series || {}).some((n) => !known.has(n))) {
        rebuilding = true;
        build().catch(showError).finally(() => { rebuilding = false; });
      }
    },
    reload: () => build().catch(showError),
    failed: unreadable,
  });
};

// The record's head (the newest chained event): what a watcher keeps to run `glassroom verify --against`.
GR.showChain = function (head) {
  const box = document.getElementById("chain");
  if (!box) return;
  const ok = head && typeof head.digest === "string" && /^[0-9a-f]{64}$/.test(head.digest);
  box.hidden = !ok;
  if (!ok) return;
  document.getElementById("chain-digest").textContent = head.digest;
  const at = head.step === null || head.step === undefined ? "" : ` at step ${GR.fmt(head.step)}`;
  document.getElementById("chain-meta").textContent =
    `event ${head.id} (${head.kind || "private note"}${at}); keep it: glassroom verify checks the record still extends it`;
};

// The preregistered prediction's seal (`glassroom ladder verify` checks it): its SHA-256 digest in
// full and selectable, so an outside watcher can keep a copy and compare it later.
GR.sealOf = function (meta) {
  const p = meta && meta.artifacts && meta.artifacts.prediction;
  const seal = p && p.seal;
  return seal && typeof seal.digest === "string" && /^[0-9a-f]{64}$/.test(seal.digest) ? seal : null;
};
GR.sealLine = function (parent, seal) {
  const line = GR.el("div", "seal", parent);
  line.append("prediction sealed: sha256 ");
  GR.el("code", "digest", line).textContent = seal.digest;
  return line;
};
GR.showSeal = function (seal) {
  const box = document.getElementById("seal");
  if (!box) return;
  box.hidden = !seal;
  if (!seal) return;
  document.getElementById("seal-digest").textContent = seal.digest;
  const when = typeof seal.created === "number" ? new Date(seal.created * 1000).toISOString()
    : (seal.created ? String(seal.created) : "");
  const bits = [when && `made ${when}`, seal.commit && `code ${String(seal.commit).slice(0, 12)}`].filter(Boolean);
  document.getElementById("seal-meta").textContent = bits.join(" · ");
};

// The run's newest Hugging Face export (`glassroom export` records it): where, which architecture,
// which step, and its model card as plain text (textContent: the card is never parsed as HTML).
GR.showModel = function (exp) {
  const box = document.getElementById("model");
  if (!box) return;
  box.hidden = !(exp && typeof exp === "object");
  if (box.hidden) return;
  const bits = [exp.architecture, Number.isFinite(exp.step) && `step ${exp.step}`, exp.dtype, exp.created_iso && `exported ${exp.created_iso}`];
  document.getElementById("model-meta").textContent = bits.filter(Boolean).join(" · ");
  document.getElementById("model-folder").textContent = exp.folder ? String(exp.folder) : "";
  document.getElementById("model-card").textContent = typeof exp.card === "string" ? exp.card : "(no model card)";
};

// ------------------------------------------------------------------------------------ compare page
GR.COMPARE = [["train/loss", "Loss"], ["eval/macro/bpb", "Eval bits per byte (macro)"], ["train/lr", "Learning rate"],
  ["train/grad_norm", "Gradient norm"], ["norm/param/total", "Parameter norm"], ["norm/update/total", "Update norm"],
  ["throughput/tokens_per_s", "Throughput (tokens/s)"], ["throughput/mfu", "Model FLOP utilisation"]];

GR.comparePage = async function () {
  const runs = GR.boot.runs && GR.boot.runs.length ? GR.boot.runs : new URLSearchParams(location.search).getAll("run");
  document.getElementById("run-id").textContent = runs.join(" · ");
  const main = document.getElementById("charts");
  const board = GR.board = new GR.Board(main, runs);
  board.onEvents = () => GR.refreshIncidents();   // before the charts redraw
  const note = document.getElementById("axis-note");
  const buttons = [...document.querySelectorAll("#xaxis button")];
  GR.xMode = GR.permalink.parse(location.hash).x || "step";
  let building = null;
  async function build() {
    const metas = await Promise.all(runs.map((r) => GR.source.meta(r)));
    // The x axis: steps, or each run's tokens / FLOPs (runs that cannot be placed are left out).
    let axis = null, left = [];
    if (GR.xMode !== "step") { axis = new GR.ComputeAxis(GR.xMode); left = await axis.prepare(runs, metas); }
    board.axis = axis;
    buttons.forEach((b) => b.classList.toggle("on", b.dataset.x === GR.xMode));
    note.textContent = left.map((l) => `${l.run}: not on the ${GR.AXIS_UNITS[GR.xMode]} axis (${l.why})`).join("; ");
    note.hidden = !left.length;
    const shown = runs.filter((r) => !axis || axis.has(r));
    main.innerHTML = ""; GR.charts.length = 0; board.lineCharts = [];
    GR.events = metas.flatMap((m, i) => m.events.map((e) => Object.assign(e, {run: runs[i]})));
    GR.refreshIncidents();
    const legend = document.getElementById("legend"); legend.innerHTML = "";
    runs.forEach((r, i) => {
      const a = GR.el("a", "chip", legend); a.href = GR.runHref(r); a.textContent = r; a.style.borderColor = GR.colorFor(null, i);
      if (!shown.includes(r)) a.classList.add("left-out");
    });
    const bandRun = runs.find((r, i) => metas[i].artifacts && metas[i].artifacts.prediction);
    let band = bandRun ? metas[runs.indexOf(bandRun)].artifacts.prediction : null;
    if (band && axis) band = axis.band(bandRun, band);
    const grid = GR.el("div", "grid", main);
    for (const [name, title] of GR.COMPARE) {
      const lines = runs.map((r, i) => shown.includes(r) && metas[i].names.includes(name) && {run: r, name, label: r, color: GR.colorFor(null, i)}).filter(Boolean);
      if (lines.length) board.addLineChart(grid, {title: axis ? `${title} by ${axis.unit}` : title, lines, wide: name === "train/loss", axis,
        band: name === "train/loss" ? band : null, height: name === "train/loss" ? 300 : 220});
    }
    GR.permalink.start();
    await board.load(GR.zoom);
    GR.ready = true;
  }
  const rebuild = () => { building = (building || Promise.resolve()).then(build).catch(showError); return building; };
  // Switching the axis: the range and the mark were in the old axis's units, so both go.
  const setMode = (mode) => {
    if (mode === GR.xMode) return;
    GR.xMode = mode; GR.zoom = null; GR.mark = null; GR.ready = false;
    GR.permalink.update();
    rebuild();
  };
  buttons.forEach((b) => b.addEventListener("click", () => setMode(b.dataset.x)));
  window.addEventListener("hashchange", () => { const x = GR.permalink.parse(location.hash).x || "step"; if (x !== GR.xMode) { GR.xMode = x; rebuild().then(() => GR.permalink.apply(GR.permalink.parse(location.hash), true)); } });
  GR.source.subscribe(runs, {
    hello: () => { rebuild(); },   // a reconnect rebuilds: events or names may be new
    update: (u) => board.onUpdate(u),
    reload: () => rebuild(),
  });
};

// The page's Atom feed (a run's, or the lab's) as <link rel="alternate">, for feed readers.
GR.feedLink = function (run) {
  const link = document.createElement("link");
  link.rel = "alternate"; link.type = "application/atom+xml"; link.href = GR.feedHref(run);
  link.title = run ? `${run} · glassroom` : "glassroom lab";
  document.head.appendChild(link);
};

document.addEventListener("DOMContentLoaded", () => {
  GR.setConnection(true);
  const pages = {index: GR.indexPage, run: GR.runPage, compare: GR.comparePage, incidents: GR.incidentsPage};
  (pages[GR.boot.page] || GR.indexPage)().catch(showError);
});
