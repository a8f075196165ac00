// Where the pages get their data: the live server's JSON API and event stream (`glassroom serve`),
// or the static site's JSON files (`glassroom publish`), behind one interface:
//   runs(), meta(run), series(run, names, start, end, points), vectors(run, name, start, end, points),
//   subscribe(runs, {hello, update, runs, reload}), incidents() (lab-wide, newest first),
//   search(q) ({q, metrics: [{run, name}], events: [{run, id, step, kind, text}], truncated}).
"use strict";
window.GR = window.GR || {};

GR.boot = JSON.parse(document.getElementById("gr-boot").textContent);

GR.getJSON = async function (url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) {
    // The server says what went wrong in one line ({"error": ...}); show that, not just the status.
    let detail = "";
    try { detail = (await r.json()).error || ""; } catch (e) { detail = ""; }
    throw new Error(detail ? String(detail) : `${url}: HTTP ${r.status}`);
  }
  return r.json();
};

GR.liveSource = function (base) {
  const q = (params) => {
    const u = new URLSearchParams();
    for (const [k, v] of params) if (v !== null && v !== undefined) u.append(k, String(v));
    return u.toString();
  };
  return {
    live: true,
    runs: () => GR.getJSON(`${base}api/runs`),
    meta: (run) => GR.getJSON(`${base}api/run?${q([["run", run]])}`),
    series: (run, names, start, end, points) => GR.getJSON(`${base}api/series?${q([
      ["run", run], ...names.map((n) => ["name", n]), ["start", start], ["end", end], ["points", points]])}`),
    vectors: (run, name, start, end, points) => GR.getJSON(`${base}api/vectors?${q([
      ["run", run], ["name", name], ["start", start], ["end", end], ["points", points]])}`),
    incidents: () => GR.getJSON(`${base}api/incidents`),
    search: (text) => GR.getJSON(`${base}api/search?${q([["q", text]])}`),
    // One EventSource per page. On a reconnect the server sends `hello` again with fresh cursors,
    // and the page reloads its data, so nothing written while disconnected is missed. A server-sent
    // `error` event (a run store that cannot be read) ends the stream for good: no reconnect loop.
    subscribe(runs, handlers) {
      const es = new EventSource(`${base}api/stream?${q(runs.map((r) => ["run", r]))}`);
      let hellos = 0;
      es.addEventListener("error", (e) => {
        if (!e.data) return;   // a dropped connection: EventSource reconnects by itself
        es.close();
        GR.setConnection && GR.setConnection(false);
        const msg = JSON.parse(e.data).error;
        if (handlers.failed) handlers.failed(msg); else if (GR.showError) GR.showError(new Error(msg));
      });
      es.addEventListener("hello", (e) => { hellos += 1; handlers.hello && handlers.hello(JSON.parse(e.data), hellos); });
      es.addEventListener("update", (e) => handlers.update && handlers.update(JSON.parse(e.data)));
      es.addEventListener("runs", (e) => handlers.runs && handlers.runs(JSON.parse(e.data)));
      es.onerror = () => GR.setConnection && GR.setConnection(false);
      es.onopen = () => GR.setConnection && GR.setConnection(true);
      // Leaving the page closes its stream (a browser keeps about 6 connections per server: pages
      // kept in the back/forward cache would otherwise hold theirs); coming back reloads the page.
      window.addEventListener("pagehide", () => es.close());
      window.addEventListener("pageshow", (e) => { if (e.persisted) location.reload(); });
      return es;
    },
  };
};

