"""The run's record as `glassroom verify` checks it: the journal's chain (journal.py), the metric
rows the chain vouches for, and the settings that change what a measured loss means.

Format 2 (a start event whose data carries {"record": {"format": 2, "measure": ...}}):

- measure: the settings that change the measured loss, written at start and at every resume:
  {"data_path", "eval_sequences", "precision", "seq_len", "dataset_sha256" (the dataset manifest's
  digest: which shards and validation split)}. The sealed prediction carries the same keys (but the
  dataset's digest) in prediction["hero"]["measure"].
- windows: every checkpoint event and the end event carry {"record": {"after", "to", "rows",
  "sha256"}}: the digest of the metric rows with after < step <= to (after null: from the first
  step), as (name, step, value) sorted by name then step, canonical JSON (window_digest). The window
  enters the chain with its event, so editing, adding or removing a row of a closed window breaks
  either the window's digest or, if the event was rewritten to match, the chain's head.
  A resume at step R redoes the steps after R: windows that end after R are superseded (their rows
  were deleted and logged again) and the next window starts at the newest standing window's end.
  Rows a later writer adds to a closed window (`glassroom eval` -> a downstream event) are claimed by
  that event (its scores at its step) and checked against it instead.

A store of format 1 (written before windows) is verified with what it has: the chain and the seal;
verify_record says what it lacks. Torch-free: the dashboard and `glassroom verify` import it.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any, Optional

from glassroom import yaml_io
from glassroom.observe import anchor
from glassroom.observe.journal import canonical, sha256_hex
from glassroom.observe.prediction import verify_run
from glassroom.observe.run_folder import config_path
from glassroom.observe.store import StoreReader

FORMAT = 2
MEASURE_KEYS = ("data_path", "eval_sequences", "precision", "seq_len")
WINDOW_KINDS = ("checkpoint", "end")


# ----------------------------------------------------------------------------- writing (the trainer)

def measure_settings(config: dict, manifest: Optional[dict] = None) -> dict:
    """The settings of a resolved run config (RunConfig.to_dict()) that change the measured loss, and
    the digest of its dataset's manifest when given."""
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    out = {"data_path": None if data.get("path") is None else str(data.get("path")),
           "eval_sequences": train.get("eval_sequences"), "precision": train.get("precision"),
           "seq_len": train.get("seq_len")}
    if manifest is not None:
        out["dataset_sha256"] = sha256_hex(canonical(json.loads(json.dumps(manifest, default=str))))
    return json.loads(json.dumps(out))


def window_digest(rows) -> str:
    """sha256 of canonical [[name, step, value], ...] (rows sorted by name then step, value null for a gap)."""
    return sha256_hex(canonical([[str(n), int(s), None if v is None else float(v)] for n, s, v in rows]))


def record_of(data: Any) -> dict:
    """An event's data's "record" part ({} when it has none)."""
    part = data.get("record") if isinstance(data, dict) else None
    return part if isinstance(part, dict) else {}


def _parsed(data: Optional[str]) -> Any:
    try:
        return json.loads(data) if data else None
    except (ValueError, RecursionError):
        return None


def standing_windows(events) -> tuple[list[dict], list[dict]]:
    """([standing window], [superseded window]) from events (id, step, kind, data text) in id order;
    a window is {"event", "kind", "after", "to", "rows", "sha256"}."""
    standing, superseded = [], []
    for row in events:
        id_, step, kind, data = row[0], row[1], row[2], row[3]
        if kind == "resume" and isinstance(step, int):
            superseded += [w for w in standing if w["to"] > step]
            standing = [w for w in standing if w["to"] <= step]
        elif kind in WINDOW_KINDS:
            w = record_of(_parsed(data))
            if isinstance(w.get("to"), int) and isinstance(w.get("sha256"), str):
                standing.append({"event": id_, "kind": kind, "after": w.get("after"), "to": w["to"],
                                 "rows": w.get("rows"), "sha256": w["sha256"]})
    return standing, superseded


def close_window(store, step: int) -> dict:
    """The window a checkpoint or end event at `step` carries (`store`: an open StoreWriter, flushed
    here): the rows after the newest standing window's end up to `step`."""
    store.flush()
    standing, _ = standing_windows(store.record_windows())
    ends = [w["to"] for w in standing if w["to"] <= step]
    after = max(ends) if ends else None
    rows = store.metric_rows(after, step)
    return {"after": after, "to": int(step), "rows": len(rows), "sha256": window_digest(rows)}


