"""Results from anywhere: a results file (CSV or JSON lines) or a ladder folder, read as fit points.

`glassroom ladder fit --results FILE` and `glassroom ladder predict` read them (docs/ladder-predict.md).

A results file has one row per run (CSV with a header row, or JSON lines: one object per line;
the format follows the extension .csv / .jsonl / .ndjson / .json, else the first line):

  name     the run's name (text)
  params   N: non-embedding active parameters, as `glassroom plan` counts them (1e9, 7e10, 1.6B)
  tokens   D: training tokens
  flops    optional: training FLOPs; when absent (column missing or cell empty) 6 * N * D
  loss     the final loss (nats per token, or any loss; it must be above zero: the fits are in log loss)
  seed     optional: the run's seed; rows of one size (same params and tokens) with different seeds
           are repeats of that size, from which the seed-to-seed noise is measured
  total_params  optional, for Mixture-of-Experts runs: every parameter, counted as params is (params
           is then the active count); the sparsity-aware laws read it (glassroom.ladder.laws), and
           runs that differ only in it are different sizes

Whole curves: with a `step` column every row is one evaluation of a run: `step` (>= 1), `tokens`
(seen at that step), `loss` (at that step), and the run's schedule in `schedule` (constant, cosine,
linear, wsd), `warmup_steps` (default 0), `total_steps` (default: the run's last step),
`min_lr_ratio` (0.1), `decay_fraction` (0.2), `decay_shape` (linear) with the meaning of the same
keys of a `train:` section (glassroom.train.optim.lr_multiplier gives the lr multiplier of every
step). A run is the rows of one name and seed; its last row (at total_steps) is its endpoint point,
and every row feeds the schedule-aware curve law of glassroom.ladder.curve (CURVE_LAW).

Lines that are blank or start with `#` are skipped (a citation can head the file). Anything no fit
can use is refused as one line naming the file, the line and the column (GlassroomError, exit 2).

Also here, for what a results file asks beyond foresight.fit_points (least squares of log loss): the
curve law on its curves (fit_curve_law) and Hoffmann's Huber objective, which papers fit and
`--objective huber` reproduces (huber_prediction).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np

from glassroom.errors import GlassroomError
from glassroom.numbers import loads as json_loads
from glassroom.units import parse_count

REQUIRED = ("name", "params", "tokens", "loss")
NUMBERS = ("params", "tokens", "flops", "loss")
SCHEDULES = ("constant", "cosine", "linear", "wsd")
DECAY_SHAPES = ("linear", "cosine", "sqrt")
LOSS_MIN, LOSS_MAX = 1e-6, 1e6  # glassroom.ladder.rungs: outside it no value is a loss a fit can use
FLOPS_MAX = 1e45
TOKENS_PER_STEP_TOLERANCE = 0.01  # a run's tokens / step may vary this much (a rounding), no more
CSV_EXTENSIONS, JSONL_EXTENSIONS = (".csv",), (".jsonl", ".ndjson", ".json")


@dataclass
class Curve:
    """One run's whole curve from a results file."""

    name: str
    seed: Optional[int]
    params: float
    steps: np.ndarray  # store steps, increasing
    tokens: np.ndarray  # tokens seen at each step
    loss: np.ndarray
    train: SimpleNamespace  # steps, warmup_steps, schedule, min_lr_ratio, decay_fraction, decay_shape
    tokens_per_step: float

    def multipliers(self) -> np.ndarray:
        from glassroom.train.optim import lr_multiplier  # lazy: torch loads only when this runs

        f = lr_multiplier(self.train)
        return np.array([f(i) for i in range(self.train.steps)], dtype=float)


