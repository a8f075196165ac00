// The atlas's document browser (frontend/atlas.html's #docs-panel): read the documents of a cluster,
// a quality bucket, a domain x quality cell, the duplicate clusters or the decontaminated documents,
// a page of PAGE_SIZE at a time, searchable by text. Live (glassroom serve): pages come from
// /api/atlas/docs (the server decodes, redacts and searches). Published (glassroom publish): from
// docs/index.json and the page files beside atlas.json (glassroom/web/atlas_docs_serve.py writes them);
// the cluster, quality and cell collections are rebuilt here from atlas.json's points, and search
// reads every page of the current collection. The search rule is the server's: the lowercased query
// inside a document's lowercased text or id. All text is set with textContent (no HTML from data).
// window.ATLAS_DOCS exposes open/search/go and the state the browser tests read.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const D = window.ATLAS_DOCS = {ready: false, busy: false, collection: null, page: 1, q: "", from: 0, result: null, error: null, loads: 0};
  let boot, atlas, staticIndex = null, rank = null;
  const files = new Map();   // static page files already fetched

  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  };

  async function getJSON(url) {
    const r = await fetch(url, {cache: "no-store"});
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).error || ""; } catch (e) { /* not JSON */ }
      throw new Error(detail || `${url}: HTTP ${r.status}`);
    }
    return r.json();
  }

  function matches(doc, q) {
    if (doc.kind === "duplicates") return [doc.kept || {}, ...(doc.removed || [])].some((d) => matches(d, q));
    return (doc.text || "").toLowerCase().includes(q) || (doc.id || "").toLowerCase().includes(q);
  }

  // ---- where pages come from ----
  const PAGE = 20;

  function members(name) {
    const p = atlas.points, n = p.x.length, out = [];
    const [kind, ...rest] = name.split(":");
    if (name === "all") { for (let i = 0; i < n; i++) out.push(i); return out; }
    if (kind === "cluster") { const j = Number(rest[0]); for (let i = 0; i < n; i++) if (p.cluster[i] === j) out.push(i); return out; }
    if (kind === "quality") { const q = Number(rest[0]); for (let i = 0; i < n; i++) if (p.quality[i] === q) out.push(i); return out; }
    if (kind === "cell") {
      const q = Number(rest.pop()), d = atlas.domains.indexOf(rest.join(":"));
      for (let i = 0; i < n; i++) if (p.domain[i] === d && p.quality[i] === q) out.push(i);
      return out;
    }
    throw new Error(`no collection ${name}`);
  }

  async function file(name) {
    if (!files.has(name)) files.set(name, getJSON(`docs/${name}`).catch((e) => { files.delete(name); throw e; }));
    return files.get(name);
  }

  async function pointDocs(points) {
    if (!rank) {   // each point's place in its cluster's pages
      rank = new Int32Array(atlas.points.x.length);
      const seen = new Map();
      atlas.points.cluster.forEach((c, i) => { const r = seen.get(c) || 0; rank[i] = r; seen.set(c, r + 1); });
    }
    const wanted = points.map((i) => [i, `cluster-${atlas.points.cluster[i]}-${Math.floor(rank[i] / PAGE) + 1}.json`]);
    const pages = new Map();
    const names = [...new Set(wanted.map((w) => w[1]))];
    for (let k = 0; k < names.length; k += 6) {   // six files at a time
      const got = await Promise.all(names.slice(k, k + 6).map(file));
      names.slice(k, k + 6).forEach((nm, j) => pages.set(nm, got[j]));
      if (names.length > 12) status(`searching: read ${Math.min(k + 6, names.length)} of ${names.length} pages`);
    }
    return wanted.map(([i, nm]) => pages.get(nm)[rank[i] % PAGE]);
  }

  async function staticPage(name, page, q) {
    if (!staticIndex) staticIndex = await getJSON("docs/index.json");
    const info = staticIndex.collections[name];
    if (!info) throw new Error(`no collection ${name} in this published atlas`);
    let docs, total;
    if (name === "duplicates" || name === "contaminated") {
      if (!q) {
        if (page > info.pages) throw new Error(`page ${page} of ${name}: it has ${info.pages} pages`);
        return {collection: name, total: info.total, page, pages: info.pages, page_size: PAGE, docs: await file(`${name}-${page}.json`)};
      }
      docs = [];
      for (let p = 1; p <= info.pages; p++) docs.push(...await file(`${name}-${p}.json`));
    } else {
      const m = members(name);
      if (!q) {
        const pages = Math.max(1, Math.ceil(m.length / PAGE));
        if (page > pages) throw new Error(`page ${page} of ${name}: it has ${pages} pages`);
        return {collection: name, total: m.length, page, pages, page_size: PAGE, docs: await pointDocs(m.slice((page - 1) * PAGE, page * PAGE))};
      }
      docs = await pointDocs(m);
    }
    const hits = docs.filter((d) => matches(d, q));
    total = hits.length;
    const pages = Math.max(1, Math.ceil(total / PAGE));
    return {collection: name, total, page: Math.min(page, pages), pages, page_size: PAGE, q,
            docs: hits.slice((Math.min(page, pages) - 1) * PAGE, Math.min(page, pages) * PAGE),
            scan: {from: 0, to: docs.length, of: docs.length, complete: true}};
  }

  async function livePage(name, page, q, from) {
    const qs = new URLSearchParams({dataset: boot.dataset, collection: name, page: String(page)});
    if (q) { qs.set("q", q); qs.set("from", String(from)); }
    return getJSON(`${boot.base}api/atlas/docs?${qs}`);
  }

  // ---- drawing ----
  function title(name) {
    const [kind, ...rest] = name.split(":");
    if (name === "all") return "sampled documents";
    if (kind === "cluster") {
      const c = atlas.clusters[Number(rest[0])];
      return `cluster #${rest[0]}${c ? " · " + c.terms.slice(0, 4).join(", ") : ""}`;
    }
    if (kind === "quality") return `quality bucket q${rest[0]} (all domains)`;
    if (kind === "cell") { const q = rest.pop(); return `${rest.join(":")} · quality bucket q${q}`; }
    if (name === "duplicates") return "duplicate clusters (kept and removed documents)";
    if (name === "contaminated") return "documents sharing long n-grams with evaluation text";
    return name;
  }

  function spansOf(text, q) {
    const out = [];
    if (!q) return out;
    const re = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi");
    let m;
    while ((m = re.exec(text)) !== null && out.length < 500) { out.push([m.index, m.index + m[0].length, "hit"]); if (!m[0].length) re.lastIndex++; }
    return out;
  }

  function textBlock(text, marks, q) {
    // The text as text nodes, with leaked n-grams (marks, UTF-16 offsets from the server) and
    // search hits wrapped in <mark>.
    const spans = [...(marks || []).map(([a, b]) => [a, b, "leak"]), ...spansOf(text, q)].sort((x, y) => x[0] - y[0]);
    const pre = el("pre", {class: "doc-text"});
    let at = 0;
    for (const [a, b, cls] of spans) {
      if (a < at || a >= text.length) continue;
      if (a > at) pre.append(document.createTextNode(text.slice(at, a)));
      pre.append(el("mark", {class: cls, text: text.slice(a, b)}));
      at = b;
    }
    if (at < text.length) pre.append(document.createTextNode(text.slice(at)));
    return pre;
  }

  const fmt = (v, d = 2) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));

  function docItem(doc, q) {
    if (doc.error && !doc.text && doc.kind !== "duplicates") return el("li", {class: "doc"}, el("div", {class: "error", text: doc.error}));
    if (doc.kind === "duplicates") {
      const li = el("li", {class: "doc dup"},
        el("div", {class: "doc-meta"}, el("b", {text: `duplicate cluster ${doc.cluster ?? doc.n}`}),
          el("span", {class: "muted", text: ` · kept 1, removed ${doc.removed_total}${doc.removed_total > doc.removed.length ? ` (first ${doc.removed.length} shown)` : ""}`})));
      const member = (m, kept) => el("div", {class: "dup-member" + (kept ? " kept" : "")},
        el("div", {class: "doc-meta"}, el("span", {class: "badge " + (kept ? "finished" : "failed"), text: kept ? "kept" : (m.reason || "removed").replace(/_/g, " ")}),
          el("b", {class: "doc-id", text: " " + m.id}),
          el("span", {class: "muted", text: ` · ${m.domain} · ${m.source}${kept ? "" : ` · Jaccard ${fmt(m.jaccard, 3)}`}${m.cut ? " · cut" : ""}`})),
        textBlock(m.text || "", null, q));
      li.append(member(doc.kept || {}, true), ...(doc.removed || []).map((m) => member(m, false)));
      return li;
    }
    const meta = el("div", {class: "doc-meta"}, el("b", {class: "doc-id", text: doc.id}));
    const bits = [doc.domain, doc.split, doc.source];
    if (doc.kind === "contaminated") {
      bits.push(`${doc.action} · ${doc.matches ?? "?"} leaked n-grams · from ${(doc.eval_sources || []).join(", ")}`);
    } else {
      if (doc.cluster !== undefined) bits.push(`cluster #${doc.cluster}`);
      if (doc.quality !== null && doc.quality !== undefined) bits.push(`quality q${doc.quality}${doc.score !== null && doc.score !== undefined ? ` (score ${fmt(doc.score, 3)})` : ""}`);
      if (doc.tokens !== null && doc.tokens !== undefined) bits.push(`${doc.tokens.toLocaleString()} tokens`);
    }
    if (doc.cut) bits.push("cut");
    meta.append(el("span", {class: "muted", text: " · " + bits.filter((b) => b !== undefined && b !== "").join(" · ")}));
    const li = el("li", {class: "doc", "data-id": doc.id}, meta);
    if (doc.kind === "contaminated" && doc.ngrams && doc.ngrams.length) {
      li.append(el("div", {class: "ngrams"}, el("span", {class: "muted small", text: "leaked: "}),
        ...doc.ngrams.map((g) => el("code", {class: "ngram", text: g}))));
    }
    if (doc.error) li.append(el("div", {class: "error", text: doc.error}));
    li.append(textBlock(doc.text || "", doc.marks, q));
    return li;
  }

  function status(text) { $("docs-status").textContent = text; }

  function draw(r) {
    const list = $("docs-list");
    list.replaceChildren(...r.docs.map((d) => docItem(d, D.q)));
    if (!r.docs.length) list.append(el("li", {class: "muted", text: D.q ? "no document here contains that text" : "no documents in this collection"}));
    let s = `page ${r.page} of ${r.pages} · ${r.total.toLocaleString()} ${r.collection === "duplicates" ? "clusters" : "documents"}`;
    if (r.scan) s += r.scan.complete ? ` matching "${D.q}"` : ` matching "${D.q}" in documents ${r.scan.from + 1}–${r.scan.to} of ${r.scan.of}`;
    status(s);
    $("docs-prev").disabled = r.page <= 1;
    $("docs-next").disabled = r.page >= r.pages;
    $("docs-more").hidden = !(r.scan && r.scan.to < r.scan.of);
    list.scrollTop = 0;
    for (const pre of list.querySelectorAll("pre.doc-text")) {   // each text scrolled to its first mark
      const m = pre.querySelector("mark");
      if (m) pre.scrollTop = Math.max(0, m.offsetTop - 40);
    }
  }

  async function load() {
    D.busy = true; D.error = null;
    $("docs-error").hidden = true;
    try {
      const r = boot.mode === "live" ? await livePage(D.collection, D.page, D.q, D.from) : await staticPage(D.collection, D.page, D.q);
      D.result = r; D.page = r.page;
      draw(r);
    } catch (e) {
      D.error = String(e.message || e);
      $("docs-error").textContent = D.error; $("docs-error").hidden = false;
      $("docs-list").replaceChildren();
      status("");
    }
    D.busy = false; D.loads += 1;
  }

  function setHash() {
    const h = new URLSearchParams({docs: D.collection});
    if (D.page > 1) h.set("page", String(D.page));
    if (D.q) h.set("q", D.q);
    history.replaceState(null, "", "#" + h.toString());
  }

  D.open = (collection, {page = 1, q = ""} = {}) => {
    D.collection = collection; D.page = page; D.q = q.trim().toLowerCase(); D.from = 0;
    $("docs-title").textContent = title(collection);
    $("docs-q").value = q;
    $("docs-panel").hidden = false;
    setHash();
    return load();
  };
  D.go = (page) => { D.page = page; setHash(); return load(); };
  D.search = (q) => { D.q = q.trim().toLowerCase(); D.page = 1; D.from = 0; setHash(); return load(); };
  D.close = () => { $("docs-panel").hidden = true; D.collection = null; history.replaceState(null, "", location.pathname + location.search); };

  D.init = (bootData, atlasData) => {
    boot = bootData; atlas = atlasData;
    $("docs-close").addEventListener("click", D.close);
    $("docs-prev").addEventListener("click", () => D.go(D.page - 1));
    $("docs-next").addEventListener("click", () => D.go(D.page + 1));
    $("docs-more").addEventListener("click", () => { D.from = D.result.scan.to; D.page = 1; load(); });
    $("docs-search").addEventListener("submit", (e) => { e.preventDefault(); D.search($("docs-q").value); });
    document.addEventListener("keydown", (e) => { if (e.key === "Escape" && !$("docs-panel").hidden) D.close(); });
    document.addEventListener("click", (e) => {   // any link or button marked with a collection opens it
      const a = e.target.closest("[data-collection]");
      if (!a) return;
      e.preventDefault(); e.stopPropagation();
      D.open(a.dataset.collection);
    });
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.get("docs")) D.open(h.get("docs"), {page: Math.max(1, parseInt(h.get("page") || "1", 10) || 1), q: h.get("q") || ""});
    D.ready = true;
  };
})();
