"""The ladder folder on disk and the rungs read back from it.

Layout (what `glassroom ladder run` writes and `ladder fit` / `ladder backtest` read):

  DIR/spec.yaml              the ladder spec the rungs came from (optional: its fit: section
                             and param_count are used; defaults otherwise)
  DIR/ladder.json            optional: {"rungs": [paths relative to DIR]}, the current rungs (written
                             by `ladder run`, whose pipeline keeps older versions beside them)
  DIR/prediction.json        the hero's prediction (ladder run --hero); when the fit failed,
  DIR/no-prediction.json     why, and the way forward, instead (the hero then trains unpredicted)
  DIR/rungs/<name>/          one finished training run per rung, named by model_name (e.g. 1.1M):
      config.yaml            the resolved RunConfig (written by the trainer)
      store.sqlite           its run store: train/loss, train/lr, eval/<domain>/loss|bpb, eval/macro/...
      step.json              optional: the pipeline step's identity (its version is recorded)

A rung is finished when its metric has a value at train.steps. A size (same N and tokens) may be
run with several seeds (the spec's `seeds`; RungData.seed is the run's train.seed): `group_sizes`
gathers them, and the fits use every run while measuring the seed-to-seed noise from each size's
spread (noise.seed_noise). `check_rungs` refuses what no fit can use (docs/ladder.md, "What a fit
refuses"): a final value that is NaN, infinite, zero or negative, two rungs at the same compute
that are not seeds of one size (a copy: same size and same seed, or different sizes), and (unless
allowed) a bigger size whose mean final value is no better than a smaller one's.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import yaml
from scipy import stats

from glassroom import yaml_io
from glassroom.config import build_section, load_yaml, require_positive
from glassroom.errors import ConfigError, GlassroomError
from glassroom.ladder.noise import seed_noise
from glassroom.model.accounting import count_params, flops_per_token
from glassroom.model.config import model_config_from_mapping
from glassroom.observe import run_folder
from glassroom.units import model_name

RUNGS_DIR = "rungs"
# No loss (nats or bits) a fit can mean is this large; such a value is an edited or broken store,
# and near the float limit it overflows the fit's least-squares starts.
LOSS_MAX = 1e6
LOSS_MIN = 1e-6  # likewise below: the bootstrap's perturbed values underflow to zero
SPEC_FILE = "spec.yaml"
LISTING_FILE = "ladder.json"  # {"rungs": [run dirs]}: the current rungs when DIR/rungs/ holds old versions
PREDICTION_FILE = "prediction.json"  # the hero's prediction (ladder run --hero, the demo)
MAX_BOOTSTRAP = 10_000  # replicates; each is a refit
PARAM_COUNTS = ("active", "non_embedding_active")  # the spec's param_count: the N of the laws
NO_PREDICTION_FILE = "no-prediction.json"  # instead of it when the fit failed: {metric, reason, way_forward}
BACKTEST_FILE = "backtest.json"  # the backtest of the ladder's law on its held-out size (ladder backtest)


def rung_dirs(ladder_dir: Path) -> list[Path]:
    """The rungs' run folders: those DIR/ladder.json lists (relative to DIR), else every DIR/rungs/*."""
    listing = ladder_dir / LISTING_FILE
    if listing.exists() and not listing.is_file():
        raise GlassroomError(f"{listing}: not a file; remove it or rerun `glassroom ladder run`")
    if listing.is_file():
        try:
            names = json.loads(listing.read_text())["rungs"]
        except (OSError, ValueError, KeyError, TypeError):
            raise GlassroomError(f"{listing}: unreadable; rerun `glassroom ladder run`") from None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise GlassroomError(f"{listing}: \"rungs\" must be a list of rung folders; rerun `glassroom ladder run`")
        seen = {}
        for name in names:
            key = (ladder_dir / name).resolve()
            if key in seen:
                raise GlassroomError(f"{listing}: lists the rung {seen[key]!r} twice (as {name!r}); each rung once")
            seen[key] = name
        return [ladder_dir / name for name in names]
    root = ladder_dir / RUNGS_DIR
    if not root.is_dir():
        raise GlassroomError(f"{root}: not a folder; expected one folder per rung in it")
    return [p for p in sorted(root.iterdir()) if p.is_dir()]