// The static site: data/<generation>/... written by `glassroom publish`; site.json names the
// current generation, so a page never mixes two exports. Series zoom through the tiles (sitetiles.js).
GR.staticSource = function (base) {
  let site = null;
  const metas = {};
  let searchIndex = null;
  const enc = (run) => run.split("/").map(encodeURIComponent).join("/");
  const root = () => `${base}data/${site.generation}/`;
  async function loadSite() { site = await GR.getJSON(`${base}site.json?t=${Date.now()}`); return site; }
  async function meta(run) {
    if (!site) await loadSite();
    const key = `${site.generation}:${run}`;
    if (!metas[key]) metas[key] = await GR.getJSON(`${root()}runs/${enc(run)}/meta.json`);
    return metas[key];
  }
  function clip(payload, start, end) {
    if (start === null && end === null) return payload;
    const lo = start === null ? -Infinity : start, hi = end === null ? Infinity : end;
    const keep = [];
    payload.steps.forEach((s, i) => { if (s >= lo && s <= hi) keep.push(i); });
    const out = {};
    for (const k of Object.keys(payload)) {
      out[k] = Array.isArray(payload[k]) ? keep.map((i) => payload[k][i]) : payload[k];
    }
    return out;
  }
  return {
    live: false,
    async runs() { if (!site) await loadSite(); return GR.getJSON(`${root()}runs.json`); },
    meta,
    async series(run, names, start, end, points) {
      const m = await meta(run);
      const out = {};
      await Promise.all(names.map(async (n) => {
        const file = m.files[n];
        if (!file) return;
        const url = `${root()}runs/${enc(run)}/${file}`;   // zoom through the tiles (sitetiles.js) when loaded
        out[n] = GR.siteSeries ? await GR.siteSeries(await GR.siteTiles.json(url), start, end, points, `${base}data/chunks/`)
          : clip(await GR.getJSON(url), start, end);
      }));
      return {series: out};
    },
    async vectors(run, name, start, end) {
      const m = await meta(run);
      const file = m.vector_files[name];
      if (!file) return {name, steps: [], values: [], width: 0};
      return clip(await GR.getJSON(`${root()}runs/${enc(run)}/${file}`), start, end);
    },
    subscribe(runs, handlers) {
      const every = Math.max(5, (site && site.interval) || 30) * 1000;
      const first = site ? site.generation : null;
      let seen = first;
      handlers.hello && handlers.hello({runs}, 1);
      const timer = setInterval(async () => {
        try {
          const s = await GR.getJSON(`${base}site.json?t=${Date.now()}`);
          GR.setConnection && GR.setConnection(true);
          if (s.generation !== seen) { seen = s.generation; site = s; handlers.reload && handlers.reload(); }
        } catch (e) { GR.setConnection && GR.setConnection(false); }
      }, every);
      return {close: () => clearInterval(timer)};
    },
    async incidents() { if (!site) await loadSite(); return GR.getJSON(`${root()}incidents.json`); },
    // search.json ({runs: {run: {names, events}}}) filtered here as /api/search does on the server:
    // a case-insensitive substring of a metric name or an event's text, at most 200 of each.
    async search(text) {
      if (!site) await loadSite();
      const key = site.generation;
      if (!searchIndex || searchIndex.key !== key) searchIndex = {key, data: await GR.getJSON(`${root()}search.json`)};
      return GR.searchIndex(searchIndex.data, text);
    },
    site: () => site,
    loadSite,
  };
};

GR.source = GR.boot.mode === "static" ? GR.staticSource(GR.boot.base) : GR.liveSource(GR.boot.base);

// Page links work the same on the server (/runs/<id>) and on the static site (runs/<id>/index.html).
GR.runHref = (run) => GR.boot.mode === "static"
  ? `${GR.boot.base}runs/${run.split("/").map(encodeURIComponent).join("/")}/index.html`
  : `${GR.boot.base}runs/${run.split("/").map(encodeURIComponent).join("/")}`;
GR.compareHref = (runs) => GR.boot.mode === "static"
  ? `${GR.boot.base}compare.html?${runs.map((r) => "run=" + encodeURIComponent(r)).join("&")}`
  : `${GR.boot.base}compare?${runs.map((r) => "run=" + encodeURIComponent(r)).join("&")}`;
GR.indexHref = () => GR.boot.mode === "static" ? `${GR.boot.base}index.html` : GR.boot.base;

GR.incidentsHref = () => GR.boot.mode === "static" ? `${GR.boot.base}incidents.html` : `${GR.boot.base}incidents`;
// Atom feeds: the whole lab's (run null) or one run's.
GR.feedHref = (run) => {
  if (run === null || run === undefined) return `${GR.boot.base}feed.atom`;
  return GR.boot.mode === "static"
    ? `${GR.boot.base}runs/${run.split("/").map(encodeURIComponent).join("/")}/feed.atom`
    : `${GR.boot.base}feed.atom?run=${encodeURIComponent(run)}`;
};

// The static site's search: search.json = {runs: {run_id: {names: [...], events: [{id, step, kind, text}]}}}.
GR.SEARCH_MOST = 200;
GR.searchIndex = function (index, text) {
  const q = String(text || "").toLowerCase();
  if (!q || q.length > 200) throw new Error("search: give 1 to 200 characters");
  const out = {q: String(text), metrics: [], events: [], truncated: false};
  const runs = index && typeof index.runs === "object" && index.runs ? index.runs : {};
  for (const run of Object.keys(runs).sort()) {
    const r = runs[run] || {};
    for (const name of Array.isArray(r.names) ? r.names : []) {
      if (typeof name !== "string" || !name.toLowerCase().includes(q)) continue;
      if (out.metrics.length < GR.SEARCH_MOST) out.metrics.push({run, name}); else out.truncated = true;
    }
    for (const e of Array.isArray(r.events) ? r.events : []) {
      if (!e || typeof e.text !== "string" || !e.text.toLowerCase().includes(q)) continue;
      if (out.events.length < GR.SEARCH_MOST) out.events.push({run, id: e.id, step: e.step, kind: e.kind, text: e.text}); else out.truncated = true;
    }
  }
  return out;
};
