"""A preregistered prediction read back: the deviation from its band, a watcher that writes to the
journal when the live metric leaves the band or comes back into it, and the seal that shows the
prediction was made before the run's first step and never changed.

The prediction is the run store's artifact "prediction" (glassroom.ladder.predict writes it once,
before the run starts): steps, mean, lo, hi of its metric, the band's confidence, and `seal`:

  seal = {"algorithm": "sha256", "digest", "created", "created_iso", "commit",
          "rungs": [{"name", "config_hash", "final": {metric: value}}], "fields": {part: sha256}}
  digest = sha256(canonical({"prediction": the artifact without its seal, "rungs", "commit", "created"}))

The digest covers every key of the prediction, "downstream" (the predicted task scores,
glassroom.ladder.downstream_link) included; `band_problem` also refuses a damaged downstream
section (`downstream_problem`).
`fields` holds one digest per part (`prediction.<key>`, `rungs`, `commit`, `created`) so that a check
can say which part changed. `verify_run` checks the seal, the journal's chain (journal.py) and the
order of the preregistration against the run's start and first metric row. Numpy and sqlite only.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from statistics import NormalDist
from typing import Optional

import numpy as np

from glassroom import yaml_io
from glassroom.errors import GlassroomError
from glassroom.observe.journal import canonical, sha256_hex
from glassroom.observe.run_folder import STORE_FILE, config_path
from glassroom.observe.store import StoreReader

SEAL_ALGORITHM = "sha256"


def deviation(prediction: dict, step: int, loss: float) -> Optional[float]:
    """(loss - mean) / sigma at `step`; sigma = the band's half-width on loss's side / z, with z the
    normal quantile of the confidence (1.96 at 95%), so the band's edges are +-2 sigma (1.96).
    None outside the band's steps or where the band has no width."""
    steps = prediction["steps"]
    if not steps or step < steps[0] or step > steps[-1] or not math.isfinite(loss):
        return None
    mean = float(np.interp(step, steps, prediction["mean"]))
    edge = float(np.interp(step, steps, prediction["hi"] if loss >= mean else prediction["lo"]))
    z = NormalDist().inv_cdf((1 + prediction.get("confidence", 0.95)) / 2)
    sigma = abs(edge - mean) / z
    return None if sigma <= 0 else (loss - mean) / sigma


def band_problem(prediction) -> Optional[str]:
    """None when `prediction` has a usable band (metric, increasing integer steps, mean/lo/hi of
    finite numbers, one per step, confidence in (0, 1)); else what is wrong, in a few words."""
    if not isinstance(prediction, dict):
        return f"a JSON {type(prediction).__name__}, not a prediction"
    if not isinstance(prediction.get("metric"), str):
        return "no metric"
    steps = prediction.get("steps")
    if not (isinstance(steps, list) and steps and all(isinstance(v, int) and not isinstance(v, bool) for v in steps)
            and all(a < b for a, b in zip(steps, steps[1:]))):
        return "steps is not a list of increasing step numbers"
    for key in ("mean", "lo", "hi"):
        values = prediction.get(key)
        if not (isinstance(values, list) and len(values) == len(steps)
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)):
            return f"{key} is not one finite number per step"
    confidence = prediction.get("confidence", 0.95)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        return "confidence is not in (0, 1)"
    if "downstream" in prediction:
        problem = downstream_problem(prediction["downstream"])
        if problem:
            return f"downstream: {problem}"
    return None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def downstream_problem(section) -> Optional[str]:
    """None when the prediction's "downstream" section (glassroom.ladder.downstream_link) is usable:
    "scores" maps "<task>/<metric>" to finite lower <= predicted <= upper, a link with a form, and
    an optional band "at_steps" {steps, mean, lo, hi} like the loss band's; else what is wrong."""
    if not isinstance(section, dict):
        return "not a mapping"
    scores = section.get("scores")
    if not isinstance(scores, dict):
        return "no scores mapping"
    for key, entry in scores.items():
        if not (isinstance(key, str) and key.count("/") == 1 and all(key.split("/"))):
            return f"{key!r} is not <task>/<metric>"
        if not isinstance(entry, dict):
            return f"{key}: not a mapping"
        values = [entry.get(k) for k in ("lower", "predicted", "upper")]
        if not all(_number(v) for v in values):
            return f"{key}: predicted, lower and upper are not finite numbers"
        if not values[0] <= values[1] <= values[2]:
            return f"{key}: lower <= predicted <= upper does not hold"
        link = entry.get("link")
        if not (isinstance(link, dict) and link.get("form") in ("sigmoid", "linear")):
            return f"{key}: no link form (sigmoid or linear)"
        if "at_steps" in entry:
            band = entry["at_steps"]
            steps = band.get("steps") if isinstance(band, dict) else None
            if not (isinstance(steps, list) and steps and all(isinstance(v, int) and not isinstance(v, bool) for v in steps)
                    and all(a < b for a, b in zip(steps, steps[1:]))):
                return f"{key}: at_steps.steps is not a list of increasing step numbers"
            for k in ("mean", "lo", "hi"):
                v = band.get(k)
                if not (isinstance(v, list) and len(v) == len(steps) and all(_number(x) for x in v)):
                    return f"{key}: at_steps.{k} is not one finite number per step"
            if not all(a <= m <= b for a, m, b in zip(band["lo"], band["mean"], band["hi"])):
                return f"{key}: at_steps lo <= mean <= hi does not hold"
    return None


