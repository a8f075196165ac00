// The ladder page (frontend/ladder.html): the ladder list, or one ladder on a compute axis drawn with
// uPlot: x = training FLOPs (log), y = the fitted metric (linear or log). The rungs' final values as
// points (the backtest's held-out rung in its own colour), the fitted law L(C) = E + A*C^-alpha as a
// line with its bootstrap band shaded, the hero's preregistered final loss with its interval as an
// error bar at its compute, and the hero's latest value when its run is known. Below: the rungs table
// (each linked to its run page), the backtest and notes. Live, the page asks again every 5 s and
// redraws when the hero's latest value (or a rung) changed.
// Data: the live server's /api/ladder (glassroom serve) or the static site's ladder.json (glassroom publish).
// window.LADDER exposes the state the browser tests read (ready, view, counts, the hero bar's pixels).
"use strict";
(function () {
  const boot = JSON.parse(document.getElementById("gr-boot").textContent);
  const L = window.LADDER = {ready: false, boot, yLog: false};
  const $ = (id) => document.getElementById(id);
  const COL = {law: "#2563eb", band: "rgba(37,99,235,0.14)", rung: "#111827", held: "#f97316", hero: "#dc2626",
               heroBand: "rgba(220,38,38,0.16)", actual: "#16a34a"};
  const live = boot.mode === "live";
  const POLL_MS = 5000;
  const enc = (id) => id.split("/").map(encodeURIComponent).join("/");
  const runHref = (run) => live ? `${boot.base}runs/${enc(run)}` : `${boot.base}runs/${enc(run)}/index.html`;
  const fmt = (v, digits = 4) => (v === null || v === undefined || !isFinite(v)) ? "–" : Number(v).toPrecision(digits);
  const exp = (v) => (v === null || v === undefined) ? "–" : Number(v).toExponential(2).replace("e+", "e");
  const count = (v) => {
    if (v === null || v === undefined) return "–";
    for (const [s, d] of [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]]) if (Math.abs(v) >= d) return (v / d).toPrecision(3).replace(/\.?0+$/, "") + s;
    return String(Math.round(v));
  };
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  };
  const fail = (msg) => { const e = $("error"); e.textContent = msg; e.hidden = false; L.error = msg; };
  async function getJSON(url) {
    const r = await fetch(url, {cache: "no-store"});
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).error || ""; } catch (e) { detail = ""; }
      throw new Error(detail || `${url}: HTTP ${r.status}`);
    }
    return r.json();
  }
  $("brand").href = live ? boot.base : `${boot.base}index.html`;
  $("crumb-ladders").href = live ? `${boot.base}ladders` : `${boot.base}ladders/index.html`;

  // ---- the ladder list ----
  async function listPage() {
    $("list-page").hidden = false;
    $("title").textContent = "scaling ladders";
    const data = live ? await getJSON(`${boot.base}api/ladders`) : await getJSON(boot.data);
    $("subtitle").textContent = `below ${data.root}`;
    const body = $("ladders").tBodies[0];
    if (!data.ladders.length) body.append(el("tr", {}, el("td", {class: "empty", colspan: "8",
      text: "no ladders (folders with spec.yaml and ladder.json, as glassroom ladder run writes them) below this folder"})));
    for (const d of data.ladders) {
      const href = !live ? d.href : d.id === "." ? `${boot.base}ladders/?ladder=.` : `${boot.base}ladders/${enc(d.id)}`;
      const interval = d.interval ? `[${fmt(d.interval[0])}, ${fmt(d.interval[1])}]` : "–";
      body.append(el("tr", {},
        el("td", {}, href && !d.error ? el("a", {href, text: d.id}) : document.createTextNode(d.id)),
        el("td", {text: d.metric || ""}),
        el("td", {class: "num", text: d.rungs === undefined ? "–" : String(d.rungs)}),
        el("td", {text: d.hero || ""}),
        el("td", {class: "num", text: fmt(d.predicted)}),
        el("td", {class: "num", text: interval}),
        el("td", {class: "num", text: fmt(d.actual)}),
        el("td", {}, d.error ? el("span", {class: "badge unreadable", text: "unreadable", title: d.error}) :
          (d.reliable === false ? el("span", {class: "badge stale", text: "unreliable fit"}) : null))));
      if (d.error) body.append(el("tr", {}, el("td", {class: "muted", colspan: "8", text: d.error})));
    }
    L.count = data.ladders.length;
    L.ready = true;
  }

  // ---- one ladder ----
  let V, u;
  const lawAt = (c) => V.law.params.E + V.law.params.A * Math.pow(c, -V.law.params.alpha);
  L.lawAt = (c) => lawAt(c);

  function chartData() {
    const hero = V.hero && V.hero.flops ? V.hero : null;
    // One point per size: its final value, or with seeds their mean (drawSeeds spans the seeds).
    const rungs = sizesOf().filter((r) => r.flops && r.final !== null);
    const xs = [...new Set([...V.curve.flops, ...rungs.map((r) => r.flops), ...(hero ? [hero.flops] : [])])].sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const col = () => new Array(xs.length).fill(null);
    const mean = col(), hi = col(), lo = col(), pts = col(), held = col(), pred = col(), act = col(), hlo = col(), hhi = col();
    const pos = (v) => (v === null || v === undefined || (L.yLog && v <= 0)) ? null : v;
    V.curve.flops.forEach((x, i) => {
      const j = at.get(x);
      mean[j] = pos(V.curve.mean[i]);
      if (V.curve.lo) { lo[j] = pos(V.curve.lo[i]); hi[j] = pos(V.curve.hi[i]); }
    });
    for (const r of rungs) (r.held_out ? held : pts)[at.get(r.flops)] = pos(r.final);
    if (hero) {
      const j = at.get(hero.flops);
      pred[j] = pos(hero.predicted);
      if (hero.interval) { hlo[j] = pos(hero.interval[0]); hhi[j] = pos(hero.interval[1]); }
      if (hero.actual) act[j] = pos(hero.actual.value);
    }
    return [xs, mean, hi, lo, pts, held, pred, act, hlo, hhi];
  }

  function sizesOf() {
    if (!V.sizes || !V.sizes.length) return V.rungs;
    return V.sizes.map((g) => ({...g, final: g.mean}));
  }

  function drawSeeds(u) {
    // A size run with several seeds: a thin bar from its lowest to its highest final value, a tick at each.
    const ctx = u.ctx, w = 4 * devicePixelRatio;
    ctx.save();
    ctx.strokeStyle = COL.rung;
    ctx.lineWidth = 1 * devicePixelRatio;
    for (const g of V.sizes || []) {
      const vals = (g.finals || []).filter((v) => v !== null && (!L.yLog || v > 0));
      if (!g.flops || vals.length < 2) continue;
      const x = u.valToPos(g.flops, "x", true);
      ctx.beginPath();
      ctx.moveTo(x, u.valToPos(Math.min(...vals), "y", true)); ctx.lineTo(x, u.valToPos(Math.max(...vals), "y", true));
      for (const v of vals) { const y = u.valToPos(v, "y", true); ctx.moveTo(x - w, y); ctx.lineTo(x + w, y); }
      ctx.stroke();
    }
    ctx.restore();
  }

  function drawHeroBar(u) {
    const h = V.hero;
    L.heroBar = null;
    if (!h || !h.flops || !h.interval || h.interval[0] === null || h.interval[1] === null) return;
    const ctx = u.ctx, x = u.valToPos(h.flops, "x", true);
    const y0 = u.valToPos(h.interval[1], "y", true), y1 = u.valToPos(h.interval[0], "y", true);
    const w = 10 * devicePixelRatio;
    ctx.save();
    ctx.fillStyle = COL.heroBand;
    ctx.fillRect(x - w, y0, 2 * w, y1 - y0);
    ctx.strokeStyle = COL.hero;
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.beginPath();
    ctx.moveTo(x, y0); ctx.lineTo(x, y1);
    ctx.moveTo(x - w, y0); ctx.lineTo(x + w, y0);
    ctx.moveTo(x - w, y1); ctx.lineTo(x + w, y1);
    ctx.stroke();
    ctx.restore();
    L.heroBar = {x: x / devicePixelRatio, top: y0 / devicePixelRatio, bottom: y1 / devicePixelRatio};
  }

  function build() {
    if (u) u.destroy();
    const ticks = (u, vals) => vals.map((v) => v === null ? "" : exp(v).replace(".00", ""));
    const yTicks = (u, vals) => vals.map((v) => v === null ? "" : fmt(v, 3));
    const pointSeries = (label, color, size) => ({label, stroke: color, fill: color, width: 0, paths: () => null,
      points: {show: true, size, fill: color, stroke: color}, value: (u, v) => fmt(v)});
    const series = [
      {label: "FLOPs", value: (u, v) => exp(v)},
      {label: `law ${V.law.formula}`, stroke: COL.law, width: 2, spanGaps: true, points: {show: false}, value: (u, v) => fmt(v)},
      {label: "law hi", stroke: "rgba(37,99,235,0.35)", width: 0.75, spanGaps: true, points: {show: false}},
      {label: "law lo", stroke: "rgba(37,99,235,0.35)", width: 0.75, spanGaps: true, points: {show: false}},
      pointSeries("rungs", COL.rung, 9),
      pointSeries("held out (backtest)", COL.held, 10),
      pointSeries("hero predicted", COL.hero, 10),
      pointSeries("hero actual", COL.actual, 10),
      {label: "hero lo", stroke: "transparent", width: 0, points: {show: false}},
      {label: "hero hi", stroke: "transparent", width: 0, points: {show: false}},
    ];
    const width = Math.max(320, $("chart").clientWidth || 800);
    u = L.u = new uPlot({
      width, height: 380, series,
      bands: V.curve.lo ? [{series: [2, 3], fill: COL.band}] : [],
      scales: {x: {time: false, distr: 3, log: 10}, y: L.yLog ? {distr: 3, log: 10} : {}},
      axes: [
        {label: "training FLOPs", stroke: "#6b7280", grid: {stroke: "#eef0f3"}, values: ticks},
        {label: V.metric, stroke: "#6b7280", grid: {stroke: "#eef0f3"}, values: yTicks, size: 60},
      ],
      legend: {show: false},
      cursor: {drag: {x: false, y: false}, points: {show: false}},
      hooks: {
        draw: [drawHeroBar, drawSeeds],
        setCursor: [(u) => {
          const left = u.cursor.left;
          if (left === undefined || left < 0) { $("readout").textContent = ""; return; }
          const c = u.posToVal(left, "x");
          $("readout").textContent = `C ${exp(c)} FLOPs: law ${fmt(lawAt(c))}`;
        }],
      },
    }, chartData(), $("chart"));
    L.rungPoints = u.data[4].filter((v) => v !== null).length;
    L.heldOutPoints = u.data[5].filter((v) => v !== null).length;
    L.lawPoints = u.data[1].filter((v) => v !== null).length;
    L.bandPoints = u.data[2].filter((v) => v !== null).length;
    L.heroPoints = u.data[6].filter((v) => v !== null).length;
    L.actualPoints = u.data[7].filter((v) => v !== null).length;
  }

  function legend() {
    const items = [["law", COL.law, `L(C) = ${V.law.formula}`], ...(V.curve.lo ? [["band", COL.band, `${Math.round(V.confidence * 100)}% band of the law`]] : []),
      ["rung", COL.rung, (V.sizes || []).some((g) => (g.finals || []).length > 1) ? "rungs (mean final value of each size's seeds; bar: their range)" : "rungs (final value)"], ...(V.rungs.some((r) => r.held_out) ? [["held", COL.held, "held out by the backtest (the line is fitted on every rung)"]] : []),
      ...(V.hero ? [["hero", COL.hero, `hero ${V.hero.name}: preregistered final loss and ${Math.round((V.hero.confidence || V.confidence) * 100)}% interval`]] : []),
      ...(V.hero && V.hero.actual ? [["actual", COL.actual, V.hero.actual.final ? "hero: final value" : `hero: latest value (step ${V.hero.actual.step})`]] : [])];
    $("legend").replaceChildren();
    for (const [key, colour, text] of items) {
      const sw = el("span", {class: "sw"}); sw.style.background = colour;
      $("legend").append(el("span", {class: "key", "data-key": key}, sw, document.createTextNode(text)));
    }
  }

  function table() {
    const body = $("rungs").tBodies[0];
    body.replaceChildren();
    $("metric-head").textContent = `final ${V.metric}`;
    const name = (label, run) => run ? el("a", {href: runHref(run), text: label}) : document.createTextNode(label);
    const seeded = (V.sizes || []).some((g) => (g.finals || []).length > 1);
    for (const r of V.rungs) {
      body.append(el("tr", {class: r.held_out ? "held" : ""},
        el("td", {}, name(r.name + (seeded && r.seed !== null && r.seed !== undefined ? ` seed ${r.seed}` : ""), r.run)),
        el("td", {text: "rung"}),
        el("td", {class: "num", text: count(r.params)}), el("td", {class: "num", text: count(r.tokens)}),
        el("td", {class: "num", text: exp(r.flops)}), el("td", {class: "num", text: fmt(r.final)}),
        el("td", {class: "num", text: r.flops ? fmt(lawAt(r.flops)) : "–"}),
        el("td", {class: "muted", text: r.run ? "" : "run not below this folder"})));
    }
    const h = V.hero;
    if (h) {
      const a = h.actual;
      const note = `predicted ${fmt(h.predicted)} [${fmt(h.interval[0])}, ${fmt(h.interval[1])}] (${h.source}` +
        (h.seal ? `, seal ${h.seal.slice(0, 16)}` : "") + ")" + (a ? `; ${a.final ? "final" : "latest"} ${fmt(a.value)} at step ${a.step}` : "") +
        (a && a.final && h.interval[0] !== null && h.interval[1] !== null
          ? (h.interval[0] <= a.value && a.value <= h.interval[1] ? ", inside the preregistered interval" : ", OUTSIDE the preregistered interval") : "");
      body.append(el("tr", {class: "hero"},
        el("td", {}, name(h.name, h.run)), el("td", {text: "hero"}),
        el("td", {class: "num", text: count(h.params)}), el("td", {class: "num", text: count(h.tokens)}),
        el("td", {class: "num", text: exp(h.flops)}), el("td", {class: "num", text: a ? fmt(a.value) : "–"}),
        el("td", {class: "num", text: h.flops ? fmt(lawAt(h.flops)) : "–"}), el("td", {text: note})));
    }
    const nz = V.noise && V.noise.sigma !== null ? V.noise : null;
    $("table-readout").textContent = (seeded ? `${V.rungs.length} runs of ${V.sizes.length} sizes (seeds); ` : `${V.rungs.length} rungs; `) +
      "N = parameters as the spec counts them" +
      (nz ? `; seed noise ${(100 * nz.sigma).toFixed(2)}% (${nz.source === "measured" ? `measured from the seeds, ${nz.dof} dof` : "stated in the spec"})` : "");
  }

  async function ladderPage() {
    $("ladder-page").hidden = false;
    V = L.view = live ? await getJSON(`${boot.base}api/ladder?id=${encodeURIComponent(boot.ladder)}`) : await getJSON(boot.data);
    $("title").textContent = V.name;
    $("subtitle").textContent = `${V.id} · ${V.metric} · ${V.source}` + (V.reliable === false ? " · UNRELIABLE fit" : "");
    document.title = `${V.name} · ladder · glassroom`;
    const p = V.law.params;
    $("law-line").textContent = `L(C) = ${fmt(p.E)} + ${fmt(p.A)} · C^-${fmt(p.alpha)}` +
      (V.curve.lo ? `; band: ${Math.round(V.confidence * 100)}% bootstrap (${V.curve.replicates} replicates)` : "; no band") +
      (V.hero && V.hero.law_at_hero !== null ? `; at the hero's compute the law gives ${fmt(V.hero.law_at_hero)}` : "") +
      ((V.sizes || []).some((g) => (g.finals || []).length > 1)
        ? ". Points: each size's mean final value over its seeds; the thin bar spans the seeds (a tick each)."
        : ". Points: final values at each rung's last step.");
    legend();
    table();
    const b = V.backtest;
    if (b) {
      $("backtest-card").hidden = false;
      $("backtest").textContent = `fitted on ${(b.fitted_on || []).join(", ")}, predicted ${b.held_out}: ${fmt(b.predicted_loss)} ` +
        `against ${fmt(b.actual_loss)} actual${(b.held_out_runs || []).length > 1 ? ` (the mean of its ${b.held_out_runs.length} seeds: ${b.held_out_runs.map((r) => fmt(r.actual_loss)).join(", ")})` : ""} (${b.relative_error === null ? "–" : (100 * b.relative_error).toFixed(1) + "%"}), ` +
        `${b.covered ? "inside" : "outside"} its interval [${fmt((b.interval || [])[0])}, ${fmt((b.interval || [])[1])}]`;
    }
    for (const n of [...(V.warnings || []), ...(V.notes || [])]) $("notes").append(el("li", {text: n}));
    build();
    for (const [id, log] of [["y-log", true], ["y-lin", false]]) {
      $(id).addEventListener("click", () => {
        L.yLog = log;
        $("y-log").classList.toggle("on", log); $("y-lin").classList.toggle("on", !log);
        build();
      });
    }
    if (live) {   // the hero trains on: its latest value is fetched again every POLL_MS
      setInterval(async () => {
        let fresh;
        try { fresh = await getJSON(`${boot.base}api/ladder?id=${encodeURIComponent(boot.ladder)}`); } catch (e) { return; }
        if (JSON.stringify(fresh.hero) === JSON.stringify(V.hero) && JSON.stringify(fresh.rungs) === JSON.stringify(V.rungs)) return;
        V = L.view = fresh;
        legend(); table(); build();
        L.updates = (L.updates || 0) + 1;
      }, POLL_MS);
    }
    let t = null;
    window.addEventListener("resize", () => { clearTimeout(t); t = setTimeout(() => u.setSize({width: Math.max(320, $("chart").clientWidth), height: 380}), 150); });
    L.ready = true;
  }

  (boot.page === "ladder" ? ladderPage() : listPage()).catch((e) => { fail(String(e.message || e)); L.ready = true; });
})();
