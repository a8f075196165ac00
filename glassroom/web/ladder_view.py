"""What a ladder page draws, as JSON: a ladder's rungs on a compute axis with the fitted law and the
hero's band (web/ladder_page.py serves it and publishes it).

A ladder is any folder below the served root that holds spec.yaml and ladder.json (or a rungs/
folder), as `glassroom ladder run` writes them (DIR itself, and DIR/ladders/<name>-fit-<v>/ with
--hero). Ladders are named by their path relative to the root, found by a bounded walk that skips
hidden folders, runs and symlinks, and looked up only in that list: a request never becomes a path.

What a ladder page shows (ladder_view), all read from what the ladder commands wrote:
  - the rungs: name, seed, N, tokens, FLOPs and the final value of the fitted metric (prediction.json's
    `rungs`), the one held out by the backtest (backtest.json's `held_out`) marked, each linked to its
    run below the root when there is one (matched by its recorded folder, else by its folder name);
  - the sizes (`sizes`): the rungs grouped by size (same N, tokens and FLOPs), each with its seeds'
    final values, their mean, min and max (a ladder run with the spec's `seeds: K` has K per size),
    and the seed noise the fit used (prediction.json's `noise`: measured from the seeds, or stated);
  - the law L(C) = E + A*C^-alpha: prediction.json's `endpoint_check.law` (fitted on every rung), drawn
    at CURVE_POINTS compute values spaced log-uniformly from the smallest rung to past the hero;
    its band is the bootstrap's quantiles, recomputed with glassroom.ladder.fit.fit_endpoints and the
    recorded settings, noise and seed (the same call `ladder fit` makes: it gives the recorded parameters
    again, which is checked; at most MAX_BAND_REPLICATES replicates; cached per prediction.json);
  - the hero: its compute (endpoint_check.compute), its preregistered final loss and interval (from
    the hero run's sealed `prediction` artifact when the run is below the root, else prediction.json),
    and the hero's latest value of the metric, when its run is found;
  - the backtest (backtest.json).
A ladder folder without prediction.json (`ladder run` without --hero) is fitted here, with the same
functions `ladder fit` uses (rungs.load_rung, check_rungs, fit.fit_endpoints), on its rungs that lie
inside the root. One ladder that cannot be read is reported in one line and does not stop the others.

Served (mounted by glassroom.web.server): /ladders (the list), /ladders/<id> (one ladder),
/api/ladders, /api/ladder?id=<id>. Published (publish_ladders): SITE/ladders/index.html,
SITE/ladders/ladders.json, SITE/ladders/l/<id>/index.html and .../ladder.json.
Public servers and the published site neither link nor read runs marked private (a private hero's
actual value and run id are left out; a private rung is drawn from the ladder's own files, unlinked)
nor show ids that look like secrets. Every string is redacted (glassroom.observe.redact.redact_text).
This module never imports torch.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, Optional

import numpy as np

from glassroom import yaml_io
from glassroom.errors import GlassroomError
from glassroom.ladder.fit import LAW_C, evaluate, fit_endpoints, predict_interval
from glassroom.ladder.rungs import (
    BACKTEST_FILE,
    LISTING_FILE,
    PREDICTION_FILE,
    RUNGS_DIR,
    SPEC_FILE,
    check_rungs,
    group_sizes,
    load_rung,
    measure_noise,
    read_spec_settings,
    rung_dirs,
)
from glassroom.observe.lab_index import shown_runs
from glassroom.observe.prediction import check_seal
from glassroom.observe.readers import StoreReaders, reading
from glassroom.observe.redact import redact_text
from glassroom.observe.run_folder import CHECKPOINTS_DIR, config_path, store_path
from glassroom.observe.runs import find_folders, inside

MAX_DEPTH = 6
SKIP_DIRS = {"node_modules", "shards", CHECKPOINTS_DIR, "atlas", "site", "__pycache__", RUNGS_DIR}
MAX_FILE_BYTES = 64 * 1024 * 1024   # a prediction.json is a few hundred KB (its band: 500 steps)
CURVE_POINTS = 160
PAST_HERO = 2.0                     # the law is drawn up to this factor beyond the hero's (or largest rung's) compute
MAX_BAND_REPLICATES = 1000          # bootstrap replicates redone for the law's band (fit.bootstrap may be up to 10,000)
MAX_RUNGS = 200                     # a ladder has a handful; more is not one (and would make every request slow)


# ---- finding ladders and runs ----

def is_ladder(folder: Path) -> bool:
    return (folder / SPEC_FILE).is_file() and ((folder / LISTING_FILE).is_file() or (folder / RUNGS_DIR).is_dir())


def find_ladders(root: str | Path) -> dict[str, Path]:
    """{relative id: folder} of every ladder folder below root (root included), symlinks not followed."""
    return find_folders(root, is_ladder, SKIP_DIRS, MAX_DEPTH, enter_matches=True)


def match_run(recorded: Any, root: Path, runs: dict[str, Path]) -> Optional[str]:
    """The id of the run below root that a recorded run folder names: the folder itself when it lies
    inside root, else the run whose path ends with the most of the recorded path's last parts (the lab
    was moved or copied: ladder.json and prediction.json hold the paths it had when it was written)."""
    if not isinstance(recorded, str) or not recorded:
        return None
    by_real = {}
    for run_id, path in runs.items():
        try:
            by_real[path.resolve()] = run_id
        except OSError:
            continue
    path = Path(recorded)
    real = inside(root, path if path.is_absolute() else root / path)
    if real is not None and real in by_real:
        return by_real[real]
    parts = path.parts
    scores: dict[str, int] = {}
    for run_id in runs:
        mine = run_id.split("/")
        n = 0
        while n < min(len(mine), len(parts)) and mine[-1 - n] == parts[-1 - n]:
            n += 1
        if n:
            scores[run_id] = n
    if not scores:
        return None
    top = max(scores.values())
    best = [i for i, n in scores.items() if n == top]
    return best[0] if len(best) == 1 else None   # ambiguous: no link


def _read_json(root: Path, path: Path) -> Any:
    """A JSON file that resolves inside root, or None when absent. ValueError when it is damaged."""
    real = inside(root, path)
    if real is None or not real.is_file():
        return None
    if real.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name}: more than {MAX_FILE_BYTES:,} bytes")
    try:
        return json.loads(real.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path.name}: not readable JSON ({type(exc).__name__})") from None


def _num(v: Any) -> Optional[float]:
    """A finite float, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _compute(v: Any) -> Optional[float]:
    """A compute in FLOPs a log axis can draw: above zero and at most 1e40 (the spec's limit), else None."""
    v = _num(v)
    return v if v is not None and 0 < v <= 1e40 else None