class BandWatcher:
    """Trainer observer: logs `prediction/deviation` for the predicted metric and journals exits
    from and returns into the band. A damaged band (an edited store) is refused before the first
    step: training against it would log deviations from numbers nobody predicted."""

    def __init__(self, prediction: dict, where: str = STORE_FILE):
        problem = band_problem(prediction)
        if problem:
            raise GlassroomError(f"{where}: the preregistered prediction is damaged ({problem}); "
                                 "`glassroom ladder verify` says what was altered; train into a new folder")
        self.prediction = prediction
        self.metric = prediction["metric"]
        self.z = NormalDist().inv_cdf((1 + prediction.get("confidence", 0.95)) / 2)
        self.outside = False

    def on_step(self, trainer, step: int, metrics: dict) -> None:
        if self.metric not in metrics:
            return
        value = metrics[self.metric]
        sigmas = deviation(self.prediction, step, value)
        if sigmas is None:
            return
        metrics["prediction/deviation"] = sigmas
        if trainer.store is not None:
            trainer.store.log(step, {"prediction/deviation": sigmas})
        outside = abs(sigmas) > self.z
        if outside != self.outside:
            mean = float(np.interp(step, self.prediction["steps"], self.prediction["mean"]))
            where = "left" if outside else "came back into"
            trainer.record_event(
                "prediction", f"{self.metric} {where} the predicted band at step {step}: {value:.4f} against "
                f"{mean:.4f} predicted ({sigmas:+.1f} sigma)", step, {"deviation": sigmas, "value": value})
            self.outside = outside

    def state(self) -> dict:
        return {"outside": self.outside}

    def load_state(self, state) -> None:
        self.outside = bool(state and state.get("outside"))


# ----------------------------------------------------------------------------- the seal


def _payload(prediction: dict, rungs: list, commit: str, created: float) -> dict:
    body = {k: v for k, v in prediction.items() if k != "seal"}
    return {"prediction": body, "rungs": rungs, "commit": commit, "created": created}


def _field_digests(payload: dict) -> dict[str, str]:
    fields = {f"prediction.{k}": sha256_hex(canonical(v)) for k, v in payload["prediction"].items()}
    fields.update({k: sha256_hex(canonical(payload[k])) for k in ("rungs", "commit", "created")})
    return fields