@dataclass
class RungData:
    name: str
    run_dir: Path
    config: dict  # the resolved RunConfig mapping
    total_params: int
    active_params: int
    params: int  # N as counted by the spec's param_count
    steps: int
    tokens_per_step: int
    tokens: int
    flops: float
    config_sha256: str
    version: Optional[str]
    seed: int = 0  # train.seed of the run (config.yaml); seeds of one size differ only in it

    def _read(self, read):
        from glassroom.observe.store import StoreReader  # lazy: keeps `glassroom --help` fast

        try:
            with StoreReader(self.run_dir) as reader:
                return read(reader)
        except sqlite3.DatabaseError as exc:
            raise GlassroomError(f"{run_folder.store_path(self.run_dir)}: unreadable run store ({exc}); "
                                 "retrain the rung or remove it from the ladder") from None
        except (TypeError, ValueError) as exc:  # a metric row holding text or bytes: an edited store
            raise GlassroomError(f"{run_folder.store_path(self.run_dir)}: a metric value is not a number ({exc}); "
                                 "the store was edited: retrain the rung or remove it from the ladder") from None

    def raw_series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of `metric`, NaN where a value was not finite (stored as null)."""
        return self._read(lambda reader: reader.series(metric))

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self.raw_series(metric)
        keep = np.isfinite(values)
        return steps[keep], values[keep]

    def metrics(self) -> list[str]:
        return self._read(lambda reader: reader.names())

    def final(self, metric: str) -> float:
        """The value at the rung's last step: finite and above zero, else one line naming the rung."""
        steps, values = self.raw_series(metric)
        if len(steps) == 0:
            raise GlassroomError(f"{self.run_dir}: no values of {metric}; is the metric name right?")
        last = steps == self.steps
        if not last.any():
            done = steps[np.isfinite(values)]
            upto = int(done[-1]) if len(done) else int(steps[-1])
            raise GlassroomError(f"{self.run_dir}: {metric} stops at step {upto} of {self.steps}; "
                                 "the rung has not finished (rerun `glassroom ladder run`)")
        value = float(values[last][-1])
        if not math.isfinite(value):
            raise GlassroomError(f"rung {self.name} ({self.run_dir}): final {metric} at step {self.steps} is NaN or "
                                 "infinite (the run diverged); retrain it or remove it from the ladder")
        if value <= 0:
            raise GlassroomError(f"rung {self.name} ({self.run_dir}): final {metric} is {value:g}; a loss must be above "
                                 "zero for a scaling-law fit (is the store edited or the metric not a loss?)")
        if not LOSS_MIN <= value <= LOSS_MAX:
            raise GlassroomError(f"rung {self.name} ({self.run_dir}): final {metric} is {value:g}; a loss outside "
                                 f"[{LOSS_MIN:g}, {LOSS_MAX:g}] is no loss a fit can use (is the store edited or the "
                                 "metric not a loss?)")
        return value

    def check_curve(self, metric: str, skip_fraction: float) -> None:
        """Every value of `metric` from skip_fraction of the run on (what the curve law and a backtest
        use) in [LOSS_MIN, LOSS_MAX]; else one line naming the rung and the step."""
        steps, values = self.series(metric)
        keep = (steps >= max(1, math.ceil(skip_fraction * self.steps))) & (steps <= self.steps)
        bad = keep & ((values < LOSS_MIN) | (values > LOSS_MAX))
        if bad.any():
            raise GlassroomError(f"rung {self.name} ({self.run_dir}): {metric} is {values[bad][0]:g} at step "
                                 f"{steps[bad][0]}; a loss must be in [{LOSS_MIN:g}, {LOSS_MAX:g}] for the "
                                 "curve law (is the store edited?)")

    def final_metrics(self) -> dict[str, float]:
        """Every finite scalar the rung logged at its last step: what the prediction's seal records."""
        def read(reader):
            out = {}
            for name in reader.names():
                steps, values = reader.series(name, self.steps, self.steps)
                if len(steps) and math.isfinite(values[-1]):
                    out[name] = float(values[-1])
            return out

        return self._read(read)

    def law_size(self, size_term: str = "active") -> int:
        """The N a law reads: params (the spec's param_count count), or with "total" that count plus
        the experts a token does not use (total minus active parameters)."""
        return self.params if size_term == "active" else self.params + self.total_params - self.active_params

    @property
    def size(self) -> tuple[int, int]:
        """What makes two runs the same size: N and tokens (their seeds may differ)."""
        return (self.params, self.tokens)

    @property
    def label(self) -> str:
        """The name with the seed, for messages: `209K seed 1`."""
        return f"{self.name} seed {self.seed}"

    def identity(self) -> dict:
        return {"name": self.name, "seed": self.seed, "run_dir": str(self.run_dir), "config_sha256": self.config_sha256,
                "version": self.version, "params": self.params, "tokens": self.tokens, "flops": self.flops}