def _level(v: Any, default: float = 0.95) -> float:
    """A confidence level in (0, 1), else `default`."""
    v = _num(v)
    return v if v is not None and 0 < v < 1 else default


def _finite(node: Any, depth: int = 0) -> Any:
    """`node` with NaN/inf as None and every string redacted (JSON has no NaN; text is shown as is)."""
    if depth > 50:
        return None
    if isinstance(node, dict):
        return {redact_text(str(k)): _finite(v, depth + 1) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_finite(v, depth + 1) for v in node]
    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, str):
        return redact_text(node)
    return node


# ---- the law and its band ----

def law_curve(params: dict, c_min: float, c_max: float, points: int = CURVE_POINTS) -> tuple[list, list]:
    """(compute values, L(C)) sampled log-uniformly from c_min to c_max, with fit.py's formula."""
    xs = np.geomspace(c_min, c_max, points)
    return xs.tolist(), evaluate(LAW_C, params, {"C": xs}).tolist()


_band_cache: dict[tuple, Optional[dict]] = {}
_refit_cache: dict[tuple, dict] = {}
_band_lock = threading.Lock()


def law_band(key: tuple, C: list, L: list, law: dict, settings: dict, confidence: float, xs: list) -> Optional[dict]:
    """The law's band at xs: fit.fit_endpoints redone with the recorded settings and seed (what `ladder
    fit` and make_prediction call), kept only when it gives the recorded parameters again. Cached by key."""
    with _band_lock:
        if key in _band_cache:
            return _band_cache[key]
    band = None
    try:
        pinned = (law.get("pinned") or {}).get("E")
        reps = min(int(settings.get("bootstrap", 200)), MAX_BAND_REPLICATES)
        fit = fit_endpoints(C, L, pinned, reps, float(settings.get("noise_floor", 0.003)), confidence,
                            int(settings.get("seed", 0)))
        recorded = law.get("params") or {}
        same = all(k in fit.params and math.isclose(fit.params[k], float(v), rel_tol=1e-6, abs_tol=1e-12)
                   for k, v in recorded.items())
        if same and fit.boot:
            _, lo, hi = predict_interval(fit, {"C": xs}, confidence)
            band = {"lo": lo.tolist(), "hi": hi.tolist(), "replicates": len(fit.boot), "confidence": confidence}
    except (GlassroomError, ValueError, TypeError, ArithmeticError):
        band = None
    with _band_lock:
        if len(_band_cache) > 256:
            _band_cache.clear()
        _band_cache[key] = band
    return band


