// Two run-page panels for runs that start from another model: "Lineage" (the base a run started
// from, linked when the dashboard shows it) and "Samples" (the fixed prompts answered at each
// checkpoint, from the journal's `samples` events). Model output is text: always textContent.
"use strict";

// The store artifact `lineage` as glassroom.web.lineage resolves it: base, base_run (a run id to
// link to, or null), base_step, base_kind, task, data.
GR.showLineage = function (lin) {
  const box = document.getElementById("lineage");
  if (!box) return;
  box.hidden = !(lin && typeof lin === "object");
  if (box.hidden) return;
  const base = document.getElementById("lineage-base");
  base.innerHTML = "";
  if (lin.base_run) {
    const a = GR.el("a", "", base); a.href = GR.runHref(String(lin.base_run)); a.textContent = String(lin.base_run);
  } else {
    GR.el("code", "digest", base).textContent = lin.base === null || lin.base === undefined ? "?" : String(lin.base);
  }
  const text = (v) => typeof v === "string" || typeof v === "number" ? String(v) : JSON.stringify(v);
  const kind = {run: "a glassroom run", hf: "a Hugging Face folder"}[lin.base_kind] || lin.base_kind;
  const bits = [kind && text(kind), Number.isFinite(lin.base_step) && `step ${lin.base_step}`];
  document.getElementById("lineage-meta").textContent = bits.filter(Boolean).join(" · ");
  const task = lin.task ? `task ${text(lin.task)}` : "";
  const data = lin.data ? `data ${text(lin.data)}` : "";
  document.getElementById("lineage-task").textContent = [task, data].filter(Boolean).join(" · ");
};

// {step: [{prompt, text}, ...]} from the journal: the newest `samples` event of each step wins (a
// resumed run that redid a checkpoint wrote it again). An event another version wrote in another
// shape (no step, data not {"samples": [...]}) is counted in GR.samplesUnreadable, not shown.
GR.samplesByStep = function (events) {
  const byStep = new Map();
  GR.samplesUnreadable = [];
  for (const e of events || []) {
    if (!e || e.kind !== "samples") continue;
    const list = e.data && Array.isArray(e.data.samples) ? e.data.samples : null;
    if (!list || !Number.isFinite(e.step)) { GR.samplesUnreadable.push(e.step); continue; }
    const prev = byStep.get(e.step);
    if (!prev || (e.id || 0) >= prev.id) byStep.set(e.step, {id: e.id || 0, samples: list});
  }
  return new Map([...byStep.entries()].sort((a, b) => b[0] - a[0]).map(([s, v]) => [s, v.samples]));
};

// The Samples panel: a step picker (newest first; "all steps" shows every checkpoint in one table).
// The choice survives live updates; "newest" follows new checkpoints as they arrive.
GR.samplesChoice = "newest";
GR.showSamples = function (events) {
  const box = document.getElementById("samples");
  if (!box) return;
  const byStep = GR.samplesByStep(events);
  const bad = GR.samplesUnreadable;
  box.hidden = byStep.size === 0 && bad.length === 0;
  if (box.hidden) return;
  let note = document.getElementById("samples-note");
  if (!note) { note = GR.el("div", "muted", box); note.id = "samples-note"; }
  note.textContent = bad.length ? `${bad.length} samples event${bad.length > 1 ? "s" : ""} not shown (at step ` +
    `${bad.slice(0, 5).map((s) => Number.isFinite(s) ? s : "?").join(", ")}${bad.length > 5 ? ", ..." : ""}): ` +
    "not a list of {prompt, text}, written by another glassroom version" : "";
  if (byStep.size === 0) {
    document.getElementById("samples-step").innerHTML = "";
    document.getElementById("samples-table").innerHTML = "";
    return;
  }
  const select = document.getElementById("samples-step");
  const steps = [...byStep.keys()];
  if (GR.samplesChoice !== "newest" && GR.samplesChoice !== "all" && !byStep.has(GR.samplesChoice)) GR.samplesChoice = "newest";
  select.innerHTML = "";
  const option = (value, label) => { const o = GR.el("option", "", select); o.value = String(value); o.textContent = label; return o; };
  option("newest", `newest (step ${steps[0]})`);
  for (const s of steps) option(s, `step ${s}`);
  option("all", "all steps");
  select.value = String(GR.samplesChoice);
  if (!select.onchange) select.onchange = () => {
    const v = select.value;
    GR.samplesChoice = v === "newest" || v === "all" ? v : Number(v);
    GR.showSamples(GR.samplesEvents);
  };
  GR.samplesEvents = events;
  const shown = GR.samplesChoice === "all" ? steps : [GR.samplesChoice === "newest" ? steps[0] : GR.samplesChoice];
  const table = document.getElementById("samples-table");
  table.innerHTML = "";
  const head = GR.el("tr", "", GR.el("thead", "", table));
  for (const h of ["step", "prompt", "answer"]) GR.el("th", "", head).textContent = h;
  const body = GR.el("tbody", "", table);
  for (const step of shown) {
    for (const sample of byStep.get(step)) {
      const tr = GR.el("tr", "", body);
      GR.el("td", "num", tr).textContent = String(step);
      GR.el("td", "prompt", tr).textContent = GR.sampleText(sample, "prompt");
      GR.el("td", "answer", tr).textContent = GR.sampleText(sample, "text");
    }
  }
};

// One field of a sample as the table shows it: text as written up to SAMPLE_CHARS (an answer of a
// megabyte would bury the page), "?" for a sample that is not {prompt, text}.
GR.SAMPLE_CHARS = 2000;
GR.sampleText = function (sample, key) {
  if (!sample || typeof sample !== "object" || sample[key] === undefined || sample[key] === null) return "?";
  const value = sample[key];
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text.length <= GR.SAMPLE_CHARS) return text;
  return `${text.slice(0, GR.SAMPLE_CHARS)} … (${(text.length - GR.SAMPLE_CHARS).toLocaleString("en")} more characters)`;
};