# ----------------------------------------------------------------------------- checking a run folder

def _steps(lo: Optional[int], hi: int) -> str:
    return f"steps up to {hi}" if lo is None else f"steps {lo + 1}-{hi}"


def claimed_rows(events) -> dict[tuple[str, int], tuple[int, float]]:
    """(name, step) -> (event id, value) of the rows downstream events wrote (their scores)."""
    out = {}
    for id_, _, step, kind, _, data, _ in events:
        scores = (_parsed(data) or {}).get("scores") if kind == "downstream" else None
        if isinstance(scores, dict) and isinstance(step, int):
            for task, metrics in scores.items():
                for metric, value in (metrics.items() if isinstance(metrics, dict) else []):
                    out[(f"downstream/{task}/{metric}", step)] = (id_, value)
    return out


def check_windows(events, rows) -> tuple[Optional[str], dict]:
    """(problem or None, counts) of the metric rows against the standing windows."""
    standing, superseded = standing_windows([(e[0], e[2], e[3], e[5]) for e in events])
    claimed = claimed_rows(events)
    by_window: dict[int, list] = {w["event"]: [] for w in standing}
    outside, tail = [], 0
    last_to = max((w["to"] for w in standing), default=None)
    ordered = sorted(standing, key=lambda w: w["to"])
    ends = [w["to"] for w in ordered]
    for name, step, value in rows:
        i = bisect.bisect_left(ends, step)   # the first window ending at or after step: its own, if any
        owner = ordered[i] if i < len(ordered) and (ordered[i]["after"] is None or step > ordered[i]["after"]) else None
        claim = claimed.get((name, step))
        if owner is not None and not (claim is not None and claim[0] > owner["event"]):
            by_window[owner["event"]].append((name, step, value))
        elif claim is not None:
            if value is None or not isinstance(claim[1], (int, float)) or float(value) != float(claim[1]):
                return (f"metric row {name} at step {step} is {value}, downstream event {claim[0]} recorded "
                        f"{claim[1]}: the row was edited"), {}
        elif last_to is not None and step <= last_to:
            outside.append((name, step))
        else:
            tail += 1
    for w in standing:
        got = by_window[w["event"]]
        if window_digest(got) != w["sha256"]:
            what = (f"{len(got)} rows now, {w['rows']} when it was sealed" if w["rows"] != len(got)
                    else f"{len(got)} rows, values changed")
            return (f"metric rows of {_steps(w['after'], w['to'])} were edited after {w['kind']} event {w['event']} "
                    f"sealed them ({what})"), {}
    if outside:
        name, step = outside[0]
        return (f"{len(outside)} metric row(s) lie in no window of the journal (first: {name} at step {step}): "
                "added after the fact"), {}
    return None, {"windows": len(standing), "chained_rows": sum(len(v) for v in by_window.values()),
                  "tail_rows": tail, "superseded": len(superseded), "last_window": last_to}


def check_measure(events, prediction: Optional[dict], run_dir: Path,
                  changes: Optional[list] = None) -> tuple[Optional[str], Optional[dict]]:
    """(problem or None, the measured settings at start) across start, resumes, the seal and config.yaml;
    an unsealed run's changes at a resume are appended to `changes` instead."""
    changes = [] if changes is None else changes
    marks = [(e[0], e[3], record_of(_parsed(e[5])).get("measure")) for e in events if e[3] in ("start", "resume")]
    marks = [(i, k, m) for i, k, m in marks if isinstance(m, dict)]
    if not marks:
        return None, None
    first_id, _, first = marks[0]
    for id_, kind, measure in marks[1:]:
        diff = _differences(first, measure, ("eval_sequences", "precision", "seq_len", "dataset_sha256"),
                            "at start", f"at {kind}")
        if diff and prediction is not None:   # a sealed band is compared with what the start measured
            return f"the run changed how it measures at {kind} event {id_}: {diff}", first
        if diff:   # an unsealed run may change them on resume: said, not failed
            changes.append(f"{kind} event {id_}: {diff}")
    hero = (prediction or {}).get("hero") if isinstance((prediction or {}).get("hero"), dict) else {}
    sealed = hero.get("measure")
    if isinstance(sealed, dict):
        diff = _differences(sealed, first, tuple(k for k in MEASURE_KEYS if k != "data_path"), "sealed", "measured")
        if diff:
            return f"the run measures otherwise than the sealed prediction says (start event {first_id}): {diff}", first
    path = config_path(run_dir)
    if path.is_file():
        try:
            config = yaml_io.load_file(path)
        except Exception as exc:
            return f"{path} is damaged ({type(exc).__name__})", first
        now = measure_settings(config if isinstance(config, dict) else {})
        diff = _differences(marks[-1][2], now, MEASURE_KEYS, "recorded", "in config.yaml")
        if diff:
            return f"{path} was edited after the run recorded its settings (event {marks[-1][0]}): {diff}", first
    return None, first