# ---- one ladder ----

def hero_runs(root: Path, runs: dict[str, Path], readers: Optional[StoreReaders] = None) -> list[tuple[str, dict]]:
    """(run id, prediction artifact) of every run below root that holds a preregistered prediction."""
    out = []
    for run_id, run_dir in sorted(runs.items()):
        try:
            with reading(run_dir, readers) as reader:
                value = reader.artifact("prediction")
        except Exception:
            continue
        if isinstance(value, dict):
            out.append((run_id, value))
    return out


def _same_prediction(a: dict, b: dict) -> bool:
    """The same hero and metric (a prediction.json edited since sealing still finds its hero: then
    sealed_disagreement says what differs)."""
    ha, hb = a.get("hero") or {}, b.get("hero") or {}
    return (isinstance(ha, dict) and isinstance(hb, dict) and isinstance(ha.get("config_sha256"), str)
            and ha.get("config_sha256") == hb.get("config_sha256") and a.get("metric") == b.get("metric"))


UNSEALED_KEYS = ("created", "created_iso", "seal")   # what sealing sets (observe/prediction.seal)


def sealed_disagreement(file_prediction: dict, sealed: dict) -> Optional[str]:
    """None when the hero's sealed prediction verifies and prediction.json says what it says; else,
    in words, what disagrees (the page then shows the sealed numbers)."""
    problem = check_seal(sealed)
    if problem:
        return f"the hero run's sealed prediction does not verify: {problem}"
    keys = sorted((set(file_prediction) | set(sealed)) - set(UNSEALED_KEYS))
    differ = [k for k in keys if json.dumps(file_prediction.get(k), sort_keys=True) != json.dumps(sealed.get(k), sort_keys=True)]
    if not differ:
        return None
    listed = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
    return (f"{PREDICTION_FILE} disagrees with the hero run's sealed prediction ({listed}): it was edited after "
            "sealing; this page shows the sealed numbers")


def _hero_actual(run_dir: Path, metric: str, steps: Any, readers: Optional[StoreReaders] = None) -> Optional[dict]:
    try:
        with reading(run_dir, readers) as reader:
            latest = reader.latest(metric)
    except Exception:
        return None
    if latest is None or _num(latest[1]) is None:
        return None
    step, value = int(latest[0]), float(latest[1])
    total = int(steps) if isinstance(steps, int) and not isinstance(steps, bool) else None
    return {"step": step, "value": value, "final": total is not None and step >= total, "steps": total}


def _refit(ladder_dir: Path, root: Path, runs: dict[str, Path]) -> dict:
    """The ladder fitted here (no prediction.json): the rungs inside root, L(C) as `ladder fit` fits it."""
    folders = rung_dirs(ladder_dir)
    if len(folders) > MAX_RUNGS:
        raise GlassroomError(f"{len(folders)} rungs, more than the {MAX_RUNGS} a ladder page draws")
    reals = []
    for folder in folders:
        real = inside(root, folder)
        if real is None:   # recorded elsewhere (a moved lab): the run below root with that folder name
            run_id = match_run(str(folder), root, runs)
            real = runs.get(run_id) if run_id else None
        if real is None:
            raise GlassroomError(f"rung {folder.name}: its run folder is not below the served folder")
        reals.append(real)
    key = (str(ladder_dir.resolve()), *(_stamp(ladder_dir / n) for n in (SPEC_FILE, LISTING_FILE)),
           *((str(r), _stamp(config_path(r)), _stamp(store_path(r))) for r in reals))
    with _band_lock:
        if key in _refit_cache:
            return _refit_cache[key]
    fit_cfg, param_count = read_spec_settings(ladder_dir)
    rungs = [load_rung(real, param_count) for real in reals]
    if len(rungs) < 2:
        raise GlassroomError(f"{len(rungs)} rung(s); a fit needs at least two finished rungs")
    rungs.sort(key=lambda r: (r.flops, r.seed))
    warnings = check_rungs(rungs, fit_cfg.metric, fit_cfg.irreducible, fit_cfg.allow_nonmonotone, fit_cfg.noise_floor)
    pinned = 0.0 if len(group_sizes(rungs)) < 3 else None
    if fit_cfg.irreducible != "free":
        pinned = float(fit_cfg.irreducible)
    C, L = [r.flops for r in rungs], [r.final(fit_cfg.metric) for r in rungs]
    reps = min(fit_cfg.bootstrap, MAX_BAND_REPLICATES)
    noise = measure_noise(rungs, fit_cfg.metric, fit_cfg.noise_floor)
    fit = fit_endpoints(C, L, pinned, reps, noise.sigma, fit_cfg.confidence, fit_cfg.seed)
    result = {"metric": fit_cfg.metric, "confidence": fit_cfg.confidence, "fit": fit, "noise": noise.to_json(),
              "rungs": [{**r.identity(), "final": {fit_cfg.metric: f}} for r, f in zip(rungs, L)],
              "warnings": warnings + fit.warnings}
    with _band_lock:
        if len(_refit_cache) > 64:
            _refit_cache.clear()
        _refit_cache[key] = result
    return result