def seal(prediction: dict, rungs: list[dict], commit: str, created: Optional[float] = None) -> dict:
    """A copy of `prediction` with `created` set to now (the moment of sealing; any time it carried
    is dropped) and its `seal` added. `rungs`: [{"name", "config_hash", "final": {metric: value}}]."""
    created = time.time() if created is None else float(created)
    sealed = {k: v for k, v in prediction.items() if k not in ("seal", "created", "created_iso")}
    sealed["created"] = created
    sealed["created_iso"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    # What the store will hold, read back (tuples become lists, keys become strings).
    sealed = json.loads(json.dumps(sealed))
    rungs = json.loads(json.dumps(rungs))
    payload = _payload(sealed, rungs, commit, created)
    sealed["seal"] = {"algorithm": SEAL_ALGORITHM, "digest": sha256_hex(canonical(payload)),
                      "created": created, "created_iso": sealed["created_iso"], "commit": commit,
                      "rungs": rungs, "fields": _field_digests(payload)}
    return sealed


def check_seal(prediction: dict) -> Optional[str]:
    """None when the seal recomputes; else one line saying what changed after sealing."""
    s = prediction.get("seal")
    if not isinstance(s, dict) or not isinstance(s.get("digest"), str):
        return "the prediction has no seal (removed, or preregistered by a glassroom without seals)"
    if s.get("algorithm") != SEAL_ALGORITHM:
        return f"the seal's algorithm was changed to {s.get('algorithm')!r}"
    try:
        payload = _payload(prediction, s["rungs"], s["commit"], s["created"])
    except KeyError as exc:
        return f"the seal's {exc.args[0]} was removed"
    created = s["created"]
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(created):
        return f"the seal's created was changed to {created!r}, which is not a time"
    if sha256_hex(canonical(payload)) == s["digest"]:
        if prediction.get("created") != s["created"]:
            return "prediction changed after sealing: created differs from the seal's time"
        return _check_seal_record(s, payload)
    if not isinstance(s.get("fields"), dict):
        return ("prediction or seal changed after sealing, and the seal's per-part digests (fields) were "
                "removed too, so which part cannot be told")
    sealed_fields = s["fields"]
    now = _field_digests(payload)
    changed = sorted(k for k in now if k in sealed_fields and sealed_fields[k] != now[k])
    added = sorted(k for k in now if k not in sealed_fields)
    removed = sorted(k for k in sealed_fields if k not in now)
    parts = ([f"{_short(k)} differs" for k in changed] + [f"{_short(k)} added" for k in added]
             + [f"{_short(k)} removed" for k in removed])
    if not parts:
        return "the seal's digest was changed (the prediction recomputes to another digest)"
    seal_parts = [p for p in parts if not p.startswith("prediction")]
    what = "; ".join(p.removeprefix("prediction ") for p in parts)
    if seal_parts and len(seal_parts) == len(parts):
        return f"seal changed after sealing: {what}"
    if len(parts) > 4:
        what = "; ".join(p.removeprefix("prediction ") for p in parts[:4]) + f"; and {len(parts) - 4} more"
    return f"prediction changed after sealing: {what}"


def _check_seal_record(s: dict, payload: dict) -> Optional[str]:
    """The digest recomputes; the rest of the seal (its per-part digests, the printed time, no extra
    keys) must also be what sealing wrote: the page shows them."""
    expected = {"algorithm": SEAL_ALGORITHM, "digest": s["digest"], "created": payload["created"],
                "created_iso": _iso(payload["created"]), "commit": payload["commit"], "rungs": payload["rungs"],
                "fields": _field_digests(payload)}
    parts = [f"seal {k} differs" for k in expected if k in s and canonical(s[k]) != canonical(expected[k])]
    parts += [f"seal {k} removed" for k in expected if k not in s]
    parts += [f"seal {k} added" for k in sorted(s) if k not in expected]
    return f"seal changed after sealing: {'; '.join(parts)}" if parts else None


def _short(field: str) -> str:
    return "prediction " + field.split(".", 1)[1] if field.startswith("prediction.") else f"seal {field}"


def verify_run(run_dir: str | Path) -> dict:
    """Check RUN_DIR's sealed prediction: the seal recomputes, the journal's chain is unbroken and
    covers the preregistration event, that event carries the seal's digest and precedes the run's
    start and first metric, and the run's config.yaml is the hero the prediction was made for.

    Returns {"ok", "problem" (one line or None), "digest", "created", "first_step_time", "chain"}.
    Raises FileNotFoundError (no store), LookupError (no prediction) or sqlite3.DatabaseError.
    """
    with StoreReader(run_dir) as reader:
        evidence = reader.seal_evidence()
    tables, row = evidence["tables"], evidence["prediction"]
    if "artifacts" not in tables:
        raise LookupError("no preregistered prediction")
    missing = [t for t in ("events", "metrics") if t not in tables]
    if missing:
        if row is None:
            raise LookupError("no preregistered prediction")
        return {"ok": False, "problem": f"the {' and '.join(missing)} table(s) were removed from the store",
                "digest": None, "created": None, "first_step_time": None, "chain": None}
    events, digests, chain, times = evidence["events"], evidence["digests"], evidence["chain"], evidence["metrics"]
    first_metric, metric_rows, odd_times = times[0], int(times[1]), int(times[2] or 0)
    sealed_events = [e for e in events if e[3] == "prediction" and _event_digest(e[4]) is not None]
    result = {"ok": False, "problem": None, "digest": None, "created": None,
              "first_step_time": first_metric if not odd_times else None, "chain": chain}
    if row is None:
        if sealed_events:
            result["problem"] = f"the prediction artifact was removed (event {sealed_events[0][0]} preregistered it)"
            return result
        raise LookupError("no preregistered prediction")
    try:
        prediction = json.loads(row[1])
        if not isinstance(prediction, dict):
            raise ValueError
    except (TypeError, ValueError):
        result["problem"] = "the prediction artifact was replaced by something that is not a prediction"
        return result
    s = prediction.get("seal") if isinstance(prediction.get("seal"), dict) else {}
    result["digest"], result["created"] = s.get("digest"), s.get("created")
    problem = check_seal(prediction)
    if problem:
        result["problem"] = problem
        return result
    if digests is None:
        result["problem"] = "the journal's digest column was removed (a sealed prediction's journal is always chained)"
        return result
    if not chain["ok"]:
        result["problem"] = chain["problem"]
        return result
    if not sealed_events:
        result["problem"] = "the preregistration event was removed from the journal"
        return result
    event = sealed_events[0]
    if digests.get(event[0]) is None:
        result["problem"] = (f"the journal's digests were removed (event {event[0]}, the preregistration, has none; "
                             "a sealed prediction's journal is chained from it on)")
        return result
    if _event_digest(event[4]) != s["digest"]:
        result["problem"] = (f"event {event[0]} (prediction) records digest {_event_digest(event[4])[:12]}..., "
                             f"the artifact's seal {s['digest'][:12]}...: the prediction was resealed after preregistration")
        return result
    created = float(s["created"])
    start = next((e for e in events if e[3] in ("start", "resume")), None)
    if start is not None and (start[0] < event[0] or start[1] < created):
        result["problem"] = (f"prediction made after the run started (start event {start[0]} at "
                             f"{_iso(start[1])}, prediction event {event[0]} sealed {_iso(created)})")
        return result
    if odd_times:
        result["problem"] = f"{odd_times} metric row(s) have a time that is not a number: the metrics were edited"
        return result
    if first_metric is not None and float(first_metric) < created:
        result["problem"] = (f"prediction made after the run's first step (first metric at {_iso(first_metric)}, "
                             f"sealed {_iso(created)})")
        return result
    if metric_rows and start is None:
        result["problem"] = (f"the run has {metric_rows} metric row(s) but its journal has no start event: "
                             "events were removed from the end of the journal")
        return result
    if event[1] < created:
        result["problem"] = "the preregistration event is older than the seal's time: created was changed"
        return result
    problem = check_hero_config(prediction, Path(run_dir), started=start is not None or metric_rows > 0)
    if problem:
        result["problem"] = problem
        return result
    result["ok"] = True
    return result


# ----------------------------------------------------------------------------- the hero it is about

# Settings of a run that change how it is run or measured, not what is trained: a resume may change
# them, and the prediction does not depend on them.
OPERATIONAL_TRAIN_KEYS = ("micro_batch_size", "checkpoint_every", "eval_every", "eval_sequences", "device",
                          "precision", "compile", "parallel", "keep_last", "keep_every", "max_bad_steps",
                          "activation_checkpointing", "activation_checkpointing_every")


def predicted_run(config: dict) -> dict:
    """The part of a resolved run config (RunConfig.to_dict(), as RUN_DIR/config.yaml holds it) that a
    prediction is about: the model, the data (path and weights) and every train setting but the
    operational ones above. Its digest binds a prediction to its hero."""
    def section(name: str) -> dict:
        value = config.get(name) if isinstance(config, dict) else None
        return value if isinstance(value, dict) else {}

    data = section("data")
    return {"model": section("model"), "data": {"path": data.get("path"), "weights": data.get("weights")},
            "train": {k: v for k, v in section("train").items() if k not in OPERATIONAL_TRAIN_KEYS}}


def run_digest(run: dict) -> str:
    return sha256_hex(canonical(json.loads(json.dumps(run))))


def check_hero_config(prediction: dict, run_dir: Path, started: bool) -> Optional[str]:
    """None when RUN_DIR/config.yaml is the run the prediction was made for (prediction["hero"]
    ["config_sha256"] over predicted_run), or when it has no such digest (older predictions) or
    the run has not written its config yet; else one line naming what differs."""
    hero = prediction.get("hero") if isinstance(prediction.get("hero"), dict) else {}
    expected = hero.get("config_sha256")
    if not isinstance(expected, str):
        return None
    path = config_path(run_dir)
    if not path.is_file():
        return f"{path} was removed: the run has started, so it should name the hero it trains" if started else None
    try:
        config = yaml_io.load_file(path)
    except Exception as exc:  # not YAML, an alias bomb, not text, unreadable: the file was damaged
        return f"{path} is damaged ({type(exc).__name__}); the prediction was made for another config"
    run = predicted_run(config)
    if run_digest(run) == expected:
        return None
    predicted = hero.get("run_config") if isinstance(hero.get("run_config"), dict) else {}
    a, b = _flatten(predicted), _flatten(json.loads(json.dumps(run)))
    diffs = [f"{k} ({a.get(k)!r} predicted, {b.get(k)!r} trained)" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    what = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "") if diffs else "it differs"
    return f"the run's config.yaml is not the hero the prediction was made for: {what}"


def _flatten(tree, prefix: str = "") -> dict:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _event_digest(data: Optional[str]) -> Optional[str]:
    try:
        value = json.loads(data) if data else None
    except ValueError:
        return None
    digest = value.get("seal_digest") if isinstance(value, dict) else None
    return digest if isinstance(digest, str) else None


def _iso(when: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(when)))
    except (OverflowError, OSError, ValueError, TypeError):
        return repr(when)