@dataclass
class Results:
    source: str
    kind: str  # "csv" | "jsonl" | "ladder"
    points: list  # foresight.Point, one per run
    curves: list[Curve] = field(default_factory=list)
    flops_from_6nd: int = 0  # points whose FLOPs were 6 * N * D (no flops given)
    stated_noise: Optional[float] = None  # a ladder folder's spec fit.noise_floor
    fit_settings: Any = None  # a ladder folder's spec FitSection

    def summary(self) -> dict:
        sizes = {(p.params, p.tokens, p.total_params) for p in self.points}
        seeds = {p.seed for p in self.points if p.seed is not None}
        return {"source": self.source, "format": self.kind, "runs": len(self.points), "sizes": len(sizes),
                "seeds": len(seeds), "curves": len(self.curves), "flops_from_6nd": self.flops_from_6nd,
                "params": [min(p.params for p in self.points), max(p.params for p in self.points)],
                "tokens": [min(p.tokens for p in self.points), max(p.tokens for p in self.points)],
                "flops": [min(p.flops for p in self.points), max(p.flops for p in self.points)],
                "loss": [min(p.loss for p in self.points), max(p.loss for p in self.points)]}


# ----------------------------------------------------------------------------- reading rows


def _detect(path: Path, first: str) -> str:
    looks_json = first.lstrip().startswith("{")
    ext = path.suffix.lower()
    if ext in CSV_EXTENSIONS and looks_json:
        raise GlassroomError(f"{path}: named {ext} but its first line is a JSON object (mixed formats); "
                             "name it .jsonl or write a CSV header row")
    if ext in JSONL_EXTENSIONS and not looks_json:
        raise GlassroomError(f"{path}: named {ext} but its first line is not a JSON object; write one JSON "
                             "object per line or name it .csv")
    return "jsonl" if looks_json else "csv"