def _stamp(path: Path) -> tuple:
    """(mtime_ns, size) of a file, or () when it is absent: what a cached fit depends on."""
    try:
        st = path.stat()
    except OSError:
        return ()
    return st.st_mtime_ns, st.st_size


def spec_name(ladder_dir: Path, root: Path) -> Optional[str]:
    real = inside(root, ladder_dir / SPEC_FILE)
    if real is None or real.stat().st_size > 1_000_000:
        return None
    try:
        raw = yaml_io.load_file(real)
    except Exception:
        return None
    return str(raw.get("name")) if isinstance(raw, dict) and raw.get("name") is not None else None


def ladder_view(ladder_id: str, ladder_dir: Path, root: Path, public: bool = False,
                runs: Optional[dict[str, Path]] = None, heroes: Optional[list] = None,
                readers: Optional[StoreReaders] = None) -> dict:
    """Everything one ladder page draws (module docstring). GlassroomError / ValueError / OSError when
    the ladder's files cannot be read."""
    root = Path(root)
    runs = shown_runs(root, public) if runs is None else runs
    prediction = _read_json(root, ladder_dir / PREDICTION_FILE)
    backtest = _read_json(root, ladder_dir / BACKTEST_FILE)
    if prediction is not None and not isinstance(prediction, dict):
        raise ValueError("prediction.json: not a prediction (expected a JSON object)")
    if backtest is not None and not isinstance(backtest, dict):
        backtest = None
    notes: list[str] = []
    view: dict[str, Any] = {"id": ladder_id, "name": spec_name(ladder_dir, root) or ladder_dir.name}
    if prediction is not None:
        metric = prediction.get("metric")
        check = prediction.get("endpoint_check") if isinstance(prediction.get("endpoint_check"), dict) else {}
        law = check.get("law")
        raw_rungs = prediction.get("rungs")
        if not isinstance(metric, str) or not isinstance(law, dict) or not isinstance(raw_rungs, list):
            raise ValueError("prediction.json: no metric, rungs or endpoint_check.law; rerun `glassroom ladder run --hero`")
        if len(raw_rungs) > MAX_RUNGS:
            raise ValueError(f"prediction.json: {len(raw_rungs)} rungs, more than the {MAX_RUNGS} a ladder page draws")
        params = law.get("params")
        params = {k: _num(v) for k, v in params.items()} if isinstance(params, dict) else {}
        if set(params) != {"E", "A", "alpha"} or any(v is None for v in params.values()):
            raise ValueError("prediction.json: endpoint_check.law.params is not {E, A, alpha} as numbers; "
                             "rerun `glassroom ladder run --hero`")
        confidence = _level(prediction.get("confidence"))
        settings = prediction.get("settings") if isinstance(prediction.get("settings"), dict) else {}
        warnings = [str(w) for w in prediction.get("warnings") or []]
        notes.extend(str(n) for n in (prediction.get("notes") if isinstance(prediction.get("notes"), list) else [])[:10])
        reliable = prediction.get("reliable", True) is not False
        rungs = []
        for r in raw_rungs:
            if not isinstance(r, dict):
                continue
            final = r.get("final") if isinstance(r.get("final"), dict) else {}
            seed = r.get("seed")
            rungs.append({"name": str(r.get("name")), "run_dir": r.get("run_dir"), "params": _num(r.get("params")),
                          "tokens": _num(r.get("tokens")), "flops": _compute(r.get("flops")), "final": _num(final.get(metric)),
                          "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None})
        source = PREDICTION_FILE
        hero_flops = _compute(check.get("compute"))
        noise = prediction.get("noise") if isinstance(prediction.get("noise"), dict) else None
        sigma = _num((noise or {}).get("sigma"))
        if sigma is not None and 0 <= sigma < 1:   # the band redone with the noise the prediction used
            settings = {**settings, "noise_floor": sigma}
    else:
        fitted = _refit(ladder_dir, root, runs)
        metric, confidence, fit = fitted["metric"], fitted["confidence"], fitted["fit"]
        law = fit.to_json()
        params = dict(fit.params)
        settings, warnings = {}, [str(w) for w in fitted["warnings"]]
        reliable = not warnings
        rungs = [{"name": r["name"], "run_dir": r["run_dir"], "params": r["params"], "tokens": r["tokens"],
                  "flops": r["flops"], "final": r["final"][metric], "seed": r.get("seed")} for r in fitted["rungs"]]
        noise = fitted["noise"]
        source = "fitted here"
        hero_flops = None
        notes.append("no prediction.json in this ladder folder (it was run without --hero): the law was fitted "
                     "here from its rungs, as `glassroom ladder fit` fits it")
    held_out = backtest.get("held_out") if backtest else None
    for r in rungs:
        r["held_out"] = r["name"] == held_out
        r["run"] = match_run(r.pop("run_dir"), root, runs)
    usable = [r for r in rungs if r["flops"] and r["final"] is not None and r["flops"] > 0]
    if len(usable) < 2:
        raise ValueError("fewer than two rungs with a compute and a final value")

    c_min = min(r["flops"] for r in usable)
    c_max = max([r["flops"] for r in usable] + ([hero_flops] if hero_flops else [])) * PAST_HERO
    xs, mean = law_curve(params, c_min, c_max)
    curve: dict[str, Any] = {"flops": xs, "mean": mean, "lo": None, "hi": None}
    if prediction is not None:
        C, L = [r["flops"] for r in usable], [r["final"] for r in usable]
        real = inside(root, ladder_dir / PREDICTION_FILE)
        st = real.stat() if real is not None else None
        key = (str(real), st.st_mtime_ns if st else 0, st.st_size if st else 0, len(xs), c_max)
        band = law_band(key, C, L, law, settings, confidence, xs)
    else:
        _, lo, hi = predict_interval(fit, {"C": np.asarray(xs)}, confidence)
        band = {"lo": lo.tolist(), "hi": hi.tolist(), "replicates": len(fit.boot), "confidence": confidence}
    if band is not None:
        curve.update(lo=band["lo"], hi=band["hi"], replicates=band["replicates"])
    else:
        notes.append("the law's band could not be recomputed from the recorded fit; the line is drawn without it")

    hero = None
    if prediction is not None:
        info = prediction.get("hero") if isinstance(prediction.get("hero"), dict) else {}
        heroes = hero_runs(root, runs, readers) if heroes is None else heroes
        run_id, sealed = next(((i, p) for i, p in heroes if _same_prediction(p, prediction)), (None, None))
        chosen = sealed if sealed is not None else prediction
        disagreement = sealed_disagreement(prediction, sealed) if sealed is not None else None
        if disagreement:
            notes.insert(0, disagreement)
        interval = chosen.get("final_interval") if isinstance(chosen.get("final_interval"), list) else [None, None]
        seal = chosen.get("seal") if isinstance(chosen.get("seal"), dict) else {}
        hero = {"name": str(info.get("name", "hero")), "run": run_id, "flops": hero_flops,
                "params": _num(info.get("params")), "tokens": _num(info.get("tokens")), "steps": info.get("steps"),
                "predicted": _num(chosen.get("final_loss")),
                "interval": [_num(v) for v in interval[:2]] + [None] * (2 - len(interval[:2])),
                "confidence": _level(chosen.get("confidence"), confidence),
                "source": "the hero run's sealed prediction" if sealed is not None else PREDICTION_FILE,
                "seal": seal.get("digest") if isinstance(seal.get("digest"), str) else None,
                "sealed_check": disagreement or ("the sealed prediction verifies and prediction.json agrees with it"
                                                 if sealed is not None else None),
                "created_iso": chosen.get("created_iso"),
                "law_at_hero": _num(check.get("final_loss")),
                "law_interval_at_hero": check.get("final_interval"),
                "actual": _hero_actual(runs[run_id], metric, info.get("steps"), readers) if run_id else None}
        if run_id is None:
            notes.append("the hero's run is not below this folder (or not shown here): its preregistered "
                         "prediction comes from the ladder's prediction.json")
    bt = None
    if backtest:
        bt = {k: backtest.get(k) for k in ("held_out", "fitted_on", "predicted_loss", "actual_loss", "relative_error",
                                             "interval", "covered", "curve_mean_abs_relative_error")}
        runs = backtest.get("held_out_runs")
        if isinstance(runs, list):   # every seed of the held-out size: its own final (no folders shown)
            bt["held_out_runs"] = [{k: r.get(k) for k in ("name", "seed", "actual_loss", "relative_error")}
                                   for r in runs[:MAX_RUNGS] if isinstance(r, dict)]
        ec = backtest.get("endpoint_check")
        if isinstance(ec, dict):
            bt["endpoint_check"] = {k: ec.get(k) for k in ("predicted_loss", "actual_loss", "relative_error",
                                                           "interval", "covered")}
    view.update(sizes=_sizes(rungs), noise=_noise(noise))
    view.update(metric=metric, source=source, confidence=confidence, reliable=reliable, warnings=warnings,
                law={"formula": "E + A * C^-alpha", "params": params,
                     "intervals": law.get("intervals") or {}, "pinned": law.get("pinned") or {},
                     "n_points": law.get("n_points")},
                rungs=sorted(rungs, key=lambda r: r["flops"] or 0), curve=curve, hero=hero, backtest=bt, notes=notes)
    return _finite(view)


def _sizes(rungs: list[dict]) -> list[dict]:
    """The rungs grouped by size (N, tokens, FLOPs): each size's seeds, final values, mean, min, max."""
    groups: dict[tuple, list[dict]] = {}
    for r in rungs:
        groups.setdefault((r["params"], r["tokens"], r["flops"]), []).append(r)
    out = []
    for (params, tokens, flops), runs in groups.items():
        runs = sorted(runs, key=lambda r: r["seed"] if r["seed"] is not None else -1)
        finals = [r["final"] for r in runs if r["final"] is not None]
        out.append({"name": runs[0]["name"], "params": params, "tokens": tokens, "flops": flops,
                    "seeds": [r["seed"] for r in runs], "finals": [r["final"] for r in runs],
                    "mean": sum(finals) / len(finals) if finals else None, "min": min(finals, default=None),
                    "max": max(finals, default=None), "held_out": any(r["held_out"] for r in runs)})
    return sorted(out, key=lambda g: g["flops"] or 0)


def _noise(noise: Any) -> Optional[dict]:
    """The seed noise the fit used, as recorded: sigma, source (measured | stated), dof, sizes."""
    if not isinstance(noise, dict):
        return None
    source = noise.get("source")
    return {"sigma": _num(noise.get("sigma")), "source": source if source in ("measured", "stated") else None,
            "dof": noise.get("dof") if isinstance(noise.get("dof"), int) else None,
            "sizes": noise.get("sizes") if isinstance(noise.get("sizes"), int) else None}


def ladder_summary(ladder_id: str, ladder_dir: Path, root: Path, view: Optional[dict] = None,
                   error: Optional[str] = None) -> dict:
    """One line of the ladder list."""
    entry: dict[str, Any] = {"id": ladder_id, "name": redact_text(spec_name(ladder_dir, root) or ladder_dir.name)}
    if error is not None:
        entry["error"] = redact_text(error)
        return entry
    hero = (view or {}).get("hero") or {}
    entry.update(metric=view.get("metric"), rungs=len(view.get("rungs") or []), source=view.get("source"),
                 hero=hero.get("name"), predicted=hero.get("predicted"), interval=hero.get("interval"),
                 actual=(hero.get("actual") or {}).get("value"), reliable=view.get("reliable"))
    return entry


def cannot_show(ladder_id: str, exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return redact_text(f"ladder {ladder_id}: cannot be shown: {text[:300]}")