def _differences(a: dict, b: dict, keys, then: str = "then", now: str = "now") -> str:
    diffs = [f"{k} {a.get(k)!r} {then}, {b.get(k)!r} {now}" for k in keys if k in a and a.get(k) != b.get(k)]
    return "; ".join(diffs)


def chain_rows(events) -> list[tuple]:
    """record_evidence()'s events as StoreReader.chain_rows() gives them (the chained ones)."""
    return [(e[0], e[1], e[2], e[3], e[5], e[6]) for e in events if e[6] is not None]


def verify_record(run_dir: str | Path) -> dict:
    """Check RUN_DIR's record on its own: the chain, the metric windows, the measured settings, and
    (when it holds one) the sealed prediction (prediction.verify_run). Returns {"ok", "problem",
    "format", "lacks", "events", "head", "listing", "windows", "chained_rows", "tail_rows",
    "superseded", "measure", "sealed", "changes" (an unsealed run's settings changed at a resume)}. Raises FileNotFoundError without a store."""
    run_dir = Path(run_dir)
    with StoreReader(run_dir) as reader:
        ev = reader.record_evidence()
    out: dict[str, Any] = {"ok": False, "problem": None, "format": 1, "lacks": [], "events": 0, "head": None,
                           "listing": [], "windows": 0, "chained_rows": 0, "tail_rows": 0, "superseded": 0,
                           "measure": None, "sealed": None, "changes": []}
    if ev["events"] is None or ev["rows"] is None:
        out["problem"] = "the events or metrics table was removed from the store"
        return out
    events, chain = ev["events"], ev["chain"]
    rows = chain_rows(events)
    out["events"], out["listing"], out["head"] = len(events), anchor.listing(rows), anchor.head(rows)
    if not chain["ok"]:
        out["problem"] = chain["problem"]
        return out
    if chain["legacy"]:
        out["lacks"].append(f"digests for its first {chain['legacy']} events (written before the chain)")
    start = next((e for e in events if e[3] == "start"), None)
    fmt = record_of(_parsed(start[5])).get("format") if start is not None else None
    out["format"] = fmt if isinstance(fmt, int) else 1
    prediction = _parsed(ev["prediction"]) if ev["prediction"] else None
    if ev["rows"] and start is None and not any(e[3] == "resume" for e in events):
        out["problem"] = (f"the run has {len(ev['rows'])} metric row(s) but its journal has no start event: "
                          "events were removed from the end of the journal")
        return out
    if out["format"] >= 2:
        problem, counts = check_windows(events, ev["rows"])
        if problem:
            out["problem"] = problem
            return out
        out.update(counts)
        problem, out["measure"] = check_measure(events, prediction if isinstance(prediction, dict) else None, run_dir,
                                                out["changes"])
        if problem:
            out["problem"] = problem
            return out
    else:
        out["lacks"] += ["metric windows (its metric rows are not chained)",
                         "the measured settings (eval set, eval_sequences, precision, seq_len)"]
    if ev["prediction"] is not None or any(e[3] == "prediction" for e in events):
        try:
            sealed = verify_run(run_dir)
        except LookupError:
            sealed = None
        if sealed is not None:
            out["sealed"] = sealed.get("digest")
            if not sealed["ok"]:
                out["problem"] = sealed["problem"]
                return out
            if isinstance(prediction, dict) and not isinstance((prediction.get("hero") or {}).get("measure"), dict):
                out["lacks"].append("the measured settings in its seal (sealed before they were)")
    out["ok"] = True
    return out
