// Incidents: journal events of kind "incident" (`glassroom incident open|update|resolve`), folded here as
// glassroom/observe/incidents.py folds them; drawn on every chart at their step (a flag, red while
// open, green once resolved), listed in the run page's Incidents box, and on the lab-wide incidents
// page (GR.incidentsPage). Titles and write-ups are data: always textContent, never HTML.
"use strict";

GR.INCIDENT_COLORS = {open: "#dc2626", resolved: "#16a34a"};
GR.incidents = [];   // folded incidents of the runs on the page, each with its run

// events (one run's, in journal order) -> [{id, step, title, status, opened, resolved, resolution,
// updates: [{time, text}], anomaly}] in the order they were opened. An update or resolve for an id
// never opened is ignored; a second resolve keeps the first write-up.
GR.foldIncidents = function (events) {
  const byId = new Map();
  const sorted = (events || []).filter((e) => e && e.kind === "incident" && e.data && typeof e.data === "object")
    .slice().sort((a, b) => (a.id || 0) - (b.id || 0));
  for (const e of sorted) {
    const d = e.data, id = typeof d.incident === "string" ? d.incident : null;
    if (!id) continue;
    const text = typeof e.text === "string" ? e.text : "";
    if (d.action === "open" && !byId.has(id)) {
      byId.set(id, {id, step: Number.isFinite(e.step) ? e.step : null, title: typeof d.title === "string" ? d.title : text,
        status: "open", opened: e.time, resolved: null, resolution: null, updates: [],
        anomaly: Number.isInteger(d.anomaly) ? d.anomaly : null});
    } else if (d.action === "update" && byId.has(id)) {
      byId.get(id).updates.push({time: e.time, text});
    } else if (d.action === "resolve" && byId.has(id) && byId.get(id).status !== "resolved") {
      const inc = byId.get(id);
      inc.status = "resolved"; inc.resolved = e.time;
      inc.resolution = typeof d.resolution === "string" ? d.resolution : text;
    }
  }
  return [...byId.values()];
};

// Folds GR.events (several runs on the compare page) into GR.incidents.
GR.refreshIncidents = function () {
  const byRun = {};
  for (const e of GR.events) if (e && e.kind === "incident") (byRun[e.run] ||= []).push(e);
  GR.incidents = Object.entries(byRun).flatMap(([run, evs]) => GR.foldIncidents(evs).map((i) => Object.assign(i, {run})));
  return GR.incidents;
};

// A flag per incident on one chart: a translucent band one step wide (at least 4 px), a solid
// line, and the id on a coloured tab at the top.
GR.drawIncidents = function (chart, u) {
  const [x0, x1] = [u.scales.x.min, u.scales.x.max];
  const ctx = u.ctx, dpr = devicePixelRatio;
  ctx.save();
  ctx.font = `${11 * dpr}px system-ui, sans-serif`;
  ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
  for (const inc of GR.incidents) {
    if (inc.step === null || (chart.opts.runs && inc.run && !chart.opts.runs.includes(inc.run))) continue;
    const at = chart.xOf(inc.run, inc.step);
    if (at === null || at < x0 || at > x1) continue;
    const color = GR.INCIDENT_COLORS[inc.status] || "#dc2626";
    const x = Math.round(u.valToPos(at, "x", true)) + 0.5;
    const w = Math.max(4 * dpr, Math.abs(u.valToPos(chart.xOf(inc.run, inc.step + 1) ?? at, "x", true) - x));
    ctx.globalAlpha = 0.15; ctx.fillStyle = color;
    ctx.fillRect(x - w / 2, u.bbox.top, w, u.bbox.height);
    ctx.globalAlpha = 1; ctx.strokeStyle = color; ctx.lineWidth = 2 * dpr; ctx.setLineDash([]);
    ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
    const label = inc.id, tw = ctx.measureText(label).width + 8 * dpr;
    ctx.fillRect(x, u.bbox.top, tw, 15 * dpr);
    ctx.fillStyle = "#fff"; ctx.fillText(label, x + 4 * dpr, u.bbox.top + 11 * dpr);
  }
  ctx.restore();
};

function when(t) { return Number.isFinite(t) ? new Date(t * 1000).toLocaleString() : ""; }

