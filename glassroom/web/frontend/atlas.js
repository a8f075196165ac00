// The data atlas page (frontend/atlas.html): the dataset list, or one dataset's atlas.json drawn as a
// canvas map (tens of thousands of points: one fillRect each, grouped by colour, redrawn on an
// animation frame), a cluster list, the processing funnel with the dedup and decontamination rows,
// the domain x quality cells, the mixture and the tokenizer; links open the document browser
// (atlas-docs.js).
// Data: the live server's /api/atlas (glassroom serve) or the static site's JSON (glassroom publish).
// window.ATLAS exposes the state the browser tests read (ready, drawn, drawMs, mode, ...).
"use strict";
(function () {
  const boot = JSON.parse(document.getElementById("gr-boot").textContent);
  const A = window.ATLAS = {ready: false, drawn: 0, drawMs: 0, frames: 0, mode: "cluster", selected: null, boot};
  const $ = (id) => document.getElementById(id);
  const TAB10 = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const pct = (v) => (100 * v < 0.1 && v > 0 ? "<0.1" : (100 * v).toFixed(1)) + "%";
  const count = (v) => {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    for (const [s, d] of [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]]) if (a >= d) return (v / d).toPrecision(3).replace(/\.?0+$/, "") + s;
    return String(Math.round(v));
  };
  const mb = (b) => (b / 1e6).toFixed(b >= 1e7 ? 0 : 2) + " MB";
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  };
  const fail = (msg) => { const e = $("error"); e.textContent = msg; e.hidden = false; A.error = msg; };
  async function getJSON(url) {
    const r = await fetch(url, {cache: "no-store"});
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).error || ""; } catch (e) { /* not JSON */ }
      throw new Error(detail || `${url}: HTTP ${r.status}`);
    }
    return r.json();
  }

  // ---- the dataset list ----
  async function listPage() {
    $("list-page").hidden = false;
    $("title").textContent = "datasets";
    const data = boot.mode === "live" ? await getJSON(`${boot.base}api/atlas/list`) : await getJSON(boot.data);
    $("subtitle").textContent = `below ${data.root}`;
    const body = $("datasets").tBodies[0];
    if (!data.datasets.length) body.append(el("tr", {}, el("td", {class: "empty", colspan: "4", text: "no datasets (folders with manifest.json) below this folder"})));
    for (const d of data.datasets) {
      const href = boot.mode === "live" ? `${boot.base}atlas/${d.id.split("/").map(encodeURIComponent).join("/")}` : d.href;
      body.append(el("tr", {},
        el("td", {}, d.atlas && href ? el("a", {href, text: d.id}) : document.createTextNode(d.id)),
        el("td", {text: (d.domains || []).join(", ")}),
        el("td", {class: "num", text: count(d.train_tokens)}),
        el("td", {}, d.atlas ? el("span", {class: "badge finished", text: "atlas"}) :
          el("span", {class: "muted", text: `none yet: glassroom data atlas ${d.id}`}))));
    }
    A.ready = true;
  }

  // ---- one dataset's atlas ----
  let atlas, P, n, colours = {cluster: [], domain: []}, groups = {};
  const view = {scale: 1, x: 0, y: 0};   // screen = centre + (data * scale + offset) * half-size
  let canvas, ctx, W = 0, H = 0, pending = false;

  function clusterColour(i, k) { return i < 10 && k <= 10 ? TAB10[i] : `hsl(${(i * 137.508 + 210) % 360}, 60%, ${i % 2 ? 42 : 52}%)`; }
  function domainColour(i) { return TAB10[i % 10]; }

  function buildGroups() {
    // Point indices grouped by colour, once per mode: a frame sets fillStyle once per group.
    for (const mode of ["cluster", "domain"]) {
      const key = mode === "cluster" ? P.cluster : P.domain;
      const g = new Map();
      for (let i = 0; i < n; i++) { const c = key[i]; if (!g.has(c)) g.set(c, []); g.get(c).push(i); }
      groups[mode] = [...g.entries()].map(([c, idx]) => ({key: c, idx: Int32Array.from(idx)}));
    }
  }

  // Pixels per map unit. The map is clamped to [-1.2, 1.2] (glassroom.data.cluster.map_2d): at scale 1
  // the short side shows [-1.25, 1.25], so the clamped outliers at its edge are drawn too.
  const unit = () => Math.min(W, H) / 2 / 1.25 * view.scale;

  function toScreen(i) {
    const s = unit();
    return [W / 2 + (P.x[i] + view.x) * s, H / 2 - (P.y[i] + view.y) * s];
  }

  function draw() {
    pending = false;
    const t0 = performance.now();
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H);
    const s = unit(), cx = W / 2 + view.x * s, cy = H / 2 - view.y * s;
    const r = n > 8000 ? 2 : 3, half = r / 2;
    const sel = A.selected, xs = P.x, ys = P.y, cl = P.cluster;
    let drawn = 0;
    const pass = (dim) => {
      for (const g of groups[A.mode]) {
        ctx.fillStyle = dim ? "#e3e5e9" : (A.mode === "cluster" ? colours.cluster[g.key] : colours.domain[g.key]);
        const idx = g.idx;
        for (let j = 0; j < idx.length; j++) {
          const i = idx[j];
          if (sel !== null && (cl[i] === sel) === dim) continue;
          const px = cx + xs[i] * s, py = cy - ys[i] * s;
          if (px < -2 || py < -2 || px > W + 2 || py > H + 2) continue;
          ctx.fillRect(px - half, py - half, r, r);
          drawn++;
        }
      }
    };
    if (sel !== null) pass(true);
    pass(false);
    if (sel !== null) {   // the selected cluster's name at its centre
      const c = atlas.clusters[sel];
      ctx.font = "600 13px system-ui, sans-serif";
      ctx.fillStyle = "#111827";
      ctx.fillText(`#${c.id} ${c.terms.slice(0, 3).join(", ")}`, cx + c.centre[0] * s + 6, cy - c.centre[1] * s - 6);
    }
    A.drawn = drawn;
    A.frames += 1;
    A.drawMs = performance.now() - t0;
    $("map-readout").textContent = `${drawn.toLocaleString()} of ${n.toLocaleString()} documents drawn (${A.drawMs.toFixed(1)} ms)`;
  }
  const redraw = () => { if (!pending) { pending = true; requestAnimationFrame(draw); } };
  A.redraw = redraw;
  A.drawNow = draw;
  A.project = (i) => { const [x, y] = toScreen(i); const b = canvas.getBoundingClientRect(); return [b.left + x, b.top + y]; };

  function resize() {
    const dpr = window.devicePixelRatio || 1, box = canvas.parentElement.getBoundingClientRect();
    W = Math.max(200, Math.floor(box.width));
    H = Math.max(300, Math.min(640, Math.floor(W * 0.72)));
    canvas.width = W * dpr; canvas.height = H * dpr;
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    draw();
  }

  function nearestPoint(mx, my) {
    const s = unit(), cx = W / 2 + view.x * s, cy = H / 2 - view.y * s;
    let best = -1, bd = 64;   // within 8 px
    for (let i = 0; i < n; i++) {
      if (A.selected !== null && P.cluster[i] !== A.selected) continue;
      const dx = cx + P.x[i] * s - mx, dy = cy - P.y[i] * s - my, d = dx * dx + dy * dy;
      if (d < bd) { bd = d; best = i; }
    }
    return best;
  }

  function showTip(i, mx, my) {
    const tip = $("tip");
    A.hovered = i;
    if (i < 0) { tip.hidden = true; return; }
    const c = atlas.clusters[P.cluster[i]], src = atlas.sources[P.source[i]];
    tip.replaceChildren(
      el("div", {class: "tip-head"}, el("i", {class: "sw", style: `background:${colours.cluster[c.id]}`}),
        el("b", {text: `#${c.id} ${c.terms.slice(0, 4).join(", ")}`})),
      el("div", {class: "muted", text: `${atlas.domains[P.domain[i]]} · ${src ? src.name : "?"} · ${count(P.tokens[i])} tokens${P.language ? " · " + P.language[i] : ""}`}),
      el("div", {class: "tip-text", text: P.text[i]}));
    tip.hidden = false;
    const left = Math.min(mx + 14, W - 330), top = my + 14 > H - 120 ? my - 130 : my + 14;
    tip.style.left = Math.max(0, left) + "px"; tip.style.top = Math.max(0, top) + "px";
  }

  function wireMap() {
    let drag = null;
    canvas.addEventListener("mousemove", (e) => {
      const b = canvas.getBoundingClientRect(), mx = e.clientX - b.left, my = e.clientY - b.top;
      if (drag) {
        const s = unit();
        view.x = drag.vx + (mx - drag.mx) / s; view.y = drag.vy - (my - drag.my) / s;
        redraw();
        return;
      }
      showTip(nearestPoint(mx, my), mx, my);
    });
    canvas.addEventListener("mouseleave", () => showTip(-1));
    canvas.addEventListener("mousedown", (e) => {
      const b = canvas.getBoundingClientRect();
      drag = {mx: e.clientX - b.left, my: e.clientY - b.top, vx: view.x, vy: view.y};
    });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const b = canvas.getBoundingClientRect(), mx = e.clientX - b.left, my = e.clientY - b.top;
      const s0 = unit();
      const dx = (mx - W / 2) / s0 - view.x, dy = -(my - H / 2) / s0 - view.y;   // data point under the mouse
      view.scale = Math.max(0.5, Math.min(200, view.scale * Math.exp(-e.deltaY * 0.0015)));
      const s1 = unit();
      view.x = (mx - W / 2) / s1 - dx; view.y = -(my - H / 2) / s1 - dy;
      redraw();
    }, {passive: false});
    canvas.addEventListener("dblclick", () => { view.scale = 1; view.x = 0; view.y = 0; redraw(); });
    window.addEventListener("resize", resize);
  }

  function setMode(mode) {
    A.mode = mode;
    $("by-cluster").classList.toggle("on", mode === "cluster");
    $("by-domain").classList.toggle("on", mode === "domain");
    const legend = $("map-legend");
    legend.replaceChildren();
    if (mode === "domain") {
      atlas.domains.forEach((d, i) => legend.append(el("span", {class: "key"}, el("i", {class: "sw", style: `background:${colours.domain[i]}`}), d)));
    } else {
      legend.append(el("span", {class: "muted", text: `${atlas.k} clusters, coloured as in the list`}));
    }
    redraw();
  }
  A.setMode = setMode;

  function select(id) {
    A.selected = A.selected === id ? null : id;
    for (const li of $("clusters").children) li.classList.toggle("sel", Number(li.dataset.id) === A.selected);
    redraw();
  }
  A.select = select;

  function bar(parts, total) {
    // A stacked bar: parts = [[label, value, colour]], widths as shares of total.
    const b = el("div", {class: "bar"});
    for (const [label, v, colour] of parts) {
      if (v <= 0) continue;
      b.append(el("i", {style: `width:${(100 * v / total).toFixed(2)}%;background:${colour}`, title: `${label} ${pct(v / total)}`}));
    }
    return b;
  }

  // Atlases made before the document browser have no split/doc columns: nothing to open.
  let canRead = false;

  function clusterList() {
    const list = $("clusters");
    const s = atlas.sampling;
    $("cluster-readout").textContent = `${atlas.k} clusters of ${s.sampled.toLocaleString()} documents · largest first by tokens`;
    for (const c of atlas.clusters) {
      const dom = Object.entries(c.domains).map(([d, v]) => [d, v, colours.domain[atlas.domains.indexOf(d)]]);
      const excerpts = el("details", {class: "excerpts"}, el("summary", {text: `${c.excerpts.length} documents nearest the centre`}),
        ...c.excerpts.map((x) => el("div", {class: "excerpt"},
          el("div", {class: "muted", text: `${x.domain} · ${x.source} · ${x.id} · cos ${x.similarity.toFixed(2)}`}),
          el("pre", {text: x.text}))));
      const li = el("li", {class: "cluster", "data-id": String(c.id)},
        el("div", {class: "c-head"},
          el("i", {class: "sw", style: `background:${colours.cluster[c.id]}`}),
          el("b", {text: `#${c.id}`}),
          el("span", {class: "terms", text: c.terms.slice(0, 8).join(" · ") || "(no distinctive terms)"})),
        el("div", {class: "shares"},
          el("span", {class: "share", text: `${pct(c.token_share)} of tokens`}),
          el("span", {class: "muted", text: ` · ${pct(c.doc_share)} of documents · ${c.documents.toLocaleString()} sampled`})),
        el("div", {class: "share-bar"}, el("i", {style: `width:${Math.max(0.5, 100 * c.token_share / atlas.clusters[0].token_share).toFixed(1)}%;background:${colours.cluster[c.id]}`})),
        el("div", {class: "row"}, el("span", {class: "lbl", text: "domains"}), bar(dom, 1),
          el("span", {class: "muted small", text: dom.slice(0, 2).map(([d, v]) => `${d} ${pct(v)}`).join(", ")})),
        el("div", {class: "row small muted", text: "sources: " + c.sources.slice(0, 3).map((x) => `${x.name} ${pct(x.share)}`).join(", ")}),
        excerpts,
        canRead ? el("a", {href: "#", class: "docs-link small", "data-collection": `cluster:${c.id}`, text: `read its ${c.documents.toLocaleString()} sampled documents`}) : null);
      li.addEventListener("click", (e) => { if (!e.target.closest("details")) select(c.id); });
      list.append(li);
    }
  }

  function funnel() {
    const f = atlas.funnel, box = $("funnel");
    if (!f || !f.stages) { box.append(el("p", {class: "muted", text: "no stats.json in this dataset"})); return; }
    const stages = f.stages.filter((s) => f[s]);
    const table = el("table", {class: "tbl funnel"});
    const removedFile = {exact_dedup: "duplicates", fuzzy_dedup: "duplicates", decontaminate: "contaminated"};
    const head = (s) => (removedFile[s] && (atlas.removed || {})[removedFile[s]]) ?
      el("a", {href: "#", "data-collection": removedFile[s], title: "read the removed documents", text: s.replace("_", " ")}) : document.createTextNode(s.replace("_", " "));
    table.append(el("tr", {}, el("th", {text: "domain"}), ...stages.map((s) => el("th", {class: "num"}, head(s))), el("th", {text: "removed (documents, bytes)"})));
    for (const [di, d] of atlas.domains.entries()) {
      const first = (f[stages[0]] || {})[d];
      if (!first) continue;
      const top = Math.max(first.bytes_in || 0, 1);
      const cells = stages.map((s) => {
        const e = f[s][d] || {};
        const out = e.bytes_out ?? e.bytes_in ?? 0;
        return el("td", {class: "num"},
          el("div", {text: `${(e.docs_out ?? e.docs_in ?? 0).toLocaleString()} docs`}),
          el("div", {class: "muted small", text: mb(out)}),
          el("div", {class: "fbar"}, el("i", {style: `width:${(100 * out / top).toFixed(1)}%;background:${colours.domain[di]}`})));
      });
      const removed = [];
      for (const s of stages) {
        for (const [reason, r] of Object.entries((f[s][d] || {}).removed || {})) removed.push(`${s.replace("_", " ")}: ${reason.replace(/_/g, " ")} ${r.docs.toLocaleString()} (${mb(r.bytes)})`);
        for (const [reason, v] of Object.entries((f[s][d] || {}).skipped || {})) removed.push(`${s}: skipped ${reason.replace(/_/g, " ")} ${v}`);
      }
      table.append(el("tr", {}, el("td", {}, el("i", {class: "sw", style: `background:${colours.domain[di]}`}), d), ...cells,
        el("td", {class: "small", text: removed.join("; ") || "nothing"})));
    }
    box.append(table);
  }

  function removedLinks() {
    // The dedup and decontamination rows: what was removed, and a link to read it.
    const box = $("removed-links"), r = atlas.removed || {}, dd = atlas.dedup, dc = atlas.decontamination;
    if (dd) {
      const parts = [`near-duplicates: Jaccard ≥ ${dd.threshold} (${dd.bands} bands × ${dd.rows} rows, caught with probability ${pct(dd.catch_probability || 0)} at the threshold)`,
        `${count(dd.clusters)} duplicate clusters, ${count(dd.exact_duplicates)} exact and ${count(dd.near_duplicates)} near copies removed`];
      box.append(el("div", {class: "removed-row"}, el("b", {text: "deduplication "}), el("span", {text: parts.join("; ") + " "}),
        r.duplicates ? el("a", {href: "#", "data-collection": "duplicates", id: "read-duplicates", text: "read the duplicate clusters"}) : null));
    }
    if (dc) {
      box.append(el("div", {class: "removed-row"}, el("b", {text: "decontamination "}),
        el("span", {text: `documents sharing a ${dc.ngram}-word n-gram with evaluation text (${(dc.eval_sources || []).map((x) => x.name).join(", ")}): ` +
          `${count(dc.documents_removed ?? dc.documents_flagged)} ${dc.action === "flag" ? "flagged" : "removed"} `}),
        r.contaminated ? el("a", {href: "#", "data-collection": "contaminated", id: "read-contaminated", text: "read them"}) : null));
    }
  }

  function qualityTable() {
    // Domain x quality cells: each cell's share of documents and tokens, each a link to its documents.
    const Q = atlas.quality;
    if (!Q || !Q.cells) return;
    $("quality-card").hidden = false;
    const c = Q.classifier || {};
    $("quality-readout").textContent = `${Q.buckets} buckets per domain (q0 lowest, equal counts) · ${c.method || "classifier"}` +
      (c.heldout_accuracy !== undefined ? ` · held-out accuracy ${(100 * c.heldout_accuracy).toFixed(1)}%` : "");
    const t = $("quality"), buckets = [...Array(Q.buckets).keys()];
    t.append(el("tr", {}, el("th", {text: "domain"}), ...buckets.map((q) => el("th", {class: "num"},
      canRead ? el("a", {href: "#", "data-collection": `quality:${q}`, text: `q${q}`}) : document.createTextNode(`q${q}`)))));
    for (const [di, d] of atlas.domains.entries()) {
      const cells = Q.cells.filter((x) => x.domain === d);
      if (!cells.length) continue;
      t.append(el("tr", {}, el("td", {}, el("i", {class: "sw", style: `background:${colours.domain[di]}`}), d), ...buckets.map((q) => {
        const x = cells.find((y) => y.bucket === q);
        if (!x) return el("td", {class: "num muted", text: "–"});
        const label = el("div", {}, el("span", {class: "share", text: pct(x.token_share)}), el("span", {class: "muted small", text: ` tokens · ${pct(x.doc_share)} docs`}));
        return el("td", {class: "num cell"}, canRead ? el("a", {href: "#", "data-collection": `cell:${d}:${q}`, title: `read the ${x.documents} sampled documents`}, label) : label,
          el("div", {class: "muted small", text: `${(x.documents || 0).toLocaleString()} sampled`}),
          (x.examples || []).length ? el("details", {class: "excerpts cell-examples"}, el("summary", {text: `${x.examples.length} examples`}),
            ...x.examples.map((ex) => el("div", {class: "excerpt"}, el("div", {class: "muted", text: `${ex.source} · ${ex.id}`}), el("pre", {text: ex.text})))) : null);
      })));
    }
  }

  function mixture() {
    const m = atlas.mixture, t = $("mixture");
    $("mix-readout").textContent = `${count(m.total_tokens)} planned training tokens; weights ${m.weights}`;
    t.append(el("tr", {}, ...["domain", "weight", "tokens", "train tokens", "epochs"].map((h, i) => el("th", {class: i ? "num" : "", text: h}))));
    for (const [di, d] of atlas.domains.entries()) {
      const r = m.domains[d];
      if (!r) continue;
      t.append(el("tr", {}, el("td", {}, el("i", {class: "sw", style: `background:${colours.domain[di]}`}), d),
        el("td", {class: "num"}, el("span", {text: r.weight.toFixed(3)}), el("div", {class: "fbar"}, el("i", {style: `width:${(100 * r.weight).toFixed(1)}%;background:${colours.domain[di]}`}))),
        el("td", {class: "num", text: count(r.tokens)}), el("td", {class: "num", text: count(r.train_tokens)}),
        el("td", {class: "num" + (r.epochs > 4 ? " warn" : ""), text: r.epochs === null ? "–" : r.epochs.toFixed(2)})));
    }
  }

  function tokenizer() {
    const k = atlas.tokenizer, t = $("tokenizer");
    $("tok-readout").textContent = `vocabulary ${k.vocab_size.toLocaleString()}${k.model ? " · " + k.model : ""}${k.origin ? " · " + k.origin : ""}`;
    const max = Math.max(...Object.values(k.bytes_per_token).map((v) => v.train || 0), 1);
    t.append(el("tr", {}, ...["domain", "bytes/token (train)", "validation", "train tokens"].map((h, i) => el("th", {class: i ? "num" : "", text: h}))));
    for (const [di, d] of atlas.domains.entries()) {
      const b = k.bytes_per_token[d] || {};
      t.append(el("tr", {}, el("td", {}, el("i", {class: "sw", style: `background:${colours.domain[di]}`}), d),
        el("td", {class: "num"}, el("span", {text: b.train ? b.train.toFixed(2) : "–"}), el("div", {class: "fbar"}, el("i", {style: `width:${(100 * (b.train || 0) / max).toFixed(1)}%;background:${colours.domain[di]}`}))),
        el("td", {class: "num", text: b.validation ? b.validation.toFixed(2) : "–"}),
        el("td", {class: "num", text: count((k.tokens[d] || {}).train)})));
    }
  }

  function languageTable() {   // absent from atlases written before languages were identified
    const L = atlas.languages;
    if (!L) return;
    $("languages-card").hidden = false;
    $("lang-readout").textContent = `${L.identifier} · share of each domain's sampled documents`;
    const t = $("languages");
    t.append(el("tr", {}, el("th", {text: "domain"}), el("th", {text: "languages"})));
    for (const [di, d] of atlas.domains.entries()) {
      const sh = L.by_domain[d];
      if (!sh) continue;
      t.append(el("tr", {}, el("td", {}, el("i", {class: "sw", style: `background:${colours.domain[di]}`}), d),
        el("td", {text: Object.entries(sh).filter(([, v]) => v >= 0.01).map(([code, v]) => `${code} ${pct(v)}`).join(" · ")})));
    }
  }

  async function atlasPage() {
    $("title").textContent = boot.dataset;
    const url = boot.mode === "live" ? `${boot.base}api/atlas?dataset=${encodeURIComponent(boot.dataset)}` : boot.data;
    atlas = await getJSON(url);
    A.data = atlas;
    $("atlas-page").hidden = false;
    document.title = `${atlas.dataset} · data atlas · glassroom`;
    $("title").textContent = atlas.dataset;
    const s = atlas.sampling;
    $("subtitle").textContent = `${s.sampled.toLocaleString()} of ${Object.values(s.population).reduce((a, b) => a + b, 0).toLocaleString()} documents ` +
      `(${s.mode}) · ${atlas.method.name}: ${atlas.method.description} · ${atlas.map.projection} map · domain purity ${atlas.domain_purity.toFixed(2)} · ${atlas.created}`;
    const p = atlas.points;
    n = p.x.length;
    P = {x: Float32Array.from(p.x), y: Float32Array.from(p.y), cluster: Int32Array.from(p.cluster), domain: Int32Array.from(p.domain),
         source: Int32Array.from(p.source), tokens: p.tokens, text: p.text, language: p.language || null};
    colours.cluster = atlas.clusters.map((c) => clusterColour(c.id, atlas.k));
    colours.domain = atlas.domains.map((d, i) => domainColour(i));
    buildGroups();
    canvas = $("map");
    ctx = canvas.getContext("2d");
    canRead = Array.isArray(p.split) && Array.isArray(p.doc);
    if (!canRead) $("read-all").hidden = true;
    clusterList();
    funnel();
    removedLinks();
    qualityTable();
    mixture();
    tokenizer();
    languageTable();
    wireMap();
    $("by-cluster").addEventListener("click", () => setMode("cluster"));
    $("by-domain").addEventListener("click", () => setMode("domain"));
    resize();
    setMode("cluster");
    draw();
    if (window.ATLAS_DOCS) window.ATLAS_DOCS.init(boot, atlas);
    A.ready = true;
  }

  (boot.page === "atlas-index" ? listPage() : atlasPage()).catch((e) => { fail(String(e.message || e)); A.ready = "error"; });
})();