@dataclass(frozen=True)
class FitSection:
    metric: str = "eval/macro/loss"  # the loss the laws fit and the prediction is about
    irreducible: Union[float, Literal["free"]] = "free"  # E free, or pinned to a number
    noise_floor: float = 0.003  # assumed rung-to-rung (seed) noise, as a fraction of the loss
    bootstrap: int = 200
    seed: int = 0
    confidence: float = 0.95
    skip_fraction: float = 0.1  # curve law: ignore each rung's points before this fraction of its run
    momentum: float = 0.999  # lambda of the annealing area S2 (Tissue et al. 2024)
    allow_nonmonotone: bool = False  # fit rungs whose loss does not fall with compute, marked unreliable
    # the N of the curve law's size term: the spec's param_count count (active), or that plus the
    # experts a token does not use (total; MoE); docs/ladder-foresight.md, "The demo's MoE ladder"
    size_term: Literal["active", "total"] = "active"

    def check(self, path: str) -> None:
        if self.irreducible != "free" and not (math.isfinite(self.irreducible) and self.irreducible >= 0):
            raise ConfigError(f"{path}.irreducible: must be free or a number >= 0, got {self.irreducible}")
        require_positive(path, bootstrap=self.bootstrap)
        if self.seed < 0:
            raise ConfigError(f"{path}.seed: must be zero or more, got {self.seed}")
        if self.bootstrap > MAX_BOOTSTRAP:
            raise ConfigError(f"{path}.bootstrap: at most {MAX_BOOTSTRAP} replicates, got {self.bootstrap}")
        if not (math.isfinite(self.noise_floor) and 0 <= self.noise_floor < 1):
            raise ConfigError(f"{path}.noise_floor: must be zero or more and below 1, got {self.noise_floor}")
        for key, lo, hi in (("confidence", 0, 1), ("skip_fraction", -1e-12, 1), ("momentum", -1e-12, 1)):
            if not lo < getattr(self, key) < hi:
                raise ConfigError(f"{path}.{key}: must be in ({max(lo, 0)}, {hi}), got {getattr(self, key)}")


def read_spec_settings(ladder_dir: str | Path) -> tuple[FitSection, str]:
    """(FitSection, param_count) from DIR/spec.yaml, or the defaults when there is none. Only those
    two settings are read (`ladder run` validated the whole spec when it trained the rungs), so a
    ladder folder is read without the run config and its training code (the web's ladder page)."""
    path = Path(ladder_dir) / SPEC_FILE
    if path.exists() and not path.is_file():
        raise GlassroomError(f"{path}: not a file, expected the ladder's spec (or no spec.yaml for the defaults)")
    if not path.is_file():
        return FitSection(), "active"
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a ladder spec (a mapping of keys)")
    try:
        fit = build_section(FitSection, raw.get("fit"), "fit")
    except GlassroomError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    param_count = raw.get("param_count", "active")
    if param_count not in PARAM_COUNTS:
        raise ConfigError(f"{path}: param_count: expected one of {', '.join(PARAM_COUNTS)}, got {param_count!r}")
    return fit, param_count


def _rung_train(raw: dict[str, Any]) -> dict[str, int]:
    """steps, batch_size, seq_len and seed of a rung's train: section: its size and compute."""
    train = raw.get("train")
    if not isinstance(train, dict):
        raise ConfigError("missing the train: section")
    out = {}
    for key, default in (("steps", None), ("batch_size", None), ("seq_len", None), ("seed", 0)):
        value = train.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise ConfigError(f"train.{key}: expected {'an integer >= 0' if key == 'seed' else 'a positive integer'}, "
                              f"got {value!r}")
        out[key] = value
    return out