// One incident as a list item: status, id, step (a link to that point), title, write-up, updates.
GR.incidentItem = function (parent, inc, href) {
  const li = GR.el("li", `inc-item ${inc.status}`, parent);
  const head = GR.el("div", "inc-head", li);
  GR.el("span", `badge ${inc.status === "resolved" ? "resolved" : "open"}`, head).textContent = inc.status === "resolved" ? "resolved" : "open";
  const a = GR.el("a", "inc-id", head);
  a.href = href; a.textContent = inc.run && GR.boot.page !== "run" ? `${inc.run} · ${inc.id}` : inc.id;
  GR.el("span", "step", head).textContent = inc.step === null ? "" : `step ${inc.step}`;
  GR.el("div", "inc-title", li).textContent = inc.title;
  const meta = GR.el("div", "muted", li);
  meta.textContent = [`opened ${when(inc.opened)}`, inc.resolved && `resolved ${when(inc.resolved)}`,
    inc.anomaly !== null && inc.anomaly !== undefined && `anomaly #${inc.anomaly}`].filter(Boolean).join(" · ");
  if (inc.resolution) GR.el("div", "inc-resolution", li).textContent = String(inc.resolution);
  if (inc.updates && inc.updates.length) {
    const ul = GR.el("ul", "inc-updates", li);
    for (const up of inc.updates) GR.el("li", "", ul).textContent = `${when(up && up.time)}: ${up && up.text !== undefined ? String(up.text) : ""}`;
  }
  return li;
};

// The run page's Incidents box (hidden while the run has none); a click on one zooms to it.
GR.showIncidents = function (run) {
  GR.refreshIncidents();
  const box = document.getElementById("incidents");
  if (!box) return;
  const list = box.querySelector("ol");
  const mine = GR.incidents.filter((i) => i.run === run);
  box.hidden = !mine.length;
  list.innerHTML = "";
  const order = mine.slice().sort((a, b) => (a.status === "open" ? 0 : 1) - (b.status === "open" ? 0 : 1) || (b.opened || 0) - (a.opened || 0));
  for (const inc of order) {
    const view = inc.step === null ? {} : GR.permalink.around(inc.step, GR.lastStep);
    const li = GR.incidentItem(list, inc, GR.permalink.format(view) || "#");
    li.querySelector("a").addEventListener("click", (e) => {
      if (inc.step === null) return;
      e.preventDefault();
      GR.zoomAll([view.start, view.end], true);
      GR.permalink.markAt(inc.step, null);
    });
  }
};

// The command that opens an anomaly as an incident, for the journal (run from the served folder).
GR.shellWord = (w) => /^[A-Za-z0-9._\/=:@%+-]+$/.test(w) ? w : `'${String(w).replace(/'/g, `'\\''`)}'`;
GR.incidentCommand = (run, e) => `glassroom incident open ${GR.shellWord(run)} --step ${e.step} --anomaly ${e.id} "title"`;

// ------------------------------------------------------------------------------------ incidents page
GR.incidentsPage = async function () {
  document.getElementById("feed").href = GR.feedHref(null);
  const body = document.getElementById("incident-list");
  const count = document.getElementById("incident-count");
  async function render() {
    const data = await GR.source.incidents();
    const all = (Array.isArray(data && data.incidents) ? data.incidents : []).filter((i) => i && typeof i.id === "string");
    // Open first; within each, as the server orders them (newest first).
    const order = all.filter((i) => i.status !== "resolved").concat(all.filter((i) => i.status === "resolved"));
    body.innerHTML = "";
    const open = order.filter((i) => i.status !== "resolved").length;
    count.textContent = `${open} open · ${order.length - open} resolved`;
    if (!order.length) GR.el("li", "empty", body).textContent = "No incidents yet. Open one with `glassroom incident open RUN_DIR --step S \"title\"`.";
    for (const inc of order) {
      const run = String(inc.run || "");
      const href = GR.permalink.runLink(run, Number.isFinite(inc.step) ? GR.permalink.around(inc.step) : {});
      GR.incidentItem(body, Object.assign({}, inc, {run, title: String(inc.title ?? ""), updates: Array.isArray(inc.updates) ? inc.updates : []}), href);
    }
    GR.ready = true;
  }
  try { await render(); } catch (e) { GR.showError(e); GR.ready = true; }
  let pending = null;
  const again = () => { if (!pending) pending = setTimeout(() => { pending = null; render().catch(GR.showError); }, 500); };
  // Live: the run list stream says when any run's journal grew; static: a new generation.
  GR.source.subscribe([], {runs: again, reload: again});
};
