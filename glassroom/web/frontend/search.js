// Search across runs by metric name and event text, from the run list: GR.source.search(q) asks the
// live server (/api/search) or filters the static site's search.json. A metric links to its chart on
// the run page, an event to the run page at its step (permalinks). Results are text, never HTML.
"use strict";

GR.searchBox = function (box) {
  if (!box) return;
  const input = box.querySelector("input"), button = box.querySelector("button");
  const out = document.getElementById("search-results");
  let asked = 0;
  async function run() {
    const q = input.value.trim();
    out.hidden = false; out.innerHTML = "";
    if (!q) { out.hidden = true; return; }
    if (q.length > 200) { GR.el("div", "row-error", out).textContent = "search: at most 200 characters"; return; }
    const mine = ++asked;
    let r;
    try { r = await GR.source.search(q); } catch (e) { if (mine === asked) GR.el("div", "row-error", out).textContent = String(e.message || e); return; }
    if (mine !== asked) return;   // a newer search was started meanwhile
    GR.showSearch(out, r);
  }
  button.addEventListener("click", run);
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") run(); });
  // A search in the URL (?q=...) runs at once, so a search can be linked.
  const q = new URLSearchParams(location.search).get("q");
  if (q) { input.value = q.slice(0, 200); run(); }
};

GR.showSearch = function (out, r) {
  const metrics = Array.isArray(r && r.metrics) ? r.metrics : [], events = Array.isArray(r && r.events) ? r.events : [];
  GR.searchResult = {metrics: metrics.length, events: events.length, truncated: !!(r && r.truncated)};
  const head = GR.el("div", "muted", out);
  head.textContent = `${metrics.length} metric${metrics.length === 1 ? "" : "s"}, ${events.length} event${events.length === 1 ? "" : "s"}` +
    (r && r.truncated ? " (only the first 200 of each are shown: narrow the search)" : "");
  if (metrics.length) {
    GR.el("h3", "", out).textContent = "Metrics";
    const ul = GR.el("ul", "hits metrics", out);
    for (const m of metrics) {
      const li = GR.el("li", "", ul), a = GR.el("a", "", li);
      a.href = GR.permalink.runLink(String(m.run), {chart: String(m.name)});
      GR.el("span", "hit-run", a).textContent = String(m.run);
      a.append(" · ");
      GR.el("code", "", a).textContent = String(m.name);
    }
  }
  if (events.length) {
    GR.el("h3", "", out).textContent = "Events";
    const ul = GR.el("ul", "hits events", out);
    for (const e of events) {
      const li = GR.el("li", "", ul), a = GR.el("a", "", li);
      a.href = GR.permalink.runLink(String(e.run), Number.isFinite(e.step) ? GR.permalink.around(e.step) : {});
      GR.el("span", "hit-run", a).textContent = String(e.run);
      GR.el("span", `kind ${String(e.kind).replace(/[^a-z_]/g, "")}`, a).textContent = String(e.kind);
      if (Number.isFinite(e.step)) GR.el("span", "step", a).textContent = `step ${e.step}`;
      GR.el("div", "text", li).textContent = String(e.text);
    }
  }
};