def _lines(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        raise GlassroomError(f"{path}: no such results file")
    if path.is_dir():
        raise GlassroomError(f"{path}: is a folder, expected a results file (CSV or JSON lines); "
                             "a ladder folder goes without --results")
    if not path.is_file():
        raise GlassroomError(f"{path}: not a regular file, expected a results file (CSV or JSON lines)")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise GlassroomError(f"{path}: unreadable ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise GlassroomError(f"{path}: not UTF-8 text; expected a results file (CSV or JSON lines)") from None
    if "\0" in text:
        raise GlassroomError(f"{path}: holds NUL bytes (a binary file?); expected CSV or JSON lines")
    out = [(i, line) for i, line in enumerate(text.splitlines(), 1)
           if line.strip() and not line.lstrip().startswith("#")]
    if not out:
        raise GlassroomError(f"{path}: empty; expected a CSV header row (name,params,tokens,flops,loss) and "
                             "one row per run, or one JSON object per line")
    return out


def _csv_rows(path: Path, lines: list[tuple[int, str]]) -> tuple[list[str], list[tuple[int, dict]]]:
    def fields(lineno: int, line: str) -> list[str]:
        if line.lstrip().startswith("{"):
            raise GlassroomError(f"{path} line {lineno}: a JSON object in a CSV file (mixed formats); "
                                 "use one format per file")
        try:
            return [f.strip() for f in next(csv.reader(io.StringIO(line)))]
        except (csv.Error, StopIteration) as exc:
            raise GlassroomError(f"{path} line {lineno}: unparseable CSV row ({exc})") from None

    head_no, head_line = lines[0]
    header = [h.lower() for h in fields(head_no, head_line)]
    if any(not h for h in header):
        raise GlassroomError(f"{path} line {head_no}: the header row has an empty column name")
    seen = set()
    for h in header:
        if h in seen:
            raise GlassroomError(f"{path} line {head_no}: the header names column {h!r} twice")
        seen.add(h)
    if not any(h in NUMBERS or h == "name" for h in header):
        raise GlassroomError(f"{path} line {head_no}: no header row (expected column names such as "
                             "name,params,tokens,flops,loss first)")
    rows = []
    for lineno, line in lines[1:]:
        values = fields(lineno, line)
        if len(values) != len(header):
            raise GlassroomError(f"{path} line {lineno}: {len(values)} fields, the header has {len(header)}")
        rows.append((lineno, {h: v for h, v in zip(header, values) if v != ""}))
    return header, rows


def _jsonl_rows(path: Path, lines: list[tuple[int, str]]) -> tuple[list[str], list[tuple[int, dict]]]:
    rows, header = [], []
    for lineno, line in lines:
        if not line.lstrip().startswith("{"):
            raise GlassroomError(f"{path} line {lineno}: not a JSON object (mixed formats? a JSON lines file "
                                 "holds one object per line)")
        try:
            obj = json_loads(line)
        except ValueError as exc:
            raise GlassroomError(f"{path} line {lineno}: unparseable JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise GlassroomError(f"{path} line {lineno}: not a JSON object")
        obj = {str(k).strip().lower(): v for k, v in obj.items() if v is not None and v != ""}
        for k in obj:
            if k not in header:
                header.append(k)
        rows.append((lineno, obj))
    return header, rows


# ----------------------------------------------------------------------------- checking values


def _number(path, lineno, col, value, positive=True) -> float:
    where = f"{path} line {lineno}, column {col}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GlassroomError(f"{where}: {value!r} is not a number")
    try:
        try:
            x = float(value)
        except ValueError:  # 1.6B, 20T (not for the loss)
            if col == "loss":
                raise
            x = parse_count(value)
    except (ValueError, OverflowError):
        if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity"):
            raise GlassroomError(f"{where}: {value.strip()} is not a finite number") from None
        raise GlassroomError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(x):
        raise GlassroomError(f"{where}: {x} is not a finite number (NaN or infinite)")
    if positive and x <= 0:
        raise GlassroomError(f"{where}: {x:g} must be above zero")
    if col in ("params", "tokens", "flops") and x < 1:
        raise GlassroomError(f"{where}: {x:g} is below 1 (a count of parameters, tokens or FLOPs; wrong unit?)")
    if col == "loss" and not LOSS_MIN <= x <= LOSS_MAX:
        raise GlassroomError(f"{where}: {x:g} is outside [{LOSS_MIN:g}, {LOSS_MAX:g}], no loss a fit can use")
    return x


def _integer(path, lineno, col, value, minimum: int) -> int:
    where = f"{path} line {lineno}, column {col}"
    try:
        x = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise GlassroomError(f"{where}: {value!r} is not a whole number") from None
    if not math.isfinite(x) or x != int(x) or abs(x) >= 2**63:
        raise GlassroomError(f"{where}: {value!r} is not a whole number")
    if x < minimum:
        raise GlassroomError(f"{where}: {int(x)} must be at least {minimum}")
    return int(x)


def _name(path, lineno, value) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
        raise GlassroomError(f"{path} line {lineno}, column name: expected the run's name (text)")
    return str(value).strip()


def _point(path, lineno, row):
    from glassroom.ladder.foresight import Point  # lazy: scipy loads only when this runs

    name = _name(path, lineno, row["name"])
    n, d, loss = (_number(path, lineno, c, row[c]) for c in ("params", "tokens", "loss"))
    given = "flops" in row
    flops = _number(path, lineno, "flops", row["flops"]) if given else 6.0 * n * d
    if not math.isfinite(flops) or flops > FLOPS_MAX:
        raise GlassroomError(f"{path} line {lineno}: {'flops' if given else '6 * params * tokens'} is "
                             f"{flops:g}, beyond {FLOPS_MAX:g} FLOPs (is a column in the wrong unit?)")
    seed = _integer(path, lineno, "seed", row["seed"], 0) if "seed" in row else None
    total = _number(path, lineno, "total_params", row["total_params"]) if "total_params" in row else None
    if total is not None and total < n:
        raise GlassroomError(f"{path} line {lineno}, column total_params: {total:g} is below params ({n:g}); "
                             "total_params counts every parameter, params the active ones")
    return Point(name=name, params=n, tokens=d, flops=flops, loss=loss, seed=seed, total_params=total), not given


def compute_warnings(points: list) -> list[str]:
    """Sizes whose mean loss is no better than that of a size of less compute: L(C) cannot follow them,
    and its interval (fitted to the others) would not show it."""
    by_size: dict = {}
    for p in points:
        by_size.setdefault((p.flops, p.params, p.tokens), []).append(p.loss)
    sizes = sorted((c, float(np.mean(v)), n, d) for (c, n, d), v in by_size.items())
    out = []
    for j in range(1, len(sizes)):
        i = min(range(j), key=lambda k: sizes[k][1])
        if sizes[j][1] >= sizes[i][1] and sizes[j][0] > sizes[i][0]:
            out.append(f"the run(s) at {sizes[j][0]:.3g} FLOPs (loss {sizes[j][1]:.4g}) are no better than those at "
                       f"{sizes[i][0]:.3g} FLOPs ({sizes[i][1]:.4g}): loss does not fall with compute; L(C) is unreliable")
    return out


def check_sizes(source: str, points: list, where: list[str]) -> None:
    """Refuse the same size and seed twice and a single size (one line each)."""
    first: dict = {}
    for p, at in zip(points, where):
        key = (p.params, p.tokens, p.total_params, p.seed)
        if key in first:
            seed = "no seed" if p.seed is None else f"seed {p.seed}"
            raise GlassroomError(f"{source}: {first[key]} and {at} are the same size (params {p.params:g}, tokens "
                                 f"{p.tokens:g}) with {seed}: a repeat needs its own seed (a seed column), "
                                 "otherwise remove the copy")
        first[key] = at
    sizes = {(p.params, p.tokens, p.total_params) for p in points}
    if len(sizes) < 2:
        raise GlassroomError(f"{source}: all {len(points)} run(s) are one size (params {points[0].params:g}, tokens "
                             f"{points[0].tokens:g}); a fit needs at least two sizes")


# ----------------------------------------------------------------------------- curves


def _curve_settings(path, lineno, row, name) -> dict:
    out = {}
    schedule = str(row.get("schedule", "")).strip().lower()
    if schedule not in SCHEDULES:
        raise GlassroomError(f"{path} line {lineno}, column schedule: {row.get('schedule', '(empty)')!r} is not "
                             f"one of {', '.join(SCHEDULES)} (a curve row names its run's schedule)")
    out["schedule"] = schedule
    out["warmup_steps"] = _integer(path, lineno, "warmup_steps", row.get("warmup_steps", 0), 0)
    if "total_steps" in row:
        out["total_steps"] = _integer(path, lineno, "total_steps", row["total_steps"], 1)
    for col, default in (("min_lr_ratio", 0.1), ("decay_fraction", 0.2)):
        x = _number(path, lineno, col, row.get(col, default), positive=False)
        ok = 0 <= x <= 1 if col == "min_lr_ratio" else 0 < x <= 1
        if not ok:
            raise GlassroomError(f"{path} line {lineno}, column {col}: {x:g} must be "
                                 f"{'between 0 and 1' if col == 'min_lr_ratio' else 'above 0 and at most 1'}")
        out[col] = x
    shape = str(row.get("decay_shape", "linear")).strip().lower()
    if shape not in DECAY_SHAPES:
        raise GlassroomError(f"{path} line {lineno}, column decay_shape: {shape!r} is not one of {', '.join(DECAY_SHAPES)}")
    out["decay_shape"] = shape
    return out


def _curves(path, rows) -> tuple[list, list[Curve], list[str], int]:
    from glassroom.ladder.foresight import Point  # lazy: scipy loads only when this runs

    runs: dict = {}
    for lineno, row in rows:
        name = _name(path, lineno, row["name"])
        seed = _integer(path, lineno, "seed", row["seed"], 0) if "seed" in row else None
        step = _integer(path, lineno, "step", row["step"], 1) if "step" in row else None
        if step is None:
            raise GlassroomError(f"{path} line {lineno}, column step: empty; with a step column every row is one "
                                 "point of a run's curve")
        n, d, loss = (_number(path, lineno, c, row[c]) for c in ("params", "tokens", "loss"))
        flops = _number(path, lineno, "flops", row["flops"]) if "flops" in row else None
        settings = _curve_settings(path, lineno, row, name)
        run = runs.setdefault((name, seed), {"rows": [], "first": lineno, "params": n, "settings": settings})
        if n != run["params"] or settings != run["settings"]:
            what = "params" if n != run["params"] else "schedule settings"
            raise GlassroomError(f"{path} line {lineno}: run {name!r} changes its {what} (line {run['first']}); "
                                 "one run has one size and one schedule")
        if any(r[0] == step for r in run["rows"]):
            raise GlassroomError(f"{path} line {lineno}: run {name!r} ({'no seed' if seed is None else f'seed {seed}'}) "
                                 f"has step {step} twice")
        run["rows"].append((step, d, loss, flops, lineno))
    points, curves, where, from_6nd = [], [], [], 0
    for (name, seed), run in runs.items():
        rows_ = sorted(run["rows"])
        steps = np.array([r[0] for r in rows_])
        tokens = np.array([r[1] for r in rows_], float)
        s = run["settings"]
        total = s.get("total_steps", int(steps[-1]))
        last = rows_[-1]
        if steps[-1] != total:
            raise GlassroomError(f"{path} line {last[4]}: run {name!r} ends at step {steps[-1]} of total_steps {total}: "
                                 "unfinished (its last row must be its final step)")
        if s["warmup_steps"] > total:
            raise GlassroomError(f"{path} line {run['first']}, column warmup_steps: {s['warmup_steps']} is above "
                                 f"total_steps {total}")
        per_step = tokens / steps
        tps = float(per_step[-1])
        if np.any(np.abs(per_step / tps - 1) > TOKENS_PER_STEP_TOLERANCE):
            bad = rows_[int(np.argmax(np.abs(per_step / tps - 1)))]
            raise GlassroomError(f"{path} line {bad[4]}: run {name!r} saw {bad[1]:g} tokens at step {bad[0]}, not "
                                 f"{tps:g} per step like its last row; the curve law needs a constant batch")
        train = SimpleNamespace(steps=total, warmup_steps=s["warmup_steps"], schedule=s["schedule"],
                                min_lr_ratio=s["min_lr_ratio"], decay_fraction=s["decay_fraction"],
                                decay_shape=s["decay_shape"])
        curves.append(Curve(name, seed, run["params"], steps, tokens, np.array([r[2] for r in rows_], float),
                            train, tps))
        flops = last[3] if last[3] is not None else 6.0 * run["params"] * last[1]
        from_6nd += last[3] is None
        if not math.isfinite(flops) or flops > FLOPS_MAX:
            raise GlassroomError(f"{path} line {last[4]}: FLOPs {flops:g} beyond {FLOPS_MAX:g} (a column in the wrong unit?)")
        points.append(Point(name=name, params=run["params"], tokens=float(last[1]), flops=flops, loss=float(last[2]),
                            seed=seed))
        where.append(f"line {last[4]}")
    return points, curves, where, from_6nd


# ----------------------------------------------------------------------------- entry points


def read_results(path: str | Path) -> Results:
    """The runs of a results file (module docstring) as foresight.Points, and curves when present."""
    path = Path(path)
    lines = _lines(path)
    kind = _detect(path, lines[0][1])
    header, rows = (_jsonl_rows if kind == "jsonl" else _csv_rows)(path, lines)
    if not rows:
        raise GlassroomError(f"{path}: a header row and no runs; add one row per run")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        has = ", ".join(repr(h[:40])[1:-1] for h in header[:12]) + (", ..." if len(header) > 12 else "")
        raise GlassroomError(f"{path}: missing column(s) {', '.join(missing)} (has: {has}); "
                             f"needed: {', '.join(REQUIRED)}, optional: flops, seed, step, total_params")
    for lineno, row in rows:
        for col in REQUIRED:
            if col not in row:
                raise GlassroomError(f"{path} line {lineno}, column {col}: empty (every run needs "
                                     f"{', '.join(REQUIRED)})")
    if "step" in header:
        points, curves, where, from_6nd = _curves(path, rows)
    else:
        stray = [c for c in ("schedule", "total_steps") if c in header]
        if stray:
            raise GlassroomError(f"{path}: a {stray[0]} column but no step column; curve rows need a step column")
        points, where, curves, from_6nd = [], [], [], 0
        for lineno, row in rows:
            p, estimated = _point(path, lineno, row)
            points.append(p)
            where.append(f"line {lineno}")
            from_6nd += estimated
    check_sizes(str(path), points, where)
    return Results(str(path), kind, points, curves, from_6nd)


def read_ladder(ladder_dir: str | Path) -> Results:
    """A ladder folder's finished rungs as points: N by the spec's param_count, tokens, FLOPs, the final
    value of the spec's fit.metric, seed = the rung's train.seed; the spec's fit settings come along."""
    from glassroom.ladder.foresight import Point  # lazy: scipy loads only when this runs
    from glassroom.ladder.rungs import load_rungs, read_spec_settings

    fit_cfg, param_count = read_spec_settings(ladder_dir)
    rungs = load_rungs(ladder_dir, param_count)
    # total parameters counted as params is (the inactive experts added to the spec's active count)
    points = [Point(name=r.name, params=float(r.params), tokens=float(r.tokens), flops=float(r.flops),
                    loss=r.final(fit_cfg.metric), seed=int(r.seed),
                    total_params=float(r.params + r.total_params - r.active_params)) for r in rungs]
    check_sizes(str(ladder_dir), points, [f"rung {r.name} ({r.run_dir})" for r in rungs])
    return Results(str(ladder_dir), "ladder", points, [], 0, fit_cfg.noise_floor, fit_cfg)


def read_source(results: Optional[str], ladder_dir: Optional[str], flag: str = "--results") -> Results:
    """Exactly one of a results file and a ladder folder (the CLI's two modes)."""
    if results is not None and ladder_dir is not None:
        raise GlassroomError(f"give either a ladder folder ({ladder_dir}) or {flag} FILE, not both")
    if results is None and ladder_dir is None:
        raise GlassroomError(f"give a ladder folder or {flag} FILE (a CSV or JSON lines results file)")
    return read_results(results) if results is not None else read_ladder(ladder_dir)


# ----------------------------------------------------------------------------- the curve law


def curve_data(curves: list[Curve], skip_fraction: float = 0.1, momentum: float = 0.999):
    """X (N, S1, S2), y and run groups of every curve row after skip_fraction of its run."""
    from glassroom.ladder.curve import curve_features  # lazy: scipy loads only when this runs

    X, y, groups = {"N": [], "S1": [], "S2": []}, [], []
    for g, c in enumerate(curves):
        keep = c.steps >= max(1, math.ceil(skip_fraction * c.train.steps))
        feats = curve_features(c.params, c.tokens_per_step, c.multipliers(), c.steps[keep], momentum)
        for k in X:
            X[k].extend(feats[k])
        y.extend(c.loss[keep])
        groups.extend([g] * int(keep.sum()))
    return {k: np.asarray(v, float) for k, v in X.items()}, np.asarray(y, float), np.asarray(groups)


def fit_curve_law(curves: list[Curve], bootstrap: int = 200, noise: float = 0.003, confidence: float = 0.95,
                  seed: int = 0, skip_fraction: float = 0.1, momentum: float = 0.999):
    """The schedule-aware curve law (curve.CURVE_LAW) fitted jointly on the curves, with intervals."""
    from glassroom.ladder.fit import bootstrap as run_bootstrap  # lazy: scipy loads only when this runs
    from glassroom.ladder.fit import fit_law
    from glassroom.ladder.curve import CURVE_LAW  # lazy: scipy loads only when this runs

    if len({c.params for c in curves}) < 2:
        raise GlassroomError("the curve law needs curves of at least two sizes (params)")
    X, y, groups = curve_data(curves, skip_fraction, momentum)
    free = len(CURVE_LAW.coefs) + len(CURVE_LAW.exponents)
    if len(y) <= free:
        raise GlassroomError(f"the curve law has {free} free parameters but the curves give {len(y)} points after "
                             f"the first {skip_fraction:.0%} of each run; give more steps per run")
    fit = fit_law(CURVE_LAW, X, y)
    return run_bootstrap(fit, X, y, groups, bootstrap, noise, confidence, seed) if bootstrap else fit


def predict_curve_final(fit, curve: Curve, params: float, tokens: float, confidence: float = 0.95,
                        momentum: float = 0.999) -> dict:
    """The curve law's final loss for a run of `params` and `tokens` trained like `curve` (its schedule,
    warmup share and tokens per step; the number of steps follows from the tokens)."""
    from glassroom.ladder.fit import predict_interval  # lazy: scipy loads only when this runs
    from glassroom.ladder.curve import curve_features

    steps = max(1, round(tokens / curve.tokens_per_step))
    warmup = round(curve.train.warmup_steps * steps / curve.train.steps)
    train = SimpleNamespace(**{**vars(curve.train), "steps": steps, "warmup_steps": min(warmup, steps)})
    like = Curve(curve.name, curve.seed, params, np.array([steps]), np.array([tokens]), np.array([1.0]), train,
                 tokens / steps)
    X = curve_features(params, like.tokens_per_step, like.multipliers(), np.array([steps]), momentum)
    mean, lo, hi = predict_interval(fit, X, confidence)
    return {"predicted_loss": float(mean[0]), "lower": float(lo[0]), "upper": float(hi[0]), "steps": steps,
            "schedule": train.schedule, "warmup_steps": train.warmup_steps, "like_run": curve.name}


# ----------------------------------------------------------------------------- Hoffmann's objective


def huber_prediction(points: list, params: float, tokens: float, flops: Optional[float], law: str = "auto",
                     stated_noise: float = 0.003, confidence: float = 0.95, replicates: int = 200,
                     seed: int = 0) -> dict:
    """The law fitted with Hoffmann et al.'s objective (glassroom.ladder.fit: Huber, delta 1e-3, of the
    log residuals; L-BFGS-B from a grid), as papers that follow them (Besiroglu et al. 2024, arXiv
    2404.10102) fit it, and its value at (params, tokens) with the bootstrap's quantiles (fit.bootstrap:
    cases when there are many points). What `--objective huber` runs; foresight.fit_points (least squares
    of log loss) is the default."""
    # lazy: scipy loads only when this runs
    from glassroom.ladder.fit import LAW_C, LAW_ND, bootstrap, fit_law, identifiable_nd, predict_interval

    sizes = sorted({(p.params, p.tokens) for p in points})
    if law == "auto":
        law = "ND" if identifiable_nd([s[0] for s in sizes], [s[1] for s in sizes])[0] else "C"
    elif law == "ND":
        ok, why = identifiable_nd([s[0] for s in sizes], [s[1] for s in sizes])
        if not ok:
            raise GlassroomError(f"--law ND: L(N, D) cannot be fitted on these runs: {why}")
    y = [p.loss for p in points]
    scale = float(np.median([p.flops / (6.0 * p.params * p.tokens) for p in points]))
    C = flops if flops is not None else 6.0 * params * tokens * scale
    if law == "ND":
        X = {"N": [p.params for p in points], "D": [p.tokens for p in points]}
        at = {"N": [params], "D": [tokens]}
        fitted = fit_law(LAW_ND, X, y)
    else:
        X, at = {"C": [p.flops for p in points]}, {"C": [C]}
        fitted = fit_law(LAW_C, X, y)
    bootstrap(fitted, X, y, None, replicates, stated_noise, confidence, seed)
    mean, lo, hi = predict_interval(fitted, at, confidence)
    return {"predicted_loss": float(mean[0]), "lower": float(lo[0]), "upper": float(hi[0]),
            "interval": {"confidence": confidence, "kind": "law",
                         "method": f"{fitted.bootstrap_method} bootstrap quantiles of the law's value"},
            "params": float(params), "tokens": float(tokens), "flops": float(C), "law": fitted.to_json(),
            "objective": "huber", "extrapolation": float(C / max(p.flops for p in points)),
            "noise": {"sigma": stated_noise, "source": "stated", "dof": 0, "sizes": 0, "stated": stated_noise,
                      "used": fitted.bootstrap_method != "cases"}}