def load_rung(run_dir: Path, param_count: str = "active") -> RungData:
    config_path = run_folder.config_path(run_dir)
    if not config_path.is_file() or not run_folder.has_store(run_dir):
        raise GlassroomError(f"{run_dir}: not a rung (needs {run_folder.CONFIG_FILE} and {run_folder.STORE_FILE})")
    try:
        raw = yaml_io.load_file(config_path)
    except (OSError, UnicodeDecodeError) as exc:
        raise GlassroomError(f"{config_path}: unreadable ({getattr(exc, 'strerror', None) or exc})") from None
    except (yaml.YAMLError, yaml_io.YamlLimitError) as exc:
        raise GlassroomError(f"{config_path}: {yaml_io.describe_error(exc)}") from None
    if not isinstance(raw, dict):
        raise GlassroomError(f"{config_path}: expected a run config (a mapping of model:, data:, train:)")
    try:
        model, tc = model_config_from_mapping(raw, str(config_path)), _rung_train(raw)
    except GlassroomError as exc:
        raise GlassroomError(f"{config_path}: {exc}") from None
    counts = count_params(model)
    tokens_per_step = tc["batch_size"] * tc["seq_len"]
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    version = None
    step_file = run_dir / "step.json"
    if step_file.is_file():
        try:
            record = json.loads(step_file.read_text())
        except (OSError, ValueError):
            record = None
        version = record.get("version") if isinstance(record, dict) else None
        version = version if isinstance(version, str) else None
    return RungData(
        name=model_name(counts.total, counts.active), run_dir=run_dir, config=raw, total_params=counts.total,
        active_params=counts.active, params=counts.active if param_count == "active" else counts.non_embedding_active,
        steps=tc["steps"], tokens_per_step=tokens_per_step, tokens=tc["steps"] * tokens_per_step,
        flops=float(flops_per_token(model, tc["seq_len"])) * tc["steps"] * tokens_per_step,
        config_sha256=hashlib.sha256(canonical.encode()).hexdigest(), version=version, seed=int(tc["seed"]))


def load_rungs(ladder_dir: str | Path, param_count: Optional[str] = None) -> list[RungData]:
    """Every rung under DIR/rungs/, smallest compute first."""
    ladder_dir = Path(ladder_dir)
    if not ladder_dir.is_dir():
        raise GlassroomError(f"{ladder_dir}: {'is a file, expected' if ladder_dir.exists() else 'no such'} ladder folder")
    root = ladder_dir / RUNGS_DIR
    if not root.is_dir() and not (ladder_dir / LISTING_FILE).is_file():
        raise GlassroomError(f"{ladder_dir}: no {RUNGS_DIR}/ folder; run `glassroom ladder run SPEC --out {ladder_dir}` first")
    if param_count is None:
        param_count = read_spec_settings(ladder_dir)[1]
    rungs = [load_rung(p, param_count) for p in rung_dirs(ladder_dir)]
    if len(rungs) < 2:
        raise GlassroomError(f"{root}: {len(rungs)} rung(s); a fit needs at least two finished rungs")
    return sorted(rungs, key=lambda r: (r.flops, r.seed))


def group_sizes(rungs: list[RungData]) -> list[list[RungData]]:
    """The runs grouped by size (same N and tokens), smallest compute first; within a size, by seed."""
    groups: dict[tuple[int, int], list[RungData]] = {}
    for r in rungs:
        groups.setdefault(r.size, []).append(r)
    return [sorted(g, key=lambda r: r.seed) for g in sorted(groups.values(), key=lambda g: (g[0].flops, g[0].size))]


def finals_by_size(rungs: list[RungData], metric: str) -> list[list[float]]:
    """Each size's final values of `metric` (one per seed), in group_sizes' order."""
    return [[r.final(metric) for r in group] for group in group_sizes(rungs)]


def measure_noise(rungs: list[RungData], metric: str, stated: float):
    """noise.seed_noise over the sizes' final values: measured when some size has two seeds or more,
    else the stated value (fit.noise_floor)."""
    return seed_noise(finals_by_size(rungs, metric), stated)


def check_rungs(rungs: list[RungData], metric: str, irreducible="free", allow_nonmonotone: bool = False,
                noise_floor: float = 0.003, notes: Optional[list] = None) -> list[str]:
    """Refuse rungs no fit can use, as one line naming the rungs; returns warnings for what was
    allowed (non-monotone rungs with allow_nonmonotone). `rungs` sorted by compute, as load_rungs.

    A bigger size whose mean final value is no better than a smaller one's is judged against the
    seed noise (measured from repeated seeds, else `noise_floor`, as the fits use it): a reversal
    the noise explains (monotone_check) is appended to `notes` and the fit goes on; only one beyond
    it is refused (or, allowed, a warning that makes the fit unreliable)."""
    finals = [r.final(metric) for r in rungs]  # NaN, infinite, zero, negative, unfinished: one line each
    for a, b in zip(rungs, rungs[1:]):
        if math.isclose(a.flops, b.flops, rel_tol=1e-9) and a.size != b.size:
            raise GlassroomError(f"rungs {a.name} ({a.run_dir}) and {b.name} ({b.run_dir}) have the same compute "
                                 f"({a.flops:.4g} FLOPs): a ladder's rungs must differ in size; remove the copy")
    groups = group_sizes(rungs)
    if len(groups) < 2:
        raise GlassroomError(f"rungs: {len(rungs)} run(s) of one size ({rungs[0].name}); a fit needs at least two "
                             "sizes (seeds of one size measure the noise, not the law)")
    for group in groups:
        seen: dict[int, RungData] = {}
        for r in group:
            if r.seed in seen:
                a = seen[r.seed]
                raise GlassroomError(f"rungs {a.name} ({a.run_dir}) and {r.name} ({r.run_dir}) have the same compute "
                                     f"({a.flops:.4g} FLOPs) and the same seed ({r.seed}): a copy, not a second seed; "
                                     "remove it (repeat a size with the spec's seeds: K)")
            seen[r.seed] = r
    by_run = {id(r): f for r, f in zip(rungs, finals)}
    means = [float(np.mean([by_run[id(r)] for r in g])) for g in groups]
    warnings = []
    for g in groups:
        if len(g) >= 2 and len({by_run[id(r)] for r in g}) == 1:
            warnings.append(f"the {len(g)} seeds of {g[0].name} end at exactly the same {metric} "
                            f"({by_run[id(g[0])]:.6g}): copies with an edited seed? the measured seed noise is zero")
    if irreducible != "free":
        low = min(range(len(rungs)), key=lambda i: finals[i])
        if finals[low] <= float(irreducible):
            raise GlassroomError(f"fit.irreducible {float(irreducible):g} is not below rung {rungs[low].name}'s final "
                                 f"{metric} {finals[low]:.4g}: the law cannot reach it; lower fit.irreducible or use free")
    def label(i: int) -> str:
        g = groups[i]
        return f"{g[0].name} ({means[i]:.4g}" + (f", mean of {len(g)} seeds)" if len(g) > 1 else ")")

    noise = seed_noise([[by_run[id(r)] for r in g] for g in groups], noise_floor)
    worse, explained = [], []
    for j in range(1, len(groups)):
        i = min(range(j), key=lambda k: means[k])
        if means[j] >= means[i]:
            verdict = monotone_check(means[i], len(groups[i]), means[j], len(groups[j]), noise)
            text = f"{label(j)} no better than the smaller {label(i)}: {verdict['text']}"
            (explained if verdict["explained"] else worse).append(text)
    if notes is not None:
        notes.extend(f"final {metric} does not fall with compute, within the seed noise: {t}" for t in explained)
    if not worse:
        return warnings
    what = f"final {metric} does not fall with compute beyond the seed noise: " + "; ".join(worse)
    if not allow_nonmonotone:
        raise GlassroomError(f"{what}; retrain or remove those rungs, or pass --allow-nonmonotone (spec: "
                             "fit.allow_nonmonotone: true) to fit anyway, marked unreliable")
    return warnings + [f"{what} (allowed by --allow-nonmonotone): the fit is unreliable"]


MONOTONE_LEVEL = 0.99  # one-sided: a reversal is refused only when the noise explains it less often than 1%


def monotone_check(smaller: float, k_smaller: int, bigger: float, k_bigger: int, noise) -> dict:
    """Can seed noise explain a bigger size's mean final value `bigger` (k_bigger seeds) being no
    better than a smaller size's `smaller` (k_smaller seeds)? The gap in log loss is compared with
    the largest gap two means of that many runs show at MONOTONE_LEVEL when the sizes are equal:
    sigma * sqrt(1/k1 + 1/k2) times Student's t (noise.dof degrees of freedom; the normal quantile
    for a stated sigma). {explained, gap, limit, text}."""
    gap = math.log(bigger) - math.log(smaller)
    quantile = float(stats.t.ppf(MONOTONE_LEVEL, noise.dof)) if noise.source == "measured" and noise.dof > 0 \
        else float(stats.norm.ppf(MONOTONE_LEVEL))
    limit = quantile * noise.sigma * math.sqrt(1.0 / k_smaller + 1.0 / k_bigger)
    source = (f"measured, {noise.dof} dof" if noise.source == "measured" else "stated fit.noise_floor")
    text = (f"{gap:.2%} worse; seed noise {noise.sigma:.2%} ({source}) explains up to {limit:.2%} "
            f"at {MONOTONE_LEVEL:.0%}")
    return {"explained": gap <= limit, "gap": gap, "limit": limit, "text": text}
